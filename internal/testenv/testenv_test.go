package testenv_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// recorder notes whether Unavailable skipped or failed. Its Skip and Fatalf
// return instead of ending the goroutine, which Unavailable allows for.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skip(args ...any)                  { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestUnavailableSkipsOrFails(t *testing.T) {
	t.Setenv(testenv.RequireEnv, "")
	r := &recorder{TB: t}
	testenv.Unavailable(r, "no %s here", "docker")
	if r.failed != "" || !strings.Contains(r.skipped, "no docker here") {
		t.Errorf("without %s: skipped %q, failed %q; want a skip with the reason", testenv.RequireEnv, r.skipped, r.failed)
	}

	t.Setenv(testenv.RequireEnv, "1")
	r = &recorder{TB: t}
	testenv.Unavailable(r, "no %s here", "docker")
	if r.skipped != "" || !strings.Contains(r.failed, "no docker here") || !strings.Contains(r.failed, testenv.RequireEnv) {
		t.Errorf("with %s=1: skipped %q, failed %q; want a failure naming the reason and the variable", testenv.RequireEnv, r.skipped, r.failed)
	}
}

func TestNeedChecks(t *testing.T) {
	t.Setenv(testenv.RequireEnv, "1")
	for name, check := range map[string]func(testing.TB){
		"tool":   func(tb testing.TB) { testenv.NeedTools(tb, "sh", "tritonbuild-no-such-tool") },
		"file":   func(tb testing.TB) { testenv.NeedFiles(tb, "the fixture", "/nonexistent/tritonbuild") },
		"python": func(tb testing.TB) { testenv.NeedPython(tb, "sh", "torch") },
	} {
		r := &recorder{TB: t}
		check(r)
		if r.failed == "" {
			t.Errorf("%s: a missing component did not fail under %s=1", name, testenv.RequireEnv)
		}
	}
	r := &recorder{TB: t}
	testenv.NeedTools(r, "sh")
	testenv.NeedFiles(r, "the root", "/")
	if r.failed != "" || r.skipped != "" {
		t.Errorf("present components: failed %q, skipped %q", r.failed, r.skipped)
	}
}
