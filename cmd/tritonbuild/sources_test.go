package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The built-in recipes' local sources (runtime, tritonserver) resolve
// against the tritonbuild checkout or, for a binary that knows none, its
// embedded copy; never against the current directory or build.yaml's. A
// build.yaml copied elsewhere plans the very same nodes as the repo's.
func TestBuiltinSourcesIndependentOfConfigDir(t *testing.T) {
	data, err := os.ReadFile("../../build.yaml")
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	os.WriteFile(filepath.Join(elsewhere, "build.yaml"), data, 0o644)
	store := t.TempDir()
	want := planJSON(t, "../..", "--store", store, "--profile", "system")

	// The same binary (it knows its checkout) from another directory.
	got := planJSON(t, elsewhere, "--store", store, "--profile", "system")
	for _, name := range []string{"runtime", "tritonserver"} {
		if got[name].Hash != want[name].Hash {
			t.Errorf("%s from a copied build.yaml: %s, from the repo: %s", name, got[name].Hash, want[name].Hash)
		}
	}
	if _, err := os.Stat(filepath.Join(store, "builtin")); err == nil {
		t.Error("a binary with a checkout unpacked its embedded copy")
	}

	// A binary that does not know where it was built (-trimpath, as a
	// release build is) uses its embedded copy, unpacked into the store.
	if testing.Short() {
		t.Skip("-short: skipping the -trimpath build of tritonbuild")
	}
	trim := filepath.Join(t.TempDir(), "tritonbuild")
	if out, err := exec.Command("go", "build", "-trimpath", "-o", trim, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -trimpath: %v\n%s", err, out)
	}
	saved := tbBin
	tbBin = trim
	defer func() { tbBin = saved }()
	store2 := t.TempDir()
	emb := planJSON(t, elsewhere, "--store", store2, "--profile", "system")
	for _, name := range []string{"runtime", "tritonserver"} {
		if emb[name].Hash != want[name].Hash {
			t.Errorf("%s from the embedded copy: %s, from the checkout: %s", name, emb[name].Hash, want[name].Hash)
		}
	}
	unpacked, _ := filepath.Glob(filepath.Join(store2, "builtin", "*", "runtime", "csrc", "tbtorch.cpp"))
	if len(unpacked) != 1 {
		t.Errorf("embedded copy not unpacked into the store: %v", unpacked)
	}
	// Without any build.yaml, from a directory that has nothing to do with
	// the project, the built-in recipes still plan.
	if _, stderr, err := run(t, t.TempDir(), "plan", "tritonserver", "--store", store2, "--set", "llvm.external=/usr/lib/llvm-15", "--set", "pytorch.external=/usr"); err != nil {
		t.Errorf("plan from an unrelated directory: %v\n%s", err, stderr)
	}
}
