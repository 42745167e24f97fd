package httpapi

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// decompressors keeps request-body decoders for reuse. A gzip, zlib or
// flate reader holds a 32 KiB window and its Huffman tables, about 40 KB
// set up anew for every compressed request before; a pooled one is Reset
// onto the next body. The pool drops readers over collections as
// sync.Pool does, so what it keeps is bounded by the requests decoding
// at once.
type decompressors struct {
	pool sync.Pool
}

// decoding is one body's decoder and the buffered reader under it, kept
// together so that Reset allocates neither. The decoders are made on
// first use; a decoding that has served both encodings keeps both.
type decoding struct {
	src  bufio.Reader
	gz   *gzip.Reader
	zl   io.ReadCloser // zlib's reader, a zlib.Resetter
	fl   io.ReadCloser // flate's reader, a flate.Resetter
	body io.Reader     // the decoder reading this body
	enc  string        // the Content-Encoding it decodes, for errors
}

// Read names the encoding in any failure but the end: "unexpected EOF"
// alone does not tell a client that its compressed stream was cut short.
func (d *decoding) Read(p []byte) (int, error) {
	n, err := d.body.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = d.fail(err)
	}
	return n, err
}

func (d *decoding) fail(err error) error {
	return backend.Errorf(backend.InvalidArg, "decoding the %s request body: %w", d.enc, err)
}

// Close does nothing: the request body under d is net/http's to close,
// and d goes back to its pool through decompressors.close.
func (d *decoding) Close() error { return nil }

// open starts decoding body as enc ("gzip" or "deflate") names it. The
// size limit is the caller's, applied to what it reads from the result,
// so a small body cannot expand past it. A deflate body is the zlib
// format, as HTTP's "deflate" means (tritonclient sends zlib.compress),
// or a bare deflate stream, which some clients send under the same name.
// The caller hands the result back to close once the body is read.
func (c *decompressors) open(enc string, body io.Reader) (*decoding, error) {
	d, _ := c.pool.Get().(*decoding)
	if d == nil {
		d = new(decoding)
	}
	d.src.Reset(body)
	d.enc = enc
	if err := d.start(enc); err != nil {
		err = d.fail(err)
		c.close(d)
		return nil, err
	}
	return d, nil
}

func (d *decoding) start(enc string) error {
	if enc == "gzip" {
		if d.gz == nil {
			zr, err := gzip.NewReader(&d.src)
			d.gz, d.body = zr, zr
			return err
		}
		d.body = d.gz
		return d.gz.Reset(&d.src)
	}
	if hdr, err := d.src.Peek(2); err == nil && isZlibHeader(hdr) {
		if d.zl == nil {
			zr, err := zlib.NewReader(&d.src)
			d.zl, d.body = zr, zr
			return err
		}
		d.body = d.zl
		return d.zl.(zlib.Resetter).Reset(&d.src, nil)
	}
	if d.fl == nil {
		d.fl = flate.NewReader(&d.src)
		d.body = d.fl
		return nil
	}
	d.body = d.fl
	return d.fl.(flate.Resetter).Reset(&d.src, nil)
}

// close returns d to the pool; nothing may read it after.
func (c *decompressors) close(d *decoding) {
	d.src.Reset(nil) // pin no request body while pooled
	d.body = nil
	c.pool.Put(d)
}

// isZlibHeader checks RFC 1950's two header bytes: method 8 (deflate) and
// a checksum making the pair a multiple of 31.
func isZlibHeader(h []byte) bool {
	return h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0
}

// responseEncoding picks the coding of an infer response from the
// request's Accept-Encoding: gzip or deflate when the client accepts one
// (gzip first, as Triton prefers it), "" for none.
func responseEncoding(r *http.Request) string {
	accept := headerValue(r.Header, "Accept-Encoding")
	if accept == "" {
		return ""
	}
	var gz, df bool
	for _, part := range strings.Split(accept, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if q, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if v, err := strconv.ParseFloat(q, 64); err == nil && v == 0 {
				continue
			}
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "gzip":
			gz = true
		case "deflate":
			df = true
		}
	}
	switch {
	case gz:
		return "gzip"
	case df:
		return "deflate"
	}
	return ""
}

// compressors keeps gzip and zlib writers for reuse: a new one sets up
// about 800 KB of deflate state, which per response was most of what the
// server allocated for clients that accept gzip (Go's net/http client
// asks for it by default) and made the collector run every few
// milliseconds under load. Reset keeps that state; the pools drop writers
// over collections as sync.Pool does.
type compressors struct {
	gzip, zlib sync.Pool
}

// resetWriter is what gzip.Writer and zlib.Writer share.
type resetWriter interface {
	io.WriteCloser
	Reset(io.Writer)
}

// writeCompressed sends the parts of a response body compressed with enc,
// setting Content-Encoding and the compressed Content-Length (headers the
// caller set, Inference-Header-Content-Length among them, keep describing
// the uncompressed body, as Triton's clients read it after inflating).
func (c *compressors) writeCompressed(w http.ResponseWriter, enc string, parts ...[]byte) {
	var buf bytes.Buffer
	pool, level := &c.zlib, zlib.BestSpeed
	if enc == "gzip" {
		pool, level = &c.gzip, gzip.BestSpeed
	}
	zw, _ := pool.Get().(resetWriter)
	switch {
	case zw != nil:
		zw.Reset(&buf)
	case enc == "gzip":
		zw, _ = gzip.NewWriterLevel(&buf, level)
	default:
		zw, _ = zlib.NewWriterLevel(&buf, level)
	}
	// Into memory: nothing to fail.
	for _, p := range parts {
		_, _ = zw.Write(p)
	}
	_ = zw.Close()
	zw.Reset(io.Discard) // pin no response body while pooled
	pool.Put(zw)
	h := w.Header()
	h.Set("Content-Encoding", enc)
	h.Add("Vary", "Accept-Encoding")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	_, _ = w.Write(buf.Bytes())
}
