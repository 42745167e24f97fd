package fetch

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// AptSource is one version of a distribution source package, as the
// private apt configuration sees it: what a recipe's apt source needs.
type AptSource struct {
	// Package is the source package (the name asked for may be a binary
	// package built from it).
	Package string
	Version string
	// File is the upstream tarball (or, for a native package, its only
	// tarball) and SHA256 its digest.
	File   string
	SHA256 string
	// Versions lists every version the archives hold, newest first.
	Versions []string
}

// ShowAptSource looks up name (a source or binary package) in the private
// deb-src lists, refreshing them when they are not those of the current
// configuration, and returns version (or the newest when empty) with the
// file a recipe should build from. Nothing is downloaded but the lists.
func ShowAptSource(ctx context.Context, name, version string, cache Cache, opts Options) (*AptSource, error) {
	id := name
	if version != "" {
		id += "=" + version
	}
	if name == "" || strings.HasPrefix(name, "-") || strings.ContainsAny(name+version, " \t\n/=") {
		return nil, fmt.Errorf("apt source %q: invalid package name or version", id)
	}
	a, err := newAptEnv(cache, opts)
	if err != nil {
		return nil, fmt.Errorf("apt source %s: %w", id, err)
	}
	unlock, err := cache.Lock(ctx, "apt")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := a.ensureLists(ctx); err != nil {
		return nil, fmt.Errorf("apt source %s: %w", id, err)
	}
	stanzas, err := a.showsrc(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("apt source %s: %w", id, err)
	}
	return pickAptSource(ctx, name, version, stanzas)
}

// aptStanza is one version's paragraph of `apt-cache showsrc`.
type aptStanza struct {
	pkg, version string
	files        map[string]string // file name -> sha256
}

// showsrc runs `apt-cache showsrc NAME` with the private configuration.
func (a *aptEnv) showsrc(ctx context.Context, name string) ([]aptStanza, error) {
	out, err := a.runTool(ctx, a.opts.aptCache(), a.dir, "showsrc", name)
	if err != nil {
		return nil, err
	}
	ps, err := readDeb822(strings.NewReader(out), "apt-cache showsrc "+name)
	if err != nil {
		return nil, err
	}
	var st []aptStanza
	for _, p := range ps {
		pkg, _ := p.get("Package")
		ver, _ := p.get("Version")
		sums, _ := p.get("Checksums-Sha256")
		s := aptStanza{pkg: pkg, version: ver, files: map[string]string{}}
		for _, l := range strings.Split(sums, "\n") {
			if f := strings.Fields(l); len(f) == 3 {
				s.files[f[2]] = f[0]
			}
		}
		if pkg != "" && ver != "" {
			st = append(st, s)
		}
	}
	return st, nil
}

func pickAptSource(ctx context.Context, name, version string, stanzas []aptStanza) (*AptSource, error) {
	if len(stanzas) == 0 {
		return nil, fmt.Errorf("apt source %s: the archives hold no source package of that name (nor one building a binary package of that name)", name)
	}
	var versions []string
	seen := map[string]bool{}
	for _, s := range stanzas {
		if !seen[s.version] {
			seen[s.version] = true
			versions = append(versions, s.version)
		}
	}
	sortDebianVersions(ctx, versions)
	want := version
	if want == "" {
		want = versions[0]
	}
	for _, s := range stanzas {
		if s.version != want {
			continue
		}
		file := upstreamTarball(s.files)
		if file == "" {
			return nil, fmt.Errorf("apt source %s=%s: no source tarball among %s", s.pkg, want, strings.Join(sortedNames(s.files), ", "))
		}
		return &AptSource{Package: s.pkg, Version: want, File: file, SHA256: s.files[file], Versions: versions}, nil
	}
	return nil, &AptVersionError{Package: stanzas[0].pkg, Version: version, Have: versions}
}

// AptVersionError says that the archives lack a version of a source
// package, and which they have.
type AptVersionError struct {
	Package, Version string
	Have             []string
}

func (e *AptVersionError) Error() string {
	return fmt.Sprintf("apt source %s: the archives have no version %s (they have: %s)", e.Package, e.Version, strings.Join(e.Have, ", "))
}

// upstreamTarball picks the .orig tarball (not its signature or a
// component tarball), else the one tarball of a native package.
func upstreamTarball(files map[string]string) string {
	var orig, other []string
	for f := range files {
		switch {
		case strings.HasSuffix(f, ".asc") || strings.HasSuffix(f, ".dsc"):
		case strings.Contains(f, ".orig.tar."):
			if !strings.Contains(f, ".orig-") {
				orig = append(orig, f)
			}
		case strings.Contains(f, ".tar.") && !strings.Contains(f, ".debian.tar."):
			other = append(other, f)
		}
	}
	sort.Strings(orig)
	sort.Strings(other)
	if len(orig) > 0 {
		return orig[0]
	}
	if len(other) == 1 {
		return other[0]
	}
	return ""
}

func sortedNames(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sortDebianVersions orders versions newest first with dpkg's own
// comparison (epochs, ~ and the revision rules); without dpkg the order
// stays as apt printed it.
func sortDebianVersions(ctx context.Context, versions []string) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		return
	}
	sort.SliceStable(versions, func(i, j int) bool {
		return exec.CommandContext(ctx, "dpkg", "--compare-versions", versions[i], "gt", versions[j]).Run() == nil
	})
}

// checkAptVersion fails with an *AptVersionError when the archives lack
// spec's version, so that a warm source cache cannot hide a wrong
// apt_version until a fresh machine fails. It needs the lists: when they
// are not current and cannot be refreshed (no network), it says so on the
// log and lets the cached file be used.
func checkAptVersion(ctx context.Context, spec AptSpec, cache Cache, opts Options) error {
	id := spec.Package + "=" + spec.Version
	if _, err := exec.LookPath(opts.aptCache()); err != nil {
		fmt.Fprintf(opts.log(), "apt source %s: cannot check that the version exists (%v); using the cached file\n", id, err)
		return nil
	}
	a, err := newAptEnv(cache, opts)
	if err != nil {
		return fmt.Errorf("apt source %s: %w", id, err)
	}
	unlock, err := cache.Lock(ctx, "apt")
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := a.ensureLists(ctx); err != nil {
		fmt.Fprintf(opts.log(), "apt source %s: cannot refresh the package lists to check that the version exists (%v); using the cached file\n", id, err)
		return nil
	}
	stanzas, err := a.showsrc(ctx, spec.Package)
	if err != nil {
		return fmt.Errorf("apt source %s: %w", id, err)
	}
	for _, s := range stanzas {
		if s.pkg == spec.Package && s.version == spec.Version {
			return nil
		}
	}
	var have []string
	for _, s := range stanzas {
		if s.pkg == spec.Package {
			have = append(have, s.version)
		}
	}
	if len(have) == 0 {
		return fmt.Errorf("apt source %s: the archives hold no source package %s", id, spec.Package)
	}
	return &AptVersionError{Package: spec.Package, Version: spec.Version, Have: have}
}

// aptCache is apt-cache beside the configured apt-get.
func (o Options) aptCache() string {
	if o.AptGet != "" && strings.Contains(o.AptGet, "/") {
		return filepath.Join(filepath.Dir(o.AptGet), "apt-cache")
	}
	return "apt-cache"
}
