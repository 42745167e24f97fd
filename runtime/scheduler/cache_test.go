package scheduler

import (
	"context"
	"slices"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

func TestCacheAnswersRepeatedRequestsWithoutExecuting(t *testing.T) {
	be := fake.New()
	cache, err := NewCache(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), be, linearSpec("m", 4, nil), Config{Name: "m", Version: 1, MaxBatchSize: 4, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	first, err := s.Infer(context.Background(), rowsRequest(2, 1))
	if err != nil || first.Err != nil {
		t.Fatal(err, first.Err)
	}
	want := slices.Clone(first.Outputs[0].Data)
	first.Outputs[0].Shape[0] = 99 // a caller reshaping its answer must not change the cached one
	for i := 0; i < 3; i++ {
		resp, err := s.Infer(context.Background(), rowsRequest(2, 1))
		if err != nil || resp.Err != nil {
			t.Fatal(err, resp.Err)
		}
		if !slices.Equal(resp.Outputs[0].Data, want) || !slices.Equal(resp.Outputs[0].Shape, []int64{2, 3}) {
			t.Fatalf("cached answer %v %v, want %v [2 3]", floats(resp.Outputs[0].Data), resp.Outputs[0].Shape, floats(want))
		}
	}
	if got := be.Batches("m"); len(got) != 1 {
		t.Fatalf("executions %v: the repeats ran the model", got)
	}
	// Another input, a requested output or a parameter is another request.
	other := rowsRequest(2, 1)
	other.Parameters = map[string]any{"p": int64(1)}
	for _, r := range []*struct{ name string }{{"data"}, {"param"}, {"outputs"}} {
		req := rowsRequest(2, 1)
		switch r.name {
		case "data":
			req = rowsRequest(2, 5)
		case "param":
			req = other
		case "outputs":
			req.Outputs = []string{"Y"}
		}
		if _, err := s.Infer(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if got := be.Batches("m"); len(got) != 4 {
		t.Fatalf("executions %v, want 4 (distinct requests miss)", got)
	}
	st := s.Stats()
	if st.CacheHit.Count != 3 || st.CacheMiss.Count != 4 || st.Success.Count != 7 || st.ExecutionCount != 4 || st.InferenceCount != 8 {
		t.Fatalf("stats hit %d miss %d success %d exec %d inferences %d", st.CacheHit.Count, st.CacheMiss.Count, st.Success.Count, st.ExecutionCount, st.InferenceCount)
	}
}

func TestCacheFailedRequestsAreNotCached(t *testing.T) {
	be := fake.New()
	cache, _ := NewCache(1 << 20)
	s, err := New(context.Background(), be, linearSpec("m", 4, map[string]string{"fake_fail": "execute"}), Config{Name: "m", MaxBatchSize: 4, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for i := 0; i < 2; i++ {
		resp, err := s.Infer(context.Background(), rowsRequest(1, 1))
		if err == nil && resp.Err == nil {
			t.Fatal("fake_fail always succeeded")
		}
	}
	if n := cache.Stats().Entries; n != 0 || len(be.Batches("m")) != 2 {
		t.Fatalf("entries %d executions %v", n, be.Batches("m"))
	}
}

func TestCacheBoundEvictsLeastRecentlyUsed(t *testing.T) {
	be := fake.New()
	// One response of a row (3 floats and the overhead) fits twice.
	one := int64(entryOverhead + 12 + 1 + 16)
	cache, err := NewCache(2*one + one/2)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), be, linearSpec("m", 4, nil), Config{Name: "m", MaxBatchSize: 4, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	run := func(base float32) {
		t.Helper()
		if _, err := s.Infer(context.Background(), rowsRequest(1, base)); err != nil {
			t.Fatal(err)
		}
	}
	run(1)
	run(2)
	run(1) // hit: 1 is now the most recently used
	run(3) // evicts 2
	if st := cache.Stats(); st.Entries != 2 || st.Used > st.Size || st.Evictions != 1 {
		t.Fatalf("cache %+v, want 2 entries within the size after 1 eviction", st)
	}
	n := len(be.Batches("m"))
	run(1) // still cached
	if len(be.Batches("m")) != n {
		t.Fatal("the most recently used entry was evicted")
	}
	run(2) // was evicted: runs again
	if len(be.Batches("m")) != n+1 {
		t.Fatal("the least recently used entry was kept")
	}
	// A response bigger than the whole cache is served, not cached.
	small, _ := NewCache(64)
	s2, err := New(context.Background(), be, linearSpec("m2", 4, nil), Config{Name: "m2", MaxBatchSize: 4, Cache: small})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	if resp, err := s2.Infer(context.Background(), rowsRequest(1, 1)); err != nil || resp.Err != nil {
		t.Fatal(err)
	}
	if st := small.Stats(); st.Entries != 0 || st.Used != 0 {
		t.Fatalf("oversized response cached: %+v", st)
	}
	if _, err := NewCache(0); err == nil {
		t.Fatal("a zero-byte cache was accepted")
	}
}

func TestCacheKeysModelAndVersion(t *testing.T) {
	cache, _ := NewCache(1 << 20)
	req := rowsRequest(1, 1)
	a, b, c := cache.requestKey("m", 1, req), cache.requestKey("m", 2, req), cache.requestKey("n", 1, req)
	if a == b || a == c || b == c {
		t.Fatal("model name and version are not part of the key")
	}
	if cache.requestKey("m", 1, rowsRequest(1, 1)) != a {
		t.Fatal("equal requests got different keys")
	}
}

// BenchmarkCacheHit is one lookup of a cached one-row response: the key's
// digest, the map and the copy of the tensor headers.
func BenchmarkCacheHit(b *testing.B) {
	cache, _ := NewCache(1 << 20)
	req := rowsRequest(1, 1)
	k := cache.requestKey("m", 1, req)
	cache.insert(k, &backend.Response{Outputs: []backend.Tensor{{Name: "Y", DataType: backend.FP32, Shape: []int64{1, 3}, Data: make([]byte, 12)}}})
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := cache.lookup(cache.requestKey("m", 1, req)); !ok {
			b.Fatal("miss")
		}
	}
}
