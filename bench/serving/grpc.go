package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tritonbuild/tritonbuild/runtime/grpcapi"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/tracing"
)

// grpcBench is tritonserver's GRPC frontend over the same manager as the
// HTTP cases, with clients that send the payload as raw_input_contents (the
// form Triton's own clients use).
type grpcBench struct {
	srv     *grpc.Server
	conns   []*grpc.ClientConn
	clients []pb.GRPCInferenceServiceClient
	reqs    map[string]*pb.ModelInferRequest // by model name
	addr    string
}

// grpcConns is the number of client connections the load is spread over:
// one HTTP/2 connection per client would not be how GRPC clients work, and
// a single one serializes every frame of 64 clients through one writer.
const grpcConns = 4

// startGRPC serves the frontend as cmd/tritonserver does: default Limits
// (their listener's connection bound too) and the trace manager.
func startGRPC(mgr *repository.Manager, tracer *tracing.Manager, x []float32) (*grpcBench, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var lim grpcapi.Limits
	g := grpcapi.New(grpcapi.Options{Manager: mgr, Limits: lim, Tracing: tracer}).NewGRPCServer()
	go func() { _ = g.Serve(lim.Listener(ln)) }()
	b := &grpcBench{srv: g, addr: ln.Addr().String()}
	for i := 0; i < grpcConns; i++ {
		c, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.close()
			return nil, err
		}
		b.conns = append(b.conns, c)
		b.clients = append(b.clients, pb.NewGRPCInferenceServiceClient(c))
	}
	raw := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	b.reqs = map[string]*pb.ModelInferRequest{}
	for _, m := range []string{plainModel, batchedModel} {
		b.reqs[m] = &pb.ModelInferRequest{
			ModelName:        m,
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, int64(len(x))}}},
			RawInputContents: [][]byte{raw},
		}
	}
	return b, nil
}

func (b *grpcBench) close() {
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.srv.Stop()
}

// infer sends the payload as client c (spread over the connections) and
// checks the answer.
func (b *grpcBench) infer(model string, c int) error {
	resp, err := b.clients[c%len(b.clients)].ModelInfer(context.Background(), b.reqs[model])
	if err != nil {
		return fmt.Errorf("triton-grpc: %w", err)
	}
	if len(resp.RawOutputContents) != 1 || len(resp.RawOutputContents[0]) != 4*outputs {
		return fmt.Errorf("triton-grpc: unexpected response %v", resp)
	}
	return nil
}
