package builder

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stopProject is three make builds of one source: top depends on base,
// lone on nothing. Its configure and each make target leave a file in the
// source tree (where make builds run), so that what ran shows there.
var stopProject = map[string]string{
	"recipes/base.yaml": `name: base
versions:
  - version: "1"
    source: {local: ../src}
build:
  make:
    configure: [./configure]
`,
	"recipes/top.yaml": `name: top
versions:
  - version: "1"
    source: {local: ../src}
depends:
  - name: base
build:
  make:
    configure: [./configure]
`,
	"recipes/lone.yaml": `name: lone
versions:
  - version: "1"
    source: {local: ../src}
build:
  make:
    configure: [./configure]
`,
	"src/configure": "#!/bin/sh\ntouch configured\n",
	"src/Makefile": `all: lib bin
lib:
	touch lib.built
bin:
	touch bin.built
install: all
	mkdir -p $(DESTDIR)$(prefix)/share
	cp lib.built bin.built $(DESTDIR)$(prefix)/share/
`,
}

// --until and --target stop every node built at that point without a
// commit, and nothing that depends on a stopped node is built: it is
// skipped, saying which dependency stopped. A node that depends on none
// is still built up to the same point. Make builds honour --until
// configure (no make runs) and --target (only those targets are made).
// A later build without the flags builds everything.
func TestStopSkipsDependents(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Executor)
		// made are the files the stopped builds leave in their sources.
		made, notMade []string
		point         string
	}{
		{"until configure", func(e *Executor) { e.Until = "configure" },
			[]string{"configured"}, []string{"lib.built", "bin.built"}, "after configure (--until configure)"},
		{"until build", func(e *Executor) { e.Until = "build" },
			[]string{"configured", "lib.built", "bin.built"}, nil, "after build (--until build)"},
		{"target", func(e *Executor) { e.Targets = []string{"lib"} },
			[]string{"configured", "lib.built"}, []string{"bin.built"}, "after building only lib, without install (--target)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMiniProject(t, stopProject)
			m.targets = []string{"top", "lone"}
			p := m.plan(m.store)
			var out bytes.Buffer
			ex := &Executor{Store: m.store, Jobs: 1, Out: &out}
			tc.set(ex)
			err := ex.Run(context.Background(), p, p.Nodes)
			if !errors.Is(err, ErrStopped) {
				t.Fatalf("Run: %v, want the build stopped\n%s", err, out.String())
			}
			for _, name := range []string{"base", "lone"} {
				n := p.Node(name)
				if n.Status != StatusStopped || n.Reason != "stopped "+tc.point {
					t.Errorf("%s: %s (%s), want stopped %s", name, n.Status, n.Reason, tc.point)
				}
				if m.store.Has(n.Key()) {
					t.Errorf("%s: a stopped build was committed", name)
				}
				src := filepath.Join(m.store.WorkDir(n.Key()), "src")
				for _, f := range tc.made {
					if _, err := os.Stat(filepath.Join(src, f)); err != nil {
						t.Errorf("%s: %s was not made: %v", name, f, err)
					}
				}
				for _, f := range tc.notMade {
					if _, err := os.Stat(filepath.Join(src, f)); err == nil {
						t.Errorf("%s: %s was made, past the point the build was to stop at", name, f)
					}
				}
			}
			top := p.Node("top")
			want := "skipped: it depends on base 1, which was stopped " + tc.point
			if top.Status != StatusSkipped || top.Reason != want {
				t.Errorf("top: %s (%s), want skipped (%s)", top.Status, top.Reason, want)
			}
			if _, err := os.Stat(m.store.WorkDir(top.Key())); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("top was started against base's tree, which is not in the store: %v", err)
			}
			for _, s := range []string{"base 1: stopped " + tc.point, "lone 1: stopped", "top 1: " + want} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error does not say %q: %v", s, err)
				}
			}
			if !strings.Contains(out.String(), "top 1: "+want) {
				t.Errorf("the output does not say that top was skipped:\n%s", out.String())
			}

			// Without the flags the same store builds everything.
			p = m.mustBuild(m.store)
			for _, n := range p.Nodes {
				if !m.store.Has(n.Key()) {
					t.Errorf("%s not in the store after a full build", n.Name)
				}
			}
		})
	}
}

// A node skipped because its dependency was skipped names that one.
func TestStopSkipsTransitively(t *testing.T) {
	files := map[string]string{
		"recipes/leaf.yaml": `name: leaf
versions:
  - version: "1"
    source: {local: ../src}
depends:
  - name: top
build:
  make: {}
`,
	}
	for k, v := range stopProject {
		files[k] = v
	}
	m := newMiniProject(t, files)
	m.targets = []string{"leaf"}
	p := m.plan(m.store)
	ex := &Executor{Store: m.store, Jobs: 1, Until: "configure"}
	if err := ex.Run(context.Background(), p, p.Nodes); !errors.Is(err, ErrStopped) {
		t.Fatalf("Run: %v, want the build stopped", err)
	}
	if n := p.Node("leaf"); n.Status != StatusSkipped || n.Reason != "skipped: it depends on top 1, which was skipped" {
		t.Errorf("leaf: %s (%s)", n.Status, n.Reason)
	}
}

// --until and --target where a node's build kind cannot stop are refused
// before anything runs, naming the flag, the node and its build kind: a
// step the build does not have (a typo too), build-system targets of a
// script or go build. A node whose cache copy is refused is checked when
// it turns out to need a build.
func TestStopRefusedWhereTheBuildKindCannot(t *testing.T) {
	files := map[string]string{
		"recipes/scripted.yaml": `name: scripted
versions:
  - version: "1"
    source: {local: ../src}
build:
  script:
    steps:
      - name: compile
        run: touch compiled
`,
		"recipes/gone.yaml": `name: gone
versions:
  - version: "1"
    source: {local: ../src}
build:
  go:
    packages: [./cmd/gone]
`,
	}
	for k, v := range stopProject {
		files[k] = v
	}
	for _, tc := range []struct {
		name, recipe string
		set          func(*Executor)
		remote       bool
		want         string
	}{
		{"script target", "scripted", func(e *Executor) { e.Targets = []string{"all"} }, false,
			"--target all: scripted 1 is a script build, which has no build-system targets (--until stops it after one of its steps: fetch, compile)"},
		{"script step", "scripted", func(e *Executor) { e.Until = "configure" }, false,
			"--until configure: scripted 1 is a script build, whose steps are fetch, compile"},
		{"go configure", "gone", func(e *Executor) { e.Until = "configure" }, false,
			"--until configure: gone 1 is a go build, whose steps are fetch, build"},
		{"go target", "gone", func(e *Executor) { e.Targets = []string{"x"} }, false,
			"--target x: gone 1 is a go build, which has no build-system targets"},
		{"make typo", "lone", func(e *Executor) { e.Until = "instal" }, false,
			"--until instal: lone 1 is a make build, whose steps are fetch, configure, build"},
		{"refused cache copy", "scripted", func(e *Executor) { e.Targets = []string{"all"} }, true,
			"--target all: scripted 1 is a script build"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMiniProject(t, files)
			m.targets = []string{tc.recipe}
			p := m.plan(m.store)
			n := p.Node(tc.recipe)
			if tc.remote {
				// No cache to pull from: Run builds it instead.
				n.Status = StatusRemote
			}
			ex := &Executor{Store: m.store, Jobs: 1}
			tc.set(ex)
			err := ex.Run(context.Background(), p, p.Nodes)
			if err == nil || errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want an error saying %q", err, tc.want)
			}
			if _, err := os.Stat(m.store.WorkDir(n.Key())); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the build started before the flag was refused: %v", err)
			}
		})
	}
	// A stop a script build has is honoured.
	m := newMiniProject(t, files)
	m.targets = []string{"scripted"}
	p := m.plan(m.store)
	ex := &Executor{Store: m.store, Jobs: 1, Until: "compile"}
	if err := ex.Run(context.Background(), p, p.Nodes); !errors.Is(err, ErrStopped) {
		t.Fatalf("Run: %v, want the build stopped after compile", err)
	}
	if _, err := os.Stat(filepath.Join(m.store.WorkDir(p.Node("scripted").Key()), "src", "compiled")); err != nil {
		t.Errorf("the step stopped after did not run: %v", err)
	}
}
