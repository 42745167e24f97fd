package toolchain_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/toolchain"
	"github.com/tritonbuild/tritonbuild/toolchain/memtest"
)

// helperEnv marks a re-executed test binary that plays the launcher
// ("launch") or the fixture compiler ("fakecc") instead of running tests.
const helperEnv = "TOOLCHAIN_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" && len(os.Args) > 1 {
		switch os.Args[1] {
		case "launch":
			os.Exit(toolchain.Launch(context.Background(), os.Args[2:], os.Environ()))
		case "fakecc":
			os.Exit(memtest.FakeCompiler(os.Args[2:]))
		}
	}
	os.Exit(m.Run())
}

func self(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(helperEnv, "1")
	return exe
}

func TestLaunchThroughBroker(t *testing.T) {
	exe := self(t)
	stats := toolchain.NewStats("fixture", "1")
	dir := t.TempDir()
	b, err := toolchain.StartBroker(context.Background(), toolchain.BrokerOptions{
		Budget: 1 << 30, Stats: stats, TrimPrefixes: []string{dir},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	src := filepath.Join(dir, "a.c")
	if err := os.WriteFile(src, []byte("int a;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := toolchain.Launcher{Exe: exe}
	run := func(args ...string) (int, string) {
		cmd := exec.Command(l.Prefix()[0], append(l.Prefix()[1:], args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), b.Env()...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("running launcher: %v", err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	code, out := run(exe, "fakecc", "--mem=48M", "--hold=50ms", "-c", "a.c", "-o", "a.o")
	if code != 0 {
		t.Fatalf("compile through launcher: exit %d: %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.o")); err != nil {
		t.Fatal(err)
	}
	rss, n := stats.CommandP95(toolchain.CommandID{Kind: toolchain.KindCompile, Key: "a.c"})
	if n != 1 || rss < 48<<20 || rss > 200<<20 {
		t.Errorf("recorded peak RSS %d over %d runs, want about 48 MiB for a.c", rss, n)
	}
	// Exit codes pass through; a failing compile is still a lease.
	if code, _ := run(exe, "fakecc", "--bogus", "-c", "a.c"); code != 2 {
		t.Errorf("failing compile: exit %d, want 2", code)
	}
	// A killed command reports 128+9 and counts as an OOM kill.
	marker := filepath.Join(dir, "killed")
	if code, _ := run(exe, "fakecc", "--mem=1M", "--kill-once="+marker, "-c", "a.c", "-o", "b.o"); code != 137 {
		t.Errorf("killed compile: exit %d, want 137", code)
	}
	// Commands that are neither compile nor link bypass the broker.
	if code, out := run("sh", "-c", "echo hi; exit 3"); code != 3 || !strings.Contains(out, "hi") {
		t.Errorf("plain command: exit %d, %q", code, out)
	}
	if code, out := run("/nonexistent/cc", "-c", "a.c"); code != 127 || !strings.Contains(out, "starting /nonexistent/cc") {
		t.Errorf("missing compiler: exit %d, %q", code, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.Counters().Completed < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	c := b.Counters()
	if c.Granted != 5 || c.Completed != 5 || c.OOMKills != 1 {
		t.Errorf("counters = %+v, want 5 granted/completed (the missing compiler too), 1 OOM kill", c)
	}
}

func TestLaunchWithoutBroker(t *testing.T) {
	exe := self(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.c"), nil, 0o644)
	cmd := exec.Command(exe, "launch", "--", exe, "fakecc", "--mem=1M", "--hold=1ms", "-c", "a.c", "-o", "a.o")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), toolchain.BrokerEnv+"="+filepath.Join(dir, "no-such.sock"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("launcher with a dead broker: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "without a memory grant") {
		t.Errorf("no warning about the missing broker: %q", out)
	}
}

func TestLauncherArgs(t *testing.T) {
	l := toolchain.Launcher{Exe: "/opt/tb dir/tritonbuild"}
	args := l.CMakeArgs("ccache")
	want := []string{
		"-DCMAKE_C_COMPILER_LAUNCHER=/opt/tb dir/tritonbuild;launch;--;ccache",
		"-DCMAKE_C_LINKER_LAUNCHER=/opt/tb dir/tritonbuild;launch;--",
		"-DCMAKE_CXX_COMPILER_LAUNCHER=/opt/tb dir/tritonbuild;launch;--;ccache",
		"-DCMAKE_CXX_LINKER_LAUNCHER=/opt/tb dir/tritonbuild;launch;--",
	}
	if fmt.Sprint(args) != fmt.Sprint(want) {
		t.Errorf("CMakeArgs = %q", args)
	}
	env := l.MakeEnv("cc", "c++")
	if env[0] != "CC='/opt/tb dir/tritonbuild' launch -- cc" || env[1] != "CXX='/opt/tb dir/tritonbuild' launch -- c++" {
		t.Errorf("MakeEnv = %q", env)
	}
}
