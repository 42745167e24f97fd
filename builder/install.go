package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
)

// InstallRecord is where an install prefix records what tritonbuild put
// there, relative to the prefix.
const InstallRecord = ".tritonbuild/installed.json"

// InstallOptions tune Install.
type InstallOptions struct {
	// Force installs into a non-empty directory that no tritonbuild install
	// made, replacing the files there that a tree ships; every other file
	// in it is kept.
	Force bool
}

// InstallResult says what Install did.
type InstallResult struct {
	Trees   int
	Files   int // regular files and symlinks, not directories
	Removed int // stale files of a previous install removed
	// Replaced lists files that were not ours and were overwritten (Force).
	Replaced []string
	// Kept lists stale files of ours that were changed since and so kept.
	Kept []string
}

// installRecord is the content of InstallRecord.
type installRecord struct {
	Prefix string          `json:"prefix"`
	Trees  []string        `json:"trees"`
	Files  []installedFile `json:"files"`
}

// installedFile is one entry tritonbuild created in a prefix, with the
// content it had then, so that a later install removes it only if it is
// still what we wrote.
type installedFile struct {
	Path   string      `json:"path"`
	Mode   fs.FileMode `json:"mode"`
	SHA256 string      `json:"sha256,omitempty"`
	Link   string      `json:"link,omitempty"`
}

// Install lays the install trees of nodes (externals excluded) into one
// prefix, like the report's ~/triton_server_install. It owns only what it
// installs: the prefix records the files, each file is replaced by a
// rename (a reader sees the old or the new file), files of a previous
// install that no tree ships any more are removed when unchanged, and
// every other file is left alone. A non-empty directory that no install
// made is refused unless opts.Force. Text files that name the store are
// rewritten to name the prefix. Two trees that ship the same path with
// different contents are an error.
func Install(ctx context.Context, st *store.Store, nodes []*Node, prefix string, opts InstallOptions) (*InstallResult, error) {
	abs, err := filepath.Abs(prefix)
	if err != nil {
		return nil, err
	}
	unlock, err := st.LockPrefix(ctx, abs)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return install(ctx, st, nodes, abs, opts)
}

// install is Install into abs, under its prefix lock.
func install(ctx context.Context, st *store.Store, nodes []*Node, abs string, opts InstallOptions) (*InstallResult, error) {
	old, err := readInstallRecord(abs)
	if err != nil {
		return nil, err
	}
	if old == nil {
		inWay, err := listForeign(abs, 5)
		if err != nil {
			return nil, err
		}
		if len(inWay) > 0 && !opts.Force {
			return nil, fmt.Errorf("install: %s is not empty and no tritonbuild install made it; it holds %s (use --force to install into it anyway: files no tree ships are kept)", abs, strings.Join(inWay, ", "))
		}
		old = &installRecord{}
	}
	ours := map[string]installedFile{}
	for _, f := range old.Files {
		ours[f.Path] = f
	}

	type planned struct {
		entry store.FileEntry
		src   string
		m     *store.Manifest
	}
	var todo []planned
	owner := map[string]string{}
	sums := map[string]string{}
	res := &InstallResult{}
	rec := &installRecord{Prefix: abs}
	for _, n := range nodes {
		if n.Status == StatusExternal {
			continue
		}
		m, err := st.Manifest(n.Key())
		if err != nil {
			return nil, fmt.Errorf("install %s: %w (is it built?)", n.Name, err)
		}
		res.Trees++
		rec.Trees = append(rec.Trees, n.Hash)
		root := st.TreeDir(n.Key())
		for _, f := range m.Files {
			if prev, ok := owner[f.Path]; ok {
				if !f.Mode.IsDir() && sums[f.Path] != f.SHA256+f.Link {
					return nil, fmt.Errorf("install: %s is shipped by both %s and %s with different contents", f.Path, prev, n.Name)
				}
				continue
			}
			owner[f.Path], sums[f.Path] = n.Name, f.SHA256+f.Link
			todo = append(todo, planned{f, filepath.Join(root, filepath.FromSlash(f.Path)), m})
		}
	}
	// Files of someone else where a tree ships one.
	var foreign []string
	for _, p := range todo {
		if _, mine := ours[p.entry.Path]; mine {
			continue
		}
		st, err := os.Lstat(filepath.Join(abs, filepath.FromSlash(p.entry.Path)))
		if err != nil {
			continue
		}
		if p.entry.Mode.IsDir() && st.IsDir() {
			continue
		}
		foreign = append(foreign, p.entry.Path)
	}
	if len(foreign) > 0 && !opts.Force {
		return nil, fmt.Errorf("install: %s already holds %s, which no tritonbuild install put there (use --force to replace them)", abs, strings.Join(firstN(foreign, 5), ", "))
	}
	res.Replaced = foreign

	// Until the install finishes, the record claims the old files and the
	// new ones: an interrupted install still knows what is ours. It lists
	// no trees: none is completely installed yet.
	pending := &installRecord{Prefix: abs, Files: append([]installedFile{}, old.Files...)}
	// The files of someone else that --force replaces are not claimed:
	// an entry without a sha256 counts as unchanged, so a later install
	// would remove the user's file as stale when this one stops before
	// replacing it.
	replaced := map[string]bool{}
	for _, p := range foreign {
		replaced[p] = true
	}
	for _, p := range todo {
		if _, mine := ours[p.entry.Path]; !mine && !p.entry.Mode.IsDir() && !replaced[p.entry.Path] {
			pending.Files = append(pending.Files, installedFile{Path: p.entry.Path, Mode: p.entry.Mode})
		}
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("install: %w", err)
	}
	if err := writeInstallRecord(abs, pending); err != nil {
		return nil, err
	}
	installed := map[string]bool{}
	for _, p := range todo {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f := p.entry
		dst := filepath.Join(abs, filepath.FromSlash(f.Path))
		if f.Mode.IsDir() {
			st, err := os.Lstat(dst)
			if err == nil && st.IsDir() {
				if _, mine := ours[f.Path]; mine {
					rec.Files = append(rec.Files, installedFile{Path: f.Path, Mode: f.Mode})
				}
				installed[f.Path] = true
				continue
			}
			if err == nil {
				os.Remove(dst) // a file of ours, or a replaced one, where a dir goes
			}
			if err := os.MkdirAll(dst, f.Mode.Perm()|0o700); err != nil {
				return nil, fmt.Errorf("install %s: %w", f.Path, err)
			}
			rec.Files = append(rec.Files, installedFile{Path: f.Path, Mode: f.Mode})
			installed[f.Path] = true
			continue
		}
		entry, err := installFile(p.src, dst, f, p.m, abs)
		if err != nil {
			return nil, fmt.Errorf("install %s: %w", f.Path, err)
		}
		rec.Files = append(rec.Files, entry)
		installed[f.Path] = true
		res.Files++
	}
	// Stale files of the previous install: removed while unchanged, then
	// their directories once empty (deepest first).
	var staleDirs []string
	for _, f := range old.Files {
		if installed[f.Path] {
			continue
		}
		p := filepath.Join(abs, filepath.FromSlash(f.Path))
		if f.Mode.IsDir() {
			staleDirs = append(staleDirs, p)
			continue
		}
		if !unchanged(p, f) {
			if _, err := os.Lstat(p); err == nil {
				res.Kept = append(res.Kept, f.Path)
			}
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("install: removing stale %s: %w", f.Path, err)
		}
		res.Removed++
	}
	sort.Sort(sort.Reverse(sort.StringSlice(staleDirs)))
	for _, d := range staleDirs {
		os.Remove(d) // fails, and keeps it, when something else is inside
	}
	if err := writeInstallRecord(abs, rec); err != nil {
		return nil, err
	}
	return res, nil
}

// installFile puts one file or symlink at dst by a rename over it. Text
// files naming the store are rewritten to name the prefix.
func installFile(src, dst string, f store.FileEntry, m *store.Manifest, prefix string) (installedFile, error) {
	entry := installedFile{Path: f.Path, Mode: f.Mode, Link: f.Link}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return entry, err
	}
	tmp := filepath.Join(filepath.Dir(dst), ".tritonbuild-"+filepath.Base(dst)+".tmp")
	os.Remove(tmp)
	if f.Mode&fs.ModeSymlink != 0 {
		if err := os.Symlink(f.Link, tmp); err != nil {
			return entry, err
		}
		return entry, renameOver(tmp, dst)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return entry, err
	}
	if f.Prefix && m.StoreRoot != "" {
		data = store.RewriteForPrefix(data, m.StoreRoot, prefix)
	}
	sum := sha256.Sum256(data)
	entry.SHA256 = hex.EncodeToString(sum[:])
	if st, err := os.Lstat(dst); err == nil && st.IsDir() {
		if err := os.Remove(dst); err != nil {
			return entry, err
		}
	}
	return entry, atomicfile.WriteFile(dst, data, f.Mode.Perm())
}

// renameOver renames tmp to dst, first removing an empty directory at dst
// (a rename cannot replace one with a file).
func renameOver(tmp, dst string) error {
	if st, err := os.Lstat(dst); err == nil && st.IsDir() {
		if err := os.Remove(dst); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// unchanged reports whether the file at p is still what f records.
func unchanged(p string, f installedFile) bool {
	st, err := os.Lstat(p)
	if err != nil {
		return false
	}
	if f.Mode&fs.ModeSymlink != 0 {
		l, err := os.Readlink(p)
		return err == nil && l == f.Link
	}
	if !st.Mode().IsRegular() {
		return false
	}
	sum, err := store.FileSHA256(p)
	return err == nil && (f.SHA256 == "" || sum == f.SHA256)
}

func readInstallRecord(prefix string) (*installRecord, error) {
	data, err := os.ReadFile(filepath.Join(prefix, InstallRecord))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("install: reading %s: %w", InstallRecord, err)
	}
	var r installRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("install: %s: %w", filepath.Join(prefix, InstallRecord), err)
	}
	return &r, nil
}

func writeInstallRecord(prefix string, r *installRecord) error {
	data, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	p := filepath.Join(prefix, InstallRecord)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if err := atomicfile.WriteFile(p, data, 0o644); err != nil {
		return fmt.Errorf("install: writing %s: %w", p, err)
	}
	return nil
}

// listForeign returns up to max files (or empty dirs) under dir, relative.
func listForeign(dir string, max int) ([]string, error) {
	var out []string
	errEnough := errors.New("enough")
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return filepath.SkipAll
			}
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if es, _ := os.ReadDir(p); len(es) > 0 {
				return nil
			}
		}
		out = append(out, filepath.ToSlash(rel))
		if len(out) >= max {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, fmt.Errorf("install: looking into %s: %w", dir, err)
	}
	return out, nil
}

func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
}
