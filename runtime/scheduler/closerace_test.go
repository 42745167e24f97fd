package scheduler

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// TestCloseRacingSubmitsAnswersEveryRequest: requests accepted just
// before an unload that gives up waiting at once, and queued only after it
// swept the queues, are still answered by the server (the unload sweeps
// them), none left until their client's deadline in a queue nobody reads.
// A race, so tried over many rounds: before the fix most runs stranded a
// request within them.
func TestCloseRacingSubmitsAnswersEveryRequest(t *testing.T) {
	for round := 0; round < 150; round++ {
		s, err := New(context.Background(), fake.New(), linearSpec("cr", 4, nil), Config{Name: "cr", MaxBatchSize: 4, Instances: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var wg sync.WaitGroup
		stranded := make(chan error, 16)
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					_, err := s.Infer(ctx, rowsRequest(1, 1))
					if errors.Is(err, context.DeadlineExceeded) {
						stranded <- err
						return
					}
					if err != nil {
						return // refused or answered by the unload
					}
				}
			}()
		}
		// Some requests in flight, so that submits race the unload.
		for deadline := time.Now().Add(10 * time.Second); s.pending.Load() < 2 && time.Now().Before(deadline); {
			runtime.Gosched()
		}
		cctx, ccancel := context.WithCancel(context.Background())
		ccancel()
		_ = s.Close(cctx)
		wg.Wait()
		cancel()
		close(stranded)
		if err := <-stranded; err != nil {
			t.Fatalf("round %d: a request submitted during the unload was never answered (%d pending)", round, s.pending.Load())
		}
	}
}
