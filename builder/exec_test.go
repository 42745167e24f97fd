package builder

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/fetch"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// fixture is a hermetic world for the executor: an upstream server and a
// mirror serving a real C library's tarball, recipes pointing at them, and
// an empty store.
type fixture struct {
	t        *testing.T
	tarball  []byte
	upstream *httptest.Server
	mirror   *httptest.Server
	hits     atomic.Int64 // requests to upstream
	mhits    atomic.Int64 // requests to the mirror
	// serve decides what upstream sends; nil serves the tarball.
	serve    func(w http.ResponseWriter, r *http.Request, n int64) bool
	recipes  string
	store    *store.Store
	settings recipe.Settings
}

func newFixture(t *testing.T) *fixture {
	testenv.NeedTools(t, "cmake", "cc", "bash")
	f := &fixture{t: t}
	f.tarball = tarGz(t, "testdata/fixtures/greet", "greet-1.0")
	f.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := f.hits.Add(1)
		if f.serve != nil && f.serve(w, r, n) {
			return
		}
		http.ServeContent(w, r, "greet-1.0.tar.gz", time.Unix(0, 0), bytes.NewReader(f.tarball))
	}))
	t.Cleanup(f.upstream.Close)
	// The recipe's mirror is listed first and is broken: fetching must
	// fail over to upstream.
	f.mirror = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mhits.Add(1)
		http.Error(w, "gone", http.StatusNotFound)
	}))
	t.Cleanup(f.mirror.Close)
	sum := sha256.Sum256(f.tarball)
	gen := "Unix Makefiles"
	if _, err := exec.LookPath("ninja"); err == nil {
		gen = "Ninja"
	}
	appDir, _ := filepath.Abs("testdata/fixtures/app")
	f.recipes = t.TempDir()
	repl := strings.NewReplacer("{{URL}}", f.upstream.URL, "{{MIRROR}}", f.mirror.URL,
		"{{SHA}}", hex.EncodeToString(sum[:]), "{{GENERATOR}}", gen, "{{APPDIR}}", appDir)
	for _, name := range []string{"greet", "app", "other"} {
		data, err := os.ReadFile("testdata/recipes/" + name + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(f.recipes, name+".yaml"), []byte(repl.Replace(string(data))), 0o644)
	}
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f.store = st
	f.settings = recipe.Settings{Targets: []string{"app", "other"}}
	return f
}

func (f *fixture) plan(force ...string) *Plan {
	f.t.Helper()
	set, err := recipe.Load(recipe.OSDir(f.recipes))
	if err != nil {
		f.t.Fatal(err)
	}
	p, err := MakePlan(context.Background(), set, PlanOptions{Settings: f.settings, Store: f.store, Force: force, HostCompiler: "test-cc"})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) executor(out io.Writer) *Executor {
	return &Executor{Store: f.store, Settings: f.settings, Out: out, Jobs: 2,
		FetchOptions: fetch.Options{Attempts: 2, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}}
}

func (f *fixture) build(p *Plan) error {
	var log bytes.Buffer
	err := f.executor(&log).Run(context.Background(), p, p.Nodes)
	f.t.Logf("executor output:\n%s", log.String())
	return err
}

func statuses(p *Plan) map[string]Status {
	out := map[string]Status{}
	for _, n := range p.Nodes {
		out[n.Name] = n.Status
	}
	return out
}

func TestBuildCMakeFixtureFromHTTP(t *testing.T) {
	f := newFixture(t)
	p := f.plan()
	if got := p.SortedNames(); strings.Join(got, ",") != "greet,app,other" {
		t.Fatalf("order %v, want dependencies first", got)
	}
	if err := f.build(p); err != nil {
		t.Fatal(err)
	}
	if f.mhits.Load() == 0 {
		t.Error("the recipe's mirror was never tried")
	}
	app := filepath.Join(f.store.TreeDir(p.Node("app").Key()), "bin", "app")
	out, err := exec.Command(app).Output()
	if err != nil || strings.TrimSpace(string(out)) != "hello from greet" {
		t.Fatalf("built app printed %q, %v", out, err)
	}
	m, err := f.store.Manifest(p.Node("greet").Key())
	if err != nil {
		t.Fatal(err)
	}
	if m.SourceURL == "" || !strings.HasPrefix(m.Digest, "sha256:") || len(m.Files) == 0 {
		t.Errorf("manifest incomplete: %+v", m.NodeMeta)
	}

	// Second run: everything cached, no network, nothing rebuilt.
	hits := f.hits.Load()
	p2 := f.plan()
	for name, s := range statuses(p2) {
		if s != StatusCached {
			t.Errorf("%s: status %s after a full build, want cached", name, s)
		}
	}
	if err := f.build(p2); err != nil {
		t.Fatal(err)
	}
	if f.hits.Load() != hits {
		t.Errorf("cached build made %d requests", f.hits.Load()-hits)
	}

	// Changing greet's option changes greet's and app's hashes, not other's.
	f.settings.Options = map[string]map[string]any{"greet": {"shout": true}}
	p3 := f.plan()
	want := map[string]Status{"greet": StatusBuild, "app": StatusBuild, "other": StatusCached}
	for name, s := range statuses(p3) {
		if s != want[name] {
			t.Errorf("after option change %s is %s, want %s", name, s, want[name])
		}
	}
	if p3.Node("other").Hash != p.Node("other").Hash {
		t.Error("an unrelated node's hash changed")
	}
	if err := f.build(p3); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(filepath.Join(f.store.TreeDir(p3.Node("app").Key()), "bin", "app")).Output()
	if err != nil || strings.TrimSpace(string(out)) != "HELLO FROM GREET" {
		t.Fatalf("rebuilt app printed %q, %v", out, err)
	}
	// The source was fetched once: the option change reused the cache.
	if f.hits.Load() != hits {
		t.Errorf("option change refetched the source")
	}

	// install lays the closure into one prefix.
	prefix := filepath.Join(t.TempDir(), "install")
	if _, err := Install(context.Background(), f.store, p3.Closure("app"), prefix, InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"bin/app", "include/greet.h"} {
		if _, err := os.Stat(filepath.Join(prefix, rel)); err != nil {
			t.Errorf("install: %v", err)
		}
	}
}

func TestChecksumMismatchBuildsNothing(t *testing.T) {
	f := newFixture(t)
	f.serve = func(w http.ResponseWriter, r *http.Request, n int64) bool {
		w.Write(append([]byte("tampered"), f.tarball...))
		return true
	}
	err := f.build(f.plan())
	var ce *fetch.ChecksumError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a checksum error", err)
	}
	for _, part := range []string{f.upstream.URL, ce.Want, ce.Got} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not name %q", err, part)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(f.store.Root, "nodes"))
	if len(entries) != 0 {
		t.Errorf("store has %d nodes after a checksum failure", len(entries))
	}
	if cached, _ := filepath.Glob(filepath.Join(f.store.Root, "sources", "sha256", "*")); len(cached) != 0 {
		t.Errorf("bad download left in the cache: %v", cached)
	}
}

func TestResumeAfterCutConnection(t *testing.T) {
	f := newFixture(t)
	var sawRange atomic.Bool
	f.serve = func(w http.ResponseWriter, r *http.Request, n int64) bool {
		if r.Header.Get("Range") != "" {
			sawRange.Store(true)
			return false
		}
		if n == 1 {
			// Promise everything, send half, then cut the connection.
			w.Header().Set("Content-Length", itoa(len(f.tarball)))
			w.Write(f.tarball[:len(f.tarball)/2])
			hj, ok := w.(http.Hijacker)
			if !ok {
				t.Fatal("no hijacker")
			}
			w.(http.Flusher).Flush()
			conn, _, _ := hj.Hijack()
			conn.Close()
			return true
		}
		return false
	}
	if err := f.build(f.plan()); err != nil {
		t.Fatal(err)
	}
	if !sawRange.Load() {
		t.Error("the retry did not resume with a Range request")
	}
}

func TestFailedStepReportsLogAndCommitsNothing(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(filepath.Join(f.recipes, "broken.yaml"), []byte(`name: broken
versions:
  - version: "1"
    source: {local: `+f.recipes+`}
build:
  script:
    steps:
      - name: compile
        run: |
          for i in $(seq 1 60); do echo "line $i"; done
          echo "error: the compiler is unhappy" >&2
          exit 3
`), 0o644)
	f.settings.Targets = []string{"broken"}
	p := f.plan()
	err := f.build(p)
	var se *StepError
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want a *StepError", err)
	}
	if se.Step != "compile" || len(se.Tail) != 40 || se.Tail[39] != "error: the compiler is unhappy" || !strings.Contains(err.Error(), se.Log) {
		t.Errorf("step error lacks step, tail or log path: %v", err)
	}
	proj := &Project{Store: f.store}
	logs, other, lerr := proj.Logs(p.Node("broken"))
	if lerr != nil || len(logs) != 1 || other != "" {
		t.Errorf("logs: %v %q %v", logs, other, lerr)
	}
	// Defect 10: another plan of the same name (another profile, other
	// options) still finds the latest attempt's logs.
	otherPlan := *p.Node("broken")
	otherPlan.Hash = strings.Repeat("e", 64)
	logs, other, lerr = proj.Logs(&otherPlan)
	if lerr != nil || len(logs) != 1 || other != f.store.LogDir(p.Node("broken").Key()) {
		t.Errorf("logs of another plan's node: %v %q %v", logs, other, lerr)
	}
	if f.store.Has(p.Node("broken").Key()) {
		t.Error("a failed build was committed")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// tarGz packs dir as top/... deterministically.
func tarGz(t *testing.T, dir, top string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tw.WriteHeader(&tar.Header{Name: top + "/", Mode: 0o755, Typeflag: tar.TypeDir})
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		tw.WriteHeader(&tar.Header{Name: top + "/" + e.Name(), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
		tw.Write(data)
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}
