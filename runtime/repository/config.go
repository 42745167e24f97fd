package repository

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// ConfigFile is the name of a model's configuration file.
const ConfigFile = "config.pbtxt"

// defaultFilenames are the model files each backend looks for when
// default_model_filename is not set; they also identify the backend of a
// model without config.pbtxt.
var defaultFilenames = map[string]string{
	"pytorch": "model.pt",
	"python":  "model.py",
}

// platformBackends maps the platform names of backends served here.
var platformBackends = map[string]string{
	"pytorch_libtorch": "pytorch",
}

// MaxInstances bounds the instances of one model: each is a loaded copy of
// the model (and for python a process), so a typo such as count: 10000
// should fail the load rather than exhaust the machine.
const MaxInstances = 256

// loadStageError marks a configuration error that Triton finds only when
// it creates the model's versions, after polling the repository accepted
// the configuration: its backend's auto-complete, the inputs and outputs
// (ValidateModelIOConfig, which the poll runs only under
// --strict-model-config), the backend itself, an ensemble checked against
// its composing models, the versions the policy selects. A load request
// answers it as Triton does a failed load (INVALID_ARG, loadFailure); the
// other configuration errors are the poll's (INTERNAL, pollFailure).
type loadStageError struct{ error }

func (e loadStageError) Unwrap() error { return e.error }

// resolved is a validated model configuration ready to build versions from.
type resolved struct {
	*modelconfig.ModelConfig
	backendName string
	platform    string
	backend     backend.Backend
	sched       scheduler.Config
	inputs      []backend.TensorSpec // as clients see them (dims)
	outputs     []backend.TensorSpec
	beInputs    []backend.TensorSpec // as the backend sees them (reshape)
	beOutputs   []backend.TensorSpec
	reshape     *reshapes
	json        []byte
	// stateFiles are the initial_state data_file of each implicit state
	// ("" for none), read per version (sequenceStates).
	stateFiles []string
	// batch_input and batch_output (batchio.go).
	batchInputs  []backend.BatchInput
	batchOutputs []backend.BatchOutput
	// instancePolicies: each instance's host policy (instancePolicies);
	// nil when no instance is under one.
	instancePolicies []backend.HostPolicy
}

// prepare reads and validates the config of the model in dir and selects the
// versions to load.
func (m *Manager) prepare(ctx context.Context, name, dir string, configJSON []byte) (*resolved, []int64, error) {
	available, err := versionDirs(dir)
	if err != nil {
		return nil, nil, err
	}
	cfgPath := filepath.Join(name, ConfigFile)
	limit := m.opts.MaxConfigSize
	if limit <= 0 {
		limit = DefaultMaxConfigSize
	}
	var cfg *modelconfig.ModelConfig
	if configJSON != nil {
		cfgPath = "load request parameter 'config'"
		if int64(len(configJSON)) > limit {
			return nil, nil, backend.Errorf(backend.TooLarge, "load parameter 'config' of model '%s' is %d bytes, more than the maximum of %d bytes (--max-config-size)", name, len(configJSON), limit)
		}
		cfg, err = configOverride(name, configJSON)
		if err != nil {
			return nil, nil, err
		}
	} else {
		var real string
		if real, err = backend.Confine(dir, dir, ConfigFile, ConfigFile); err == nil {
			// Errors name the file from the repository on, not the server's path.
			cfgPath = filepath.Join(name, ConfigFile)
			cfg, err = loadConfigFile(real, cfgPath, limit)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, os.ErrNotExist):
		cfg, err = m.guessBackend(name, dir, available)
		if err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, err
	}
	if len(available) > 0 {
		completeBackendFields(cfg, filepath.Join(dir, strconv.FormatInt(available[len(available)-1], 10)))
	}
	if cfg, err = m.autoComplete(ctx, name, dir, available, cfg); err != nil {
		return nil, nil, loadStageError{err}
	}
	r, err := m.resolve(name, cfg)
	if err != nil {
		if stage := (loadStageError{}); errors.As(err, &stage) {
			return nil, nil, loadStageError{fmt.Errorf("%s: %w", cfgPath, stage.error)}
		}
		return nil, nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	for _, o := range cfg.GetOutput() {
		if l := o.GetLabelFilename(); l != "" {
			if _, err := backend.Confine(dir, dir, l, "output '"+o.GetName()+"' label_filename"); err != nil {
				return nil, nil, loadStageError{fmt.Errorf("%s: %w", cfgPath, err)}
			}
		}
	}
	versions, missing := selectVersions(cfg.GetVersionPolicy(), available)
	for _, v := range missing {
		m.log.Error(fmt.Sprintf("version %d is specified for model '%s', but the version directory is not present", v, name))
	}
	if len(versions) == 0 {
		return nil, nil, loadStageError{fmt.Errorf("at least one version must be available under the version policy of model '%s'", name)}
	}
	return r, versions, nil
}

// loadConfigFile reads and parses config.pbtxt, refusing one over limit
// bytes before reading it.
func loadConfigFile(path, shown string, limit int64) (*modelconfig.ModelConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", shown, errors.Unwrap(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", shown, errors.Unwrap(err))
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than the maximum of %d bytes (--max-config-size)", ConfigFile, limit)
	}
	return modelconfig.Parse(shown, data)
}

// guessBackend starts the configuration of a model without config.pbtxt
// from the backend its model file names (model.pt, model.py in the highest
// version directory); auto-completion fills in the rest.
func (m *Manager) guessBackend(name, dir string, versions []int64) (*modelconfig.ModelConfig, error) {
	if m.opts.StrictModelConfig {
		return nil, fmt.Errorf("no %s in %s (required with --strict-model-config=true)", ConfigFile, name)
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("no %s and no version directory in %s", ConfigFile, name)
	}
	cfg := &modelconfig.ModelConfig{Name: name}
	completeBackendFields(cfg, filepath.Join(dir, strconv.FormatInt(versions[len(versions)-1], 10)))
	if cfg.Backend == "" {
		return nil, fmt.Errorf("no %s in %s and no default model file to guess its backend from", ConfigFile, name)
	}
	if _, ok := m.opts.Backends[cfg.Backend].(backend.AutoCompleter); !ok {
		return nil, fmt.Errorf("no %s in %s and the %s backend cannot auto-complete a configuration", ConfigFile, name, cfg.Backend)
	}
	return cfg, nil
}

// completeBackendFields fills in the backend, platform and default model
// file of cfg as Triton's core does (AutoCompleteBackendFields) for a
// config.pbtxt, a load request's override or no configuration at all: a
// config naming neither backend nor platform gets the backend of its model
// file (default_model_filename, else model.pt or model.py in vdir, the
// highest version directory), pytorch_libtorch means the pytorch backend,
// and each backend gets its platform and default file name.
func completeBackendFields(cfg *modelconfig.ModelConfig, vdir string) {
	if cfg.Backend == "" {
		switch {
		case cfg.Platform != "":
			cfg.Backend = platformBackends[cfg.Platform]
		case cfg.DefaultModelFilename != "":
			for be, f := range defaultFilenames {
				if f == cfg.DefaultModelFilename {
					cfg.Backend = be
				}
			}
		default:
			for _, be := range []string{"pytorch", "python"} {
				if fi, err := os.Stat(filepath.Join(vdir, defaultFilenames[be])); err == nil && !fi.IsDir() {
					cfg.Backend = be
					break
				}
			}
		}
	}
	if cfg.Backend == "pytorch" && cfg.Platform == "" {
		cfg.Platform = "pytorch_libtorch"
	}
	if cfg.DefaultModelFilename == "" {
		cfg.DefaultModelFilename = defaultFilenames[cfg.Backend]
	}
}

// autoComplete lets the model's backend complete cfg, as Triton does for
// every model unless --disable-auto-complete-config (--strict-model-config)
// is given: a python model's auto_complete_config may add inputs, outputs,
// max_batch_size, dynamic batching and the transaction policy, so that a
// config.pbtxt with only `backend: "python"`, or none, suffices. The
// backend sees the highest version directory. Backends without
// auto-completion leave cfg as it is.
func (m *Manager) autoComplete(ctx context.Context, name, dir string, versions []int64, cfg *modelconfig.ModelConfig) (*modelconfig.ModelConfig, error) {
	if m.opts.StrictModelConfig || len(versions) == 0 {
		return cfg, nil
	}
	be := cfg.GetBackend()
	if be == "" {
		be = platformBackends[cfg.GetPlatform()]
	}
	ac, ok := m.opts.Backends[be].(backend.AutoCompleter)
	if !ok {
		return cfg, nil
	}
	if cfg.Name == "" {
		cfg.Name = name
	}
	vdir, err := backend.Confine(dir, dir, strconv.FormatInt(versions[len(versions)-1], 10), "version directory")
	if err != nil {
		return nil, err
	}
	completed, err := ac.AutoComplete(ctx, backend.AutoCompleteRequest{
		ModelDir: dir, VersionDir: vdir, BackendConfig: m.opts.BackendConfig[be], ConfigJSON: modelconfig.JSON(cfg),
	})
	if err != nil {
		return nil, fmt.Errorf("auto-completing the configuration of model '%s': %w", name, err)
	}
	if completed == nil {
		return cfg, nil
	}
	out := &modelconfig.ModelConfig{}
	if err := protojson.Unmarshal(completed, out); err != nil {
		return nil, fmt.Errorf("auto-completing the configuration of model '%s': the completed configuration is not a valid model configuration: %w", name, err)
	}
	if out.Name != name {
		return nil, fmt.Errorf("auto-completing the configuration of model '%s': the completed configuration names model '%s'", name, out.Name)
	}
	return out, nil
}

// resolve validates cfg and derives everything that does not depend on the version.
func (m *Manager) resolve(name string, cfg *modelconfig.ModelConfig) (*resolved, error) {
	if cfg.Name == "" {
		cfg.Name = name
	} else if cfg.Name != name {
		return nil, fmt.Errorf("unexpected directory name '%s' for model '%s', directory name must equal model name", name, cfg.Name) // Triton's text
	}
	if err := checkSupported(cfg); err != nil {
		return nil, err
	}
	r := &resolved{ModelConfig: cfg}
	switch {
	case cfg.Platform == ensemblePlatform:
		if cfg.Backend != "" {
			return nil, backend.Errorf(backend.InvalidArg, "Ensemble model '%s' must have platform type '%s' and empty backend type", cfg.Name, cfg.Platform) // Triton's text
		}
		if err := checkEnsembleScheduling(cfg); err != nil {
			return nil, err
		}
		r.backendName = ensemblePlatform
	case cfg.GetEnsembleScheduling() != nil:
		return nil, fmt.Errorf("ensemble scheduling cannot be set for model '%s' whose platform is not %s", cfg.Name, ensemblePlatform) // Triton's text
	case cfg.Backend != "":
		r.backendName = cfg.Backend
		if cfg.Platform != "" {
			if b, ok := platformBackends[cfg.Platform]; !ok || b != cfg.Backend {
				return nil, fmt.Errorf("unexpected 'platform' and 'backend' pair, got:%s, %s", cfg.Platform, cfg.Backend)
			}
		}
	case cfg.Platform != "":
		b, ok := platformBackends[cfg.Platform]
		if !ok {
			return nil, &UnsupportedError{Field: "platform", Detail: cfg.Platform}
		}
		r.backendName = b
		cfg.Backend = b
	default:
		return nil, fmt.Errorf("must specify 'platform' or 'backend' for '%s'", cfg.Name)
	}
	// Triton fills in the platform of pytorch models; metadata shows it.
	if r.backendName == "pytorch" && cfg.Platform == "" {
		cfg.Platform = "pytorch_libtorch"
	}
	r.platform = cfg.Platform
	if r.platform == "" {
		r.platform = r.backendName
	}
	if r.backendName != ensemblePlatform {
		be, ok := m.opts.Backends[r.backendName]
		if !ok {
			return nil, loadStageError{backend.Errorf(backend.Unsupported, "backend '%s' is not available in this server", r.backendName)}
		}
		r.backend = be
	}

	if cfg.MaxBatchSize < 0 {
		return nil, backend.Errorf(backend.InvalidArg, "'max_batch_size' must be non-negative value for %s", cfg.Name) // Triton's text
	}
	if err := resolveIO(r, cfg); err != nil {
		if !m.opts.StrictModelConfig {
			err = loadStageError{err}
		}
		return nil, err
	}
	var err error
	// The preferred batch sizes the batcher uses are the config's own; the
	// default Triton fills in ([max_batch_size]) is only shown.
	var preferred []int32
	if db := cfg.GetDynamicBatching(); db != nil {
		preferred = slices.Clone(db.GetPreferredBatchSize())
	}
	if err := fillDefaults(cfg, r.backendName); err != nil {
		return nil, err
	}
	if err := checkInstanceGroups(cfg); err != nil {
		return nil, err
	}
	r.sched = scheduler.Config{Name: cfg.Name, MaxBatchSize: int(cfg.MaxBatchSize)}
	for _, g := range cfg.GetInstanceGroup() {
		r.sched.Instances += int(g.GetCount())
	}
	if r.sched.Instances > MaxInstances {
		return nil, fmt.Errorf("%d instances requested; at most %d per model", r.sched.Instances, MaxInstances)
	}
	r.sched.Instances = max(r.sched.Instances, 1)
	if m.opts.RateLimiter != nil && r.backendName != ensemblePlatform {
		r.sched.RateLimiter = m.opts.RateLimiter
		for _, g := range cfg.GetInstanceGroup() {
			var lim scheduler.InstanceLimit
			if rl := g.GetRateLimiter(); rl != nil {
				lim.Priority = rl.GetPriority()
				for _, res := range rl.GetResources() {
					lim.Resources = append(lim.Resources, scheduler.Resource{Name: res.GetName(), Global: res.GetGlobal(), Count: int(res.GetCount())})
				}
			}
			for range g.GetCount() {
				r.sched.Limits = append(r.sched.Limits, lim)
			}
		}
	}
	if r.backendName == ensemblePlatform {
		// The backend's view (outputs in their reshape, as Triton's
		// ensemble_output_shape_); names, types and optional are the same.
		if r.backend, err = m.validateEnsemble(cfg, r.beInputs, r.beOutputs); err != nil {
			return nil, loadStageError{err}
		}
		r.sched.Instances = ensembleInstances
	}
	if policies, g, policy := instancePolicies(cfg, m.opts.HostPolicies); policies != nil {
		if p, ok := r.backend.(backend.CPUPlacer); !ok || !p.PlacesInstances() {
			return nil, backend.Errorf(backend.Unsupported, "instance group %s of model %s is under host policy '%s', whose cpu-cores and numa-node backend '%s' cannot apply: its instances run in the server's process (start tritonserver under taskset or numactl to confine them)", g, cfg.Name, policy, r.backendName)
		}
		r.instancePolicies = policies
	}
	r.sched.Decoupled = cfg.GetModelTransactionPolicy().GetDecoupled()
	if r.sched.Decoupled {
		if d, ok := r.backend.(backend.DecoupledSupporter); !ok || !d.SupportsDecoupled() {
			return nil, backend.Errorf(backend.Unsupported, "backend '%s' does not support models with decoupled transaction policy", r.backendName)
		}
	}
	if cfg.GetResponseCache().GetEnable() {
		if cfg.GetSequenceBatching() != nil {
			return nil, backend.Errorf(backend.InvalidArg, "Response Cache does not currently support model %s with sequence batching scheduler. Please disable the response cache.", cfg.Name)
		}
		if r.sched.Decoupled {
			return nil, backend.Errorf(backend.InvalidArg, "Response Cache does not currently support model %s with 'decoupled' transaction policy. Please disable the response cache.", cfg.Name)
		}
		// Triton does not cache the top-level requests of ensembles (their
		// steps may cache); without --cache-config the setting has nothing
		// to use.
		if r.backendName != ensemblePlatform {
			r.sched.Cache = m.opts.Cache
		}
	}
	if db := cfg.GetDynamicBatching(); db != nil {
		d, err := dynamicBatching(cfg, db, preferred)
		if err != nil {
			return nil, err
		}
		r.sched.Dynamic = d
		// Triton's dynamic batcher batches requests whose shapes of a
		// variable-size input differ only when the input allows ragged
		// batches.
		for _, in := range r.inputs {
			if !in.Ragged && slices.Contains(in.Dims, -1) {
				r.sched.EqualShapes = append(r.sched.EqualShapes, in.Name)
			}
		}
	}
	if cfg.GetSequenceBatching() != nil {
		if r.sched.Sequence, r.stateFiles, err = sequenceConfig(cfg, r.inputs, r.outputs); err != nil {
			return nil, err
		}
	}
	for i, w := range cfg.GetModelWarmup() {
		if w.GetBatchSize() < 1 || (cfg.MaxBatchSize > 0 && int32(w.GetBatchSize()) > cfg.MaxBatchSize) || (cfg.MaxBatchSize == 0 && w.GetBatchSize() != 1) {
			return nil, fmt.Errorf("model_warmup[%d] batch_size %d is outside 1..max(max_batch_size,1)", i, w.GetBatchSize())
		}
	}
	r.json = modelconfig.JSON(cfg)
	return r, nil
}

// resolveIO validates the inputs and outputs of cfg, as Triton's
// ValidateModelIOConfig does, and sets r's views of them.
func resolveIO(r *resolved, cfg *modelconfig.ModelConfig) error {
	var err error
	if r.inputs, err = tensorSpecs(cfg.Name, "input", cfg.MaxBatchSize, cfg.GetInput()); err != nil {
		return err
	}
	if r.outputs, err = tensorSpecs(cfg.Name, "output", cfg.MaxBatchSize, cfg.GetOutput()); err != nil {
		return err
	}
	if len(r.inputs) == 0 || len(r.outputs) == 0 {
		return errors.New("a model needs at least one input and one output")
	}
	if r.reshape, r.beInputs, r.beOutputs, err = newReshapes(cfg, r.inputs, r.outputs); err != nil {
		return err
	}
	r.batchInputs, r.batchOutputs, err = batchIO(cfg, r.beInputs, r.beOutputs)
	return err
}

// maxLevels bounds priority_levels: each level is a queue.
const maxLevels = 1024

// dynamicBatching validates dynamic_batching as Triton's
// ValidateModelConfig does (its texts) and builds the batcher's settings:
// the preferred sizes the config gives, the delay, and one queue per
// priority level with its policy (priority_queue_policy, else
// default_queue_policy).
func dynamicBatching(cfg *modelconfig.ModelConfig, db *modelconfig.ModelDynamicBatching, preferred []int32) (*scheduler.Dynamic, error) {
	d := &scheduler.Dynamic{
		MaxQueueDelay: time.Duration(min(db.GetMaxQueueDelayMicroseconds(), uint64(math.MaxInt64/1000))) * time.Microsecond,
	}
	for _, p := range preferred {
		if p <= 0 {
			return nil, fmt.Errorf("dynamic batching preferred size must be positive for %s", cfg.Name)
		}
		if p > cfg.MaxBatchSize {
			return nil, fmt.Errorf("dynamic batching preferred size must be <= max batch size for %s", cfg.Name)
		}
		d.PreferredBatchSizes = append(d.PreferredBatchSizes, int(p))
	}
	n := db.GetPriorityLevels()
	if n != 0 {
		if dl := db.GetDefaultPriorityLevel(); dl == 0 || dl > n {
			return nil, fmt.Errorf("default priority level must be in range [1, %d] for %s", n, cfg.Name)
		}
		for lv := range db.GetPriorityQueuePolicy() {
			if lv == 0 || lv > n {
				return nil, fmt.Errorf("priority queue policy must have priority level in range [1, %d] for %s", n, cfg.Name)
			}
		}
		if n > maxLevels {
			return nil, fmt.Errorf("priority_levels %d is more than the %d this server supports for %s", n, maxLevels, cfg.Name)
		}
	}
	delays := func(p *modelconfig.ModelQueuePolicy) bool {
		return p.GetDefaultTimeoutMicroseconds() != 0 && p.GetTimeoutAction() == modelconfig.ModelQueuePolicy_DELAY
	}
	if db.GetPreserveOrdering() {
		if n > 1 {
			return nil, backend.Errorf(backend.InvalidArg, "Only one priority level is allowed when 'preserve_ordering' is true for %s", cfg.Name)
		}
		bad := delays(db.GetDefaultQueuePolicy())
		for _, p := range db.GetPriorityQueuePolicy() {
			bad = bad || delays(p)
		}
		if bad {
			return nil, backend.Errorf(backend.InvalidArg, "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for %s", cfg.Name)
		}
	}
	policy := func(p *modelconfig.ModelQueuePolicy) scheduler.QueuePolicy {
		return scheduler.QueuePolicy{
			MaxQueueSize:  int(min(p.GetMaxQueueSize(), math.MaxInt32)),
			Timeout:       time.Duration(min(p.GetDefaultTimeoutMicroseconds(), uint64(math.MaxInt64/1000))) * time.Microsecond,
			Delay:         p.GetTimeoutAction() == modelconfig.ModelQueuePolicy_DELAY,
			AllowOverride: p.GetAllowTimeoutOverride(),
		}
	}
	levels := max(int(n), 1)
	for lv := 1; lv <= levels; lv++ {
		p := db.GetDefaultQueuePolicy()
		if q, ok := db.GetPriorityQueuePolicy()[uint64(lv)]; ok {
			p = q
		}
		d.Levels = append(d.Levels, policy(p))
	}
	d.DefaultLevel = max(int(db.GetDefaultPriorityLevel()), 1)
	return d, nil
}

// fillDefaults completes cfg the way Triton does (NormalizeModelConfig,
// NormalizeInstanceGroup) before it is shown by the configuration endpoint
// or handed to a backend: the default version policy; except for
// ensembles, which have neither, instance groups and pinned memory
// settings: one CPU instance group named after the model when none is
// given, the name "<model>_<index in instance_group>" for a group given
// without one, KIND_AUTO resolved to KIND_CPU (there are no GPUs here),
// count 1 when unset or below 1; and the backend's default model filename.
func fillDefaults(cfg *modelconfig.ModelConfig, backendName string) error {
	if cfg.VersionPolicy == nil {
		cfg.VersionPolicy = &modelconfig.ModelVersionPolicy{PolicyChoice: &modelconfig.ModelVersionPolicy_Latest_{
			Latest: &modelconfig.ModelVersionPolicy_Latest{NumVersions: 1}}}
	}
	if db := cfg.GetDynamicBatching(); db != nil && len(db.PreferredBatchSize) == 0 && cfg.MaxBatchSize > 0 {
		db.PreferredBatchSize = []int32{cfg.MaxBatchSize}
	}
	if cfg.GetEnsembleScheduling() != nil {
		return nil
	}
	if len(cfg.InstanceGroup) == 0 {
		cfg.InstanceGroup = []*modelconfig.ModelInstanceGroup{{Name: cfg.Name}}
	}
	for i, g := range cfg.InstanceGroup {
		if g.Count < 1 {
			// Triton's NormalizeInstanceGroup gives a group whose count is
			// below 1 (unset, or negative) its backend's default, which is
			// 1 for the pytorch and python backends.
			g.Count = 1
		}
		if g.Name == "" {
			g.Name = fmt.Sprintf("%s_%d", cfg.Name, i)
		}
		if g.Kind == modelconfig.ModelInstanceGroup_KIND_AUTO {
			g.Kind = modelconfig.ModelInstanceGroup_KIND_CPU
		}
	}
	if cfg.DefaultModelFilename == "" {
		cfg.DefaultModelFilename = defaultFilenames[backendName]
	}
	// Pinned memory is a GPU transfer setting; Triton shows it enabled
	// unless the config says otherwise, and on CPU it changes nothing.
	if cfg.Optimization == nil {
		cfg.Optimization = &modelconfig.ModelOptimizationPolicy{}
	}
	if cfg.Optimization.InputPinnedMemory == nil {
		cfg.Optimization.InputPinnedMemory = &modelconfig.ModelOptimizationPolicy_PinnedMemoryBuffer{Enable: true}
	}
	if cfg.Optimization.OutputPinnedMemory == nil {
		cfg.Optimization.OutputPinnedMemory = &modelconfig.ModelOptimizationPolicy_PinnedMemoryBuffer{Enable: true}
	}
	return nil
}

// instancePolicies resolves the host policy of each instance of cfg
// (groups in order, count instances each) to its settings in policies. A
// group's policy is its host_policy, else "cpu" for KIND_CPU (KIND_AUTO is
// KIND_CPU here) and "model" for KIND_MODEL, Triton's defaults; a name
// that no --host-policy defines applies nothing, as on Triton. It returns
// nil when no instance is under a policy, else also the first group under
// one and its policy, for messages.
func instancePolicies(cfg *modelconfig.ModelConfig, policies map[string]backend.HostPolicy) (per []backend.HostPolicy, group, policy string) {
	placed := false
	for _, g := range cfg.GetInstanceGroup() {
		name := g.GetHostPolicy()
		if name == "" {
			name = "cpu"
			if g.GetKind() == modelconfig.ModelInstanceGroup_KIND_MODEL {
				name = "model"
			}
		}
		p := policies[name]
		if !p.IsZero() && !placed {
			placed, group, policy = true, g.GetName(), name
		}
		for range g.GetCount() {
			per = append(per, p)
		}
	}
	if !placed {
		return nil, "", ""
	}
	return per, group, policy
}

// checkInstanceGroups refuses, with Triton's texts for a server without
// GPUs, instance groups this server cannot place: KIND_GPU, and KIND_CPU
// (also KIND_AUTO, which is KIND_CPU here) naming GPUs.
func checkInstanceGroups(cfg *modelconfig.ModelConfig) error {
	for _, g := range cfg.GetInstanceGroup() {
		switch g.GetKind() {
		case modelconfig.ModelInstanceGroup_KIND_GPU:
			return backend.Errorf(backend.InvalidArg, "instance group %s of model %s has kind KIND_GPU but server does not support GPUs", g.GetName(), cfg.GetName())
		case modelconfig.ModelInstanceGroup_KIND_CPU:
			if len(g.GetGpus()) > 0 {
				return backend.Errorf(backend.InvalidArg, "instance group %s of model %s has kind KIND_CPU but specifies one or more GPUs", g.GetName(), cfg.GetName())
			}
		case modelconfig.ModelInstanceGroup_KIND_MODEL:
			if len(g.GetGpus()) > 0 {
				return backend.Errorf(backend.InvalidArg, "instance group %s of model %s has kind KIND_MODEL but specifies one or more GPUs", g.GetName(), cfg.GetName())
			}
		}
	}
	return nil
}

// tensorDecl is what ModelInput and ModelOutput have in common.
type tensorDecl interface {
	GetName() string
	GetDataType() modelconfig.DataType
	GetDims() []int64
	GetReshape() *modelconfig.ModelTensorReshape
}

// tensorSpecs validates the inputs or outputs (kind) of model and returns
// them as clients see them. The checks before the reshape's are Triton's
// ValidateIOShape, with its texts: a name, a data_type, at least one
// dimension (Triton has no scalar tensors: a one-element tensor reshaped
// to [] is how a model takes one), no empty reshape on a model that does
// not batch, and dimensions >= 1 or -1. The reshape's own checks are
// newReshapes'.
func tensorSpecs[T tensorDecl](model, kind string, maxBatch int32, decls []T) ([]backend.TensorSpec, error) {
	specs := make([]backend.TensorSpec, 0, len(decls))
	names := make(map[string]bool, len(decls))
	for _, d := range decls {
		if d.GetName() == "" {
			return nil, fmt.Errorf("model %s must specify 'name' for %s", kind, model)
		}
		if names[d.GetName()] {
			return nil, fmt.Errorf("%s '%s' is declared twice", kind, d.GetName())
		}
		names[d.GetName()] = true
		if d.GetDataType() == modelconfig.DataType_TYPE_INVALID {
			return nil, fmt.Errorf("model %s '%s' must specify 'data_type' for %s", kind, d.GetName(), model)
		}
		dt := modelconfig.WireType(d.GetDataType())
		if dt == "" {
			return nil, fmt.Errorf("%s '%s' has no valid data_type", kind, d.GetName())
		}
		if len(d.GetDims()) == 0 {
			return nil, fmt.Errorf("model %s '%s' must specify 'dims' for %s", kind, d.GetName(), model)
		}
		if d.GetReshape() != nil && len(d.GetReshape().GetShape()) == 0 && maxBatch == 0 {
			return nil, fmt.Errorf("model %s '%s' cannot have empty reshape for non-batching model as scalar tensors are not supported for %s", kind, d.GetName(), model)
		}
		for _, dim := range d.GetDims() {
			if dim < 1 && dim != -1 {
				return nil, fmt.Errorf("model %s '%s' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for %s", kind, d.GetName(), model)
			}
		}
		opt, ragged := false, false
		if in, ok := any(d).(*modelconfig.ModelInput); ok {
			opt, ragged = in.GetOptional(), in.GetAllowRaggedBatch()
		}
		specs = append(specs, backend.TensorSpec{Name: d.GetName(), DataType: dt, Dims: slices.Clone(d.GetDims()), Optional: opt, Ragged: ragged})
	}
	return specs, nil
}

// spec builds the backend's view of one version. The model file must
// resolve inside the model directory, the op libraries inside it or one of
// libDirs (Options.LibraryDirs); dir and vdir are resolved already, and the
// file is handed on relative to vdir.
func (r *resolved) spec(dir, vdir string, v int64, beCfg map[string]string, libDirs []string) (*backend.ModelSpec, error) {
	params := make(map[string]string, len(r.GetParameters()))
	for k, p := range r.GetParameters() {
		params[k] = p.GetStringValue()
	}
	filename := r.GetDefaultModelFilename()
	if filename == "" {
		filename = defaultFilenames[r.backendName]
	}
	if filename != "" {
		real, err := backend.Confine(dir, vdir, filename, "model file")
		if err != nil {
			return nil, err
		}
		if filename, err = filepath.Rel(vdir, real); err != nil {
			return nil, backend.Errorf(backend.InvalidArg, "model file '%s' cannot be resolved", r.GetDefaultModelFilename())
		}
	}
	var libs []string
	for _, l := range r.GetModelOperations().GetOpLibraryFilename() {
		real, err := confineLibrary(dir, vdir, l, libDirs)
		if err != nil {
			return nil, err
		}
		libs = append(libs, real)
	}
	spec := &backend.ModelSpec{
		Name: r.Name, Version: v, ModelDir: dir, VersionDir: vdir, Repository: filepath.Dir(dir),
		Filename: filename, MaxBatchSize: int(r.MaxBatchSize),
		Inputs: r.beInputs, Outputs: r.beOutputs, Parameters: params, BackendConfig: beCfg,
		OpLibraries: libs, ConfigJSON: r.json,
		BatchInputs: r.batchInputs, BatchOutputs: r.batchOutputs,
		InstancePolicies: r.instancePolicies,
	}
	if seq := r.sched.Sequence; seq != nil {
		for _, c := range seq.Controls {
			spec.SequenceInputs = append(spec.SequenceInputs, backend.TensorSpec{Name: c.Input, DataType: c.DataType, Dims: []int64{1}})
		}
		spec.SequenceControls = len(seq.Controls)
		for _, st := range seq.States {
			spec.SequenceInputs = append(spec.SequenceInputs, backend.TensorSpec{Name: st.Input, DataType: st.DataType, Dims: st.Dims})
			if !st.Declared {
				spec.SequenceOutputs = append(spec.SequenceOutputs, backend.TensorSpec{Name: st.Output, DataType: st.DataType, Dims: st.Dims})
			}
		}
	}
	return spec, nil
}

// confineLibrary resolves an op_library_filename: inside the model
// directory, else inside one of libDirs. A name outside all of them keeps
// the model directory's error, which names no server path.
func confineLibrary(dir, vdir, name string, libDirs []string) (string, error) {
	const what = "model_operations.op_library_filename"
	real, err := backend.Confine(dir, vdir, name, what)
	if err == nil {
		return real, nil
	}
	for _, root := range libDirs {
		if p, lerr := backend.Confine(root, vdir, name, what); lerr == nil {
			return p, nil
		}
	}
	if len(libDirs) > 0 {
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", backend.Errorf(backend.InvalidArg, "%s '%s' resolves outside the model directory and the server's library directory; only files inside them may be named", what, name)
	}
	return "", err
}

// warmup materializes the model_warmup samples; input_data_file names a file
// in the model's warmup/ directory. A sequence model's samples may also
// carry its control and implicit state inputs: warmup requests go to the
// instances directly, past the sequence batcher that adds them to real
// requests, so Triton has the sample name them (its L0_warmup gives
// START and READY) and passes them on; a sample without them runs
// without them, as on Triton.
func (r *resolved) warmup(dir string) ([]scheduler.Warmup, error) {
	var out []scheduler.Warmup
	specs := r.inputs
	if seq := r.sched.Sequence; seq != nil {
		specs = slices.Clone(r.inputs)
		for _, c := range seq.Controls {
			specs = append(specs, backend.TensorSpec{Name: c.Input, DataType: c.DataType, Dims: []int64{1}, Optional: true})
		}
		for _, st := range seq.States {
			specs = append(specs, backend.TensorSpec{Name: st.Input, DataType: st.DataType, Dims: st.Dims, Optional: true})
		}
	}
	declared := make(map[string]struct{}, len(specs))
	for _, in := range specs {
		declared[in.Name] = struct{}{}
	}
	for i, w := range r.GetModelWarmup() {
		batch := int64(w.GetBatchSize())
		s := scheduler.Warmup{Name: w.GetName(), Count: int(w.GetCount())}
		for idx, spec := range specs {
			in, ok := w.GetInputs()[spec.Name]
			if !ok {
				if spec.Optional {
					continue
				}
				return nil, fmt.Errorf("model_warmup[%d] has no input '%s'", i, spec.Name)
			}
			dt := modelconfig.WireType(in.GetDataType())
			if dt != spec.DataType {
				return nil, fmt.Errorf("model_warmup[%d] input '%s' has data_type %s, the model declares %s", i, spec.Name, dt, spec.DataType)
			}
			shape := slices.Clone(in.GetDims())
			elems := int64(1)
			for _, d := range shape {
				if d < 0 {
					return nil, fmt.Errorf("model_warmup[%d] input '%s' has a variable dimension", i, spec.Name)
				}
				if d > 0 && elems > (1<<24)/d {
					return nil, fmt.Errorf("model_warmup[%d] input '%s' is too large", i, spec.Name)
				}
				elems *= d
			}
			if r.MaxBatchSize > 0 {
				shape = append([]int64{batch}, shape...)
			}
			one, err := warmupData(dir, in, dt, elems)
			if err != nil {
				return nil, fmt.Errorf("model_warmup[%d] input '%s': %w", i, spec.Name, err)
			}
			if r.MaxBatchSize > 0 && int64(len(one))*batch > 256<<20 {
				return nil, fmt.Errorf("model_warmup[%d] input '%s': batch of %d samples is too large", i, spec.Name, batch)
			}
			data := one
			for b := int64(1); b < batch && r.MaxBatchSize > 0; b++ {
				data = append(data, one...)
			}
			// Warmup samples go to the instances directly: in the backend's
			// shape, as requests reach it (control and state inputs, after
			// the config's inputs, have no reshape).
			if idx < len(r.inputs) && r.reshape.in[idx] != nil {
				if s, ok := convert(shape, spec.Dims, r.reshape.in[idx], r.MaxBatchSize > 0); ok {
					shape = s
				}
			}
			s.Request.Inputs = append(s.Request.Inputs, backend.Tensor{Name: spec.Name, DataType: dt, Shape: shape, Data: data})
		}
		for name := range w.GetInputs() {
			if _, ok := declared[name]; !ok {
				return nil, fmt.Errorf("model_warmup[%d] names unknown input '%s'", i, name)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

func warmupData(dir string, in *modelconfig.ModelWarmup_Input, dt backend.DataType, elems int64) ([]byte, error) {
	if elems > 1<<24 {
		return nil, fmt.Errorf("%d elements is too large for a warmup sample", elems)
	}
	switch src := in.GetInputDataType().(type) {
	case *modelconfig.ModelWarmup_Input_InputDataFile:
		if !filepath.IsLocal(src.InputDataFile) {
			return nil, fmt.Errorf("input_data_file %q must name a file inside the model's warmup directory", src.InputDataFile)
		}
		p, err := backend.Confine(dir, filepath.Join(dir, "warmup"), src.InputDataFile, "input_data_file")
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading warmup data %s: %w", src.InputDataFile, errors.Unwrap(err))
		}
		if dt != backend.Bytes && int64(len(data)) != elems*int64(dt.Size()) {
			return nil, fmt.Errorf("warmup/%s holds %d bytes, expected %d", src.InputDataFile, len(data), elems*int64(dt.Size()))
		}
		return data, nil
	case *modelconfig.ModelWarmup_Input_RandomData:
		if dt == backend.Bytes {
			break // Triton falls back to zero data for strings
		}
		return randomData(dt, elems), nil
	case *modelconfig.ModelWarmup_Input_ZeroData, nil:
	}
	if dt == backend.Bytes {
		return make([]byte, 4*elems), nil // elements of length 0
	}
	return make([]byte, elems*int64(dt.Size())), nil
}

// randomData fills floating types with values in [0,1) (raw random bits
// could be NaN) and integer types with random bits.
func randomData(dt backend.DataType, elems int64) []byte {
	size := dt.Size()
	b := make([]byte, elems*int64(size))
	for i := int64(0); i < elems; i++ {
		p := b[i*int64(size):]
		switch dt {
		case backend.FP32:
			binary.LittleEndian.PutUint32(p, math.Float32bits(rand.Float32()))
		case backend.FP64:
			binary.LittleEndian.PutUint64(p, math.Float64bits(rand.Float64()))
		case backend.FP16, backend.BF16:
			binary.LittleEndian.PutUint16(p, 0x3800) // 0.5 in FP16; a small positive number in BF16
		case backend.Bool:
			p[0] = byte(rand.IntN(2))
		default:
			for k := 0; k < size; k++ {
				p[k] = byte(rand.IntN(256))
			}
		}
	}
	return b
}

// versionDirs lists the numeric subdirectories of dir, ascending.
func versionDirs(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the model directory: %w", errors.Unwrap(err))
	}
	var vs []int64
	for _, e := range ents {
		v, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || v < 0 || strconv.FormatInt(v, 10) != e.Name() || !isDir(filepath.Join(dir, e.Name())) {
			continue
		}
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs, nil
}

// selectVersions applies a version policy to the available versions, as
// Triton's VersionsToLoad does: specific versions load only where their
// directory exists (the others are returned as missing, for the log),
// latest takes the highest num_versions (none for num_versions 0, which
// Triton then refuses as selecting no version), all takes every one. An
// empty selection is the caller's error.
func selectVersions(p *modelconfig.ModelVersionPolicy, available []int64) (versions, missing []int64) {
	switch c := p.GetPolicyChoice().(type) {
	case *modelconfig.ModelVersionPolicy_All_:
		return slices.Clone(available), nil
	case *modelconfig.ModelVersionPolicy_Specific_:
		want := slices.Clone(c.Specific.GetVersions())
		slices.Sort(want)
		for _, v := range slices.Compact(want) {
			if _, ok := slices.BinarySearch(available, v); ok {
				versions = append(versions, v)
			} else {
				missing = append(missing, v)
			}
		}
		return versions, missing
	}
	// latest, also the default policy
	n := 1
	if l, ok := p.GetPolicyChoice().(*modelconfig.ModelVersionPolicy_Latest_); ok {
		n = int(min(l.Latest.GetNumVersions(), uint32(len(available))))
	}
	if len(available) > n {
		return slices.Clone(available[len(available)-n:]), nil
	}
	return slices.Clone(available), nil
}
