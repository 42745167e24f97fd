package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/toolchain"
)

// TestPyTorchDistSourcePartialBuild proves the pytorch recipe's second
// version on the real thing: the distribution's 1.13.1+dfsg source package
// through the apt source kind (selected with --set, no build.yaml edited),
// our patches, a configure against the distribution's libraries with the
// distribution's clang 15 as the toolchain, and c10 built through the
// memory broker. The built libc10 is then linked into a program that must
// run and print what c10 computes. About 10 minutes on 2 cores.
func TestPyTorchDistSourcePartialBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the real PyTorch configure and c10 build (about 10 minutes)")
	}
	testenv.NeedTools(t, "cmake", "ninja", "apt-get", "patch", "dpkg-query")
	clang := "/usr/lib/llvm-15/bin/clang++"
	testenv.NeedFiles(t, "the distribution's clang 15 (clang-15)", clang)
	proj, store := heavyProject(t, "targets: [pytorch]\nstore: store\n")
	sel := []string{"--set", "pytorch.version=1.13.1+dfsg", "--set", "llvm.external=/usr/lib/llvm-15"}
	tb := func(args ...string) (string, string, error) {
		t.Helper()
		return run(t, proj, append(args, sel...)...)
	}

	// doctor: the host packages the recipe declares are installed, and
	// the source is reachable before anything is downloaded.
	out, _, _ := tb("doctor", "pytorch")
	if !strings.Contains(out, "[ok  ] packages for pytorch: all") {
		testenv.Unavailable(t, "pytorch 1.13.1+dfsg's host packages are not all installed (.ci/run installs the Makefile's DEB_PACKAGES):\n%s", out)
	}
	// Reachable through apt, or already fetched into the shared test
	// source cache (TRITONBUILD_TEST_CACHE) by an earlier run.
	if !strings.Contains(out, "[ok  ] source of pytorch 1.13.1+dfsg: apt source package pytorch=1.13.1+dfsg-4: ") &&
		!strings.Contains(out, "[ok  ] source of pytorch 1.13.1+dfsg: in the source cache") {
		testenv.Unavailable(t, "the distribution's archive does not serve pytorch_1.13.1+dfsg.orig.tar.xz here:\n%s", out)
	}
	if _, stderr, err := tb("fetch", "pytorch"); err != nil {
		t.Fatalf("fetch pytorch 1.13.1+dfsg through apt: %v\n%s", err, stderr)
	}

	start := time.Now()
	if _, stderr, err := tb("build", "pytorch", "--until", "configure"); err != nil {
		t.Fatalf("configure: %v\n%s", err, stderr)
	}
	configured := time.Since(start)
	works, _ := filepath.Glob(filepath.Join(store, "work", "pytorch-*"))
	if len(works) != 1 {
		t.Fatalf("work dirs: %v", works)
	}
	src, build := filepath.Join(works[0], "src"), filepath.Join(works[0], "build")
	cache, err := os.ReadFile(filepath.Join(build, "CMakeCache.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CMAKE_CXX_COMPILER:STRING=" + clang, // the toolchain, not the host's c++
		"CMAKE_CXX_COMPILER_LAUNCHER:",       // every compile goes through the broker
		"USE_SYSTEM_LIBS:BOOL=ON",            // the dfsg defaults of our first patch
		"BLAS:STRING=Generic",
		"USE_MKLDNN:BOOL=ON", // oneDNN found as the system's libdnnl
		"BUILD_PYTHON:BOOL=OFF",
		"PYTHON_EXECUTABLE:FILEPATH=/usr/bin/python3",
	} {
		if !strings.Contains(string(cache), want) {
			t.Errorf("CMakeCache.txt lacks %s", want)
		}
	}
	logs, stderr, err := tb("logs", "pytorch")
	if err != nil {
		t.Fatalf("logs: %v\n%s", err, stderr)
	}
	for _, want := range []string{"Found system oneDNN: ", "Regenerated mobile_bytecode_generated.h with ", "-- Using BLAS: ", "USE_XNNPACK           : ON"} {
		if !strings.Contains(logs, want) {
			t.Errorf("configure log lacks %q", want)
		}
	}

	start = time.Now()
	if _, stderr, err := tb("build", "pytorch", "--target", "c10"); err != nil {
		t.Fatalf("building c10: %v\n%s", err, stderr)
	}
	elapsed := time.Since(start)
	lib := filepath.Join(build, "lib", "libc10.so")
	if _, err := os.Stat(lib); err != nil {
		t.Fatal(err)
	}
	if n := nodesIn(t, store); len(n) != 0 {
		t.Errorf("a partial build was committed: %v", n)
	}
	st, err := toolchain.LoadStats(filepath.Join(store, "stats", "pytorch-1.13.1+dfsg.json"), "pytorch", "1.13.1+dfsg")
	if err != nil || st.Len() < 60 {
		t.Fatalf("the broker measured too few of c10's commands: %v (%d)", err, st.Len())
	}

	// The result runs: a program using c10's half floats, type names and
	// string formatting, linked against the libc10 just built.
	dir := t.TempDir()
	prog := filepath.Join(dir, "c10check")
	os.WriteFile(prog+".cpp", []byte(`#include <c10/core/ScalarType.h>
#include <c10/util/Half.h>
#include <c10/util/StringUtil.h>
#include <iostream>
int main() {
  c10::Half h(1.5f);
  std::cout << c10::str("half*2=", static_cast<float>(h) * 2, " ", c10::toString(c10::ScalarType::Half),
                        " double=", c10::elementSize(c10::ScalarType::Double)) << std::endl;
}
`), 0o644)
	if out, err := exec.Command(clang, "-std=c++14", "-D_GLIBCXX_USE_CXX11_ABI=1", "-I"+src, "-I"+build, prog+".cpp",
		"-L"+filepath.Dir(lib), "-lc10", "-Wl,-rpath,"+filepath.Dir(lib), "-o", prog).CombinedOutput(); err != nil {
		t.Fatalf("linking a program against the built libc10: %v\n%s", err, out)
	}
	got, err := exec.Command(prog).CombinedOutput()
	if err != nil || strings.TrimSpace(string(got)) != "half*2=3 Half double=8" {
		t.Fatalf("program using libc10 printed %q (%v)", got, err)
	}
	t.Logf("pytorch 1.13.1+dfsg: configure %s; c10 through the broker in %s; %d commands measured, compile p95 peak RSS %s, link p95 %s",
		configured.Round(time.Second), elapsed.Round(time.Second), st.Len(),
		toolchain.FormatBytes(st.KindP95(toolchain.KindCompile)), toolchain.FormatBytes(st.KindP95(toolchain.KindLink)))
}
