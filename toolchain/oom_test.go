package toolchain

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestOOMMonitorClassify(t *testing.T) {
	dir := t.TempDir()
	events := filepath.Join(dir, "memory.events")
	write := func(n string) {
		if err := os.WriteFile(events, []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill "+n+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("1")
	cg := &Cgroup{Version: 2, Dir: dir, Mount: dir}
	m := NewOOMMonitor(cg, nil)
	plain := errors.New("ninja: build stopped: subcommand failed")
	if err := m.Classify(plain, []byte("error: expected ';'")); !errors.Is(err, plain) {
		t.Errorf("a compile error was classified as %v", err)
	}
	if m.Classify(nil, nil) != nil {
		t.Error("success classified as failure")
	}
	err := m.Classify(plain, []byte("c++: fatal error: Killed signal terminated program cc1plus\n"))
	if !IsOOM(err) || !errors.Is(err, plain) || !strings.Contains(err.Error(), "Killed signal") {
		t.Errorf("gcc message: %v", err)
	}
	write("4")
	err = m.Classify(plain, nil)
	var oe *OOMError
	if !errors.As(err, &oe) || oe.Kills != 3 || !strings.Contains(err.Error(), "cgroup oom_kill 1 -> 4") {
		t.Errorf("counter rise: %v", err)
	}
	// A step killed by SIGKILL itself.
	kerr := exec.Command("sh", "-c", "kill -9 $$").Run()
	if err := NewOOMMonitor(nil, nil).Classify(kerr, nil); !IsOOM(err) || !strings.Contains(err.Error(), "SIGKILL") {
		t.Errorf("SIGKILL: %v", err)
	}
	xerr := exec.Command("sh", "-c", "exit 137").Run()
	if err := NewOOMMonitor(nil, nil).Classify(xerr, nil); !IsOOM(err) || !strings.Contains(err.Error(), "137") {
		t.Errorf("exit 137: %v", err)
	}
}

func TestRetryPolicy(t *testing.T) {
	for jobs, want := range map[int]int{1: 0, 2: 1, 3: 2, 4: 2, 8: 3, 16: 4, 17: 5} {
		if got := (RetryPolicy{Jobs: jobs}).MaxRetries(); got != want {
			t.Errorf("MaxRetries(%d) = %d, want %d", jobs, got, want)
		}
	}
	oom := &OOMError{Evidence: []string{"test"}, Err: errors.New("make: *** Error 2")}
	var logs []string
	p := RetryPolicy{Jobs: 8, Budget: 8 * gib, Logf: func(f string, a ...any) { logs = append(logs, f) }}

	// OOM twice, then success: attempts at 8, 4, 2 jobs.
	calls := 0
	attempts, err := p.Run(context.Background(), func(ctx context.Context, a Attempt) error {
		calls++
		if calls <= 2 {
			return oom
		}
		return nil
	})
	if err != nil || len(attempts) != 3 {
		t.Fatalf("Run = %d attempts, %v", len(attempts), err)
	}
	if attempts[1].Jobs != 4 || attempts[2].Jobs != 2 || attempts[2].Budget != 2*gib || len(logs) != 2 {
		t.Errorf("attempts = %+v, logs %d", attempts, len(logs))
	}
	if !strings.Contains(attempts[1].Reason, "retrying with 4 jobs") {
		t.Errorf("reason = %q", attempts[1].Reason)
	}

	// Always OOM: 8, 4, 2, 1 then give up, log2(8) = 3 retries.
	attempts, err = p.Run(context.Background(), func(context.Context, Attempt) error { return oom })
	var ex *RetryExhaustedError
	if !errors.As(err, &ex) || len(attempts) != 4 || attempts[3].Jobs != 1 || !IsOOM(err) {
		t.Fatalf("exhausted: %d attempts, %v", len(attempts), err)
	}
	if !strings.Contains(err.Error(), "after 4 attempts") {
		t.Errorf("message %q", err)
	}

	// Odd counts round up: 3, 2, 1 is ceil(log2(3)) = 2 retries.
	attempts, _ = RetryPolicy{Jobs: 3, Budget: 3}.Run(context.Background(), func(context.Context, Attempt) error { return oom })
	if len(attempts) != 3 || attempts[1].Jobs != 2 || attempts[2].Jobs != 1 {
		t.Errorf("jobs 3: %+v", attempts)
	}

	// A non-memory failure is not retried.
	plain := errors.New("compile error")
	attempts, err = p.Run(context.Background(), func(context.Context, Attempt) error { return plain })
	if !errors.Is(err, plain) || len(attempts) != 1 {
		t.Errorf("plain failure: %d attempts, %v", len(attempts), err)
	}
}
