// Package xzpar decodes .xz files with several blocks in parallel.
//
// The .xz container keeps an index at the end of every stream that lists each
// block's compressed (unpadded) and uncompressed size. With random access to
// the file (io.ReaderAt) the block boundaries are known before any data is
// decoded, so independent blocks can be handed to a pool of LZMA2 decoders
// (github.com/ulikunitz/xz/lzma) and their output streamed back in file order.
// This package owns the container parsing (stream header and footer, block
// headers, index), the parallel scheduler with a bounded window of decoded
// blocks, and the fallback to the sequential ulikunitz reader for files the
// parallel path cannot handle (a single block, oversized blocks). Filter
// chains other than plain LZMA2 (BCJ, delta) are refused with a clear error:
// neither path decodes them.
//
// The container format follows the public .xz file format specification
// (version 1.x): all multi-byte fixed-size fields are little endian, variable
// sized integers use the 7-bits-per-byte "multibyte integer" encoding.
package xzpar

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

const (
	streamHeaderSize = 12
	streamFooterSize = 12
	// maxBlockHeaderSize is the largest size the one-byte size field can
	// express: (0xFF+1)*4.
	maxBlockHeaderSize = 1024
	// maxMultibyteLen is the longest encoding of a multibyte integer (63 bits).
	maxMultibyteLen = 9
	// maxVLI is the largest value a multibyte integer may hold.
	maxVLI = 1<<63 - 1

	filterLZMA2 = 0x21
)

var (
	headerMagic = []byte{0xFD, '7', 'z', 'X', 'Z', 0x00}
	footerMagic = []byte{'Y', 'Z'}
)

// CheckType is the integrity check a stream stores after each block.
type CheckType uint8

// Check types defined by the format that this package can verify.
const (
	CheckNone   CheckType = 0x00
	CheckCRC32  CheckType = 0x01
	CheckCRC64  CheckType = 0x04
	CheckSHA256 CheckType = 0x0A
)

func (c CheckType) String() string {
	switch c {
	case CheckNone:
		return "None"
	case CheckCRC32:
		return "CRC32"
	case CheckCRC64:
		return "CRC64"
	case CheckSHA256:
		return "SHA-256"
	}
	return fmt.Sprintf("check-0x%02x", uint8(c))
}

// Size is the number of bytes the check occupies after a block. The format
// reserves IDs 0x00-0x0F and fixes their sizes even for IDs that have no
// algorithm assigned, so the size is known for every valid ID.
func (c CheckType) Size() int {
	if c == 0 {
		return 0
	}
	return 4 << ((c - 1) / 3)
}

// supported reports whether this package can verify the check.
func (c CheckType) supported() bool {
	switch c {
	case CheckNone, CheckCRC32, CheckCRC64, CheckSHA256:
		return true
	}
	return false
}

// FormatError describes malformed container data at a file offset.
type FormatError struct {
	Offset int64  // byte offset in the file where the bad structure starts
	What   string // the structure: "stream header", "index", "block 7 header", ...
	Reason string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("xz: %s at offset %d: %s", e.What, e.Offset, e.Reason)
}

// ErrTruncated reports a file that ends inside a structure; it is wrapped in a
// *FormatError that names the structure.
var ErrTruncated = errors.New("file truncated")

// readMultibyte decodes one multibyte integer from b and returns it with the
// number of bytes consumed. The spec forbids encodings longer than needed
// (a trailing 0x00 byte) and values above 2^63-1.
func readMultibyte(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < maxMultibyteLen; i++ {
		if i >= len(b) {
			return 0, 0, ErrTruncated
		}
		c := b[i]
		v |= uint64(c&0x7F) << (7 * i)
		if c&0x80 == 0 {
			if c == 0 && i > 0 {
				return 0, 0, errors.New("multibyte integer has a redundant trailing zero byte")
			}
			if v > maxVLI {
				return 0, 0, errors.New("multibyte integer exceeds 2^63-1")
			}
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("multibyte integer longer than 9 bytes")
}

// streamFlags is the two-byte flags field shared by stream header and footer.
type streamFlags [2]byte

func (f streamFlags) check() CheckType { return CheckType(f[1] & 0x0F) }

func (f streamFlags) validate() error {
	if f[0] != 0 || f[1]&0xF0 != 0 {
		return fmt.Errorf("reserved stream flag bits set (%02x %02x)", f[0], f[1])
	}
	return nil
}

// parseStreamHeader validates a 12-byte stream header and returns its flags.
func parseStreamHeader(b []byte) (streamFlags, error) {
	var f streamFlags
	if len(b) < streamHeaderSize {
		return f, ErrTruncated
	}
	if !bytes.Equal(b[:6], headerMagic) {
		return f, errors.New("bad magic bytes, not an xz stream")
	}
	copy(f[:], b[6:8])
	if crc32.ChecksumIEEE(b[6:8]) != binary.LittleEndian.Uint32(b[8:12]) {
		return f, errors.New("stream header CRC32 mismatch")
	}
	return f, f.validate()
}

// streamFooter is the decoded 12-byte stream footer.
type streamFooter struct {
	flags        streamFlags
	backwardSize int64 // size of the index in bytes, CRC32 included
}

func parseStreamFooter(b []byte) (streamFooter, error) {
	var sf streamFooter
	if len(b) < streamFooterSize {
		return sf, ErrTruncated
	}
	if !bytes.Equal(b[10:12], footerMagic) {
		return sf, errors.New("bad footer magic bytes")
	}
	if crc32.ChecksumIEEE(b[4:10]) != binary.LittleEndian.Uint32(b[0:4]) {
		return sf, errors.New("stream footer CRC32 mismatch")
	}
	sf.backwardSize = (int64(binary.LittleEndian.Uint32(b[4:8])) + 1) * 4
	copy(sf.flags[:], b[8:10])
	return sf, sf.flags.validate()
}

// Record is one index entry: the sizes of one block.
type Record struct {
	// UnpaddedSize is block header + compressed data + check, without the
	// block padding that aligns the next block to four bytes.
	UnpaddedSize int64
	// UncompressedSize is the size of the block's decoded data.
	UncompressedSize int64
}

// paddedSize is the number of bytes the block occupies in the file.
func (r Record) paddedSize() int64 { return (r.UnpaddedSize + 3) &^ 3 }

// ParseIndex decodes a complete index field (index indicator through CRC32)
// and returns its records. It is the parser the reader uses on the bytes
// named by a stream footer's backward size.
func ParseIndex(b []byte) ([]Record, error) {
	if len(b) < 8 || len(b)%4 != 0 {
		return nil, fmt.Errorf("index size %d is not a multiple of four of at least 8 bytes", len(b))
	}
	if b[0] != 0x00 {
		return nil, fmt.Errorf("index indicator is 0x%02x, want 0x00", b[0])
	}
	body := b[:len(b)-4]
	if crc32.ChecksumIEEE(body) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, errors.New("index CRC32 mismatch")
	}
	pos := 1
	count, n, err := readMultibyte(body[pos:])
	if err != nil {
		return nil, fmt.Errorf("index record count: %w", err)
	}
	pos += n
	// Each record takes at least two bytes; a larger count cannot fit and
	// must not drive the allocation below.
	if count > uint64(len(body)-pos)/2 {
		return nil, fmt.Errorf("index claims %d records but has room for at most %d", count, (len(body)-pos)/2)
	}
	recs := make([]Record, 0, count)
	for i := uint64(0); i < count; i++ {
		unpadded, n, err := readMultibyte(body[pos:])
		if err != nil {
			return nil, fmt.Errorf("index record %d unpadded size: %w", i, err)
		}
		pos += n
		uncomp, n, err := readMultibyte(body[pos:])
		if err != nil {
			return nil, fmt.Errorf("index record %d uncompressed size: %w", i, err)
		}
		pos += n
		// The spec's minimum unpadded size is 5 (the smallest header
		// plus one byte of data); the maximum leaves room for padding.
		if unpadded < 5 || unpadded > maxVLI-3 {
			return nil, fmt.Errorf("index record %d: unpadded size %d out of range", i, unpadded)
		}
		recs = append(recs, Record{UnpaddedSize: int64(unpadded), UncompressedSize: int64(uncomp)})
	}
	for ; pos%4 != 0; pos++ {
		if pos >= len(body) {
			return nil, errors.New("index padding truncated")
		}
		if body[pos] != 0 {
			return nil, errors.New("index padding is not zero")
		}
	}
	if pos != len(body) {
		return nil, fmt.Errorf("index has %d unexpected trailing bytes", len(body)-pos)
	}
	return recs, nil
}

// blockHeader is what this package needs from a block header.
type blockHeader struct {
	size             int   // bytes, including the CRC32
	compressedSize   int64 // -1 if not stored
	uncompressedSize int64 // -1 if not stored
	filters          []filter
}

type filter struct {
	id    uint64
	props []byte
}

// parseBlockHeader decodes a block header. b must start at the header size
// byte and may extend past the header.
func parseBlockHeader(b []byte) (blockHeader, error) {
	h := blockHeader{compressedSize: -1, uncompressedSize: -1}
	if len(b) < 1 {
		return h, ErrTruncated
	}
	if b[0] == 0 {
		return h, errors.New("found an index indicator where a block header was expected")
	}
	h.size = (int(b[0]) + 1) * 4
	if len(b) < h.size {
		return h, ErrTruncated
	}
	hb := b[:h.size]
	if crc32.ChecksumIEEE(hb[:h.size-4]) != binary.LittleEndian.Uint32(hb[h.size-4:]) {
		return h, errors.New("block header CRC32 mismatch")
	}
	flags := hb[1]
	if flags&0x3C != 0 {
		return h, fmt.Errorf("reserved block flag bits set (0x%02x)", flags)
	}
	nfilters := int(flags&0x03) + 1
	body := hb[:h.size-4]
	pos := 2
	if flags&0x40 != 0 {
		v, n, err := readMultibyte(body[pos:])
		if err != nil {
			return h, fmt.Errorf("compressed size: %w", err)
		}
		if v == 0 {
			return h, errors.New("compressed size is zero")
		}
		h.compressedSize = int64(v)
		pos += n
	}
	if flags&0x80 != 0 {
		v, n, err := readMultibyte(body[pos:])
		if err != nil {
			return h, fmt.Errorf("uncompressed size: %w", err)
		}
		h.uncompressedSize = int64(v)
		pos += n
	}
	for i := 0; i < nfilters; i++ {
		id, n, err := readMultibyte(body[pos:])
		if err != nil {
			return h, fmt.Errorf("filter %d id: %w", i, err)
		}
		pos += n
		psize, n, err := readMultibyte(body[pos:])
		if err != nil {
			return h, fmt.Errorf("filter %d properties size: %w", i, err)
		}
		pos += n
		if psize > uint64(len(body)-pos) {
			return h, fmt.Errorf("filter %d properties overrun the block header", i)
		}
		h.filters = append(h.filters, filter{id: id, props: body[pos : pos+int(psize)]})
		pos += int(psize)
	}
	for ; pos < len(body); pos++ {
		if body[pos] != 0 {
			return h, errors.New("block header padding is not zero")
		}
	}
	return h, nil
}

// lzma2DictSize decodes the one-byte LZMA2 filter property.
func lzma2DictSize(props []byte) (int64, error) {
	if len(props) != 1 {
		return 0, fmt.Errorf("LZMA2 filter has %d property bytes, want 1", len(props))
	}
	b := props[0]
	if b&0xC0 != 0 || b > 40 {
		return 0, fmt.Errorf("LZMA2 dictionary size byte 0x%02x out of range", b)
	}
	if b == 40 {
		return 0xFFFFFFFF, nil
	}
	return int64(2|(b&1)) << (b/2 + 11), nil
}

// filterName names well-known filter IDs for error messages.
func filterName(id uint64) string {
	switch id {
	case 0x03:
		return "Delta"
	case 0x04:
		return "BCJ x86"
	case 0x05:
		return "BCJ PowerPC"
	case 0x06:
		return "BCJ IA-64"
	case 0x07:
		return "BCJ ARM"
	case 0x08:
		return "BCJ ARM-Thumb"
	case 0x09:
		return "BCJ SPARC"
	case 0x0A:
		return "BCJ ARM64"
	case 0x0B:
		return "BCJ RISC-V"
	case filterLZMA2:
		return "LZMA2"
	}
	return fmt.Sprintf("filter 0x%x", id)
}
