package archive

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// tree writes entries under root, a fresh directory that only this tree
// writes to. Because root starts empty, every symlink in it was created
// here and is recorded in symlinks; refusing any path whose parent is one
// of them means no write ever follows a symlink, which is what keeps the
// extraction inside root without per-component lstat calls.
type tree struct {
	root     string
	archive  string
	opts     Options
	symlinks map[string]bool        // relative paths of symlinks created
	dirs     map[string]bool        // relative paths of directories known to exist
	dirModes map[string]fs.FileMode // permissions to apply once all entries are in
	buf      []byte
}

func newTree(root string, opts Options) *tree {
	return &tree{
		root:     root,
		archive:  opts.Name,
		opts:     opts,
		symlinks: map[string]bool{},
		dirs:     map[string]bool{"": true},
		dirModes: map[string]fs.FileMode{},
	}
}

func (t *tree) unsafe(entry, format string, args ...any) error {
	return &UnsafeEntryError{Archive: t.archive, Entry: entry, Reason: fmt.Sprintf(format, args...)}
}

func (t *tree) failed(entry string, err error) error {
	return &EntryError{Archive: t.archive, Entry: entry, Err: err}
}

// relPath validates an archive path and returns it relative to root after
// stripping components; skip is true when nothing remains.
func (t *tree) relPath(entry, name string) (rel string, skip bool, err error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", false, t.unsafe(entry, "path contains a NUL byte")
	}
	if strings.HasPrefix(name, "/") {
		return "", false, t.unsafe(entry, "absolute path")
	}
	parts := make([]string, 0, 8)
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", false, t.unsafe(entry, "path contains a .. component")
		}
		parts = append(parts, p)
	}
	if len(parts) <= t.opts.StripComponents {
		return "", true, nil
	}
	return strings.Join(parts[t.opts.StripComponents:], "/"), false, nil
}

// checkParents refuses paths that would pass through a symlink extracted
// earlier.
func (t *tree) checkParents(entry, rel string) error {
	if len(t.symlinks) == 0 {
		return nil
	}
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' && t.symlinks[rel[:i]] {
			return t.unsafe(entry, "path passes through %q, a symlink extracted earlier", rel[:i])
		}
	}
	return nil
}

func (t *tree) abs(rel string) string { return t.root + string(filepath.Separator) + rel }

// ensureDir creates the directory rel and its parents.
func (t *tree) ensureDir(entry, rel string) error {
	if t.dirs[rel] {
		return nil
	}
	if err := os.MkdirAll(t.abs(rel), 0o755); err != nil {
		return t.failed(entry, err)
	}
	for p := rel; p != "" && !t.dirs[p]; {
		t.dirs[p] = true
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return nil
}

func parentOf(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
}

// prepare validates name and creates its parent directory. It returns the
// relative path, or skip when the entry is stripped away entirely.
func (t *tree) prepare(name string) (rel string, skip bool, err error) {
	rel, skip, err = t.relPath(name, name)
	if err != nil || skip {
		return rel, skip, err
	}
	if err := t.checkParents(name, rel); err != nil {
		return "", false, err
	}
	return rel, false, t.ensureDir(name, parentOf(rel))
}

// replaceable removes whatever non-directory entry occupies rel so that a
// later entry of the same name wins, as with tar. Existing files are never
// opened for writing: that would write through a hard link.
func (t *tree) replace(entry, rel string) error {
	if t.dirs[rel] {
		return t.failed(entry, errors.New("a directory of the same name was extracted earlier"))
	}
	if err := os.Remove(t.abs(rel)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return t.failed(entry, err)
	}
	delete(t.symlinks, rel)
	return nil
}

func (t *tree) file(name string, mode fs.FileMode, mtime time.Time, body io.Reader) error {
	rel, skip, err := t.prepare(name)
	if err != nil || skip {
		return err
	}
	path := t.abs(rel)
	perm := uint32(mode & 0o777)
	// Raw descriptors rather than *os.File: os.OpenFile adds an epoll
	// registration attempt and several fcntl calls per file, which adds
	// up over the 100k+ files of a source tree. O_EXCL|O_NOFOLLOW: never
	// write into an existing file or through a link.
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := openRetry(path, flags, perm|0o200)
	if errors.Is(err, unix.EEXIST) {
		if err := t.replace(name, rel); err != nil {
			return err
		}
		fd, err = openRetry(path, flags, perm|0o200)
	}
	if err != nil {
		return t.failed(name, &fs.PathError{Op: "create", Path: path, Err: err})
	}
	if t.buf == nil {
		t.buf = make([]byte, 1<<20)
	}
	err = copyToFD(fd, body, t.buf, path)
	if err == nil {
		// Explicit chmod: the umask must not drop archive bits.
		if e := unix.Fchmod(fd, perm); e != nil {
			err = &fs.PathError{Op: "chmod", Path: path, Err: e}
		}
	}
	if e := unix.Close(fd); e != nil && err == nil {
		err = &fs.PathError{Op: "close", Path: path, Err: e}
	}
	if err == nil && !mtime.IsZero() {
		// Builds compare timestamps (configure vs configure.ac), so
		// files keep the archive's mtimes.
		ts := unix.NsecToTimespec(mtime.UnixNano())
		if e := unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); e != nil {
			err = &fs.PathError{Op: "utimes", Path: path, Err: e}
		}
	}
	if err != nil {
		return t.failed(name, err)
	}
	return nil
}

func openRetry(path string, flags int, perm uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flags, perm)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// copyToFD copies body to fd through buf, one write per read.
func copyToFD(fd int, body io.Reader, buf []byte, path string) error {
	for {
		n, rerr := body.Read(buf)
		for p := buf[:n]; len(p) > 0; {
			w, err := unix.Write(fd, p)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return &fs.PathError{Op: "write", Path: path, Err: err}
			}
			p = p[w:]
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

func (t *tree) dir(name string, mode fs.FileMode) error {
	rel, skip, err := t.prepare(name)
	if err != nil || skip {
		return err
	}
	if t.symlinks[rel] {
		return t.unsafe(name, "directory would replace a symlink extracted earlier")
	}
	if err := t.ensureDir(name, rel); err != nil {
		return err
	}
	// The owner keeps full access so that the tree can later be
	// cleaned up or patched without a chmod pass.
	t.dirModes[rel] = mode&0o777 | 0o700
	return nil
}

func (t *tree) symlink(name, target string) error {
	rel, skip, err := t.prepare(name)
	if err != nil || skip {
		return err
	}
	if err := t.checkLinkTarget(name, rel, target); err != nil {
		return err
	}
	path := t.abs(rel)
	err = os.Symlink(target, path)
	if errors.Is(err, fs.ErrExist) {
		if err := t.replace(name, rel); err != nil {
			return err
		}
		err = os.Symlink(target, path)
	}
	if err != nil {
		return t.failed(name, err)
	}
	t.symlinks[rel] = true
	return nil
}

// checkLinkTarget refuses symlink targets that resolve outside root. The
// link's own directory is a real directory (checkParents), so leading ".."
// components climb a known number of levels; ".." after a name could climb
// out of a symlinked directory to anywhere, so it is refused outright.
func (t *tree) checkLinkTarget(entry, rel, target string) error {
	if target == "" {
		return t.unsafe(entry, "symlink has an empty target")
	}
	if strings.IndexByte(target, 0) >= 0 {
		return t.unsafe(entry, "symlink target contains a NUL byte")
	}
	if strings.HasPrefix(target, "/") {
		if t.opts.AllowAbsoluteSymlinks {
			return nil
		}
		return t.unsafe(entry, "symlink target %q is absolute and points outside the destination", target)
	}
	up, named := 0, false
	for _, p := range strings.Split(target, "/") {
		switch p {
		case "", ".":
		case "..":
			if named {
				return t.unsafe(entry, "symlink target %q has a .. component after a name, which may leave the destination", target)
			}
			up++
		default:
			named = true
		}
	}
	depth := strings.Count(rel, "/") // levels between root and the link's directory
	if up > depth {
		return t.unsafe(entry, "symlink target %q points outside the destination", target)
	}
	return nil
}

func (t *tree) hardlink(name, linkname string) error {
	rel, skip, err := t.prepare(name)
	if err != nil || skip {
		return err
	}
	trel, tskip, err := t.relPath(name, linkname)
	if err != nil {
		var ue *UnsafeEntryError
		if errors.As(err, &ue) {
			ue.Reason = fmt.Sprintf("hard link target %q: %s", linkname, ue.Reason)
		}
		return err
	}
	if tskip {
		return t.unsafe(name, "hard link target %q is stripped away by StripComponents", linkname)
	}
	// Only the target's parents matter: a hard link to a symlink links the
	// symlink itself (link(2) does not follow), which stays as safe as
	// the symlink was.
	if err := t.checkParents(name, trel); err != nil {
		return err
	}
	st, err := os.Lstat(t.abs(trel))
	if err != nil {
		return t.unsafe(name, "hard link target %q was not extracted before the link", linkname)
	}
	if st.IsDir() {
		return t.unsafe(name, "hard link target %q is a directory", linkname)
	}
	path := t.abs(rel)
	err = os.Link(t.abs(trel), path)
	if errors.Is(err, fs.ErrExist) {
		if trel == rel {
			return nil
		}
		if err := t.replace(name, rel); err != nil {
			return err
		}
		err = os.Link(t.abs(trel), path)
	}
	if err != nil {
		return t.failed(name, err)
	}
	if t.symlinks[trel] {
		t.symlinks[rel] = true
	}
	return nil
}

// finish applies directory permissions, deferred so that read-only
// directories could still be filled.
func (t *tree) finish() error {
	for rel, mode := range t.dirModes {
		if err := os.Chmod(t.abs(rel), mode); err != nil {
			return t.failed(rel, err)
		}
	}
	return nil
}
