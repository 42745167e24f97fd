package python

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/archive"
	"github.com/tritonbuild/tritonbuild/internal/filelock"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// EnvPathParameter is the config.pbtxt parameter naming a model's python
// execution environment: a packed env (.tar.gz from venv + tar or from
// conda-pack) or a directory.
const EnvPathParameter = "EXECUTION_ENV_PATH"

// modelDirVariable expands to the model's directory in EnvPathParameter.
const modelDirVariable = "$$TRITON_MODEL_DIRECTORY"

// readyMarker is written into an extracted env once it is complete (all
// files, link check and conda-unpack done); a directory without it is a
// leftover of an interrupted extraction and is redone.
const readyMarker = ".tritonbuild-env-ready"

// execEnv is a usable python environment.
type execEnv struct {
	Root        string // the env's prefix (has bin/); "" for the bare default interpreter
	Interpreter string // absolute path of the python to run the stub with
	Source      string // what the user named: archive, directory or interpreter
}

// environ returns the process environment for a stub in this env: the
// env's bin first on PATH and its lib on the library path, like activating
// it would.
func (e *execEnv) environ() []string {
	env := os.Environ()
	if e.Root == "" {
		return env
	}
	bin := filepath.Join(e.Root, "bin")
	lib := filepath.Join(e.Root, "lib")
	out := env[:0:0]
	seen := map[string]bool{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH":
			kv = k + "=" + bin + string(os.PathListSeparator) + v
		case "LD_LIBRARY_PATH":
			kv = k + "=" + lib + string(os.PathListSeparator) + v
		case "PYTHONHOME", "VIRTUAL_ENV":
			continue // would point python at another prefix
		}
		seen[k] = true
		out = append(out, kv)
	}
	if !seen["PATH"] {
		out = append(out, "PATH="+bin)
	}
	if !seen["LD_LIBRARY_PATH"] {
		out = append(out, "LD_LIBRARY_PATH="+lib)
	}
	if _, err := os.Lstat(filepath.Join(e.Root, "pyvenv.cfg")); err == nil {
		out = append(out, "VIRTUAL_ENV="+e.Root)
	}
	return out
}

// envResolver turns EXECUTION_ENV_PATH into an execEnv, extracting packed
// envs into a cache shared by all models and servers using the same cache
// directory.
type envResolver struct {
	cacheDir string
	roots    []string // besides the model directory, where envs may be (KeyEnvRoots)
	maxBytes int64    // bound on an extracted env's files (KeyEnvMaxBytes)
	digests  *digestCache
	log      *slog.Logger
}

// confine resolves the env path (symlinks followed) and accepts it inside
// the model directory or one of the env roots.
func (r *envResolver) confine(modelDir, raw, path string) (string, error) {
	real, err := backend.Confine(modelDir, modelDir, path, EnvPathParameter)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		if err != nil {
			return "", fmt.Errorf("%w (parameter value %q)", fs.ErrNotExist, raw)
		}
		return real, nil
	}
	for _, root := range r.roots {
		if real, rerr := backend.Confine(root, root, path, EnvPathParameter); rerr == nil {
			return real, nil
		}
	}
	return "", fmt.Errorf("%q lies outside the model directory and the env roots (--backend-config=python,%s=DIR)", raw, KeyEnvRoots)
}

// resolve returns the env named by the model's EXECUTION_ENV_PATH
// parameter, or ok=false when the model has none.
func (r *envResolver) resolve(ctx context.Context, spec *backend.ModelSpec) (*execEnv, bool, error) {
	raw, ok := spec.Parameters[EnvPathParameter]
	if !ok || strings.TrimSpace(raw) == "" {
		return nil, false, nil
	}
	fail := func(path, check string, err error) (*execEnv, bool, error) {
		return nil, true, &EnvError{Model: spec.Name, Path: path, Check: check, Err: err}
	}
	path := strings.ReplaceAll(raw, modelDirVariable, spec.ModelDir)
	if strings.Contains(path, "$$") {
		return fail(raw, EnvPathParameter, fmt.Errorf("unknown variable (only %s is expanded)", modelDirVariable))
	}
	if !filepath.IsAbs(path) {
		// Triton wants absolute paths; a relative one can only sensibly
		// mean the model's directory.
		path = filepath.Join(spec.ModelDir, path)
	}
	path, err := r.confine(spec.ModelDir, raw, path)
	if err != nil {
		return fail(raw, EnvPathParameter, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fail(raw, EnvPathParameter, fmt.Errorf("%w (parameter value %q)", errors.Unwrap(err), raw))
	}
	if st.IsDir() {
		root, err := envRoot(path)
		if err != nil {
			return fail(path, EnvPathParameter, err)
		}
		interp, err := envInterpreter(root)
		if err != nil {
			return fail(path, "interpreter", err)
		}
		return &execEnv{Root: root, Interpreter: interp, Source: path}, true, nil
	}
	if !isPackedEnv(path) {
		return fail(path, EnvPathParameter, errors.New("not a directory or a .tar.gz / .tgz archive"))
	}
	env, err := r.unpack(ctx, spec.Name, path, st)
	if err != nil {
		var ee *EnvError
		if errors.As(err, &ee) {
			return nil, true, err
		}
		return fail(path, "extract", err)
	}
	return env, true, nil
}

func isPackedEnv(path string) bool {
	return strings.HasSuffix(path, ".tar.gz") || strings.HasSuffix(path, ".tgz")
}

// unpack extracts archive into <cache>/<sha256> once. The digest keys the
// cache, so a changed archive lands in a new directory and an unchanged one
// (even under another name or model) is reused.
func (r *envResolver) unpack(ctx context.Context, model, packed string, st fs.FileInfo) (*execEnv, error) {
	digest, err := r.digests.get(packed, st)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(r.cacheDir, digest)
	if env, err := r.ready(packed, dir); err == nil {
		return env, nil
	}
	if err := os.MkdirAll(r.cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating env cache %s: %w", r.cacheDir, err)
	}
	// The lock serialises instances of one server as well as separate
	// servers sharing the cache.
	unlock, err := filelock.Lock(ctx, dir+".lock")
	if err != nil {
		return nil, fmt.Errorf("python env cache: %w", err)
	}
	defer unlock()
	// Whoever held the lock before us may have finished the job.
	if env, err := r.ready(packed, dir); err == nil {
		return env, nil
	}
	// Anything here without the marker is a leftover of an interrupted run.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("removing incomplete env %s: %w", dir, err)
	}
	r.log.Info("extracting python env", "model", model, "archive", packed, "sha256", digest[:12], "dir", dir)
	start := time.Now()
	// Absolute symlinks are let through the extractor only to be checked
	// below against the venv's own record of its base interpreter; every
	// other escaping link is refused by the extractor itself.
	if err := archive.Extract(ctx, packed, dir, archive.Options{AllowAbsoluteSymlinks: true, MaxBytes: r.maxBytes}); err != nil {
		return nil, err
	}
	fail := func(check string, err error) (*execEnv, error) {
		os.RemoveAll(dir)
		return nil, &EnvError{Model: model, Path: packed, Check: check, Err: err}
	}
	root, err := envRoot(dir)
	if err != nil {
		return fail("extract", err)
	}
	if err := checkAbsoluteLinks(packed, dir, root); err != nil {
		return fail("extract", err)
	}
	interp, err := envInterpreter(root)
	if err != nil {
		return fail("interpreter", err)
	}
	if err := condaUnpack(ctx, root, interp); err != nil {
		return fail("conda-unpack", err)
	}
	rel, _ := filepath.Rel(dir, root)
	if err := os.WriteFile(filepath.Join(dir, readyMarker), []byte(rel+"\n"), 0o644); err != nil {
		return fail("extract", err)
	}
	r.log.Info("python env ready", "model", model, "archive", packed, "root", root, "took", time.Since(start).Round(time.Millisecond))
	return &execEnv{Root: root, Interpreter: interp, Source: packed}, nil
}

// ready returns the env in dir if a completed extraction is there.
func (r *envResolver) ready(packed, dir string) (*execEnv, error) {
	rel, err := os.ReadFile(filepath.Join(dir, readyMarker))
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, strings.TrimSpace(string(rel)))
	interp, err := envInterpreter(root)
	if err != nil {
		return nil, err
	}
	return &execEnv{Root: root, Interpreter: interp, Source: packed}, nil
}

// envRoot finds the env's prefix in dir: dir itself when it has bin/ (a
// conda-pack archive, or a directory env), or its single top-level
// directory (`tar czf venv.tar.gz venv/`).
func envRoot(dir string) (string, error) {
	if isDir(filepath.Join(dir, "bin")) {
		return dir, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var dirs []string
	for _, e := range entries {
		if e.Name() == readyMarker {
			continue
		}
		dirs = append(dirs, e.Name())
	}
	if len(dirs) == 1 && isDir(filepath.Join(dir, dirs[0], "bin")) {
		return filepath.Join(dir, dirs[0]), nil
	}
	return "", fmt.Errorf("no bin/ directory at the top of the env or in its single top-level directory (found %s)",
		strings.Join(dirs, ", "))
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// envInterpreter returns <root>/bin/python3 or <root>/bin/python.
func envInterpreter(root string) (string, error) {
	for _, name := range []string{"python3", "python"} {
		p := filepath.Join(root, "bin", name)
		if _, err := os.Lstat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no bin/python3 or bin/python in %s", root)
}

var interpreterName = regexp.MustCompile(`^python[0-9.]*$`)

// checkAbsoluteLinks enforces the one exception to "no link leaves the
// env": a venv's bin/python* may point at its base interpreter, the
// directory that pyvenv.cfg records as `home` (that is how
// `python -m venv --system-site-packages` builds venvs). Any other
// absolute symlink, or one in an env without pyvenv.cfg (conda-pack envs
// are self-contained), makes the archive unsafe.
func checkAbsoluteLinks(packed, dir, root string) error {
	home := venvHome(root)
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		if !filepath.IsAbs(target) {
			return nil // the extractor kept relative links inside
		}
		entry, _ := filepath.Rel(dir, p)
		if filepath.Dir(p) == filepath.Join(root, "bin") && interpreterName.MatchString(d.Name()) &&
			home != "" && filepath.Dir(filepath.Clean(target)) == home &&
			interpreterName.MatchString(filepath.Base(target)) {
			return nil
		}
		reason := "only a venv's bin/python* may point outside the env, at the pyvenv.cfg home"
		if home == "" {
			reason = "the env has no pyvenv.cfg, so no link may point outside it"
		}
		return &archive.UnsafeEntryError{Archive: packed, Entry: entry,
			Reason: fmt.Sprintf("symlink to %q leaves the env: %s", target, reason)}
	})
}

// venvHome reads `home = /usr/bin` from root/pyvenv.cfg ("" if none).
func venvHome(root string) string {
	f, err := os.Open(filepath.Join(root, "pyvenv.cfg"))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok && strings.TrimSpace(k) == "home" {
			return filepath.Clean(strings.TrimSpace(v))
		}
	}
	return ""
}

// condaUnpack runs a conda-pack env's bin/conda-unpack, which rewrites the
// build machine's prefix in scripts and text files to where the env now
// lives. It must run in place, after the final extraction directory is
// known, and only once (the ready marker records that).
func condaUnpack(ctx context.Context, root, interp string) error {
	script := filepath.Join(root, "bin", "conda-unpack")
	if _, err := os.Stat(script); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, interp, script)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("running %s: %w: %s", script, err, lastLine(string(out)))
	}
	return nil
}

// digestCache remembers archive digests by file identity, so that loading
// a model again (or its other instances) does not rehash a large env.
type digestCache struct {
	mu sync.Mutex
	m  map[digestKey]string
}

type digestKey struct {
	path  string
	size  int64
	mtime int64
	ino   uint64
}

func (c *digestCache) get(path string, st fs.FileInfo) (string, error) {
	key := digestKey{path: path, size: st.Size(), mtime: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		key.ino = sys.Ino
	}
	c.mu.Lock()
	d, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return d, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	d = hex.EncodeToString(h.Sum(nil))
	c.mu.Lock()
	if c.m == nil {
		c.m = map[digestKey]string{}
	}
	c.m[key] = d
	c.mu.Unlock()
	return d, nil
}
