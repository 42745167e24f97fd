package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Defect 10: doctor and plan agree on the reserve and the memory per job
// (doctor used the default reserve and only the recipe's declaration).
func TestDoctorAndPlanAgreeOnMemory(t *testing.T) {
	proj, _, _ := slowProject(t)
	cfg := filepath.Join(proj, "build.yaml")
	data, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, append(data, []byte("jobs: {reserve: 3GiB}\n")...), 0o644)
	recipe := filepath.Join(proj, "recipes", "slow.yaml")
	data, _ = os.ReadFile(recipe)
	os.WriteFile(recipe, append(data, []byte("memory: {compile: 700MiB, link: 900MiB}\n")...), 0o644)

	out, stderr, err := run(t, proj, "plan")
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, stderr)
	}
	terms := regexp.MustCompile(`- (\S+ \S+) reserve / (\S+ \S+) per compile`)
	pm := terms.FindStringSubmatch(out)
	if pm == nil {
		t.Fatalf("plan output without reserve and per-compile figures:\n%s", out)
	}
	out, stderr, _ = run(t, proj, "doctor", "--json")
	var rep struct {
		Nodes []struct {
			Name string
			Plan struct{ Reason string }
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Nodes) != 1 {
		t.Fatalf("doctor --json: %v\n%s\n%s", err, out, stderr)
	}
	dm := terms.FindStringSubmatch(rep.Nodes[0].Plan.Reason)
	if dm == nil || dm[1] != pm[1] || dm[2] != pm[2] || pm[1] != "3.0 GiB" || pm[2] != "700.0 MiB" {
		t.Errorf("plan says %q, doctor says %q", pm, dm)
	}
}

// Defect 10: env warns about paths that do not exist.
func TestEnvWarnsAboutMissingPaths(t *testing.T) {
	proj, _, _ := slowProject(t)
	out, stderr, err := run(t, proj, "env", "--prefix", filepath.Join(proj, "nowhere"))
	if err != nil {
		t.Fatalf("env: %v\n%s", err, stderr)
	}
	if !strings.Contains(out, "nowhere") || !strings.Contains(stderr, "warning: the prefix "+filepath.Join(proj, "nowhere")+" does not exist yet") {
		t.Errorf("env output:\n%s\nstderr:\n%s", out, stderr)
	}
}

// `tritonbuild gc` lists a tree that build.yaml no longer reaches, removes
// it only with --delete, and keeps the one it reaches.
func TestGCCommand(t *testing.T) {
	proj, _, release := slowProject(t)
	os.WriteFile(release, nil, 0o644)
	if _, stderr, err := run(t, proj, "build", "slow"); err != nil {
		t.Fatalf("build: %v\n%s", err, stderr)
	}
	old := nodesIn(t, filepath.Join(proj, "store"))
	os.WriteFile(filepath.Join(proj, "src", "data.txt"), []byte("changed\n"), 0o644)
	if _, stderr, err := run(t, proj, "build", "slow"); err != nil {
		t.Fatalf("second build: %v\n%s", err, stderr)
	}
	out, stderr, err := run(t, proj, "gc", "--python-envs", t.TempDir())
	if err != nil || !strings.Contains(out, old[0]) || !strings.Contains(out, "tree no profile of build.yaml reaches") || !strings.Contains(stderr, "dry run") {
		t.Fatalf("gc: %v\n%s\n%s", err, out, stderr)
	}
	if n := nodesIn(t, filepath.Join(proj, "store")); len(n) != 2 {
		t.Fatalf("a dry run removed trees: %v", n)
	}
	if _, stderr, err := run(t, proj, "gc", "--delete", "--python-envs", t.TempDir()); err != nil {
		t.Fatalf("gc --delete: %v\n%s", err, stderr)
	}
	if n := nodesIn(t, filepath.Join(proj, "store")); len(n) != 1 || n[0] == old[0] {
		t.Fatalf("after gc --delete: %v (old %v)", n, old)
	}
}
