package liblzma

import (
	"bytes"
	"errors"
	"hash/crc64"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

func TestCRC64MatchesGo(t *testing.T) {
	tab := crc64.MakeTable(crc64.ECMA)
	b := make([]byte, 1<<20+13)
	for i := range b {
		b[i] = byte(i*31 + i>>7)
	}
	for _, n := range []int{0, 1, 7, 8, 63, 4096, len(b)} {
		if got, want := CRC64(b[:n]), crc64.Checksum(b[:n], tab); got != want {
			t.Fatalf("CRC64 of %d bytes = %x, want %x", n, got, want)
		}
	}
}

// TestDecodeRawLZMA2 decodes what `xz --format=raw --lzma2` wrote, in
// small output steps, and checks what a stalled decoder reports.
func TestDecodeRawLZMA2(t *testing.T) {
	if !Available() {
		testenv.Unavailable(t, "built without cgo: liblzma is not linked in")
	}
	want := bytes.Repeat([]byte("tritonbuild decodes LZMA2 with liblzma\n"), 5000)
	cmd := exec.Command("xz", "-c", "--format=raw", "--lzma2=dict=64KiB")
	cmd.Stdin = bytes.NewReader(want)
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("xz (xz-utils is required): %v", err)
	}
	d, err := NewLZMA2(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out := make([]byte, len(want))
	in, off := 0, 0
	for {
		nIn, nOut, end, err := d.Decode(raw[in:], out[off:min(off+1000, len(out))])
		in, off = in+nIn, off+nOut
		if err != nil {
			t.Fatalf("after %d bytes: %v", off, err)
		}
		if end {
			break
		}
	}
	if in != len(raw) || !bytes.Equal(out, want) {
		t.Fatalf("consumed %d of %d input bytes; output equal: %v", in, len(raw), bytes.Equal(out, want))
	}

	// The same stream cut short stalls: first no progress, then
	// ErrNoProgress.
	if err := d.Reset(64 << 10); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = d.Decode(raw[:len(raw)/2], out)
	for i := 0; err == nil && i < 3; i++ {
		_, _, _, err = d.Decode(nil, out)
	}
	if !errors.Is(err, ErrNoProgress) {
		t.Fatalf("truncated stream: got %v, want ErrNoProgress", err)
	}
}

// TestReaderWholeFiles decodes .xz files made by xz (two streams back to
// back, as xz -dc accepts) and refuses truncated or extended ones.
func TestReaderWholeFiles(t *testing.T) {
	if !Available() {
		testenv.Unavailable(t, "built without cgo: liblzma is not linked in")
	}
	a := bytes.Repeat([]byte("first stream\n"), 20000)
	b := bytes.Repeat([]byte("second stream\n"), 10000)
	xzOf := func(data []byte) []byte {
		cmd := exec.Command("xz", "-c", "-q")
		cmd.Stdin = bytes.NewReader(data)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("xz (xz-utils is required): %v", err)
		}
		return out
	}
	file := append(xzOf(a), xzOf(b)...)
	read := func(data []byte) ([]byte, error) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		return io.ReadAll(r)
	}
	got, err := read(file)
	if err != nil || !bytes.Equal(got, append(append([]byte{}, a...), b...)) {
		t.Fatalf("two streams: %d bytes, err %v", len(got), err)
	}
	if _, err := read(file[:len(file)-7]); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated file: got %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := read(append(bytes.Clone(file), "junk"...)); err == nil || !strings.Contains(err.Error(), "compressed offset") {
		t.Fatalf("trailing junk: got %v, want an error naming the offset", err)
	}
}
