package xzpar

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"sync"

	"github.com/tritonbuild/tritonbuild/internal/archive/xzpar/liblzma"
	"github.com/ulikunitz/xz/lzma"
)

// DefaultMaxBlockSize bounds the uncompressed size of one block the parallel
// reader will hold in memory. xz -T uses three times the dictionary size per
// block (24 MiB at the default preset, 192 MiB at -9), so this admits every
// preset while keeping a few blocks in flight affordable.
const DefaultMaxBlockSize = 256 << 20

// Options tunes the parallel reader. The zero value is ready to use.
type Options struct {
	// Workers is the number of blocks decoded at once; 0 means GOMAXPROCS.
	Workers int
	// Window is the number of blocks that may be decoded or waiting to be
	// read at once, which bounds memory to about Window times the block
	// size. 0 means 2*Workers+2, enough to let the decoders run ahead
	// while the consumer works through a block of many small files;
	// values below Workers are raised to Workers.
	Window int
	// MaxBlockSize is the largest block (uncompressed bytes) decoded in
	// parallel; files with larger blocks are refused with a
	// *NotParallelError. 0 means DefaultMaxBlockSize.
	MaxBlockSize int64
	// Progress, when set, is called from the reading goroutine each time
	// a block has been handed out completely, with the file offset where
	// that block ends. It must be quick.
	Progress func(compressedDone int64)
	// PureGo decodes block bodies with github.com/ulikunitz/xz/lzma even
	// when liblzma is linked in (see package liblzma); tests and the
	// benchmark use it to compare the two.
	PureGo bool
}

func (o Options) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// NotParallelError says why a file cannot be decoded by the parallel reader.
// The file may still be valid; NewDecoder falls back to sequential decoding.
type NotParallelError struct {
	Reason string
}

func (e *NotParallelError) Error() string {
	return "xz: parallel decoding not possible: " + e.Reason
}

// UnsupportedFilterError reports a block whose filter chain is not plain
// LZMA2 (BCJ or delta filters in front of it). Neither the parallel reader
// nor the sequential fallback decodes those, so NewDecoder returns it as is.
type UnsupportedFilterError struct {
	Block   int
	Offset  int64
	Filters string // e.g. "BCJ x86+LZMA2"
}

func (e *UnsupportedFilterError) Error() string {
	return fmt.Sprintf("xz: block %d at offset %d uses filters %s; only plain LZMA2 is supported (recompress with xz --lzma2)", e.Block, e.Offset, e.Filters)
}

// CorruptBlockError reports a block whose data does not decode or does not
// match its sizes or check.
type CorruptBlockError struct {
	Block  int   // 1-based block number
	Offset int64 // file offset of the block header
	Err    error
}

func (e *CorruptBlockError) Error() string {
	return fmt.Sprintf("xz: block %d at offset %d: %v", e.Block, e.Offset, e.Err)
}

func (e *CorruptBlockError) Unwrap() error { return e.Err }

// job is a block with the header facts the decoder needs.
type job struct {
	Block
	headerSize     int
	compressedSize int64
	dictCap        int
}

type result struct {
	buf []byte
	err error
}

// Reader decodes the blocks of an .xz file on several goroutines and returns
// their data in file order. It is not safe for concurrent use.
type Reader struct {
	ctx    context.Context
	cancel context.CancelFunc
	src    io.ReaderAt
	jobs   []job
	opts   Options

	results []chan result // one per block, buffered so workers never wait
	tokens  chan struct{} // a token per block in the window
	free    chan []byte   // recycled output buffers
	wg      sync.WaitGroup

	next     int    // index of the next block to hand out
	cur      []byte // unread part of the current block
	curBuf   []byte // the current block's buffer, recycled when done
	haveCur  bool
	done     int64 // file offset of the end of the last block handed out
	err      error
	closeErr sync.Once
}

// NewReader prepares parallel decoding of the .xz file r of the given size:
// it reads the index and every block header, and starts the workers. It
// returns a *NotParallelError when the file is valid but unsuited (a single
// block, an unverifiable check type, oversized blocks), an
// *UnsupportedFilterError for filters other than LZMA2, and a *FormatError
// or *CorruptBlockError when the container is malformed. Close the
// reader to stop the workers early.
func NewReader(ctx context.Context, r io.ReaderAt, size int64, opts Options) (*Reader, error) {
	idx, err := ReadIndex(r, size)
	if err != nil {
		return nil, err
	}
	maxBlock := opts.MaxBlockSize
	if maxBlock <= 0 {
		maxBlock = DefaultMaxBlockSize
	}
	jobs := make([]job, len(idx.Blocks))
	hb := make([]byte, maxBlockHeaderSize)
	for i, b := range idx.Blocks {
		if !b.Check.supported() {
			return nil, &NotParallelError{Reason: fmt.Sprintf("stream %d uses unsupported check type %v", b.Stream, b.Check)}
		}
		if b.UncompressedSize > maxBlock {
			return nil, &NotParallelError{Reason: fmt.Sprintf("block %d holds %d bytes, above the %d-byte limit for buffered decoding", b.Number, b.UncompressedSize, maxBlock)}
		}
		j, err := readJob(r, b, hb)
		if err != nil {
			return nil, err
		}
		jobs[i] = j
	}
	// Checked after the headers so that unsupported filters are reported
	// as such even in single-block files.
	if len(idx.Blocks) < 2 {
		return nil, &NotParallelError{Reason: fmt.Sprintf("the file has %d block(s)", len(idx.Blocks))}
	}

	workers := opts.workers()
	window := opts.Window
	if window <= 0 {
		window = 2*workers + 2
	}
	if window < workers {
		window = workers
	}
	ctx, cancel := context.WithCancel(ctx)
	rd := &Reader{
		ctx:     ctx,
		cancel:  cancel,
		src:     r,
		jobs:    jobs,
		opts:    opts,
		results: make([]chan result, len(jobs)),
		tokens:  make(chan struct{}, window),
		free:    make(chan []byte, window),
	}
	for i := range rd.results {
		rd.results[i] = make(chan result, 1)
	}
	queue := make(chan int)
	rd.wg.Add(1 + workers)
	go rd.dispatch(queue)
	for w := 0; w < workers; w++ {
		go rd.work(queue)
	}
	return rd, nil
}

// readJob reads and checks one block header against the index.
func readJob(r io.ReaderAt, b Block, hb []byte) (job, error) {
	n := int64(len(hb))
	if n > b.UnpaddedSize {
		n = b.UnpaddedSize
	}
	if _, err := r.ReadAt(hb[:n], b.Offset); err != nil && !errors.Is(err, io.EOF) {
		return job{}, fmt.Errorf("xz: reading block %d header at offset %d: %w", b.Number, b.Offset, err)
	}
	bad := func(reason string) error {
		return &CorruptBlockError{Block: b.Number, Offset: b.Offset, Err: errors.New(reason)}
	}
	h, err := parseBlockHeader(hb[:n])
	if err != nil {
		return job{}, bad("header: " + err.Error())
	}
	comp := b.UnpaddedSize - int64(h.size) - int64(b.Check.Size())
	if comp <= 0 {
		return job{}, bad(fmt.Sprintf("index unpadded size %d leaves no room for data", b.UnpaddedSize))
	}
	if h.compressedSize >= 0 && h.compressedSize != comp {
		return job{}, bad(fmt.Sprintf("header says %d compressed bytes, index says %d", h.compressedSize, comp))
	}
	if h.uncompressedSize >= 0 && h.uncompressedSize != b.UncompressedSize {
		return job{}, bad(fmt.Sprintf("header says %d uncompressed bytes, index says %d", h.uncompressedSize, b.UncompressedSize))
	}
	if len(h.filters) != 1 || h.filters[0].id != filterLZMA2 {
		names := ""
		for i, f := range h.filters {
			if i > 0 {
				names += "+"
			}
			names += filterName(f.id)
		}
		return job{}, &UnsupportedFilterError{Block: b.Number, Offset: b.Offset, Filters: names}
	}
	dict, err := lzma2DictSize(h.filters[0].props)
	if err != nil {
		return job{}, bad(err.Error())
	}
	// A block starts with a dictionary reset, so no match can reach back
	// further than the block's own output: a smaller dictionary buffer
	// suffices and saves memory for small blocks.
	if dict > b.UncompressedSize {
		dict = b.UncompressedSize
	}
	if dict < lzma.MinDictCap {
		dict = lzma.MinDictCap
	}
	return job{Block: b, headerSize: h.size, compressedSize: comp, dictCap: int(dict)}, nil
}

func (rd *Reader) dispatch(queue chan<- int) {
	defer rd.wg.Done()
	defer close(queue)
	for i := range rd.jobs {
		select {
		case rd.tokens <- struct{}{}:
		case <-rd.ctx.Done():
			return
		}
		select {
		case queue <- i:
		case <-rd.ctx.Done():
			return
		}
	}
}

func (rd *Reader) work(queue <-chan int) {
	defer rd.wg.Done()
	dec := newBlockDecoder(rd.opts.PureGo)
	defer dec.close()
	var comp []byte
	for i := range queue {
		j := &rd.jobs[i]
		var buf []byte
		select {
		case buf = <-rd.free:
		default:
		}
		if int64(cap(buf)) < j.UncompressedSize {
			buf = make([]byte, j.UncompressedSize)
		}
		buf = buf[:j.UncompressedSize]
		var err error
		comp, err = rd.decode(dec, j, buf, comp)
		if err != nil {
			var cbe *CorruptBlockError
			if !errors.As(err, &cbe) && rd.ctx.Err() == nil {
				err = &CorruptBlockError{Block: j.Number, Offset: j.Offset, Err: err}
			}
		}
		rd.results[i] <- result{buf: buf, err: err}
	}
}

// decode fills out with block j's data and verifies sizes and check. comp
// is a reusable buffer for the block's compressed bytes.
func (rd *Reader) decode(dec blockDecoder, j *job, out, comp []byte) ([]byte, error) {
	padded := (j.UnpaddedSize + 3) &^ 3
	if int64(cap(comp)) < padded {
		comp = make([]byte, padded)
	}
	comp = comp[:padded]
	if _, err := rd.src.ReadAt(comp, j.Offset); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return comp, fmt.Errorf("reading: %w", err)
	}
	data := comp[j.headerSize : int64(j.headerSize)+j.compressedSize]
	for _, c := range comp[int64(j.headerSize)+j.compressedSize : padded-int64(j.Check.Size())] {
		if c != 0 {
			return comp, errors.New("block padding is not zero")
		}
	}
	sum := comp[padded-int64(j.Check.Size()):]

	if err := dec.decode(rd.ctx, data, j.dictCap, out); err != nil {
		return comp, err
	}
	if err := verifyCheck(j.Check, out, sum); err != nil {
		return comp, err
	}
	return comp, nil
}

func verifyCheck(c CheckType, data, want []byte) error {
	var got []byte
	switch c {
	case CheckNone:
		return nil
	case CheckCRC32:
		got = binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE(data))
	case CheckCRC64:
		got = binary.LittleEndian.AppendUint64(nil, liblzma.CRC64(data))
	case CheckSHA256:
		s := sha256.Sum256(data)
		got = s[:]
	default:
		return fmt.Errorf("cannot verify check type %v", c)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%v check mismatch: stored %x, computed %x", c, want, got)
	}
	return nil
}

// advance makes the next block current, waiting for its decoder.
func (rd *Reader) advance() error {
	if rd.haveCur {
		j := &rd.jobs[rd.next-1]
		rd.done = j.Offset + (j.UnpaddedSize+3)&^3
		select {
		case rd.free <- rd.curBuf:
		default:
		}
		rd.curBuf, rd.haveCur = nil, false
		<-rd.tokens
		if rd.opts.Progress != nil {
			rd.opts.Progress(rd.done)
		}
	}
	if rd.next == len(rd.jobs) {
		return io.EOF
	}
	var res result
	select {
	case res = <-rd.results[rd.next]:
	case <-rd.ctx.Done():
		return rd.ctx.Err()
	}
	if res.err != nil {
		return res.err
	}
	rd.cur, rd.curBuf, rd.haveCur = res.buf, res.buf, true
	rd.next++
	return nil
}

// Read returns decoded data in file order.
func (rd *Reader) Read(p []byte) (int, error) {
	for len(rd.cur) == 0 {
		if rd.err != nil {
			return 0, rd.err
		}
		if err := rd.advance(); err != nil {
			rd.fail(err)
			return 0, rd.err
		}
	}
	n := copy(p, rd.cur)
	rd.cur = rd.cur[n:]
	return n, nil
}

// WriteTo writes all remaining decoded data to w, a block at a time, which
// saves a copy when the caller would otherwise io.Copy through a buffer.
func (rd *Reader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if len(rd.cur) > 0 {
			n, err := w.Write(rd.cur)
			total += int64(n)
			rd.cur = rd.cur[n:]
			if err != nil {
				return total, err
			}
			continue
		}
		if rd.err != nil {
			if errors.Is(rd.err, io.EOF) {
				return total, nil
			}
			return total, rd.err
		}
		if err := rd.advance(); err != nil {
			rd.fail(err)
		}
	}
}

func (rd *Reader) fail(err error) {
	if !errors.Is(err, io.EOF) {
		rd.cancel()
	}
	rd.err = err
}

// Close stops the workers and waits for them. It is safe to call more than
// once.
func (rd *Reader) Close() error {
	rd.closeErr.Do(func() {
		rd.cancel()
		rd.wg.Wait()
		if rd.err == nil {
			rd.err = errors.New("xz: read from closed reader")
		}
	})
	return nil
}

// Blocks reports the number of blocks the reader decodes.
func (rd *Reader) Blocks() int { return len(rd.jobs) }
