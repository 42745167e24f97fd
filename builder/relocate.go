package builder

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tritonbuild/tritonbuild/builder/store"
)

// Relocatable trees. A tree is built at its store path, and build systems
// write that path into what they install: runpaths of ELF files, libtool
// .la files, pkg-config files, CMake package files, scripts. So that one
// tree serves every store root and install prefix, the executor, after
// install and before commit:
//
//   - rewrites every ELF runpath entry that points into the store into an
//     $ORIGIN-relative one, and gives ELF files that need a library of
//     their own tree (or of a dependency's) but cannot find it an
//     $ORIGIN-relative entry for it (patchelf does the editing);
//   - records the text files that still name the store root: their
//     manifest entries carry Prefix, and their digests are taken with the
//     root replaced by StorePlaceholder, so the tree digest does not depend
//     on the root. Install, verify and a binary-cache pull into another
//     root rewrite them;
//   - reports binaries that embed the store path some other way: those are
//     not relocatable and are marked EmbedsStore.

// Relocation is what relocateTree did to a tree.
type Relocation struct {
	// Runpaths lists the ELF files whose runpath was rewritten.
	Runpaths []string
	// Text lists the text files that name the store.
	Text []string
	// Binaries lists the binary files that embed the store path.
	Binaries []string
}

// relocateTree makes the ELF files of tree (installed for prefix, inside
// the store at storeRoot) use $ORIGIN-relative runpaths, and classifies
// the files that still name the store. deps are the store trees of the
// node's dependencies.
func relocateTree(ctx context.Context, tree, prefix, storeRoot string, deps []string) (*Relocation, error) {
	rel := &Relocation{}
	libs, err := libraryIndex(tree, "")
	if err != nil {
		return nil, err
	}
	for _, d := range deps {
		idx, err := libraryIndex(d, d)
		if err != nil {
			return nil, err
		}
		for k, v := range idx {
			if _, ok := libs[k]; !ok {
				libs[k] = v
			}
		}
	}
	err = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		r, _ := filepath.Rel(tree, p)
		r = filepath.ToSlash(r)
		changed, err := fixRunpath(ctx, p, r, prefix, storeRoot, libs)
		if err != nil {
			return fmt.Errorf("relocating %s: %w", r, err)
		}
		if changed {
			rel.Runpaths = append(rel.Runpaths, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rel.Text, rel.Binaries, err = storeReferences(tree, storeRoot)
	return rel, err
}

// libLocation is where a shared library of a tree lives: dir is relative
// to its tree; store is the tree's store path for a dependency ("" for the
// node's own tree).
type libLocation struct {
	dir   string
	store string
}

// libraryIndex maps the file names of shared libraries (regular files and
// symlinks named lib*.so*) in tree to their directories.
func libraryIndex(tree, store string) (map[string]libLocation, error) {
	out := map[string]libLocation{}
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || !strings.Contains(d.Name(), ".so") {
			return nil
		}
		dir, _ := filepath.Rel(tree, filepath.Dir(p))
		if _, ok := out[d.Name()]; !ok {
			out[d.Name()] = libLocation{dir: filepath.ToSlash(dir), store: store}
		}
		return nil
	})
	return out, err
}

// fixRunpath rewrites one ELF file's runpath. rel is its path in the tree.
func fixRunpath(ctx context.Context, path, rel, prefix, storeRoot string, libs map[string]libLocation) (bool, error) {
	if !isELF(path) {
		return false, nil
	}
	f, err := elf.Open(path)
	if err != nil {
		return false, nil // not an ELF we can read: leave it alone
	}
	needed, _ := f.DynString(elf.DT_NEEDED)
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	rpath, _ := f.DynString(elf.DT_RPATH)
	f.Close()
	if len(needed) == 0 {
		return false, nil
	}
	var old []string
	for _, v := range append(runpath, rpath...) {
		old = append(old, filepath.SplitList(v)...)
	}
	dir := filepath.Dir(rel)             // the file's directory in the tree
	absDir := filepath.Join(prefix, dir) // and in the store
	var entries []string
	add := func(e string) {
		for _, x := range entries {
			if x == e {
				return
			}
		}
		entries = append(entries, e)
	}
	origin := func(from, to string) string {
		r, _ := filepath.Rel(from, to)
		if r == "." {
			return "$ORIGIN"
		}
		return "$ORIGIN/" + filepath.ToSlash(r)
	}
	nodes := filepath.Join(storeRoot, "nodes") + "/"
	for _, e := range old {
		switch {
		case e == prefix || strings.HasPrefix(e, prefix+"/"):
			add(origin(absDir, e))
		case strings.HasPrefix(e, nodes):
			// A dependency's tree: relative to the dependency's own layout
			// (right in a merged install prefix), then relative in the
			// store (right for programs run from the store).
			if i := strings.Index(e[len(nodes):], "/tree"); i >= 0 {
				inTree := strings.TrimPrefix(e[len(nodes)+i+len("/tree"):], "/")
				add(origin(dir, inTree))
			}
			add(origin(absDir, e))
		default:
			add(e)
		}
	}
	// Libraries the file needs and only this tree or a dependency has but
	// its runpath does not reach (CMake's default for programs linking the
	// project's own shared library). An $ORIGIN entry the recipe chose
	// that points at the library's directory in the merged install layout
	// ($ORIGIN/../lib for a dependency's lib/) counts as reaching it.
	for _, lib := range needed {
		loc, ok := libs[lib]
		if !ok || resolvable(lib, entries, absDir) || intended(entries, dir, loc.dir) {
			continue
		}
		add(origin(dir, loc.dir))
		if loc.store != "" {
			add(origin(absDir, filepath.Join(loc.store, loc.dir)))
		}
	}
	if strings.Join(entries, ":") == strings.Join(old, ":") {
		return false, nil
	}
	if _, err := exec.LookPath("patchelf"); err != nil {
		return false, fmt.Errorf("its runpath %q must become relative and patchelf is not installed (apt-get install patchelf)", strings.Join(old, ":"))
	}
	st, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	if st.Mode().Perm()&0o200 == 0 {
		if err := os.Chmod(path, st.Mode().Perm()|0o200); err != nil {
			return false, err
		}
		defer func() { _ = os.Chmod(path, st.Mode().Perm()) }() // the tree is ours and about to be hashed: a failure shows as a mode difference
	}
	cmd := exec.CommandContext(ctx, "patchelf", "--set-rpath", strings.Join(entries, ":"), path)
	if out, err := cmd.CombinedOutput(); err != nil {
		return false, fmt.Errorf("patchelf --set-rpath: %w: %s", err, bytes.TrimSpace(out))
	}
	return true, nil
}

// resolvable reports whether lib is found through runpath entries
// (relative ones taken from the file's store directory).
func resolvable(lib string, entries []string, absDir string) bool {
	for _, e := range entries {
		e = strings.Replace(e, "$ORIGIN", absDir, 1)
		if _, err := os.Stat(filepath.Join(e, lib)); err == nil {
			return true
		}
	}
	return false
}

// intended reports whether an $ORIGIN-relative entry, read from dir in
// the install layout, names libDir.
func intended(entries []string, dir, libDir string) bool {
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e, "$ORIGIN"); ok && filepath.Clean(filepath.Join(dir, rest)) == filepath.Clean(libDir) {
			return true
		}
	}
	return false
}

func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	n, _ := f.Read(magic[:])
	return n == 4 && string(magic[:]) == elf.ELFMAG
}

// storeReferences lists the regular files of tree that contain the store
// root, split into text files and binaries (ELF, or any file with a NUL
// byte).
func storeReferences(tree, storeRoot string) (text, binaries []string, err error) {
	needle := []byte(storeRoot + "/")
	err = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Contains(data, needle) {
			return nil
		}
		r, _ := filepath.Rel(tree, p)
		if store.IsBinary(data) {
			binaries = append(binaries, filepath.ToSlash(r))
		} else {
			text = append(text, filepath.ToSlash(r))
		}
		return nil
	})
	sort.Strings(text)
	sort.Strings(binaries)
	return text, binaries, err
}
