package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
)

// AptSpec names one file of a distribution source package.
type AptSpec struct {
	// Package is the source package name (not a binary package name).
	Package string
	// Version is the exact Debian version, epoch included ("1:15.0.6-4").
	Version string
	// File is the file of the source package to keep, usually the
	// upstream tarball ("llvm-toolchain-15_15.0.6.orig.tar.xz").
	File string
	// SHA256 is the pinned digest of File.
	SHA256 string
}

// FetchApt returns the cache path of spec.File, downloading the source
// package with `apt-get source --download-only --only-source PKG=VERSION`
// when the file is not cached yet. A cached file needs no apt and no network.
//
// apt runs with a private configuration under <cache>/apt: a sources file
// made by DebSrcSources from Options.AptEtc, and its own lists directory,
// which persists, so `apt-get update` runs only when the generated sources
// change or a version is not found in lists that this call did not just
// refresh. The system's /etc/apt, /var/lib/apt/lists and /var/cache/apt are
// left alone. The other files of the source package (.dsc, debian tarball)
// are downloaded too and then discarded. The kept file is checked against
// spec.SHA256 like any source; a mismatch is a *ChecksumError whose URL is
// "apt:PKG=VERSION/FILE".
func FetchApt(ctx context.Context, spec AptSpec, cache Cache, opts Options) (string, error) {
	id := spec.Package + "=" + spec.Version
	sha, err := normalizeSHA256(spec.SHA256)
	if err != nil {
		return "", fmt.Errorf("apt source %s: %w", id, err)
	}
	switch {
	case spec.Package == "" || spec.Version == "":
		return "", fmt.Errorf("apt source %q: package and version are required", id)
	case strings.HasPrefix(spec.Package, "-") || strings.ContainsAny(spec.Package+spec.Version, " \t\n/="):
		return "", fmt.Errorf("apt source %q: invalid package name or version", id)
	case spec.File == "" || strings.ContainsAny(spec.File, "/\\") || spec.File == "." || spec.File == "..":
		return "", fmt.Errorf("apt source %s: file %q must be a plain file name", id, spec.File)
	}
	if cache.Has(sha) {
		if err := checkAptVersion(ctx, spec, cache, opts); err != nil {
			return "", err
		}
		return cache.Path(sha), nil
	}
	unlock, err := cache.Lock(ctx, sha)
	if err != nil {
		return "", err
	}
	defer unlock()
	if cache.Has(sha) {
		return cache.Path(sha), nil
	}

	a, err := newAptEnv(cache, opts)
	if err != nil {
		return "", fmt.Errorf("apt source %s: %w", id, err)
	}
	// One apt state directory serves all digests: serialise the processes
	// that use it (the lock is always taken after a digest's lock).
	unlockApt, err := cache.Lock(ctx, "apt")
	if err != nil {
		return "", err
	}
	defer unlockApt()

	updated, err := a.ensureLists(ctx)
	if err != nil {
		return "", fmt.Errorf("apt source %s: %w", id, err)
	}
	dl, err := os.MkdirTemp(cache.tmpDir(), "apt-")
	if err != nil {
		return "", fmt.Errorf("apt source %s: %w", id, err)
	}
	defer os.RemoveAll(dl)
	// apt downloads as the unprivileged _apt user when it can reach the
	// directory; without this it falls back to root and warns.
	if err := os.Chmod(dl, 0o755); err != nil {
		return "", fmt.Errorf("apt source %s: %w", id, err)
	}

	fmt.Fprintf(opts.log(), "fetching %s from apt source package %s\n", spec.File, id)
	_, err = a.run(ctx, dl, "source", "--download-only", "--only-source", id)
	if err != nil && !updated {
		// The lists may predate the version asked for: refresh once.
		fmt.Fprintf(opts.log(), "apt source %s: %v; refreshing the package lists\n", id, err)
		if err2 := a.update(ctx); err2 != nil {
			return "", fmt.Errorf("apt source %s: %w", id, err2)
		}
		_, err = a.run(ctx, dl, "source", "--download-only", "--only-source", id)
	}
	file := filepath.Join(dl, spec.File)
	fi, statErr := os.Stat(file)
	if err != nil {
		if statErr != nil {
			return "", fmt.Errorf("apt source %s: %w", id, err)
		}
		// apt fails the whole call when any file of the source package
		// fails (a mirror missing the .debian.tar.xz, say). The file we
		// want arrived; its sha256 decides whether it is usable.
		fmt.Fprintf(opts.log(), "apt source %s: %v; %s itself was downloaded, checking its sha256\n", id, err, spec.File)
	}
	if statErr != nil {
		return "", fmt.Errorf("apt source %s: apt downloaded no file %q (it got: %s)", id, spec.File, listDir(dl))
	}
	opts.report(Update{Name: spec.File, Complete: fi.Size(), Total: fi.Size()})
	p, err := cache.Adopt(ctx, sha, file, "apt:"+id+"/"+spec.File)
	opts.report(Update{Name: spec.File, Done: true, Error: err})
	if err != nil {
		return "", fmt.Errorf("apt source %s: %w", id, err)
	}
	return p, nil
}

func listDir(dir string) string {
	es, _ := os.ReadDir(dir)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "nothing"
	}
	return strings.Join(names, ", ")
}

// aptEnv is the private apt configuration under <cache>/apt.
type aptEnv struct {
	dir     string // <cache>/apt
	sources string // the generated deb822 sources file
	digest  string // sha256 of its content: the lists are valid for it
	opts    Options
	// warnings are the W:/E: lines of the last apt-get update.
	warnings []string
}

func newAptEnv(cache Cache, opts Options) (*aptEnv, error) {
	if err := cache.prepare(); err != nil {
		return nil, err
	}
	content, err := DebSrcSources(opts.aptEtc())
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cache.Dir, "apt")
	// apt insists on the partial/ subdirectories existing.
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	sum := sha256.Sum256(content)
	a := &aptEnv{
		dir:     dir,
		sources: filepath.Join(dir, "deb-src.sources"),
		digest:  hex.EncodeToString(sum[:]),
		opts:    opts,
	}
	// apt picks the format by extension: .sources is deb822.
	if old, err := os.ReadFile(a.sources); err != nil || !bytes.Equal(old, content) {
		if err := atomicfile.WriteFile(a.sources, content, 0o644); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// stamp records which sources file the lists were downloaded for.
func (a *aptEnv) stamp() string { return filepath.Join(a.dir, "lists.stamp") }

// ensureLists runs `apt-get update` unless the lists are already those of
// the current sources file. It reports whether it ran.
func (a *aptEnv) ensureLists(ctx context.Context) (bool, error) {
	if b, err := os.ReadFile(a.stamp()); err == nil && strings.TrimSpace(string(b)) == a.digest {
		return false, nil
	}
	return true, a.update(ctx)
}

func (a *aptEnv) update(ctx context.Context) error {
	os.Remove(a.stamp())
	fmt.Fprintf(a.opts.log(), "apt-get update (private source lists in %s)\n", filepath.Join(a.dir, "lists"))
	out, err := a.run(ctx, a.dir, "update")
	if err != nil {
		return err
	}
	// apt-get update exits 0 when some indexes failed, e.g. a third-party
	// archive that publishes no Sources. That is not fatal: the package may
	// well be in another archive. Keep the complaints for the error message
	// in case `apt-get source` then fails.
	a.warnings = nil
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "W: ") || strings.HasPrefix(l, "E: ") {
			a.warnings = append(a.warnings, l)
		}
	}
	return atomicfile.WriteFile(a.stamp(), []byte(a.digest+"\n"), 0o644)
}

// run executes apt-get with the private configuration in dir. Output goes
// to the log; the error carries the tail of what apt said. The returned
// string is apt's combined output.
func (a *aptEnv) run(ctx context.Context, dir string, args ...string) (string, error) {
	return a.runTool(ctx, a.opts.aptGet(), dir, args...)
}

// runTool runs apt-get or apt-cache (tool) with the private configuration.
// What apt says is kept for the error message, not passed through: its
// warnings (an unsandboxed download, an archive without Sources) are
// noise when the command succeeds.
func (a *aptEnv) runTool(ctx context.Context, tool, dir string, args ...string) (string, error) {
	full := []string{
		"-o", "Dir::Etc::sourcelist=" + a.sources,
		"-o", "Dir::Etc::sourceparts=-",
		"-o", "Dir::State::Lists=" + filepath.Join(a.dir, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(a.dir, "cache"),
		"-o", "APT::Get::Assume-Yes=true",
		"-q",
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, tool, full...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, io.MultiWriter(&out, &stderr)
	name := filepath.Base(tool)
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", fmt.Errorf("%s not found (%s): %w", name, tool, err)
		}
		said := stderr.Bytes()
		if len(bytes.TrimSpace(said)) == 0 {
			said = out.Bytes()
		}
		note := ""
		if len(a.warnings) > 0 {
			note = "\n(apt-get update had said: " + strings.Join(a.warnings, "; ") + ")"
		}
		return out.String(), fmt.Errorf("%s %s: %w: %s%s", name, strings.Join(args, " "), err, tail(said, 10), note)
	}
	return out.String(), nil
}
