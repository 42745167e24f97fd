package httpapi

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// gunzip decodes a gzip request body. The caller bounds what is read from
// the result, so the size limit applies to the inflated bytes and a small
// body cannot expand past it: decoding stops at the limit.
func gunzip(rc io.ReadCloser) (io.ReadCloser, error) {
	zr, err := gzip.NewReader(rc)
	if err != nil {
		return nil, err
	}
	return zr, nil
}

// inflate decodes a deflate request body: the zlib format, as HTTP's
// "deflate" means (tritonclient sends zlib.compress), or a bare deflate
// stream, which some clients send under the same name.
func inflate(rc io.ReadCloser) (io.ReadCloser, error) {
	br := bufio.NewReader(rc)
	if hdr, err := br.Peek(2); err == nil && isZlibHeader(hdr) {
		return zlib.NewReader(br)
	}
	return flate.NewReader(br), nil
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
