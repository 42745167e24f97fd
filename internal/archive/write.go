package archive

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// Entry is one member of a tar stream written by WriteTar.
type Entry struct {
	// Name is slash-separated, relative, cleaned and without a trailing
	// slash (WriteTar adds one to directories).
	Name string
	// Type is tar.TypeDir, tar.TypeReg, tar.TypeSymlink or tar.TypeLink.
	Type byte
	// Mode holds the permission bits stored in the header.
	Mode     int64
	UID, GID int
	// Size is a regular file's length; the file must still have it when
	// it is read.
	Size int64
	// Src is the host file holding a regular file's content; Data holds
	// it inline when Src is empty.
	Src  string
	Data []byte
	// Link is a symlink's target, or the member a hard link names.
	Link string
}

// TarOptions controls WriteTar.
type TarOptions struct {
	// ModTime is every entry's modification time (a build's
	// SOURCE_DATE_EPOCH, say), truncated to the second.
	ModTime time.Time
	// Progress, when set, is called with the content bytes written so far,
	// at most every 8 MiB, from the writing goroutine.
	Progress func(done int64)
}

// tarProgressStep is how many content bytes pass between Progress calls.
const tarProgressStep = 8 << 20

// FileChangedError reports a file whose size changed between listing a
// tree and writing it.
type FileChangedError struct {
	Path       string
	Want, Have int64
}

func (e *FileChangedError) Error() string {
	return fmt.Sprintf("%s changed while being archived: listed %d bytes, read %d", e.Path, e.Want, e.Have)
}

// WriteTar writes entries, in the order given, as a tar stream to w, and
// ends the stream. It is the module's one deterministic tar writer (image
// layers, binary cache artifacts, git checkouts in the source cache): a
// header holds only the entry's fields and opts.ModTime, with numeric
// owners and no user or group names, no access or change times and no
// host-dependent PAX records, so equal entries always give equal bytes.
// Callers sort the entries (parents before children) and choose the
// owners and modes they want to publish.
func WriteTar(ctx context.Context, w io.Writer, entries []Entry, opts TarOptions) error {
	tw := tar.NewWriter(w)
	cw := &contentWriter{ctx: ctx, w: tw, report: opts.Progress}
	buf := make([]byte, 1<<20)
	mtime := opts.ModTime.UTC().Truncate(time.Second)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr := &tar.Header{
			Typeflag: e.Type,
			Name:     e.Name,
			Linkname: e.Link,
			Mode:     e.Mode,
			Uid:      e.UID,
			Gid:      e.GID,
			ModTime:  mtime,
		}
		switch e.Type {
		case tar.TypeDir:
			hdr.Name += "/"
		case tar.TypeReg:
			hdr.Size = e.Size
		case tar.TypeSymlink, tar.TypeLink:
		default:
			return fmt.Errorf("%s: tar entry type %q is not written", e.Name, e.Type)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing the header of %s: %w", e.Name, err)
		}
		if e.Type != tar.TypeReg {
			continue
		}
		if e.Src == "" {
			if int64(len(e.Data)) != e.Size {
				return fmt.Errorf("%s: %d bytes of data for a size of %d", e.Name, len(e.Data), e.Size)
			}
			if _, err := cw.Write(e.Data); err != nil {
				return fmt.Errorf("writing %s: %w", e.Name, err)
			}
			continue
		}
		if err := copyExactly(cw, e.Src, e.Size, buf); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("ending the tar stream: %w", err)
	}
	return nil
}

// copyExactly streams exactly size bytes of src into w, failing with a
// *FileChangedError when the file has more or fewer.
func copyExactly(w io.Writer, src string, size int64, buf []byte) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.CopyBuffer(w, io.LimitReader(f, size), buf)
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if n != size {
		return &FileChangedError{Path: src, Want: size, Have: n}
	}
	var one [1]byte
	if m, _ := f.Read(one[:]); m > 0 {
		return &FileChangedError{Path: src, Want: size, Have: size + 1}
	}
	return nil
}

// contentWriter counts content bytes for progress reports and stops a long
// copy when ctx ends.
type contentWriter struct {
	ctx        context.Context
	w          io.Writer
	report     func(done int64)
	done, last int64
}

func (c *contentWriter) Write(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.w.Write(b)
	c.done += int64(n)
	if c.report != nil && c.done-c.last >= tarProgressStep {
		c.last = c.done
		c.report(c.done)
	}
	return n, err
}
