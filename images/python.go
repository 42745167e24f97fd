package images

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Defaults of PythonOptions.
const (
	DefaultPythonInterpreter = "/usr/bin/python3"
	// DefaultPythonSitePackages is where Debian and Ubuntu install python3-*
	// packages (numpy, torch) for the distribution interpreter.
	DefaultPythonSitePackages = "/usr/lib/python3/dist-packages"
)

// DefaultPythonPackages are the site-packages entries the python backend's
// models need for `import torch, numpy` with the distribution's torch 1.13:
// torch imports typing_extensions and astunparse at start, and astunparse
// imports six. Found with `python3 -S -X importtime -c 'import torch, numpy'`
// and checked by running the interpreter inside a scratch image.
var DefaultPythonPackages = []string{"numpy", "torch", "typing_extensions.py", "astunparse", "six.py"}

// DefaultPythonExcludes are left out of the interpreter's files: they are
// never imported by a serving process and are large (the static libpython
// in config-*, tests, GUI toolkits, packaging tools, torch's C++ test
// binaries and test-suite helpers). Names are relative to the standard
// library or the site-packages directory, as path.Match patterns.
// torch/bin/torch_shm_manager stays: `import torch` checks for it.
var DefaultPythonExcludes = []string{
	"config-*", "test", "idlelib", "tkinter", "turtledemo", "turtle.py", "lib2to3",
	"pydoc_data", "ensurepip", "distutils", "dist-packages", "site-packages",
	"torch/bin/*Test", "torch/bin/test_*", "torch/bin/tutorial_*", "torch/test",
	"torch/include", "torch/share", "torch/testing/_internal", "torch/lib/libcaffe2_*",
	"numpy/tests", "numpy/*/tests", "numpy/distutils", "numpy/core/include",
	// Terminal and database modules a server never imports, whose native
	// libraries (ncurses, readline, Berkeley DB, SQLite) would come along.
	"curses", "sqlite3", "lib-dynload/_curses*", "lib-dynload/readline.*",
	"lib-dynload/_dbm.*", "lib-dynload/_sqlite3.*",
	// Build and tooling parts of numpy and torch.
	"numpy/f2py", "numpy/array_api", "numpy/typing", "numpy/doc", "numpy/_pyinstaller",
	"torch/utils/tensorboard", "torch/utils/benchmark",
	"xmlrpc", "wsgiref", "pydoc.py",
}

// PythonOptions choose the interpreter an image carries for python-backend
// models (Options.HostPaths gets the result of PythonHostPaths).
type PythonOptions struct {
	// Interpreter is the host python (DefaultPythonInterpreter); the
	// symlink chain to the versioned binary is reproduced in the image.
	Interpreter string
	// SitePackages is the directory holding Packages
	// (DefaultPythonSitePackages).
	SitePackages string
	// Packages are entries of SitePackages to copy (DefaultPythonPackages).
	Packages []string
	// Excludes are paths below the standard library or SitePackages to
	// leave out (DefaultPythonExcludes).
	Excludes []string
}

// PythonError reports a python installation that cannot go into an image.
type PythonError struct {
	Path string
	Err  error
}

func (e *PythonError) Error() string {
	return fmt.Sprintf("python for the image: %s: %v", e.Path, e.Err)
}
func (e *PythonError) Unwrap() error { return e.Err }

var pythonBinary = regexp.MustCompile(`^python(3\.[0-9]+)$`)

// PythonHostPaths lists the host paths that make o.Interpreter work in a
// scratch image with the chosen packages: the interpreter and the binary it
// points to, its configuration directory /etc/pythonX.Y (the stdlib's
// sitecustomize links there), the standard library /usr/lib/pythonX.Y and
// the packages' entries of the site-packages directory, each minus the
// excludes, plus the bytecode caches of single-file modules. Native
// libraries (libpython, libtorch, BLAS) reach the image through the ELF
// closure of the copied files. Directories are listed whole where nothing
// below them is excluded, so the list stays short.
func PythonHostPaths(o PythonOptions) ([]string, error) {
	if o.Interpreter == "" {
		o.Interpreter = DefaultPythonInterpreter
	}
	if o.SitePackages == "" {
		o.SitePackages = DefaultPythonSitePackages
	}
	if o.Packages == nil {
		o.Packages = DefaultPythonPackages
	}
	if o.Excludes == nil {
		o.Excludes = DefaultPythonExcludes
	}
	real, err := filepath.EvalSymlinks(o.Interpreter)
	if err != nil {
		return nil, &PythonError{Path: o.Interpreter, Err: err}
	}
	m := pythonBinary.FindStringSubmatch(filepath.Base(real))
	if m == nil {
		return nil, &PythonError{Path: o.Interpreter, Err: fmt.Errorf("resolves to %s, not a pythonX.Y binary", real)}
	}
	version := m[1]
	// The standard library sits at <prefix>/lib/pythonX.Y for the binary
	// at <prefix>/bin/pythonX.Y.
	stdlib := filepath.Join(filepath.Dir(filepath.Dir(real)), "lib", "python"+version)
	if st, err := os.Stat(filepath.Join(stdlib, "os.py")); err != nil || st.IsDir() {
		return nil, &PythonError{Path: stdlib, Err: errors.New("no standard library (os.py) there")}
	}
	paths := []string{o.Interpreter}
	if real != o.Interpreter {
		paths = append(paths, real)
	}
	if st, err := os.Stat("/etc/python" + version); err == nil && st.IsDir() {
		paths = append(paths, "/etc/python"+version)
	}
	ex, err := newExcluder(o.Excludes)
	if err != nil {
		return nil, err
	}
	std, err := listExcluding(stdlib, "", ex)
	if err != nil {
		return nil, err
	}
	paths = append(paths, std...)
	for _, pkg := range o.Packages {
		p := filepath.Join(o.SitePackages, pkg)
		st, err := os.Lstat(p)
		if err != nil {
			return nil, &PythonError{Path: p, Err: fmt.Errorf("package %q is not installed: %w", pkg, err)}
		}
		if !st.IsDir() {
			paths = append(paths, p)
			// A single-file module's bytecode sits in the shared
			// __pycache__ of the site-packages directory.
			if mod, ok := strings.CutSuffix(pkg, ".py"); ok {
				pycs, _ := filepath.Glob(filepath.Join(o.SitePackages, "__pycache__", mod+".*.pyc"))
				paths = append(paths, pycs...)
			}
			continue
		}
		sub, err := listExcluding(p, pkg, ex)
		if err != nil {
			return nil, err
		}
		paths = append(paths, sub...)
	}
	sort.Strings(paths[1:])
	return dedupe(paths), nil
}

// excluder matches relative paths against the exclude patterns (path.Match
// globs, one per path component).
type excluder struct{ patterns [][]string }

func newExcluder(patterns []string) (*excluder, error) {
	e := &excluder{}
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return nil, &PythonError{Path: p, Err: fmt.Errorf("bad exclude pattern: %w", err)}
		}
		e.patterns = append(e.patterns, strings.Split(p, "/"))
	}
	return e, nil
}

// excluded reports whether rel (slash-separated) is left out.
func (e *excluder) excluded(rel string) bool {
	parts := strings.Split(rel, "/")
	for _, p := range e.patterns {
		if len(p) == len(parts) && matchParts(p, parts) {
			return true
		}
	}
	return false
}

// contains reports whether a pattern may match strictly below rel, so rel
// must be listed entry by entry rather than whole.
func (e *excluder) contains(rel string) bool {
	var parts []string
	if rel != "" {
		parts = strings.Split(rel, "/")
	}
	for _, p := range e.patterns {
		if len(p) > len(parts) && matchParts(p[:len(parts)], parts) {
			return true
		}
	}
	return false
}

func matchParts(pattern, parts []string) bool {
	for i := range parts {
		if ok, _ := path.Match(pattern[i], parts[i]); !ok {
			return false
		}
	}
	return true
}

// listExcluding returns dir whole when no exclude applies below it, else
// its entries (recursively split the same way) minus the excluded ones.
// rel is dir's path relative to the root the excludes are written against.
func listExcluding(dir, rel string, ex *excluder) ([]string, error) {
	if !ex.contains(rel) {
		return []string{dir}, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, &PythonError{Path: dir, Err: err}
	}
	var out []string
	for _, e := range ents {
		r := e.Name()
		if rel != "" {
			r = rel + "/" + e.Name()
		}
		if ex.excluded(r) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if e.IsDir() {
			sub, err := listExcluding(p, r, ex)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
