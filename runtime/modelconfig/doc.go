// Package modelconfig holds the model configuration schema (model_config.proto,
// with Triton's message and field names and numbers) and its generated Go
// code, plus the helpers the serving core needs around it: parsing
// config.pbtxt with positioned errors, converting data types to their wire
// names, and rendering a config as Triton-style JSON.
//
// Regenerate the Go code with gen.sh after editing any .proto file here.
package modelconfig
