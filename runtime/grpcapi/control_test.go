package grpcapi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// slowLoadModel executes in 1 ms and warms up for about 30 ms, so that
// LOADING and UNLOADING states last long enough to be seen in the index
// while requests keep arriving.
const slowLoadModel = `
backend: "fake"
max_batch_size: 4
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
instance_group [{ kind: KIND_CPU count: %d }]
parameters { key: "fake_delay_us" value { string_value: "1000" } }
model_warmup [{ name: "w" batch_size: 1 count: 30
  inputs { key: "INPUT__0" value { data_type: TYPE_FP32 dims: [4] zero_data: true } } }]
`

// loadGen sends requests for one model from several clients until stopped,
// counting successes and collecting failures with the time they happened.
type loadGen struct {
	ok   atomic.Int64
	mu   sync.Mutex
	errs []timedErr
	vers map[string]int
	stop chan struct{}
	wg   sync.WaitGroup
}

type timedErr struct {
	at  time.Time
	err error
}

func startLoad(e *env, model string, clients int) *loadGen {
	g := &loadGen{stop: make(chan struct{}), vers: map[string]int{}}
	for c := 0; c < clients; c++ {
		g.wg.Add(1)
		go func(c int) {
			defer g.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-g.stop:
					return
				default:
				}
				x := rows(1+i%2, float32(c))
				req := linearRequest("", x, i%2 == 0)
				req.ModelName = model
				resp, err := e.client.ModelInfer(context.Background(), req)
				if err == nil && !slices.Equal(bytesF32(resp.RawOutputContents[0]), fake.Linear(x, 4, 3)) {
					err = fmt.Errorf("wrong output from version %s", resp.ModelVersion)
				}
				g.mu.Lock()
				if err != nil {
					g.errs = append(g.errs, timedErr{time.Now(), err})
				} else {
					g.vers[resp.ModelVersion]++
				}
				g.mu.Unlock()
				if err == nil {
					g.ok.Add(1)
				}
			}
		}(c)
	}
	return g
}

func (g *loadGen) halt() {
	close(g.stop)
	g.wg.Wait()
}

// indexWatch records every distinct name/version/state row the repository
// index shows while it runs.
type indexWatch struct {
	mu   sync.Mutex
	seen map[string]bool
	stop chan struct{}
	done chan struct{}
}

func watchIndex(e *env) *indexWatch {
	w := &indexWatch{seen: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(500 * time.Microsecond):
			}
			idx, err := e.client.RepositoryIndex(context.Background(), &pb.RepositoryIndexRequest{})
			if err != nil {
				continue
			}
			w.mu.Lock()
			for _, m := range idx.Models {
				w.seen[m.Name+"/"+m.Version+"/"+m.State] = true
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *indexWatch) halt() map[string]bool {
	close(w.stop)
	<-w.done
	return w.seen
}

func TestPollModeUnderLoad(t *testing.T) {
	e := newEnv(t, map[string]string{"stay": fmt.Sprintf(slowLoadModel, 1), "gone": fmt.Sprintf(slowLoadModel, 1)})
	root := e.root
	ctx := context.Background()
	// newEnv wrote versions 1 and 2 and the default policy serves only 2.
	stay, gone := startLoad(e, "stay", 4), startLoad(e, "gone", 2)
	watch := watchIndex(e)
	waitOK := func(g *loadGen, n int64) {
		t.Helper()
		target := g.ok.Load() + n
		for deadline := time.Now().Add(10 * time.Second); g.ok.Load() < target; {
			if time.Now().After(deadline) {
				t.Fatalf("load generator stalled at %d successes", g.ok.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitOK(stay, 20)

	// 1. A new version directory appears (made complete first, then renamed
	// into place, as a deployment tool would).
	tmp := filepath.Join(root, ".v3")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(root, "stay", "3")); err != nil {
		t.Fatal(err)
	}
	if err := e.mgr.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if vs := e.mgr.ReadyVersions("stay"); strings.Join(vs, ",") != "3" {
		t.Fatalf("after adding version 3: ready versions %v", vs)
	}
	waitOK(stay, 20)

	// 2. The configuration changes (two instances instead of one).
	if err := os.WriteFile(filepath.Join(root, "stay", "config.pbtxt"), []byte(fmt.Sprintf(slowLoadModel, 2)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.mgr.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, err := e.client.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "stay"})
	if err != nil || cfg.Config.GetInstanceGroup()[0].GetCount() != 2 {
		t.Fatalf("config after change: %v, %v", cfg, err)
	}
	waitOK(stay, 20)

	// 3. A model is removed while requests for it are in flight, and a new
	// one appears.
	if err := os.RemoveAll(filepath.Join(root, "gone")); err != nil {
		t.Fatal(err)
	}
	frontendtest.WriteModel(t, root, "fresh", fmt.Sprintf(slowLoadModel, 1), "1")
	removedAt := time.Now()
	if err := e.mgr.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	removedDone := time.Now()
	// 4. Nothing changed: a poll reloads nothing.
	before := e.mgr.Index(false)
	if err := e.mgr.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	waitOK(stay, 20)
	stay.halt()
	gone.halt()
	seen := watch.halt()

	if len(stay.errs) > 0 {
		t.Errorf("%d requests for the model that stayed failed; first: %v", len(stay.errs), stay.errs[0].err)
	}
	if stay.vers["2"] == 0 || stay.vers["3"] == 0 {
		t.Errorf("versions that answered: %v", stay.vers)
	}
	for _, f := range gone.errs {
		c := grpcstatus.Code(f.err)
		if f.at.Before(removedAt) || (c != codes.NotFound && c != codes.Unavailable) {
			t.Errorf("request for the removed model failed at %v (removal started %v): %v", f.at, removedAt, f.err)
		}
	}
	if len(gone.errs) == 0 {
		t.Error("requests for the removed model never failed after its removal")
	}
	_, err = e.client.ModelInfer(ctx, func() *pb.ModelInferRequest { r := linearRequest("", rows(1, 0), true); r.ModelName = "gone"; return r }())
	if grpcstatus.Code(err) != codes.NotFound {
		t.Errorf("removed model: %v, want NOT_FOUND", err)
	}
	for _, want := range []string{"stay/2/READY", "stay/3/LOADING", "stay/3/READY", "gone/2/READY", "fresh/1/READY"} {
		if !seen[want] {
			t.Errorf("index never showed %s; saw %v", want, seen)
		}
	}
	for row := range seen {
		if strings.HasPrefix(row, "stay/") && strings.HasSuffix(row, "/UNAVAILABLE") {
			t.Errorf("model that stayed went %s", row)
		}
	}
	after := e.mgr.Index(false)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("an unchanged repository changed the index: %v -> %v", before, after)
	}
	for _, r := range after {
		if r.Name == "gone" {
			t.Errorf("removed model still in the index: %v", r)
		}
	}
	t.Logf("stay: %d ok, versions %v; gone: %d ok, %d failed after removal (poll took %v)",
		stay.ok.Load(), stay.vers, gone.ok.Load(), len(gone.errs), removedDone.Sub(removedAt))
}

// TestExplicitUnloadRule checks the in-flight rule of explicit unloads:
// requests a version's scheduler accepted before the unload began are all
// answered normally; requests arriving after it began get UNAVAILABLE; the
// model can then be loaded again.
func TestExplicitUnloadRule(t *testing.T) {
	const model = `
backend: "fake"
max_batch_size: 0
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [1, 4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [1, 3] }]
parameters { key: "fake_delay_us" value { string_value: "40000" } }
`
	e := newEnv(t, map[string]string{"slow": model})
	ctx := context.Background()
	req := func() *pb.ModelInferRequest {
		r := linearRequest("", rows(1, 2), true)
		r.ModelName = "slow"
		return r
	}
	const inflight = 4
	errs := make(chan error, inflight)
	for i := 0; i < inflight; i++ {
		go func() {
			_, err := e.client.ModelInfer(ctx, req())
			errs <- err
		}()
	}
	// One instance, 40 ms per request: wait until one executes and the
	// others are queued, i.e. all were accepted.
	m, err := e.mgr.Get("slow", -1)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); m.Scheduler.Queued() < inflight-1; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests queued", m.Scheduler.Queued())
		}
		time.Sleep(time.Millisecond)
	}
	unloaded := make(chan error, 1)
	go func() {
		_, err := e.client.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: "slow"})
		unloaded <- err
	}()
	// Once the unload has begun, new requests are refused: the model has
	// no ready version (Triton's NOT_FOUND).
	for deadline := time.Now().Add(5 * time.Second); !m.Scheduler.Closing(); {
		if time.Now().After(deadline) {
			t.Fatal("unload never began")
		}
		time.Sleep(100 * time.Microsecond)
	}
	_, err = e.client.ModelInfer(ctx, req())
	wantCode(t, err, codes.NotFound)
	for i := 0; i < inflight; i++ {
		if err := <-errs; err != nil {
			t.Errorf("request accepted before the unload failed: %v", err)
		}
	}
	if err := <-unloaded; err != nil {
		t.Fatal(err)
	}
	_, err = e.client.ModelInfer(ctx, req())
	wantCode(t, err, codes.NotFound)
	if msg := grpcstatus.Convert(err).Message(); msg != "Request for unknown model: 'slow' has no available versions" {
		t.Errorf("after the unload: %q, want Triton's text", msg)
	}
	idx, _ := e.client.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{})
	if len(idx.Models) != 1 || idx.Models[0].State != "UNAVAILABLE" || idx.Models[0].Reason != "unloaded" {
		t.Fatalf("index after unload: %v", idx)
	}
	if _, err := e.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "slow"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.ModelInfer(ctx, req()); err != nil {
		t.Fatal(err)
	}
}

// TestExplicitLoadUnloadRace races loads, reloads and unloads with
// concurrent inference: nothing crashes or deadlocks, every failure is
// NOT_FOUND (the model had no ready version when the request arrived,
// Triton's code) or UNAVAILABLE (it resolved a version whose unload began
// before the request was queued) and a phase of reloads alone fails no
// request at all.
func TestExplicitLoadUnloadRace(t *testing.T) {
	e := newEnv(t, map[string]string{"m": fmt.Sprintf(slowLoadModel, 2)})
	ctx := context.Background()
	g := startLoad(e, "m", 6)
	for i := 0; i < 6; i++ {
		var err error
		switch i % 3 {
		case 0:
			_, err = e.client.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: "m"})
		default:
			_, err = e.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "m"})
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	g.halt()
	for _, f := range g.errs {
		if c := grpcstatus.Code(f.err); c != codes.Unavailable && c != codes.NotFound {
			t.Errorf("failure with %v (want only UNAVAILABLE or NOT_FOUND): %v", c, f.err)
		}
	}
	if g.ok.Load() == 0 {
		t.Fatal("no request succeeded")
	}
	t.Logf("load/unload phase: %d ok, %d refused", g.ok.Load(), len(g.errs))

	// Reloads only: the old version serves until the new one is ready.
	g = startLoad(e, "m", 6)
	for i := 0; i < 4; i++ {
		if _, err := e.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	g.halt()
	if len(g.errs) > 0 {
		t.Fatalf("%d requests failed during reloads; first: %v", len(g.errs), g.errs[0].err)
	}
	t.Logf("reload phase: %d ok", g.ok.Load())
}
