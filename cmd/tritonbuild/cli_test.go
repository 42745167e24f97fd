package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tbBin is the tritonbuild binary built once for the tests that need a real
// process (SIGKILL, launchers calling back into it).
var tbBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tritonbuild-cli")
	if err != nil {
		panic(err)
	}
	tbBin = filepath.Join(dir, "tritonbuild")
	if out, err := exec.Command("go", "build", "-o", tbBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building tritonbuild: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func run(t *testing.T, dir string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(tbBin, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// The default build.yaml plans the built-in recipes in dependency order,
// with hashes, without network access or a populated store.
func TestPlanJSONDefaultConfig(t *testing.T) {
	out, stderr, err := run(t, "../..", "plan", "--json", "--store", t.TempDir())
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, stderr)
	}
	var plan struct {
		Nodes []struct {
			Name, Version, Hash, Status string
			Depends                     []string
		}
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("plan --json output is not JSON: %v\n%s", err, out)
	}
	var names []string
	pos := map[string]int{}
	for i, n := range plan.Nodes {
		names = append(names, n.Name)
		pos[n.Name] = i
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(n.Hash) || n.Status != "build" {
			t.Errorf("%s: hash %q status %q", n.Name, n.Hash, n.Status)
		}
		for _, d := range n.Depends {
			if pos[d] >= i {
				t.Errorf("%s listed before its dependency %s", n.Name, d)
			}
		}
	}
	for _, want := range []string{"llvm", "pytorch", "runtime", "python-backend-utils", "tritonserver"} {
		if _, ok := pos[want]; !ok {
			t.Errorf("plan lacks %s: %v", want, names)
		}
	}
	// The server's closure (what install lays into the prefix and image
	// puts into layers) carries the python backend's module.
	if i, ok := pos["tritonserver"]; ok && !slices.Contains(plan.Nodes[i].Depends, "python-backend-utils") {
		t.Errorf("tritonserver does not depend on python-backend-utils: %v", plan.Nodes[i].Depends)
	}
}

func TestSchemaIsJSONSchema(t *testing.T) {
	out, stderr, err := run(t, ".", "schema")
	if err != nil {
		t.Fatalf("schema: %v\n%s", err, stderr)
	}
	var s map[string]any
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"versions", "build", "depends", "options", "memory", "probe"} {
		if !strings.Contains(out, `"`+field+`"`) {
			t.Errorf("schema lacks %s", field)
		}
	}
}

func TestBadRecipeDirIsRefusedBeforeAnythingRuns(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x.yaml"), []byte("name: x\nversions: 3\n"), 0o644)
	_, stderr, err := run(t, t.TempDir(), "plan", "--recipes", dir, "--store", t.TempDir(), "x")
	if err == nil || !strings.Contains(stderr, "x.yaml:2:11: versions:") {
		t.Errorf("got %v: %s", err, stderr)
	}
}

// slowProject is a recipe whose build writes part of its tree and then
// waits, so a test can kill tritonbuild in the middle.
func slowProject(t *testing.T) (proj, marker, release string) {
	proj = t.TempDir()
	src := filepath.Join(proj, "src")
	os.MkdirAll(filepath.Join(proj, "recipes"), 0o755)
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "data.txt"), []byte("payload\n"), 0o644)
	marker = filepath.Join(proj, "started")
	release = filepath.Join(proj, "release")
	os.WriteFile(filepath.Join(proj, "recipes", "slow.yaml"), []byte(`name: slow
versions:
  - version: "1"
    source: {local: `+src+`}
build:
  script:
    steps:
      - name: install
        run: |
          mkdir -p "$DESTDIR${prefix}/share"
          cp data.txt "$DESTDIR${prefix}/share/half"
          touch `+marker+`
          while [ ! -e `+release+` ]; do sleep 0.1; done
          cp data.txt "$DESTDIR${prefix}/share/full"
`), 0o644)
	os.WriteFile(filepath.Join(proj, "build.yaml"), []byte("targets: [slow]\nstore: store\nrecipes_dirs: [recipes]\n"), 0o644)
	return proj, marker, release
}

func waitFor(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}

func nodesIn(t *testing.T, store string) []string {
	entries, _ := os.ReadDir(filepath.Join(store, "nodes"))
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// SIGKILL in the middle of a build leaves no tree that looks complete; the
// rerun builds it and commits it whole.
func TestSIGKILLMidBuildThenRerun(t *testing.T) {
	proj, marker, release := slowProject(t)
	store := filepath.Join(proj, "store")
	cmd := exec.Command(tbBin, "build", "slow")
	cmd.Dir = proj
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, marker)
	if n := nodesIn(t, store); len(n) != 0 {
		t.Fatalf("a node is visible while building: %v", n)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	if n := nodesIn(t, store); len(n) != 0 {
		t.Fatalf("after SIGKILL the store shows %v", n)
	}
	os.WriteFile(release, nil, 0o644)
	if _, stderr, err := run(t, proj, "build", "slow"); err != nil {
		t.Fatalf("rerun: %v\n%s", err, stderr)
	}
	nodes := nodesIn(t, store)
	if len(nodes) != 1 {
		t.Fatalf("store nodes %v, want one", nodes)
	}
	for _, f := range []string{"tree/share/half", "tree/share/full", "manifest.json"} {
		if _, err := os.Stat(filepath.Join(store, "nodes", nodes[0], f)); err != nil {
			t.Errorf("committed node lacks %s", f)
		}
	}
	if left, _ := os.ReadDir(filepath.Join(store, "staging")); len(left) != 0 {
		t.Errorf("staging not cleaned: %d entries", len(left))
	}
	out, _, err := run(t, proj, "plan", "--json")
	if err != nil || !strings.Contains(out, `"status": "cached"`) {
		t.Errorf("plan after rerun: %v %s", err, out)
	}
}

// Two processes sharing one store: the second waits for the first's lock
// and then finds the node built.
func TestTwoProcessesShareOneStore(t *testing.T) {
	proj, marker, release := slowProject(t)
	first := exec.Command(tbBin, "build", "slow")
	first.Dir = proj
	var e1 bytes.Buffer
	first.Stderr = &e1
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, marker)
	second := exec.Command(tbBin, "build", "slow")
	second.Dir = proj
	var e2 bytes.Buffer
	second.Stderr = &e2
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	os.WriteFile(release, nil, 0o644)
	if err := first.Wait(); err != nil {
		t.Fatalf("first: %v\n%s", err, e1.String())
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("second: %v\n%s", err, e2.String())
	}
	if !strings.Contains(e2.String(), "built meanwhile by another process") {
		t.Errorf("second process did not wait for the first:\n%s", e2.String())
	}
	if n := nodesIn(t, filepath.Join(proj, "store")); len(n) != 1 {
		t.Errorf("store nodes %v", n)
	}
}
