// Package testenv is the one place that decides what an integration test
// does when a real component it needs is missing: root, the Docker engine,
// a registry binary, cgroups, a tool (git, cmake, skopeo, umoci, apt-get,
// ...), the distribution's LLVM or libtorch, a python that imports torch.
//
// With TRITONBUILD_REQUIRE_INTEGRATION=1, which .ci/run sets on a machine
// that has every component, the test fails: CI can never pass a test that
// did not run. Anywhere else it is skipped, and the reason (with what to
// install) is printed. Skips that are not about a missing component, such
// as -short, stay plain t.Skip calls; the one such skip kept here is
// SkipAllocCountUnderRace, so that the race detector's build tag is read
// in one place.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequireEnv names the environment variable that turns skips into failures
// when set to 1.
const RequireEnv = "TRITONBUILD_REQUIRE_INTEGRATION"

// Required reports whether missing components fail tests (CI).
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Unavailable ends the test because a component is missing: it fails
// under RequireEnv and skips otherwise, with the formatted reason.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("%s (required because %s=1)", reason, RequireEnv)
		return
	}
	t.Skip("skipping: " + reason)
}

// NeedTools checks that each tool is on PATH.
func NeedTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			Unavailable(t, "%s is not installed (.ci/run installs the Makefile's DEB_PACKAGES): %v", tool, err)
			return
		}
	}
}

// NeedFiles checks that each path exists (headers and libraries of a
// distribution package, say); what tells the reader which package to
// install.
func NeedFiles(t testing.TB, what string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			Unavailable(t, "%s: %v", what, err)
			return
		}
	}
}

// NeedRoot checks that the test runs as root; why says what needs it
// (chroot, mount, cgroups).
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "%s needs root", why)
	}
}

// NeedPython checks that the interpreter python can import every module.
func NeedPython(t testing.TB, python string, modules ...string) {
	t.Helper()
	out, err := exec.Command(python, "-c", "import "+strings.Join(modules, ", ")).CombinedOutput()
	if err != nil {
		Unavailable(t, "%s cannot import %s (Debian: python3-torch python3-numpy): %v %s",
			python, strings.Join(modules, ", "), err, lastLine(string(out)))
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// SkipAllocCountUnderRace skips a test that counts allocations when the
// race detector is on: it makes sync.Pool drop a share of what is put
// back, so the counts are not the program's. Not a missing component, so
// it skips under TRITONBUILD_REQUIRE_INTEGRATION too.
func SkipAllocCountUnderRace(t testing.TB) {
	t.Helper()
	if raceEnabled {
		t.Skip("allocation counts under the race detector include sync.Pool's random drops")
	}
}
