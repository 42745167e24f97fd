// Package python is the "python" backend: it runs a model's model.py
// (Triton's TritonPythonModel interface) in one stub process per model
// instance, with the python interpreter of the model's execution
// environment.
//
// The stub program and the triton_python_backend_utils module that models
// import ship inside this package (stub/, embedded) and are written to a
// content-addressed directory at first use. Tensor bytes travel through a
// per-instance shared memory file (a memfd both processes map; inputs are
// zero-copy numpy views in the stub); only small JSON control frames
// (names, dtypes, shapes, offsets) cross a pipe, one write and one read per
// batch.
//
// A model's config.pbtxt parameter EXECUTION_ENV_PATH selects the
// environment: a directory, or a packed env (.tar.gz made from a venv or by
// conda-pack) that is extracted once per content digest into a cache. The
// interpreter is <env>/bin/python3; it must be Python >= 3.8 with numpy.
//
// Besides answering batches, a stub calls the server on the model's
// behalf (calls.go): BLS requests on other models (InferenceRequest.exec,
// async_exec, exec(decoupled=True)) through the Server that
// cmd/tritonserver sets, the responses of decoupled models
// (InferenceResponseSender, any number per request, also after execute
// returned), the model loading API and custom metrics (metrics.go). Those
// tensors travel in the frame's payload through the pipe; one goroutine
// per stub reads its frames and serves each call on a goroutine of its
// own, and the stub waits for each call's answer.
//
// Faults are contained per instance: a stub that dies or hangs during
// execute fails that batch, is killed if needed and is restarted in the
// background; the model stays loaded. An exception raised by model.py's
// execute fails every request of the batch with "Type: message"; a
// TritonError in one InferenceResponse fails that request only.
package python

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Backend config keys (--backend-config=python,<key>=<value>). They
// override the corresponding Options field for every model.
const (
	// KeyInterpreter is the python used for models without
	// EXECUTION_ENV_PATH.
	KeyInterpreter = "python-interpreter"
	// KeyStubTimeout bounds, in seconds, the stub's start (interpreter up,
	// numpy imported, handshake) and finalize.
	KeyStubTimeout = "stub-timeout-secs"
	// KeyInitializeTimeout bounds, in seconds, model.py's initialize (and
	// auto_complete_config). 0 means no limit beyond the load's context.
	KeyInitializeTimeout = "initialize-timeout-secs"
	// KeyExecuteTimeout bounds, in seconds, one execute call; a stub past
	// it is killed and restarted. 0, the default, means no limit (Triton
	// has none).
	KeyExecuteTimeout = "execute-timeout-secs"
	// KeyShmDefaultSize is the initial shared memory size per instance in
	// bytes (it grows on demand).
	KeyShmDefaultSize = "shm-default-byte-size"
	// KeyEnvCacheDir is where packed envs are extracted.
	KeyEnvCacheDir = "env-cache-dir"
	// KeyEnvRoots lists directories (separated by the OS path-list
	// separator) where EXECUTION_ENV_PATH may name an env besides the
	// model's own directory: a base env the operator shares between
	// models. An env anywhere else is refused, so that a config override
	// cannot make a model run another interpreter.
	KeyEnvRoots = "env-roots"
	// KeyEnvMaxBytes bounds the bytes a packed env's files may hold once
	// extracted (DefaultEnvMaxBytes), so that a small archive cannot fill
	// the disk of the env cache; sparse files count at their full size.
	KeyEnvMaxBytes = "env-max-extract-bytes"
	// KeyEnvCacheMaxBytes bounds the bytes of the extracted envs in the
	// env cache (DefaultEnvCacheMaxBytes): after each extraction the least
	// recently used envs that no instance of any server sharing the cache
	// uses are removed until the cache fits (the one just extracted
	// stays). 0 turns the bound off.
	KeyEnvCacheMaxBytes = "env-cache-max-bytes"
	// KeyEnvCacheMaxAge also removes, after each extraction, the unused
	// envs last used more than this many seconds ago; 0 (the default)
	// keeps envs whatever their age.
	KeyEnvCacheMaxAge = "env-cache-max-age-secs"
	// KeyPollMicros is how long, in microseconds, the server polls for a
	// stub's reply and a stub polls for its next batch before sleeping.
	// A sleeping reader's CPU may go idle, and waking an idle virtual
	// CPU costs tens of microseconds per message; 0 turns polling off.
	// A poll watches the other side's count on a shared doorbell page,
	// not the pipe (doorbell.go). A reader whose recent waits were longer
	// polls a quarter past them, up to four times this (pollWindow in
	// poll.go). Polling is an upper bound: it happens only while the spin
	// budget sees a free core (spin.go), and a poll whose CPU is taken by
	// other work stops and backs off for a few waits (poll.go).
	KeyPollMicros = "poll-microseconds"
	// KeyLogBytesPerSec bounds the bytes per second of a stub's stdout and
	// stderr that reach the server log (DefaultLogBytesPerSec, with one
	// second's worth as a burst); lines over it are dropped and counted in
	// a warning. 0 turns the bound off.
	KeyLogBytesPerSec = "stub-log-bytes-per-sec"
	// KeyStubMemoryBytes bounds the address space of each stub process
	// (RLIMIT_AS, set by the stub before it reports ready, so before
	// model.py is imported; processes model.py starts inherit it). An
	// allocation past it fails: numpy and Python raise MemoryError, which
	// fails the request; a stub that dies of it is restarted and the error
	// names the limit. 0, the default, means no limit. Address space is
	// more than resident memory: torch alone maps a few GiB.
	KeyStubMemoryBytes = "stub-memory-bytes"
	// KeyStubScheduling is the Linux scheduling policy of each stub's
	// threads: "batch" (SCHED_BATCH), "normal" (SCHED_OTHER) or "auto",
	// the default: batch while the loaded python models' instance groups
	// together ask for more instances than the machine has cores, else
	// normal; the stubs on auto are switched when a load or an unload
	// crosses that line. Under SCHED_BATCH
	// a stub that wakes with a batch does not preempt what runs on its
	// CPU. With more stubs than cores (the report's four instances on two)
	// that keeps stubs from preempting each other in the middle of
	// batches: the p50 at 16 clients was 0.74-1.00 times that under
	// SCHED_OTHER in eight alternated pairs. With one instance, eight
	// pairs went either way (0.67-1.78 times, 1.07 at the median), so
	// stubs no more than the cores keep the kernel's default
	// (docs/performance.md).
	// Processes model.py starts inherit the policy.
	KeyStubScheduling = "stub-scheduling"
	// KeyExecuteConcurrency is how many of a model's instances execute at
	// once: "all", as Triton (every instance takes batches as they come),
	// or "auto", the default: every instance while the stubs' executes
	// wait on something other than a core, and fewer while their threads
	// spend a large share of what they ask of the CPU waiting for one, so
	// that the batches go to the stubs that just ran and grow there
	// instead of splitting across stubs that take turns on the cores
	// (the scheduler's concentrator, which reads each stub's
	// /proc/<pid>/schedstat once per 100 ms window).
	KeyExecuteConcurrency = "execute-concurrency"
)

// Defaults for Options fields left zero.
const (
	DefaultInterpreter       = "/usr/bin/python3"
	DefaultStubTimeout       = 30 * time.Second
	DefaultInitializeTimeout = 10 * time.Minute
	DefaultExecuteTimeout    = time.Duration(0) // none, as in Triton; KeyExecuteTimeout opts in
	DefaultShmSize           = 1 << 20
	DefaultPoll              = 100 * time.Microsecond
	DefaultEnvMaxBytes       = 16 << 30 // a torch env is a few GiB
	DefaultEnvCacheMaxBytes  = 32 << 30 // two of the largest envs
	DefaultLogBytesPerSec    = 1 << 20
)

// Options configures the backend. Zero values select the defaults.
type Options struct {
	// Interpreter runs models that have no EXECUTION_ENV_PATH
	// (DefaultInterpreter when empty).
	Interpreter string
	// CacheDir holds the stub files (<CacheDir>/stub/<digest>/) and
	// extracted envs (<CacheDir>/python-envs/<sha256>/). Empty means
	// os.UserCacheDir()/tritonserver, or os.TempDir()/tritonserver when
	// there is no user cache directory.
	CacheDir string
	// StubTimeout, InitializeTimeout and ExecuteTimeout: see the Key*
	// constants. A negative InitializeTimeout or ExecuteTimeout means no
	// limit.
	StubTimeout       time.Duration
	InitializeTimeout time.Duration
	ExecuteTimeout    time.Duration
	// ShmSize is the initial shared memory size per instance.
	ShmSize int
	// Logger receives the stubs' stdout and stderr, one record per line
	// with the model, version and instance as attributes, and the
	// backend's own messages. Nil discards them.
	Logger *slog.Logger
	// Verbose enables pb_utils.Logger.log_verbose output (--log-verbose).
	Verbose bool
	// EnvRoots: see KeyEnvRoots; the backend config's list is added.
	EnvRoots []string
	// Poll: see KeyPollMicros. 0 means DefaultPoll, negative no polling.
	Poll time.Duration
}

// Backend starts python stubs for model instances. It is safe for
// concurrent use; one Backend serves every python model of a server.
type Backend struct {
	opts Options
	envs envResolver

	spin  *spinBudget // who may poll, across every instance of this backend
	sched *stubSched  // the policy of stubs on stub-scheduling=auto, across every model

	metrics *CustomMetrics // pb_utils.MetricFamily's, exported by Collector

	mu      sync.Mutex
	scripts map[string]string // stub dir -> script path, once written
	probes  map[probeKey]interpreterInfo
	server  Server
}

type probeKey struct {
	path  string
	mtime int64
	size  int64
}

// New returns the python backend. It does no I/O; the stub files and any
// env are prepared when the first instance loads.
func New(opts Options) *Backend {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		opts.CacheDir = filepath.Join(base, "tritonserver")
	}
	affinity := serverAffinity()
	b := &Backend{
		opts:    opts,
		spin:    defaultSpinBudget(affinity),
		sched:   defaultStubSched(affinity),
		scripts: map[string]string{},
		probes:  map[probeKey]interpreterInfo{},
		metrics: newCustomMetrics(),
	}
	b.envs = envResolver{
		cacheDir: filepath.Join(opts.CacheDir, "python-envs"),
		digests:  &digestCache{},
		log:      opts.Logger,
	}
	return b
}

var _ backend.Backend = (*Backend)(nil)

// settings are the effective options for one model: Options overridden by
// the model's backend config.
type settings struct {
	interpreter       string
	stubTimeout       time.Duration
	initializeTimeout time.Duration // 0: none
	executeTimeout    time.Duration // 0: none
	shmSize           int
	envCacheDir       string
	envRoots          []string
	envMaxBytes       int64
	envCacheMaxBytes  int64         // 0: none
	envCacheMaxAge    time.Duration // 0: none
	poll              time.Duration // 0: none
	logBytesPerSec    int64         // 0: none
	memoryBytes       int64         // 0: none
	schedAuto         bool          // stub-scheduling=auto: stubSched decides
	schedBatch        bool          // otherwise: stubs run SCHED_BATCH (KeyStubScheduling)
	concentrate       bool          // execute-concurrency=auto: report the stubs' CPU
}

func (b *Backend) settings(spec *backend.ModelSpec) (settings, error) {
	s := settings{
		interpreter:       b.opts.Interpreter,
		stubTimeout:       b.opts.StubTimeout,
		initializeTimeout: b.opts.InitializeTimeout,
		executeTimeout:    b.opts.ExecuteTimeout,
		shmSize:           b.opts.ShmSize,
		envCacheDir:       b.envs.cacheDir,
		envRoots:          b.opts.EnvRoots,
		envMaxBytes:       DefaultEnvMaxBytes,
		envCacheMaxBytes:  DefaultEnvCacheMaxBytes,
		poll:              defaultLimit(b.opts.Poll, DefaultPoll),
		logBytesPerSec:    DefaultLogBytesPerSec,
		schedAuto:         true,
		concentrate:       true,
	}
	if s.interpreter == "" {
		s.interpreter = DefaultInterpreter
	}
	if s.stubTimeout <= 0 {
		s.stubTimeout = DefaultStubTimeout
	}
	s.initializeTimeout = defaultLimit(s.initializeTimeout, DefaultInitializeTimeout)
	if s.executeTimeout < 0 {
		s.executeTimeout = 0
	}
	if s.shmSize <= 0 {
		s.shmSize = DefaultShmSize
	}
	secs := func(key, v string) (time.Duration, error) {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("backend config python,%s=%q: want a number of seconds >= 0", key, v)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	for k, v := range spec.BackendConfig {
		var err error
		switch k {
		case KeyInterpreter:
			s.interpreter = v
		case KeyStubTimeout:
			s.stubTimeout, err = secs(k, v)
			if err == nil && s.stubTimeout == 0 {
				err = fmt.Errorf("backend config python,%s=%q: must be > 0", k, v)
			}
		case KeyInitializeTimeout:
			s.initializeTimeout, err = secs(k, v)
		case KeyExecuteTimeout:
			s.executeTimeout, err = secs(k, v)
		case KeyShmDefaultSize:
			n, perr := strconv.Atoi(v)
			if perr != nil || n <= 0 {
				err = fmt.Errorf("backend config python,%s=%q: want a byte count > 0", k, v)
			}
			s.shmSize = n
		case KeyEnvCacheDir:
			s.envCacheDir = v
		case KeyEnvRoots:
			s.envRoots = append(slices.Clone(s.envRoots), filepath.SplitList(v)...)
		case KeyEnvMaxBytes:
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil || n <= 0 {
				err = fmt.Errorf("backend config python,%s=%q: want a byte count > 0", k, v)
			}
			s.envMaxBytes = n
		case KeyEnvCacheMaxBytes:
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil || n < 0 {
				err = fmt.Errorf("backend config python,%s=%q: want a byte count >= 0", k, v)
			}
			s.envCacheMaxBytes = n
		case KeyEnvCacheMaxAge:
			s.envCacheMaxAge, err = secs(k, v)
		case KeyPollMicros:
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 0 || n > 1e6 {
				err = fmt.Errorf("backend config python,%s=%q: want microseconds from 0 to 1000000", k, v)
			}
			s.poll = time.Duration(n) * time.Microsecond
		case KeyLogBytesPerSec:
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil || n < 0 {
				err = fmt.Errorf("backend config python,%s=%q: want a byte count >= 0", k, v)
			}
			s.logBytesPerSec = n
		case KeyStubMemoryBytes:
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil || n < 0 {
				err = fmt.Errorf("backend config python,%s=%q: want a byte count >= 0", k, v)
			}
			s.memoryBytes = n
		case KeyStubScheduling:
			switch v {
			case "batch":
				s.schedAuto, s.schedBatch = false, true
			case "normal":
				s.schedAuto, s.schedBatch = false, false
			case "auto":
				s.schedAuto = true
			default:
				err = fmt.Errorf("backend config python,%s=%q: want auto, batch or normal", k, v)
			}
		case KeyExecuteConcurrency:
			switch v {
			case "auto":
				s.concentrate = true
			case "all":
				s.concentrate = false
			default:
				err = fmt.Errorf("backend config python,%s=%q: want auto or all", k, v)
			}
		}
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

// defaultLimit maps the Options convention (0 default, negative none) to
// the settings convention (0 none).
func defaultLimit(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// NewInstance starts the stub for instance idx of the model and runs
// auto_complete_config (if defined) and initialize. The returned Instance
// is an *Instance.
func (b *Backend) NewInstance(ctx context.Context, spec *backend.ModelSpec, idx int) (backend.Instance, error) {
	inst, err := b.newInstance(ctx, spec, idx)
	if err != nil {
		return nil, fmt.Errorf("loading python model %q version %d instance %d: %w", spec.Name, spec.Version, idx, err)
	}
	return inst, nil
}

// prepared is what starting a stub for a model needs: its settings, env,
// stub script and model file.
type prepared struct {
	set       settings
	env       *execEnv
	environ   []string
	script    string
	modelFile string
}

// prepare resolves the model's settings, env (extracting a packed one),
// interpreter (probed once) and the stub files. The caller releases the
// env (prepared.env.Release) once no stub of it runs.
func (b *Backend) prepare(ctx context.Context, spec *backend.ModelSpec) (*prepared, error) {
	set, err := b.settings(spec)
	if err != nil {
		return nil, err
	}
	resolver := b.envs
	resolver.cacheDir = set.envCacheDir
	resolver.roots = set.envRoots
	resolver.maxBytes = set.envMaxBytes
	resolver.cacheMaxBytes = set.envCacheMaxBytes
	resolver.cacheMaxAge = set.envCacheMaxAge
	env, hasEnv, err := resolver.resolve(ctx, spec)
	if err != nil {
		return nil, err
	}
	if !hasEnv {
		env = &execEnv{Interpreter: set.interpreter, Source: set.interpreter}
	}
	p, err := b.prepareIn(ctx, spec, set, env)
	if err != nil {
		env.Release()
		return nil, err
	}
	return p, nil
}

// prepareIn is prepare once the env is resolved.
func (b *Backend) prepareIn(ctx context.Context, spec *backend.ModelSpec, set settings, env *execEnv) (*prepared, error) {
	environ := env.environ()
	if _, err := b.probe(ctx, spec.Name, env.Interpreter, environ, set.stubTimeout); err != nil {
		return nil, err
	}
	script, err := b.script()
	if err != nil {
		return nil, err
	}
	modelFile := spec.Filename
	if modelFile == "" {
		modelFile = "model.py"
	}
	if !filepath.IsAbs(modelFile) {
		modelFile = filepath.Join(spec.VersionDir, modelFile)
	}
	if _, err := os.Stat(modelFile); err != nil {
		return nil, fmt.Errorf("model file: %w", err)
	}
	return &prepared{set: set, env: env, environ: environ, script: script, modelFile: modelFile}, nil
}

func (b *Backend) newInstance(ctx context.Context, spec *backend.ModelSpec, idx int) (*Instance, error) {
	p, err := b.prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	set, env, environ, script, modelFile := p.set, p.env, p.environ, p.script, p.modelFile
	inst := &Instance{
		spec:      spec,
		idx:       idx,
		set:       set,
		env:       env,
		environ:   environ,
		script:    script,
		modelFile: modelFile,
		log:       b.opts.Logger.With("model", spec.Name, "version", spec.Version, "instance", idx),
		verbose:   b.opts.Verbose,
		spin:      b.spin,
		sched:     b.sched,
		server:    b.currentServer,
		metrics:   b.metrics,
	}
	inst.unloading, inst.unload = context.WithCancel(context.Background())
	inst.outputNames = make([]string, len(spec.Outputs))
	for i, o := range spec.Outputs {
		inst.outputNames[i] = o.Name
	}
	inst.shm, err = newShmRegion(fmt.Sprintf("tritonbuild-python-%s-%d", spec.Name, idx), set.shmSize)
	if err != nil {
		env.Release()
		return nil, err
	}
	b.sched.join(inst, spec, set.schedAuto, inst.warnSched)
	if err := inst.start(ctx); err != nil {
		b.sched.leave(inst, spec, inst.warnSched)
		inst.unload()
		env.Release()
		return nil, errors.Join(err, inst.shm.close())
	}
	return inst, nil
}

// probe checks the interpreter once per file version.
func (b *Backend) probe(ctx context.Context, model, path string, environ []string, timeout time.Duration) (interpreterInfo, error) {
	var key probeKey
	if st, err := os.Stat(path); err == nil {
		key = probeKey{path: path, mtime: st.ModTime().UnixNano(), size: st.Size()}
		b.mu.Lock()
		info, ok := b.probes[key]
		b.mu.Unlock()
		if ok {
			return info, nil
		}
	}
	info, err := probeInterpreter(ctx, model, path, environ, timeout)
	if err != nil {
		return info, err
	}
	b.mu.Lock()
	b.probes[key] = info
	b.mu.Unlock()
	return info, nil
}

// script writes the embedded stub files on first use.
func (b *Backend) script() (string, error) {
	root := filepath.Join(b.opts.CacheDir, "stub")
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.scripts[root]; ok {
		if _, err := os.Stat(s); err == nil {
			return s, nil
		}
	}
	s, err := writeStubFiles(root)
	if err != nil {
		return "", err
	}
	b.scripts[root] = s
	return s, nil
}

// instanceGroup is one instance group of a model's config, as far as the
// backend needs it: its name and how many instances it has.
type instanceGroup struct {
	name  string
	count int
}

// instanceGroups are the instance groups of spec's config, in order (a
// group without a count has one, as in Triton); nil for a spec without a
// config.
func instanceGroups(spec *backend.ModelSpec) []instanceGroup {
	var cfg struct {
		InstanceGroup []struct {
			Name  string      `json:"name"`
			Count json.Number `json:"count"` // int32: a number, or a string from some printers
		} `json:"instance_group"`
	}
	if json.Unmarshal(spec.ConfigJSON, &cfg) != nil {
		return nil
	}
	groups := make([]instanceGroup, 0, len(cfg.InstanceGroup))
	for _, g := range cfg.InstanceGroup {
		c, err := g.Count.Int64()
		if err != nil || c < 1 {
			c = 1
		}
		groups = append(groups, instanceGroup{name: g.Name, count: int(min(c, 1<<20))})
	}
	return groups
}

// instanceCount is how many instances the model's config asks for, summed
// over its instance groups; 0 for a spec without a config.
func instanceCount(spec *backend.ModelSpec) int {
	n := 0
	for _, g := range instanceGroups(spec) {
		n += g.count
	}
	return n
}

// instanceName is Triton's name of instance idx (numbered across the
// groups in order): its group's name, "_" and its index in the group, so
// `<model>_0` for the first of the group Triton adds when a config gives
// none (named after the model). A spec without groups gets the name of
// that default group's instance.
func instanceName(spec *backend.ModelSpec, idx int) string {
	start := 0
	for _, g := range instanceGroups(spec) {
		if idx < start+g.count {
			name := g.name
			if name == "" {
				name = spec.Name
			}
			return name + "_" + strconv.Itoa(idx-start)
		}
		start += g.count
	}
	return spec.Name + "_" + strconv.Itoa(idx)
}

// initArgs are initialize(args) as Triton passes them: all strings.
func initArgs(spec *backend.ModelSpec, idx int) map[string]string {
	return map[string]string{
		"model_config":             string(configJSON(spec)),
		"model_instance_kind":      "CPU",
		"model_instance_name":      instanceName(spec, idx),
		"model_instance_device_id": "0",
		"model_repository":         spec.ModelDir,
		"model_version":            strconv.FormatInt(spec.Version, 10),
		"model_name":               spec.Name,
	}
}

// configJSON returns the config for initialize; a spec without ConfigJSON
// (tests, tools) gets a minimal one built from the spec.
func configJSON(spec *backend.ModelSpec) []byte {
	if len(spec.ConfigJSON) > 0 {
		return spec.ConfigJSON
	}
	type io struct {
		Name     string  `json:"name"`
		DataType string  `json:"data_type"`
		Dims     []int64 `json:"dims"`
	}
	cfg := struct {
		Name         string `json:"name"`
		Backend      string `json:"backend"`
		MaxBatchSize int    `json:"max_batch_size"`
		Input        []io   `json:"input"`
		Output       []io   `json:"output"`
	}{Name: spec.Name, Backend: "python", MaxBatchSize: spec.MaxBatchSize}
	for _, t := range spec.Inputs {
		cfg.Input = append(cfg.Input, io{t.Name, "TYPE_" + typeName(t.DataType), t.Dims})
	}
	for _, t := range spec.Outputs {
		cfg.Output = append(cfg.Output, io{t.Name, "TYPE_" + typeName(t.DataType), t.Dims})
	}
	data, _ := json.Marshal(cfg)
	return data
}

func typeName(d backend.DataType) string {
	if d == backend.Bytes {
		return "STRING"
	}
	return string(d)
}
