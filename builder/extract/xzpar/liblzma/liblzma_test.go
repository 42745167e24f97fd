package liblzma

import (
	"bytes"
	"errors"
	"hash/crc64"
	"os/exec"
	"testing"
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
		t.Skip("built without cgo: liblzma is not linked in")
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
