package xzpar

import (
	"errors"
	"fmt"
	"io"
)

// Block locates one block of an .xz file.
type Block struct {
	Number             int   // 1-based, counted across all streams of the file
	Stream             int   // 1-based stream number
	Offset             int64 // file offset of the block header
	UnpaddedSize       int64 // header + compressed data + check
	UncompressedSize   int64
	UncompressedOffset int64 // offset of the block's first byte in the decoded output
	Check              CheckType
}

// Index is the combined index of every stream in an .xz file.
type Index struct {
	Blocks           []Block
	Streams          int
	UncompressedSize int64
}

// ReadIndex reads the stream footers and indexes of an .xz file of the given
// size, walking from the end of the file towards its start so that
// concatenated streams and stream padding are handled. It reads only the
// footers, indexes and stream headers, not block data.
func ReadIndex(r io.ReaderAt, size int64) (*Index, error) {
	if size%4 != 0 {
		return nil, &FormatError{Offset: size, What: "file end", Reason: fmt.Sprintf("size %d is not a multiple of four (truncated, or trailing data after the last stream)", size)}
	}
	type streamInfo struct {
		start   int64
		check   CheckType
		records []Record
	}
	var streams []streamInfo // last stream first
	end := size
	for end > 0 {
		// Stream padding: groups of four zero bytes after a stream.
		padEnd, err := skipPadding(r, end)
		if err != nil {
			return nil, err
		}
		end = padEnd
		if end == 0 {
			if len(streams) == 0 {
				return nil, &FormatError{Offset: 0, What: "file", Reason: "contains only zero bytes, no xz stream"}
			}
			return nil, &FormatError{Offset: 0, What: "file", Reason: "stream padding before the first stream"}
		}
		if end < streamHeaderSize+streamFooterSize+8 {
			return nil, &FormatError{Offset: 0, What: "stream", Reason: fmt.Sprintf("only %d bytes left for a stream: %v", end, ErrTruncated)}
		}
		var fb [streamFooterSize]byte
		if _, err := r.ReadAt(fb[:], end-streamFooterSize); err != nil {
			return nil, fmt.Errorf("xz: reading stream footer at offset %d: %w", end-streamFooterSize, err)
		}
		footer, err := parseStreamFooter(fb[:])
		if err != nil {
			return nil, &FormatError{Offset: end - streamFooterSize, What: "stream footer", Reason: err.Error() + " (file truncated or not an xz file?)"}
		}
		indexStart := end - streamFooterSize - footer.backwardSize
		if indexStart < streamHeaderSize {
			return nil, &FormatError{Offset: end - streamFooterSize, What: "stream footer", Reason: fmt.Sprintf("index size %d exceeds the data before the footer: index truncated", footer.backwardSize)}
		}
		ib := make([]byte, footer.backwardSize)
		if _, err := r.ReadAt(ib, indexStart); err != nil {
			return nil, fmt.Errorf("xz: reading index at offset %d: %w", indexStart, err)
		}
		records, err := ParseIndex(ib)
		if err != nil {
			return nil, &FormatError{Offset: indexStart, What: "index", Reason: err.Error()}
		}
		var blocksSize int64
		for _, rec := range records {
			blocksSize += rec.paddedSize()
			if blocksSize > indexStart {
				break
			}
		}
		start := indexStart - blocksSize - streamHeaderSize
		if start < 0 {
			return nil, &FormatError{Offset: indexStart, What: "index", Reason: fmt.Sprintf("blocks add up to %d bytes, more than the %d bytes before the index (file truncated at the start?)", blocksSize, indexStart-streamHeaderSize)}
		}
		var hb [streamHeaderSize]byte
		if _, err := r.ReadAt(hb[:], start); err != nil {
			return nil, fmt.Errorf("xz: reading stream header at offset %d: %w", start, err)
		}
		hflags, err := parseStreamHeader(hb[:])
		if err != nil {
			return nil, &FormatError{Offset: start, What: "stream header", Reason: err.Error() + " (index and block sizes do not lead to a stream header)"}
		}
		if hflags != footer.flags {
			return nil, &FormatError{Offset: start, What: "stream header", Reason: "stream flags differ from the stream footer's"}
		}
		streams = append(streams, streamInfo{start: start, check: hflags.check(), records: records})
		end = start
	}

	idx := &Index{Streams: len(streams)}
	number := 0
	for si := len(streams) - 1; si >= 0; si-- {
		s := streams[si]
		off := s.start + streamHeaderSize
		for _, rec := range s.records {
			number++
			if rec.UncompressedSize > maxVLI-idx.UncompressedSize {
				return nil, &FormatError{Offset: off, What: fmt.Sprintf("block %d", number), Reason: "uncompressed sizes overflow"}
			}
			idx.Blocks = append(idx.Blocks, Block{
				Number:             number,
				Stream:             len(streams) - si,
				Offset:             off,
				UnpaddedSize:       rec.UnpaddedSize,
				UncompressedSize:   rec.UncompressedSize,
				UncompressedOffset: idx.UncompressedSize,
				Check:              s.check,
			})
			off += rec.paddedSize()
			idx.UncompressedSize += rec.UncompressedSize
		}
	}
	return idx, nil
}

// skipPadding returns the offset just past the last non-padding byte before
// end, scanning backwards in four-byte groups.
func skipPadding(r io.ReaderAt, end int64) (int64, error) {
	buf := make([]byte, 4096)
	for end > 0 {
		n := int64(len(buf))
		if n > end {
			n = end
		}
		chunk := buf[:n]
		if _, err := r.ReadAt(chunk, end-n); err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("xz: reading at offset %d: %w", end-n, err)
		}
		for i := len(chunk); i >= 4; i -= 4 {
			g := chunk[i-4 : i]
			if g[0]|g[1]|g[2]|g[3] != 0 {
				return end - n + int64(i), nil
			}
		}
		end -= n
	}
	return 0, nil
}
