//go:build cgo && libtorch

package torch

/*
#cgo CFLAGS: -I${SRCDIR}/../csrc/include
#cgo LDFLAGS: -ltbtorch
#include <stdlib.h>
#include <string.h>
#include "tbtorch.h"

// Out-parameters of one tbt_forward, kept in C memory so that a forward
// passes no Go pointers besides the pinned input buffers. res is the
// module's own reusable result.
typedef struct {
	tbt_result *res;
	const tbt_tensor_view *views;
	int32_t n_views;
	char *err;
} tbt_call;

static tbt_status tbt_call_forward(tbt_module *m, const tbt_tensor_in *in, int32_t n, tbt_call *c) {
	c->res = NULL;
	c->views = NULL;
	c->n_views = 0;
	c->err = NULL;
	return tbt_forward(m, in, n, &c->res, &c->views, &c->n_views, &c->err);
}
*/
import "C"

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Available reports whether this build can run TorchScript models.
const Available = true

// Compile-time checks that plan.go's codes equal tbtorch.h's enum: an array
// length below zero does not compile.
var (
	_ [C.TBT_BOOL - codeBool]struct{}
	_ [codeBool - C.TBT_BOOL]struct{}
	_ [C.TBT_UINT8 - codeUint8]struct{}
	_ [codeUint8 - C.TBT_UINT8]struct{}
	_ [C.TBT_UINT16 - codeUint16]struct{}
	_ [codeUint16 - C.TBT_UINT16]struct{}
	_ [C.TBT_UINT32 - codeUint32]struct{}
	_ [codeUint32 - C.TBT_UINT32]struct{}
	_ [C.TBT_UINT64 - codeUint64]struct{}
	_ [codeUint64 - C.TBT_UINT64]struct{}
	_ [C.TBT_INT8 - codeInt8]struct{}
	_ [codeInt8 - C.TBT_INT8]struct{}
	_ [C.TBT_INT16 - codeInt16]struct{}
	_ [codeInt16 - C.TBT_INT16]struct{}
	_ [C.TBT_INT32 - codeInt32]struct{}
	_ [codeInt32 - C.TBT_INT32]struct{}
	_ [C.TBT_INT64 - codeInt64]struct{}
	_ [codeInt64 - C.TBT_INT64]struct{}
	_ [C.TBT_FP16 - codeFP16]struct{}
	_ [codeFP16 - C.TBT_FP16]struct{}
	_ [C.TBT_FP32 - codeFP32]struct{}
	_ [codeFP32 - C.TBT_FP32]struct{}
	_ [C.TBT_FP64 - codeFP64]struct{}
	_ [codeFP64 - C.TBT_FP64]struct{}
	_ [C.TBT_BF16 - codeBF16]struct{}
	_ [codeBF16 - C.TBT_BF16]struct{}
	_ [C.TBT_BYTES - codeBytes]struct{}
	_ [codeBytes - C.TBT_BYTES]struct{}
)

// statusError turns a failed tbt_status and its message into a
// *backend.Error, freeing the C string.
func statusError(st C.tbt_status, msg *C.char) error {
	text := "libtbtorch: unknown error"
	if msg != nil {
		text = C.GoString(msg)
		C.tbt_string_free(msg)
	}
	code := backend.Internal
	switch st {
	case C.TBT_ERR_INVALID_ARG:
		code = backend.InvalidArg
	case C.TBT_ERR_UNSUPPORTED:
		code = backend.Unsupported
	case C.TBT_ERR_NOT_FOUND:
		code = backend.NotFound
	}
	return &backend.Error{Code: code, Msg: text}
}

// LoadLibrary dlopens a custom-op library (RTLD_NOW|RTLD_GLOBAL) so that
// modules loaded afterwards can use its operators. The library stays loaded
// for the life of the process; loading a path again does nothing. Errors
// name the path and the loader's message.
//
// A library whose static initializers throw would abort the process from
// inside dlopen, so when tbtorch-probe is installed beside libtbtorch.so the
// library is first loaded there, in a child process, after the libraries
// this process already has.
func LoadLibrary(ctx context.Context, path string) error {
	loaded := loadedLibraries()
	if slices.Contains(loaded, path) {
		return nil
	}
	if err := probeLibrary(ctx, loaded, path); err != nil {
		return err
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg *C.char
	if st := C.tbt_load_library(cpath, &msg); st != C.TBT_OK {
		return statusError(st, msg)
	}
	return nil
}

func loadedLibraries() []string {
	n := int(C.tbt_loaded_library_count())
	libs := make([]string, 0, n)
	for i := 0; i < n; i++ {
		if p := C.tbt_loaded_library(C.int32_t(i)); p != nil {
			libs = append(libs, C.GoString(p))
		}
	}
	return libs
}

// ProbeName is the helper program probeLibrary runs, installed beside
// libtbtorch.so.
const ProbeName = "tbtorch-probe"

// probeLibrary loads loaded..., path in a child process (tbtorch-probe)
// and turns its failure into an error naming path. Without the probe it does
// nothing.
func probeLibrary(ctx context.Context, loaded []string, path string) error {
	lib := LibraryPath()
	if lib == "" {
		return nil
	}
	probe := filepath.Join(filepath.Dir(lib), ProbeName)
	if _, err := os.Stat(probe); err != nil {
		return nil
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, probe, append(loaded, path)...)
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("probing op library %s: %w", path, ctx.Err())
	}
	reason := strings.TrimSpace(stderr.String())
	// The probe and dlerror both lead with the path; say it once.
	for strings.HasPrefix(reason, path+": ") {
		reason = strings.TrimPrefix(reason, path+": ")
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return backend.Errorf(backend.Internal, "loading op library %s: running %s: %w", path, probe, err)
	}
	if reason == "" {
		reason = exit.String() // killed by a signal, for example
	}
	code := backend.InvalidArg
	if exit.ExitCode() == 2 { // dlopen itself failed
		code = backend.NotFound
	}
	return backend.Errorf(code, "loading op library %s: %s", path, reason)
}

// SetInterOpThreads sets libtorch's process-wide inter-op pool size. It
// succeeds again for the size already in effect; asking for another size
// later fails with a backend.Unsupported error stating the size in effect.
func SetInterOpThreads(n int) error {
	var msg *C.char
	var inEffect C.int32_t
	if st := C.tbt_set_inter_op_threads(C.int32_t(n), &inEffect, &msg); st != C.TBT_OK {
		return statusError(st, msg)
	}
	return nil
}

// LibraryPath is the file libtbtorch.so was loaded from, "" when unknown.
func LibraryPath() string {
	p := C.tbt_library_path()
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// BLAS names the BLAS libtorch's matrix products run on and says whether
// it is one known to be tuned (OpenBLAS, BLIS, MKL); "" when none is
// loaded.
func BLAS() (name string, tuned bool) {
	var t C.int32_t
	p := C.tbt_blas(&t)
	if p == nil {
		return "", false
	}
	return C.GoString(p), t == 1
}

// Module is one loaded TorchScript module. Its methods are safe for
// concurrent use but run one forward at a time.
type Module struct {
	mu       sync.Mutex
	ptr      *C.tbt_module
	names    []string
	required int
	outputs  int

	// C memory reused by every Forward (see tbt_call in the preamble).
	call      *C.tbt_call
	ins       *C.tbt_tensor_in
	insCap    int
	shapes    *C.int64_t
	shapesCap int
	pin       runtime.Pinner
	aligned   [][]uint64 // per input: an aligned copy when the caller's buffer is not
}

// LoadModule loads a TorchScript file on the CPU.
func LoadModule(opts ModuleOptions) (*Module, error) {
	cpath := C.CString(opts.Path)
	defer C.free(unsafe.Pointer(cpath))
	copts := C.tbt_load_options{path: cpath, intra_op_threads: C.int32_t(opts.IntraOpThreads)}
	if opts.DisableOptimizedExecution {
		copts.disable_optimized_execution = 1
	}
	if opts.DisableInferenceMode {
		copts.disable_inference_mode = 1
	}
	var ptr *C.tbt_module
	var msg *C.char
	if st := C.tbt_module_load(&copts, &ptr, &msg); st != C.TBT_OK {
		return nil, statusError(st, msg)
	}
	m := &Module{
		ptr:      ptr,
		required: int(C.tbt_module_num_required_inputs(ptr)),
		outputs:  int(C.tbt_module_num_outputs(ptr)),
		call:     (*C.tbt_call)(C.calloc(1, C.size_t(unsafe.Sizeof(C.tbt_call{})))),
	}
	n := int(C.tbt_module_num_inputs(ptr))
	for i := 0; i < n; i++ {
		m.names = append(m.names, C.GoString(C.tbt_module_input_name(ptr, C.int32_t(i))))
	}
	return m, nil
}

// InputNames are forward()'s argument names, self excluded.
func (m *Module) InputNames() []string { return append([]string(nil), m.names...) }

// NumRequiredInputs is how many leading forward() arguments have no default.
func (m *Module) NumRequiredInputs() int { return m.required }

// NumOutputs is the output count forward()'s return type declares, -1 when
// it does not say (for example List[Tensor]).
func (m *Module) NumOutputs() int { return m.outputs }

// Close frees the module; calling it again is harmless.
func (m *Module) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ptr == nil {
		return nil
	}
	C.tbt_module_free(m.ptr)
	m.ptr = nil
	C.free(unsafe.Pointer(m.call))
	C.free(unsafe.Pointer(m.ins))
	C.free(unsafe.Pointer(m.shapes))
	m.call, m.ins, m.shapes = nil, nil, nil
	m.insCap, m.shapesCap = 0, 0
	return nil
}

// growC makes *p a C array of at least n elements of size elem.
func growC(p *unsafe.Pointer, capacity *int, n int, elem uintptr) {
	if n <= *capacity {
		return
	}
	c := max(n, 2**capacity, 4)
	q := C.realloc(*p, C.size_t(uintptr(c)*elem))
	if q == nil {
		panic("libtbtorch: out of C memory")
	}
	// realloc leaves the new tail uninitialized; Forward relies on unused
	// slots holding no pointers.
	C.memset(unsafe.Add(q, uintptr(*capacity)*elem), 0, C.size_t(uintptr(c-*capacity)*elem))
	*p, *capacity = q, c
}

// releaseOutputsAbove is the output size (bytes, all outputs of a forward)
// above which Forward frees libtorch's copy at once instead of at the next
// forward.
const releaseOutputsAbove = 1 << 20

// setData stores a pinned Go pointer into C memory. It is a plain word
// store: a pointer-typed store would run the GC's write barrier, which
// shades the slot's old value, and C memory is the one place where that
// old value may be a stale pointer to an object already freed (the runtime
// then dies with "found pointer to free object"). Forward also clears the
// slots before unpinning, so no stale pointer outlives a call.
func setData(in *C.tbt_tensor_in, p unsafe.Pointer) {
	*(*uintptr)(unsafe.Pointer(&in.data)) = uintptr(p)
}

// Forward runs forward() with inputs in positional order. Input data is
// not copied unless a buffer is misaligned for its element type; outputs
// are copied once into fresh Go memory. Names of the returned tensors are
// empty.
func (m *Module) Forward(inputs []backend.Tensor) ([]backend.Tensor, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ptr == nil {
		return nil, backend.Errorf(backend.Unavailable, "libtorch module is closed")
	}
	ndims := 0
	for i := range inputs {
		ndims += len(inputs[i].Shape)
	}
	insPtr := unsafe.Pointer(m.ins)
	growC(&insPtr, &m.insCap, len(inputs), unsafe.Sizeof(C.tbt_tensor_in{}))
	m.ins = (*C.tbt_tensor_in)(insPtr)
	shapesPtr := unsafe.Pointer(m.shapes)
	growC(&shapesPtr, &m.shapesCap, ndims, unsafe.Sizeof(C.int64_t(0)))
	m.shapes = (*C.int64_t)(shapesPtr)
	for len(m.aligned) < len(inputs) {
		m.aligned = append(m.aligned, nil)
	}

	ins := unsafe.Slice(m.ins, m.insCap)
	shapes := unsafe.Slice(m.shapes, m.shapesCap)
	defer m.pin.Unpin()
	// Runs before Unpin: the C array must not keep Go pointers past the call.
	defer func() {
		for i := range inputs {
			setData(&ins[i], nil)
		}
	}()
	off := 0
	for i := range inputs {
		t := &inputs[i]
		code := dtypeCode(t.DataType)
		if code == 0 {
			return nil, backend.Errorf(backend.Unsupported, "input %d: data type %q has no libtorch equivalent", i, t.DataType)
		}
		for k, d := range t.Shape {
			shapes[off+k] = C.int64_t(d)
		}
		in := &ins[i]
		in.dtype = C.int32_t(code)
		in.ndim = C.int32_t(len(t.Shape))
		in.shape = nil // a scalar has no dimensions
		if len(t.Shape) > 0 {
			in.shape = &shapes[off]
		}
		in.nbytes = C.int64_t(len(t.Data))
		off += len(t.Shape)
		if len(t.Data) > 0 {
			p := m.inputBuffer(i, t)
			m.pin.Pin(p)
			setData(in, unsafe.Pointer(p))
		}
	}
	st := C.tbt_call_forward(m.ptr, m.ins, C.int32_t(len(inputs)), m.call)
	if st != C.TBT_OK {
		return nil, statusError(st, m.call.err)
	}
	// The outputs stay with the module until the next forward, which saves
	// a cgo call per forward; large ones are released right away so that an
	// idle instance does not hold them.
	views := unsafe.Slice(m.call.views, int(m.call.n_views))
	outs := make([]backend.Tensor, len(views))
	held := 0
	defer func() {
		if held > releaseOutputsAbove {
			C.tbt_result_release(m.ptr)
		}
	}()
	for i := range views {
		v := &views[i]
		dt := dtypeFromCode(int32(v.dtype))
		if dt == "" {
			return nil, backend.Errorf(backend.Internal, "output %d: unknown element type code %d", i, v.dtype)
		}
		shape := make([]int64, int(v.ndim))
		for k, d := range unsafe.Slice(v.shape, int(v.ndim)) {
			shape[k] = int64(d)
		}
		held += int(v.nbytes)
		data := make([]byte, int(v.nbytes))
		if len(data) > 0 {
			copy(data, unsafe.Slice((*byte)(v.data), len(data)))
		}
		outs[i] = backend.Tensor{DataType: dt, Shape: shape, Data: data}
	}
	// Outputs may alias inputs (forward() returning an argument); they were
	// copied above, while the inputs were still pinned and referenced.
	runtime.KeepAlive(inputs)
	return outs, nil
}

// inputBuffer returns the address libtorch should read input i from: the
// caller's buffer, or an 8-byte-aligned copy when that buffer is not aligned
// for its element type (request bodies are sliced at arbitrary offsets, and
// libtorch's kernels may assume natural alignment).
func (m *Module) inputBuffer(i int, t *backend.Tensor) *byte {
	p := &t.Data[0]
	// BYTES is read byte by byte (into a List[str]): any address will do.
	if t.DataType == backend.Bytes || uintptr(unsafe.Pointer(p))%uintptr(t.DataType.Size()) == 0 {
		return p
	}
	words := (len(t.Data) + 7) / 8
	if cap(m.aligned[i]) < words {
		m.aligned[i] = make([]uint64, words)
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&m.aligned[i][:words][0])), len(t.Data))
	copy(buf, t.Data)
	return &buf[0]
}

// heldInputPointer returns the first non-nil data pointer left in the C
// argument array (tests check that none survives a Forward).
func (m *Module) heldInputPointer() unsafe.Pointer {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, in := range unsafe.Slice(m.ins, m.insCap) {
		if in.data != nil {
			return in.data
		}
	}
	return nil
}
