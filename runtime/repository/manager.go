// Package repository reads Triton-layout model repositories and manages the
// lifecycle of the models in them.
//
// Layout: <repo>/<model>/config.pbtxt and numeric version directories
// <repo>/<model>/<version>/ holding the model file (model.pt for pytorch,
// model.py for python, or default_model_filename). Several repositories may
// be served at once; a model name must be unique across them.
//
// The Manager loads every model, builds each version's backend.ModelSpec and
// scheduler, and keeps a state and reason per model and version (READY,
// LOADING, UNLOADING, UNAVAILABLE) for the repository index. A model that
// fails to load never stops the others. Load, Unload and Get are the verbs a
// model-control frontend (poll / explicit mode) builds on.
package repository

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
	"github.com/tritonbuild/tritonbuild/runtime/status"
)

// State is a model version's lifecycle state as shown by the repository index.
type State string

// States, with Triton's names.
const (
	Ready       State = "READY"
	Loading     State = "LOADING"
	Unloading   State = "UNLOADING"
	Unavailable State = "UNAVAILABLE"
)

// Options configure a Manager.
type Options struct {
	// Repositories are the model repository directories.
	Repositories []string
	// Backends maps a backend name ("pytorch", "python") to its implementation.
	Backends map[string]backend.Backend
	// BackendConfig holds --backend-config settings per backend name.
	BackendConfig map[string]map[string]string
	// HostPolicies holds each host policy's settings
	// (--host-policy=<policy>,cpu-cores=<list> and numa-node=<node>). An
	// instance group's host_policy names its policy; without one, KIND_CPU
	// groups fall under "cpu" and KIND_MODEL groups under "model", as on
	// Triton.
	HostPolicies map[string]backend.HostPolicy
	// StrictModelConfig requires a config.pbtxt for every model and turns
	// auto-completion off. When false, a backend that implements
	// backend.AutoCompleter completes the configuration of each of its models, and
	// a model without config.pbtxt is accepted if its backend (guessed
	// from the model file in its highest version directory) does
	// (backend.AutoCompleter).
	StrictModelConfig bool
	// StrictInputShapes refuses, as Triton does, a request whose inputs
	// carry one more leading dimension than a max_batch_size 0 model
	// declares. By default such a request is passed through with its full
	// shape: the field report's client sends [2,10] to dims [10] and
	// expects (2,5) back, and its model.py handles the extra dimension.
	StrictInputShapes bool
	// MaxResponseSize bounds the output bytes of one response
	// (--max-response-size): requests whose outputs the config sizes
	// beyond it are refused before they run, and responses that turn out
	// larger are refused before a frontend renders them. 0 means
	// DefaultMaxResponseSize; negative means no bound.
	MaxResponseSize int64
	// MaxConfigSize bounds a model configuration in bytes
	// (--max-config-size): config.pbtxt and the load API's override. 0
	// means DefaultMaxConfigSize.
	MaxConfigSize int64
	// UnloadTimeout bounds how long an unload waits for the requests a
	// model accepted (the rest are answered with an error); 0 means
	// DefaultUnloadTimeout. Server shutdown has its own bound, the context
	// given to Close.
	UnloadTimeout time.Duration
	// Observer, when not nil, gives each loaded version's scheduler the
	// observer of its successful requests' durations (latency summaries).
	Observer func(model string, version int64) scheduler.Observer
	// Cache is the response cache (--cache-config) of the models whose
	// configuration enables response_cache; nil caches nothing.
	Cache *scheduler.Cache
	// RateLimiter (--rate-limit=execution_count) makes instances hold
	// their instance group's rate_limiter resources while they execute;
	// nil (--rate-limit=off) runs them as soon as they are free.
	RateLimiter *scheduler.RateLimiter
	// LibraryDirs are directories, besides the model directory, from which
	// a model's model_operations.op_library_filename may load libraries:
	// the server's own install tree (cmd/tritonserver passes its lib/),
	// where whoever installed the server put them, not a load request. A
	// library anywhere else is refused like any file outside the model.
	LibraryDirs []string
	// MaxOverrideFilesSize bounds the model files one load request may
	// carry (Triton's "file:<path>" load parameters, pb_utils.load_model's
	// files); 0 means DefaultMaxOverrideFilesSize.
	MaxOverrideFilesSize int64
	// OverrideDir is where the directories of models loaded from such
	// files are made; "" means the system's temporary directory. Each is
	// removed when its model unloads or loads from elsewhere.
	OverrideDir string
	// Logger receives load and unload events; nil discards them.
	Logger *slog.Logger
}

// DefaultMaxResponseSize is the default of Options.MaxResponseSize: 1 GiB,
// half of what one gRPC message can carry.
const DefaultMaxResponseSize = 1 << 30

// DefaultUnloadTimeout is the default of Options.UnloadTimeout, Triton's
// default --exit-timeout-secs.
const DefaultUnloadTimeout = 30 * time.Second

// DefaultMaxConfigSize is the default of Options.MaxConfigSize: 16 MiB,
// room for a hundred thousand parameters.
const DefaultMaxConfigSize = 16 << 20

// VersionStatus is one version's state.
type VersionStatus struct {
	Version int64
	State   State
	Reason  string
}

// IndexEntry is one row of the repository index: a model version, or a
// model with Version "" when it failed before any version was known.
type IndexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   State  `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

type versionEntry struct {
	state  State
	reason string
	model  *Model // non-nil when READY
}

type modelEntry struct {
	reason   string // model-level failure (config, versions); "" otherwise
	versions map[int64]*versionEntry
	// stamp summarizes the model directory as of the last load attempt
	// (see dirStamp); polling reloads the model when it changes.
	stamp string
	// awaitsSteps marks an ensemble unloaded, or refused, because one of
	// its step models was not available: polling loads it again, its
	// directory unchanged, once every step model is ready.
	awaitsSteps bool
	// invalidSteps are the step models of an ensemble unloaded because a
	// reload of one of them made it invalid (revalidateDependents): a
	// later load of one of them loads it again, as Triton reloads the
	// ensembles downstream of a model it (re)loads.
	invalidSteps []string
}

// Manager owns the models of the repositories. It is safe for concurrent use.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu     sync.RWMutex
	models map[string]*modelEntry
	// overrides holds the directories written for loads of a model with
	// override files that some version of it may still serve from (see
	// override.go).
	overrides map[string][]string

	// closed is set by Close: loads that have not started by then are
	// refused, so that none leaves a model running after Close.
	closed bool

	// locks serialize the loads and unloads of one model, so that reloads
	// do not interleave, while other models load beside it: a model stuck
	// unloading holds only its own lock. Entries exist only for names that
	// have a model directory or were loaded from override files, from the
	// first load on, and are never removed: an entry with no model entry
	// is a first load in progress (or one that failed before its model
	// directory was known).
	locksMu sync.Mutex
	locks   map[string]*sync.Mutex
	pollMu  sync.Mutex // one Poll at a time
}

// lockModel takes the lock of model name and returns its release. Waiting
// for another load or unload of the model is logged, so that one that
// seems stuck says what it waits for.
func (m *Manager) lockModel(name string) func() {
	m.locksMu.Lock()
	l := m.locks[name]
	if l == nil {
		l = &sync.Mutex{}
		m.locks[name] = l
	}
	m.locksMu.Unlock()
	if !l.TryLock() {
		m.log.Info("waiting for another load or unload of the model", "model", name)
		l.Lock()
	}
	return l.Unlock
}

// lockedBefore reports whether model name has been locked by a load or
// unload (lockModel), one in progress included.
func (m *Manager) lockedBefore(name string) bool {
	m.locksMu.Lock()
	defer m.locksMu.Unlock()
	return m.locks[name] != nil
}

// New returns a Manager; it loads nothing until LoadAll or Load.
func New(opts Options) (*Manager, error) {
	if len(opts.Repositories) == 0 {
		return nil, errors.New("no model repository given")
	}
	for _, r := range opts.Repositories {
		fi, err := os.Stat(r)
		if err != nil {
			return nil, fmt.Errorf("model repository: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("model repository %s is not a directory", r)
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{opts: opts, log: log, models: map[string]*modelEntry{}, locks: map[string]*sync.Mutex{},
		overrides: map[string][]string{}}, nil
}

// DuplicateError is a model name found in more than one repository: that
// model cannot load, the others can.
type DuplicateError struct {
	Name         string
	Repositories []string
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("model '%s' appears in %d repositories (%s); rename or remove all but one", e.Name, len(e.Repositories), strings.Join(e.Repositories, ", "))
}

// Scan lists the model names in the repositories, sorted, duplicates
// included (find reports them as *DuplicateError).
func (m *Manager) Scan() ([]string, error) {
	seen := map[string]bool{}
	for _, repo := range m.opts.Repositories {
		ents, err := os.ReadDir(repo)
		if err != nil {
			return nil, fmt.Errorf("reading model repository: %w", err)
		}
		for _, e := range ents {
			if !isDir(filepath.Join(repo, e.Name())) || e.Name()[0] == '.' {
				continue
			}
			seen[e.Name()] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p) // follows symlinks, as model repositories often use them
	return err == nil && fi.IsDir()
}

// LoadAll loads every model of the repositories. Models that fail are kept
// UNAVAILABLE with their reason; the returned error joins their failures
// (nil when all loaded), so the caller can apply --exit-on-error.
func (m *Manager) LoadAll(ctx context.Context) error {
	names, err := m.Scan()
	if err != nil {
		return err
	}
	names = m.loadOrder(names)
	var errs []error
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			// A shutdown while loading stops here rather than starting
			// the remaining models only to unload them.
			return errors.Join(append(errs, fmt.Errorf("loading models: %w", err))...)
		}
		// In order, so an ensemble's models are loaded (or failed) by now.
		if err := m.loadOne(ctx, n, nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// loadOrder puts ensembles after the models they are made of (Triton
// loads dependencies first), an ensemble of ensembles after those.
func (m *Manager) loadOrder(names []string) []string {
	var plain, ensembles []string
	for _, n := range names {
		if m.isEnsemble(n) {
			ensembles = append(ensembles, n)
		} else {
			plain = append(plain, n)
		}
	}
	return append(plain, m.ensembleOrder(ensembles)...)
}

// Load loads (or reloads) the model called name: it reads its config, loads
// the versions the version policy selects, makes them servable, then unloads
// versions no longer selected or replaced. On error the model's previously
// loaded versions keep serving and the failure is recorded as its reason.
func (m *Manager) Load(ctx context.Context, name string) error {
	return m.LoadModel(ctx, name, nil)
}

// LoadModel is Load with an optional configuration override: configJSON,
// when not nil, is a model configuration in Triton's JSON form used instead
// of config.pbtxt for this load (the "config" parameter of Triton's load
// request).
//
// Loading an ensemble first loads its composing models that have no ready
// version (loadComposing), as Triton does.
func (m *Manager) LoadModel(ctx context.Context, name string, configJSON []byte) error {
	return m.LoadModelFiles(ctx, name, configJSON, nil)
}

// LoadModelFiles is LoadModel with file overrides, as Triton's load
// request takes them ("file:<version>/<name>" parameters): files maps paths
// inside the model directory to their contents and, when not empty, makes
// the model load from a directory holding only those files, with
// configJSON (then required) as its configuration, whether or not the
// repositories hold the model. A later load without files serves the
// repository's directory again.
func (m *Manager) LoadModelFiles(ctx context.Context, name string, configJSON []byte, files map[string][]byte) error {
	if len(files) == 0 {
		if _, err := m.find(name); err == nil {
			m.loadComposing(ctx, name, configJSON, nil)
		}
		err := m.loadOne(ctx, name, configJSON)
		m.revalidateDependents(ctx, name)
		return err
	}
	if configJSON == nil {
		return backend.Errorf(backend.InvalidArg, "failed to load '%s': a config override must be given with override files", name)
	}
	if filepath.Base(name) != name || name == "." || name == ".." || name == "" {
		return backend.Errorf(backend.InvalidArg, "invalid model name '%s'", name)
	}
	dir, err := m.writeOverride(name, files)
	if err != nil {
		return err
	}
	unlock := m.lockModel(name)
	// Versions that served before keep serving from their directory, and
	// the new one stays as long as a version loaded from it (load drops
	// it if none did).
	m.addOverride(name, dir)
	err = m.load(ctx, name, configJSON, dir)
	unlock()
	m.revalidateDependents(ctx, name)
	return err
}

// loadOne is LoadModel without the composing models.
func (m *Manager) loadOne(ctx context.Context, name string, configJSON []byte) error {
	if _, err := m.find(name); err != nil {
		// Nothing to load: no lock, and (for a name nobody knows) no index
		// entry either.
		m.recordFindFailure(name, err)
		return err
	}
	defer m.lockModel(name)()
	return m.load(ctx, name, configJSON, "")
}

// load loads model name from dir, or from its directory in the
// repositories when dir is "". Whatever the outcome, the override
// directories no version serves from any more go afterwards. The caller
// holds the model's lock.
func (m *Manager) load(ctx context.Context, name string, configJSON []byte, dir string) error {
	defer m.dropOverrides(name)
	m.mu.RLock()
	closed := m.closed
	m.mu.RUnlock()
	if closed {
		return backend.Errorf(backend.Unavailable, "model '%s' not loaded: the server is shutting down", name)
	}
	var err error
	if dir == "" {
		dir, err = m.find(name)
	}
	if err != nil {
		m.recordFindFailure(name, err)
		return err
	}
	// The stamp is taken before reading anything, so that a change made
	// while loading is seen by the next poll.
	stamp := dirStamp(dir)
	cfg, versions, err := m.prepare(ctx, name, dir, configJSON)
	if err != nil {
		failure := fmt.Errorf("model '%s': %w", name, err)
		m.setModelFailure(name, failure, stamp)
		if missing := (*stepUnavailableError)(nil); errors.As(err, &missing) {
			m.awaitSteps(name)
		}
		m.log.Error("model load failed", "model", name, "err", failure)
		if stage := (loadStageError{}); errors.As(err, &stage) {
			return loadFailure(name, err.Error()+"\n")
		}
		return pollFailure(name, err)
	}

	fresh := &modelEntry{versions: map[int64]*versionEntry{}, stamp: stamp}
	m.mu.Lock()
	old := m.models[name]
	for _, v := range versions {
		fresh.versions[v] = &versionEntry{state: Loading}
	}
	// While loading, versions already loaded keep serving (a reload
	// replaces them only once the new copy is ready).
	if old != nil {
		for v, ve := range old.versions {
			if ve.model != nil {
				fresh.versions[v] = ve
			}
		}
	}
	m.models[name] = fresh
	m.mu.Unlock()

	var errs []error
	var reasons strings.Builder // Triton's, per version that failed
	loaded := map[int64]*Model{}
	for _, v := range versions {
		mod, err := m.loadVersion(ctx, cfg, dir, v)
		if err != nil {
			fmt.Fprintf(&reasons, "version %d is at %s state: %v;", v, Unavailable, err)
			err = fmt.Errorf("model '%s' version %d: %w", name, v, err)
			errs = append(errs, err)
			m.log.Error("model version load failed", "model", name, "version", v, "err", err)
			m.mu.Lock()
			if ve := fresh.versions[v]; ve == nil || ve.model == nil {
				fresh.versions[v] = &versionEntry{state: Unavailable, reason: err.Error()}
			}
			m.mu.Unlock()
			continue
		}
		loaded[v] = mod
	}

	// Swap in the new versions, then retire what they replace or what the
	// policy no longer selects.
	var retire []*Model
	m.mu.Lock()
	for v, mod := range loaded {
		if ve := fresh.versions[v]; ve != nil && ve.model != nil {
			retire = append(retire, ve.model)
		}
		fresh.versions[v] = &versionEntry{state: Ready, model: mod}
	}
	// Versions the policy no longer selects retire only once every
	// selected one loaded: a broken new version leaves the versions that
	// serve serving (Triton's lifecycle), until a load succeeds.
	if len(errs) == 0 {
		for v, ve := range fresh.versions {
			if !slices.Contains(versions, v) && ve.model != nil {
				retire = append(retire, ve.model)
				delete(fresh.versions, v)
			}
		}
	}
	m.mu.Unlock()
	for _, mod := range retire {
		if err := mod.Scheduler.Close(ctx); err != nil {
			m.log.Warn("closing replaced model version", "model", name, "version", mod.Version, "err", err)
		}
	}
	for v := range loaded {
		m.log.Info("model version ready", "model", name, "version", v)
	}
	if len(errs) > 0 {
		return loadFailure(name, reasons.String()+"\n")
	}
	return nil
}

// loadFailure is a load request's answer when the model's configuration
// passed but creating its versions failed, as Triton's model repository
// manager gives it (LoadUnloadModels): INVALID_ARG, "load failed for model
// 'M': " and the reasons, each version's as its ModelLifeCycle words it
// ("version V is at UNAVAILABLE state: ...;"), ending in a newline.
func loadFailure(name, reasons string) error {
	return backend.Errorf(backend.InvalidArg, "load failed for model '%s': %s", name, reasons)
}

// pollFailure is a load request's answer when the model cannot be read
// from the repositories or its configuration is refused before any
// version loads: Triton's poll of the model fails, and its load request
// answers INTERNAL "failed to load 'M', failed to poll from model
// repository", the reason going only to its log. Ours follows with the
// reason, which the index also shows. A limit of this server's own (a
// configuration over --max-config-size) or a setting it does not
// implement keeps its code, which Triton, having neither, cannot give.
func pollFailure(name string, err error) error {
	switch status.Code(err) {
	case backend.TooLarge, backend.Unsupported:
		return err
	}
	return backend.Errorf(backend.Internal, "failed to load '%s', failed to poll from model repository: %w", name, err)
}

// recordFindFailure records why a model's directory could not be used: a
// name in two repositories makes that model unavailable with the reason; a
// name with no directory (or an invalid one) leaves the index and the
// readiness as they were, since there is no model to report on.
func (m *Manager) recordFindFailure(name string, err error) {
	var dup *DuplicateError
	if errors.As(err, &dup) {
		m.setModelFailure(name, err, "")
	}
}

func (m *Manager) setModelFailure(name string, err error, stamp string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.models[name]
	if e == nil {
		e = &modelEntry{versions: map[int64]*versionEntry{}}
		m.models[name] = e
	}
	e.reason = err.Error()
	e.stamp = stamp
}

// Unload stops serving every version of the model, draining accepted
// requests until ctx ends. The model stays in the index as UNAVAILABLE
// with reason "unloaded".
//
// The ensembles loaded with a step on the model are unloaded after it, as
// Triton does ("ensemble 'E' contains models that are not available"),
// rather than left READY to fail every request.
func (m *Manager) Unload(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, m.unloadTimeout())
	defer cancel()
	m.mu.RLock()
	known := m.models[name] != nil
	m.mu.RUnlock()
	err := func() error {
		// A first load in progress has no model entry yet but holds the
		// lock: the unload waits for it and then unloads what it loaded,
		// as Triton serializes the loads and unloads of a model.
		if known || m.lockedBefore(name) {
			defer m.lockModel(name)()
		}
		return m.unload(ctx, name)
	}()
	m.unloadDependents(ctx, name)
	return err
}

// unloadDependents unloads the loaded ensembles with a step on model name,
// now unloaded, marking them to load again when their step models are
// back (modelEntry.awaitsSteps).
func (m *Manager) unloadDependents(ctx context.Context, name string) {
	for _, ens := range m.dependentEnsembles(name) {
		m.log.Info("unloading ensemble: it contains models that are not available", "model", ens, "unavailable", name)
		if uerr := m.Unload(ctx, ens); uerr != nil {
			m.log.Warn("unloading an ensemble of an unloaded model", "model", ens, "err", uerr)
		}
		m.awaitSteps(ens)
	}
}

// awaitSteps marks the entry of the ensemble called name as waiting for its
// step models (modelEntry.awaitsSteps).
func (m *Manager) awaitSteps(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.models[name]; e != nil {
		e.awaitsSteps = true
	}
}

// UnloadModel is Unload with Triton's unload_dependents: when dependents
// is set and name is an ensemble, its composing models that no other
// loaded ensemble uses are unloaded after it, those of composing
// ensembles included.
func (m *Manager) UnloadModel(ctx context.Context, name string, dependents bool) error {
	steps := m.composing(name)
	err := m.Unload(ctx, name)
	if !dependents {
		return err
	}
	for _, s := range steps {
		if _, gerr := m.Get(s, -1); gerr != nil || len(m.dependentEnsembles(s)) > 0 {
			continue // not loaded, or still part of another ensemble
		}
		err = errors.Join(err, m.UnloadModel(ctx, s, true))
	}
	return err
}

// composing lists the step models of the loaded ensemble called name (none
// when it is not a loaded ensemble), sorted, each once.
func (m *Manager) composing(name string) []string {
	mod, err := m.Get(name, -1)
	if err != nil || mod.Platform != ensemblePlatform {
		return nil
	}
	var out []string
	for _, s := range mod.Config.GetEnsembleScheduling().GetStep() {
		out = append(out, s.GetModelName())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// dependentEnsembles are the loaded ensembles with a step on model name.
// Cycles of ensembles never load, so following them from Unload ends.
func (m *Manager) dependentEnsembles(name string) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []string
	for n, e := range m.models {
		for _, ve := range e.versions {
			if ve.model == nil || ve.state != Ready || ve.model.Platform != ensemblePlatform {
				continue
			}
			if slices.ContainsFunc(ve.model.Config.GetEnsembleScheduling().GetStep(), func(s *modelconfig.ModelEnsembling_Step) bool { return s.GetModelName() == name }) {
				out = append(out, n)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

func (m *Manager) unloadTimeout() time.Duration {
	if m.opts.UnloadTimeout > 0 {
		return m.opts.UnloadTimeout
	}
	return DefaultUnloadTimeout
}

func (m *Manager) unload(ctx context.Context, name string) error {
	m.mu.Lock()
	e := m.models[name]
	if e == nil {
		m.mu.Unlock()
		return backend.Errorf(backend.NotFound, "failed to unload '%s', no version is available", name)
	}
	e.awaitsSteps = false // unloaded on its own account; Unload marks a dependent again
	var closing []*Model
	for _, ve := range e.versions {
		if ve.model != nil {
			closing = append(closing, ve.model)
			ve.state = Unloading
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, mod := range closing {
		if err := mod.Scheduler.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	m.mu.Lock()
	for v := range e.versions {
		e.versions[v] = &versionEntry{state: Unavailable, reason: "unloaded"}
	}
	e.reason = ""
	m.mu.Unlock()
	m.dropOverrides(name)
	m.log.Info("model unloaded", "model", name)
	return errors.Join(errs...)
}

// Close unloads every model, all at once, within ctx (see
// scheduler.Scheduler.Close for what happens to requests still running
// when it ends). Loads in progress are waited for and what they loaded is
// unloaded; loads that start afterwards are refused.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	known := make(map[string]bool, len(m.models))
	for n := range m.models {
		known[n] = true
	}
	m.mu.Unlock()
	// Set closed first: a load that takes its lock after the names are
	// collected sees it and loads nothing.
	m.locksMu.Lock()
	names := slices.Collect(maps.Keys(m.locks))
	m.locksMu.Unlock()
	for n := range known {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := m.Unload(ctx, n)
			// A name only locked before whose load failed before the
			// model was known has nothing to unload.
			if !known[n] && status.Code(err) == backend.NotFound {
				err = nil
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Get returns a READY version of the model; version < 0 means the highest
// ready version. Errors are Triton's (runtime/status): NotFound for an
// unknown model or version and for a model without a ready version,
// Unavailable for a version that exists but is not ready.
func (m *Manager) Get(name string, version int64) (*Model, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e := m.models[name]
	if e == nil {
		return nil, status.UnknownModel.New(name)
	}
	if version < 0 {
		var best *Model
		for _, ve := range e.versions {
			if ve.state == Ready && (best == nil || ve.model.Version > best.Version) {
				best = ve.model
			}
		}
		if best == nil {
			return nil, status.NoAvailableVersion.New(name)
		}
		return best, nil
	}
	ve := e.versions[version]
	if ve == nil {
		return nil, status.UnknownVersion.New(name, version)
	}
	if ve.state != Ready {
		return nil, status.VersionNotReady.New(name, version)
	}
	return ve.model, nil
}

// Versions returns the states of a model's versions, ascending, and the
// model-level failure reason if any. ok is false for an unknown model.
func (m *Manager) Versions(name string) (vs []VersionStatus, reason string, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e := m.models[name]
	if e == nil {
		return nil, "", false
	}
	for v, ve := range e.versions {
		vs = append(vs, VersionStatus{Version: v, State: ve.state, Reason: ve.reason})
	}
	slices.SortFunc(vs, func(a, b VersionStatus) int { return cmp.Compare(a.Version, b.Version) })
	return vs, e.reason, true
}

// Ready reports whether every known model can serve: it has a READY
// version whose instances are all healthy, or was unloaded on purpose
// (Triton's strict readiness). A model whose reload failed while an
// earlier version serves counts as ready.
func (m *Manager) Ready() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, e := range m.models {
		if !e.ready() {
			return false
		}
	}
	return true
}

func (e *modelEntry) ready() bool {
	unloaded := len(e.versions) > 0
	for _, ve := range e.versions {
		if ve.state == Ready && ve.model.Scheduler.Healthy() == nil {
			return true
		}
		unloaded = unloaded && ve.reason == "unloaded"
	}
	return unloaded && e.reason == ""
}

// Models returns every READY model version, by name then version.
func (m *Manager) Models() []*Model {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*Model
	for _, e := range m.models {
		for _, ve := range e.versions {
			if ve.model != nil && ve.state == Ready {
				out = append(out, ve.model)
			}
		}
	}
	slices.SortFunc(out, func(a, b *Model) int {
		if a.Name != b.Name {
			if a.Name < b.Name {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Version, b.Version)
	})
	return out
}

// Index lists every model the manager knows, with each version's state, and
// also models present in the repositories that were never loaded. With
// readyOnly only READY versions are listed.
func (m *Manager) Index(readyOnly bool) []IndexEntry {
	names, _ := m.Scan()
	m.mu.RLock()
	defer m.mu.RUnlock()
	known := map[string]bool{}
	var out []IndexEntry
	for name, e := range m.models {
		known[name] = true
		if len(e.versions) == 0 || e.reason != "" {
			if !readyOnly {
				out = append(out, IndexEntry{Name: name, State: Unavailable, Reason: e.reason})
			}
		}
		for v, ve := range e.versions {
			if readyOnly && ve.state != Ready {
				continue
			}
			out = append(out, IndexEntry{Name: name, Version: strconv.FormatInt(v, 10), State: ve.state, Reason: ve.reason})
		}
	}
	if !readyOnly {
		for _, n := range names {
			if !known[n] {
				out = append(out, IndexEntry{Name: n})
			}
		}
	}
	slices.SortFunc(out, func(a, b IndexEntry) int {
		if a.Name != b.Name {
			if a.Name < b.Name {
				return -1
			}
			return 1
		}
		av, _ := strconv.ParseInt(a.Version, 10, 64)
		bv, _ := strconv.ParseInt(b.Version, 10, 64)
		return cmp.Compare(av, bv)
	})
	return out
}

// find locates the model directory of name in the repositories.
func (m *Manager) find(name string) (string, error) {
	var found []string
	for _, repo := range m.opts.Repositories {
		p := filepath.Join(repo, name)
		if filepath.Base(p) != name || name == "." || name == ".." {
			return "", backend.Errorf(backend.InvalidArg, "invalid model name '%s'", name)
		}
		if isDir(p) {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		// Triton's answer to a load of a model no repository holds.
		return "", backend.Errorf(backend.Internal, "failed to load '%s', failed to poll from model repository", name)
	case 1:
		// The directory as the kernel sees it: the files its config names
		// must resolve inside it (backend.Confine).
		abs, err := filepath.Abs(found[0])
		if err == nil {
			abs, err = filepath.EvalSymlinks(abs)
		}
		if err != nil {
			return "", backend.Errorf(backend.Unavailable, "model '%s': its directory cannot be resolved", name)
		}
		return abs, nil
	}
	dup := &DuplicateError{Name: name}
	for _, p := range found {
		dup.Repositories = append(dup.Repositories, filepath.Base(filepath.Dir(p)))
	}
	return "", backend.Errorf(backend.Unavailable, "%w", dup)
}

func (m *Manager) maxResponse() int64 {
	switch n := m.opts.MaxResponseSize; {
	case n == 0:
		return DefaultMaxResponseSize
	case n < 0:
		return 0
	default:
		return n
	}
}

// loadVersion builds the spec and scheduler of one version.
func (m *Manager) loadVersion(ctx context.Context, cfg *resolved, dir string, v int64) (*Model, error) {
	vname := strconv.FormatInt(v, 10)
	vdir, err := backend.Confine(dir, dir, vname, "version directory")
	if err != nil {
		return nil, err
	}
	if !isDir(vdir) {
		return nil, fmt.Errorf("version directory %s not found", vname)
	}
	spec, err := cfg.spec(dir, vdir, v, m.opts.BackendConfig[cfg.backendName], m.opts.LibraryDirs)
	if err != nil {
		return nil, err
	}
	warm, err := cfg.warmup(dir)
	if err != nil {
		return nil, err
	}
	sc := cfg.sched
	if m.opts.Observer != nil {
		sc.Observer = m.opts.Observer(cfg.Name, v)
	}
	sc.Version = v
	sc.Warmup = warm
	if sc.Sequence != nil {
		if sc.Sequence, err = sequenceStates(sc.Sequence, dir, cfg.stateFiles); err != nil {
			return nil, err
		}
	}
	labels, err := loadLabels(dir, cfg.GetOutput())
	if err != nil {
		return nil, err
	}
	s, err := scheduler.New(ctx, cfg.backend, spec, sc)
	if err != nil {
		return nil, err
	}
	mod := &Model{
		Name: cfg.Name, Version: v, Backend: cfg.backendName, Platform: cfg.platform,
		Config: cfg.ModelConfig, ConfigJSON: spec.ConfigJSON, Spec: spec, Scheduler: s,
		Inputs: cfg.inputs, Outputs: cfg.outputs, reshape: cfg.reshape,
		leadingDim: !m.opts.StrictInputShapes, maxResponse: m.maxResponse(), labels: labels,
	}
	mod.index()
	return mod, nil
}
