//go:build !cgo || !libtorch

package torch

import (
	"context"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Available reports whether this build can run TorchScript models.
const Available = false

func notBuilt() error {
	return &backend.Error{Code: backend.Unavailable, Msg: NotBuiltMessage}
}

// LoadLibrary fails: this build has no libtorch runtime.
func LoadLibrary(ctx context.Context, path string) error { return notBuilt() }

// SetInterOpThreads fails: this build has no libtorch runtime.
func SetInterOpThreads(n int) error { return notBuilt() }

// LibraryPath is "" in a build without the libtorch runtime.
func LibraryPath() string { return "" }

// BLAS is "" in a build without the libtorch runtime.
func BLAS() (name string, tuned bool) { return "", false }

// Module is one loaded TorchScript module; this build cannot create one.
type Module struct{}

// LoadModule fails: this build has no libtorch runtime.
func LoadModule(opts ModuleOptions) (*Module, error) { return nil, notBuilt() }

// InputNames are forward()'s argument names, self excluded.
func (m *Module) InputNames() []string { return nil }

// NumRequiredInputs is how many leading forward() arguments have no default.
func (m *Module) NumRequiredInputs() int { return 0 }

// NumOutputs is the output count forward()'s return type declares.
func (m *Module) NumOutputs() int { return -1 }

// Close does nothing.
func (m *Module) Close() error { return nil }

// Forward fails: this build has no libtorch runtime.
func (m *Module) Forward(inputs []backend.Tensor) ([]backend.Tensor, error) {
	return nil, notBuilt()
}
