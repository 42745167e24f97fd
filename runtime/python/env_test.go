package python

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/archive"
)

type tarEntry struct {
	name, body, link string
	mode             int64
	symlink          bool
}

func writeTarGz(t *testing.T, path string, entries ...tarEntry) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		if e.mode != 0 {
			h.Mode = e.mode
		}
		if e.symlink {
			h.Typeflag, h.Linkname, h.Size, h.Mode = tar.TypeSymlink, e.link, 0, 0o777
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if !e.symlink {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}

// venvEntries is a minimal venv over the system interpreter, laid out as
// `python3 -m venv --system-site-packages venv && tar czf x venv/` does.
func venvEntries(extra ...tarEntry) []tarEntry {
	return append([]tarEntry{
		{name: "venv/pyvenv.cfg", body: "home = /usr/bin\ninclude-system-site-packages = true\n"},
		{name: "venv/bin/python", symlink: true, link: systemPython},
		{name: "venv/bin/python3", symlink: true, link: "python"},
		{name: "venv/lib/python3/site-packages/.keep"},
	}, extra...)
}

func loadErr(t *testing.T, b *Backend, params map[string]string, config map[string]string) error {
	t.Helper()
	spec := probeSpec(t, 8)
	for k, v := range params {
		spec.Parameters[k] = strings.ReplaceAll(v, "@MODEL@", spec.ModelDir)
	}
	for k, v := range config {
		spec.BackendConfig[k] = v
	}
	inst, err := b.NewInstance(context.Background(), spec, 0)
	if err == nil {
		inst.Close()
	}
	return err
}

func wantEnvError(t *testing.T, err error, check string, fragments ...string) *EnvError {
	t.Helper()
	var ee *EnvError
	if !errors.As(err, &ee) {
		t.Fatalf("err %v (%T), want an *EnvError", err, err)
	}
	if ee.Check != check {
		t.Errorf("check %q, want %q (%v)", ee.Check, check, err)
	}
	msg := err.Error()
	t.Logf("error: %s", msg)
	if !strings.Contains(msg, "Failed to setup Python execution environment") {
		t.Errorf("message lacks the familiar prefix: %s", msg)
	}
	for _, f := range fragments {
		if !strings.Contains(msg, f) {
			t.Errorf("message lacks %q: %s", f, msg)
		}
	}
	return ee
}

func TestPackedVenvExtractedOnceAndOnChange(t *testing.T) {
	requirePython(t)
	b, logs := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	packed := filepath.Join(spec.ModelDir, "venv.tar.gz")
	writeTarGz(t, packed, venvEntries()...)
	spec.Parameters[EnvPathParameter] = "$$TRITON_MODEL_DIRECTORY/venv.tar.gz"

	// Two instances loading at once extract once (the lock), a third later
	// reuses the cache.
	var wg sync.WaitGroup
	insts := make([]*Instance, 3)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst, err := b.NewInstance(context.Background(), spec, i)
			if err != nil {
				t.Errorf("NewInstance %d: %v", i, err)
				return
			}
			insts[i] = inst.(*Instance)
			t.Cleanup(func() { inst.Close() })
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	insts[2] = load(t, b, spec, 2)
	if n := strings.Count(logs.String(), "extracting python env"); n != 1 {
		t.Errorf("extracted %d times, want once", n)
	}
	first := insts[0].env.Root
	for _, inst := range insts {
		if inst.env.Root != first {
			t.Errorf("env roots differ: %s vs %s", inst.env.Root, first)
		}
	}
	if !strings.HasSuffix(first, "/venv") {
		t.Errorf("env root %s: want the archive's top directory", first)
	}
	// The stub runs inside the venv.
	resps := execute(t, insts[0], probeRequest(1))
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{1}, 0)

	// A changed archive is a new digest: extracted again, elsewhere.
	writeTarGz(t, packed, venvEntries(tarEntry{name: "venv/NEW", body: "x"})...)
	inst := load(t, b, spec, 3)
	if n := strings.Count(logs.String(), "extracting python env"); n != 2 {
		t.Errorf("extractions after the change: %d, want 2", n)
	}
	if inst.env.Root == first {
		t.Errorf("changed packed reused the old extraction %s", first)
	}
	if _, err := os.Stat(filepath.Join(inst.env.Root, "NEW")); err != nil {
		t.Errorf("new extraction lacks the new file: %v", err)
	}
}

// TestEnvOutsideModelDirectoryRefused is part of issue 17's case 8: an
// EXECUTION_ENV_PATH (from a config override, say) naming an env outside
// the model directory, directly or through a symlink, is refused unless it
// lies under an env root the operator allowed.
func TestEnvOutsideModelDirectoryRefused(t *testing.T) {
	elsewhere := t.TempDir()
	packed := filepath.Join(elsewhere, "env.tar.gz")
	writeTarGz(t, packed, venvEntries()...)
	b, _ := newTestBackend(t, Options{EnvRoots: []string{}})
	wantEnvError(t, loadErr(t, b, map[string]string{EnvPathParameter: packed}, nil), EnvPathParameter, "outside the model directory and the env roots")
	spec := probeSpec(t, 8)
	if err := os.Symlink(packed, filepath.Join(spec.ModelDir, "link.tar.gz")); err != nil {
		t.Fatal(err)
	}
	spec.Parameters[EnvPathParameter] = "$$TRITON_MODEL_DIRECTORY/link.tar.gz"
	_, err := b.NewInstance(context.Background(), spec, 0)
	wantEnvError(t, err, EnvPathParameter, "outside the model directory")
	// The operator's env root lets it in.
	err = loadErr(t, b, map[string]string{EnvPathParameter: packed}, map[string]string{KeyEnvRoots: elsewhere})
	var ee *EnvError
	if errors.As(err, &ee) && ee.Check == EnvPathParameter {
		t.Errorf("an env under --backend-config=python,env-roots refused: %v", err)
	}
}

func TestTarballWithDotDotRefused(t *testing.T) {
	b, _ := newTestBackend(t, Options{})
	dir := t.TempDir()
	packed := filepath.Join(dir, "evil.tar.gz")
	writeTarGz(t, packed, venvEntries(tarEntry{name: "venv/../../escaped.txt", body: "pwned"})...)
	err := loadErr(t, b, map[string]string{EnvPathParameter: packed}, nil)
	wantEnvError(t, err, "extract", packed, "venv/../../escaped.txt")
	var ue *archive.UnsafeEntryError
	if !errors.As(err, &ue) || ue.Entry != "venv/../../escaped.txt" {
		t.Errorf("want an *archive.UnsafeEntryError naming the entry, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "escaped.txt")); err == nil {
		t.Errorf("the entry was written")
	}
}

func TestAbsoluteSymlinkOtherThanInterpreterRefused(t *testing.T) {
	b, _ := newTestBackend(t, Options{})
	packed := filepath.Join(t.TempDir(), "env.tar.gz")
	writeTarGz(t, packed, venvEntries(tarEntry{name: "venv/lib/etc", symlink: true, link: "/etc"})...)
	err := loadErr(t, b, map[string]string{EnvPathParameter: packed}, nil)
	wantEnvError(t, err, "extract", `"venv/lib/etc"`, `symlink to "/etc" leaves the env`)
	var ue *archive.UnsafeEntryError
	if !errors.As(err, &ue) {
		t.Errorf("want an *archive.UnsafeEntryError, got %v", err)
	}
	// An interpreter link that does not match pyvenv.cfg's home is refused too.
	writeTarGz(t, packed, tarEntry{name: "venv/pyvenv.cfg", body: "home = /opt/py/bin\n"},
		tarEntry{name: "venv/bin/python3", symlink: true, link: systemPython})
	err = loadErr(t, b, map[string]string{EnvPathParameter: packed}, nil)
	wantEnvError(t, err, "extract", `"venv/bin/python3"`)
	// The failed extractions left nothing behind in the cache.
	left, _ := filepath.Glob(filepath.Join(b.envs.cacheDir, "*", "venv"))
	if len(left) != 0 {
		t.Errorf("refused envs left in the cache: %v", left)
	}
}

func TestBrokenArchive(t *testing.T) {
	b, _ := newTestBackend(t, Options{})
	packed := filepath.Join(t.TempDir(), "venv.tar.gz")
	writeFile(t, packed, "this is not gzip")
	wantEnvError(t, loadErr(t, b, map[string]string{EnvPathParameter: packed}, nil), "extract", packed)
	// Valid archive, but no interpreter in it.
	writeTarGz(t, packed, tarEntry{name: "venv/bin/pip", body: "#!/bin/sh\n", mode: 0o755})
	wantEnvError(t, loadErr(t, b, map[string]string{EnvPathParameter: packed}, nil), "interpreter", "no bin/python3 or bin/python")
}

func TestEnvPathErrors(t *testing.T) {
	b, _ := newTestBackend(t, Options{})
	err := loadErr(t, b, map[string]string{EnvPathParameter: "$$TRITON_MODEL_DIRECTORY/missing.tar.gz"}, nil)
	wantEnvError(t, err, EnvPathParameter, "$$TRITON_MODEL_DIRECTORY/missing.tar.gz", "does not exist")
	err = loadErr(t, b, map[string]string{EnvPathParameter: "@MODEL@/1/model.py"}, nil)
	wantEnvError(t, err, EnvPathParameter, "not a directory or a .tar.gz")
}

func TestMissingInterpreter(t *testing.T) {
	b, _ := newTestBackend(t, Options{})
	err := loadErr(t, b, nil, map[string]string{KeyInterpreter: "/nonexistent/bin/python3"})
	wantEnvError(t, err, "interpreter", "/nonexistent/bin/python3", "no such file")
	// A directory env whose interpreter link points nowhere.
	env := t.TempDir()
	os.MkdirAll(filepath.Join(env, "bin"), 0o755)
	os.Symlink("/nonexistent/python3.11", filepath.Join(env, "bin", "python3"))
	err = loadErr(t, b, map[string]string{EnvPathParameter: env}, nil)
	wantEnvError(t, err, "interpreter", filepath.Join(env, "bin", "python3"))
}

func TestOldPythonRefused(t *testing.T) {
	b, _ := newTestBackend(t, Options{})
	fake := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'Python 3.6.15'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := loadErr(t, b, nil, map[string]string{KeyInterpreter: fake})
	wantEnvError(t, err, "python version", fake, "Python 3.6.15", ">= 3.8")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'not python at all'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = loadErr(t, b, nil, map[string]string{KeyInterpreter: fake})
	wantEnvError(t, err, "python version", "not a Python version")
}

func TestInterpreterWithoutNumPy(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	// Python that cannot see the system's numpy: isolated mode (-I) and
	// -S drop dist-packages; a wrapper makes it the "interpreter".
	fake := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexec "+systemPython+" -I -S \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(fake, "-c", "import numpy").Run(); err == nil {
		t.Skipf("%s -I -S still imports numpy; cannot build an interpreter without it", systemPython)
	}
	err := loadErr(t, b, nil, map[string]string{KeyInterpreter: fake})
	wantEnvError(t, err, "numpy", "cannot import numpy", "No module named 'numpy'")
}

// TestCondaPackEnv: a conda-pack archive (env at the archive's root, no
// pyvenv.cfg) gets bin/conda-unpack run once, in place.
func TestCondaPackEnv(t *testing.T) {
	requirePython(t)
	b, logs := newTestBackend(t, Options{})
	packed := filepath.Join(t.TempDir(), "conda.tar.gz")
	unpack := "import os, sys\nroot = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))\n" +
		"with open(os.path.join(root, 'unpacked'), 'a') as f:\n    f.write(root + '\\n')\n"
	writeTarGz(t, packed,
		tarEntry{name: "bin/python3", body: "#!/bin/sh\nexec " + systemPython + " \"$@\"\n", mode: 0o755},
		tarEntry{name: "bin/conda-unpack", body: unpack, mode: 0o755},
		tarEntry{name: "conda-meta/history", body: ""})
	spec := probeSpec(t, 8)
	spec.Parameters[EnvPathParameter] = packed
	inst := load(t, b, spec, 0)
	load(t, b, spec, 1)
	data, err := os.ReadFile(filepath.Join(inst.env.Root, "unpacked"))
	if err != nil {
		t.Fatalf("conda-unpack did not run: %v\n%s", err, logs.String())
	}
	if string(data) != inst.env.Root+"\n" {
		t.Errorf("conda-unpack ran %q, want once in %s", data, inst.env.Root)
	}
}

func TestDirectoryEnvUsedAsIs(t *testing.T) {
	requirePython(t)
	b, logs := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	env := filepath.Join(spec.ModelDir, "pyenv")
	if out, err := exec.Command(systemPython, "-m", "venv", "--system-site-packages", "--without-pip", env).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	spec.Parameters[EnvPathParameter] = "$$TRITON_MODEL_DIRECTORY/pyenv"
	inst := load(t, b, spec, 0)
	if inst.env.Interpreter != filepath.Join(env, "bin", "python3") {
		t.Errorf("interpreter %s", inst.env.Interpreter)
	}
	if strings.Contains(logs.String(), "extracting") {
		t.Errorf("a directory env was extracted")
	}
	resps := execute(t, inst, probeRequest(2))
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{2}, 0)
}

func TestBadBackendConfig(t *testing.T) {
	b, _ := newTestBackend(t, Options{})
	err := loadErr(t, b, nil, map[string]string{KeyExecuteTimeout: "soon"})
	if err == nil || !strings.Contains(err.Error(), `execute-timeout-secs="soon"`) {
		t.Fatalf("err %v", err)
	}
}

// TestPackedEnvSizeBounded: a packed env whose files hold more than
// env-max-extract-bytes (a small archive of zeros) is refused before it
// fills the cache, with the limit in the message; the cache keeps nothing.
func TestPackedEnvSizeBounded(t *testing.T) {
	b, _ := newTestBackend(t, Options{})
	packed := filepath.Join(t.TempDir(), "venv.tar.gz")
	writeTarGz(t, packed, tarEntry{name: "venv/bin/python3", body: "#!/bin/sh\n", mode: 0o755},
		tarEntry{name: "venv/lib/zeros", body: strings.Repeat("\x00", 3<<20), mode: 0o644})
	if st, _ := os.Stat(packed); st.Size() > 64<<10 {
		t.Fatalf("the archive should be small, is %d bytes", st.Size())
	}
	err := loadErr(t, b, map[string]string{EnvPathParameter: packed}, map[string]string{KeyEnvMaxBytes: "1048576"})
	wantEnvError(t, err, "extract", "more than the limit of 1048576 bytes")
	ents, _ := os.ReadDir(filepath.Join(b.opts.CacheDir, "python-envs"))
	for _, e := range ents {
		if e.IsDir() {
			t.Errorf("cache keeps %s", e.Name())
		}
	}
	if err := loadErr(t, b, nil, map[string]string{KeyEnvMaxBytes: "0"}); err == nil || !strings.Contains(err.Error(), KeyEnvMaxBytes) {
		t.Errorf("bad setting: %v", err)
	}
}
