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

// TestLLVMRealSourcesPartialBuild proves the llvm recipe on real sources:
// LLVM 15.0.6 through the apt source kind, the report's configure flags, and
// the llvm-tblgen and llvm-config targets built through the memory broker
// (about 10 minutes on 2 cores). It needs the distribution's archive.
func TestLLVMRealSourcesPartialBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the real LLVM build (about 10 minutes)")
	}
	testenv.NeedTools(t, "cmake", "ninja", "apt-get", "c++")
	proj, store := heavyProject(t, "targets: [llvm]\nstore: store\nversions: {llvm: 15.0.6}\n")

	if _, stderr, err := run(t, proj, "fetch", "llvm"); err != nil {
		for _, sign := range []string{"Could not resolve", "Temporary failure resolving", "Could not connect", "Network is unreachable", "no archive host"} {
			if strings.Contains(stderr, sign) {
				testenv.Unavailable(t, "the distribution's archive is unreachable: %s", lastLines(stderr, 3))
			}
		}
		t.Fatalf("fetch llvm 15.0.6 through apt: %v\n%s", err, stderr)
	}
	if _, stderr, err := run(t, proj, "build", "llvm", "--until", "configure"); err != nil {
		t.Fatalf("configure: %v\n%s", err, stderr)
	}
	builds, _ := filepath.Glob(filepath.Join(store, "work", "llvm-*", "build"))
	if len(builds) != 1 {
		t.Fatalf("build dirs: %v", builds)
	}
	cache, err := os.ReadFile(filepath.Join(builds[0], "CMakeCache.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{
		"CMAKE_BUILD_TYPE:STRING=Release",
		"LLVM_ENABLE_PROJECTS:STRING=clang;mlir",
		"LLVM_TARGETS_TO_BUILD:STRING=X86",
		"LLVM_ENABLE_ASSERTIONS:BOOL=OFF",
		"LLVM_ENABLE_RTTI:BOOL=ON",
		"LLVM_BUILD_LLVM_DYLIB:BOOL=ON",
		"LLVM_LINK_LLVM_DYLIB:BOOL=ON",
		"CMAKE_INSTALL_PREFIX:PATH=" + store,
		"CMAKE_GENERATOR:INTERNAL=Ninja",
		"LLVM_PARALLEL_COMPILE_JOBS:STRING=",
		"CMAKE_CXX_COMPILER_LAUNCHER:",
	} {
		if !strings.Contains(string(cache), flag) {
			t.Errorf("CMakeCache.txt lacks %s", flag)
		}
	}
	start := time.Now()
	if _, stderr, err := run(t, proj, "build", "llvm", "--target", "llvm-tblgen", "--target", "llvm-config"); err != nil {
		t.Fatalf("building llvm-tblgen and llvm-config: %v\n%s", err, stderr)
	}
	elapsed := time.Since(start)
	out, err := exec.Command(filepath.Join(builds[0], "bin", "llvm-config"), "--version").Output()
	if err != nil || strings.TrimSpace(string(out)) != "15.0.6" {
		t.Fatalf("llvm-config --version printed %q (%v), want 15.0.6", out, err)
	}
	if _, err := os.Stat(filepath.Join(builds[0], "bin", "llvm-tblgen")); err != nil {
		t.Error(err)
	}
	// Partial builds are never committed as trees.
	if n := nodesIn(t, store); len(n) != 0 {
		t.Errorf("a partial build was committed: %v", n)
	}
	st, err := toolchain.LoadStats(filepath.Join(store, "stats", "llvm-15.0.6.json"), "llvm", "15.0.6")
	if err != nil || st.Len() == 0 {
		t.Fatalf("no learned memory profile recorded for llvm 15.0.6: %v", err)
	}
	// The figures docs/llvm.md extrapolates from.
	steps := 0
	if logs, err := filepath.Glob(filepath.Join(store, "logs", "llvm", "*", "build.log")); err == nil && len(logs) == 1 {
		data, _ := os.ReadFile(logs[0])
		steps = strings.Count(string(data), "\n[")
	}
	t.Logf("llvm-tblgen + llvm-config: %d Ninja steps in %s (%.2f s per step on this machine); %d commands measured, compile p95 peak RSS %s, link p95 %s",
		steps, elapsed.Round(time.Second), elapsed.Seconds()/float64(max(steps, 1)), st.Len(),
		toolchain.FormatBytes(st.KindP95(toolchain.KindCompile)), toolchain.FormatBytes(st.KindP95(toolchain.KindLink)))
}

// TestExternalLLVMToolchain: with the distribution's LLVM as the external
// toolchain, a downstream recipe declaring `toolchain: llvm` is compiled by
// that clang, and the probe rejects a prefix that fails a check.
func TestExternalLLVMToolchain(t *testing.T) {
	testenv.NeedFiles(t, "the distribution's clang-15 (.ci/run installs llvm-15-dev clang-15 libmlir-15-dev mlir-15-tools)",
		"/usr/lib/llvm-15/bin/clang")
	proj := t.TempDir()
	src := filepath.Join(proj, "src")
	os.MkdirAll(src, 0o755)
	os.MkdirAll(filepath.Join(proj, "recipes"), 0o755)
	os.WriteFile(filepath.Join(src, "CMakeLists.txt"), []byte("cmake_minimum_required(VERSION 3.13)\nproject(hello C CXX)\nfind_package(LLVM REQUIRED CONFIG)\nmessage(STATUS \"found LLVM ${LLVM_PACKAGE_VERSION} in ${LLVM_DIR}\")\nadd_executable(hello hello.cpp)\ninstall(TARGETS hello DESTINATION bin)\n"), 0o644)
	os.WriteFile(filepath.Join(src, "hello.cpp"), []byte("#include <cstdio>\nint main() { std::puts(__VERSION__); }\n"), 0o644)
	os.WriteFile(filepath.Join(proj, "recipes", "hello.yaml"), []byte(`name: hello
versions:
  - version: "1"
    source: {local: `+src+`}
toolchain: llvm
build:
  cmake: {}
`), 0o644)
	os.WriteFile(filepath.Join(proj, "build.yaml"), []byte("targets: [hello]\nstore: store\nrecipes_dirs: [recipes]\nexternals: {llvm: /usr/lib/llvm-15}\n"), 0o644)
	if _, stderr, err := run(t, proj, "build", "hello"); err != nil {
		t.Fatalf("build: %v\n%s", err, stderr)
	}
	logs, stderr, err := run(t, proj, "logs", "hello")
	if err != nil {
		t.Fatalf("logs: %v\n%s", err, stderr)
	}
	for _, want := range []string{"The CXX compiler identification is Clang 15", "/usr/lib/llvm-15/bin/clang++", "found LLVM 15"} {
		if !strings.Contains(logs, want) {
			t.Errorf("build log lacks %q", want)
		}
	}
	bins, _ := filepath.Glob(filepath.Join(proj, "store", "nodes", "hello-*", "tree", "bin", "hello"))
	if len(bins) != 1 {
		t.Fatal("hello not installed")
	}
	out, _ := exec.Command(bins[0]).Output()
	if !strings.Contains(string(out), "Clang 15") {
		t.Errorf("hello was compiled by %q, want clang 15", out)
	}

	// The toolchain's identity is in dependents' hashes: another external
	// prefix (here one that fails the probe) is refused with the failed
	// check and what to install.
	fake := filepath.Join(proj, "fake-llvm", "bin")
	os.MkdirAll(fake, 0o755)
	os.WriteFile(filepath.Join(fake, "llvm-config"), []byte("#!/bin/sh\ncase $1 in --version) echo 15.0.6;; --targets-built) echo AArch64;; --has-rtti) echo YES;; esac\n"), 0o755)
	os.WriteFile(filepath.Join(proj, "build.yaml"), []byte("targets: [hello]\nstore: store\nrecipes_dirs: [recipes]\nexternals: {llvm: fake-llvm}\n"), 0o644)
	_, stderr, err = run(t, proj, "plan")
	if err == nil || !strings.Contains(stderr, `check "X86 target built" failed`) || !strings.Contains(stderr, "LLVM_TARGETS_TO_BUILD") {
		t.Errorf("fake LLVM accepted or unclear error: %v\n%s", err, stderr)
	}
}

// heavyProject is a project directory with build.yaml and a store (at
// "store") for the tests that build real sources; its source cache is the
// one the heavy tests of a CI run share (TRITONBUILD_TEST_CACHE), so the
// big tarballs are downloaded once.
func heavyProject(t *testing.T, buildYAML string) (proj, store string) {
	t.Helper()
	proj = t.TempDir()
	store = filepath.Join(proj, "store")
	os.MkdirAll(store, 0o755)
	if c := os.Getenv("TRITONBUILD_TEST_CACHE"); c != "" {
		os.MkdirAll(c, 0o755)
		if err := os.Symlink(c, filepath.Join(store, "sources")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(proj, "build.yaml"), []byte(buildYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	return proj, store
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
