package xzpar

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tritonbuild/tritonbuild/builder/extract/xzpar/liblzma"
	"github.com/ulikunitz/xz"
)

// NewDecoder returns the decoded content of the .xz file r of the given size.
// It decodes blocks in parallel when the file allows it and otherwise (a
// single block, oversized blocks, ...) falls back to sequential decoding:
// liblzma's when linked in (about twice as fast), else the reader of
// github.com/ulikunitz/xz. A malformed container or an unsupported filter is
// an error, not a reason to fall back. Close the result to release its goroutines.
func NewDecoder(ctx context.Context, r io.ReaderAt, size int64, opts Options) (io.ReadCloser, error) {
	pr, err := NewReader(ctx, r, size, opts)
	if err == nil {
		return pr, nil
	}
	var npe *NotParallelError
	if !errors.As(err, &npe) {
		return nil, err
	}
	return newSequential(ctx, r, size, opts)
}

// sequential adapts a whole-file decoder: progress counting and context
// cancellation between reads.
type sequential struct {
	ctx   context.Context
	r     io.Reader
	close func() error
	cr    *countingReader
	c     bool // liblzma: its errors already name the offset
}

func newSequential(ctx context.Context, r io.ReaderAt, size int64, opts Options) (*sequential, error) {
	cr := &countingReader{r: io.NewSectionReader(r, 0, size), progress: opts.Progress}
	if !opts.PureGo && liblzma.Available() {
		lr, err := liblzma.NewReader(cr)
		if err != nil {
			return nil, err
		}
		return &sequential{ctx: ctx, r: lr, close: lr.Close, cr: cr, c: true}, nil
	}
	xr, err := xz.ReaderConfig{}.NewReader(bufio.NewReaderSize(cr, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	return &sequential{ctx: ctx, r: xr, close: func() error { return nil }, cr: cr}, nil
}

func (s *sequential) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF && !s.c {
		err = fmt.Errorf("xz: decoding near compressed offset %d: %w", s.cr.n, err)
	}
	return n, err
}

func (s *sequential) Close() error { return s.close() }

type countingReader struct {
	r        io.Reader
	n        int64
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if n > 0 && c.progress != nil {
		c.progress(c.n)
	}
	return n, err
}
