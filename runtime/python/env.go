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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/archive"
	"github.com/tritonbuild/tritonbuild/internal/envcache"
	"github.com/tritonbuild/tritonbuild/internal/filelock"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// EnvPathParameter is the config.pbtxt parameter naming a model's python
// execution environment: a packed env (.tar.gz from venv + tar or from
// conda-pack) or a directory.
const EnvPathParameter = "EXECUTION_ENV_PATH"

// modelDirVariable expands to the model's directory in EnvPathParameter.
const modelDirVariable = "$$TRITON_MODEL_DIRECTORY"

// execEnv is a usable python environment.
type execEnv struct {
	Root        string // the env's prefix (has bin/); "" for the bare default interpreter
	Interpreter string // absolute path of the python to run the stub with
	Source      string // what the user named: archive, directory or interpreter

	release func() // drops the use of an extracted env; nil otherwise
}

// Release ends this holder's use of the env (idempotent for the holder:
// call it once per resolve).
func (e *execEnv) Release() {
	if e != nil && e.release != nil {
		e.release()
		e.release = nil
	}
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
	// The cache's bounds (KeyEnvCacheMaxBytes, KeyEnvCacheMaxAge), kept
	// after each extraction by removing the least recently used envs that
	// nothing uses; 0 means none.
	cacheMaxBytes int64
	cacheMaxAge   time.Duration
	digests       *digestCache
	log           *slog.Logger
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
// (even under another name or model) is reused. The env returned is in use
// until its Release.
func (r *envResolver) unpack(ctx context.Context, model, packed string, st fs.FileInfo) (*execEnv, error) {
	digest, err := r.digests.get(packed, st)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(r.cacheDir, digest)
	if err := os.MkdirAll(r.cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating env cache %s: %w", r.cacheDir, err)
	}
	// Taken before the env is looked at, so that pruning (which holds it
	// exclusively while it removes an env) never removes it from under us.
	release, err := filelock.Shared(ctx, dir+envcache.UseSuffix)
	if err != nil {
		return nil, fmt.Errorf("python env cache: %w", err)
	}
	env, extracted, err := r.unpackInUse(ctx, model, packed, digest, dir)
	if err != nil {
		release()
		return nil, err
	}
	env.release = release
	if extracted {
		r.prune(digest)
	}
	return env, nil
}

// unpackInUse is unpack with the env's use lock held; extracted says
// whether this call extracted it.
func (r *envResolver) unpackInUse(ctx context.Context, model, packed, digest, dir string) (*execEnv, bool, error) {
	if env, err := r.ready(packed, dir); err == nil {
		return env, false, nil
	}
	// The lock serialises instances of one server as well as separate
	// servers sharing the cache.
	unlock, err := filelock.Lock(ctx, dir+envcache.LockSuffix)
	if err != nil {
		return nil, false, fmt.Errorf("python env cache: %w", err)
	}
	defer unlock()
	// Whoever held the lock before us may have finished the job.
	if env, err := r.ready(packed, dir); err == nil {
		return env, false, nil
	}
	// Anything here without the marker is a leftover of an interrupted run.
	if err := os.RemoveAll(dir); err != nil {
		return nil, false, fmt.Errorf("removing incomplete env %s: %w", dir, err)
	}
	r.log.Info("extracting python env", "model", model, "archive", packed, "sha256", digest[:12], "dir", dir)
	start := time.Now()
	// Absolute symlinks are let through the extractor only to be checked
	// below against the venv's own record of its base interpreter; every
	// other escaping link is refused by the extractor itself.
	if err := archive.Extract(ctx, packed, dir, archive.Options{AllowAbsoluteSymlinks: true, MaxBytes: r.maxBytes}); err != nil {
		return nil, false, err
	}
	fail := func(check string, err error) (*execEnv, bool, error) {
		os.RemoveAll(dir)
		return nil, false, &EnvError{Model: model, Path: packed, Check: check, Err: err}
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
	// The marker records the root and the env's size, which pruning
	// counts; its modification time is the env's last use.
	rel, _ := filepath.Rel(dir, root)
	if err := os.WriteFile(filepath.Join(dir, envcache.ReadyMarker), fmt.Appendf(nil, "%s\n%d\n", rel, treeSize(dir)), 0o644); err != nil {
		return fail("extract", err)
	}
	r.log.Info("python env ready", "model", model, "archive", packed, "root", root, "took", time.Since(start).Round(time.Millisecond))
	return &execEnv{Root: root, Interpreter: interp, Source: packed}, true, nil
}

// treeSize is the bytes of the files under dir (as the extractor counts
// them: sparse files at their full size).
func treeSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// cachedEnv is one extracted env as pruning sees it.
type cachedEnv struct {
	digest string
	size   int64
	used   time.Time
}

// cachedEnvs lists the envs of the cache (complete or left incomplete).
func (r *envResolver) cachedEnvs() []cachedEnv {
	ents, err := os.ReadDir(r.cacheDir)
	if err != nil {
		return nil
	}
	var out []cachedEnv
	for _, e := range ents {
		if !e.IsDir() || !isDigest(e.Name()) {
			continue
		}
		dir := filepath.Join(r.cacheDir, e.Name())
		c := cachedEnv{digest: e.Name(), size: -1}
		if st, err := os.Stat(filepath.Join(dir, envcache.ReadyMarker)); err == nil {
			c.used = st.ModTime()
			if data, err := os.ReadFile(filepath.Join(dir, envcache.ReadyMarker)); err == nil {
				if _, size, ok := strings.Cut(strings.TrimSpace(string(data)), "\n"); ok {
					if n, err := strconv.ParseInt(strings.TrimSpace(size), 10, 64); err == nil {
						c.size = n
					}
				}
			}
		} else if info, err := e.Info(); err == nil {
			c.used = info.ModTime()
		}
		if c.size < 0 { // an env of an older server, or incomplete
			c.size = treeSize(dir)
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b cachedEnv) int { return a.used.Compare(b.used) })
	return out
}

func isDigest(name string) bool {
	if len(name) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil
}

// prune removes, least recently used first, the envs that make the cache
// exceed its size bound or that were last used longer ago than its age
// bound, except keep and any env in use or being extracted (here or by
// another server sharing the cache).
func (r *envResolver) prune(keep string) {
	if r.cacheMaxBytes <= 0 && r.cacheMaxAge <= 0 {
		return
	}
	defer r.pruneLocks(keep)
	envs := r.cachedEnvs()
	var total int64
	for _, c := range envs {
		total += c.size
	}
	now := time.Now()
	for _, c := range envs {
		over := r.cacheMaxBytes > 0 && total > r.cacheMaxBytes
		stale := r.cacheMaxAge > 0 && now.Sub(c.used) > r.cacheMaxAge
		if c.digest == keep || (!over && !stale) {
			continue
		}
		removed, err := r.remove(c.digest, false)
		if err != nil {
			r.log.Warn("pruning the python env cache", "dir", filepath.Join(r.cacheDir, c.digest), "err", err)
			continue
		}
		if removed {
			total -= c.size
			r.log.Info("python env pruned from the cache", "sha256", c.digest[:12], "bytes", c.size,
				"last_used", c.used.UTC().Format(time.RFC3339), "cache_bytes", total)
		}
	}
	if r.cacheMaxBytes > 0 && total > r.cacheMaxBytes {
		r.log.Warn("python env cache over its bound: the envs left are in use", "cache_bytes", total,
			"bound", r.cacheMaxBytes, "setting", KeyEnvCacheMaxBytes)
	}
}

// remove deletes the cached env digest and its lock files if nothing uses
// or extracts it now (removed false otherwise); with locksOnly, only if
// the env's directory is gone.
func (r *envResolver) remove(digest string, locksOnly bool) (removed bool, err error) {
	return envcache.Remove(filepath.Join(r.cacheDir, digest), locksOnly)
}

// pruneLocks removes the lock files of envs whose directory is gone (an
// extraction that failed, or a removal interrupted between the directory
// and its locks), except keep's and those someone holds.
func (r *envResolver) pruneLocks(keep string) {
	ents, err := os.ReadDir(r.cacheDir)
	if err != nil {
		return
	}
	seen := map[string]bool{}
	for _, e := range ents {
		digest, ok := strings.CutSuffix(e.Name(), envcache.LockSuffix)
		if !ok {
			digest, ok = strings.CutSuffix(e.Name(), envcache.UseSuffix)
		}
		if !ok || !isDigest(digest) || digest == keep || seen[digest] {
			continue
		}
		seen[digest] = true
		if _, err := os.Lstat(filepath.Join(r.cacheDir, digest)); !errors.Is(err, fs.ErrNotExist) {
			continue // an env is there: the bounds decide about it
		}
		if _, err := r.remove(digest, true); err != nil {
			r.log.Warn("pruning the python env cache", "lock", filepath.Join(r.cacheDir, e.Name()), "err", err)
		}
	}
}

// ready returns the env in dir if a completed extraction is there.
func (r *envResolver) ready(packed, dir string) (*execEnv, error) {
	marker := filepath.Join(dir, envcache.ReadyMarker)
	data, err := os.ReadFile(marker)
	if err != nil {
		return nil, err
	}
	rel, _, _ := strings.Cut(string(data), "\n")
	root := filepath.Join(dir, strings.TrimSpace(rel))
	interp, err := envInterpreter(root)
	if err != nil {
		return nil, err
	}
	// A use: pruning removes the least recently used first. A cache the
	// server may not write to is used as it is.
	now := time.Now()
	_ = os.Chtimes(marker, now, now)
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
		if e.Name() == envcache.ReadyMarker {
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
