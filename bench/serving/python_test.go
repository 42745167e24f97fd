package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/torch"
)

// seedRepo is the report's batched repository, from this package's
// directory (go test runs there).
const seedRepo = "../../runtime/python/testdata/seed-model-repository-batched"

// TestConcurrencyFor: -backend python defaults to the python goal's
// levels, and a list given on the command line always wins; the other
// backends keep the flag's value.
func TestConcurrencyFor(t *testing.T) {
	for _, c := range []struct {
		backend, given string
		set            bool
		want           string
	}{
		{"python", "1,64", false, "1,16"},
		{"python", "1,64", true, "1,64"},
		{"python", "4", true, "4"},
		{"pytorch", "1,64", false, "1,64"},
		{"fake", "2", true, "2"},
	} {
		if got := concurrencyFor(c.backend, c.given, c.set); got != c.want {
			t.Errorf("concurrencyFor(%q, %q, %v) = %q, want %q", c.backend, c.given, c.set, got, c.want)
		}
	}
}

// TestInRoundOrder: odd rounds run the cases in reverse, even ones as
// given, and the caller's slice is never reordered.
func TestInRoundOrder(t *testing.T) {
	cases := []string{"a", "b", "c"}
	for r, want := range [][]string{{"a", "b", "c"}, {"c", "b", "a"}, {"a", "b", "c"}, {"c", "b", "a"}} {
		if got := inRoundOrder(cases, r); !slices.Equal(got, want) {
			t.Errorf("round %d: %v, want %v", r, got, want)
		}
	}
	if !slices.Equal(cases, []string{"a", "b", "c"}) {
		t.Errorf("the cases were reordered: %v", cases)
	}
}

// TestPairedRange: the median and the spread are over pairs taken at the
// same time (index by index), never over each side's own sorted figures,
// and only as many pairs as both sides have count.
func TestPairedRange(t *testing.T) {
	r := func(tput float64, p50us int) result {
		return result{throughput: tput, p50: time.Duration(p50us) * time.Microsecond}
	}
	python := []result{r(100, 900), r(300, 500), r(150, 700), r(999, 1)}
	pytorch := []result{r(200, 400), r(200, 450), r(100, 600)}
	med, lo, hi := pairedRange(python, pytorch, throughputRatio)
	if med != 1.5 || lo != 0.5 || hi != 1.5 {
		t.Errorf("throughput ratio: median %v, range %v-%v; want 1.5, 0.5-1.5", med, lo, hi)
	}
	med, lo, hi = pairedRange(python, pytorch, p50Over)
	if med != 100 || lo != 50 || hi != 500 {
		t.Errorf("p50 over: median %v, range %v to %v; want 100, 50 to 500", med, lo, hi)
	}
	if med, _, _ := pairedRange(nil, pytorch, p50Over); !math.IsNaN(med) {
		t.Errorf("no pairs gave %v, want NaN", med)
	}
}

// TestTotalCPURatio: the python side's CPU per request counts its stubs.
func TestTotalCPURatio(t *testing.T) {
	py := result{cpu: 100 * time.Microsecond, stubCPU: 200 * time.Microsecond}
	pt := result{cpu: 150 * time.Microsecond}
	if got := totalCPURatio(py, pt); got != 2 {
		t.Errorf("got %v, want 2", got)
	}
}

// TestInstanceCount sums the groups, a group without a count being one
// instance, as Triton reads it.
func TestInstanceCount(t *testing.T) {
	mc := &modelconfig.ModelConfig{InstanceGroup: []*modelconfig.ModelInstanceGroup{{Count: 4}, {}}}
	if got := instanceCount(mc); got != 5 {
		t.Errorf("got %d, want 5", got)
	}
}

// TestPeerConfig: the pytorch peer keeps everything the comparison
// depends on (tensors, max_batch_size, dynamic batching, instances) from
// the seed, runs on the pytorch backend with one intra-op thread, and
// leaves the seed's config as it was.
func TestPeerConfig(t *testing.T) {
	seed, err := modelconfig.LoadFile(filepath.Join(seedRepo, pythonModel, "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	orig := proto.Clone(seed)
	b, err := peerConfig(seed)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := modelconfig.Parse("peer", b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if peer.GetName() != pythonPeer || peer.GetPlatform() != "pytorch_libtorch" || peer.GetBackend() != "" {
		t.Errorf("peer is %q on platform %q, backend %q", peer.GetName(), peer.GetPlatform(), peer.GetBackend())
	}
	if got := peer.GetParameters()[torch.ParamIntraOpThreads].GetStringValue(); got != "1" {
		t.Errorf("%s = %q, want 1", torch.ParamIntraOpThreads, got)
	}
	if !proto.Equal(peer.GetDynamicBatching(), seed.GetDynamicBatching()) || peer.GetMaxBatchSize() != seed.GetMaxBatchSize() ||
		instanceCount(peer) != instanceCount(seed) || instanceCount(peer) != 4 {
		t.Errorf("peer batching %v, max batch %d, %d instances; seed %v, %d, %d",
			peer.GetDynamicBatching(), peer.GetMaxBatchSize(), instanceCount(peer), seed.GetDynamicBatching(), seed.GetMaxBatchSize(), instanceCount(seed))
	}
	for i, in := range seed.GetInput() {
		if !proto.Equal(in, peer.GetInput()[i]) {
			t.Errorf("input %d: %v, want %v", i, peer.GetInput()[i], in)
		}
	}
	if !proto.Equal(seed, orig) {
		t.Error("peerConfig changed the seed's config")
	}
}

// TestPythonRepository: the python model is the seed's files unchanged,
// both models get the same model.pt, and a seed that is not the python
// model is refused.
func TestPythonRepository(t *testing.T) {
	dir := t.TempDir()
	pt := filepath.Join(dir, "given.pt")
	if err := os.WriteFile(pt, []byte("torchscript"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := options{seed: seedRepo, model: pt}
	if _, err := pythonRepository(o, dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.pbtxt", "1/model.py"} {
		want, _ := os.ReadFile(filepath.Join(seedRepo, pythonModel, f))
		got, err := os.ReadFile(filepath.Join(dir, "repo", pythonModel, f))
		if err != nil || !bytes.Equal(got, want) || len(want) == 0 {
			t.Errorf("%s: not the seed's (%v)", f, err)
		}
	}
	for _, m := range []string{pythonModel, pythonPeer} {
		if got, err := os.ReadFile(filepath.Join(dir, "repo", m, "1", "model.pt")); err != nil || string(got) != "torchscript" {
			t.Errorf("%s: model.pt %q, %v", m, got, err)
		}
	}
	if _, err := modelconfig.LoadFile(filepath.Join(dir, "repo", pythonPeer, "config.pbtxt")); err != nil {
		t.Error(err)
	}
	// The peer's directory as a seed: a pytorch model, not the report's.
	o.seed = filepath.Join(dir, "repo-copy")
	if err := os.MkdirAll(filepath.Join(o.seed, pythonModel), 0o755); err != nil {
		t.Fatal(err)
	}
	peer, _ := os.ReadFile(filepath.Join(dir, "repo", pythonPeer, "config.pbtxt"))
	if err := os.WriteFile(filepath.Join(o.seed, pythonModel, "config.pbtxt"), peer, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := pythonRepository(o, t.TempDir()); err == nil {
		t.Error("a seed that is not simple_linear on the python backend was accepted")
	}
}

// TestSameOutputs: answers agree to float32 rounding or not at all.
func TestSameOutputs(t *testing.T) {
	a := []float64{0.25, -1.5, 3}
	if err := sameOutputs(a, []float64{0.250001, -1.5, 3}); err != nil {
		t.Error(err)
	}
	for _, b := range [][]float64{{0.25, -1.5, 3.1}, {0.25, -1.5}, nil} {
		if err := sameOutputs(a, b); err == nil {
			t.Errorf("%v accepted as %v", b, a)
		}
	}
	if err := sameOutputs(nil, nil); err == nil {
		t.Error("no outputs accepted")
	}
}
