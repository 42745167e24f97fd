package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// extractTar writes the entries of the tar stream r under root.
func extractTar(ctx context.Context, r io.Reader, root string, opts Options) error {
	t := newTree(root, opts)
	tr := tar.NewReader(r)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("archive %s: reading tar: %w", opts.Name, err)
		}
		mode := fs.FileMode(hdr.Mode) & fs.ModePerm
		switch hdr.Typeflag {
		case tar.TypeReg, 0, tar.TypeGNUSparse:
			// archive/tar presents sparse files expanded; 0 is the
			// pre-POSIX regular file type.
			if total += max(hdr.Size, 0); opts.MaxBytes > 0 && total > opts.MaxBytes {
				return &TooLargeError{Archive: opts.Name, Entry: hdr.Name, Limit: opts.MaxBytes}
			}
			err = t.file(hdr.Name, mode, hdr.ModTime, tr)
		case tar.TypeDir:
			err = t.dir(hdr.Name, mode)
		case tar.TypeSymlink:
			err = t.symlink(hdr.Name, hdr.Linkname)
		case tar.TypeLink:
			err = t.hardlink(hdr.Name, hdr.Linkname)
		case tar.TypeChar, tar.TypeBlock:
			err = t.unsafe(hdr.Name, "device file")
		case tar.TypeFifo:
			err = t.unsafe(hdr.Name, "fifo")
		case tar.TypeXGlobalHeader, 'V':
			// pax global header, GNU volume label: metadata only.
		default:
			err = &EntryError{Archive: opts.Name, Entry: hdr.Name, Err: fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)}
		}
		if err != nil {
			return err
		}
	}
	// Read the compressed stream to its end so that trailing checksums
	// (gzip CRC, xz checks) are verified even after the tar end marker.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("archive %s: after the tar end: %w", opts.Name, err)
	}
	return t.finish()
}
