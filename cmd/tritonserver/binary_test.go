package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// builtBinary is the tritonserver binary these tests build once per test
// process (the tests that run the real program in its own process: exit
// status, signals, resident memory, file-descriptor limits).
var builtBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// serverBinary builds the server (without the libtorch tag: the tests
// that run it serve python models) and returns its path.
func serverBinary(t *testing.T) string {
	t.Helper()
	b := &builtBinary
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "tritonserver-bin-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "tritonserver")
		if out, err := exec.Command("go", "build", "-o", b.path, ".").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// removeBinary deletes what serverBinary built (TestMain, after the tests).
func removeBinary() {
	if builtBinary.dir != "" {
		_ = os.RemoveAll(builtBinary.dir)
	}
}

// serverProc is the server binary running in its own process on loopback
// ports the kernel chose.
type serverProc struct {
	cmd   *exec.Cmd
	addrs map[string]string // "HTTPService", "GRPCInferenceService", "Metrics Service" -> host:port
	logs  *syncBuffer
	done  chan struct{} // closed once the process exited and its log was read
	state *os.ProcessState
}

// startBinary runs the server with args after the loopback address and
// port flags, waits until every service it enables is listening and
// returns it; the process is killed when the test ends if it still runs.
// With ulimitFiles > 0 it runs under that open-file limit (soft and hard,
// so that the Go runtime cannot raise it).
func startBinary(t *testing.T, ulimitFiles int, args ...string) *serverProc {
	t.Helper()
	bin := serverBinary(t)
	all := append([]string{"--http-address=127.0.0.1", "--http-port=0", "--grpc-address=127.0.0.1", "--grpc-port=0",
		"--metrics-address=127.0.0.1", "--metrics-port=0", "--backend-config=python,env-cache-dir=" + t.TempDir()}, args...)
	want := 3
	for _, a := range all {
		if strings.HasPrefix(a, "--allow-") && strings.HasSuffix(a, "=false") && a != "--allow-client-shm=false" && a != "--allow-cpu-metrics=false" {
			want--
		}
	}
	var cmd *exec.Cmd
	if ulimitFiles > 0 {
		cmd = exec.Command("sh", append([]string{"-c", `ulimit -n "$0" && exec "$@"`, strconv.Itoa(ulimitFiles), bin}, all...)...)
	} else {
		cmd = exec.Command(bin, all...)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serverProc{cmd: cmd, addrs: map[string]string{}, logs: &syncBuffer{}, done: make(chan struct{})}
	ready := make(chan map[string]string, 1)
	go func() {
		defer close(p.done)
		found := map[string]string{}
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintln(p.logs, sc.Text())
			if m := startedRE.FindStringSubmatch(sc.Text()); m != nil {
				found[m[1]] = m[2]
				if len(found) == want {
					ready <- found
				}
			}
		}
		_ = cmd.Wait()
		p.state = cmd.ProcessState
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("server log:\n%s", p.logs)
		}
	})
	select {
	case p.addrs = <-ready:
	case <-p.done:
		t.Fatalf("the server exited before it served (%v):\n%s", p.state, p.logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("the server did not start within 60 s:\n%s", p.logs)
	}
	return p
}

// signal sends sig to the server.
func (p *serverProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// wait waits up to d for the server to exit and returns its exit code,
// failing the test if it is still running then.
func (p *serverProc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.state.ExitCode()
	case <-time.After(d):
		t.Fatalf("the server still runs %s later", d)
		return -1
	}
}

// pid is the server's process id (sh execs it, so with a ulimit too).
func (p *serverProc) pid() int { return p.cmd.Process.Pid }

// rss returns the server process's resident set size in bytes.
func (p *serverProc) rss(t *testing.T) int64 {
	t.Helper()
	n, err := rssOf(p.pid())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// rssOf reads the resident set size (VmRSS) of pid, in bytes.
func rssOf(pid int) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS of %d: %q", pid, line)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// openFiles counts the server's open file descriptors.
func (p *serverProc) openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.pid()))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// stubsOf lists the running python stubs whose parent is pid.
func stubsOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state ppid ...
		var state string
		var ppid int
		if _, err := fmt.Sscan(string(stat[bytes.LastIndexByte(stat, ')')+2:]), &state, &ppid); err != nil || ppid != pid || state == "Z" {
			continue
		}
		if cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); bytes.Contains(cmdline, []byte("tritonbuild_stub.py")) {
			out = append(out, child)
		}
	}
	return out
}
