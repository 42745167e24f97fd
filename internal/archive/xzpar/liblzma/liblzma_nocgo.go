//go:build !cgo

package liblzma

import (
	"errors"
	"hash/crc64"
	"io"
)

// Available reports whether liblzma is linked in: not in this build.
func Available() bool { return false }

// Decoder is unusable in a build without cgo.
type Decoder struct{}

var errNotBuilt = errors.New("liblzma: this binary was built without cgo; the pure-Go decoder is used instead")

// NewLZMA2 fails: liblzma needs cgo.
func NewLZMA2(dictSize uint32) (*Decoder, error) { return nil, errNotBuilt }

// Reset fails: liblzma needs cgo.
func (d *Decoder) Reset(dictSize uint32) error { return errNotBuilt }

// Decode fails: liblzma needs cgo.
func (d *Decoder) Decode(in, out []byte) (nIn, nOut int, end bool, err error) {
	return 0, 0, false, errNotBuilt
}

// Close does nothing.
func (d *Decoder) Close() {}

var crc64Table = crc64.MakeTable(crc64.ECMA)

// CRC64 returns the CRC-64/ECMA-182 of b as the .xz check uses it.
func CRC64(b []byte) uint64 { return crc64.Checksum(b, crc64Table) }

// Reader is unusable in a build without cgo.
type Reader struct{}

// NewReader fails: liblzma needs cgo.
func NewReader(r io.Reader) (*Reader, error) { return nil, errNotBuilt }

// Read fails: liblzma needs cgo.
func (z *Reader) Read(p []byte) (int, error) { return 0, errNotBuilt }

// Close does nothing.
func (z *Reader) Close() error { return nil }
