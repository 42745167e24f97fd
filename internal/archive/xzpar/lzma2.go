package xzpar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tritonbuild/tritonbuild/internal/archive/xzpar/liblzma"
	"github.com/ulikunitz/xz/lzma"
)

// decodeStep is how much output is produced between context checks.
const decodeStep = 4 << 20

// blockDecoder fills out with the raw LZMA2 data of one block. out has the
// block's exact uncompressed size from the index; data must hold exactly
// one LZMA2 stream (end marker included) that decodes to that size. Each
// worker owns one, so implementations may keep state between blocks.
type blockDecoder interface {
	decode(ctx context.Context, data []byte, dictCap int, out []byte) error
	close()
}

// newBlockDecoder prefers liblzma, which needs about half the CPU per byte,
// and uses the pure-Go decoder when the binary has no cgo or when asked.
func newBlockDecoder(pureGo bool) blockDecoder {
	if !pureGo && liblzma.Available() {
		return &cDecoder{}
	}
	return goDecoder{}
}

func errShort(got, want int) error {
	return fmt.Errorf("data ends after %d of %d uncompressed bytes", got, want)
}

func errLong(want int) error {
	return fmt.Errorf("block decodes to more than the %d bytes the index records", want)
}

func errTrailing(n int) error {
	return fmt.Errorf("%d compressed bytes left after the LZMA2 end marker", n)
}

// cDecoder runs liblzma, reusing its dictionary from block to block.
type cDecoder struct {
	d *liblzma.Decoder
}

func (c *cDecoder) decode(ctx context.Context, data []byte, dictCap int, out []byte) error {
	if c.d == nil {
		d, err := liblzma.NewLZMA2(uint32(dictCap))
		if err != nil {
			return err
		}
		c.d = d
	} else if err := c.d.Reset(uint32(dictCap)); err != nil {
		return err
	}
	in, off := 0, 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(off+decodeStep, len(out))
		nIn, nOut, done, err := c.d.Decode(data[in:], out[off:end])
		in += nIn
		off += nOut
		switch {
		case done && off < len(out):
			return errShort(off, len(out))
		case done && in < len(data):
			return errTrailing(len(data) - in)
		case done:
			return nil
		case errors.Is(err, liblzma.ErrNoProgress) || err == nil && nIn == 0 && nOut == 0:
			// Stuck: either the output is full before the end marker or
			// the input ended without one.
			if off == len(out) {
				return errLong(len(out))
			}
			return errShort(off, len(out))
		case err != nil:
			return fmt.Errorf("LZMA2 data after %d bytes: %w", off, err)
		}
	}
}

func (c *cDecoder) close() {
	if c.d != nil {
		c.d.Close()
	}
}

// goDecoder runs github.com/ulikunitz/xz/lzma.
type goDecoder struct{}

func (goDecoder) decode(ctx context.Context, data []byte, dictCap int, out []byte) error {
	src := bytes.NewReader(data)
	dec, err := lzma.Reader2Config{DictCap: dictCap}.NewReader2(src)
	if err != nil {
		return fmt.Errorf("LZMA2 decoder: %w", err)
	}
	for off := 0; off < len(out); {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(off+decodeStep, len(out))
		n, err := io.ReadFull(dec, out[off:end])
		off += n
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return errShort(off, len(out))
			}
			return fmt.Errorf("LZMA2 data after %d bytes: %w", off, err)
		}
	}
	// The LZMA2 data must end exactly here: an end marker, and no
	// compressed bytes left over.
	var extra [1]byte
	if n, err := dec.Read(extra[:]); n != 0 || !errors.Is(err, io.EOF) {
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("LZMA2 data after %d bytes: %w", len(out), err)
		}
		return errLong(len(out))
	}
	if src.Len() != 0 {
		return errTrailing(src.Len())
	}
	return nil
}

func (goDecoder) close() {}
