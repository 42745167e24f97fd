package fetch

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/archive"
	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
)

// GitSpec pins a git source. Commit is the pin; Tag only makes the clone
// cheap (a shallow clone of one tag) and documents intent.
type GitSpec struct {
	URL string
	// Tag, when set, is cloned shallowly; its commit must equal Commit.
	Tag string
	// Commit is the full 40-hex commit id and the digest of the source.
	Commit string
	// Submodules checks out all submodules recursively.
	Submodules bool
}

// ValidCommit reports whether s is a full 40-character lowercase hex commit
// id. Abbreviated ids are refused: they are ambiguous as pins.
func ValidCommit(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// FetchGit returns the path of a tar file holding the checkout spec pins,
// creating it when it is not cached yet; a cached checkout needs no git and
// no network. The tar is deterministic: entries in name order, relative
// names without a top directory, mode 0755 or 0644 by the exec bit, owner 0,
// mtime 0, no .git metadata. Its cache name is <Dir>/git/<commit>.tar, or
// <commit>+submodules.tar when submodules are included, because the digest of
// a git source is its commit.
func FetchGit(ctx context.Context, spec GitSpec, cache Cache, opts Options) (string, error) {
	commit := strings.ToLower(spec.Commit)
	if !ValidCommit(commit) {
		return "", fmt.Errorf("git source %s: commit %q is not a full 40-hex commit id", spec.URL, spec.Commit)
	}
	key := commit
	if spec.Submodules {
		key += "+submodules"
	}
	out := gitCachePath(cache, spec)
	if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() {
		return out, nil
	}
	unlock, err := cache.Lock(ctx, "git-"+key)
	if err != nil {
		return "", err
	}
	defer unlock()
	if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", fmt.Errorf("git source cache: %w", err)
	}
	tmp, err := os.MkdirTemp(cache.tmpDir(), "git-"+commit[:12]+"-*")
	if err != nil {
		return "", fmt.Errorf("git source cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	if err := CheckoutGit(ctx, spec, src, opts); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(out), key+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("git source cache: %w", err)
	}
	err = writeTar(ctx, f, src)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o444)
	}
	if err == nil {
		err = os.Rename(f.Name(), out)
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("git source %s: writing %s: %w", spec.URL, out, err)
	}
	atomicfile.SyncDir(filepath.Dir(out))
	return out, nil
}

// CheckoutGit clones spec into dest, which must not exist, checks that HEAD
// is spec.Commit, and removes the .git metadata (of submodules too), leaving
// only the tracked files. dest appears by a rename once everything is done,
// so a failure leaves nothing there.
func CheckoutGit(ctx context.Context, spec GitSpec, dest string, opts Options) error {
	commit := strings.ToLower(spec.Commit)
	if !ValidCommit(commit) {
		return fmt.Errorf("git source %s: commit %q is not a full 40-hex commit id", spec.URL, spec.Commit)
	}
	if spec.URL == "" {
		return errors.New("git source: no URL")
	}
	if strings.HasPrefix(spec.URL, "-") || strings.HasPrefix(spec.Tag, "-") {
		return fmt.Errorf("git source %q at %q: URL and tag must not start with '-'", spec.URL, spec.Tag)
	}
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("git source %s: destination %s already exists", spec.URL, dest)
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return fmt.Errorf("git source %s: %w", spec.URL, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dest), ".checkout-*")
	if err != nil {
		return fmt.Errorf("git source %s: %w", spec.URL, err)
	}
	defer os.RemoveAll(tmp)
	work := filepath.Join(tmp, "w")
	g := gitRunner{opts: opts}
	ref := commit
	fmt.Fprintf(opts.log(), "cloning %s at %s\n", spec.URL, firstNonEmpty(spec.Tag, commit))

	if spec.Tag != "" {
		ref = spec.Tag
		// A shallow clone of the tag is the cheap path; servers that cannot
		// do shallow clones (dumb HTTP) get a full one.
		_, err := g.run(ctx, "", "clone", "--quiet", "--depth", "1", "--branch", spec.Tag, "--", spec.URL, work)
		if err != nil {
			os.RemoveAll(work)
			fmt.Fprintf(opts.log(), "shallow clone of %s failed, trying a full clone: %v\n", spec.URL, err)
			if _, err2 := g.run(ctx, "", "clone", "--quiet", "--branch", spec.Tag, "--", spec.URL, work); err2 != nil {
				return fmt.Errorf("git source %s at tag %s: %w", spec.URL, spec.Tag, err2)
			}
		}
	} else {
		if _, err := g.run(ctx, "", "init", "--quiet", work); err != nil {
			return fmt.Errorf("git source %s: %w", spec.URL, err)
		}
		if _, err := g.run(ctx, work, "remote", "add", "origin", spec.URL); err != nil {
			return fmt.Errorf("git source %s: %w", spec.URL, err)
		}
		// Fetching one commit by id needs server support (most hosts
		// allow it for reachable commits); otherwise fetch everything.
		if _, err := g.run(ctx, work, "fetch", "--quiet", "--depth", "1", "origin", commit); err != nil {
			fmt.Fprintf(opts.log(), "fetching commit %s of %s directly failed, fetching all: %v\n", commit, spec.URL, err)
			if _, err2 := g.run(ctx, work, "fetch", "--quiet", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*"); err2 != nil {
				return fmt.Errorf("git source %s: %w", spec.URL, err2)
			}
		}
		if _, err := g.run(ctx, work, "checkout", "--quiet", "--detach", commit); err != nil {
			return fmt.Errorf("git source %s: commit %s: %w", spec.URL, commit, err)
		}
	}

	head, err := g.run(ctx, work, "rev-parse", "HEAD")
	if err != nil {
		return fmt.Errorf("git source %s: %w", spec.URL, err)
	}
	if head = strings.TrimSpace(head); head != commit {
		return &CommitError{URL: spec.URL, Ref: ref, Want: commit, Got: head}
	}

	if spec.Submodules {
		if _, err := g.run(ctx, work, "submodule", "update", "--init", "--recursive", "--depth", "1"); err != nil {
			fmt.Fprintf(opts.log(), "shallow submodule update of %s failed, trying full: %v\n", spec.URL, err)
			if _, err2 := g.run(ctx, work, "submodule", "update", "--init", "--recursive"); err2 != nil {
				return fmt.Errorf("git source %s: submodules: %w", spec.URL, err2)
			}
		}
	}

	if err := removeGitMetadata(work); err != nil {
		return fmt.Errorf("git source %s: %w", spec.URL, err)
	}
	if err := os.Rename(work, dest); err != nil {
		return fmt.Errorf("git source %s: %w", spec.URL, err)
	}
	return nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// removeGitMetadata deletes .git directories and the .git files that point
// submodules at their repositories.
func removeGitMetadata(root string) error {
	var gits []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Name() == ".git" {
			gits = append(gits, p)
			if e.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range gits {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

type gitRunner struct{ opts Options }

// run executes git in dir and returns its stdout; the error carries the
// command and the tail of stderr, where git explains itself.
func (g gitRunner) run(ctx context.Context, dir string, args ...string) (string, error) {
	// Checkout must give the same bytes on every machine: no line-ending
	// conversion from a user's configuration, no prompts for credentials.
	full := append([]string{"-c", "core.autocrlf=false", "-c", "advice.detachedHead=false"}, args...)
	cmd := exec.CommandContext(ctx, g.opts.git(), full...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, tail(stderr.Bytes(), 10))
	}
	return stdout.String(), nil
}

// tail returns the last n lines of b, trimmed, for error messages.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// writeTar writes the tree at root as a deterministic tar stream (see
// FetchGit).
func writeTar(ctx context.Context, w io.Writer, root string) error {
	var entries []archive.Entry
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		ent := archive.Entry{Name: filepath.ToSlash(rel)}
		info, err := e.Info()
		if err != nil {
			return err
		}
		switch t := info.Mode(); {
		case t.IsDir():
			ent.Type, ent.Mode = tar.TypeDir, 0o755
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			ent.Type, ent.Link, ent.Mode = tar.TypeSymlink, target, 0o777
		case t.IsRegular():
			ent.Type, ent.Size, ent.Src, ent.Mode = tar.TypeReg, info.Size(), p, 0o644
			if t&0o111 != 0 {
				ent.Mode = 0o755
			}
		default:
			return fmt.Errorf("%s: unsupported file type %v", p, t)
		}
		entries = append(entries, ent)
		return nil
	})
	if err != nil {
		return err
	}
	return archive.WriteTar(ctx, w, entries, archive.TarOptions{ModTime: time.Unix(0, 0)})
}
