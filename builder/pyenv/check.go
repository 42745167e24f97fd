package pyenv

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/tritonbuild/tritonbuild/internal/archive"
)

// minPython is the oldest interpreter the python backend's stub runs on
// (runtime/python's minPython).
var minPython = [2]int{3, 8}

// Manifest is venv/tritonbuild-pyenv.json.
type Manifest struct {
	Python         string `json:"python"`
	Implementation string `json:"implementation"`
	// BaseInterpreter is the interpreter a venv runs (its bin/python3
	// resolved); empty for an env that carries its own.
	BaseInterpreter    string `json:"base_interpreter,omitempty"`
	SystemSitePackages bool   `json:"system_site_packages"`
	// Packages are installed in the env itself.
	Packages []Package `json:"packages"`
	// SystemPackages are the base interpreter's, as seen when packing
	// (with system site packages only): the server's host or image must
	// have them too.
	SystemPackages []Package `json:"system_packages,omitempty"`
}

// Package is one installed distribution.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

func (m *Manifest) encode() ([]byte, error) {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// inspectScript prints the interpreter's version and the distributions it
// sees, split by whether they live under sys.prefix (the env) or not (the
// base interpreter's site packages). The first of a name on sys.path is
// the one imported, so later ones are skipped.
const inspectScript = `
import importlib.metadata as md, json, os, platform, re, sys
prefix = os.path.realpath(sys.prefix)
own, system, seen = [], [], set()
for d in md.distributions():
    name = d.metadata["Name"]
    if not name:
        continue
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        continue
    seen.add(key)
    loc = os.path.realpath(str(d.locate_file("")))
    inside = loc == prefix or loc.startswith(prefix + os.sep)
    (own if inside else system).append({"name": name, "version": d.version})
order = lambda p: p["name"].lower()
print(json.dumps({"python": platform.python_version(), "implementation": sys.implementation.name,
                  "packages": sorted(own, key=order), "system_packages": sorted(system, key=order)}))
`

// interp is a probed interpreter.
type interp struct {
	Path, Real string
	Version    string // "3.11.2"
}

var versionRE = regexp.MustCompile(`^(\d+)\.(\d+)`)

// probe runs python and checks that the stub can run on it.
func probe(ctx context.Context, python string) (*interp, error) {
	real, err := filepath.EvalSymlinks(python)
	if err != nil {
		return nil, err
	}
	out, err := run(ctx, os.TempDir(), python, "-I", "-c", "import platform; print(platform.python_version())")
	if err != nil {
		return nil, err
	}
	v := strings.TrimSpace(out)
	if err := checkVersion(v); err != nil {
		return nil, fmt.Errorf("%s: %w", python, err)
	}
	return &interp{Path: python, Real: real, Version: v}, nil
}

func checkVersion(v string) error {
	m := versionRE.FindStringSubmatch(v)
	if m == nil {
		return fmt.Errorf("python version %q is not a version", v)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major < minPython[0] || major == minPython[0] && minor < minPython[1] {
		return fmt.Errorf("the python backend needs Python >= %d.%d, this is Python %s", minPython[0], minPython[1], v)
	}
	return nil
}

// venvConfig is what pyvenv.cfg says.
type venvConfig struct {
	present    bool
	home       string // the base interpreter's directory
	systemSite bool
}

func readVenvConfig(root string) (venvConfig, error) {
	var c venvConfig
	if _, err := os.Stat(filepath.Join(root, "bin")); err != nil {
		return c, fmt.Errorf("not an env: %w", err)
	}
	f, err := os.Open(filepath.Join(root, "pyvenv.cfg"))
	if errors.Is(err, os.ErrNotExist) {
		return c, nil // an env with its own interpreter (conda-pack)
	}
	if err != nil {
		return c, err
	}
	defer f.Close()
	c.present = true
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "home":
			c.home = filepath.Clean(strings.TrimSpace(v))
		case "include-system-site-packages":
			c.systemSite = strings.EqualFold(strings.TrimSpace(v), "true")
		}
	}
	return c, sc.Err()
}

// envPython is the interpreter the server starts in an env: bin/python3,
// else bin/python.
func envPython(root string) (string, error) {
	for _, name := range []string{"python3", "python"} {
		p := filepath.Join(root, "bin", name)
		if _, err := os.Lstat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no bin/python3 or bin/python in %s", root)
}

// inspect runs the env's python for the manifest and checks that it is
// one the server can run: a venv's base interpreter must be the server's.
func inspect(ctx context.Context, root string, server *interp) (*Manifest, error) {
	cfg, err := readVenvConfig(root)
	if err != nil {
		return nil, err
	}
	py, err := envPython(root)
	if err != nil {
		return nil, err
	}
	envPy, err := probe(ctx, py)
	if err != nil {
		return nil, fmt.Errorf("the env's python: %w", err)
	}
	out, err := run(ctx, os.TempDir(), py, "-I", "-c", inspectScript)
	if err != nil {
		return nil, fmt.Errorf("the env's python: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal([]byte(lastLine(out)), &m); err != nil {
		return nil, fmt.Errorf("the env's python printed %q: %w", tail(out, 3), err)
	}
	m.SystemSitePackages = cfg.systemSite
	if !cfg.systemSite {
		m.SystemPackages = nil
	}
	if !cfg.present {
		return &m, nil // it carries its interpreter; any >= 3.8 runs the stub
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	real := envPy.Real
	if !within(realRoot, real) {
		// The usual venv: bin/python3 links to the base interpreter.
		m.BaseInterpreter = real
		if real != server.Real {
			return nil, &MismatchError{Env: real, EnvVersion: m.Python, Server: server}
		}
		return &m, nil
	}
	// A venv with a copied interpreter (--copies) still needs the base's
	// standard library at pyvenv.cfg's home.
	m.BaseInterpreter = filepath.Join(cfg.home, filepath.Base(real))
	if m.Python != server.Version || (cfg.home != filepath.Dir(server.Path) && cfg.home != filepath.Dir(server.Real)) {
		return nil, &MismatchError{Env: m.BaseInterpreter, EnvVersion: m.Python, Server: server}
	}
	return &m, nil
}

// MismatchError reports a venv over another interpreter than the server's.
type MismatchError struct {
	Env        string // the venv's base interpreter
	EnvVersion string
	Server     *interp
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("the env is a venv over %s (Python %s), but the server runs %s (%s, Python %s): "+
		"a venv's bin/python3 runs its base interpreter, which must be the server's; make the env with --python %s, "+
		"or name the interpreter the server has with --server-python",
		e.Env, e.EnvVersion, e.Server.Path, e.Server.Real, e.Server.Version, e.Server.Path)
}

func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// importScript imports each module named on the command line and prints
// numpy's version.
const importScript = `
import importlib, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException as e:
        print("import %s: %s: %s" % (name, type(e).__name__, e))
        sys.exit(1)
import numpy
print(numpy.__version__)
`

// checkExtracted extracts the archive as the server does (into a fresh
// directory, absolute links allowed only for the interpreter, which the
// collection already enforced) and imports the modules with the env's
// python, in the environment the server gives a stub.
func checkExtracted(ctx context.Context, packed, dest string, modules []string) (string, error) {
	if err := archive.Extract(ctx, packed, dest, archive.Options{AllowAbsoluteSymlinks: true}); err != nil {
		return "", fmt.Errorf("extracting the archive for its check: %w", err)
	}
	root := filepath.Join(dest, TopDir)
	py, err := envPython(root)
	if err != nil {
		return "", err
	}
	env := cleanEnv()
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH":
			env[i] = k + "=" + filepath.Join(root, "bin") + ":" + v
		case "LD_LIBRARY_PATH":
			env[i] = k + "=" + filepath.Join(root, "lib") + ":" + v
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "pyvenv.cfg")); err == nil {
		env = append(env, "VIRTUAL_ENV="+root)
	}
	cmd := command(ctx, os.TempDir(), env, py, append([]string{"-I", "-c", importScript}, modules...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := lastLine(string(out))
		if strings.HasPrefix(msg, "import numpy:") {
			msg += "; the python backend's stub needs numpy: list it in the requirements with a wheel in --find-links, or use --system-site-packages over an interpreter that has it"
		}
		return "", fmt.Errorf("in the packed env, extracted as the server extracts it: %s (%w)", msg, err)
	}
	return lastLine(string(out)), nil
}
