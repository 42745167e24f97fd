package recipes_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
)

const module = "github.com/tritonbuild/tritonbuild"

// TestTritonserverSourceIsItsGoDependencies checks that the files the
// tritonserver recipe's local source selects (its hash and its copy) are
// exactly the files `go build -tags libtorch ./cmd/tritonserver` reads of
// this module: a change to builder no longer rebuilds the server, and a
// change to anything the server compiles from always does.
func TestTritonserverSourceIsItsGoDependencies(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("tritonserver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := recipe.Parse("tritonserver.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range r.Versions {
		src := v.Source
		if src.Kind() != recipe.SourceLocal || src.Local != "." {
			t.Fatalf("version %s: want a local source at the project root, got %+v", v.Version, src)
		}
		got := selected(t, root, &src)
		want := goBuildFiles(t, root)
		for _, f := range missing(want, got) {
			t.Errorf("version %s: the server compiles %s, but the recipe's source leaves it out (add its package to include)", v.Version, f)
		}
		for _, f := range missing(got, want) {
			t.Errorf("version %s: the recipe's source hashes %s, which the server does not compile from", v.Version, f)
		}
	}
}

// selected walks root as builder's local source hashing does: an excluded
// directory is not entered, an excluded file not read.
func selected(t *testing.T, root string, src *recipe.Source) map[string]bool {
	t.Helper()
	files := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if src.Excluded(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() {
			files[rel] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// goBuildFiles lists what the go command reads of this module to build the
// server: go.mod, go.sum and, of every package of the module in
// `go list -deps`, its Go, C and embedded files, plus the headers in the
// module directories its cgo flags add with -I.
func goBuildFiles(t *testing.T, root string) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-tags", "libtorch", "-json", "./cmd/tritonserver")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/tritonserver: %v\n%s", err, stderr.String())
	}
	files := map[string]bool{"go.mod": true, "go.sum": true}
	add := func(abs string) {
		rel, err := filepath.Rel(root, abs)
		if err != nil || strings.HasPrefix(rel, "..") {
			return
		}
		files[filepath.ToSlash(rel)] = true
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	n := 0
	for {
		var p struct {
			Dir, ImportPath string
			Module          *struct{ Path string }
			GoFiles, CgoFiles, IgnoredGoFiles, CFiles, CXXFiles, HFiles, SFiles,
			EmbedFiles, CgoCFLAGS []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || p.Module.Path != module {
			continue
		}
		n++
		for _, list := range [][]string{p.GoFiles, p.CgoFiles, p.IgnoredGoFiles, p.CFiles, p.CXXFiles, p.HFiles, p.SFiles, p.EmbedFiles} {
			for _, f := range list {
				// Test files ignored for their build tags are still
				// test files: go build never reads them.
				if !strings.HasSuffix(f, "_test.go") {
					add(filepath.Join(p.Dir, f))
				}
			}
		}
		for _, flag := range p.CgoCFLAGS {
			inc, ok := strings.CutPrefix(flag, "-I")
			if !ok {
				continue
			}
			headers, _ := filepath.Glob(filepath.Join(inc, "*.h"))
			for _, h := range headers {
				add(h)
			}
		}
	}
	if n < 5 {
		t.Fatalf("go list named only %d packages of the module", n)
	}
	return files
}

// missing lists the names in a that b lacks, sorted.
func missing(a, b map[string]bool) []string {
	var out []string
	for f := range a {
		if !b[f] {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}
