package images

import (
	"archive/tar"
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// elfTarget is the kind of ELF object the image runs: objects of another
// class or machine are skipped, as the dynamic loader skips them.
type elfTarget struct {
	class   elf.Class
	machine elf.Machine
	triplet string // multiarch directory name, e.g. x86_64-linux-gnu
}

// elfTargetFor maps a Go architecture name to its ELF identity.
func elfTargetFor(goarch string) (elfTarget, error) {
	switch goarch {
	case "amd64":
		return elfTarget{elf.ELFCLASS64, elf.EM_X86_64, "x86_64-linux-gnu"}, nil
	case "arm64":
		return elfTarget{elf.ELFCLASS64, elf.EM_AARCH64, "aarch64-linux-gnu"}, nil
	case "ppc64le":
		return elfTarget{elf.ELFCLASS64, elf.EM_PPC64, "powerpc64le-linux-gnu"}, nil
	case "s390x":
		return elfTarget{elf.ELFCLASS64, elf.EM_S390, "s390x-linux-gnu"}, nil
	}
	return elfTarget{}, fmt.Errorf("architecture %q: no known ELF machine for the library closure", goarch)
}

// systemDirs are the directories the dynamic loader searches without
// configuration (glibc's built-in list on a multiarch system). Libraries found
// elsewhere on the host need their directory in LD_LIBRARY_PATH, because the
// image carries no ld.so.cache.
func (t elfTarget) systemDirs() []string {
	return []string{"/lib/" + t.triplet, "/usr/lib/" + t.triplet, "/lib", "/usr/lib"}
}

// HostLibraryDirs returns the directories the host's loader searches, in
// order: those configured in /etc/ld.so.conf (following include lines), then
// the built-in system directories. Only existing directories are returned.
func HostLibraryDirs(goarch string) ([]string, error) {
	t, err := elfTargetFor(goarch)
	if err != nil {
		return nil, err
	}
	var dirs []string
	seen := map[string]bool{}
	add := func(d string) {
		d = path.Clean(d)
		if seen[d] {
			return
		}
		seen[d] = true
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			dirs = append(dirs, d)
		}
	}
	if err := readLdSoConf("/etc/ld.so.conf", add, 0); err != nil {
		return nil, err
	}
	for _, d := range t.systemDirs() {
		add(d)
	}
	return dirs, nil
}

// readLdSoConf reads one ld.so.conf file, calling add for each directory and
// recursing into include globs.
func readLdSoConf(file string, add func(string), depth int) error {
	if depth > 8 {
		return fmt.Errorf("%s: includes nested too deeply", file)
	}
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading loader configuration: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if fields[0] == "include" {
			for _, pat := range fields[1:] {
				if !filepath.IsAbs(pat) {
					pat = filepath.Join(filepath.Dir(file), pat)
				}
				matches, _ := filepath.Glob(pat)
				sort.Strings(matches)
				for _, m := range matches {
					if err := readLdSoConf(m, add, depth+1); err != nil {
						return err
					}
				}
			}
			continue
		}
		if fields[0] == "hwcap" {
			continue
		}
		for _, d := range fields {
			if filepath.IsAbs(d) {
				add(d)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	return nil
}

// elfDeps are the dynamic-linking facts of one ELF object.
type elfDeps struct {
	needed  []string
	runpath []string
	rpath   []string
	interp  string
}

// readELF parses file. ok is false when file is not a loadable ELF object of
// the target (not ELF at all, relocatable, or another class or machine).
func readELF(file string, t elfTarget) (deps elfDeps, ok bool, err error) {
	f, err := os.Open(file)
	if err != nil {
		return deps, false, err
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || string(magic[:]) != elf.ELFMAG {
		return deps, false, nil
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		// A file with the ELF magic that debug/elf cannot parse is not
		// something the loader would map either; say so rather than skip it.
		return deps, false, fmt.Errorf("parsing ELF %s: %w", file, err)
	}
	defer ef.Close()
	if ef.Class != t.class || ef.Machine != t.machine || (ef.Type != elf.ET_EXEC && ef.Type != elf.ET_DYN) {
		return deps, false, nil
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return deps, false, fmt.Errorf("reading PT_INTERP of %s: %w", file, err)
			}
			deps.interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if ef.Section(".dynamic") == nil {
		return deps, true, nil
	}
	if deps.needed, err = ef.DynString(elf.DT_NEEDED); err != nil {
		return deps, false, fmt.Errorf("reading DT_NEEDED of %s: %w", file, err)
	}
	rp, err := ef.DynString(elf.DT_RUNPATH)
	if err != nil {
		return deps, false, fmt.Errorf("reading DT_RUNPATH of %s: %w", file, err)
	}
	for _, s := range rp {
		deps.runpath = append(deps.runpath, strings.Split(s, ":")...)
	}
	rp, err = ef.DynString(elf.DT_RPATH)
	if err != nil {
		return deps, false, fmt.Errorf("reading DT_RPATH of %s: %w", file, err)
	}
	for _, s := range rp {
		deps.rpath = append(deps.rpath, strings.Split(s, ":")...)
	}
	return deps, true, nil
}

// MissingLibrary is a DT_NEEDED entry that no search directory provides.
type MissingLibrary struct {
	Name     string // the soname, e.g. libfoo.so.1
	NeededBy string // image path of the object that needs it
}

// MissingLibrariesError lists every unresolved library of a closure.
type MissingLibrariesError struct {
	Missing []MissingLibrary
}

func (e *MissingLibrariesError) Error() string {
	parts := make([]string, len(e.Missing))
	for i, m := range e.Missing {
		parts[i] = fmt.Sprintf("%s (needed by %s)", m.Name, m.NeededBy)
	}
	return "shared libraries not found in the install trees or on the host: " + strings.Join(parts, ", ")
}

// imageFS answers lstat questions about the image being assembled: paths
// under the prefix come from the install trees, all other paths from the
// host, which is where the base-library layer copies them from.
type imageFS struct {
	prefix string           // absolute, cleaned
	tree   map[string]entry // absolute image path -> tree entry
}

type nodeKind int

const (
	nodeMissing nodeKind = iota
	nodeDir
	nodeFile
	nodeLink
)

// lstat describes the image path p (absolute, cleaned): its kind, the link
// target of a symlink, and the host file holding a regular file's bytes.
func (fsys *imageFS) lstat(p string) (kind nodeKind, target, host string) {
	if p == fsys.prefix || strings.HasPrefix(p, fsys.prefix+"/") {
		if p == fsys.prefix {
			return nodeDir, "", ""
		}
		e, ok := fsys.tree[p]
		if !ok {
			return nodeMissing, "", ""
		}
		switch e.typ {
		case tar.TypeDir:
			return nodeDir, "", ""
		case tar.TypeSymlink:
			return nodeLink, e.link, ""
		case tar.TypeLink:
			return fsys.lstat("/" + e.link)
		}
		return nodeFile, "", e.src
	}
	if strings.HasPrefix(fsys.prefix, p+"/") {
		return nodeDir, "", ""
	}
	st, err := os.Lstat(p)
	if err != nil {
		return nodeMissing, "", ""
	}
	switch {
	case st.IsDir():
		return nodeDir, "", ""
	case st.Mode()&os.ModeSymlink != 0:
		t, err := os.Readlink(p)
		if err != nil {
			return nodeMissing, "", ""
		}
		return nodeLink, t, ""
	case st.Mode().IsRegular():
		return nodeFile, "", p
	}
	return nodeMissing, "", ""
}

// hostLink is a host symlink met while resolving a path; the base layer
// reproduces it so the image resolves the same way.
type hostLink struct{ name, target string }

// resolve follows p component by component through symlinks, like the
// kernel does, and returns the final path with the symlinks traversed.
// ok is false when the path does not lead to a regular file.
func (fsys *imageFS) resolve(p string) (final, host string, links []hostLink, ok bool) {
	final, kind, host, links := fsys.walk(p)
	if kind != nodeFile {
		return "", "", nil, false
	}
	return final, host, links, true
}

// walk resolves p and says what it ends on (nodeMissing when a component
// does not exist, a file is used as a directory, or links loop).
func (fsys *imageFS) walk(p string) (final string, kind nodeKind, host string, links []hostLink) {
	rest := strings.Split(strings.TrimPrefix(path.Clean("/"+p), "/"), "/")
	cur := "/"
	for hops := 0; len(rest) > 0; {
		comp := rest[0]
		rest = rest[1:]
		if comp == "" || comp == "." {
			continue
		}
		if comp == ".." {
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, comp)
		kind, target, h := fsys.lstat(next)
		switch kind {
		case nodeMissing:
			return "", nodeMissing, "", nil
		case nodeLink:
			hops++
			if hops > 40 {
				return "", nodeMissing, "", nil
			}
			links = append(links, hostLink{name: next, target: target})
			base := cur
			if path.IsAbs(target) {
				base = "/"
			}
			rest = append(strings.Split(path.Join(base, target), "/"), rest...)
			cur = "/"
			continue
		case nodeFile:
			if len(rest) > 0 {
				return "", nodeMissing, "", nil
			}
			return next, nodeFile, h, links
		}
		cur = next
	}
	return cur, nodeDir, "", links
}

// closure is the result of resolving the shared libraries of the trees.
type closure struct {
	files   []string   // host files (resolved, absolute) the base layer must carry
	links   []hostLink // host symlinks leading to them
	dirs    []string   // host directories copied as such (from hostPaths)
	libDirs []string   // host directories outside the loader's defaults, for LD_LIBRARY_PATH
	missing []MissingLibrary
}

// closureOptions steer resolveClosure.
type closureOptions struct {
	target      elfTarget
	fsys        *imageFS
	hostDirs    []string // search order for the host, see HostLibraryDirs
	libraryPath []string // the image's LD_LIBRARY_PATH
	extra       []string // additional libraries (sonames or absolute paths) loaded with dlopen
	hostPaths   []string // host files or directories copied at their paths, with their closure
}

// resolveClosure walks DT_NEEDED from every ELF object in the trees (and
// the extra libraries) through the search order of glibc's loader: DT_RPATH
// when there is no DT_RUNPATH, LD_LIBRARY_PATH, DT_RUNPATH, then the host's
// configured and built-in directories, recursively. $ORIGIN expands to the
// directory of the object as found, before symlinks: glibc takes it from
// the path it opened, so a library reached through a link into another
// directory (the alternatives' libblas.so.3 -> openblas-openmp/) looks for
// its $ORIGIN dependencies beside the link, not beside its file.
func resolveClosure(o closureOptions) (*closure, error) {
	c := &closure{}
	// origin is the directory $ORIGIN means for the object: the same file
	// opened through two paths is searched from both.
	type object struct{ imagePath, host, origin string }
	var queue []object
	visited := map[string]bool{}
	hostFiles := map[string]bool{}
	linkSeen := map[string]bool{}
	dirSeen := map[string]bool{}
	defaults := map[string]bool{}
	for _, d := range o.target.systemDirs() {
		defaults[d] = true
	}
	for _, d := range o.libraryPath {
		defaults[path.Clean(d)] = true
	}
	useHost := func(final, host string, links []hostLink) {
		for _, l := range links {
			if !strings.HasPrefix(l.name, o.fsys.prefix+"/") && !linkSeen[l.name] {
				linkSeen[l.name] = true
				c.links = append(c.links, l)
			}
		}
		if !strings.HasPrefix(final, o.fsys.prefix+"/") && !hostFiles[final] {
			hostFiles[final] = true
			c.files = append(c.files, final)
		}
	}
	enqueue := func(final, host, origin string) {
		if key := final + "\x00" + origin; !visited[key] {
			visited[key] = true
			queue = append(queue, object{final, host, origin})
		}
	}

	paths := make([]string, 0, len(o.fsys.tree))
	for p, e := range o.fsys.tree {
		if e.typ == tar.TypeReg {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		enqueue(p, o.fsys.tree[p].src, path.Dir(p))
	}

	// find searches for soname needed by obj; opened is the path the
	// loader opens, whose directory is the found object's $ORIGIN.
	find := func(soname, origin string, deps elfDeps) (final, host, opened string, links []hostLink, dir string, ok bool) {
		// dir is returned only when the library came from a host directory
		// outside the loader's defaults, i.e. when LD_LIBRARY_PATH must
		// name it in the image.
		var dirs []string
		if strings.Contains(soname, "/") {
			dirs = []string{""}
		} else {
			if len(deps.runpath) == 0 {
				dirs = append(dirs, deps.rpath...)
			}
			dirs = append(dirs, o.libraryPath...)
			dirs = append(dirs, deps.runpath...)
			dirs = append(dirs, o.hostDirs...)
		}
		firstHost := len(dirs) - len(o.hostDirs)
		if strings.Contains(soname, "/") {
			firstHost = len(dirs)
		}
		for i, d := range dirs {
			d = expandOrigin(d, origin, o.target)
			if d == "" && !strings.Contains(soname, "/") {
				continue
			}
			cand := path.Join("/", d, soname)
			final, host, links, ok := o.fsys.resolve(cand)
			if !ok {
				continue
			}
			if _, good, err := readELF(host, o.target); err != nil || !good {
				continue
			}
			if i >= firstHost && !defaults[path.Clean(d)] {
				dir = path.Clean(d)
			}
			return final, host, cand, links, dir, true
		}
		return "", "", "", nil, "", false
	}

	for _, hp := range o.hostPaths {
		if err := addHostPath(hp, o.fsys, useHost, enqueue, func(l hostLink) {
			if !linkSeen[l.name] {
				linkSeen[l.name] = true
				c.links = append(c.links, l)
			}
		}, func(d string) { c.dirs = append(c.dirs, d) }); err != nil {
			return nil, err
		}
	}

	for _, lib := range o.extra {
		final, host, opened, links, dir, ok := find(lib, "/", elfDeps{})
		if !ok {
			c.missing = append(c.missing, MissingLibrary{Name: lib, NeededBy: "Options.ExtraLibraries"})
			continue
		}
		useHost(final, host, links)
		if dir != "" && !dirSeen[dir] {
			dirSeen[dir] = true
			c.libDirs = append(c.libDirs, dir)
		}
		enqueue(final, host, path.Dir(opened))
	}

	for len(queue) > 0 {
		obj := queue[0]
		queue = queue[1:]
		deps, ok, err := readELF(obj.host, o.target)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if deps.interp != "" {
			final, host, links, ok := o.fsys.resolve(deps.interp)
			if !ok {
				c.missing = append(c.missing, MissingLibrary{Name: deps.interp, NeededBy: obj.imagePath})
			} else {
				useHost(final, host, links)
				enqueue(final, host, path.Dir(final))
			}
		}
		for _, soname := range deps.needed {
			final, host, opened, links, dir, ok := find(soname, obj.origin, deps)
			if !ok {
				c.missing = append(c.missing, MissingLibrary{Name: soname, NeededBy: obj.imagePath})
				continue
			}
			useHost(final, host, links)
			if dir != "" && !dirSeen[dir] {
				dirSeen[dir] = true
				c.libDirs = append(c.libDirs, dir)
			}
			enqueue(final, host, path.Dir(opened))
		}
	}
	sort.Strings(c.files)
	sort.Strings(c.dirs)
	sort.Slice(c.links, func(i, j int) bool { return c.links[i].name < c.links[j].name })
	return c, nil
}

// expandOrigin substitutes the dynamic string tokens glibc knows in a search
// directory: $ORIGIN (the object's directory), $LIB and $PLATFORM.
func expandOrigin(dir, origin string, t elfTarget) string {
	r := strings.NewReplacer(
		"${ORIGIN}", origin, "$ORIGIN", origin,
		"${LIB}", "lib/"+t.triplet, "$LIB", "lib/"+t.triplet,
		"${PLATFORM}", strings.SplitN(t.triplet, "-", 2)[0], "$PLATFORM", strings.SplitN(t.triplet, "-", 2)[0],
	)
	return r.Replace(dir)
}

// HostPathError reports an Options.HostPaths entry that cannot be copied.
type HostPathError struct {
	Path string
	Err  error
}

func (e *HostPathError) Error() string { return fmt.Sprintf("host path %s: %v", e.Path, e.Err) }
func (e *HostPathError) Unwrap() error { return e.Err }

// addHostPath adds a host file or directory tree (e.g. an interpreter and its
// standard library) at its host path. The path itself is resolved like a
// library, so symlinks leading to it are reproduced; inside a directory,
// symlinks are copied as they are, and the files they lead to come along.
func addHostPath(p string, fsys *imageFS, useHost func(final, host string, links []hostLink), enqueue func(final, host, origin string), addLink func(hostLink), addDir func(string)) error {
	if !path.IsAbs(p) {
		return &HostPathError{Path: p, Err: errors.New("not an absolute path")}
	}
	p = path.Clean(p)
	if p == fsys.prefix || strings.HasPrefix(p, fsys.prefix+"/") {
		return &HostPathError{Path: p, Err: fmt.Errorf("inside the image prefix %s, which belongs to the install trees", fsys.prefix)}
	}
	st, err := os.Stat(p)
	if err != nil {
		return &HostPathError{Path: p, Err: err}
	}
	if !st.IsDir() {
		final, host, links, ok := fsys.resolve(p)
		if !ok {
			return &HostPathError{Path: p, Err: errors.New("does not lead to a regular file")}
		}
		useHost(final, host, links)
		enqueue(final, host, path.Dir(p))
		return nil
	}
	// A directory: resolve the symlinks leading to it, then walk its real
	// location.
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return &HostPathError{Path: p, Err: err}
	}
	if real != p {
		_, kind, _, links := fsys.walk(p)
		if kind != nodeDir {
			return &HostPathError{Path: p, Err: errors.New("does not lead to a directory")}
		}
		for _, l := range links {
			addLink(l)
		}
	}
	return filepath.WalkDir(real, func(q string, d os.DirEntry, err error) error {
		if err != nil {
			return &HostPathError{Path: p, Err: err}
		}
		switch {
		case d.IsDir():
			addDir(q)
		case d.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(q)
			if err != nil {
				return &HostPathError{Path: q, Err: err}
			}
			addLink(hostLink{name: q, target: target})
			// A link to a file elsewhere (torch/lib/libtorch.so ->
			// /usr/lib/<triplet>/libtorch.so.1.13, loaded with dlopen)
			// must not dangle: carry its target, with its closure.
			// Links to directories stay links; following them could
			// pull in whole unrelated trees.
			if st, err := os.Stat(q); err == nil && st.Mode().IsRegular() {
				if final, host, links, ok := fsys.resolve(q); ok {
					useHost(final, host, links)
					enqueue(final, host, path.Dir(q))
				}
			}
		case d.Type().IsRegular():
			useHost(q, q, nil)
			enqueue(q, q, path.Dir(q))
		default:
			return &HostPathError{Path: q, Err: fmt.Errorf("unsupported file type %v", d.Type())}
		}
		return nil
	})
}
