package grpcapi

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/tracing"
)

// rawCall sends ModelInfer calls as h2load does (h2c, one pre-encoded
// header block and framed message, a new stream each), so that counting
// the process's allocations counts the server's and not a gRPC client's.
type rawCall struct {
	t       testing.TB
	fr      *http2.Framer
	hdr     []byte // the request's header block
	msg     []byte // the framed request
	stream  uint32
	body    []byte // the last call's response messages, framed
	trailer bool
}

func newRawCall(t testing.TB, addr string, r *pb.ModelInferRequest) *rawCall {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.SetReuseFrames()
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", pb.GRPCInferenceService_ModelInfer_FullMethodName},
		{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	body, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	msg := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)))
	return &rawCall{t: t, fr: fr, hdr: hdr.Bytes(), msg: append(msg, body...), stream: 1}
}

// call sends one request and reads until its trailers, acknowledging the
// server's settings and returning the response's bytes to the connection
// window as a client does.
func (c *rawCall) call() {
	id := c.stream
	c.stream += 2
	// Without dynamic-table entries the block stays valid on every stream.
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hdr, EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
	if err := c.fr.WriteData(id, true, c.msg); err != nil {
		c.t.Fatal(err)
	}
	c.body, c.trailer = c.body[:0], false
	for !c.trailer {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := c.fr.WriteSettingsAck(); err != nil {
					c.t.Fatal(err)
				}
			}
		case *http2.DataFrame:
			if n := len(f.Data()); n > 0 {
				c.body = append(c.body, f.Data()...)
				if err := c.fr.WriteWindowUpdate(0, uint32(n)); err != nil {
					c.t.Fatal(err)
				}
			}
		case *http2.HeadersFrame:
			c.trailer = f.StreamID == id && f.StreamEnded()
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			c.t.Fatalf("the server ended the call: %v", f)
		}
	}
	// A failed call ends with its status and no message.
	if len(c.body) < 5 {
		c.t.Fatalf("call on stream %d: no response message", id)
	}
}

// TestModelInferAllocations bounds the Go objects one ModelInfer call
// allocates in the server with a trace manager that traces nothing (as
// cmd/tritonserver's without --trace-config): grpc-go's transport and
// the frontend, the repository, the scheduler and the fake backend. Each
// is garbage per call that the collector then costs the same cores for:
// 81 here, most of them grpc-go's (the headers' fields, the stream and
// its contexts), two the raw client's (the headers frames it reads). A
// stats handler, which the server carried to note traced calls'
// transport times, adds 17: an event per step of each call and copies of
// its metadata, traced or not.
func TestModelInferAllocations(t *testing.T) {
	testenv.SkipAllocCountUnderRace(t)
	tracer, err := tracing.New(tracing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear})
	e := serve(t, repo, Options{Manager: repo.Manager, Tracing: tracer})
	c := newRawCall(t, e.addr, linearRequest("", rows(1, 0.5), true))
	c.call()
	var resp pb.ModelInferResponse
	if err := proto.Unmarshal(c.body[5:], &resp); err != nil || resp.GetModelName() != "linear" || len(resp.GetRawOutputContents()) != 1 {
		t.Fatalf("response %v, %v", &resp, err)
	}
	allocs := testing.AllocsPerRun(500, c.call)
	t.Logf("%.1f allocations per ModelInfer call", allocs)
	if allocs > 88 {
		t.Errorf("%.1f allocations per ModelInfer call, want at most 88", allocs)
	}
}
