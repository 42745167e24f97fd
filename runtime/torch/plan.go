package torch

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Keys read from ModelSpec.Parameters and ModelSpec.BackendConfig.
const (
	ParamIntraOpThreads = "INTRA_OP_THREAD_COUNT"
	ParamInterOpThreads = "INTER_OP_THREAD_COUNT"
	// ParamDisableOptimizedExecution ("true"/"false", default false) turns
	// off the TorchScript graph executor's optimizations for the model.
	ParamDisableOptimizedExecution = "DISABLE_OPTIMIZED_EXECUTION"
	// ParamInferenceMode ("true"/"false", default true) chooses
	// c10::InferenceMode over NoGradGuard during forward.
	ParamInferenceMode = "INFERENCE_MODE"
	// ParamExecuteTimeout (seconds, default none) bounds one forward():
	// past it the batch fails and the instance, whose thread cannot be
	// interrupted, is retired: it answers every later request with an
	// error and reports itself unhealthy, so the model is not ready until
	// it is reloaded.
	ParamExecuteTimeout = "EXECUTE_TIMEOUT_SECS"
	// ConfigOpLibraries is the --backend-config=pytorch,<key>=<list> key
	// naming op libraries every pytorch model needs, separated by
	// filepath.ListSeparator.
	ConfigOpLibraries = "op-libraries"
	// DefaultFilename is the model file when the spec names none.
	DefaultFilename = "model.pt"
)

// Element type codes; they must equal tbt_dtype in tbtorch.h (the cgo file
// checks this at compile time).
const (
	codeBool   = 1
	codeUint8  = 2
	codeUint16 = 3
	codeUint32 = 4
	codeUint64 = 5
	codeInt8   = 6
	codeInt16  = 7
	codeInt32  = 8
	codeInt64  = 9
	codeFP16   = 10
	codeFP32   = 11
	codeFP64   = 12
	codeBF16   = 13
	codeBytes  = 14
)

// dtypeCode returns the tbt_dtype code for d, or 0 when d has none
// (unknown names).
func dtypeCode(d backend.DataType) int32 {
	switch d {
	case backend.Bool:
		return codeBool
	case backend.Uint8:
		return codeUint8
	case backend.Uint16:
		return codeUint16
	case backend.Uint32:
		return codeUint32
	case backend.Uint64:
		return codeUint64
	case backend.Int8:
		return codeInt8
	case backend.Int16:
		return codeInt16
	case backend.Int32:
		return codeInt32
	case backend.Int64:
		return codeInt64
	case backend.FP16:
		return codeFP16
	case backend.FP32:
		return codeFP32
	case backend.FP64:
		return codeFP64
	case backend.BF16:
		return codeBF16
	case backend.Bytes:
		return codeBytes
	}
	return 0
}

// dtypeFromCode is the inverse of dtypeCode; "" for an unknown code.
func dtypeFromCode(c int32) backend.DataType {
	switch c {
	case codeBool:
		return backend.Bool
	case codeUint8:
		return backend.Uint8
	case codeUint16:
		return backend.Uint16
	case codeUint32:
		return backend.Uint32
	case codeUint64:
		return backend.Uint64
	case codeInt8:
		return backend.Int8
	case codeInt16:
		return backend.Int16
	case codeInt32:
		return backend.Int32
	case codeInt64:
		return backend.Int64
	case codeFP16:
		return backend.FP16
	case codeFP32:
		return backend.FP32
	case codeFP64:
		return backend.FP64
	case codeBF16:
		return backend.BF16
	case codeBytes:
		return backend.Bytes
	}
	return ""
}

// checkSupported reports whether libtorch 1.13 can hold tensors of type d.
func checkSupported(d backend.DataType) error {
	switch d {
	case backend.Uint16, backend.Uint32, backend.Uint64:
		return fmt.Errorf("data type %s is not supported: libtorch 1.13 has no unsigned 16/32/64-bit tensors", d)
	}
	if dtypeCode(d) == 0 {
		return fmt.Errorf("unknown data type %q", d)
	}
	return nil
}

// indexSuffix splits "<name>__<index>" and reports the index.
func indexSuffix(name string) (int, bool) {
	i := strings.LastIndex(name, "__")
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(name[i+2:])
	if err != nil || n < 0 || name[i+2:] != strconv.Itoa(n) {
		return 0, false
	}
	return n, true
}

// controlIndex is the index of a control input's name as Triton's
// libtorch backend reads it: what follows the first "__", digits only.
func controlIndex(name string) (int, bool) {
	i := strings.Index(name, "__")
	if i < 0 {
		return 0, false
	}
	digits := name[i+2:]
	for _, r := range digits {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	if digits == "" {
		return 0, true // Triton reads "" as 0
	}
	n, err := strconv.Atoi(digits)
	if err != nil {
		return 0, false
	}
	return n, true
}

// indexPositions maps names to the indices of their `__<index>` suffixes.
// ok is false when some name has no suffix; err is set when every name has
// one but they are not exactly 0..limit-1 without repeats (limit < 0: any
// distinct indices).
func indexPositions(names []string, limit int) (pos []int, ok bool, err error) {
	pos = make([]int, len(names))
	seen := map[int]string{}
	for i, n := range names {
		idx, has := indexSuffix(n)
		if !has {
			return nil, false, nil
		}
		if prev, dup := seen[idx]; dup {
			return nil, true, fmt.Errorf("%q and %q both claim position %d", prev, n, idx)
		}
		if limit >= 0 && idx >= limit {
			return nil, true, fmt.Errorf("%q names position %d but there are only %d", n, idx, limit)
		}
		seen[idx] = n
		pos[i] = idx
	}
	return pos, true, nil
}

// inputPositions decides which forward() argument each config input feeds.
// forwardNames are forward()'s argument names (self excluded); required is
// how many of them have no default. pinned maps inputs (by index) to the
// position they take whatever the others' rule (the sequence batcher's
// control inputs). The result, indexed by config input, covers positions
// 0..len(inputs)-1 exactly, since arguments are passed positionally.
func inputPositions(inputs []backend.TensorSpec, forwardNames []string, required int, pinned map[int]int) ([]int, error) {
	n := len(inputs)
	if n < required || n > len(forwardNames) {
		want := strconv.Itoa(len(forwardNames))
		if required != len(forwardNames) {
			want = fmt.Sprintf("%d to %d", required, len(forwardNames))
		}
		return nil, fmt.Errorf("config declares %d inputs but the model's forward() takes %s (%s)",
			n, want, strings.Join(forwardNames, ", "))
	}
	names := make([]string, n)
	for i, in := range inputs {
		names[i] = in.Name
	}
	claimed := map[int]string{}
	for i, p := range pinned {
		if prev, dup := claimed[p]; dup {
			return nil, fmt.Errorf("inputs: %q and %q both claim position %d", prev, names[i], p)
		}
		if p >= n {
			return nil, fmt.Errorf("inputs: %q names position %d but there are only %d", names[i], p, n)
		}
		claimed[p] = names[i]
	}
	pos, ok, err := indexPositions(names, n)
	if err != nil {
		return nil, fmt.Errorf("inputs: %w", err)
	}
	if ok {
		return pos, nil
	}
	// Names equal to forward()'s own argument names.
	byName := map[string]int{}
	for i, fn := range forwardNames {
		byName[fn] = i
	}
	pos = make([]int, n)
	taken := make([]bool, n)
	matched := true
	for i, name := range names {
		p, has := pinned[i]
		if !has {
			p, has = byName[name]
		}
		if !has || p >= n || taken[p] {
			matched = false
			break
		}
		pos[i], taken[p] = p, true
	}
	if matched {
		return pos, nil
	}
	// Config order, in the positions the pinned inputs leave free.
	next := 0
	for i := range pos {
		if p, has := pinned[i]; has {
			pos[i] = p
			continue
		}
		for claimed[next] != "" {
			next++
		}
		pos[i] = next
		next++
	}
	return pos, nil
}

// outputPositions decides which element of forward()'s result each config
// output is. declared is the module's output count, -1 when unknown.
func outputPositions(outputs []backend.TensorSpec, declared int) ([]int, error) {
	if declared >= 0 && declared != len(outputs) {
		return nil, fmt.Errorf("config declares %d outputs but the model's forward() returns %d", len(outputs), declared)
	}
	names := make([]string, len(outputs))
	for i, o := range outputs {
		names[i] = o.Name
	}
	pos, ok, err := indexPositions(names, declared)
	if err != nil {
		return nil, fmt.Errorf("outputs: %w", err)
	}
	if ok {
		return pos, nil
	}
	pos = make([]int, len(outputs))
	for i := range pos {
		pos[i] = i
	}
	return pos, nil
}

// threadParam reads a positive integer model parameter; 0 when absent.
func threadParam(params map[string]string, key string) (int, error) {
	v, ok := params[key]
	if !ok || strings.TrimSpace(v) == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("parameter %s: want a positive integer, got %q", key, v)
	}
	return n, nil
}

// secondsParam reads a positive number of seconds; 0 when absent.
func secondsParam(params map[string]string, key string) (time.Duration, error) {
	v, ok := params[key]
	if !ok || strings.TrimSpace(v) == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f <= 0 || f > 1e6 {
		return 0, fmt.Errorf("parameter %s: want a positive number of seconds, got %q", key, v)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// boolParam reads a "true"/"false" model parameter (any case, also 1/0);
// def when absent.
func boolParam(params map[string]string, key string, def bool) (bool, error) {
	v, ok := params[key]
	if !ok || strings.TrimSpace(v) == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(strings.ToLower(strings.TrimSpace(v)))
	if err != nil {
		return false, fmt.Errorf("parameter %s: want true or false, got %q", key, v)
	}
	return b, nil
}

// opLibraries lists the libraries to load before the model: server-wide
// ones first, then the model's own, without repeats.
func opLibraries(spec *backend.ModelSpec) []string {
	var libs []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			libs = append(libs, p)
		}
	}
	for _, p := range filepath.SplitList(spec.BackendConfig[ConfigOpLibraries]) {
		add(strings.TrimSpace(p))
	}
	for _, p := range spec.OpLibraries {
		add(p)
	}
	return libs
}

// modelPath is the TorchScript file of spec's version.
func modelPath(spec *backend.ModelSpec) string {
	name := spec.Filename
	if name == "" {
		name = DefaultFilename
	}
	dir := spec.VersionDir
	if dir == "" {
		dir = filepath.Join(spec.ModelDir, strconv.FormatInt(spec.Version, 10))
	}
	return filepath.Join(dir, name)
}

// NotBuiltMessage is the message every load fails with in a build without the
// libtorch runtime.
const NotBuiltMessage = "tritonserver was built without the libtorch runtime (cgo and the libtorch build tag are required)"

// ModuleOptions configure LoadModule.
type ModuleOptions struct {
	// Path is the TorchScript archive (model.pt).
	Path string
	// IntraOpThreads is libtorch's intra-op thread count for this module's
	// forwards; 0 keeps libtorch's default (one per core).
	IntraOpThreads int
	// DisableOptimizedExecution runs forward() without the graph
	// executor's optimization passes.
	DisableOptimizedExecution bool
	// DisableInferenceMode runs forward() under NoGradGuard instead of
	// InferenceMode.
	DisableInferenceMode bool
}
