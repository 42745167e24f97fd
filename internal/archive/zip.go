package archive

import (
	"archive/zip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"sync/atomic"
)

// maxSymlinkTarget bounds the bytes read as a zip symlink's target.
const maxSymlinkTarget = 4096

// extractZip writes the entries of the zip archive r under root.
func extractZip(ctx context.Context, r io.ReaderAt, size int64, root string, opts Options) error {
	cr := &countingReaderAt{r: r}
	zr, err := zip.NewReader(cr, size)
	if err != nil {
		return fmt.Errorf("archive %s: reading zip: %w", opts.Name, err)
	}
	t := newTree(root, opts)
	var last, total int64
	for _, f := range zr.File {
		if err := ctx.Err(); err != nil {
			return err
		}
		mode := f.Mode()
		switch {
		case mode.IsDir():
			err = t.dir(f.Name, mode.Perm())
		case mode&fs.ModeSymlink != 0:
			err = zipSymlink(t, f)
		case mode.Type()&(fs.ModeDevice|fs.ModeCharDevice) != 0:
			err = t.unsafe(f.Name, "device file")
		case mode.Type()&fs.ModeNamedPipe != 0:
			err = t.unsafe(f.Name, "fifo")
		case mode.Type()&(fs.ModeSocket|fs.ModeIrregular) != 0:
			err = t.unsafe(f.Name, "special file")
		default:
			// archive/zip fails a file whose data runs past its declared
			// size, so the declared sizes bound what is written.
			if total += int64(min(f.UncompressedSize64, 1<<62)); opts.MaxBytes > 0 && total > opts.MaxBytes {
				return &TooLargeError{Archive: opts.Name, Entry: f.Name, Limit: opts.MaxBytes}
			}
			err = zipFile(t, f, mode.Perm())
		}
		if err != nil {
			return err
		}
		if n := cr.n.Load(); opts.Progress != nil && n-last >= progressStep {
			last = n
			opts.Progress(min(n, size), size)
		}
	}
	if err := t.finish(); err != nil {
		return err
	}
	if opts.Progress != nil {
		opts.Progress(size, size)
	}
	return nil
}

func zipFile(t *tree, f *zip.File, perm fs.FileMode) error {
	rc, err := f.Open()
	if err != nil {
		return t.failed(f.Name, err)
	}
	defer rc.Close()
	// Zip tools that predate unix modes store none; such files get 0644.
	if perm == 0 {
		perm = 0o644
	}
	return t.file(f.Name, perm, f.Modified, rc)
}

func zipSymlink(t *tree, f *zip.File) error {
	rc, err := f.Open()
	if err != nil {
		return t.failed(f.Name, err)
	}
	defer rc.Close()
	target, err := io.ReadAll(io.LimitReader(rc, maxSymlinkTarget+1))
	if err != nil {
		return t.failed(f.Name, err)
	}
	if len(target) > maxSymlinkTarget {
		return t.unsafe(f.Name, "symlink target longer than %d bytes", maxSymlinkTarget)
	}
	return t.symlink(f.Name, string(target))
}

// countingReaderAt counts bytes read, for progress reports.
type countingReaderAt struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}
