package xzpar

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/archive/xzpar/liblzma"
)

// decoders returns the block decoders this build has, by name.
func decoders(t *testing.T) map[string]func() blockDecoder {
	t.Helper()
	ds := map[string]func() blockDecoder{"pure-go": func() blockDecoder { return goDecoder{} }}
	if liblzma.Available() {
		ds["liblzma"] = func() blockDecoder { return &cDecoder{} }
	} else {
		t.Log("built without cgo: only the pure-Go decoder is tested")
	}
	return ds
}

// TestBlockDecodersAgree feeds both decoders raw LZMA2 streams made by xz
// and the same malformed variants, and expects the same outcome: the data,
// or an error naming what is wrong. Each decoder is reused across cases, as
// a worker reuses it across blocks.
func TestBlockDecodersAgree(t *testing.T) {
	data := sampleData(300<<10, 11)
	raw := xzCompress(t, data, "--format=raw", "--lzma2=preset=6,dict=64KiB")
	const dict = 64 << 10
	cases := []struct {
		name    string
		in      []byte
		outSize int
		want    string // "" means success
	}{
		{"exact", raw, len(data), ""},
		{"index says more", raw, len(data) + 10, "data ends after 307200 of 307210 uncompressed bytes"},
		{"index says less", raw, len(data) - 10, "block decodes to more than the 307190 bytes the index records"},
		{"trailing bytes", append(append([]byte{}, raw...), 0, 0, 0), len(data), "3 compressed bytes left after the LZMA2 end marker"},
		{"truncated", raw[:len(raw)/2], len(data), "data ends after"},
		{"corrupt", corruptMiddle(raw), len(data), "LZMA2 data after"},
		{"exact again", raw, len(data), ""},
	}
	for name, mk := range decoders(t) {
		dec := mk()
		for _, c := range cases {
			out := make([]byte, c.outSize)
			err := dec.decode(context.Background(), c.in, dict, out)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%s/%s: %v", name, c.name, err)
			case c.want == "" && string(out) != string(data):
				t.Errorf("%s/%s: output differs from the input xz compressed", name, c.name)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%s/%s: got error %v, want one containing %q", name, c.name, err, c.want)
			}
		}
		dec.close()
	}
}

// corruptMiddle flips a byte in the middle of a copy of b: LZMA2 chunk
// headers are sparse, so the damage lands in compressed data.
func corruptMiddle(b []byte) []byte {
	c := append([]byte{}, b...)
	for i := len(c) / 2; i < len(c)/2+64; i++ {
		c[i] ^= 0xA5
	}
	return c
}

func TestBlockDecoderCanceled(t *testing.T) {
	data := sampleData(64<<10, 12)
	raw := xzCompress(t, data, "--format=raw", "--lzma2=dict=64KiB")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, mk := range decoders(t) {
		dec := mk()
		if err := dec.decode(ctx, raw, 64<<10, make([]byte, len(data))); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: got %v, want context.Canceled", name, err)
		}
		dec.close()
	}
}
