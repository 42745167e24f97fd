package repository

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/status"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// withFile is linearCfg naming a model file, so that a version directory
// without it fails to load.
const withFile = linearCfg + `default_model_filename: "model.bin"
`

// TestFailedNewVersionKeepsServing is issue 17's case 6: version 1
// serving, a broken version 2 appearing retired version 1 (503 "no
// available versions"), in poll mode and on an explicit load. Version 1
// keeps serving, the failure is in the index, and the model counts as
// ready; once version 2 is fixed it replaces version 1.
func TestFailedNewVersionKeepsServing(t *testing.T) {
	for _, mode := range []string{"poll", "explicit"} {
		t.Run(mode, func(t *testing.T) {
			root := t.TempDir()
			writeModel(t, root, "m", withFile, []string{"1"}, "model.bin")
			mgr := newManager(t, fake.New(), true, root)
			ctx := context.Background()
			if err := mgr.LoadAll(ctx); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(root, "m", "2"), 0o755); err != nil { // no model.bin
				t.Fatal(err)
			}
			var err error
			if mode == "poll" {
				err = mgr.Poll(ctx)
			} else {
				err = mgr.Load(ctx, "m")
			}
			if err == nil || !strings.Contains(err.Error(), "version 2") {
				t.Fatalf("loading the broken version 2: %v", err)
			}
			if mod, err := mgr.Get("m", -1); err != nil || mod.Version != 1 {
				t.Fatalf("after the failed load: %v %v; want version 1 serving", mod, err)
			}
			if !mgr.Ready() {
				t.Error("not ready while version 1 serves")
			}
			var v2 *IndexEntry
			for _, e := range mgr.Index(false) {
				if e.Name == "m" && e.Version == "2" {
					v2 = &e
				}
			}
			if v2 == nil || v2.State != Unavailable || !strings.Contains(v2.Reason, "model file") {
				t.Errorf("index entry of version 2: %+v", v2)
			}
			writeFile(t, filepath.Join(root, "m", "2", "model.bin"), "x")
			if mode == "poll" {
				err = mgr.Poll(ctx)
			} else {
				err = mgr.Load(ctx, "m")
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := readyVersions(mgr, "m"); len(got) != 1 || got[0] != 2 {
				t.Errorf("after fixing version 2: ready %v, want [2]", got)
			}
		})
	}
}

// TestFailedLoadOfAbsentModel is the rest of case 6: loading a model that
// has no directory left an index entry and made the server not ready.
func TestFailedLoadOfAbsentModel(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "m", linearCfg, []string{"1"})
	mgr := newManager(t, fake.New(), true, root)
	if err := mgr.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := mgr.Index(false)
	if err := mgr.LoadModel(context.Background(), "nope", nil); err == nil {
		t.Fatal("loading an absent model succeeded")
	}
	after := mgr.Index(false)
	if len(after) != len(before) {
		t.Errorf("index grew from %v to %v", before, after)
	}
	if !mgr.Ready() {
		t.Error("a failed load of an absent model made the server not ready")
	}
}

// TestDuplicateNameOnlyThatModel is issue 17's case 7: one name in two
// repositories stopped every model from loading (index [], no reason).
// The other models load; the duplicated one is UNAVAILABLE with the
// reason in the index, naming no absolute path.
func TestDuplicateNameOnlyThatModel(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeModel(t, a, "dup", linearCfg, []string{"1"})
	writeModel(t, b, "dup", linearCfg, []string{"1"})
	writeModel(t, a, "ok", linearCfg, []string{"1"})
	mgr := newManager(t, fake.New(), true, a, b)
	err := mgr.LoadAll(context.Background())
	if err == nil || !strings.Contains(err.Error(), "model 'dup' appears in 2 repositories") {
		t.Fatalf("LoadAll: %v", err)
	}
	if _, err := mgr.Get("ok", -1); err != nil {
		t.Errorf("the other model did not load: %v", err)
	}
	var dup *IndexEntry
	for _, e := range mgr.Index(false) {
		if e.Name == "dup" {
			dup = &e
		}
	}
	if dup == nil || dup.State != Unavailable || !strings.Contains(dup.Reason, "appears in 2 repositories") || strings.Contains(dup.Reason, a) {
		t.Errorf("index entry of the duplicate: %+v", dup)
	}
}

// TestStuckUnloadDoesNotBlockOtherLoads is part of issue 17's case 5:
// unloading a model whose instance never returns held the one load lock,
// so loading any other model hung too. The unload ends at its bound,
// answering the stuck request with an error, and other models load
// meanwhile.
func TestStuckUnloadDoesNotBlockOtherLoads(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "stuck", linearCfg+`parameters { key: "fake_fail" value { string_value: "hang" } }`, []string{"1"})
	writeModel(t, root, "other", linearCfg, []string{"1"})
	be := fake.New()
	defer be.Release()
	mgr, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": be}, UnloadTimeout: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := mgr.Load(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	mod := mustGet(t, mgr, "stuck")
	inferred := make(chan error, 1)
	go func() { _, _, err := mgr.Infer(ctx, mod, -1, oneRow(), time.Now()); inferred <- err }()
	time.Sleep(500 * time.Millisecond) // the request is executing (it hangs; generous for a loaded machine)
	unloaded := make(chan error, 1)
	start := time.Now()
	go func() { unloaded <- mgr.Unload(ctx, "stuck") }()
	time.Sleep(50 * time.Millisecond)
	if err := mgr.Load(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	// The stuck unload holds for its 6 s timeout; a load that waited for it
	// would take that long, one that did not is well under it even on a
	// loaded machine.
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("loading another model waited %s for the stuck unload", d)
	}
	select {
	case err := <-unloaded:
		if err == nil || !strings.Contains(err.Error(), "did not return") {
			t.Errorf("unload of the stuck model: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the unload of a stuck instance never ended")
	}
	select {
	case err := <-inferred:
		if status.Code(err) != backend.Unavailable {
			t.Errorf("the stuck request: %v, want Unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stuck request was never answered")
	}
	_ = mgr.Close(ctx)
}

// gatedCompleter serves the fake backend's models and holds each
// auto-completion, the first step of a load, until open is called: a
// first load in progress, before the manager knows the model. The first
// auto-completion reports on entered.
type gatedCompleter struct {
	*fake.Backend
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gatedCompleter) open() { g.once.Do(func() { close(g.release) }) }

func (g *gatedCompleter) AutoComplete(ctx context.Context, _ backend.AutoCompleteRequest) ([]byte, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.release:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// logSignal is a log handler that reports on seen the first record whose
// message is msg.
type logSignal struct {
	msg  string
	seen chan struct{}
	once sync.Once
}

func (h *logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h *logSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.seen) })
	}
	return nil
}
func (h *logSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logSignal) WithGroup(string) slog.Handler      { return h }

// gatedManager serves root with a gatedCompleter (auto-completion on) and
// reports on the returned signal when a load or unload waits for another
// one of the same model.
func gatedManager(t *testing.T, root string) (*Manager, *gatedCompleter, *logSignal) {
	t.Helper()
	g := &gatedCompleter{Backend: fake.New(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	waits := &logSignal{msg: "waiting for another load or unload of the model", seen: make(chan struct{})}
	m, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": g}, Logger: slog.New(waits)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	t.Cleanup(g.open) // first: a test that fails while a load is held does not hang in Close
	return m, g, waits
}

// TestUnloadWaitsForFirstLoad: an unload of a model whose first load is in
// progress (the model not known yet) returned "no version is available"
// at once and the load then left the model serving. As Triton serializes
// the loads and unloads of a model, the unload waits for the load and then
// unloads the model.
func TestUnloadWaitsForFirstLoad(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "lin", linearCfg, []string{"1"})
	m, g, waits := gatedManager(t, root)
	ctx := context.Background()
	loaded := make(chan error, 1)
	go func() { loaded <- m.Load(ctx, "lin") }()
	<-g.entered
	unloaded := make(chan error, 1)
	go func() { unloaded <- m.Unload(ctx, "lin") }()
	select {
	case err := <-unloaded:
		t.Fatalf("the unload returned while the first load was in progress: %v", err)
	case <-waits.seen:
	}
	g.open()
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	if err := <-unloaded; err != nil {
		t.Fatalf("the unload after the load: %v", err)
	}
	if _, err := m.Get("lin", -1); err == nil {
		t.Fatal("the model serves after its unload")
	}
	if vs, _, _ := m.Versions("lin"); len(vs) != 1 || vs[0].State != Unavailable || vs[0].Reason != "unloaded" {
		t.Errorf("versions after the unload: %+v", vs)
	}
}

// TestCloseWaitsForFirstLoad: Close during the first load of a model
// unloaded the models it knew and returned, and the load then left its
// model running. Close waits for the load, unloads what it loaded, and
// loads that start afterwards are refused.
func TestCloseWaitsForFirstLoad(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "lin", linearCfg, []string{"1"})
	m, g, waits := gatedManager(t, root)
	ctx := context.Background()
	loaded := make(chan error, 1)
	go func() { loaded <- m.Load(ctx, "lin") }()
	<-g.entered
	closed := make(chan error, 1)
	go func() { closed <- m.Close(ctx) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned while a first load was in progress: %v", err)
	case <-waits.seen:
	}
	g.open()
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := m.Get("lin", -1); err == nil {
		t.Fatal("the model loaded during Close still serves")
	}
	if err := m.Load(ctx, "lin"); status.Code(err) != backend.Unavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("a load after Close: %v, want Unavailable: shutting down", err)
	}
	if _, err := m.Get("lin", -1); err == nil {
		t.Fatal("a load after Close left the model serving")
	}
}

// TestReloadedStepRevalidatesEnsemble: a composing model reloaded with a
// configuration its ensemble no longer fits left the ensemble READY, to
// fail every request. As Triton reloads the ensembles downstream of a
// model it (re)loads, the ensemble is validated again and unloaded with
// Triton's reason; once the model fits again, its next load loads the
// ensemble again. In poll mode and on explicit loads.
func TestReloadedStepRevalidatesEnsemble(t *testing.T) {
	idm := func(n int) string {
		return fmt.Sprintf(`backend: "fake"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [%d] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [%d] }]
`, n, n) + identityParam
	}
	for _, mode := range []string{"poll", "explicit"} {
		t.Run(mode, func(t *testing.T) {
			root := t.TempDir()
			writeModel(t, root, "idm", idm(4), []string{"1"})
			writeModel(t, root, "ens", strings.Replace(ensembleCfg("TYPE_FP32", "TYPE_FP32", step("idm", "IN", "OUT")), "dims: [3]", "dims: [4]", 1), []string{"1"})
			m := newManager(t, fake.New(), true, root)
			ctx := context.Background()
			if err := m.LoadAll(ctx); err != nil {
				t.Fatal(err)
			}
			reload := func(cfg string) {
				t.Helper()
				writeFile(t, filepath.Join(root, "idm", ConfigFile), cfg)
				var err error
				if mode == "poll" {
					err = m.Poll(ctx)
				} else {
					err = m.Load(ctx, "idm")
				}
				if err != nil {
					t.Fatal(err)
				}
				if mod, err := m.Get("idm", -1); err != nil || mod.Inputs[0].Dims[0] != mod.Outputs[0].Dims[0] {
					t.Fatalf("idm after its reload: %v", err)
				}
			}
			reload(idm(5))
			if _, err := m.Get("ens", -1); err == nil {
				t.Fatal("the ensemble serves after its step model changed shape")
			}
			want := "in ensemble ens, ensemble tensor IN: inconsistent shape: [-1,4] is inferred from model ens while [-1,5] is inferred from model idm"
			if _, reason, _ := m.Versions("ens"); !strings.Contains(reason, want) {
				t.Errorf("the ensemble's reason %q, want ...%s", reason, want)
			}
			if m.Ready() {
				t.Error("the server counts as ready with the ensemble refused")
			}
			reload(idm(4))
			if _, err := m.Get("ens", -1); err != nil {
				t.Fatalf("the ensemble did not load again once its step model fit: %v", err)
			}
			if _, reason, _ := m.Versions("ens"); reason != "" {
				t.Errorf("the ensemble's reason after it loaded again: %q", reason)
			}
		})
	}
}
