// Package depcheck holds the module's dependency rules as a test, in the
// manner of go-containerregistry's internal/depcheck: the layering that
// docs/architecture.md describes is checked against `go list -deps` on
// every test run, so an import that breaks it fails instead of going
// unnoticed. The rules live in depcheck_test.go; the package has no other
// code.
package depcheck
