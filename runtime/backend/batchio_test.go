package backend

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"
)

func shaped(name string, shape ...int64) *Request {
	t := Tensor{Name: name, DataType: FP32, Shape: shape}
	t.Data = make([]byte, 4*t.NumElements())
	return &Request{Inputs: []Tensor{t}}
}

func int32s(b []byte) []int64 {
	var v []int64
	for i := 0; i+4 <= len(b); i += 4 {
		v = append(v, int64(int32(binary.LittleEndian.Uint32(b[i:]))))
	}
	return v
}

// The per-request values of each kind, as Triton's model_config.proto
// describes them, for the ragged-batching guide's three requests and the
// proto's item-shape example.
func TestBatchInputPieces(t *testing.T) {
	ragged := []*Request{shaped("IN", 1, 3), shaped("IN", 1, 4), shaped("IN", 1, 5)}
	items := []*Request{shaped("IN", 2, 3, 1), shaped("IN", 1, 2, 2)}
	type piece struct {
		shape []int64
		vals  []int64
	}
	cases := []struct {
		kind BatchInputKind
		reqs []*Request
		want []piece
	}{
		{BatchElementCount, ragged, []piece{{[]int64{1}, []int64{3}}, {[]int64{1}, []int64{4}}, {[]int64{1}, []int64{5}}}},
		{BatchAccumulatedElementCount, ragged, []piece{{[]int64{1}, []int64{3}}, {[]int64{1}, []int64{7}}, {[]int64{1}, []int64{12}}}},
		{BatchAccumulatedElementCountWithZero, ragged, []piece{{[]int64{2}, []int64{0, 3}}, {[]int64{1}, []int64{7}}, {[]int64{1}, []int64{12}}}},
		{BatchMaxElementCountAsShape, ragged, []piece{{[]int64{5}, []int64{0, 0, 0, 0, 0}}, {[]int64{0}, nil}, {[]int64{0}, nil}}},
		{BatchItemShape, items, []piece{{[]int64{2, 2}, []int64{3, 1, 3, 1}}, {[]int64{1, 2}, []int64{2, 2}}}},
		{BatchItemShapeFlatten, items, []piece{{[]int64{4}, []int64{3, 1, 3, 1}}, {[]int64{2}, []int64{2, 2}}}},
	}
	for _, c := range cases {
		b := BatchInput{Kind: c.kind, Targets: []string{"B"}, DataType: Int32, Source: "IN"}
		got, err := b.Pieces(c.reqs, true)
		if err != nil {
			t.Fatalf("kind %d: %v", c.kind, err)
		}
		if len(got) != len(c.want) {
			t.Fatalf("kind %d: %d pieces, want %d", c.kind, len(got), len(c.want))
		}
		for i, w := range c.want {
			if !slices.Equal(got[i].Shape, w.shape) || !slices.Equal(int32s(got[i].Data), w.vals) {
				t.Errorf("kind %d request %d: shape %v values %v, want %v %v", c.kind, i, got[i].Shape, int32s(got[i].Data), w.shape, w.vals)
			}
		}
	}

	b := BatchInput{Kind: BatchAccumulatedElementCount, Targets: []string{"B"}, DataType: FP32, Source: "IN"}
	got, err := b.Pieces(ragged, true)
	if err != nil {
		t.Fatal(err)
	}
	if v := math.Float32frombits(binary.LittleEndian.Uint32(got[2].Data)); v != 12 {
		t.Errorf("FP32 accumulated count of the third request = %v, want 12", v)
	}
	if _, err := b.Pieces([]*Request{shaped("OTHER", 1, 2)}, true); err == nil {
		t.Error("a request without the source input gave pieces")
	}
}

func TestBatchOutputScatter(t *testing.T) {
	reqs := []*Request{shaped("IN", 1, 3), shaped("IN", 2, 2)}
	out := Tensor{Name: "OUT", DataType: FP32, Shape: []int64{7}, Data: make([]byte, 4*7)}
	for i := range 7 {
		binary.LittleEndian.PutUint32(out.Data[4*i:], uint32(i))
	}
	b := BatchOutput{Targets: []string{"OUT"}, Source: "IN"}
	parts, err := b.Scatter(out, []int64{-1}, reqs, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(parts[0].Shape, []int64{1, 3}) || !slices.Equal(parts[1].Shape, []int64{2, 2}) {
		t.Fatalf("shapes %v %v, want [1 3] [2 2]", parts[0].Shape, parts[1].Shape)
	}
	if first := binary.LittleEndian.Uint32(parts[1].Data); first != 3 || len(parts[1].Data) != 16 {
		t.Fatalf("second request's part starts at %d with %d bytes, want 3 and 16", first, len(parts[1].Data))
	}
	short := out
	short.Data = out.Data[:4*6]
	if _, err := b.Scatter(short, []int64{-1}, reqs, true); err == nil {
		t.Error("an output shorter than the requests' shapes was scattered")
	}
}
