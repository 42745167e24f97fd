package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/fetch"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/recipes"
)

// The alternatives of the built-in recipes under the project's own
// build.yaml: what a person on a machine without upstream access reads.
func TestSourceAlternativesBuiltin(t *testing.T) {
	set, err := recipe.Load(recipe.Dir{FS: recipes.FS(), Label: "recipes", Builtin: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := recipe.LoadConfig("../build.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := MakePlan(context.Background(), set, PlanOptions{Settings: cfg.Settings, Targets: []string{"pytorch"}, ProjectDir: "..", HostCompiler: "cc 1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		node      string
		want, not []string
	}{
		{"llvm", []string{
			"llvm 15.0.6 comes from the distribution's source archive (apt source package llvm-toolchain-15 1:15.0.6-4): --set llvm.version=15.0.6 or --profile archive",
			"a mirror holding llvm-project-15.0.7.src.tar.xz: add `mirrors: [BASE]` to build.yaml, fetched as BASE/llvm/llvm-project-15.0.7.src.tar.xz",
			"an installed llvm instead of building it: --set llvm.external=PREFIX or --profile system (/usr/lib/llvm-15); its probe checks it (install llvm-15-dev",
			"profiles of ../build.yaml: archive, system",
		}, nil},
		{"pytorch", []string{
			"pytorch 1.13.1+dfsg comes from the distribution's source archive (apt source package pytorch 1.13.1+dfsg-4): --set pytorch.version=1.13.1+dfsg or --profile archive (it builds against distribution packages: `tritonbuild doctor` lists what to install)",
			"an installed pytorch instead of building it: --set pytorch.external=PREFIX or --profile system (/usr)",
		}, []string{"a mirror"}}, // git sources have no mirrors
	} {
		alts := strings.Join(SourceAlternatives(plan.Node(c.node), cfg), "\n")
		for _, w := range c.want {
			if !strings.Contains(alts, w) {
				t.Errorf("%s: alternatives lack %q:\n%s", c.node, w, alts)
			}
		}
		for _, w := range c.not {
			if strings.Contains(alts, w) {
				t.Errorf("%s: alternatives offer %q:\n%s", c.node, w, alts)
			}
		}
	}
}

// A fetch that reaches nothing (a server answering 404, a host that
// refuses connections) fails with the alternatives, and every node of
// the fetch is tried, not just the first.
func TestFetchFailureListsAlternatives(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(gone.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close() // nothing listens there any more

	dir := t.TempDir()
	zero := strings.Repeat("ab", 32)
	os.WriteFile(filepath.Join(dir, "dl.yaml"), []byte(`name: dl
versions:
  - version: "2.0"
    source: {url: `+refused+`/dl-2.0.tar.gz, sha256: `+zero+`}
  - version: "1.0"
    source: {apt: dl, apt_version: 1.0-1, file: dl_1.0.orig.tar.gz, sha256: `+zero+`}
build:
  cmake: {}
probe:
  checks:
    - {name: header, file: include/dl.h, help: install libdl-dev}
`), 0o644)
	os.WriteFile(filepath.Join(dir, "other.yaml"), []byte(`name: other
versions:
  - version: "3"
    source: {url: `+gone.URL+`/other-3.tar.gz, sha256: `+zero+`}
build:
  cmake: {}
`), 0o644)
	set, err := recipe.Load(recipe.OSDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := recipe.ParseConfig(filepath.Join(dir, "build.yaml"), []byte(`targets: [dl, other]
profiles:
  old: {versions: {dl: "1.0"}}
  sys: {externals: {dl: /opt/dl}}
`))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := MakePlan(context.Background(), set, PlanOptions{Settings: cfg.Settings, HostCompiler: "cc 1"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	e := &Executor{Store: st, Settings: cfg.Settings, Config: cfg, FetchOptions: fetch.Options{Attempts: 1}}
	err = e.Fetch(context.Background(), plan.Nodes)
	if err == nil {
		t.Fatal("fetch succeeded with no source reachable")
	}
	var fe *FetchError
	if !errors.As(err, &fe) || fe.Name != "dl" {
		t.Fatalf("error %T %v, want a *FetchError for dl first", err, err)
	}
	msg := err.Error()
	for _, w := range []string{
		"dl 2.0: fetching source:",
		"connection refused",
		"what else gets dl:\n  - dl 1.0 comes from the distribution's source archive (apt source package dl 1.0-1): --set dl.version=1.0 or --profile old\n",
		"  - a mirror holding dl-2.0.tar.gz: add `mirrors: [BASE]` to build.yaml, fetched as BASE/dl/dl-2.0.tar.gz",
		"  - an installed dl instead of building it: --set dl.external=PREFIX or --profile sys (/opt/dl); its probe checks it (install libdl-dev)\n",
		"  - profiles of " + filepath.Join(dir, "build.yaml") + ": old, sys",
		// the second node was tried too
		"other 3: fetching source:",
		"404",
		"what else gets other:\n  - a mirror holding other-3.tar.gz",
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "an installed other") {
		t.Errorf("other has no probe, yet an installed copy is offered:\n%s", msg)
	}

	// doctor's question, asked before any download: neither is reachable,
	// and each answer carries its alternatives. A source in the cache
	// needs no network.
	e.FetchOptions.ReachTimeout = time.Second
	reach := e.ReachSources(context.Background(), plan.Nodes)
	if len(reach) != 2 || reach[0].OK || reach[1].OK || !strings.Contains(reach[0].Detail, "connection refused") || !strings.Contains(reach[1].Detail, "404") {
		t.Fatalf("reach: %+v", reach)
	}
	if len(reach[0].Alternatives) != 4 || !strings.HasPrefix(reach[0].Alternatives[0], "dl 1.0 comes from the distribution's source archive") {
		t.Errorf("dl's alternatives: %q", reach[0].Alternatives)
	}
	blob := filepath.Join(dir, "blob")
	os.WriteFile(blob, []byte("x"), 0o644)
	xsum := sha256.Sum256([]byte("x"))
	other := set.Get("other")
	other.Versions[0].Source.SHA256 = hex.EncodeToString(xsum[:])
	if _, err := st.Sources().Adopt(context.Background(), other.Versions[0].Source.SHA256, blob, "test"); err != nil {
		t.Fatal(err)
	}
	if r := e.ReachSources(context.Background(), plan.Nodes[1:]); len(r) != 1 || !r[0].OK || !r[0].Cached || r[0].Alternatives != nil {
		t.Errorf("cached source: %+v", r)
	}
}
