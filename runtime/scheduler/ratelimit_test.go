package scheduler

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// peakUnder runs 16 concurrent requests over two models of two instances
// each, every instance needing one copy of R, and returns the most
// executions the fake backend saw at once.
func peakUnder(t *testing.T, rl *RateLimiter) int {
	t.Helper()
	be := fake.New()
	need := InstanceLimit{Resources: []Resource{{Name: "R", Count: 1}}}
	var scheds []*Scheduler
	for _, name := range []string{"a", "b"} {
		s, err := New(context.Background(), be, linearSpec(name, 4, map[string]string{"fake_delay_us": "20000"}), Config{
			Name: name, MaxBatchSize: 4, Instances: 2, RateLimiter: rl, Limits: []InstanceLimit{need, need},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		scheds = append(scheds, s)
	}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if resp, err := scheds[i%2].Infer(context.Background(), rowsRequest(1, float32(i))); err != nil || resp.Err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	return be.PeakExecutions()
}

func TestRateLimiterBoundsConcurrentExecutions(t *testing.T) {
	if p := peakUnder(t, nil); p < 3 {
		t.Fatalf("without a rate limiter only %d of 4 instances ran at once", p)
	}
	// By default R has the most copies any instance lists: 1.
	rl, err := NewRateLimiter(nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := peakUnder(t, rl); p != 1 {
		t.Fatalf("R:1 by default, yet %d instances executed at once", p)
	}
	rl, err = NewRateLimiter([]string{"r:2"}) // names are case-insensitive
	if err != nil {
		t.Fatal(err)
	}
	if p := peakUnder(t, rl); p != 2 {
		t.Fatalf("--rate-limit-resource=r:2, yet the peak was %d executions", p)
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if n := rl.used[poolKey{"r", false}]; n != 0 || len(rl.tickets) != 0 {
		t.Fatalf("%d copies of R still held, %d instances registered after the models closed", n, len(rl.tickets))
	}
}

func TestRateLimiterRefusesWhatCanNeverRun(t *testing.T) {
	rl, err := NewRateLimiter([]string{"R:1:0"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), fake.New(), linearSpec("m", 4, nil), Config{
		Name: "m", MaxBatchSize: 4, RateLimiter: rl, Limits: []InstanceLimit{{Resources: []Resource{{Name: "R", Count: 2}}}},
	})
	if err == nil || !strings.Contains(err.Error(), `resource count for "r" is limited to 1`) {
		t.Fatalf("want the load refused, got %v", err)
	}
	for _, bad := range []string{"R", "R:x", "R:-1", ":1", "R:1:gpu", "R:1:0:0"} {
		if _, err := NewRateLimiter([]string{bad}); err == nil {
			t.Errorf("--rate-limit-resource=%s accepted", bad)
		}
	}
}

// TestRateLimiterPriority: with the resource busy, an instance of priority
// 1 that asks after one of priority 2 is still served first.
func TestRateLimiterPriority(t *testing.T) {
	rl, _ := NewRateLimiter(nil)
	r := []Resource{{Name: "R", Count: 1}}
	hold, _ := rl.Register(r, 1)
	low, _ := rl.Register(r, 2)
	high, _ := rl.Register(r, 1)
	ctx := context.Background()
	if !hold.acquire(ctx) {
		t.Fatal("a free resource was not granted")
	}
	order := make(chan string, 2)
	waiters := func() int { rl.mu.Lock(); defer rl.mu.Unlock(); return len(rl.waiting) }
	go func() { low.acquire(ctx); order <- "low"; low.release() }()
	for waiters() != 1 {
		time.Sleep(time.Millisecond)
	}
	go func() { high.acquire(ctx); order <- "high"; high.release() }()
	for waiters() != 2 {
		time.Sleep(time.Millisecond)
	}
	hold.release()
	if first, second := <-order, <-order; first != "high" || second != "low" {
		t.Fatalf("granted %s then %s, want high then low", first, second)
	}
	// A waiter whose context ends holds nothing afterwards.
	if !hold.acquire(ctx) {
		t.Fatal("not granted")
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if low.acquire(cctx) {
		t.Fatal("granted while the resource was held")
	}
	hold.release()
	if waiters() != 0 || rl.used[poolKey{"r", false}] != 0 {
		t.Fatalf("waiting %d used %v after a cancelled wait", waiters(), rl.used)
	}
}

// TestBatchGrowsWhileItWaitsForResources: as Triton's batcher grows a
// payload queued in its rate limiter, a closed batch that waits for
// resources takes the requests queued meanwhile, up to the largest
// preferred batch size (max_batch_size without preferred sizes), instead
// of executing alone and leaving them another turn. Here instance X holds
// the one copy of R executing a; b closes alone on instance Y and waits
// for R; c, d and e arrive; once a is done Y executes b-e as one batch of
// 4 (without the growth: b alone, then c-e as 3).
func TestBatchGrowsWhileItWaitsForResources(t *testing.T) {
	for _, tc := range []struct {
		name string
		dyn  Dynamic
	}{
		{"preferred sizes and a delay", Dynamic{PreferredBatchSizes: []int{4}, MaxQueueDelay: time.Millisecond}},
		{"no preferred sizes", Dynamic{MaxQueueDelay: time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rl, err := NewRateLimiter(nil)
			if err != nil {
				t.Fatal(err)
			}
			need := InstanceLimit{Resources: []Resource{{Name: "R", Count: 1}}}
			be := &gatedBatches{started: make(chan struct{}), release: make(chan struct{})}
			dyn := tc.dyn
			s, err := New(context.Background(), be, linearSpec("g", 8, nil), Config{
				Name: "g", MaxBatchSize: 8, Instances: 2, Dynamic: &dyn,
				RateLimiter: rl, Limits: []InstanceLimit{need, need},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			var wg sync.WaitGroup
			send := func() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if resp, err := s.Infer(context.Background(), rowsRequest(1, 1)); err != nil || resp.Err != nil {
						t.Errorf("%v %v", err, resp)
					}
				}()
			}
			waiters := func() int { rl.mu.Lock(); defer rl.mu.Unlock(); return len(rl.waiting) }
			send() // a
			<-be.started
			send() // b
			for waiters() != 1 {
				time.Sleep(time.Millisecond)
			}
			send() // c, d, e
			send()
			send()
			for s.Queued() != 3 {
				time.Sleep(time.Millisecond)
			}
			close(be.release)
			wg.Wait()
			var sizes []int
			for _, b := range s.Stats().Batches {
				for range b.ComputeInfer.Count {
					sizes = append(sizes, b.BatchSize)
				}
			}
			if !slices.Equal(sizes, []int{1, 4}) {
				t.Fatalf("executed batches of %v rows, want [1 4]: a alone, then b with what queued while it waited for R", sizes)
			}
		})
	}
}
