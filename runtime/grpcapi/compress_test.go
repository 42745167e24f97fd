package grpcapi

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
)

// TestDeflateGRPC: a grpc-go client compressing with "deflate" (what
// tritonclient's compression_algorithm="deflate" selects) is read and
// answered deflated, on ModelInfer and ModelStreamInfer; every message on
// the wire in either direction is zlib's format, as gRPC's C core writes
// it; and the size limit applies inflated, so a small bomb is refused.
func TestDeflateGRPC(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear})
	e := serve(t, repo, Options{Manager: repo.Manager, Limits: Limits{MaxRecvMsgSize: 64 << 10}})
	codec := encoding.GetCompressor(deflateName)
	if codec == nil {
		t.Fatal("no deflate compressor registered")
	}
	w := &wireCheck{Compressor: codec, t: t}
	encoding.RegisterCompressor(w)
	t.Cleanup(func() { encoding.RegisterCompressor(codec) })

	x := rows(2, 1)
	want := fmt.Sprint(fake.Linear(x, 4, 3))
	resp, err := e.client.ModelInfer(context.Background(), linearRequest("d", x, true), grpc.UseCompressor(deflateName))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(bytesF32(resp.GetRawOutputContents()[0])); got != want {
		t.Errorf("deflate round trip: %v, want %v", got, want)
	}
	// The client deflated the request and the server its response; each
	// side inflated the other's.
	if c, d := w.compressed.Load(), w.inflated.Load(); c != 2 || d != 2 {
		t.Errorf("ModelInfer: %d messages deflated, %d inflated, want 2 and 2", c, d)
	}

	stream, err := e.client.ModelStreamInfer(context.Background(), grpc.UseCompressor(deflateName))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(linearRequest("s", x, true)); err != nil {
		t.Fatal(err)
	}
	sr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if msg := sr.GetErrorMessage(); msg != "" {
		t.Fatal(msg)
	}
	if got := fmt.Sprint(bytesF32(sr.GetInferResponse().GetRawOutputContents()[0])); got != want {
		t.Errorf("deflate stream: %v, want %v", got, want)
	}
	_ = stream.CloseSend()
	if c, d := w.compressed.Load(), w.inflated.Load(); c != 4 || d != 4 {
		t.Errorf("after the stream: %d messages deflated, %d inflated, want 4 and 4", c, d)
	}

	bomb := linearRequest("b", x, true)
	bomb.RawInputContents[0] = make([]byte, 8<<20) // zeros: a few KiB deflated
	_, err = e.client.ModelInfer(context.Background(), bomb, grpc.UseCompressor(deflateName))
	if grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Errorf("deflated 8 MiB message against a 64 KiB limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	if n := w.inflatedBytes.Load(); n > 1<<20 {
		t.Errorf("%d bytes inflated in all: the bomb was inflated past the limit", n)
	}
}

// TestDeflateCodecFormat: the codec reads zlib streams whatever their
// level (a C client's default header is 78 9c, best compression 78 da) and
// refuses a bare deflate stream, which gRPC's C core would not accept
// under this name either.
func TestDeflateCodecFormat(t *testing.T) {
	c := &deflateCodec{}
	msg := bytes.Repeat([]byte("tritonbuild "), 100)
	for _, level := range []int{zlib.DefaultCompression, zlib.BestCompression, zlib.NoCompression} {
		var b bytes.Buffer
		zw, _ := zlib.NewWriterLevel(&b, level)
		_, _ = zw.Write(msg)
		_ = zw.Close()
		r, err := c.Decompress(&b)
		if err != nil {
			t.Fatalf("level %d: %v", level, err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, msg) {
			t.Errorf("level %d: %q, %v", level, got, err)
		}
		_ = r.(io.Closer).Close() // back to the pool: the next round reuses it
	}
	var b bytes.Buffer
	fw, _ := flate.NewWriter(&b, flate.DefaultCompression)
	_, _ = fw.Write(msg)
	_ = fw.Close()
	if r, err := c.Decompress(&b); err == nil {
		if _, err := io.ReadAll(r); err == nil {
			t.Error("a bare deflate stream was accepted as gRPC deflate")
		}
	}
}

// wireCheck wraps the deflate codec of this process (client and server
// share grpc-go's registry): it counts the messages each way and checks
// that what is inflated starts with zlib's header.
type wireCheck struct {
	encoding.Compressor
	t                    *testing.T
	compressed, inflated atomic.Int64
	inflatedBytes        atomic.Int64
}

func (w *wireCheck) Compress(dst io.Writer) (io.WriteCloser, error) {
	w.compressed.Add(1)
	return w.Compressor.Compress(dst)
}

func (w *wireCheck) Decompress(src io.Reader) (io.Reader, error) {
	w.inflated.Add(1)
	var head [2]byte
	if _, err := io.ReadFull(src, head[:]); err != nil {
		return nil, err
	}
	if head[0]&0x0f != 8 || (uint16(head[0])<<8|uint16(head[1]))%31 != 0 {
		w.t.Errorf("message on the wire starts % x: not zlib's header", head)
	}
	r, err := w.Compressor.Decompress(io.MultiReader(bytes.NewReader(head[:]), src))
	if err != nil {
		return nil, err
	}
	return &countingReader{r: r, n: &w.inflatedBytes}, nil
}

// countingReader counts what the caller reads and passes Close on, so
// the codec's pool still gets its reader back.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingReader) Close() error {
	if cl, ok := c.r.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}
