package toolchain_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/toolchain"
)

// distccd is a daemon started for one test.
type distccd struct {
	port int
	mu   sync.Mutex
	log  bytes.Buffer
}

func (d *distccd) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.Write(p)
}

func (d *distccd) logText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// startDistccd runs distccd on a free loopback port, accepting only
// loopback clients, with jobs slots; as root it drops to nobody.
func startDistccd(t *testing.T, jobs int) *distccd {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &distccd{port: l.Addr().(*net.TCPAddr).Port}
	l.Close()
	args := []string{"--daemon", "--no-detach", "--log-stderr", "--log-level", "info",
		"--allow", "127.0.0.1", "--listen", "127.0.0.1", "--port", fmt.Sprint(d.port), "--jobs", fmt.Sprint(jobs)}
	if os.Geteuid() == 0 {
		args = append(args, "--user", "nobody")
	}
	cmd := exec.Command("distccd", args...)
	cmd.Stdout, cmd.Stderr = d, d
	// Its own process group: distccd forks workers, and all of them
	// must go when the test ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting distccd: %v", err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", d.port), time.Second)
		if err == nil {
			c.Close()
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("distccd on port %d never answered: %v\n%s", d.port, err, d.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestIntegrationDistccFarm compiles the fixture on two distccd daemons
// with more jobs than local CPUs, through broker -> distcc -> cc, and
// checks that both daemons compiled, that the broker granted the compiles
// as remote, and that the objects equal a local build's byte for byte.
func TestIntegrationDistccFarm(t *testing.T) {
	testenv.NeedTools(t, "cmake", "ninja", "cc", "distcc", "distccd")
	exe := self(t)
	d1, d2 := startDistccd(t, 3), startDistccd(t, 3)
	cfg := toolchain.DistccConfig{Hosts: []string{
		fmt.Sprintf("127.0.0.1:%d/3", d1.port), fmt.Sprintf("127.0.0.1:%d/3", d2.port)}}
	jobs := cfg.AdjustJobs(toolchain.JobPlan{Jobs: 2, LinkJobs: 2}).Jobs
	if jobs != 8 {
		t.Fatalf("planned %d jobs, want 2 local + 6 remote", jobs)
	}
	// distcc keeps host locks and backoff state in DISTCC_DIR.
	env := append(cfg.Env(), "DISTCC_DIR="+t.TempDir())
	remoteWork := filepath.Join(t.TempDir(), "remote")
	counters := buildInWorkDir(t, exe, remoteWork, cfg.Inner(), env, jobs)
	t.Logf("broker: %+v", counters)
	if counters.Remote != 13 {
		t.Errorf("broker granted %d compiles as remote, want all 13", counters.Remote)
	}
	localWork := filepath.Join(t.TempDir(), "local")
	buildInWorkDir(t, exe, localWork, nil, nil, 2)

	for i, d := range []*distccd{d1, d2} {
		if n := strings.Count(d.logText(), "COMPILE_OK"); n == 0 {
			t.Errorf("distccd %d compiled nothing:\n%s", i+1, d.logText())
		} else {
			t.Logf("distccd %d on port %d compiled %d files", i+1, d.port, n)
		}
	}
	objs, _ := filepath.Glob(filepath.Join(localWork, "build", "CMakeFiles", "app.dir", "*.o"))
	if len(objs) != 13 {
		t.Fatalf("local build has %d objects, want 13", len(objs))
	}
	for _, lo := range objs {
		rel, _ := filepath.Rel(localWork, lo)
		local, _ := os.ReadFile(lo)
		remote, err := os.ReadFile(filepath.Join(remoteWork, rel))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(local, remote) {
			t.Errorf("%s differs between the distcc and the local build", rel)
		}
	}

	// The doctor's host checks: both hosts pass; a closed port fails.
	closed := fmt.Sprintf("127.0.0.1:%d/2", freeTCPPort(t))
	checks := toolchain.DistccChecks(context.Background(), toolchain.DistccConfig{Hosts: append(cfg.Hosts, closed)}, "cc")
	var failed []string
	for _, c := range checks {
		t.Logf("%s ok=%v: %s", c.Name, c.OK, c.Detail)
		if !c.OK {
			failed = append(failed, c.Name)
		}
	}
	if len(checks) != 5 || len(failed) != 1 || !strings.Contains(failed[0], closed) {
		t.Errorf("checks failed %v, want only the closed port %s (of 5 checks)", failed, closed)
	}
}

func freeTCPPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
