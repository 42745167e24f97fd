package xzpar

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tritonbuild/tritonbuild/internal/archive"
	"github.com/tritonbuild/tritonbuild/internal/archive/xzpar/liblzma"
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
	seq, err := newSequential(ctx, r, size, opts)
	if err != nil {
		return nil, err
	}
	return newReadahead(ctx, seq, opts.Progress), nil
}

// sequential adapts a whole-file decoder: it counts the compressed bytes
// consumed and checks the context between reads.
type sequential struct {
	ctx   context.Context
	r     io.Reader
	close func() error
	cr    *countingReader
	named bool // the decoder's errors already name the offset (liblzma)
}

func newSequential(ctx context.Context, r io.ReaderAt, size int64, opts Options) (*sequential, error) {
	cr := &countingReader{r: io.NewSectionReader(r, 0, size)}
	if !opts.PureGo && liblzma.Available() {
		lr, err := liblzma.NewReader(cr)
		if err != nil {
			return nil, err
		}
		return &sequential{ctx: ctx, r: lr, close: lr.Close, cr: cr, named: true}, nil
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
	if err != nil && !errors.Is(err, io.EOF) && !s.named {
		err = fmt.Errorf("xz: decoding near compressed offset %d: %w", s.cr.n, err)
	}
	return n, err
}

func (s *sequential) Close() error { return s.close() }

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Read-ahead sizes: decoded chunks in flight between the decoding goroutine
// and the reader.
const (
	aheadSize  = 1 << 20
	aheadDepth = 4
)

type aheadChunk struct {
	b    []byte
	done int64 // compressed bytes consumed when the chunk was complete
	err  error // io.EOF after the last chunk, or the decoder's error
}

// readahead decodes on its own goroutine, a few chunks ahead of the reader,
// so that decoding overlaps with what the reader does with the data
// (creating files), as `xz -dc | tar -x` overlaps them in two processes.
// Progress is reported from the reading goroutine, as the parallel reader
// does.
type readahead struct {
	cancel   context.CancelFunc
	full     chan aheadChunk
	free     chan []byte
	exited   chan struct{}
	progress func(int64)

	cur, curBuf []byte
	err         error // returned once cur is drained
	closed      bool
}

func newReadahead(ctx context.Context, seq *sequential, progress func(int64)) *readahead {
	ctx, cancel := context.WithCancel(ctx)
	seq.ctx = ctx
	ra := &readahead{
		cancel:   cancel,
		full:     make(chan aheadChunk, aheadDepth),
		free:     make(chan []byte, aheadDepth),
		exited:   make(chan struct{}),
		progress: progress,
	}
	for i := 0; i < aheadDepth; i++ {
		ra.free <- make([]byte, aheadSize)
	}
	go ra.decode(ctx, seq)
	return ra
}

func (ra *readahead) decode(ctx context.Context, seq *sequential) {
	defer close(ra.exited)
	defer seq.Close()
	for {
		var buf []byte
		select {
		case buf = <-ra.free:
		case <-ctx.Done():
			// The reader may be waiting for a chunk: give it the reason.
			// (Close drains the channel, so this send cannot block forever.)
			ra.full <- aheadChunk{err: ctx.Err()}
			return
		}
		n, err := io.ReadFull(seq, buf)
		if err == io.ErrUnexpectedEOF {
			err = io.EOF // a short last chunk
		}
		ra.full <- aheadChunk{b: buf[:n], done: seq.cr.n, err: err}
		if err != nil {
			return
		}
	}
}

func (ra *readahead) Read(p []byte) (int, error) {
	for len(ra.cur) == 0 {
		if ra.err != nil {
			return 0, ra.err
		}
		if ra.curBuf != nil {
			ra.free <- ra.curBuf[:cap(ra.curBuf)]
			ra.curBuf = nil
		}
		c := <-ra.full
		ra.cur, ra.curBuf, ra.err = c.b, c.b, c.err
		if ra.progress != nil && len(c.b) > 0 {
			ra.progress(c.done)
		}
	}
	n := copy(p, ra.cur)
	ra.cur = ra.cur[n:]
	return n, nil
}

// Close stops the decoding goroutine and waits for it.
func (ra *readahead) Close() error {
	if ra.closed {
		return nil
	}
	ra.closed = true
	ra.cancel()
	for {
		select {
		case <-ra.full: // unblock a pending send
		case <-ra.exited:
			if ra.err == nil {
				ra.err = errors.New("xz: read from closed reader")
			}
			ra.cur = nil
			return nil
		}
	}
}

// Decompressor returns an archive.Decompressor for .tar.xz that decodes with
// NewDecoder when the archive is a file (parallel when its index allows) and
// sequentially when it is a stream. Programs that extract .tar.xz pass it
// in archive.Options.Decoders; opts.Progress is set by the archive package.
func Decompressor(opts Options) archive.Decompressor {
	return func(ctx context.Context, in archive.Compressed) (io.ReadCloser, error) {
		o := opts
		if in.File != nil {
			o.Progress = in.Progress
			return NewDecoder(ctx, in.File, in.Size, o)
		}
		xr, err := xz.NewReader(in.Reader)
		if err != nil {
			return nil, fmt.Errorf("xz: %w", err)
		}
		return io.NopCloser(xr), nil
	}
}
