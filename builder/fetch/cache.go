package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
	"github.com/tritonbuild/tritonbuild/internal/filelock"
)

// Cache is a content-addressed store of source files. A file with sha256
// digest H lives at <Dir>/sha256/<H> and is read-only; it appears there only
// by an atomic rename after its digest was checked.
//
// Layout under Dir:
//
//	sha256/<hex>        verified files
//	partial/<hex>.part  an interrupted download, resumed by the next fetch
//	locks/<hex>.lock    flock(2) target serialising fetches of one digest
//	tmp/                temporary files and directories (same file system)
//	git/<commit>.tar    git checkouts (see FetchGit)
//	apt/                the private apt configuration and lists (see FetchApt)
//
// The zero value is not usable; Dir must be set. Several processes may share
// one Dir.
type Cache struct {
	Dir string
}

// ValidSHA256 reports whether s is a 64-character lowercase hex digest, the
// only spelling the cache accepts.
func ValidSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// normalizeSHA256 lowercases a digest and checks its form, so that recipes
// written with uppercase hex still find their cache entries.
func normalizeSHA256(s string) (string, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	if !ValidSHA256(l) {
		return "", fmt.Errorf("invalid sha256 %q: want 64 hex digits", s)
	}
	return l, nil
}

// Path is where the file with the given digest lives (or would live).
func (c Cache) Path(sha string) string {
	return filepath.Join(c.Dir, "sha256", strings.ToLower(sha))
}

// Has reports whether a verified file with the given digest is in the cache.
// It never touches the network and does not rehash the file: files enter the
// cache only after verification.
func (c Cache) Has(sha string) bool {
	sha = strings.ToLower(sha)
	if !ValidSHA256(sha) {
		return false
	}
	fi, err := os.Stat(c.Path(sha))
	return err == nil && fi.Mode().IsRegular()
}

func (c Cache) partPath(sha string) string {
	return filepath.Join(c.Dir, "partial", sha+".part")
}

func (c Cache) tmpDir() string { return filepath.Join(c.Dir, "tmp") }

// prepare creates the cache's directories.
func (c Cache) prepare() error {
	if c.Dir == "" {
		return errors.New("source cache: no directory configured")
	}
	for _, d := range []string{"sha256", "partial", "locks", "tmp"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return fmt.Errorf("source cache: %w", err)
		}
	}
	return nil
}

// Lock takes the per-key lock (a digest or commit id) shared by all
// processes using this cache, waiting until it is free or ctx ends. The lock
// file is never removed: removing it would let two processes lock two
// different inodes of the same name.
func (c Cache) Lock(ctx context.Context, key string) (unlock func(), err error) {
	if err := c.prepare(); err != nil {
		return nil, err
	}
	unlock, err = filelock.Lock(ctx, filepath.Join(c.Dir, "locks", key+".lock"))
	if err != nil {
		return nil, fmt.Errorf("source cache lock: %w", err)
	}
	return unlock, nil
}

// Adopt moves the file at src into the cache under sha after checking its
// digest, and returns the cache path. src is renamed when it is on the
// cache's file system and copied otherwise; either way it is gone afterwards.
// On a mismatch src is removed and a *ChecksumError naming origin is
// returned. Callers that may race with other fetchers of the same digest
// should hold Lock(sha).
func (c Cache) Adopt(ctx context.Context, sha, src, origin string) (string, error) {
	sha, err := normalizeSHA256(sha)
	if err != nil {
		return "", err
	}
	if err := c.prepare(); err != nil {
		return "", err
	}
	got, err := hashFile(ctx, src)
	if err != nil {
		return "", err
	}
	if got != sha {
		os.Remove(src)
		return "", &ChecksumError{URL: origin, Want: sha, Got: got}
	}
	dst := c.Path(sha)
	if err := os.Chmod(src, 0o444); err != nil {
		return "", fmt.Errorf("source cache: %w", err)
	}
	if err := os.Rename(src, dst); err == nil {
		atomicfile.SyncDir(filepath.Dir(dst))
		return dst, nil
	} else if !errors.Is(err, syscall.EXDEV) {
		return "", fmt.Errorf("source cache: %w", err)
	}
	// Another file system: copy into a temp file beside the target, then
	// rename, so the entry still appears atomically.
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("source cache: %w", err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(c.tmpDir(), sha+".*")
	if err != nil {
		return "", fmt.Errorf("source cache: %w", err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), ctxReader{ctx, in})
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && hex.EncodeToString(h.Sum(nil)) != sha {
		err = fmt.Errorf("%s changed while being copied", src)
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o444)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("source cache: %w", err)
	}
	atomicfile.SyncDir(filepath.Dir(dst))
	os.Remove(src)
	return dst, nil
}

// Verify rehashes the cached file with the given digest. A file whose
// content no longer matches (disk corruption, a hand edit) is removed, so
// that the next fetch downloads it again, and a *ChecksumError is returned.
func (c Cache) Verify(ctx context.Context, sha string) error {
	sha, err := normalizeSHA256(sha)
	if err != nil {
		return err
	}
	p := c.Path(sha)
	got, err := hashFile(ctx, p)
	if err != nil {
		return fmt.Errorf("verifying cached source: %w", err)
	}
	if got != sha {
		os.Remove(p)
		return &ChecksumError{URL: p, Want: sha, Got: got}
	}
	return nil
}

// hashFile returns the sha256 of a file's content as lowercase hex.
func hashFile(ctx context.Context, name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, ctxReader{ctx, f}); err != nil {
		return "", fmt.Errorf("hashing %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ctxReader stops a long local copy or hash when the context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
