package toolchain

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

func TestDoctorReport(t *testing.T) {
	bin := t.TempDir()
	for _, tool := range []string{"cc", "c++", "cmake", "make", "git", "python3", "patch", "xz"} {
		if err := os.WriteFile(filepath.Join(bin, tool), []byte("#!/bin/sh\necho '"+tool+" 1.2.3'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	installed := func(ctx context.Context, pkgs []string) (map[string]bool, error) {
		got := map[string]bool{}
		for _, p := range pkgs {
			got[p] = p != "ninja-build" && p != "libxmlsec1-dev"
		}
		return got, nil
	}
	work := t.TempDir()
	r, err := Doctor(context.Background(), DoctorOptions{
		Probe: ProbeOptions{Root: "testdata/v1", PATH: bin, Dirs: []string{work}},
		Nodes: []NodeNeed{
			{Name: "zlib", DiskBytes: 1 << 20, MemoryPerJob: 200 * mib},
			{Name: "llvm", DiskBytes: 1 << 62, MemoryPerJob: 3 * gib / 2},
			{Name: "huge", DiskBytes: 0, MemoryPerJob: 64 * gib},
		},
		QueryPackages: installed,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() {
		t.Error("report OK with ninja missing and llvm lacking disk")
	}
	if strings.Join(r.MissingTools, ",") != "ninja" {
		t.Errorf("missing tools %q", r.MissingTools)
	}
	if r.AptGetMissing != "apt-get install -y libxmlsec1-dev ninja-build" {
		t.Errorf("AptGetMissing = %q", r.AptGetMissing)
	}
	if !strings.HasPrefix(r.AptGet, "apt-get install -y build-essential cmake curl git wget software-properties-common libssl-dev") ||
		!strings.HasSuffix(r.AptGet, " llvm ninja-build") {
		t.Errorf("AptGet = %q", r.AptGet)
	}
	byName := map[string]NodeCheck{}
	for _, n := range r.Nodes {
		byName[n.Name] = n
	}
	if n := byName["zlib"]; !n.DiskOK || !n.MemoryOK || n.Plan.Jobs != 2 {
		t.Errorf("zlib = %+v", n)
	}
	if n := byName["llvm"]; n.DiskOK || !n.MemoryOK {
		t.Errorf("llvm = %+v, want disk short, memory fine", n)
	}
	if n := byName["huge"]; n.MemoryOK {
		t.Errorf("huge = %+v, want memory short (6 GiB usable in the v1 fixture)", n)
	}
	data, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(data), `"apt_get_missing"`) {
		t.Errorf("JSON: %v %s", err, data)
	}
}

func TestDoctorLiveHost(t *testing.T) {
	testenv.NeedTools(t, "dpkg-query")
	r, err := Doctor(context.Background(), DoctorOptions{Probe: ProbeOptions{Dirs: []string{t.TempDir()}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Checks {
		t.Logf("%-24s ok=%-5v hard=%-5v %s", c.Name, c.OK, c.Hard, c.Detail)
	}
	if r.Host.Tool("cmake") == nil {
		t.Error("cmake not probed")
	}
}

func TestEnvExports(t *testing.T) {
	got := EnvExports("/opt/triton", "/opt/llvm 15")
	want := `export TRITON_SERVER_HOME=/opt/triton
export LLVM_PATH='/opt/llvm 15'
export PATH='/opt/llvm 15/bin':/opt/triton/bin:"$PATH"
export LD_LIBRARY_PATH='/opt/llvm 15/lib':/opt/triton/lib${LD_LIBRARY_PATH:+:"$LD_LIBRARY_PATH"}
`
	if got != want {
		t.Errorf("EnvExports =\n%s\nwant\n%s", got, want)
	}
	// The output must be valid sh that sets what it says.
	out, err := exec.Command("sh", "-c", got+`printf '%s|%s|%s' "$LLVM_PATH" "${PATH%%:*}" "$LD_LIBRARY_PATH"`).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "/opt/llvm 15|/opt/llvm 15/bin|/opt/llvm 15/lib:/opt/triton/lib") {
		t.Errorf("sh evaluated to %q", out)
	}
	if strings.Contains(EnvExports("/p", ""), "LLVM_PATH") {
		t.Error("LLVM_PATH exported without an LLVM prefix")
	}
}

// A node's host packages join the package check and the apt-get lines, and
// a missing one fails the report (the build would fail in configure).
func TestDoctorNodePackages(t *testing.T) {
	bin := t.TempDir()
	for _, tool := range []string{"cc", "c++", "cmake", "make", "git", "python3", "patch", "xz", "ninja"} {
		if err := os.WriteFile(filepath.Join(bin, tool), []byte("#!/bin/sh\necho '"+tool+" 1.2.3'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	installed := func(ctx context.Context, pkgs []string) (map[string]bool, error) {
		got := map[string]bool{}
		for _, p := range pkgs {
			got[p] = p != "libsleef-dev"
		}
		return got, nil
	}
	r, err := Doctor(context.Background(), DoctorOptions{
		Probe:         ProbeOptions{Root: "testdata/v1", PATH: bin, Dirs: []string{t.TempDir()}},
		Nodes:         []NodeNeed{{Name: "pytorch", Packages: []string{"libfmt-dev", "libsleef-dev"}}, {Name: "zlib"}},
		QueryPackages: installed,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() {
		t.Error("report OK with a node's package missing")
	}
	var got *Check
	for i := range r.Checks {
		if r.Checks[i].Name == "packages for pytorch" {
			got = &r.Checks[i]
		}
		if r.Checks[i].Name == "packages for zlib" {
			t.Error("a node without host packages got a package check")
		}
	}
	if got == nil || got.OK || !got.Hard || got.Detail != "not installed: libsleef-dev" {
		t.Errorf("packages for pytorch: %+v", got)
	}
	if r.AptGetMissing != "apt-get install -y libsleef-dev" {
		t.Errorf("AptGetMissing = %q", r.AptGetMissing)
	}
	if !strings.HasSuffix(r.AptGet, " ninja-build libfmt-dev libsleef-dev") {
		t.Errorf("AptGet = %q", r.AptGet)
	}
}
