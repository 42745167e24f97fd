package repository

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// configOverride parses a load request's JSON configuration. Field names
// may be Triton's (max_batch_size) or protobuf's JSON names (maxBatchSize).
func configOverride(name string, data []byte) (*modelconfig.ModelConfig, error) {
	cfg := &modelconfig.ModelConfig{}
	if err := protojson.Unmarshal(data, cfg); err != nil {
		return nil, backend.Errorf(backend.InvalidArg, "load parameter 'config' of model '%s' is not a valid model configuration: %w", name, err)
	}
	switch cfg.GetName() {
	case "":
		cfg.Name = name
	case name:
	default:
		return nil, backend.Errorf(backend.InvalidArg, "load parameter 'config' names model '%s', not '%s'", cfg.GetName(), name)
	}
	return cfg, nil
}

// dirStamp summarizes a model directory for change detection: every
// entry's path, type, size and modification time, plus the content of
// config.pbtxt (a rewrite within the file system's timestamp granularity
// that keeps the size must still count as a change). Unreadable parts
// contribute their error, so that they change the stamp when they heal.
func dirStamp(dir string) string {
	h := sha256.New()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if err != nil {
			fmt.Fprintf(h, "%s\x00error %v\x00", rel, err)
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			fmt.Fprintf(h, "%s\x00error %v\x00", rel, err)
			return nil
		}
		fmt.Fprintf(h, "%s\x00%v\x00%d\x00%d\x00", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if rel == ConfigFile {
			data, err := os.ReadFile(p)
			fmt.Fprintf(h, "%x\x00%v\x00", sha256.Sum256(data), err)
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))
}

// Poll brings the served models in line with the repositories (Triton's
// poll model-control mode): it loads models that appeared, reloads models
// whose directory changed (new or removed version directories, edited
// configuration or model files) and unloads models whose directory is gone,
// dropping them from the index. Reloads keep the previous versions serving
// until the new ones are ready. The returned error joins the failures.
func (m *Manager) Poll(ctx context.Context) error {
	names, err := m.Scan()
	if err != nil {
		return err
	}
	m.pollMu.Lock()
	defer m.pollMu.Unlock()
	present := make(map[string]bool, len(names))
	var errs []error
	// In LoadAll's order: an ensemble polled before its models would fail
	// and, its directory unchanged, never be tried again.
	for _, name := range m.loadOrder(names) {
		present[name] = true
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("polling the repositories: %w", err))...)
		}
		dir, err := m.find(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		stamp := dirStamp(dir)
		m.mu.RLock()
		e := m.models[name]
		unchanged := e != nil && e.stamp == stamp
		awaits := e != nil && e.awaitsSteps
		m.mu.RUnlock()
		// An ensemble unloaded or refused for a missing step model loads
		// again once its models are back (loadOrder polled them first).
		retry := unchanged && awaits && m.stepsReady(name)
		if unchanged && !retry {
			continue
		}
		switch {
		case retry:
			m.log.Info("the models of the ensemble are available again, loading it", "model", name)
		case e != nil:
			m.log.Info("model changed in the repository, reloading", "model", name)
		}
		unlock := m.lockModel(name)
		err = m.load(ctx, name, nil, "")
		unlock()
		m.revalidateDependents(ctx, name)
		if err != nil {
			errs = append(errs, err)
		}
	}
	m.mu.RLock()
	var gone []string
	for name := range m.models {
		if !present[name] {
			gone = append(gone, name)
		}
	}
	m.mu.RUnlock()
	for _, name := range gone {
		m.log.Info("model removed from the repository, unloading", "model", name)
		if err := m.Unload(ctx, name); err != nil {
			errs = append(errs, err)
		}
		m.mu.Lock()
		delete(m.models, name)
		m.mu.Unlock()
	}
	return errors.Join(errs...)
}

// ParseVersion parses a model version as the protocols carry it; ""
// means -1, the highest ready version.
func ParseVersion(name, version string) (int64, error) {
	if version == "" {
		return -1, nil
	}
	v, err := strconv.ParseInt(version, 10, 64)
	if err != nil || v < 0 {
		return 0, backend.Errorf(backend.InvalidArg, "invalid model version '%s' for model '%s'", version, name)
	}
	return v, nil
}

// Resolve returns the model version a request names (version as on the
// wire, "" for the highest ready one). Errors are *backend.Error.
func (m *Manager) Resolve(name, version string) (*Model, error) {
	if name == "" {
		return nil, backend.Errorf(backend.InvalidArg, "a model name is required")
	}
	v, err := ParseVersion(name, version)
	if err != nil {
		return nil, err
	}
	return m.Get(name, v)
}

// ModelReady answers a model readiness request (HTTP .../ready, gRPC
// ModelReady): the version named (the highest READY one for "") is READY
// and none of its instances reports that it cannot serve (a python stub
// that crashed and cannot restart, a forward stuck past its timeout; see
// scheduler.HealthReporter). It turns ready again when they recover.
func (m *Manager) ModelReady(name, version string) bool {
	mod, err := m.Resolve(name, version)
	return err == nil && mod.Scheduler.Healthy() == nil
}

// ReadyVersions lists the READY versions of a model, ascending, as strings.
func (m *Manager) ReadyVersions(name string) []string {
	vs, _, _ := m.Versions(name)
	var out []string
	for _, v := range vs {
		if v.State == Ready {
			out = append(out, strconv.FormatInt(v.Version, 10))
		}
	}
	return out
}

// StatsModels selects the model versions a statistics request names: every
// ready version of every model (name ""), of one model (version ""), or
// one version.
func (m *Manager) StatsModels(name, version string) ([]*Model, error) {
	if name == "" {
		return m.Models(), nil
	}
	if version != "" {
		mod, err := m.Resolve(name, version)
		if err != nil {
			return nil, err
		}
		return []*Model{mod}, nil
	}
	var out []*Model
	for _, mod := range m.Models() {
		if mod.Name == name {
			out = append(out, mod)
		}
	}
	if len(out) == 0 {
		if _, err := m.Get(name, -1); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// maxRetargets bounds how often one request follows a model to its
// replacement: each retarget needs a reload finishing in between.
const maxRetargets = 3

// Infer validates req against mod (resolved for version, -1 for the highest
// ready one) and runs it. The returned model is the one that answered.
//
// In-flight rule for reloads and unloads: a request accepted by a version's
// scheduler is always answered by that version (unloading drains them). A
// request that resolved a version just before a reload retired it is sent
// to the version that replaced it, so a reload fails no request; after an
// unload began, requests get Unavailable (the model exists but has no
// ready version), and NotFound only for names the server never knew.
// Requests failing validation count in the model's failure statistics.
func (m *Manager) Infer(ctx context.Context, mod *Model, version int64, req *backend.Request, start time.Time) (*Model, *backend.Response, error) {
	for retargets := 0; ; retargets++ {
		if err := mod.Validate(req); err != nil {
			mod.Scheduler.RecordFailure(start)
			return mod, nil, err
		}
		if req.Trace != nil {
			req.Trace.Activity("QUEUE_START", time.Now())
		}
		resp, err := mod.Scheduler.Infer(ctx, mod.forBackend(req))
		if err == nil {
			if resp.Err != nil {
				return mod, nil, resp.Err
			}
			if err := mod.fromBackend(resp); err != nil {
				return mod, nil, err
			}
			if err := mod.CheckResponse(resp); err != nil {
				return mod, nil, err
			}
			return mod, resp, nil
		}
		if retargets < maxRetargets && ctx.Err() == nil && mod.Scheduler.Closing() {
			if next, gerr := m.Get(mod.Name, version); gerr == nil && next != mod {
				mod = next
				continue
			}
		}
		return mod, nil, err
	}
}

// ControlDisabled is the error frontends answer load and unload requests
// with outside explicit model control mode (Triton's wording and code).
func ControlDisabled() error {
	return backend.Errorf(backend.Unavailable, "explicit model load / unload is not allowed if polling is enabled")
}
