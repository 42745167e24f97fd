package images

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/tritonbuild/tritonbuild/internal/archive"
	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
)

// layerFormat versions the bytes this file writes: bump it whenever the tar
// or gzip encoding changes, so that cached layers of an older encoding are
// not reused.
const layerFormat = "tritonbuild-layer-v1"

// entry is one member of a layer tar. Names are slash-separated, relative to
// the image root, cleaned, without a trailing slash.
type entry struct {
	name     string
	typ      byte // tar.TypeDir, tar.TypeReg, tar.TypeSymlink or tar.TypeLink
	mode     int64
	uid, gid int
	size     int64
	src      string // host file holding the content of a regular file
	data     []byte // inline content of a synthesized regular file (src == "")
	link     string // symlink target, or the member name a hard link points to
	mtimeNS  int64  // host mtime of src, only for the cache fingerprint
	ctimeNS  int64  // host change time of src, only for the cache fingerprint
	ino, dev uint64 // host identity of src, to detect hard links
	nlink    uint64
}

// layerSpec is the full content of one layer before it is written.
type layerSpec struct {
	label   string // what the layer holds: a tree name, "base-libraries", "sbom", "models"
	entries []entry
}

// layerInfo are the measured facts of a written layer.
type layerInfo struct {
	Digest v1.Hash `json:"digest"`
	DiffID v1.Hash `json:"diffID"`
	Size   int64   `json:"size"`
	USize  int64   `json:"uncompressedSize"`
}

// normalMode maps host permissions onto the two modes images carry, so that
// the umask of whoever built a tree cannot change a layer digest.
func normalMode(typ byte, perm fs.FileMode) int64 {
	switch typ {
	case tar.TypeDir:
		return 0o755
	case tar.TypeSymlink:
		return 0o777
	}
	if perm&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

// parentDirs returns directory entries for every ancestor of name (not name
// itself), outermost first.
func parentDirs(name string) []entry {
	var out []entry
	for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
		out = append(out, entry{name: d, typ: tar.TypeDir, mode: 0o755})
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// UnsupportedFileError reports a file that cannot be carried in a layer
// (device nodes, sockets, FIFOs).
type UnsupportedFileError struct {
	Path string
	Mode fs.FileMode
}

func (e *UnsupportedFileError) Error() string {
	return fmt.Sprintf("%s: unsupported file type %v in a layer", e.Path, e.Mode.Type())
}

// whiteoutPrefix starts the names OCI layers reserve for whiteouts: a
// member named .wh.NAME deletes NAME of the layers below when the image is
// unpacked, and the format has no way to escape such a name.
const whiteoutPrefix = ".wh."

// whiteoutComponent returns the first component of the slash-separated
// name that starts with whiteoutPrefix, or "".
func whiteoutComponent(name string) string {
	for rest := name; rest != ""; {
		var comp string
		comp, rest, _ = strings.Cut(rest, "/")
		if strings.HasPrefix(comp, whiteoutPrefix) {
			return comp
		}
	}
	return ""
}

// WhiteoutNameError reports a file that cannot be carried in a layer
// because a component of its image path starts with ".wh.": unpacked, the
// layer would delete a path of the layers below instead of adding the file.
type WhiteoutNameError struct {
	Path string // the host file
	Name string // its absolute path in the image
}

func (e *WhiteoutNameError) Error() string {
	return fmt.Sprintf("%s: its image path %s has a name starting with %q, which an OCI layer reserves for whiteouts (unpacking would delete a path instead of adding this one); rename it", e.Path, e.Name, whiteoutPrefix)
}

// checkName refuses an entry name with a whiteout component; hostPath is
// the file it comes from, for the message.
func checkName(hostPath, name string) error {
	if whiteoutComponent(name) != "" {
		return &WhiteoutNameError{Path: hostPath, Name: "/" + name}
	}
	return nil
}

// entryFromInfo converts a host file's lstat result into an entry named name.
func entryFromInfo(hostPath, name string, info fs.FileInfo) (entry, error) {
	e := entry{name: name, mtimeNS: info.ModTime().UnixNano()}
	if err := checkName(hostPath, name); err != nil {
		return e, err
	}
	switch m := info.Mode(); {
	case m.IsDir():
		e.typ = tar.TypeDir
	case m.IsRegular():
		e.typ = tar.TypeReg
		e.size = info.Size()
		e.src = hostPath
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			e.ino, e.dev, e.nlink = st.Ino, uint64(st.Dev), uint64(st.Nlink)
			e.ctimeNS = st.Ctim.Nano()
		}
	case m&fs.ModeSymlink != 0:
		target, err := os.Readlink(hostPath)
		if err != nil {
			return e, fmt.Errorf("reading link %s: %w", hostPath, err)
		}
		e.typ = tar.TypeSymlink
		e.link = target
	default:
		return e, &UnsupportedFileError{Path: hostPath, Mode: m}
	}
	e.mode = normalMode(e.typ, info.Mode().Perm())
	return e, nil
}

// walkDir lists dir's content as entries named under prefix (a cleaned image
// path without leading slash). The prefix and its parents are included as
// directories. The result is sorted and hard links are resolved.
//
// Symlinks are kept as they are (install trees link within themselves, or
// to paths the image provides), except with copyOutside, for the model
// repository: there a link whose target leaves dir (an absolute target, or
// a relative one climbing out of it) would dangle in the image, where
// nothing else is at the host paths it names, so it is replaced by what it
// leads to on the host, as a symlinked dir itself is. A link dangling on
// the host is kept: the image sees what the host sees.
func walkDir(dir, prefix string, copyOutside bool) ([]entry, error) {
	// filepath.WalkDir does not descend into a root that is a symlink:
	// walk the directory it names instead of yielding an empty layer. The
	// real path also makes the paths of links physical, which the loop
	// check of copied directories compares.
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", dir, err)
	}
	w := &dirWalker{copyOutside: copyOutside}
	w.entries = append(w.entries, parentDirs(prefix+"/x")...)
	if err := w.walk(real, prefix); err != nil {
		return nil, err
	}
	return finishEntries(w.entries), nil
}

// dirWalker collects the entries of walkDir.
type dirWalker struct {
	copyOutside bool
	entries     []entry
	// copying are the host links whose directories are being copied,
	// outermost first: meeting one again inside its own copy is a loop.
	copying []string
}

// walk adds the content of the host directory dir (a real path) under the
// image name prefix.
func (w *dirWalker) walk(dir, prefix string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walking %s: %w", dir, err)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		name := path.Join(prefix, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		if w.copyOutside && info.Mode()&fs.ModeSymlink != 0 {
			copied, err := w.copyLink(dir, p, name)
			if copied || err != nil {
				return err
			}
		}
		e, err := entryFromInfo(p, name, info)
		if err != nil {
			return err
		}
		w.entries = append(w.entries, e)
		return nil
	})
}

// copyLink adds, under name, what the host link p leads to when its target
// leaves root (the directory being walked), and reports whether it did.
// Relative links that stay inside root are left to the caller: they
// resolve the same way in the image, where every link leaving root has
// been replaced by a copy.
func (w *dirWalker) copyLink(root, p, name string) (bool, error) {
	target, err := os.Readlink(p)
	if err != nil {
		return false, fmt.Errorf("reading link %s: %w", p, err)
	}
	if !filepath.IsAbs(target) {
		rel, err := filepath.Rel(root, filepath.Join(filepath.Dir(p), target))
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return false, nil
		}
	}
	info, err := os.Stat(p)
	if err != nil {
		return false, nil // dangling on the host too: kept as it is
	}
	for _, l := range w.copying {
		if l == p {
			return false, fmt.Errorf("%s links to %s, which contains the link itself: copying it would never end", p, target)
		}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false, fmt.Errorf("resolving link %s: %w", p, err)
	}
	e, err := entryFromInfo(real, name, info)
	if err != nil {
		return false, err
	}
	w.entries = append(w.entries, e)
	if e.typ != tar.TypeDir {
		return true, nil
	}
	w.copying = append(w.copying, p)
	err = w.walk(real, name)
	w.copying = w.copying[:len(w.copying)-1]
	return true, err
}

// finishEntries sorts entries by name (so parents precede children), drops
// duplicate names keeping the first, and turns the second and later names of
// one host file into tar hard links: a multiply linked file, or a file the
// model repository reaches through several symlinks (copyLink), which would
// otherwise be carried once per link.
func finishEntries(entries []entry) []entry {
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	out := entries[:0]
	type inode struct{ dev, ino uint64 }
	first := map[inode]string{}
	for i, e := range entries {
		if i > 0 && e.name == out[len(out)-1].name {
			continue
		}
		if e.typ == tar.TypeReg && e.src != "" && e.ino != 0 {
			k := inode{e.dev, e.ino}
			if f, ok := first[k]; ok {
				e.typ, e.link, e.size, e.src = tar.TypeLink, f, 0, ""
			} else {
				first[k] = e.name
			}
		}
		out = append(out, e)
	}
	return out
}

// racyWindow is how long after a change a file's metadata may not yet
// identify its content: a file timestamp is only as fine as the kernel's
// coarse clock (a few milliseconds) or the file system's granularity (up to
// seconds), so a file rewritten twice within one tick keeps its ctime,
// size and mtime. Once a file's ctime is older than this, its next change
// gets a later ctime.
const racyWindow = 2 * time.Second

// settle waits, when a host file of the spec changed less than racyWindow
// before now, until that is no longer so: the layer then reads contents
// that cannot change again without a new ctime, so the fingerprint taken
// afterwards (from the metadata listed before) never names other bytes.
// Hashing such files into the key instead would give a key the next
// assembly, when the files are no longer recent, does not compute, and
// rewrite the layer once more; a file that changed that recently means a
// layer that is written anyway. A ctime in the future (another clock, over
// a network file system) is not waited for: fingerprint hashes the file.
func (s *layerSpec) settle(ctx context.Context, now time.Time) error {
	var last int64
	for _, e := range s.entries {
		if e.src != "" && e.ctimeNS <= now.UnixNano() && e.ctimeNS > last {
			last = e.ctimeNS
		}
	}
	wait := time.Unix(0, last).Add(racyWindow).Sub(now)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// fingerprint identifies the bytes a spec will produce: names, types,
// modes, owners, sizes, link targets, inline data, and for host files their
// path, inode, mtime and ctime (which every write, rename, or tool that
// restores an mtime moves, unlike the mtime), plus the epoch and
// compression level. Contents are not read, so a no-op rebuild of a large
// tree costs its listing only; the exception is a file whose ctime is
// unknown or after now, whose content is hashed in.
func (s *layerSpec) fingerprint(ctx context.Context, epoch time.Time, level int, now time.Time) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00", layerFormat, epoch.Unix(), level)
	var buf []byte
	for _, e := range s.entries {
		fmt.Fprintf(h, "%s\x00%c\x00%o\x00%d\x00%d\x00%d\x00%s\x00%s\x00%d\x00%d\x00%d\x00", e.name, e.typ, e.mode, e.uid, e.gid, e.size, e.link, e.src, e.ino, e.mtimeNS, e.ctimeNS)
		if e.data != nil {
			d := sha256.Sum256(e.data)
			h.Write(d[:])
		}
		if e.src != "" && (e.ctimeNS == 0 || e.ctimeNS > now.UnixNano()) {
			if buf == nil {
				buf = make([]byte, 1<<20)
			}
			if err := hashFile(ctx, h, e.src, buf); err != nil {
				return "", fmt.Errorf("layer %s: %w", s.label, err)
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashFile writes the sha256 of the file's content to h.
func hashFile(ctx context.Context, h hash.Hash, file string, buf []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	fh := sha256.New()
	if _, err := io.CopyBuffer(fh, f, buf); err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	h.Write(fh.Sum(nil))
	return nil
}

// countingHash hashes and counts what is written through it.
type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

// writeLayer writes spec as a gzip-compressed tar to dst (atomically, through
// a temporary file next to it) and returns its digests and sizes. The tar is
// archive.WriteTar's (owners from the entries, times the epoch, no user or
// group names, no access or change times) and the gzip header carries no
// name and a zero time.
func writeLayer(ctx context.Context, spec *layerSpec, epoch time.Time, level int, dst string, report func(done, total int64)) (layerInfo, error) {
	var info layerInfo
	var total int64
	for _, e := range spec.entries {
		total += e.size
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".layer-*.tmp")
	if err != nil {
		return info, fmt.Errorf("layer %s: %w", spec.label, err)
	}
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	comp := &countingHash{h: sha256.New()}
	bw := bufio.NewWriterSize(io.MultiWriter(tmp, comp), 1<<20)
	gz, err := gzip.NewWriterLevel(bw, level)
	if err != nil {
		return info, fmt.Errorf("layer %s: %w", spec.label, err)
	}
	uncomp := &countingHash{h: sha256.New()}
	topts := archive.TarOptions{ModTime: epoch}
	if report != nil {
		topts.Progress = func(done int64) { report(done, total) }
	}
	entries := make([]archive.Entry, len(spec.entries))
	for i, e := range spec.entries {
		entries[i] = archive.Entry{Name: e.name, Type: e.typ, Mode: e.mode, UID: e.uid, GID: e.gid,
			Size: e.size, Src: e.src, Data: e.data, Link: e.link}
	}
	if err := archive.WriteTar(ctx, io.MultiWriter(gz, uncomp), entries, topts); err != nil {
		return info, fmt.Errorf("layer %s: %w", spec.label, err)
	}
	if err := gz.Close(); err != nil {
		return info, fmt.Errorf("layer %s: %w", spec.label, err)
	}
	if err := bw.Flush(); err != nil {
		return info, fmt.Errorf("layer %s: writing %s: %w", spec.label, tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return info, fmt.Errorf("layer %s: writing %s: %w", spec.label, tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return info, fmt.Errorf("layer %s: %w", spec.label, err)
	}
	tmp = nil
	if report != nil {
		report(total, total)
	}
	info.Digest = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(comp.h.Sum(nil))}
	info.DiffID = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(uncomp.h.Sum(nil))}
	info.Size = comp.n
	info.USize = uncomp.n
	return info, nil
}

// fileLayer is a v1.Layer backed by a compressed layer file whose digests were
// measured while writing it, so nothing is re-read to describe the image.
type fileLayer struct {
	path string
	info layerInfo
}

var _ v1.Layer = (*fileLayer)(nil)

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.info.Digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)            { return l.info.DiffID, nil }
func (l *fileLayer) Size() (int64, error)                { return l.info.Size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }

func (l *fileLayer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("opening layer %s: %w", l.info.Digest, err)
	}
	return f, nil
}

func (l *fileLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("opening layer %s: %w", l.info.Digest, err)
	}
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("layer %s: %w", l.info.Digest, err)
	}
	return &gzipFile{Reader: zr, f: f}, nil
}

type gzipFile struct {
	*gzip.Reader
	f *os.File
}

func (g *gzipFile) Close() error {
	return errors.Join(g.Reader.Close(), g.f.Close())
}

// layerStore places layer files: in a persistent cache directory, where a
// layer whose fingerprint is known is reused, or in a scratch directory that
// is removed with the assembly.
type layerStore struct {
	dir   string
	cache bool
}

// layer returns the layer for spec, writing it unless a cached copy with the
// same fingerprint exists. cached tells whether it was reused.
func (s *layerStore) layer(ctx context.Context, spec *layerSpec, epoch time.Time, level int, report func(done, total int64)) (l *fileLayer, cached bool, err error) {
	if s.cache {
		if err := spec.settle(ctx, time.Now()); err != nil {
			return nil, false, err
		}
	}
	key, err := spec.fingerprint(ctx, epoch, level, time.Now())
	if err != nil {
		return nil, false, err
	}
	file := filepath.Join(s.dir, key+".tar.gz")
	meta := filepath.Join(s.dir, key+".json")
	if s.cache {
		if info, ok := readCachedInfo(file, meta); ok {
			return &fileLayer{path: file, info: info}, true, nil
		}
	}
	info, err := writeLayer(ctx, spec, epoch, level, file, report)
	if err != nil {
		return nil, false, err
	}
	if s.cache {
		b, _ := json.Marshal(info)
		if err := atomicfile.WriteFile(meta, b, 0o644); err != nil {
			return nil, false, fmt.Errorf("layer %s: caching: %w", spec.label, err)
		}
	}
	return &fileLayer{path: file, info: info}, false, nil
}

func readCachedInfo(file, meta string) (layerInfo, bool) {
	var info layerInfo
	b, err := os.ReadFile(meta)
	if err != nil || json.Unmarshal(b, &info) != nil {
		return info, false
	}
	st, err := os.Stat(file)
	if err != nil || st.Size() != info.Size || info.Digest.Hex == "" || info.DiffID.Hex == "" {
		return info, false
	}
	return info, true
}

// cleanImagePath turns an absolute image path into an entry name.
func cleanImagePath(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}
