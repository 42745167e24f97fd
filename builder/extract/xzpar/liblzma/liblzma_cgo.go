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

// tb_lzma2_step runs the decoder over the given buffers. The stream keeps no
// pointer to them afterwards: they belong to Go and may not be retained.
static lzma_ret tb_lzma2_step(lzma_stream *s, const uint8_t *in, size_t in_len, size_t *in_used,
                              uint8_t *out, size_t out_len, size_t *out_used) {
	s->next_in = in;
	s->avail_in = in_len;
	s->next_out = out;
	s->avail_out = out_len;
	lzma_ret r = lzma_code(s, LZMA_RUN);
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
	// The stream lives in C memory: it holds liblzma's own pointers, which
	// Go memory must not hold across calls.
	s := (*C.lzma_stream)(C.calloc(1, C.size_t(unsafe.Sizeof(C.lzma_stream{}))))
	if s == nil {
		return nil, errors.New("liblzma: out of memory")
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
	r := C.tb_lzma2_step(d.s,
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(in))), C.size_t(len(in)), &inUsed,
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(out))), C.size_t(len(out)), &outUsed)
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

// Close frees the decoder's memory.
func (d *Decoder) Close() {
	if d.s != nil {
		C.lzma_end(d.s)
		C.free(unsafe.Pointer(d.s))
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
