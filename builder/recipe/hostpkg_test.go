package recipe

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// `make deps` (and CI) install what the built-in recipes declare: every
// host package of every version is in the Makefile's DEB_PACKAGES.
func TestHostPackagesInMakefile(t *testing.T) {
	testenv.NeedTools(t, "make")
	out, err := exec.Command("make", "-s", "-C", "../..", "print-deb-packages").Output()
	if err != nil {
		t.Fatalf("make print-deb-packages: %v", err)
	}
	have := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		have[p] = true
	}
	set := builtinSet(t)
	n := 0
	for _, name := range set.Names() {
		r := set.Get(name)
		for i := range r.Versions {
			for _, p := range r.HostPackagesOf(&r.Versions[i]) {
				n++
				if !have[p] {
					t.Errorf("%s %s needs %s, which the Makefile's DEB_PACKAGES lacks", name, r.Versions[i].Version, p)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no built-in recipe declares host packages: the test checks nothing")
	}
}
