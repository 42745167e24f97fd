package builder

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/tritonbuild/tritonbuild/builder/remote"
)

// stagedProject's recipes install into DESTDIR before they can be
// stopped, so that a stopped build has something in its staging dir:
// staged in its first step, stagedmake in its make target "stage".
var stagedProject = map[string]string{
	"recipes/staged.yaml": `name: staged
versions:
  - version: "1"
    source: {local: ../src}
build:
  script:
    steps:
      - name: stage
        run: mkdir -p "$DESTDIR${prefix}/share" && cp x "$DESTDIR${prefix}/share/"
      - name: rest
        run: "true"
`,
	"recipes/stagedmake.yaml": `name: stagedmake
versions:
  - version: "1"
    source: {local: ../src}
build:
  make: {}
`,
	"src/x":        "x\n",
	"src/Makefile": "all: stage\nstage:\n\tmkdir -p \"$(DESTDIR)$(prefix)/share\" && cp x \"$(DESTDIR)$(prefix)/share/\"\ninstall: stage\n",
}

// A build stopped early on purpose (--until, --target) commits nothing
// and leaves no staging dir behind, DESTDIR included; its work dir stays
// for the next attempt to resume in.
func TestStoppedBuildLeavesNoStaging(t *testing.T) {
	for _, tc := range []struct {
		name, recipe string
		set          func(*Executor)
	}{
		{"until a step", "staged", func(e *Executor) { e.Until = "stage" }},
		{"targets", "stagedmake", func(e *Executor) { e.Targets = []string{"stage"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMiniProject(t, stagedProject)
			m.targets = []string{tc.recipe}
			p := m.plan(m.store)
			ex := &Executor{Store: m.store, Jobs: 1, Out: io.Discard}
			tc.set(ex)
			if err := ex.Run(context.Background(), p, p.Nodes); !errors.Is(err, ErrStopped) {
				t.Fatalf("Run: %v, want the build stopped", err)
			}
			k := p.Node(tc.recipe).Key()
			if m.store.Has(k) {
				t.Error("a stopped build committed its node")
			}
			if left, _ := os.ReadDir(filepath.Join(m.store.Root, "staging")); len(left) != 0 {
				t.Errorf("staging/ keeps %d entries after a stopped build", len(left))
			}
			if _, err := os.Stat(filepath.Join(m.store.WorkDir(k), "src", "x")); err != nil {
				t.Errorf("the work dir did not stay for the next attempt: %v", err)
			}
		})
	}
}

// gatedRegistry is an in-process OCI registry whose first request after
// hold waits until release: a push is then stopped with the node's tree
// not yet read.
type gatedRegistry struct {
	ref     string
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	gate    chan struct{}
}

func newGatedRegistry(t *testing.T) *gatedRegistry {
	g := &gatedRegistry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		g.mu.Lock()
		wait, entered, gate := g.armed, g.entered, g.gate
		g.armed = false
		g.mu.Unlock()
		if wait {
			close(entered)
			<-gate
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	g.ref = u.Host + "/team/trees"
	return g
}

// hold makes the next request wait; entered is closed when it arrives.
func (g *gatedRegistry) hold() (entered chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gate := make(chan struct{})
	g.armed, g.entered, g.gate = true, make(chan struct{}), gate
	return g.entered, sync.OnceFunc(func() { close(gate) })
}

// A tree built before is pushed under the node's shared lock, by Run and by
// Push (`cache push`): gc, which removes a node only when it can take the
// node's lock, leaves it alone while the push runs, and the push uploads
// the tree intact.
func TestPushHoldsTheNodeLock(t *testing.T) {
	for _, tc := range []struct {
		name string
		push func(ctx context.Context, ex *Executor, p *Plan) error
	}{
		{"run", func(ctx context.Context, ex *Executor, p *Plan) error { return ex.Run(ctx, p, p.Nodes) }},
		{"push", func(ctx context.Context, ex *Executor, p *Plan) error {
			_, err := ex.Push(ctx, p.Nodes)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMiniProject(t, stagedProject)
			m.targets = []string{"staged"}
			m.mustBuild(m.store)
			p := m.plan(m.store)
			n := p.Node("staged")
			if n.Status != StatusCached {
				t.Fatalf("staged is %s after its build", n.Status)
			}
			reg := newGatedRegistry(t)
			cache := &remote.Cache{Ref: reg.ref}
			ex := &Executor{Store: m.store, Jobs: 1, Out: io.Discard, Cache: cache}
			ctx := context.Background()
			entered, release := reg.hold()
			defer release()
			done := make(chan error, 1)
			go func() { done <- tc.push(ctx, ex, p) }()
			<-entered
			items, err := GC(ctx, m.store, GCOptions{Delete: true, Reachable: map[string]bool{}})
			if err != nil {
				t.Fatal(err)
			}
			if !m.store.Has(n.Key()) {
				t.Errorf("gc removed a node being pushed: %+v", items)
			}
			release()
			if err := <-done; err != nil {
				t.Fatalf("push: %v", err)
			}
			if _, _, ok, err := cache.Lookup(ctx, n.Hash); !ok || err != nil {
				t.Errorf("the cache does not hold the pushed tree: %v, %v", ok, err)
			}
			// The push is over: gc may take the node now.
			if _, err := GC(ctx, m.store, GCOptions{Delete: true, Reachable: map[string]bool{}}); err != nil {
				t.Fatal(err)
			}
			if m.store.Has(n.Key()) {
				t.Error("gc kept an unreachable node that nothing holds")
			}
		})
	}
}

// A push waits for a process holding the node's exclusive lock (a forced
// rebuild replacing the tree), says so, and uploads once it is done.
func TestPushWaitsForTheNodeLock(t *testing.T) {
	m := newMiniProject(t, stagedProject)
	m.targets = []string{"staged"}
	m.mustBuild(m.store)
	p := m.plan(m.store)
	n := p.Node("staged")
	ctx := context.Background()
	held, err := m.store.Lock(ctx, n.Key())
	if err != nil {
		t.Fatal(err)
	}
	unlock := sync.OnceFunc(held)
	defer unlock()
	cache := &remote.Cache{Ref: newGatedRegistry(t).ref}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ex := &Executor{Store: m.store, Jobs: 1, Out: w, Cache: cache}
		_, err := ex.Push(ctx, p.Nodes)
		w.Close()
		done <- err
	}()
	sc := bufio.NewScanner(r)
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	waiting := false
	for !waiting && sc.Scan() {
		waiting = strings.Contains(sc.Text(), "waiting to push it")
	}
	if !waiting {
		t.Fatalf("no waiting message (%v)", sc.Err())
	}
	if _, _, ok, err := cache.Lookup(ctx, n.Hash); ok || err != nil {
		t.Errorf("the tree was pushed while another process held the node's lock: %v, %v", ok, err)
	}
	unlock()
	go io.Copy(io.Discard, r)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := cache.Lookup(ctx, n.Hash); !ok || err != nil {
		t.Errorf("the cache does not hold the tree after the lock was released: %v, %v", ok, err)
	}
}
