package python

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// stubProc is one running stub process and its control channel.
type stubProc struct {
	cmd    *exec.Cmd
	ch     *channel
	pid    int
	memory int64 // its memory limit, for failure messages; 0: none
	stdout *lineLogger
	stderr *lineLogger

	exited chan struct{} // closed once the process has been reaped
	// schedstat is /proc/<pid>/schedstat, the main thread's CPU figures,
	// open while the process lives (nil where it cannot be opened). The
	// descriptor names the process, not the number, so a reused pid is
	// never read.
	schedstat *os.File
	waitErr   error // valid after exited is closed

	// Once the reader runs (startReader), every frame from the stub goes
	// through it: replies to the server's frames to replies, the stub's
	// own calls (BLS, decoupled responses, metrics, model control) to the
	// handler. readDone closes when the stub's end of the pipe is gone;
	// readErr says why.
	replies  chan []byte
	readDone chan struct{}
	readErr  error

	// late is the sequence number of a batch whose caller gave up while
	// the stub ran it, 0 when none is outstanding, and lateBy the
	// execute timeout's deadline for it (zero: none). Both under the
	// instance's mu.
	late   uint64
	lateBy time.Time
}

// opPrefix starts every frame the stub sends on its own initiative (a
// call), as opposed to a reply: the stub writes "op" first.
var opPrefix = []byte(`{"op":"`)

// startReader starts the goroutine that reads the stub's frames. handle
// runs on it for each call and must not block; it owns payload and must
// copy frame if it keeps it.
func (p *stubProc) startReader(handle func(frame, payload []byte)) {
	go func() {
		defer close(p.readDone)
		for {
			frame, payload, err := p.ch.recvPayload(context.Background(), time.Time{})
			if err != nil {
				p.readErr = err
				return
			}
			if bytes.HasPrefix(frame, opPrefix) && !bytes.HasPrefix(frame, []byte(`{"op":"hello"`)) {
				handle(frame, payload)
				continue
			}
			p.ch.gotReply()
			p.replies <- bytes.Clone(frame)
		}
	}()
}

// await returns the next reply the reader received, or errTimeout when
// deadline (if not zero) passes, ctx's error when it ends first, or the
// reader's error once the stub is gone.
func (p *stubProc) await(ctx context.Context, deadline time.Time) ([]byte, error) {
	var timer <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timer = t.C
	}
	select {
	case f := <-p.replies:
		return f, nil
	case <-p.readDone:
		select {
		case f := <-p.replies:
			return f, nil
		default:
		}
		return nil, p.readErr
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer:
		return nil, errTimeout
	}
}

// helloMsg is the stub's first frame.
type helloMsg struct {
	Op         string `json:"op"`
	PID        int    `json:"pid"`
	Python     string `json:"python"`
	NumPy      string `json:"numpy"`
	Executable string `json:"executable"`
}

// stubLaunch is what starting a stub needs.
type stubLaunch struct {
	interpreter string
	script      string
	dir         string // working directory: the model's version directory
	env         []string
	shm         *shmRegion
	stdout      *lineLogger
	stderr      *lineLogger
	timeout     time.Duration // for the handshake
	memoryBytes int64         // the stub's RLIMIT_AS; 0: none
	schedBatch  bool          // the stub's threads run SCHED_BATCH
	cpus        []int         // the CPUs the stub's threads may run on (its host policy); nil: any
	numaNodes   []int         // the NUMA nodes the stub allocates from (its host policy); nil: any
}

// cpuListArg is the stub's --cpus argument for cpus: their numbers,
// comma-separated.
func cpuListArg(cpus []int) string { return "--cpus=" + backend.FormatCPUList(cpus) }

// startStub starts the stub and waits for its hello frame.
func startStub(ctx context.Context, l stubLaunch) (*stubProc, *helloMsg, error) {
	// Two pipes: toStub carries frames to the stub (it reads fd 3),
	// fromStub carries replies (it writes fd 4). fd 5 is the shared
	// memory, fd 6 the doorbell page both sides count their writes on.
	bell, bellFile, err := newDoorbell()
	if err != nil {
		return nil, nil, err
	}
	defer bellFile.Close() // the stub has its own copy, and the mapping stays
	toStubR, toStubW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("creating control pipe: %w", err)
	}
	fromStubR, fromStubW, err := os.Pipe()
	if err != nil {
		toStubR.Close()
		toStubW.Close()
		return nil, nil, fmt.Errorf("creating control pipe: %w", err)
	}
	// -u: unbuffered stdout/stderr, so print() in model.py reaches the log
	// when it happens rather than when a buffer fills.
	args := []string{"-u", l.script, "3", "4", "5", "6"}
	if l.memoryBytes > 0 {
		args = append(args, "--memory-bytes="+strconv.FormatInt(l.memoryBytes, 10))
	}
	if l.schedBatch {
		args = append(args, "--sched-batch")
	}
	if len(l.cpus) > 0 {
		args = append(args, cpuListArg(l.cpus))
	}
	cmd := exec.Command(l.interpreter, args...)
	cmd.Dir = l.dir
	cmd.Env = l.env
	cmd.Stdout = l.stdout
	cmd.Stderr = l.stderr
	cmd.ExtraFiles = []*os.File{toStubR, fromStubW, l.shm.f, bellFile}
	// Own process group so a kill reaches helpers the model started;
	// Pdeathsig so a stub never outlives a crashed server (the closed
	// control pipe also ends a stub that is waiting for work).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second
	err = startBound(cmd, l.numaNodes)
	toStubR.Close()
	fromStubW.Close()
	if err != nil {
		toStubW.Close()
		fromStubR.Close()
		return nil, nil, fmt.Errorf("starting %s: %w", l.interpreter, err)
	}
	p := &stubProc{
		cmd:    cmd,
		ch:     newChannel(toStubW, fromStubR, bell),
		pid:    cmd.Process.Pid,
		memory: l.memoryBytes,
		stdout: l.stdout,
		stderr: l.stderr,
		exited: make(chan struct{}),

		replies:  make(chan []byte, 16),
		readDone: make(chan struct{}),
	}
	if f, err := os.Open(fmt.Sprintf("/proc/%d/schedstat", p.pid)); err == nil {
		p.schedstat = f
	}
	go func() {
		p.waitErr = cmd.Wait()
		if p.schedstat != nil {
			p.schedstat.Close()
		}
		// Whatever model.py started in the stub's process group (a
		// subprocess, a multiprocessing worker) ends with the stub, however
		// the stub ended: finalize, a crash or a kill.
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		p.stdout.flush()
		p.stderr.flush()
		close(p.exited)
	}()
	frame, err := p.ch.recv(ctx, time.Now().Add(l.timeout))
	if err != nil {
		return nil, nil, p.failure("starting", l.timeout, err)
	}
	var hello helloMsg
	if err := json.Unmarshal(frame, &hello); err != nil || hello.Op != "hello" {
		p.kill()
		return nil, nil, fmt.Errorf("stub (pid %d) sent %q instead of its hello frame", p.pid, truncate(frame, 200))
	}
	return p, &hello, nil
}

// startBound starts cmd; with nodes, from an OS thread whose memory is
// bound to them, which the stub inherits across fork and exec, threads and
// children included: Triton creates an instance, and so starts its stub,
// on a thread under the instance's host policy. The thread is reset
// afterwards. Should the reset fail, the thread is kept out of the
// runtime's hands for good, but not ended: the kernel sends a child's
// Pdeathsig when the thread that started it ends, which would kill the
// stub.
func startBound(cmd *exec.Cmd, nodes []int) error {
	if len(nodes) == 0 {
		return cmd.Start()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := backend.BindMemory(nodes); err != nil {
			runtime.UnlockOSThread() // a refused binding left the thread as it was
			done <- fmt.Errorf("the stub's memory (its host policy's numa-node): %w", err)
			return
		}
		err := cmd.Start()
		reset := backend.UnbindMemory()
		done <- err
		if reset != nil {
			select {} // see above: neither unlock nor end
		}
		runtime.UnlockOSThread()
	}()
	return <-done
}

// failure turns a channel error while the stub was doing what into a
// descriptive error, killing the stub when it is still running. It waits
// briefly for the process so the exit status can be reported.
func (p *stubProc) failure(what string, timeout time.Duration, err error) error {
	switch {
	case errors.Is(err, errTimeout):
		p.kill()
		return fmt.Errorf("stub (pid %d) did not finish %s within %s and was killed", p.pid, what, timeout)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		p.kill()
		return fmt.Errorf("stub (pid %d) %s: %w", p.pid, what, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE):
		status := p.exitStatus(5 * time.Second)
		msg := fmt.Sprintf("stub (pid %d) exited while %s (%s)", p.pid, what, status)
		if p.memory > 0 {
			msg += fmt.Sprintf("; it ran under a memory limit of %d bytes (--backend-config=python,%s), which an allocation past it ends this way", p.memory, KeyStubMemoryBytes)
		}
		if tail := p.stderr.lastLines(); tail != "" {
			msg += "; its last output:\n" + tail
		}
		return errors.New(msg)
	}
	p.kill()
	return fmt.Errorf("stub (pid %d) control channel while %s: %w", p.pid, what, err)
}

// exitStatus waits up to d for the process to be reaped and describes how
// it ended, killing it if it does not end on its own.
func (p *stubProc) exitStatus(d time.Duration) string {
	select {
	case <-p.exited:
	case <-time.After(d):
		p.kill()
	}
	if p.waitErr == nil {
		return "exit status 0"
	}
	return p.waitErr.Error()
}

// execCPU reads the main thread's CPU time and run-queue wait, the first
// two fields of schedstat (nanoseconds); ok is false once the process is
// gone or where schedstat is missing.
func (p *stubProc) execCPU() (run, wait time.Duration, ok bool) {
	if p.schedstat == nil {
		return 0, 0, false
	}
	var buf [96]byte
	n, err := p.schedstat.ReadAt(buf[:], 0)
	if n == 0 || (err != nil && !errors.Is(err, io.EOF)) {
		return 0, 0, false
	}
	f := strings.Fields(string(buf[:n]))
	if len(f) < 2 {
		return 0, 0, false
	}
	r, err1 := strconv.ParseInt(f[0], 10, 64)
	w, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return time.Duration(r), time.Duration(w), true
}

// alive reports whether the process is still running.
func (p *stubProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill ends the stub's process group, waits until it is reaped and closes
// the control channel.
func (p *stubProc) kill() {
	if p.alive() {
		syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.exited
	}
	p.ch.close()
}

func truncate(b []byte, n int) string {
	s := string(b)
	if len(s) > n {
		s = s[:n] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
