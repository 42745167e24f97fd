package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type planNode struct{ Name, Version, Hash, Status string }

func planJSON(t *testing.T, dir string, args ...string) map[string]planNode {
	t.Helper()
	out, stderr, err := run(t, dir, append([]string{"plan", "--json"}, args...)...)
	if err != nil {
		t.Fatalf("plan %v: %v\n%s", args, err, stderr)
	}
	var plan struct{ Nodes []planNode }
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, out)
	}
	m := map[string]planNode{}
	for _, n := range plan.Nodes {
		m[n.Name] = n
	}
	return m
}

// --set selects what build.yaml would, without a copy of it: the same
// version and options give the same node hash as the file does.
func TestSetSelectsLikeBuildYAML(t *testing.T) {
	store := t.TempDir()
	viaFile := t.TempDir()
	os.WriteFile(filepath.Join(viaFile, "build.yaml"), []byte("targets: [llvm]\nversions: {llvm: 15.0.6}\noptions: {llvm: {linker: lld, targets: [X86, AArch64]}}\n"), 0o644)
	want := planJSON(t, viaFile, "--store", store)["llvm"]

	bare := t.TempDir() // no build.yaml at all
	got := planJSON(t, bare, "llvm", "--store", store, "--set", "llvm.version=15.0.6", "--set", "llvm.options.linker=lld", "--set", "llvm.options.targets=X86,AArch64")["llvm"]
	if got.Version != "15.0.6" || got.Hash != want.Hash {
		t.Errorf("--set gives %s %s, build.yaml gives %s %s", got.Version, got.Hash, want.Version, want.Hash)
	}
	// --set applies over the profile and build.yaml: here it undoes both.
	back := planJSON(t, viaFile, "--store", store, "--set", "llvm.version=", "--set", "llvm.options.linker=", "--set", "llvm.options.targets=X86")["llvm"]
	def := planJSON(t, bare, "llvm", "--store", store)["llvm"]
	if back.Version != "15.0.7" || back.Hash != def.Hash {
		t.Errorf("undoing build.yaml with --set: %s %s, the default is %s %s", back.Version, back.Hash, def.Version, def.Hash)
	}

	_, stderr, err := run(t, bare, "plan", "llvm", "--store", store, "--set", "llvm.options.rtti=sometimes")
	if err == nil || !strings.Contains(stderr, `--set llvm.options.rtti=sometimes: option rtti of llvm is a bool`) {
		t.Errorf("bad --set value: %v\n%s", err, stderr)
	}
}

// The documented built-in profiles work from a directory without a
// build.yaml (they come from tritonbuild's own), and choose the same nodes
// as from the checkout; without --profile nothing of that build.yaml applies.
func TestBuiltinProfilesWithoutBuildYAML(t *testing.T) {
	store := t.TempDir()
	bare := t.TempDir()
	got := planJSON(t, bare, "llvm", "--store", store, "--profile", "archive")["llvm"]
	want := planJSON(t, "../..", "llvm", "--store", store, "--profile", "archive")["llvm"]
	if got.Version != "15.0.6" || got.Hash != want.Hash {
		t.Errorf("--profile archive outside the checkout: llvm %s %s, in it %s %s", got.Version, got.Hash, want.Version, want.Hash)
	}
	if def := planJSON(t, bare, "llvm", "--store", store)["llvm"]; def.Version != "15.0.7" {
		t.Errorf("no profile, no build.yaml: llvm %s, want the recipe's default 15.0.7", def.Version)
	}
	_, stderr, err := run(t, bare, "plan", "llvm", "--store", store, "--profile", "nope")
	if err == nil || !strings.Contains(stderr, `unknown profile "nope" (known: [archive system])`) {
		t.Errorf("unknown profile: %v\n%s", err, stderr)
	}
}
