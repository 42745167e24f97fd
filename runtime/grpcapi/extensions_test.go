package grpcapi

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/gzip"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

func elems(b []byte) []string {
	var out []string
	for len(b) >= 4 {
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16 | int(b[3])<<24
		out = append(out, string(b[4:4+n]))
		b = b[4+n:]
	}
	return out
}

// TestClassificationGRPC uses the extension's int64_param "classification"
// on a requested output, as tritonclient's class_count sets it.
func TestClassificationGRPC(t *testing.T) {
	e := newEnv(t, map[string]string{"classes": frontendtest.Classes})
	x := rows(3, 0.25)
	y := fake.Linear(x, 4, 3)
	req := linearRequest("c1", x, true)
	req.ModelName = "classes"
	req.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT__0",
		Parameters: map[string]*pb.InferParameter{"classification": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 1}}}}}
	resp, err := e.client.ModelInfer(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	labels := strings.Split(strings.TrimSpace(frontendtest.ClassLabels), "\n")
	var want []string
	for r := 0; r < 3; r++ {
		row := y[3*r : 3*r+3]
		idx := []int{0, 1, 2}
		sort.SliceStable(idx, func(a, b int) bool { return row[idx[a]] > row[idx[b]] })
		want = append(want, fmt.Sprintf("%f:%d:%s", row[idx[0]], idx[0], labels[idx[0]]))
	}
	o := resp.GetOutputs()[0]
	if o.GetDatatype() != "BYTES" || fmt.Sprint(o.GetShape()) != "[3 1]" || strings.Join(elems(resp.GetRawOutputContents()[0]), " ") != strings.Join(want, " ") {
		t.Errorf("classification: %v %v %q, want %q", o.GetDatatype(), o.GetShape(), elems(resp.GetRawOutputContents()[0]), want)
	}
}

// TestGzipGRPC: a gzip-compressing client is answered (compressed, with
// --grpc-infer-response-compression-level=low), and the message
// size limit applies to the inflated request, so a compressed bomb is
// refused.
func TestGzipGRPC(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear})
	e := serve(t, repo, Options{Manager: repo.Manager, Limits: Limits{MaxRecvMsgSize: 64 << 10}, ResponseCompression: "low"})
	x := rows(2, 1)
	counter := &countingCompressor{Compressor: encoding.GetCompressor(gzip.Name)}
	encoding.RegisterCompressor(counter)
	t.Cleanup(func() { encoding.RegisterCompressor(counter.Compressor) })
	// An uncompressed request, gzip accepted: the response level asks for gzip.
	if _, err := e.client.ModelInfer(context.Background(), linearRequest("z", x, true)); err != nil {
		t.Fatal(err)
	}
	if n := counter.decompressed.Load(); n != 1 {
		t.Errorf("%d gzip messages inflated, want 1 (the response)", n)
	}
	resp, err := e.client.ModelInfer(context.Background(), linearRequest("z", x, true), grpc.UseCompressor(gzip.Name))
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.decompressed.Load(); n != 3 {
		t.Errorf("%d gzip messages inflated, want 3 (and the gzip request and its response)", n)
	}
	got, want := bytesF32(resp.GetRawOutputContents()[0]), fake.Linear(x, 4, 3)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("gzip round trip: %v, want %v", got, want)
	}
	bomb := linearRequest("b", x, true)
	bomb.RawInputContents[0] = make([]byte, 8<<20) // zeros: a few KiB compressed
	_, err = e.client.ModelInfer(context.Background(), bomb, grpc.UseCompressor(gzip.Name))
	if grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Errorf("compressed 8 MiB message against a 64 KiB limit: %v", err)
	}
}

// countingCompressor counts the messages gzip inflates in this process
// (client and server share the codec registry).
type countingCompressor struct {
	encoding.Compressor
	decompressed atomic.Int64
}

func (c *countingCompressor) Decompress(r io.Reader) (io.Reader, error) {
	c.decompressed.Add(1)
	return c.Compressor.Decompress(r)
}
