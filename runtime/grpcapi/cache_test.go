package grpcapi

import (
	"context"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

func TestResponseCacheStatistics(t *testing.T) {
	cache, err := scheduler.NewCache(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear + "response_cache { enable: true }"},
		func(o *repository.Options) { o.Cache = cache })
	e := serve(t, repo, Options{Manager: repo.Manager})
	ctx := context.Background()
	var first []float32
	for i := 0; i < 3; i++ {
		resp, err := e.client.ModelInfer(ctx, linearRequest("", rows(1, 1), true))
		if err != nil {
			t.Fatal(err)
		}
		got := bytesF32(resp.RawOutputContents[0])
		if first == nil {
			first = got
		} else if len(got) != len(first) || got[0] != first[0] || got[len(got)-1] != first[len(first)-1] {
			t.Fatalf("cached answer %v, first %v", got, first)
		}
	}
	st, err := e.client.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "linear", Version: "2"})
	if err != nil || len(st.ModelStats) != 1 {
		t.Fatal(st, err)
	}
	ms := st.ModelStats[0]
	if ms.ExecutionCount != 1 || ms.InferenceStats.CacheHit.Count != 2 || ms.InferenceStats.CacheMiss.Count != 1 || ms.InferenceStats.Success.Count != 3 {
		t.Fatalf("stats %v", ms)
	}
}
