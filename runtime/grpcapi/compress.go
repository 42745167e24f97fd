package grpcapi

import (
	"compress/zlib"
	"io"
	"sync"

	"google.golang.org/grpc/encoding"
)

// deflateName is gRPC's name for the deflate message encoding, which
// tritonclient's compression_algorithm="deflate" sends.
const deflateName = "deflate"

// deflateCodec is gRPC's "deflate" message encoding. gRPC's C core, under
// the Python and C++ clients, means zlib's format by it (RFC 1950: deflate
// data behind a two-byte header, with an Adler-32 trailer), as HTTP does,
// so this codec reads and writes that rather than a bare deflate stream.
// grpc-go registers only gzip. Bounds are grpc-go's: it reads at most the
// message size limit plus one byte from the reader Decompress returns, so
// a small compressed message cannot inflate past the limit.
type deflateCodec struct {
	writers sync.Pool // *deflateWriter
	readers sync.Pool // *deflateReader
}

// The codec joins grpc-go's process-wide registry at init, as grpc-go's
// own gzip does: the registry is a plain map that every server reads on
// each compressed message, and grpc-go allows writing it only during
// initialization, so registering from New could race with a server
// already serving in the same process.
func init() { encoding.RegisterCompressor(&deflateCodec{}) }

func (c *deflateCodec) Name() string { return deflateName }

type deflateWriter struct {
	*zlib.Writer
	pool *sync.Pool
}

// Close ends the stream and returns the writer for reuse: grpc-go closes
// it once per message.
func (w *deflateWriter) Close() error {
	defer w.pool.Put(w)
	return w.Writer.Close()
}

func (c *deflateCodec) Compress(w io.Writer) (io.WriteCloser, error) {
	if z, ok := c.writers.Get().(*deflateWriter); ok {
		z.Reset(w)
		return z, nil
	}
	return &deflateWriter{Writer: zlib.NewWriter(w), pool: &c.writers}, nil
}

type deflateReader struct {
	io.ReadCloser // a zlib reader, also a zlib.Resetter
	pool          *sync.Pool
}

// Close returns the reader for reuse; grpc-go closes what Decompress
// returned once it has read the message.
func (r *deflateReader) Close() error {
	defer r.pool.Put(r)
	return r.ReadCloser.Close()
}

func (c *deflateCodec) Decompress(r io.Reader) (io.Reader, error) {
	if z, ok := c.readers.Get().(*deflateReader); ok {
		if err := z.ReadCloser.(zlib.Resetter).Reset(r, nil); err != nil {
			c.readers.Put(z)
			return nil, err
		}
		return z, nil
	}
	zr, err := zlib.NewReader(r)
	if err != nil {
		return nil, err
	}
	return &deflateReader{ReadCloser: zr, pool: &c.readers}, nil
}
