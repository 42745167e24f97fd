package repository

// reservedParameters are request parameters the server consumes itself
// (Triton turns them into properties of the request or of its response
// handling), so they are not handed to the model as parameters.
var reservedParameters = map[string]bool{
	"sequence_id":                        true,
	"sequence_start":                     true,
	"sequence_end":                       true,
	"priority":                           true,
	"timeout":                            true,
	"binary_data_output":                 true,
	"triton_enable_empty_final_response": true,
}

// ReservedParameter reports whether the request parameter name is one the
// server consumes (sequence ids and flags, priority, timeout, response
// formatting) rather than one for the model.
func ReservedParameter(name string) bool { return reservedParameters[name] }
