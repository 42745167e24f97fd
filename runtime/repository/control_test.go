package repository

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/status"
)

func oneRow() *backend.Request {
	data := make([]byte, 16)
	for i := 0; i < 4; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i)))
	}
	return &backend.Request{Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP32, Shape: []int64{1, 4}, Data: data}}}
}

// A request that resolved a version just before a reload retired it is
// answered by the replacement instead of failing.
func TestInferFollowsReload(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "m", linearCfg, []string{"1"})
	mgr := newManager(t, fake.New(), true, root)
	ctx := context.Background()
	if err := mgr.LoadAll(ctx); err != nil {
		t.Fatal(err)
	}
	old, err := mgr.Get("m", -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Load(ctx, "m"); err != nil { // reload: old is retired
		t.Fatal(err)
	}
	if !old.Scheduler.Closing() {
		t.Fatal("the reload did not retire the old version")
	}
	got, resp, err := mgr.Infer(ctx, old, -1, oneRow(), time.Now())
	if err != nil {
		t.Fatalf("request resolved before the reload failed: %v", err)
	}
	if got == old || len(resp.Outputs) != 1 {
		t.Fatalf("answered by %p (old %p): %v", got, old, resp)
	}
	// After an unload there is nothing to follow: Unavailable.
	if err := mgr.Unload(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	_, _, err = mgr.Infer(ctx, got, -1, oneRow(), time.Now())
	if status.Code(err) != backend.Unavailable {
		t.Fatalf("after unload: %v, want Unavailable", err)
	}
	// A request that fails validation counts as a failure of the model.
	if err := mgr.Load(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	cur, _ := mgr.Get("m", -1)
	bad := oneRow()
	bad.Inputs[0].Shape = []int64{1, 5}
	if _, _, err := mgr.Infer(ctx, cur, -1, bad, time.Now()); status.Code(err) != backend.InvalidArg {
		t.Fatalf("bad shape: %v", err)
	}
	if f := cur.Scheduler.Stats().Fail.Count; f != 1 {
		t.Fatalf("fail count %d, want 1", f)
	}
}

func TestLoadModelConfigOverride(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "m", linearCfg, []string{"1"})
	mgr := newManager(t, fake.New(), true, root)
	ctx := context.Background()
	override := `{"backend":"fake","max_batch_size":2,"input":[{"name":"INPUT__0","data_type":"TYPE_FP32","dims":[4]}],
	  "output":[{"name":"OUTPUT__0","data_type":"TYPE_FP32","dims":["3"]}]}`
	if err := mgr.LoadModel(ctx, "m", []byte(override)); err != nil {
		t.Fatal(err)
	}
	m, err := mgr.Get("m", -1)
	if err != nil || m.Spec.MaxBatchSize != 2 || m.Config.GetName() != "m" {
		t.Fatalf("override not applied: %v %v", m, err)
	}
	// Triton refuses an override while polling the model (its
	// InitializeModelInfo), which a load request answers INTERNAL.
	for _, bad := range []string{`{"max_batch_size": "two"}`, `{"name": "other", "backend": "fake"}`, `not json`, `{"no_such_field": 1}`} {
		err := mgr.LoadModel(ctx, "m", []byte(bad))
		if status.Code(err) != backend.Internal || !strings.HasPrefix(err.Error(), "failed to load 'm', failed to poll from model repository: ") {
			t.Errorf("%s: %v, want Internal, failed to poll", bad, err)
		}
	}
	// The failed attempts left the overridden version serving.
	if m2, err := mgr.Get("m", -1); err != nil || m2 != m {
		t.Fatalf("after failed reloads: %v %v", m2, err)
	}
	if err := mgr.Load(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if m, _ := mgr.Get("m", -1); m.Spec.MaxBatchSize != 8 {
		t.Fatalf("config.pbtxt not used again: max_batch_size %d", m.Spec.MaxBatchSize)
	}
}

func TestPoll(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "a", linearCfg, []string{"1"})
	be := fake.New()
	mgr := newManager(t, be, true, root)
	ctx := context.Background()
	if err := mgr.Poll(ctx); err != nil { // first poll loads everything
		t.Fatal(err)
	}
	if v := readyVersions(mgr, "a"); !slices.Equal(v, []int64{1}) {
		t.Fatalf("ready %v", v)
	}
	if err := mgr.Poll(ctx); err != nil || be.Instances("a") != 1 {
		t.Fatalf("an unchanged model was reloaded: %v, %d instances created", err, be.Instances("a"))
	}
	// A new version replaces the old one (policy latest 1).
	if err := os.Mkdir(filepath.Join(root, "a", "2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if v := readyVersions(mgr, "a"); !slices.Equal(v, []int64{2}) {
		t.Fatalf("after adding version 2: %v", v)
	}
	// A broken config keeps the previous version serving and shows the reason.
	if err := os.WriteFile(filepath.Join(root, "a", ConfigFile), []byte("max_batch_size: [[["), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Poll(ctx); err == nil {
		t.Fatal("a broken config must be reported")
	}
	if _, err := mgr.Get("a", 2); err != nil {
		t.Fatalf("previous version stopped serving: %v", err)
	}
	if _, reason, _ := mgr.Versions("a"); reason == "" {
		t.Fatal("no reason for the failed reload")
	}
	if err := mgr.Poll(ctx); err != nil || be.Instances("a") != 2 {
		t.Fatalf("unchanged broken model retried: %v, %d instances", err, be.Instances("a"))
	}
	// Fixed again: reloaded, reason cleared.
	if err := os.WriteFile(filepath.Join(root, "a", ConfigFile), []byte(linearCfg+"\n# edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, reason, _ := mgr.Versions("a"); reason != "" || be.Instances("a") != 3 {
		t.Fatalf("after the fix: reason %q, %d instances", reason, be.Instances("a"))
	}
	// Removed: unloaded and dropped from the index.
	if err := os.RemoveAll(filepath.Join(root, "a")); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := mgr.Get("a", -1); status.Code(err) != backend.NotFound {
		t.Fatalf("removed model: %v", err)
	}
	if idx := mgr.Index(false); len(idx) != 0 {
		t.Fatalf("index after removal: %v", idx)
	}
}

// TestLoadModelFileOverride: a load with files serves a directory made of
// them (for a model the repository holds and for one it does not), needs
// a config, refuses paths outside the model directory and files over the
// bound, and its directory goes when the model reloads from the
// repository or unloads.
func TestLoadModelFileOverride(t *testing.T) {
	root, overrides := t.TempDir(), t.TempDir()
	writeModel(t, root, "m", linearCfg, []string{"1"})
	mgr, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()},
		StrictModelConfig: true, OverrideDir: overrides, MaxOverrideFilesSize: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Close(context.Background()) })
	ctx := context.Background()
	cfg := []byte(`{"backend":"fake","max_batch_size":2,"input":[{"name":"INPUT__0","data_type":"TYPE_FP32","dims":[4]}],
	  "output":[{"name":"OUTPUT__0","data_type":"TYPE_FP32","dims":[3]}]}`)
	files := map[string][]byte{"3/model.bin": []byte("weights"), "labels.txt": []byte("a\nb\n")}
	overrideDirs := func() []string {
		ents, _ := os.ReadDir(overrides)
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	for _, name := range []string{"m", "elsewhere"} {
		if err := mgr.LoadModelFiles(ctx, name, cfg, files); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		mod, err := mgr.Get(name, -1)
		if err != nil || mod.Version != 3 || mod.Spec.MaxBatchSize != 2 || !strings.HasPrefix(mod.Spec.ModelDir, overrides) {
			t.Fatalf("%s: not served from its files: %+v %v", name, mod, err)
		}
		data, err := os.ReadFile(filepath.Join(mod.Spec.VersionDir, "model.bin"))
		if err != nil || string(data) != "weights" {
			t.Fatalf("%s: model file %q %v", name, data, err)
		}
	}
	if d := overrideDirs(); len(d) != 2 {
		t.Fatalf("override directories %v, want one per model", d)
	}

	for _, c := range []struct {
		cfg   []byte
		files map[string][]byte
		want  string
	}{
		{nil, files, "a config override must be given"},
		{cfg, map[string][]byte{"../1/model.bin": nil}, "inside the model directory"},
		{cfg, map[string][]byte{"/etc/passwd": nil}, "inside the model directory"},
		{cfg, map[string][]byte{"1/model.bin": make([]byte, 2<<10)}, "exceed the limit of 1024 bytes"},
	} {
		err := mgr.LoadModelFiles(ctx, "m", c.cfg, c.files)
		if status.Code(err) != backend.InvalidArg || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want InvalidArg with %q", slices.Collect(maps.Keys(c.files)), err, c.want)
		}
	}
	if mod, err := mgr.Get("m", -1); err != nil || mod.Version != 3 {
		t.Fatalf("refused loads replaced the served model: %v %v", mod, err)
	}

	// Loading from the repository again, and unloading, remove the files.
	if err := mgr.Load(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if mod, err := mgr.Get("m", -1); err != nil || mod.Version != 1 || strings.HasPrefix(mod.Spec.ModelDir, overrides) {
		t.Fatalf("repository directory not used again: %+v %v", mod, err)
	}
	if err := mgr.Unload(ctx, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	if d := overrideDirs(); len(d) != 0 {
		t.Fatalf("override directories left: %v", d)
	}
}

// TestOverrideDirLivesWithItsVersions: a load with files that loads some
// versions and fails others keeps the directory the loaded ones serve
// from (their backend may read it again, as a python stub restarting
// does), a reload that fails for one version keeps the older directory
// the version still serving reads, and a load or unload that leaves no
// version on a directory removes it.
func TestOverrideDirLivesWithItsVersions(t *testing.T) {
	root, overrides := t.TempDir(), t.TempDir()
	mgr, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()},
		StrictModelConfig: true, OverrideDir: overrides})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Close(context.Background()) })
	ctx := context.Background()
	config := func(params string) []byte {
		return []byte(`{"backend":"fake","max_batch_size":2,"version_policy":{"specific":{"versions":[1,2]}},
		  "input":[{"name":"INPUT__0","data_type":"TYPE_FP32","dims":[4]}],
		  "output":[{"name":"OUTPUT__0","data_type":"TYPE_FP32","dims":[3]}],"parameters":{` + params + `}}`)
	}
	cfg, fail2 := config(""), config(`"fake_fail_version":{"string_value":"2"}`)
	both := func(one, two string) map[string][]byte {
		return map[string][]byte{"1/model.bin": []byte(one), "2/model.bin": []byte(two)}
	}
	dirs := func() int {
		ents, err := os.ReadDir(overrides)
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	// readable checks that version v serves from a directory that is there.
	readable := func(v int64, want string) string {
		t.Helper()
		mod, err := mgr.Get("m", v)
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		data, err := os.ReadFile(filepath.Join(mod.Spec.VersionDir, "model.bin"))
		if err != nil || string(data) != want {
			t.Fatalf("version %d's file: %q %v, want %q", v, data, err, want)
		}
		return mod.Spec.ModelDir
	}

	// Version 2 fails, version 1 loads and keeps its directory.
	err = mgr.LoadModelFiles(ctx, "m", fail2, both("one", "two"))
	if err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("partial load: %v, want version 2's failure", err)
	}
	first := readable(1, "one")
	if n := dirs(); n != 1 {
		t.Fatalf("%d override directories after a partial load, want 1", n)
	}

	// Both load: the first directory has no version left and goes.
	if err := mgr.LoadModelFiles(ctx, "m", cfg, both("1b", "2b")); err != nil {
		t.Fatal(err)
	}
	second := readable(2, "2b")
	if _, err := os.Stat(first); !errors.Is(err, fs.ErrNotExist) || dirs() != 1 {
		t.Fatalf("the replaced directory: %v, %d directories", err, dirs())
	}

	// Version 2 fails again: the version 2 that serves keeps its directory.
	if err := mgr.LoadModelFiles(ctx, "m", fail2, both("1c", "2c")); err == nil {
		t.Fatal("a load failing version 2 succeeded")
	}
	if readable(1, "1c") == second || readable(2, "2b") != second || dirs() != 2 {
		t.Fatalf("after a failed reload of version 2: %d directories, want 2", dirs())
	}

	// A load that fails before loading any version leaves what serves.
	if err := mgr.LoadModelFiles(ctx, "m", []byte(`{"backend":"none"}`), map[string][]byte{"1/model.bin": nil}); err == nil {
		t.Fatal("a load with a bad config succeeded")
	}
	readable(2, "2b")
	if n := dirs(); n != 2 {
		t.Fatalf("%d override directories after a refused load, want 2", n)
	}

	if err := mgr.Unload(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if n := dirs(); n != 0 {
		t.Fatalf("%d override directories left after unloading", n)
	}
}

// TestLoadErrorCodes: a load request fails with Triton's code and text
// (its model repository manager's LoadUnloadModel): a model no repository
// holds, or whose configuration the poll refuses (ValidateModelConfig, and
// the inputs and outputs under --strict-model-config), is INTERNAL
// "failed to load 'M', failed to poll from model repository" (ours adds
// the reason); one whose versions fail to load (the backend, the inputs
// and outputs as auto-completion leaves them, the version policy) is
// INVALID_ARG "load failed for model 'M': ...\n".
func TestLoadErrorCodes(t *testing.T) {
	root := t.TempDir()
	const noDims = `
backend: "fake"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
`
	writeModel(t, root, "negative", strings.Replace(linearCfg, "max_batch_size: 8", "max_batch_size: -1", 1), []string{"1"})
	writeModel(t, root, "nodims", noDims, []string{"1"})
	writeModel(t, root, "broken", linearCfg+`version_policy { all {} } parameters { key: "fake_mode" value { string_value: "no_such_mode" } }`, []string{"1", "2"})
	writeModel(t, root, "noversion", linearCfg, nil)
	poll := func(name string) string {
		return "failed to load '" + name + "', failed to poll from model repository"
	}
	for _, strict := range []bool{false, true} {
		mgr := newManager(t, fake.New(), strict, root)
		ioCode, ioText := backend.InvalidArg, "load failed for model 'nodims': nodims/config.pbtxt: model input 'INPUT__0' must specify 'dims' for nodims\n"
		if strict {
			ioCode, ioText = backend.Internal, poll("nodims")+": nodims/config.pbtxt: model input 'INPUT__0' must specify 'dims' for nodims"
		}
		for _, c := range []struct {
			name string
			code backend.Code
			text string
		}{
			{"nope", backend.Internal, poll("nope")},
			{"negative", backend.Internal, poll("negative") + ": negative/config.pbtxt: 'max_batch_size' must be non-negative value for negative"},
			{"nodims", ioCode, ioText},
			{"noversion", backend.InvalidArg, "load failed for model 'noversion': at least one version must be available under the version policy of model 'noversion'\n"},
		} {
			err := mgr.Load(context.Background(), c.name)
			if status.Code(err) != c.code || err.Error() != c.text {
				t.Errorf("strict %v, load %s: %v %q, want %v %q", strict, c.name, status.Code(err), err, c.code, c.text)
			}
		}
		err := mgr.Load(context.Background(), "broken")
		const reason = `version %d is at UNAVAILABLE state: creating instance 0 of broken: fake model "broken": unknown fake_mode "no_such_mode";`
		if want := "load failed for model 'broken': " + fmt.Sprintf(reason, 1) + fmt.Sprintf(reason, 2) + "\n"; status.Code(err) != backend.InvalidArg || err.Error() != want {
			t.Errorf("strict %v, load broken: %v %q, want InvalidArg %q", strict, status.Code(err), err, want)
		}
	}
}
