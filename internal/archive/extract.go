// Package archive unpacks source and package archives (tar, tar.gz, tar.bz2,
// tar.xz, zip) into a directory, safely and atomically, and writes
// deterministic tar streams of file trees (WriteTar).
//
// Safety: entries that would land outside the destination (absolute paths,
// ".." components, links whose targets leave the tree, paths that pass
// through a previously extracted symlink) and device or fifo entries are
// refused with an *UnsafeEntryError naming the archive and the entry.
// Extraction never follows a symlink it created. Files keep their
// permission bits and mtimes (setuid, setgid and sticky bits are dropped);
// directories get their permissions at the end, with the owner keeping rwx.
//
// Atomicity: the archive is unpacked into a temporary directory next to the
// destination, which is renamed into place only when every entry has been
// written; on any error the temporary directory is removed, so the
// destination is either complete or absent.
//
// Decompressors: gzip and bzip2 come from the standard library. Every other
// compression (xz) is decoded only by a Decompressor the caller passes in
// Options.Decoders, the way archive/zip's Reader.RegisterDecompressor adds
// methods to one reader. A program that never extracts .tar.xz (the server,
// which reads packed python envs) therefore links no xz code at all, and
// one that does (tritonbuild, through internal/archive/xzpar) chooses its
// decoder and its tuning (workers, liblzma or pure Go) in one place. The set
// is a plain value rather than a package-level registry so that nothing
// depends on which packages happened to be imported or initialised first.
//
// Speed: file contents are written with large buffers through raw
// descriptors while the decompressor runs ahead; a Decompressor given
// random access (Compressed.File) may decode in parallel.
package archive

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Format is an archive format this package reads.
type Format int

// Supported formats. FormatUnknown is returned by Detect for anything else.
const (
	FormatUnknown Format = iota
	FormatTar
	FormatTarGz
	FormatTarXz
	FormatTarBz2
	FormatZip
)

func (f Format) String() string {
	switch f {
	case FormatTar:
		return "tar"
	case FormatTarGz:
		return "tar.gz"
	case FormatTarXz:
		return "tar.xz"
	case FormatTarBz2:
		return "tar.bz2"
	case FormatZip:
		return "zip"
	}
	return "unknown"
}

// Options controls an extraction. The zero value extracts everything as is.
type Options struct {
	// StripComponents drops this many leading path components from every
	// entry (and hard link target), like tar --strip-components. Entries
	// with no components left are skipped.
	StripComponents int
	// AllowAbsoluteSymlinks keeps symlinks with absolute targets (such as a
	// venv's bin/python -> /usr/bin/python3) instead of refusing them.
	// Extraction still never follows them; whoever uses the tree later
	// resolves them on the host. Relative targets that climb out of the
	// destination are refused either way.
	AllowAbsoluteSymlinks bool
	// Progress, when set, is called with the number of bytes of the
	// archive file (compressed bytes) consumed so far and the total size
	// (-1 when unknown, as for a plain io.Reader). Calls come from the
	// extracting goroutine, at most every 256 KiB and once at the end.
	Progress func(done, total int64)
	// Decoders supplies the decompressors for formats without a built-in
	// one (FormatTarXz); an entry for FormatTarGz or FormatTarBz2 replaces
	// the standard library's. A format with neither fails with a
	// *NoDecoderError.
	Decoders Decoders
	// Name is used for the archive in error messages when extracting from
	// a reader (Extract uses the path). Empty means "<stream>".
	Name string
	// MaxBytes, when positive, bounds the bytes the archive's files hold
	// in all, counted from the entries' declared sizes (a sparse file at
	// its full size, since extraction writes it out), so that a small
	// archive cannot fill the disk: the entry that crosses it fails the
	// extraction with a *TooLargeError before anything of it is written.
	MaxBytes int64
}

// TooLargeError is an archive whose files hold more than Options.MaxBytes.
type TooLargeError struct {
	Archive string
	Entry   string // the entry that crossed the limit
	Limit   int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("archive %s: its files hold more than the limit of %d bytes (at entry %s)", e.Archive, e.Limit, e.Entry)
}

// Decompressor decodes the compressed content of an archive into the tar
// stream inside it. Close releases what it holds (goroutines, C memory).
type Decompressor func(ctx context.Context, in Compressed) (io.ReadCloser, error)

// Compressed is what a Decompressor reads.
type Compressed struct {
	// Reader yields the compressed bytes from the start; the bytes read
	// through it count for Options.Progress.
	Reader io.Reader
	// File gives random access to the same bytes when the archive is a
	// file (nil for a stream), for decoders that split the work, such as
	// a parallel xz decoder reading the stream index first; Size is then
	// the file's size (-1 for a stream). A decoder that reads File instead
	// of Reader reports the compressed bytes behind the data returned so
	// far through Progress (never nil), from the goroutine that calls Read.
	File     io.ReaderAt
	Size     int64
	Progress func(done int64)
}

// Decoders maps compressed tar formats to the Decompressor that decodes
// them. The zero value holds none: gzip and bzip2 still work, xz does not.
type Decoders map[Format]Decompressor

// NoDecoderError reports a compressed archive for which no Decompressor
// was passed.
type NoDecoderError struct {
	Archive string
	Format  Format
}

func (e *NoDecoderError) Error() string {
	return fmt.Sprintf("archive %s: %s archives cannot be read by this program (no %s decoder is linked in)", e.Archive, e.Format, strings.TrimPrefix(e.Format.String(), "tar."))
}

// UnsafeEntryError reports an archive entry that was refused.
type UnsafeEntryError struct {
	Archive string // path or name of the archive
	Entry   string // the entry's name as stored in the archive
	Reason  string
}

func (e *UnsafeEntryError) Error() string {
	return fmt.Sprintf("archive %s: refusing entry %q: %s", e.Archive, e.Entry, e.Reason)
}

// EntryError reports an entry that could not be written, for reasons other
// than safety (I/O errors, unsupported entry types).
type EntryError struct {
	Archive string
	Entry   string
	Err     error
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("archive %s: entry %q: %v", e.Archive, e.Entry, e.Err)
}

func (e *EntryError) Unwrap() error { return e.Err }

// ErrDestNotEmpty is returned when the destination already has content.
var ErrDestNotEmpty = errors.New("destination exists and is not empty")

// Magic-byte prefixes of the supported formats.
var (
	magicGzip  = []byte{0x1F, 0x8B}
	magicXz    = []byte{0xFD, '7', 'z', 'X', 'Z', 0x00}
	magicBzip2 = []byte("BZh")
	magicZip   = []byte("PK\x03\x04")
	magicZipE  = []byte("PK\x05\x06") // empty archive: end of central directory only
	magicZstd  = []byte{0x28, 0xB5, 0x2F, 0xFD}
)

// DetectFormat identifies a format from the first bytes of an archive (at
// least 512 for plain tar) and uses the file name only as a hint for tar
// files without the ustar magic (old v7 archives).
func DetectFormat(head []byte, name string) (Format, error) {
	switch {
	case bytes.HasPrefix(head, magicXz):
		return FormatTarXz, nil
	case bytes.HasPrefix(head, magicGzip):
		return FormatTarGz, nil
	case bytes.HasPrefix(head, magicBzip2):
		return FormatTarBz2, nil
	case bytes.HasPrefix(head, magicZip), bytes.HasPrefix(head, magicZipE):
		return FormatZip, nil
	case bytes.HasPrefix(head, magicZstd):
		return FormatUnknown, fmt.Errorf("%s: zstd-compressed archives are not supported", name)
	case len(head) >= 263 && bytes.Equal(head[257:262], []byte("ustar")):
		return FormatTar, nil
	case strings.HasSuffix(name, ".tar") && len(head) >= 512:
		return FormatTar, nil
	}
	return FormatUnknown, fmt.Errorf("%s: unrecognised archive format (magic bytes % x)", name, head[:min(len(head), 8)])
}

// Extract extracts the archive file at archivePath into destDir, which must
// not exist or be an empty directory. The format is detected from the file's
// first bytes.
func Extract(ctx context.Context, archivePath, destDir string, opts Options) error {
	f, err := os.Open(archivePath)
	if err != nil {
		return fmt.Errorf("extracting: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("extracting %s: %w", archivePath, err)
	}
	head := make([]byte, 512)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("extracting %s: %w", archivePath, err)
	}
	format, err := DetectFormat(head[:n], archivePath)
	if err != nil {
		return fmt.Errorf("extracting: %w", err)
	}
	opts.Name = archivePath
	size := st.Size()
	return atomically(destDir, archivePath, func(root string) error {
		if format == FormatZip {
			return extractZip(ctx, f, size, root, opts)
		}
		return extractStream(ctx, io.NewSectionReader(f, 0, size), f, size, format, root, opts)
	})
}

// ExtractTar extracts a tar stream, optionally gzip, xz or bzip2 compressed
// (detected from its first bytes), from r into destDir, which must not exist
// or be an empty directory. It suits callers that hold a stream rather than a
// file; xz streams are then decoded sequentially. Options.Name names the
// archive in errors.
func ExtractTar(ctx context.Context, r io.Reader, destDir string, opts Options) error {
	if opts.Name == "" {
		opts.Name = "<stream>"
	}
	br := bufio.NewReaderSize(r, 1<<20)
	head, err := br.Peek(512)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("extracting %s: %w", opts.Name, err)
	}
	format, err := DetectFormat(head, opts.Name)
	if err != nil {
		return fmt.Errorf("extracting: %w", err)
	}
	if format == FormatZip {
		return fmt.Errorf("extracting %s: zip archives need random access, use Extract or ExtractZip", opts.Name)
	}
	return atomically(destDir, opts.Name, func(root string) error {
		return extractStream(ctx, br, nil, -1, format, root, opts)
	})
}

// ExtractZip extracts the zip archive r of the given size into destDir, which
// must not exist or be an empty directory.
func ExtractZip(ctx context.Context, r io.ReaderAt, size int64, destDir string, opts Options) error {
	if opts.Name == "" {
		opts.Name = "<stream>"
	}
	return atomically(destDir, opts.Name, func(root string) error {
		return extractZip(ctx, r, size, root, opts)
	})
}

// extractStream decompresses r (also readable at random through file, when
// not nil) according to format and extracts the tar inside.
func extractStream(ctx context.Context, r io.Reader, file io.ReaderAt, size int64, format Format, root string, opts Options) error {
	cr := &progressReader{r: r, total: size, fn: opts.Progress}
	// Decompressors read small pieces; a large buffer keeps the
	// syscalls and progress calls few.
	src := bufio.NewReaderSize(cr, 1<<20)
	var tr io.Reader = src
	if format != FormatTar {
		dec, err := decompressor(format, opts.Decoders)
		if err != nil {
			return &NoDecoderError{Archive: opts.Name, Format: format}
		}
		in := Compressed{Reader: src, File: file, Size: size, Progress: progressFunc(opts.Progress, size)}
		if file == nil {
			in.Size = -1
		}
		zr, err := dec(ctx, in)
		if err != nil {
			return fmt.Errorf("extracting %s: %s: %w", opts.Name, format, err)
		}
		defer zr.Close()
		tr = zr
	}
	if err := extractTar(ctx, tr, root, opts); err != nil {
		return err
	}
	if cr.n > 0 {
		cr.finish()
	} else if opts.Progress != nil {
		// The decoder read the file at random, not through cr.
		opts.Progress(size, size)
	}
	return nil
}

// decompressor picks the decoder for a compressed tar format: the caller's,
// else the standard library's.
func decompressor(format Format, decoders Decoders) (Decompressor, error) {
	if d := decoders[format]; d != nil {
		return d, nil
	}
	switch format {
	case FormatTarGz:
		return gunzip, nil
	case FormatTarBz2:
		return bunzip2, nil
	}
	return nil, errors.New("no decoder")
}

func gunzip(_ context.Context, in Compressed) (io.ReadCloser, error) {
	zr, err := gzip.NewReader(in.Reader)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	return zr, nil
}

func bunzip2(_ context.Context, in Compressed) (io.ReadCloser, error) {
	return io.NopCloser(bzip2.NewReader(in.Reader)), nil
}

// atomically runs fill on a fresh temporary directory next to destDir and
// renames it to destDir on success, removing it on failure.
func atomically(destDir, archive string, fill func(root string) error) (err error) {
	destDir = filepath.Clean(destDir)
	if err := checkDest(destDir); err != nil {
		return fmt.Errorf("extracting %s into %s: %w", archive, destDir, err)
	}
	parent := filepath.Dir(destDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("extracting %s: %w", archive, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(destDir)+".extract-")
	if err != nil {
		return fmt.Errorf("extracting %s: %w", archive, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := fill(tmp); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("extracting %s: %w", archive, err)
	}
	// The destination may have been an empty directory; rename cannot
	// replace it portably, so remove it first (this fails, as it should,
	// if something was written there in the meantime).
	if err := os.Remove(destDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("extracting %s into %s: %w", archive, destDir, err)
	}
	if err := os.Rename(tmp, destDir); err != nil {
		return fmt.Errorf("extracting %s: moving into place: %w", archive, err)
	}
	return nil
}

func checkDest(dest string) error {
	st, err := os.Lstat(dest)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return ErrDestNotEmpty
	}
	d, err := os.Open(dest)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if len(names) > 0 {
		return ErrDestNotEmpty
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// progressStep is how many bytes pass between progress calls.
const progressStep = 256 << 10

type progressReader struct {
	r        io.Reader
	n, last  int64
	total    int64
	fn       func(done, total int64)
	finished bool
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.fn != nil && p.n-p.last >= progressStep {
		p.last = p.n
		p.fn(p.n, p.total)
	}
	return n, err
}

// finish reports the final count once.
func (p *progressReader) finish() {
	if p.fn != nil && !p.finished {
		p.finished = true
		p.fn(p.n, p.total)
	}
}

// progressFunc adapts a (done, total) callback to xzpar's (done) callback
// with the same throttling as progressReader.
func progressFunc(fn func(done, total int64), total int64) func(int64) {
	if fn == nil {
		return nil
	}
	var last int64
	return func(done int64) {
		if done-last >= progressStep {
			last = done
			fn(done, total)
		}
	}
}
