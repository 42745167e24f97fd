//go:build cgo

package liblzma

/*
#cgo LDFLAGS: -llzma
#include <lzma.h>
#include <stdlib.h>
#include <string.h>

static lzma_ret tb_lzma2_init(lzma_stream *s, uint32_t dict_size) {
	lzma_options_lzma opts;
	memset(&opts, 0, sizeof opts);
	opts.dict_size = dict_size;
	lzma_filter filters[2] = {
		{ .id = LZMA_FILTER_LZMA2, .options = &opts },
		{ .id = LZMA_VLI_UNKNOWN, .options = NULL },
	};
	return lzma_raw_decoder(s, filters);
}

static lzma_ret tb_xz_init(lzma_stream *s) {
	// Concatenated streams and stream padding, as xz -d accepts them; no
	// memory limit (the caller decided to decode this file).
	return lzma_stream_decoder(s, UINT64_MAX, LZMA_CONCATENATED);
}

// tb_step runs the decoder over the given buffers. The stream keeps no
// pointer to them afterwards: they belong to Go and may not be retained.
static lzma_ret tb_step(lzma_stream *s, const uint8_t *in, size_t in_len, size_t *in_used,
                        uint8_t *out, size_t out_len, size_t *out_used, int finish) {
	s->next_in = in;
	s->avail_in = in_len;
	s->next_out = out;
	s->avail_out = out_len;
	lzma_ret r = lzma_code(s, finish ? LZMA_FINISH : LZMA_RUN);
	*in_used = in_len - s->avail_in;
	*out_used = out_len - s->avail_out;
	s->next_in = NULL;
	s->avail_in = 0;
	s->next_out = NULL;
	s->avail_out = 0;
	return r;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"unsafe"
)

// Available reports whether liblzma is linked in.
func Available() bool { return true }

// Decoder decodes one raw LZMA2 stream at a time. It is not safe for
// concurrent use; Reset starts a new stream and keeps the allocated
// dictionary when the size allows, which is why callers keep one Decoder
// per worker.
type Decoder struct {
	s *C.lzma_stream
}

// NewLZMA2 returns a decoder ready for a stream whose dictionary is at most
// dictSize bytes.
func NewLZMA2(dictSize uint32) (*Decoder, error) {
	s, err := newStream()
	if err != nil {
		return nil, err
	}
	d := &Decoder{s: s}
	if err := d.Reset(dictSize); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Reset prepares the decoder for a new stream.
func (d *Decoder) Reset(dictSize uint32) error {
	if r := C.tb_lzma2_init(d.s, C.uint32_t(dictSize)); r != C.LZMA_OK {
		return fmt.Errorf("liblzma: starting the LZMA2 decoder (dictionary %d bytes): %w", dictSize, retError(r))
	}
	return nil
}

// Decode consumes input from in and writes output to out. It returns how
// much of each it used and whether the stream's end marker was reached.
// ErrNoProgress is returned when nothing could be done; any other error
// means the data is corrupt or unsupported.
func (d *Decoder) Decode(in, out []byte) (nIn, nOut int, end bool, err error) {
	var inUsed, outUsed C.size_t
	r := step(d.s, in, out, false, &inUsed, &outUsed)
	nIn, nOut = int(inUsed), int(outUsed)
	switch r {
	case C.LZMA_OK:
		return nIn, nOut, false, nil
	case C.LZMA_STREAM_END:
		return nIn, nOut, true, nil
	default:
		return nIn, nOut, false, retError(r)
	}
}

func step(s *C.lzma_stream, in, out []byte, finish bool, inUsed, outUsed *C.size_t) C.lzma_ret {
	f := C.int(0)
	if finish {
		f = 1
	}
	return C.tb_step(s,
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(in))), C.size_t(len(in)), inUsed,
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(out))), C.size_t(len(out)), outUsed, f)
}

// newStream allocates an lzma_stream in C memory: it holds liblzma's own
// pointers, which Go memory must not hold across calls.
func newStream() (*C.lzma_stream, error) {
	s := (*C.lzma_stream)(C.calloc(1, C.size_t(unsafe.Sizeof(C.lzma_stream{}))))
	if s == nil {
		return nil, errors.New("liblzma: out of memory")
	}
	return s, nil
}

func freeStream(s *C.lzma_stream) {
	C.lzma_end(s)
	C.free(unsafe.Pointer(s))
}

// Reader decodes a whole .xz file (every stream, padding allowed) from an
// io.Reader, as `xz -dc` does, on the calling goroutine.
type Reader struct {
	s      *C.lzma_stream
	r      io.Reader
	buf    []byte
	in     []byte // unconsumed part of buf
	eof    bool   // r is exhausted
	err    error  // sticky
	offset int64  // compressed bytes consumed
}

// NewReader starts decoding r.
func NewReader(r io.Reader) (*Reader, error) {
	s, err := newStream()
	if err != nil {
		return nil, err
	}
	if ret := C.tb_xz_init(s); ret != C.LZMA_OK {
		freeStream(s)
		return nil, fmt.Errorf("liblzma: starting the .xz decoder: %w", retError(ret))
	}
	return &Reader{s: s, r: r, buf: make([]byte, 1<<20)}, nil
}

// Read returns decoded bytes. Errors name the compressed offset.
func (z *Reader) Read(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(z.in) == 0 && !z.eof {
			n, err := z.r.Read(z.buf)
			z.in = z.buf[:n]
			if err == io.EOF {
				z.eof = true
			} else if err != nil {
				z.err = err
				return 0, err
			}
		}
		var inUsed, outUsed C.size_t
		ret := step(z.s, z.in, p, z.eof, &inUsed, &outUsed)
		z.in = z.in[inUsed:]
		z.offset += int64(inUsed)
		n := int(outUsed)
		switch {
		case ret == C.LZMA_STREAM_END:
			z.err = io.EOF
			if len(z.in) > 0 || !z.eof {
				// LZMA_CONCATENATED only ends at the end of input.
				z.err = fmt.Errorf("xz: data after the last stream at compressed offset %d", z.offset)
			}
			if n > 0 {
				return n, nil
			}
			return 0, z.err
		case ret == C.LZMA_BUF_ERROR && z.eof && len(z.in) == 0:
			z.err = fmt.Errorf("xz: file ends inside a stream at compressed offset %d: %w", z.offset, io.ErrUnexpectedEOF)
			return n, nil
		case ret != C.LZMA_OK && ret != C.LZMA_BUF_ERROR:
			z.err = fmt.Errorf("xz: near compressed offset %d: %w", z.offset, retError(ret))
			return n, nil
		}
		if n > 0 {
			return n, nil
		}
	}
}

// Close frees the decoder; the underlying reader is not closed.
func (z *Reader) Close() error {
	if z.s != nil {
		freeStream(z.s)
		z.s = nil
	}
	if z.err == nil {
		z.err = errors.New("xz: read from closed reader")
	}
	return nil
}

// Close frees the decoder's memory.
func (d *Decoder) Close() {
	if d.s != nil {
		freeStream(d.s)
		d.s = nil
	}
}

func retError(r C.lzma_ret) error {
	switch r {
	case C.LZMA_BUF_ERROR:
		return ErrNoProgress
	case C.LZMA_DATA_ERROR:
		return errors.New("compressed data is corrupt")
	case C.LZMA_MEM_ERROR:
		return errors.New("out of memory")
	case C.LZMA_OPTIONS_ERROR:
		return errors.New("unsupported LZMA2 options")
	case C.LZMA_MEMLIMIT_ERROR:
		return errors.New("memory limit reached")
	default:
		return fmt.Errorf("liblzma error %d", int(r))
	}
}

// CRC64 returns the CRC-64/ECMA-182 of b as the .xz check uses it; liblzma
// computes it with carry-less multiplication where the CPU has it.
func CRC64(b []byte) uint64 {
	return uint64(C.lzma_crc64((*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(b))), C.size_t(len(b)), 0))
}
