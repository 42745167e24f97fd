// Package tools pins the outside load generators the benchmarks run as
// separate processes, in a module of their own so that their dependencies
// stay out of the server's module:
//
//	go build -C bench/tools -o ../../out/bin/ghz github.com/bojand/ghz/cmd/ghz
package tools
