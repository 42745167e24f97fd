package xzpar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests make their fixtures with the xz command line tool (xz-utils),
// the reference implementation, and compare against its decoder.

func needXZ(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("xz"); err != nil {
		t.Fatalf("the xz CLI (xz-utils) is required for these tests: %v", err)
	}
}

// sampleData returns n bytes of deterministic, moderately compressible text.
func sampleData(n int, seed int64) []byte {
	words := []string{"llvm", "triton", "kernel", "tensor", "block", "stream", "index", "func", "return", "{", "}", "\n", "    ", "0x1f", "int64", "static"}
	rng := rand.New(rand.NewSource(seed))
	var b bytes.Buffer
	for b.Len() < n {
		if rng.Intn(50) == 0 {
			fmt.Fprintf(&b, "%08x", rng.Uint32())
		}
		b.WriteString(words[rng.Intn(len(words))])
		b.WriteByte(' ')
	}
	return b.Bytes()[:n]
}

// xzCompress runs xz with args on data and returns the .xz bytes.
func xzCompress(t *testing.T, data []byte, args ...string) []byte {
	t.Helper()
	needXZ(t)
	cmd := exec.Command("xz", append([]string{"-c", "-q"}, args...)...)
	cmd.Stdin = bytes.NewReader(data)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("xz %v: %v: %s", args, err, stderr.String())
	}
	return out.Bytes()
}

// xzDecompress is the reference decoder.
func xzDecompress(t *testing.T, xzData []byte) []byte {
	t.Helper()
	cmd := exec.Command("xz", "-dc")
	cmd.Stdin = bytes.NewReader(xzData)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("xz -dc: %v: %s", err, stderr.String())
	}
	return out.Bytes()
}

// oddReader reads in awkward sizes to exercise block boundaries.
type oddReader struct {
	r io.Reader
	i int
}

func (o *oddReader) Read(p []byte) (int, error) {
	o.i++
	n := 1 + (o.i*7919)%4093
	if n < len(p) {
		p = p[:n]
	}
	return o.r.Read(p)
}

func decodeParallel(t *testing.T, xzData []byte, opts Options) ([]byte, *Reader) {
	t.Helper()
	r, err := NewReader(context.Background(), bytes.NewReader(xzData), int64(len(xzData)), opts)
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	defer r.Close()
	got, err := io.ReadAll(&oddReader{r: r})
	if err != nil {
		t.Fatalf("reading: %v", err)
	}
	return got, r
}

func TestParallelMatchesXZ(t *testing.T) {
	data := sampleData(1<<20, 1)
	cases := []struct {
		name string
		args []string
	}{
		{"block64k-T1-crc64", []string{"--block-size=64KiB", "-T1"}},
		{"T2-blocks", []string{"-T2", "--block-size=200KiB"}},
		{"crc32", []string{"--block-size=128KiB", "--check=crc32"}},
		{"sha256", []string{"--block-size=128KiB", "--check=sha256"}},
		{"none", []string{"--block-size=128KiB", "--check=none"}},
		{"preset0-uneven", []string{"-0", "--block-size=100001"}},
		{"extreme", []string{"-9e", "--block-size=300KiB"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			xzData := xzCompress(t, data, c.args...)
			want := xzDecompress(t, xzData)
			if !bytes.Equal(want, data) {
				t.Fatal("xz itself did not round-trip the sample")
			}
			for _, pure := range []bool{false, true} {
				got, r := decodeParallel(t, xzData, Options{PureGo: pure})
				if r.Blocks() < 2 {
					t.Fatalf("fixture has %d blocks, want several", r.Blocks())
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("PureGo=%v: decoded %d bytes differ from xz -dc's %d bytes", pure, len(got), len(want))
				}
			}
		})
	}
}

func TestSmallWindowAndWriteTo(t *testing.T) {
	data := sampleData(2<<20, 2)
	xzData := xzCompress(t, data, "--block-size=32KiB", "-T1")
	for _, opts := range []Options{{Workers: 1, Window: 1}, {Workers: 3, Window: 3}, {Workers: 8}} {
		r, err := NewReader(context.Background(), bytes.NewReader(xzData), int64(len(xzData)), opts)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		n, err := r.WriteTo(&buf)
		r.Close()
		if err != nil || n != int64(len(data)) || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("opts %+v: WriteTo wrote %d bytes (want %d), err %v, equal %v", opts, n, len(data), err, bytes.Equal(buf.Bytes(), data))
		}
	}
}

func TestProgressReachesFileBlocks(t *testing.T) {
	data := sampleData(1<<20, 3)
	xzData := xzCompress(t, data, "--block-size=64KiB")
	var calls []int64
	r, err := NewReader(context.Background(), bytes.NewReader(xzData), int64(len(xzData)), Options{Progress: func(n int64) { calls = append(calls, n) }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatal(err)
	}
	idx, err := ReadIndex(bytes.NewReader(xzData), int64(len(xzData)))
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != len(idx.Blocks) {
		t.Fatalf("%d progress calls for %d blocks", len(calls), len(idx.Blocks))
	}
	last := idx.Blocks[len(idx.Blocks)-1]
	if want := last.Offset + (last.UnpaddedSize+3)&^3; calls[len(calls)-1] != want {
		t.Fatalf("final progress %d, want end of last block %d", calls[len(calls)-1], want)
	}
	for i := 1; i < len(calls); i++ {
		if calls[i] <= calls[i-1] {
			t.Fatalf("progress not increasing: %v", calls)
		}
	}
}

func TestMultipleStreamsAndPadding(t *testing.T) {
	a := sampleData(300<<10, 4)
	b := sampleData(500<<10, 5)
	xa := xzCompress(t, a, "--block-size=64KiB", "--check=crc32")
	xb := xzCompress(t, b, "--block-size=100KiB", "--check=sha256")
	var file []byte
	file = append(file, xa...)
	file = append(file, make([]byte, 8)...) // stream padding between streams
	file = append(file, xb...)
	file = append(file, make([]byte, 4)...) // and after the last one
	want := xzDecompress(t, file)
	got, _ := decodeParallel(t, file, Options{})
	if !bytes.Equal(got, want) || !bytes.Equal(got, append(append([]byte{}, a...), b...)) {
		t.Fatalf("multi-stream output differs (%d bytes, want %d)", len(got), len(want))
	}
	idx, err := ReadIndex(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	if idx.Streams != 2 || idx.UncompressedSize != int64(len(want)) {
		t.Fatalf("index: %d streams, %d bytes; want 2 streams, %d bytes", idx.Streams, idx.UncompressedSize, len(want))
	}
	if idx.Blocks[0].Check != CheckCRC32 || idx.Blocks[len(idx.Blocks)-1].Check != CheckSHA256 {
		t.Fatalf("check types %v/%v", idx.Blocks[0].Check, idx.Blocks[len(idx.Blocks)-1].Check)
	}
}

// TestIndexMatchesXZList compares ReadIndex with xz --list --robot, which
// reports each block's offset and sizes.
func TestIndexMatchesXZList(t *testing.T) {
	data := sampleData(1<<20, 6)
	xzData := xzCompress(t, data, "--block-size=70000")
	path := filepath.Join(t.TempDir(), "f.xz")
	if err := os.WriteFile(path, xzData, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("xz", "--robot", "--list", "-vv", path).Output()
	if err != nil {
		t.Fatalf("xz --list: %v", err)
	}
	idx, err := ReadIndex(bytes.NewReader(xzData), int64(len(xzData)))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "\t")
		if f[0] != "block" {
			continue
		}
		// block stream blocknum-in-stream blocknum-in-file compoffset uncompoffset totalsize uncompsize ...
		num, _ := strconv.Atoi(f[3])
		off, _ := strconv.ParseInt(f[4], 10, 64)
		uoff, _ := strconv.ParseInt(f[5], 10, 64)
		usize, _ := strconv.ParseInt(f[7], 10, 64)
		b := idx.Blocks[n]
		if b.Number != num || b.Offset != off || b.UncompressedOffset != uoff || b.UncompressedSize != usize {
			t.Fatalf("block %d: got %+v, xz --list says number %d offset %d uncompressed offset %d size %d", n, b, num, off, uoff, usize)
		}
		n++
	}
	if n != len(idx.Blocks) || n < 10 {
		t.Fatalf("xz lists %d blocks, ReadIndex %d", n, len(idx.Blocks))
	}
}

func TestSingleBlockFallsBack(t *testing.T) {
	data := sampleData(400<<10, 7)
	xzData := xzCompress(t, data) // plain xz: one block
	_, err := NewReader(context.Background(), bytes.NewReader(xzData), int64(len(xzData)), Options{})
	var npe *NotParallelError
	if !errors.As(err, &npe) {
		t.Fatalf("NewReader on a single-block file: %v, want *NotParallelError", err)
	}
	bad := bytes.Clone(xzData)
	for i := len(bad) / 2; i < len(bad)/2+32; i++ {
		bad[i] ^= 0x5A
	}
	for _, pure := range []bool{false, true} {
		r, err := NewDecoder(context.Background(), bytes.NewReader(xzData), int64(len(xzData)), Options{PureGo: pure})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("PureGo=%v: sequential fallback: %d bytes, err %v", pure, len(got), err)
		}
		// Damage in the middle of the only block is an error naming where.
		r, err = NewDecoder(context.Background(), bytes.NewReader(bad), int64(len(bad)), Options{PureGo: pure})
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(r)
		r.Close()
		if err == nil || !strings.Contains(err.Error(), "compressed offset") {
			t.Fatalf("PureGo=%v: corrupt single block: got %v, want an error naming the compressed offset", pure, err)
		}
	}
}

func TestBCJFilterRefused(t *testing.T) {
	data := sampleData(300<<10, 8)
	for name, args := range map[string][]string{
		"multi-block":  {"--block-size=64KiB", "--x86", "--lzma2"},
		"single-block": {"--x86", "--lzma2"},
	} {
		xzData := xzCompress(t, data, args...)
		_, err := NewReader(context.Background(), bytes.NewReader(xzData), int64(len(xzData)), Options{})
		var ufe *UnsupportedFilterError
		if !errors.As(err, &ufe) || ufe.Block != 1 || ufe.Filters != "BCJ x86+LZMA2" {
			t.Fatalf("%s: NewReader: %v, want *UnsupportedFilterError for block 1 naming BCJ x86+LZMA2", name, err)
		}
		if _, err := NewDecoder(context.Background(), bytes.NewReader(xzData), int64(len(xzData)), Options{}); !errors.As(err, &ufe) {
			t.Fatalf("%s: NewDecoder: %v, want *UnsupportedFilterError", name, err)
		}
	}
}

func TestCorruptBlockNamed(t *testing.T) {
	data := sampleData(1<<20, 9)
	xzData := xzCompress(t, data, "--block-size=64KiB")
	idx, err := ReadIndex(bytes.NewReader(xzData), int64(len(xzData)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		target int
		pure   bool
	}{{3, false}, {len(idx.Blocks), false}, {3, true}, {len(idx.Blocks), true}} {
		target := tc.target
		b := idx.Blocks[target-1]
		bad := bytes.Clone(xzData)
		// Flip bits in the middle of the compressed data, past the header.
		bad[b.Offset+b.UnpaddedSize/2] ^= 0x55
		r, err := NewReader(context.Background(), bytes.NewReader(bad), int64(len(bad)), Options{PureGo: tc.pure})
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, r)
		r.Close()
		var cbe *CorruptBlockError
		if !errors.As(err, &cbe) {
			t.Fatalf("block %d corrupted: got %v, want *CorruptBlockError", target, err)
		}
		if cbe.Block != target || cbe.Offset != b.Offset {
			t.Fatalf("error names block %d at %d, want block %d at %d: %v", cbe.Block, cbe.Offset, target, b.Offset, err)
		}
		if n > b.UncompressedOffset {
			t.Fatalf("reader handed out %d bytes, past the corrupt block's start %d", n, b.UncompressedOffset)
		}
	}
}

func TestCorruptCheckNamed(t *testing.T) {
	data := sampleData(512<<10, 10)
	xzData := xzCompress(t, data, "--block-size=64KiB", "--check=crc32")
	idx, err := ReadIndex(bytes.NewReader(xzData), int64(len(xzData)))
	if err != nil {
		t.Fatal(err)
	}
	b := idx.Blocks[1]
	bad := bytes.Clone(xzData)
	bad[b.Offset+b.UnpaddedSize-1] ^= 0xFF // last byte of the stored CRC32
	r, err := NewReader(context.Background(), bytes.NewReader(bad), int64(len(bad)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = io.Copy(io.Discard, r)
	var cbe *CorruptBlockError
	if !errors.As(err, &cbe) || cbe.Block != 2 || !strings.Contains(err.Error(), "CRC32 check mismatch") {
		t.Fatalf("got %v, want a CRC32 mismatch in block 2", err)
	}
}

func TestTruncatedAndBrokenIndex(t *testing.T) {
	data := sampleData(512<<10, 11)
	xzData := xzCompress(t, data, "--block-size=64KiB")
	// Layout at the end: ... index, footer(12).
	cases := map[string]struct {
		file []byte
		what string
	}{
		"cut-footer":       {xzData[:len(xzData)-12], "stream footer"},
		"cut-4":            {xzData[:len(xzData)-4], "stream footer"},
		"cut-odd":          {xzData[:len(xzData)-3], "file end"},
		"index-cut-middle": {append(bytes.Clone(xzData[:len(xzData)-24]), xzData[len(xzData)-12:]...), "index"},
		"only-footer":      {bytes.Clone(xzData[len(xzData)-40:]), "stream footer"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewReader(context.Background(), bytes.NewReader(c.file), int64(len(c.file)), Options{})
			var fe *FormatError
			if !errors.As(err, &fe) || fe.What != c.what {
				t.Fatalf("got %v, want a *FormatError about the %s", err, c.what)
			}
			// The convenience decoder must not paper over it.
			if _, err := NewDecoder(context.Background(), bytes.NewReader(c.file), int64(len(c.file)), Options{}); !errors.As(err, &fe) {
				t.Fatalf("NewDecoder: %v, want *FormatError", err)
			}
		})
	}
}

func TestCancelStopsWorkers(t *testing.T) {
	data := sampleData(2<<20, 12)
	xzData := xzCompress(t, data, "--block-size=32KiB")
	ctx, cancel := context.WithCancel(context.Background())
	r, err := NewReader(ctx, bytes.NewReader(xzData), int64(len(xzData)), Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100<<10)
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err = io.Copy(io.Discard, r)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %v, want context.Canceled", err)
	}
	r.Close() // must return: workers exit
}

func TestNotXZ(t *testing.T) {
	junk := bytes.Repeat([]byte("not an xz file!!"), 10)
	_, err := NewDecoder(context.Background(), bytes.NewReader(junk), int64(len(junk)), Options{})
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("got %v, want *FormatError", err)
	}
}

// TestSequentialReadahead: a single-block file decodes on its own goroutine
// ahead of the reader; progress comes from the reader's goroutine and ends
// at the file size; cancelling stops it, and Close returns promptly.
func TestSequentialReadahead(t *testing.T) {
	data := sampleData(6<<20, 13) // several read-ahead chunks
	xzData := xzCompress(t, data)
	for _, pure := range []bool{false, true} {
		var last int64
		calls := 0
		r, err := NewDecoder(context.Background(), bytes.NewReader(xzData), int64(len(xzData)), Options{PureGo: pure, Progress: func(n int64) { last = n; calls++ }})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := r.(*readahead); !ok {
			t.Fatalf("single-block file decoded by %T, want the read-ahead sequential decoder", r)
		}
		got, err := io.ReadAll(&oddReader{r: r})
		r.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("PureGo=%v: %d bytes, err %v", pure, len(got), err)
		}
		if calls == 0 || last != int64(len(xzData)) {
			t.Fatalf("PureGo=%v: %d progress calls, last %d, want the end at %d", pure, calls, last, len(xzData))
		}

		ctx, cancel := context.WithCancel(context.Background())
		r, err = NewDecoder(ctx, bytes.NewReader(xzData), int64(len(xzData)), Options{PureGo: pure})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
		cancel()
		_, err = io.Copy(io.Discard, r)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("PureGo=%v: after cancel: %v, want context.Canceled", pure, err)
		}
		r.Close()

		// Closing early, without reading, must not leave the decoder blocked.
		r, err = NewDecoder(context.Background(), bytes.NewReader(xzData), int64(len(xzData)), Options{PureGo: pure})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { r.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("PureGo=%v: Close did not return", pure)
		}
	}
}
