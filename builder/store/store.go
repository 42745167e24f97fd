package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/tritonbuild/tritonbuild/builder/fetch"
	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
	"github.com/tritonbuild/tritonbuild/internal/filelock"
)

// Store is the directory of immutable install trees, plus the source
// cache, build work dirs and logs:
//
//	nodes/<name>-<version>-<hash16>/{tree/, manifest.json}   committed nodes
//	staging/<name>-<hash16>/                                 being built
//	work/<name>-<hash16>/                                    build dirs (resumable)
//	logs/<name>/<hash16>/<step>.log                          step logs
//	sources/                                                 fetch cache
//	locks/                                                   flock files
//
// A node exists only once its directory is renamed into nodes/, and that
// rename happens after the manifest is written, so a crash at any moment
// leaves either nothing or a complete tree.
type Store struct {
	Root string
}

// Key names a node in the store: its recipe, version and full content
// hash (64 hex digits).
type Key struct {
	Name, Version, Hash string
}

// Short is the first 16 hex digits of the hash, used in directory names.
func (k Key) Short() string { return k.Hash[:16] }

// Open creates the store's directories if needed.
func Open(root string) (*Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"nodes", "staging", "work", "logs", "sources", "locks", "stats"} {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o755); err != nil {
			return nil, fmt.Errorf("opening store %s: %w", abs, err)
		}
	}
	return &Store{Root: abs}, nil
}

// DefaultDir is TRITONBUILD_STORE, else <user cache dir>/tritonbuild.
func DefaultDir() string {
	if s := os.Getenv("TRITONBUILD_STORE"); s != "" {
		return s
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "tritonbuild")
	}
	return filepath.Join(os.TempDir(), "tritonbuild")
}

// id names the node's work, staging and lock entries.
func (k Key) id() string { return k.Name + "-" + k.Short() }

// NodeDir is where the committed node lives.
func (s *Store) NodeDir(k Key) string {
	return filepath.Join(s.Root, "nodes", k.Name+"-"+k.Version+"-"+k.Short())
}

// TreeDir is the node's install tree (its prefix).
func (s *Store) TreeDir(k Key) string { return filepath.Join(s.NodeDir(k), "tree") }

// WorkDir is the node's build directory, kept across attempts so an
// interrupted build resumes.
func (s *Store) WorkDir(k Key) string { return filepath.Join(s.Root, "work", k.id()) }

// LogDir holds the logs of the node's latest build attempt.
func (s *Store) LogDir(k Key) string {
	return filepath.Join(s.Root, "logs", k.Name, k.Short())
}

// StatsFile is where measured per-command memory of a recipe version is
// kept for the next build.
func (s *Store) StatsFile(k Key) string {
	return filepath.Join(s.Root, "stats", k.Name+"-"+k.Version+".json")
}

// Sources is the content-addressed source cache.
func (s *Store) Sources() fetch.Cache { return fetch.Cache{Dir: filepath.Join(s.Root, "sources")} }

// Has reports whether the node is committed.
func (s *Store) Has(k Key) bool {
	_, err := os.Stat(filepath.Join(s.NodeDir(k), "manifest.json"))
	return err == nil
}

// Lock takes the node's exclusive flock, waiting until ctx is done. Two
// tritonbuild processes building (or pulling) the same node serialise
// here; the second then finds the node committed.
func (s *Store) Lock(ctx context.Context, k Key) (func(), error) {
	return s.LockNotify(ctx, k, nil)
}

// LockShared takes the node's flock shared, waiting until ctx is done, and
// calls waiting (when not nil) once if it must wait: what reads a
// committed tree from start to end (a push to the binary cache) holds it,
// so that neither a forced rebuild, which replaces the tree under the
// exclusive lock, nor gc, which removes it only when it can take the
// exclusive lock, changes the tree meanwhile. Any number of readers hold
// it at once. A process holding the exclusive lock must not take it too:
// flock locks of two opens exclude each other even in one process.
func (s *Store) LockShared(ctx context.Context, k Key, waiting func()) (func(), error) {
	return s.lock(ctx, k, filelock.Shared, "store lock %s (shared): %w", waiting)
}

// TryLock takes the node's exclusive flock if no one holds it, shared or
// exclusive, now; ok is false, and unlock nil, when someone does.
func (s *Store) TryLock(k Key) (unlock func(), ok bool, err error) {
	unlock, ok, err = filelock.TryLock(s.lockPath(k))
	if err != nil {
		return nil, false, fmt.Errorf("store lock %s: %w", k.id(), err)
	}
	return unlock, ok, nil
}

// lockPath is the file the node's flock is taken on.
func (s *Store) lockPath(k Key) string { return filepath.Join(s.Root, "locks", k.id()+".lock") }

// LockNotify is Lock that calls waiting once when the lock is held by
// someone else, so that a person learns why nothing happens.
func (s *Store) LockNotify(ctx context.Context, k Key, waiting func()) (func(), error) {
	return s.lock(ctx, k, filelock.Lock, "store lock %s: %w", waiting)
}

// lock takes the node's flock with take (filelock.Lock or Shared), calling
// waiting once when it is not free at once; failure names the node in
// the format errf.
func (s *Store) lock(ctx context.Context, k Key, take func(context.Context, string) (func(), error), errf string, waiting func()) (func(), error) {
	path := s.lockPath(k)
	if waiting != nil {
		// One attempt that does not wait: a context that is already done.
		try, cancel := context.WithCancel(ctx)
		cancel()
		unlock, err := take(try, path)
		if err == nil {
			return unlock, nil
		}
		if ctx.Err() == nil && errors.Is(err, context.Canceled) {
			waiting()
		}
	}
	unlock, err := take(ctx, path)
	if err != nil {
		return nil, fmt.Errorf(errf, k.id(), err)
	}
	return unlock, nil
}

// LockPrefix takes the exclusive flock of an install prefix (an absolute
// path), waiting until ctx is done: two installs into one prefix from
// this store would otherwise race on its record of what is ours. The lock
// lives in the store, so that the prefix holds nothing of an install that
// is refused.
func (s *Store) LockPrefix(ctx context.Context, prefix string) (func(), error) {
	sum := sha256.Sum256([]byte(prefix))
	path := filepath.Join(s.Root, "locks", "install-"+hex.EncodeToString(sum[:8])+".lock")
	unlock, err := filelock.Lock(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("install lock for %s: %w", prefix, err)
	}
	return unlock, nil
}

// StagingDir is the node's private staging area; only the holder of the
// node's lock uses it, so a leftover from a killed process may be removed.
func (s *Store) StagingDir(k Key) string { return filepath.Join(s.Root, "staging", k.id()) }

// Commit writes m, which must describe staging/tree and carry the node's
// hash, as the node's manifest and renames staging into nodes/. The rename
// is the commit point. The caller holds the node's lock.
func (s *Store) Commit(k Key, staging string, m *Manifest) error {
	if m.Hash != k.Hash {
		return fmt.Errorf("committing %s: manifest is for hash %s, node is %s", k.Name, m.Hash, k.Hash)
	}
	data, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(staging, "manifest.json"), data, 0o644); err != nil {
		return fmt.Errorf("committing %s: %w", k.Name, err)
	}
	dst := s.NodeDir(k)
	if err := replaceDir(staging, dst); err != nil {
		return fmt.Errorf("committing %s into the store: %w", k.Name, err)
	}
	atomicfile.SyncDir(filepath.Dir(dst))
	return nil
}

// replaceDir moves dir src to dst. When dst exists (a forced rebuild), the
// two are exchanged in one atomic rename, so readers of dst see the old
// tree or the new one and never a gap; the old one, now at src, is removed
// (RemoveTree: it may hold read-only directories).
func replaceDir(src, dst string) error {
	err := os.Rename(src, dst)
	if err == nil || !errors.Is(err, fs.ErrExist) && !errors.Is(err, unix.ENOTEMPTY) {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_EXCHANGE); err != nil {
		return &os.LinkError{Op: "exchange", Old: src, New: dst, Err: err}
	}
	return RemoveTree(src)
}

// Manifest returns the committed node's manifest.
func (s *Store) Manifest(k Key) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(s.NodeDir(k), "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("reading manifest of %s: %w", k.Name, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", k.Name, err)
	}
	return &m, nil
}

// NodeMeta records what a tree is, for SBOMs and caches.
type NodeMeta struct {
	Name      string `json:"name"`
	Version   string `json:"version"`
	Hash      string `json:"hash"`
	License   string `json:"license,omitempty"`
	Homepage  string `json:"homepage,omitempty"`
	SourceURL string `json:"source_url,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
	Epoch     int64  `json:"epoch,omitempty"`
}

// Manifest lists every entry of an install tree and the tree's digest.
type Manifest struct {
	NodeMeta
	// StoreRoot is the store root the tree's Prefix files name; empty in
	// manifests written before trees were relocatable.
	StoreRoot string      `json:"store_root,omitempty"`
	Digest    string      `json:"digest"`
	Files     []FileEntry `json:"files"`
}

// FileCount counts the regular files and symlinks of the tree (not its
// directories).
func (m *Manifest) FileCount() int {
	c := 0
	for _, f := range m.Files {
		if !f.Mode.IsDir() {
			c++
		}
	}
	return c
}

// FileEntry is one path of a tree. Mode keeps the type bits and the
// permission bits; Link is a symlink's target.
type FileEntry struct {
	Path   string      `json:"path"`
	Mode   fs.FileMode `json:"mode"`
	Size   int64       `json:"size,omitempty"`
	SHA256 string      `json:"sha256,omitempty"`
	Link   string      `json:"link,omitempty"`
	// Prefix marks a text file that names the store root: Size and SHA256
	// are those of its content with the root replaced by
	// StorePlaceholder, and install, verify and pulls rewrite it.
	Prefix bool `json:"prefix,omitempty"`
	// EmbedsStore marks a binary that names the store root: it is not
	// relocatable.
	EmbedsStore bool `json:"embeds_store,omitempty"`
}

// BuildManifest walks a tree and hashes every file. The digest covers
// paths, types, permission bits, sizes, contents and link targets, but not
// owners or times, so identical builds in different places agree.
func BuildManifest(root string) (*Manifest, error) { return BuildManifestFor(root, "") }

// BuildManifestFor is BuildManifest for a tree in the store at storeRoot:
// text files naming that root are marked Prefix and hashed with the root
// replaced by StorePlaceholder, binaries naming it are marked EmbedsStore,
// so the digest is the same whatever the root.
func BuildManifestFor(root, storeRoot string) (*Manifest, error) {
	m := &Manifest{StoreRoot: storeRoot}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := FileEntry{Path: filepath.ToSlash(rel), Mode: info.Mode() & (fs.ModeType | fs.ModePerm)}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if e.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			e.Size = info.Size()
			if storeRoot != "" {
				if err := hashForStore(p, storeRoot, &e); err != nil {
					return err
				}
			} else if e.SHA256, err = FileSHA256(p); err != nil {
				return err
			}
		case info.IsDir():
		default:
			return fmt.Errorf("%s: unsupported file type %s in install tree", p, info.Mode().Type())
		}
		m.Files = append(m.Files, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("hashing tree %s: %w", root, err)
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	files, err := json.Marshal(m.Files)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(files)
	m.Digest = "sha256:" + hex.EncodeToString(sum[:])
	return m, nil
}

// hashForStore fills e's digest, normalizing a text file that names the
// store at storeRoot.
func hashForStore(p, storeRoot string, e *FileEntry) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if bytes.Contains(data, []byte(storeRoot+"/")) {
		if IsBinary(data) {
			e.EmbedsStore = true
		} else {
			e.Prefix = true
			data = normalizeStore(data, storeRoot)
			e.Size = int64(len(data))
		}
	}
	sum := sha256.Sum256(data)
	e.SHA256 = hex.EncodeToString(sum[:])
	return nil
}

// FileSHA256 is the hex sha256 of the file at p.
func FileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
