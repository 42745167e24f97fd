package depcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/tritonbuild/tritonbuild"

// rule forbids every package matching from to depend, directly or through
// others, on a package matching forbidden.
type rule struct {
	name      string
	from      *regexp.Regexp
	forbidden *regexp.Regexp
}

// pkgRE matches the module's package at path p and, with a trailing "/...",
// everything below it.
func pkgRE(paths ...string) *regexp.Regexp {
	var alts []string
	for _, p := range paths {
		if base, ok := strings.CutSuffix(p, "/..."); ok {
			alts = append(alts, regexp.QuoteMeta(module+"/"+base)+"(/.*)?")
		} else {
			alts = append(alts, regexp.QuoteMeta(module+"/"+p))
		}
	}
	return regexp.MustCompile("^(" + strings.Join(alts, "|") + ")$")
}

// xzPackages are the xz decoders: the pure-Go library, ours and liblzma's
// binding.
var xzPackages = regexp.MustCompile(`^(github\.com/ulikunitz/xz(/.*)?|` + regexp.QuoteMeta(module) + `/internal/archive/xzpar(/.*)?)$`)

// rules are the dependency rules of docs/architecture.md.
var rules = []rule{
	{"the server links no build engine", pkgRE("cmd/tritonserver"), pkgRE("builder/...", "toolchain/...", "images/...")},
	{"the server links no xz code", pkgRE("cmd/tritonserver"), xzPackages},
	{"toolchain and images know nothing of recipes", pkgRE("toolchain/...", "images/..."), pkgRE("builder/...")},
	{"libraries never import commands", regexp.MustCompile("^" + regexp.QuoteMeta(module) + "/([^c]|c[^m]|cm[^d]|cmd[^/]).*$"), pkgRE("cmd/...")},
	{"internal packages import none of builder, toolchain, images, runtime", pkgRE("internal/..."), pkgRE("builder/...", "toolchain/...", "images/...", "runtime/...")},
	{"the engine's parts know nothing of the engine", pkgRE("builder/recipe", "builder/store", "builder/fetch", "builder/remote", "builder/pyenv"), pkgRE("builder")},
}

// graph maps each package to its direct imports.
type graph map[string][]string

// violations lists, for each rule, the packages of roots that break it with
// the import chain that does, shortest first.
func violations(g graph, roots []string, rules []rule) []string {
	var out []string
	for _, r := range rules {
		for _, root := range roots {
			if !r.from.MatchString(root) {
				continue
			}
			if chain := findChain(g, root, r.forbidden); chain != nil {
				out = append(out, fmt.Sprintf("%s: %s", r.name, strings.Join(chain, " -> ")))
			}
		}
	}
	sort.Strings(out)
	return out
}

// findChain returns the shortest import chain from root to a package that
// matches target, or nil.
func findChain(g graph, root string, target *regexp.Regexp) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != root && target.MatchString(p) {
			var chain []string
			for q := p; q != ""; q = prev[q] {
				chain = append([]string{strings.TrimPrefix(q, module+"/")}, chain...)
			}
			return chain
		}
		for _, imp := range g[p] {
			if _, seen := prev[imp]; !seen {
				prev[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// goList returns the import graph of the module's packages and everything
// they depend on (tests excluded), built with the given tags, and the
// module's own packages.
func goList(t *testing.T, tags string) (graph, []string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the dependency rules need the go command: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "-tags", tags, "-json=ImportPath,Imports,Module", "./...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %q ./...: %v\n%s", tags, err, stderr.String())
	}
	g := graph{}
	var own []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Module     *struct{ Path string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		g[p.ImportPath] = p.Imports
		if p.Module != nil && p.Module.Path == module {
			own = append(own, p.ImportPath)
		}
	}
	if len(own) < 20 {
		t.Fatalf("go list found only %d packages of %s: %v", len(own), module, own)
	}
	return g, own
}

// TestDependencyRules checks the rules on the module as it is, with and
// without the libtorch tag (the cgo backend has its own imports).
func TestDependencyRules(t *testing.T) {
	for _, tags := range []string{"", "libtorch"} {
		g, own := goList(t, tags)
		for _, v := range violations(g, own, rules) {
			t.Errorf("tags %q: %s", tags, v)
		}
		// The rules must apply to something: a renamed package would
		// otherwise pass them trivially.
		for _, r := range rules {
			n := 0
			for _, p := range own {
				if r.from.MatchString(p) {
					n++
				}
			}
			if n == 0 {
				t.Errorf("rule %q applies to no package", r.name)
			}
		}
	}
}

// TestRulesCatchReintroducedImports runs the rules on the real graph with
// one forbidden import added for each rule, so that a rule that cannot fire
// fails here.
func TestRulesCatchReintroducedImports(t *testing.T) {
	g, own := goList(t, "")
	cases := []struct{ from, to, rule string }{
		// The path the issue found: runtime/python importing the
		// builder's extraction package.
		{module + "/runtime/python", module + "/builder", "the server links no build engine"},
		{module + "/runtime/python", module + "/internal/archive/xzpar", "the server links no xz code"},
		{module + "/internal/archive", "github.com/ulikunitz/xz", "the server links no xz code"},
		{module + "/images", module + "/builder/store", "toolchain and images know nothing of recipes"},
		{module + "/toolchain", module + "/builder/recipe", "toolchain and images know nothing of recipes"},
		{module + "/builder", module + "/cmd/tritonbuild", "libraries never import commands"},
		{module + "/runtime/httpapi", module + "/cmd/tritonserver", "libraries never import commands"},
		{module + "/internal/filelock", module + "/runtime/backend", "internal packages import none of builder, toolchain, images, runtime"},
		{module + "/internal/archive", module + "/images", "internal packages import none of builder, toolchain, images, runtime"},
		{module + "/builder/remote", module + "/builder", "the engine's parts know nothing of the engine"},
		{module + "/builder/recipe", module + "/builder", "the engine's parts know nothing of the engine"},
		{module + "/builder/pyenv", module + "/builder", "the engine's parts know nothing of the engine"},
	}
	for _, c := range cases {
		if _, ok := g[c.from]; !ok {
			t.Errorf("%s is not a package of the module any more: update this test", c.from)
			continue
		}
		mod := graph{}
		for k, v := range g {
			mod[k] = v
		}
		mod[c.from] = append(append([]string{}, g[c.from]...), c.to)
		found := false
		for _, v := range violations(mod, own, rules) {
			if strings.HasPrefix(v, c.rule+": ") {
				found = true
			}
		}
		if !found {
			t.Errorf("importing %s from %s breaks no rule; want %q", c.to, c.from, c.rule)
		}
	}
}
