package python

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

var _ backend.AutoCompleter = (*Backend)(nil)

// AutoComplete runs model.py's auto_complete_config, as Triton does, in a
// stub process of its own that ends right after (the interpreter that ran
// it is gone before initialize, as Triton documents). It returns nil when
// the model defines no auto_complete_config.
//
// A stub costs an interpreter start and the model's imports, so it is
// started only when a python file in the version directory mentions
// auto_complete_config: a model that inherits the method from a module
// elsewhere must define it in its own files to have it called.
func (b *Backend) AutoComplete(ctx context.Context, req backend.AutoCompleteRequest) ([]byte, error) {
	var cfg struct {
		Name                 string `json:"name"`
		DefaultModelFilename string `json:"default_model_filename"`
		Parameters           map[string]struct {
			StringValue string `json:"string_value"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal(req.ConfigJSON, &cfg); err != nil {
		return nil, fmt.Errorf("reading the configuration to complete: %w", err)
	}
	filename := cfg.DefaultModelFilename
	if filename == "" {
		filename = "model.py"
	}
	real, err := backend.Confine(req.ModelDir, req.VersionDir, filename, "model file")
	if err != nil {
		return nil, err
	}
	if !mentionsAutoComplete(req.VersionDir) {
		return nil, nil
	}
	version, _ := strconv.ParseInt(filepath.Base(req.VersionDir), 10, 64)
	spec := &backend.ModelSpec{
		Name: cfg.Name, Version: version, ModelDir: req.ModelDir, VersionDir: req.VersionDir,
		Repository: filepath.Dir(req.ModelDir), Filename: real, Parameters: map[string]string{},
		BackendConfig: req.BackendConfig, ConfigJSON: req.ConfigJSON,
	}
	for k, v := range cfg.Parameters {
		spec.Parameters[k] = v.StringValue
	}
	p, err := b.prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer p.env.Release() // after the stub is gone (defers run last first)
	shm, err := newShmRegion("tritonbuild-python-autocomplete-"+cfg.Name, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = shm.close() }()
	log := b.opts.Logger.With("model", cfg.Name, "version", version, "auto_complete_config", true)
	logLim := newLogLimit(p.set.logBytesPerSec)
	proc, _, err := startStub(ctx, stubLaunch{
		interpreter: p.env.Interpreter, script: p.script, dir: req.VersionDir, env: p.environ, shm: shm,
		stdout: &lineLogger{log: log, limit: logLim}, stderr: &lineLogger{log: log, limit: logLim}, timeout: p.set.stubTimeout,
		memoryBytes: p.set.memoryBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("python stub with %s: %w", p.env.Interpreter, err)
	}
	defer proc.kill()
	body, err := json.Marshal(map[string]any{"op": "autocomplete", "model_file": p.modelFile, "config": string(req.ConfigJSON), "shm": shm.size()})
	if err != nil {
		return nil, err
	}
	if err := proc.ch.send(body); err != nil {
		return nil, proc.failure("auto-completing the configuration", 0, err)
	}
	var deadline time.Time
	if p.set.initializeTimeout > 0 {
		deadline = time.Now().Add(p.set.initializeTimeout)
	}
	frame, err := proc.ch.recv(ctx, deadline)
	if err != nil {
		return nil, proc.failure("running auto_complete_config", p.set.initializeTimeout, err)
	}
	var rep initReply
	if err := json.Unmarshal(frame, &rep); err != nil {
		return nil, fmt.Errorf("stub sent an unreadable auto_complete_config reply %q: %w", truncate(frame, 200), err)
	}
	if !rep.OK {
		return nil, fmt.Errorf("%s", rep.Err)
	}
	if len(rep.Config) == 0 || string(rep.Config) == "null" {
		return nil, nil
	}
	return append([]byte(nil), rep.Config...), nil
}

// mentionsAutoComplete reports whether a python file directly in dir
// names auto_complete_config.
func mentionsAutoComplete(dir string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.py"))
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() > 64<<20 {
			continue
		}
		data, err := os.ReadFile(f)
		if err == nil && bytes.Contains(data, []byte("auto_complete_config")) {
			return true
		}
	}
	return false
}
