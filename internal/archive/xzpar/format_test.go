package xzpar

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

func TestReadMultibyte(t *testing.T) {
	good := []struct {
		in   []byte
		want uint64
		n    int
	}{
		{[]byte{0x00}, 0, 1},
		{[]byte{0x7F, 0xFF}, 127, 1},
		{[]byte{0x80, 0x01}, 128, 2},
		{[]byte{0xFF, 0xFF, 0x03}, 1<<16 - 1, 3},
		{[]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F}, 1<<63 - 1, 9},
	}
	for _, c := range good {
		v, n, err := readMultibyte(c.in)
		if err != nil || v != c.want || n != c.n {
			t.Errorf("readMultibyte(% x) = %d, %d, %v; want %d, %d", c.in, v, n, err, c.want, c.n)
		}
	}
	bad := [][]byte{
		{},
		{0x80},       // truncated
		{0x80, 0x00}, // redundant zero byte
		{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}, // 10 bytes
	}
	for _, in := range bad {
		if _, _, err := readMultibyte(in); err == nil {
			t.Errorf("readMultibyte(% x) accepted", in)
		}
	}
}

// buildIndex encodes records as an index field, for tests and fuzz seeds.
func buildIndex(recs []Record) []byte {
	b := []byte{0x00}
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for _, r := range recs {
		b = binary.AppendUvarint(b, uint64(r.UnpaddedSize))
		b = binary.AppendUvarint(b, uint64(r.UncompressedSize))
	}
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

func TestParseIndex(t *testing.T) {
	recs := []Record{{UnpaddedSize: 1832600 - 3, UncompressedSize: 12 << 20}, {UnpaddedSize: 97, UncompressedSize: 5000}}
	got, err := ParseIndex(buildIndex(recs))
	if err != nil || len(got) != 2 || got[0] != recs[0] || got[1] != recs[1] {
		t.Fatalf("ParseIndex = %+v, %v", got, err)
	}
	empty, err := ParseIndex(buildIndex(nil))
	if err != nil || len(empty) != 0 {
		t.Fatalf("empty index: %+v, %v", empty, err)
	}

	good := buildIndex(recs)
	badCRC := bytes.Clone(good)
	badCRC[len(badCRC)-1] ^= 1
	badIndicator := bytes.Clone(good)
	badIndicator[0] = 1
	tooMany := []byte{0x00, 0x7F} // claims 127 records in a tiny index
	tooMany = append(tooMany, 0, 0)
	tooMany = binary.LittleEndian.AppendUint32(tooMany, crc32.ChecksumIEEE(tooMany))
	tiny := buildIndex([]Record{{UnpaddedSize: 4, UncompressedSize: 1}})
	for name, in := range map[string][]byte{
		"crc": badCRC, "indicator": badIndicator, "count": tooMany, "unpadded<5": tiny,
		"short": good[:4], "unaligned": good[:len(good)-1],
	} {
		if _, err := ParseIndex(in); err == nil {
			t.Errorf("%s: ParseIndex accepted % x", name, in)
		}
	}
}

func TestLZMA2DictSize(t *testing.T) {
	for b, want := range map[byte]int64{0: 4 << 10, 1: 6 << 10, 18: 2 << 20, 19: 3 << 20, 22: 8 << 20, 40: 0xFFFFFFFF} {
		if got, err := lzma2DictSize([]byte{b}); err != nil || got != want {
			t.Errorf("lzma2DictSize(%d) = %d, %v; want %d", b, got, err, want)
		}
	}
	if _, err := lzma2DictSize([]byte{41}); err == nil {
		t.Error("dictionary byte 41 accepted")
	}
}

// FuzzParseIndex feeds arbitrary bytes to the index parser: it must never
// panic or allocate without bound, and whatever it accepts must re-encode to
// the same bytes.
func FuzzParseIndex(f *testing.F) {
	f.Add(buildIndex(nil))
	f.Add(buildIndex([]Record{{UnpaddedSize: 100, UncompressedSize: 1000}}))
	f.Add(buildIndex([]Record{{UnpaddedSize: 1 << 40, UncompressedSize: 1<<63 - 1}, {UnpaddedSize: 5, UncompressedSize: 0}}))
	f.Add([]byte{0x00, 0xFF, 0xFF, 0xFF, 0x7F, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := ParseIndex(b)
		if err != nil {
			return
		}
		if again := buildIndex(recs); !bytes.Equal(again, b) {
			t.Fatalf("accepted index % x re-encodes as % x", b, again)
		}
	})
}

// FuzzReadIndex runs the whole trailer walk (footer, index, stream header,
// padding) over arbitrary files.
func FuzzReadIndex(f *testing.F) {
	// A minimal valid stream with no blocks: header, index, footer.
	hdr := append(bytes.Clone(headerMagic), 0x00, 0x01)
	hdr = binary.LittleEndian.AppendUint32(hdr, crc32.ChecksumIEEE([]byte{0x00, 0x01}))
	idx := buildIndex(nil)
	ft := binary.LittleEndian.AppendUint32(nil, uint32(len(idx)/4-1))
	ft = append(ft, 0x00, 0x01)
	footer := binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE(ft))
	footer = append(append(footer, ft...), footerMagic...)
	file := append(append(hdr, idx...), footer...)
	f.Add(file)
	f.Add(append(bytes.Clone(file), file...))
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, err := ReadIndex(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for _, blk := range idx.Blocks {
			if blk.Offset < 0 || blk.Offset+blk.UnpaddedSize > int64(len(b)) {
				t.Fatalf("block %+v lies outside the %d-byte file", blk, len(b))
			}
		}
	})
}
