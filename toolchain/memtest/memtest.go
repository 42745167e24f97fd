// Package memtest provides the pieces for testing and benchmarking
// memory-aware builds against a real kernel: a fixture "compiler" that
// allocates and touches a set amount of memory, a make project of N such
// compiles and one link, and a child memory cgroup with a hard limit in
// which a build can be OOM-killed for real.
//
// It is used by toolchain's integration tests and by bench/memory; like
// net/http/httptest it is test support, not part of the builder.
package memtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// ParseSize parses "200M", "1G", "512K" or a plain byte count (binary
// units).
func ParseSize(s string) (int64, error) {
	mult := int64(1)
	num := strings.TrimSpace(s)
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		}
		if mult > 1 {
			num = num[:n-1]
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 200M)", s)
	}
	return v * mult, nil
}

// FakeCompiler behaves like a compiler driver for the fixture build. Its
// own flags come first:
//
//	--mem=SIZE        allocate and keep touching SIZE bytes (default 64M)
//	--hold=DURATION   keep the memory that long, touching it (default 500ms)
//	--kill-once=PATH  if PATH does not exist, create it and SIGKILL itself
//	                  after allocating (a one-off injected OOM kill)
//
// then ordinary compiler arguments: -c, -o OUT, inputs. It writes OUT with
// the names of its inputs, so the link step can check that every object
// exists. It returns the exit status.
func FakeCompiler(args []string) int {
	mem := int64(64 << 20)
	hold := 500 * time.Millisecond
	killOnce := ""
	var out string
	var inputs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		var err error
		switch {
		case strings.HasPrefix(a, "--mem="):
			mem, err = ParseSize(strings.TrimPrefix(a, "--mem="))
		case strings.HasPrefix(a, "--hold="):
			hold, err = time.ParseDuration(strings.TrimPrefix(a, "--hold="))
		case strings.HasPrefix(a, "--kill-once="):
			killOnce = strings.TrimPrefix(a, "--kill-once=")
		case a == "-o" && i+1 < len(args):
			out = args[i+1]
			i++
		case a == "-c":
		case strings.HasPrefix(a, "-"):
			err = fmt.Errorf("unknown flag %q", a)
		default:
			inputs = append(inputs, a)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "fakecc: %v\n", err)
			return 2
		}
	}
	for _, in := range inputs {
		if _, err := os.Stat(in); err != nil {
			fmt.Fprintf(os.Stderr, "fakecc: input: %v\n", err)
			return 1
		}
	}
	buf, err := newTouchedBuffer(mem)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakecc: %v\n", err)
		return 1
	}
	defer buf.close()
	if killOnce != "" {
		if f, err := os.OpenFile(killOnce, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
			f.Close()
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	// Keep the pages hot, like a compiler walking its ASTs, and use CPU
	// while at it, so the wall time of a build depends on both.
	for deadline := time.Now().Add(hold); time.Now().Before(deadline); {
		if err := buf.touch(); err != nil {
			fmt.Fprintf(os.Stderr, "fakecc: %v\n", err)
			return 1
		}
	}
	if out != "" {
		data := fmt.Sprintf("fakecc output from %s (%d bytes touched)\n", strings.Join(inputs, " "), mem)
		if err := os.WriteFile(out, []byte(data), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "fakecc: %v\n", err)
			return 1
		}
	}
	return 0
}

// Project is a fixture make project: Objects compiles and one link.
type Project struct {
	Dir     string
	Objects int
	// Output is the linked file that exists after a successful build.
	Output string
}

// WriteProject writes a Makefile with n objects into dir. The compiler is
// taken from $(CC) at make time, so the same project runs with and without
// a launcher; CCFLAGS carry the fake compiler's --mem/--hold flags.
func WriteProject(dir string, n int) (*Project, error) {
	if n < 1 {
		return nil, fmt.Errorf("writing fixture project: %d objects", n)
	}
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		return nil, fmt.Errorf("writing fixture project: %w", err)
	}
	var objs []string
	for i := range n {
		name := fmt.Sprintf("unit%02d", i)
		src := filepath.Join(dir, "src", name+".c")
		if err := os.WriteFile(src, []byte(fmt.Sprintf("int %s(void) { return %d; }\n", name, i)), 0o644); err != nil {
			return nil, fmt.Errorf("writing fixture project: %w", err)
		}
		objs = append(objs, name+".o")
	}
	mk := fmt.Sprintf(`# Fixture build: %d compiles and one link through $(CC).
OBJS = %s

all: app.bin

app.bin: $(OBJS)
	$(CC) $(LDFLAGS) -o $@ $^

%%.o: src/%%.c
	$(CC) $(CCFLAGS) -c $< -o $@

clean:
	rm -f $(OBJS) app.bin

.PHONY: all clean
`, n, strings.Join(objs, " "))
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(mk), 0o644); err != nil {
		return nil, fmt.Errorf("writing fixture project: %w", err)
	}
	return &Project{Dir: dir, Objects: n, Output: filepath.Join(dir, "app.bin")}, nil
}

// Clean removes build outputs so the next build starts from scratch.
func (p *Project) Clean() error {
	ents, err := os.ReadDir(p.Dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".o") || e.Name() == "app.bin" {
			if err := os.Remove(filepath.Join(p.Dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// MakeOptions is one run of the fixture project.
type MakeOptions struct {
	// Jobs is make's -j.
	Jobs int
	// CC is the compiler command line make runs (already shell-quoted),
	// e.g. "/path/prog fakecc" or a launcher in front of it.
	CC string
	// Mem and Hold are the fake compiler's per-command figures.
	Mem  string
	Hold time.Duration
	// LinkMem is the link's memory; "" means Mem.
	LinkMem string
	// ExtraFlags go to every compile (e.g. "--kill-once=/tmp/x").
	ExtraFlags string
	// Env is added to the environment (e.g. the broker's).
	Env []string
}

// Result is what one make run did.
type Result struct {
	Wall   time.Duration
	Err    error
	Output []byte
	// OOMKills is how much the group's oom_kill counter rose.
	OOMKills int64
}

// RunMake runs make in the project, inside the group.
func RunMake(ctx context.Context, g *Group, p *Project, o MakeOptions) Result {
	before, err := g.OOMKills()
	if err != nil {
		return Result{Err: err}
	}
	linkMem := o.LinkMem
	if linkMem == "" {
		linkMem = o.Mem
	}
	ccflags := fmt.Sprintf("--mem=%s --hold=%s %s", o.Mem, o.Hold, o.ExtraFlags)
	ldflags := fmt.Sprintf("--mem=%s --hold=%s", linkMem, o.Hold)
	cmd := g.Command(ctx, "make", "-C", p.Dir, fmt.Sprintf("-j%d", o.Jobs),
		"CC="+o.CC, "CCFLAGS="+ccflags, "LDFLAGS="+ldflags)
	cmd.Env = append(os.Environ(), o.Env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	res := Result{Wall: time.Since(start), Err: err, Output: out}
	if err == nil {
		if _, serr := os.Stat(p.Output); serr != nil {
			res.Err = fmt.Errorf("make succeeded but %w", serr)
		}
	}
	after, cerr := g.OOMKills()
	if cerr != nil && res.Err == nil {
		res.Err = cerr
	}
	res.OOMKills = after - before
	return res
}

// touchedBuffer is anonymous memory outside the Go heap that is filled by
// the kernel (read(2) from /dev/zero through a raw syscall). Neither the Go
// runtime nor the race detector's shadow memory adds to it, so the RSS a
// command shows is what it was told to use, in race builds too.
type touchedBuffer struct {
	mem  []byte
	zero *os.File
}

func newTouchedBuffer(n int64) (*touchedBuffer, error) {
	b := &touchedBuffer{}
	if n == 0 {
		return b, nil
	}
	mem, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes: %w", n, err)
	}
	b.mem = mem
	if b.zero, err = os.Open("/dev/zero"); err != nil {
		syscall.Munmap(mem)
		return nil, err
	}
	return b, b.touch()
}

// touch writes every page once.
func (b *touchedBuffer) touch() error {
	for off := 0; off < len(b.mem); {
		chunk := min(len(b.mem)-off, 64<<20)
		n, _, errno := syscall.Syscall(syscall.SYS_READ, b.zero.Fd(), uintptr(unsafe.Pointer(&b.mem[off])), uintptr(chunk))
		if errno != 0 {
			return fmt.Errorf("filling memory: %w", errno)
		}
		if n == 0 {
			return fmt.Errorf("filling memory: /dev/zero returned EOF")
		}
		off += int(n)
	}
	return nil
}

func (b *touchedBuffer) close() {
	if b.mem != nil {
		syscall.Munmap(b.mem)
		b.zero.Close()
	}
}
