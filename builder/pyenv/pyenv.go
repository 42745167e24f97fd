// Package pyenv packs python execution environments for the python
// backend's EXECUTION_ENV_PATH (`tritonbuild pyenv pack`): a venv made
// offline from a requirements list, or an existing venv, written as a
// deterministic venv.tar.gz. The same inputs give the same bytes (entries
// sorted, one fixed mtime, owners 0:0 without names, no bytecode, an empty
// gzip header), so the server's env cache, keyed by the archive's sha256,
// extracts a rebuilt but unchanged env no second time.
//
// The archive holds one top-level directory, venv/, as the report's
// `tar czf venv.tar.gz venv/` does. Nothing in it names the directory it
// was built in: bin/activate finds the env from its own location, scripts
// in bin/ start the env's python next to them, and pyvenv.cfg loses its
// informational `command` line. The one absolute path left is a venv's
// link to its base interpreter (bin/python3 -> /usr/bin/python3), the
// interpreter the server runs the stub with; Pack checks that it is the
// server's interpreter. venv/tritonbuild-pyenv.json is the manifest: the
// python version, the base interpreter and the packages.
//
// Before the archive is renamed into place, Pack extracts it into a scratch
// directory with the server's extractor and runs the env's python there:
// numpy and the extra modules must import.
package pyenv

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/images"
	"github.com/tritonbuild/tritonbuild/internal/archive"
	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
)

// Defaults of Options.
const (
	// DefaultServerPython is the python backend's default interpreter
	// (runtime/python.DefaultInterpreter) and the one `--python` images
	// carry at the same path.
	DefaultServerPython = images.DefaultPythonInterpreter
	// DefaultMaxSize bounds the env's unpacked size: what each server
	// extracts into its env cache before the model can load.
	DefaultMaxSize = 2 << 30
	// TopDir is the archive's one top-level directory.
	TopDir = "venv"
	// ManifestName is the manifest's name inside TopDir.
	ManifestName = "tritonbuild-pyenv.json"
)

// Epoch is every entry's mtime: a constant, so that rebuilding an env does
// not change its archive.
var Epoch = time.Unix(315532800, 0).UTC() // 1980-01-01, also the oldest zip and wheel date

// Options say what to pack. With neither Requirements nor Venv, Pack makes
// an empty venv (useful with SystemSitePackages: the report's torch and
// numpy come from the distribution).
type Options struct {
	// Requirements is a pip requirements file installed into a new venv,
	// offline: pip never reaches an index, it takes what FindLinks hold
	// (and, with SystemSitePackages, what the base interpreter has).
	Requirements string
	// FindLinks are directories of wheels and sdists for Requirements.
	FindLinks []string
	// Venv is an existing venv to pack instead of making one. It is read,
	// never changed.
	Venv string
	// SystemSitePackages makes the new venv see the base interpreter's
	// packages. For Venv it must agree with the venv's pyvenv.cfg (or be
	// left false).
	SystemSitePackages bool
	// Python makes the new venv (ServerPython when empty).
	Python string
	// ServerPython is the interpreter the server runs models with, on the
	// host or in the image (DefaultServerPython when empty). A venv's base
	// interpreter must be this one, since that is what its bin/python3
	// runs wherever the archive is extracted.
	ServerPython string
	// Imports are modules that must import inside the packed env, besides
	// numpy (which the stub needs).
	Imports []string
	// MaxSize refuses envs larger than this unpacked (DefaultMaxSize when
	// zero).
	MaxSize int64
	// Output is the archive to write (replaced atomically).
	Output string
	// Report, when set, receives one line per step.
	Report func(msg string)
}

// Result describes a written archive.
type Result struct {
	Output   string
	SHA256   string
	Size     int64 // archive bytes
	Unpacked int64 // bytes of the files inside
	Files    int   // entries of every kind
	Manifest Manifest
	// Imported are the modules checked in the extracted copy, with the
	// version numpy reported.
	Imported []string
	NumPy    string
}

// SizeError reports an env over Options.MaxSize.
type SizeError struct {
	Unpacked, Max int64
	// Largest are the biggest top-level entries of its site-packages.
	Largest []string
}

func (e *SizeError) Error() string {
	msg := fmt.Sprintf("the env is %s unpacked, over the limit of %s (--max-size): every server extracts it before the model loads",
		recipe.ByteSize(e.Unpacked), recipe.ByteSize(e.Max))
	if len(e.Largest) > 0 {
		msg += "; largest: " + strings.Join(e.Largest, ", ")
	}
	return msg
}

// Pack builds (or takes) the venv, writes the archive and checks it.
func Pack(ctx context.Context, o Options) (*Result, error) {
	if o.Output == "" {
		return nil, errors.New("pyenv: no output archive given")
	}
	if !strings.HasSuffix(o.Output, ".tar.gz") && !strings.HasSuffix(o.Output, ".tgz") {
		return nil, fmt.Errorf("output %s: the python backend takes packed envs named *.tar.gz or *.tgz", o.Output)
	}
	if o.Venv != "" && o.Requirements != "" {
		return nil, errors.New("pyenv: give a requirements file or an existing venv, not both")
	}
	if o.Venv != "" && len(o.FindLinks) > 0 {
		return nil, errors.New("pyenv: --find-links only applies to a requirements file")
	}
	if o.ServerPython == "" {
		o.ServerPython = DefaultServerPython
	}
	if o.Python == "" {
		o.Python = o.ServerPython
	}
	if o.MaxSize <= 0 {
		o.MaxSize = DefaultMaxSize
	}
	report := o.Report
	if report == nil {
		report = func(string) {}
	}
	server, err := probe(ctx, o.ServerPython)
	if err != nil {
		return nil, fmt.Errorf("the server's python: %w", err)
	}

	work, err := os.MkdirTemp("", "tritonbuild-pyenv-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	root := o.Venv
	if root == "" {
		root = filepath.Join(work, TopDir)
		if err := makeVenv(ctx, o, root, report); err != nil {
			return nil, err
		}
	} else {
		if root, err = existingVenv(o); err != nil {
			return nil, err
		}
	}

	report("inspecting the env")
	man, err := inspect(ctx, root, server)
	if err != nil {
		return nil, err
	}
	tree, err := collect(root)
	if err != nil {
		return nil, err
	}
	data, err := man.encode()
	if err != nil {
		return nil, err
	}
	tree.add(archive.Entry{Name: TopDir + "/" + ManifestName, Type: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), Data: data})
	if tree.unpacked > o.MaxSize {
		return nil, &SizeError{Unpacked: tree.unpacked, Max: o.MaxSize, Largest: tree.largest(5)}
	}

	report(fmt.Sprintf("writing %s (%d entries, %d bytes unpacked)", o.Output, len(tree.entries), tree.unpacked))
	res := &Result{Output: o.Output, Unpacked: tree.unpacked, Files: len(tree.entries), Manifest: *man}
	f, err := atomicfile.Create(o.Output, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Abort()
	if res.SHA256, res.Size, err = writeArchive(ctx, f, tree.sorted()); err != nil {
		return nil, fmt.Errorf("writing %s: %w", o.Output, err)
	}

	report("checking an extracted copy")
	res.Imported = append([]string{"numpy"}, o.Imports...)
	if res.NumPy, err = checkExtracted(ctx, f.TempName(), filepath.Join(work, "check"), res.Imported); err != nil {
		return nil, err
	}
	if err := f.Commit(); err != nil {
		return nil, err
	}
	return res, nil
}

// writeArchive writes the gzip'd tar (an empty gzip header: no name, no
// time) and returns its sha256 and size.
func writeArchive(ctx context.Context, w io.Writer, entries []archive.Entry) (string, int64, error) {
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(w, h)}
	bw := bufio.NewWriterSize(cw, 1<<20)
	gz := gzip.NewWriter(bw)
	if err := archive.WriteTar(ctx, gz, entries, archive.TarOptions{ModTime: Epoch}); err != nil {
		return "", 0, err
	}
	if err := gz.Close(); err != nil {
		return "", 0, err
	}
	if err := bw.Flush(); err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), cw.n, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// makeVenv runs `python -m venv` (without pip: the env needs none at run
// time) and installs the requirements with the base interpreter's pip,
// offline.
func makeVenv(ctx context.Context, o Options, root string, report func(string)) error {
	args := []string{"-m", "venv", "--without-pip"}
	if o.SystemSitePackages {
		args = append(args, "--system-site-packages")
	}
	report(fmt.Sprintf("making a venv with %s", o.Python))
	if _, err := run(ctx, "", o.Python, append(args, root)...); err != nil {
		return fmt.Errorf("making the venv with %s: %w", o.Python, err)
	}
	if o.Requirements == "" {
		return nil
	}
	req, err := filepath.Abs(o.Requirements)
	if err != nil {
		return err
	}
	if _, err := os.Stat(req); err != nil {
		return fmt.Errorf("requirements: %w", err)
	}
	// --isolated: no pip configuration or PIP_* variable of the caller
	// (an index, a cache) changes what is installed; --no-index: never
	// the network.
	pip := []string{"-m", "pip", "--isolated", "--disable-pip-version-check", "--no-input",
		"--python", filepath.Join(root, "bin", "python3"),
		"install", "--no-index", "--no-compile", "--no-cache-dir", "--no-warn-script-location", "-r", req}
	for _, d := range o.FindLinks {
		abs, err := filepath.Abs(d)
		if err != nil {
			return err
		}
		if st, err := os.Stat(abs); err != nil || !st.IsDir() {
			return fmt.Errorf("--find-links %s: not a directory", d)
		}
		pip = append(pip, "--find-links", abs)
	}
	report(fmt.Sprintf("installing %s offline (pip of %s)", o.Requirements, o.Python))
	// Relative paths in the requirements file are pip's business: they
	// resolve against the caller's directory, as with pip itself.
	if out, err := run(ctx, "", o.Python, pip...); err != nil {
		if strings.Contains(out, "No module named pip") {
			return fmt.Errorf("installing %s needs pip in %s (python3-pip): %w", o.Requirements, o.Python, err)
		}
		return fmt.Errorf("installing %s (offline: only --find-links directories and, with --system-site-packages, the base interpreter's packages count): %w", o.Requirements, err)
	}
	return nil
}

// existingVenv checks that o.Venv is a venv and returns its absolute path.
func existingVenv(o Options) (string, error) {
	root, err := filepath.Abs(o.Venv)
	if err != nil {
		return "", err
	}
	cfg, err := readVenvConfig(root)
	if err != nil {
		return "", fmt.Errorf("--venv %s: %w", o.Venv, err)
	}
	if o.SystemSitePackages && !cfg.systemSite {
		return "", fmt.Errorf("--venv %s was made without system site packages (pyvenv.cfg); drop --system-site-packages or remake it", o.Venv)
	}
	return root, nil
}

// run runs name with args in dir ("" for the current directory) and
// returns its combined output; a failure carries the output's last lines.
func run(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := command(ctx, dir, cleanEnv(), name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out.String(), 15))
	}
	return out.String(), nil
}

// command prepares a python run: no bytecode written into the env being
// packed or checked.
func command(ctx context.Context, dir string, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(env, "PYTHONDONTWRITEBYTECODE=1")
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// cleanEnv is the caller's environment without what would point python at
// another prefix or module path.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONSTARTUP", "PYTHONUSERBASE", "CONDA_PREFIX":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
