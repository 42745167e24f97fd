package store

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// StorePlaceholder stands for the store root in the digests of text files
// that name it (FileEntry.Prefix), so that a tree's digest is the same
// whatever the root of the store that holds it.
const StorePlaceholder = "/@tritonbuild-store@"

// IsBinary reports whether data is an ELF file or holds a NUL byte.
func IsBinary(data []byte) bool {
	return bytes.HasPrefix(data, []byte(elf.ELFMAG)) || bytes.IndexByte(data, 0) >= 0
}

// normalizeStore replaces the store root in data by StorePlaceholder.
func normalizeStore(data []byte, storeRoot string) []byte {
	return bytes.ReplaceAll(data, []byte(storeRoot+"/"), []byte(StorePlaceholder+"/"))
}

// storeTreeRE matches a tree path of the store at root.
func storeTreeRE(root string) *regexp.Regexp {
	return regexp.MustCompile(regexp.QuoteMeta(root+"/nodes/") + `[^/\s"':;]+/tree`)
}

// RewriteForPrefix returns a text file's content with every store tree
// path (of this node or a dependency) replaced by prefix: how the file
// reads once the trees are merged into an install prefix.
func RewriteForPrefix(data []byte, storeRoot, prefix string) []byte {
	return storeTreeRE(storeRoot).ReplaceAll(data, []byte(strings.ReplaceAll(prefix, "$", "$$")))
}

// RewriteStoreRoot returns data with the store root from replaced by to.
func RewriteStoreRoot(data []byte, from, to string) []byte {
	return bytes.ReplaceAll(data, []byte(from+"/"), []byte(to+"/"))
}

// RelocateStoreTree rewrites the Prefix files of a tree that m describes
// from the store root m names to newRoot, and returns the manifest for the
// new root with the binaries that still name the old one. The digests
// stay: they are taken with the root replaced by StorePlaceholder.
func RelocateStoreTree(tree string, m *Manifest, newRoot string) (*Manifest, []string, error) {
	if m.StoreRoot == "" || m.StoreRoot == newRoot {
		return m, nil, nil
	}
	var stuck []string
	for _, f := range m.Files {
		p := filepath.Join(tree, filepath.FromSlash(f.Path))
		switch {
		case f.Prefix:
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, nil, err
			}
			// The tree is a private staging copy: an in-place write is safe.
			// A read-only file (0444 is common) is made writable for it.
			if f.Mode.Perm()&0o200 == 0 {
				if err := os.Chmod(p, f.Mode.Perm()|0o200); err != nil {
					return nil, nil, fmt.Errorf("relocating %s: %w", f.Path, err)
				}
			}
			err = os.WriteFile(p, RewriteStoreRoot(data, m.StoreRoot, newRoot), f.Mode.Perm())
			if cerr := os.Chmod(p, f.Mode.Perm()); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, nil, fmt.Errorf("relocating %s: %w", f.Path, err)
			}
		case f.EmbedsStore:
			stuck = append(stuck, f.Path)
		}
	}
	out := *m
	out.StoreRoot = newRoot
	return &out, stuck, nil
}
