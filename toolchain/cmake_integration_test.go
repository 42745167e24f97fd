package toolchain_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/toolchain"
)

// TestIntegrationCMakeNinjaLauncher builds a small C project with the real
// CMake, Ninja and C compiler, routing compiles and the link through the
// launcher with Launcher.CMakeArgs, and checks the broker saw each of them.
func TestIntegrationCMakeNinjaLauncher(t *testing.T) {
	testenv.NeedTools(t, "cmake", "ninja", "cc")
	exe := self(t)
	src, build := t.TempDir(), t.TempDir()
	files := map[string]string{
		"CMakeLists.txt": "cmake_minimum_required(VERSION 3.21)\nproject(fixture C)\nadd_executable(app main.c util.c)\n",
		"main.c":         "int util(void);\nint main(void) { return util(); }\n",
		"util.c":         "int util(void) { return 0; }\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stats := toolchain.NewStats("fixture", "1")
	b, err := toolchain.StartBroker(context.Background(), toolchain.BrokerOptions{
		Budget: 4 << 30, Stats: stats, TrimPrefixes: []string{src, build},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	env := append(os.Environ(), b.Env()...)
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("cmake", append([]string{"-G", "Ninja", "-S", src, "-B", build}, toolchain.Launcher{Exe: exe}.CMakeArgs()...)...)
	run("ninja", "-C", build, "-j2")
	run(filepath.Join(build, "app"))
	for _, id := range []toolchain.CommandID{
		{Kind: toolchain.KindCompile, Key: "main.c"},
		{Kind: toolchain.KindCompile, Key: "util.c"},
		{Kind: toolchain.KindLink, Key: "app"},
	} {
		if rss, n := stats.CommandP95(id); n != 1 || rss <= 0 {
			t.Errorf("%s %s: %d runs recorded (peak %d), want 1", id.Kind, id.Key, n, rss)
		}
	}
	if c := b.Counters(); c.Completed < 3 || c.Abandoned != 0 {
		t.Errorf("counters = %+v", c)
	}
}
