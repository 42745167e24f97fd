package toolchain

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// killedPhrases are what compiler drivers print when the kernel killed the
// real compiler under them; the driver then exits 1, not 137, so the text
// is the only sign of an OOM kill.
var killedPhrases = [][]byte{
	[]byte("Killed signal terminated program"),  // gcc
	[]byte("unable to execute command: Killed"), // clang
}

// Launch runs one build command (args[0] and its arguments; a leading "--"
// is dropped) under the memory broker named by TRITONBUILD_BROKER in env,
// and returns the exit status for the process to exit with: the command's
// own, or 128+signal when a signal killed it, as a shell reports it.
//
// A compile or link first waits for a grant; other commands run at once.
// When no broker is reachable the command runs anyway after a warning on
// stderr: a launcher left in a build directory must not break manual
// rebuilds.
func Launch(ctx context.Context, args []string, env []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "tritonbuild launch: no command given (usage: tritonbuild launch -- CMD ARGS...)")
		return 2
	}
	id := ClassifyCommand(args)
	sock := envLookup(env, BrokerEnv)
	var lease *brokerLease
	if sock != "" && id.Kind != KindOther {
		var err error
		lease, err = acquire(ctx, sock, id, id.Kind == KindCompile && sendsRemote(args, env))
		if err != nil {
			fmt.Fprintf(os.Stderr, "tritonbuild launch: %v; running %s without a memory grant\n", err, args[0])
			lease = nil
		}
	}
	res := runCommand(ctx, args, env)
	if res.startErr != nil {
		fmt.Fprintf(os.Stderr, "tritonbuild launch: %v\n", res.startErr)
	}
	if lease != nil {
		if err := lease.done(res); err != nil {
			fmt.Fprintf(os.Stderr, "tritonbuild launch: reporting to the memory broker: %v\n", err)
		}
	}
	return res.status
}

func envLookup(env []string, key string) string {
	v := ""
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == key {
			v = val // the last one wins, as in exec
		}
	}
	return v
}

type runResult struct {
	status   int
	peakRSS  int64
	wall     time.Duration
	oom      bool
	startErr error
}

// runCommand runs args with the launcher's stdio, forwarding termination
// signals so that an interrupted build stops its compilers, and returns the
// exit status with the peak RSS from wait4's rusage (which covers the
// driver's own children: cc1plus under gcc).
func runCommand(ctx context.Context, args, env []string) runResult {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout = os.Stdin, os.Stdout
	det := &killDetector{w: os.Stderr}
	cmd.Stderr = det
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		status := 127
		if errors.Is(err, os.ErrPermission) {
			status = 126
		}
		return runResult{status: status, startErr: fmt.Errorf("starting %s: %w", args[0], err)}
	}
	waited := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-ctx.Done():
				cmd.Process.Kill()
				return
			case <-waited:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(waited)
	res := runResult{wall: time.Since(start), oom: det.seen()}
	ps := cmd.ProcessState
	if ps == nil {
		return runResult{status: 1, startErr: fmt.Errorf("running %s: %w", args[0], err)}
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		res.peakRSS = ru.Maxrss * 1024 // KiB on Linux
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		res.status = 128 + int(ws.Signal())
		// Nothing in a build sends SIGKILL but the OOM killer (or a user
		// who then does not care about the classification).
		res.oom = res.oom || ws.Signal() == syscall.SIGKILL
	default:
		res.status = ps.ExitCode()
	}
	return res
}

// killDetector passes stderr through and watches for the driver's
// "compiler was killed" messages, keeping a tail so that a phrase split
// across writes is still found.
type killDetector struct {
	w     io.Writer
	mu    sync.Mutex
	tail  []byte
	found bool
}

func (d *killDetector) Write(p []byte) (int, error) {
	d.mu.Lock()
	if !d.found {
		buf := append(d.tail, p...)
		for _, ph := range killedPhrases {
			if bytes.Contains(buf, ph) {
				d.found = true
			}
		}
		keep := 64
		if len(buf) > keep {
			buf = buf[len(buf)-keep:]
		}
		d.tail = append(d.tail[:0], buf...)
	}
	d.mu.Unlock()
	return d.w.Write(p)
}

func (d *killDetector) seen() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.found
}

type brokerLease struct {
	conn net.Conn
	r    *bufio.Reader
}

// acquire asks the broker for a grant and blocks until it comes.
// remote says the compile runs on a distcc host, so only its
// preprocessing costs memory here.
func acquire(ctx context.Context, sock string, id CommandID, remote bool) (*brokerLease, error) {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := d.DialContext(dctx, "unix", sock)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("memory broker at %s unreachable: %w", sock, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	cwd, _ := os.Getwd()
	l := &brokerLease{conn: conn, r: bufio.NewReaderSize(conn, maxLine)}
	req := brokerMsg{Op: "acquire", Kind: id.Kind, Key: id.Key, Cwd: cwd, PID: os.Getpid(), Remote: remote}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		conn.Close()
		return nil, fmt.Errorf("asking the memory broker: %w", err)
	}
	var grant brokerMsg
	if err := readMsg(l.r, &grant); err != nil {
		conn.Close()
		return nil, fmt.Errorf("waiting for the memory broker: %w", err)
	}
	if grant.Op != "grant" {
		conn.Close()
		return nil, fmt.Errorf("memory broker refused: %s", grant.Error)
	}
	return l, nil
}

// done reports the finished command and ends the lease.
func (l *brokerLease) done(res runResult) error {
	defer l.conn.Close()
	if err := l.conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return fmt.Errorf("memory broker: %w", err)
	}
	msg := brokerMsg{Op: "done", PeakRSS: res.peakRSS, WallMS: res.wall.Milliseconds(), Exit: res.status, OOM: res.oom}
	if err := json.NewEncoder(l.conn).Encode(msg); err != nil {
		return err
	}
	var ack brokerMsg
	if err := readMsg(l.r, &ack); err != nil {
		return err
	}
	if ack.Op != "ok" {
		return fmt.Errorf("broker answered %q: %s", ack.Op, ack.Error)
	}
	return nil
}

// Launcher is how a build tool invokes Launch: the tritonbuild executable
// and the arguments that select the hidden launch command.
type Launcher struct {
	// Exe is the tritonbuild executable (os.Executable()).
	Exe string
	// Args select the launch command; nil means {"launch", "--"}.
	Args []string
}

// Prefix is the command prefix: Exe, then Args.
func (l Launcher) Prefix() []string {
	a := l.Args
	if a == nil {
		a = []string{"launch", "--"}
	}
	return append([]string{l.Exe}, a...)
}

// CMakeArgs returns the -D flags that route C and C++ compiles and links
// through the launcher (CMAKE_<LANG>_LINKER_LAUNCHER needs CMake 3.21).
// inner is an optional further launcher (e.g. "ccache") for compiles.
func (l Launcher) CMakeArgs(inner ...string) []string {
	compile := strings.Join(append(l.Prefix(), inner...), ";")
	link := strings.Join(l.Prefix(), ";")
	var out []string
	for _, lang := range []string{"C", "CXX"} {
		out = append(out,
			"-DCMAKE_"+lang+"_COMPILER_LAUNCHER="+compile,
			"-DCMAKE_"+lang+"_LINKER_LAUNCHER="+link)
	}
	return out
}

// MakeEnv returns CC and CXX settings that wrap the given compilers in the
// launcher, for make and configure scripts (which run them through sh, so
// every word is quoted).
func (l Launcher) MakeEnv(cc, cxx string) []string {
	prefix := make([]string, 0, 4)
	for _, a := range l.Prefix() {
		prefix = append(prefix, shellQuote(a))
	}
	p := strings.Join(prefix, " ")
	return []string{"CC=" + p + " " + cc, "CXX=" + p + " " + cxx}
}

// shellQuote quotes s for sh when it holds anything but safe characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=+:,@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
