// Command xzbench compares tritonbuild's archive extraction with the system
// tools on one .tar.xz file, in the same run: each round extracts the file
// once with internal/archive and once with `xz -T0 -dc FILE | tar -x`,
// alternating which goes first, and the medians and their ratio are printed.
// With -decode-only it compares decoding to /dev/null instead
// (internal/archive/xzpar against `xz -T0 -dc`). tritonbuild decodes block
// bodies with liblzma when built with cgo; -pure-go adds a third contender
// that uses the pure-Go decoder, to show what the cgo path buys.
//
// The disk is a third party: on the VMs here, writeback and ext4 discards
// of earlier rounds slowed later rounds of both sides 2-10x, so the figures
// in docs/performance.md extract into tmpfs (-workdir /dev/shm/...), which
// leaves decoding and file creation, the work the two sides do.
//
// Usage:
//
//	bash bench/xz/fetch-llvm.sh            # once: LLVM 15.0.6 orig tarball
//	go run ./bench/xz -rounds 3 /work/cache/llvm-src/llvm-toolchain-15_15.0.6.orig.tar.xz
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"syscall"
	"time"

	"github.com/tritonbuild/tritonbuild/bench/internal/machine"
	"github.com/tritonbuild/tritonbuild/bench/internal/sweep"

	"github.com/tritonbuild/tritonbuild/internal/archive"
	"github.com/tritonbuild/tritonbuild/internal/archive/xzpar"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds; each runs both extractors once")
	workdir := flag.String("workdir", "", "scratch directory for extracted trees (default: a temp dir)")
	decodeOnly := flag.Bool("decode-only", false, "compare decoding to /dev/null instead of extracting")
	pureGo := flag.Bool("pure-go", false, "also run tritonbuild with the pure-Go LZMA2 decoder")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of tritonbuild's runs to this file")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: xzbench [flags] FILE.tar.xz\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *workdir, *rounds, *decodeOnly, *pureGo, *cpuProfile); err != nil {
		fmt.Fprintln(os.Stderr, "xzbench:", err)
		os.Exit(1)
	}
}

func run(file, workdir string, rounds int, decodeOnly, pureGo bool, cpuProfile string) error {
	ctx := context.Background()
	if workdir == "" {
		d, err := os.MkdirTemp("", "xzbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		workdir = d
	}
	st, err := os.Stat(file)
	if err != nil {
		return err
	}
	fmt.Printf("file %s (%d bytes), GOMAXPROCS %d, %d rounds, mode %s\n",
		file, st.Size(), runtime.GOMAXPROCS(0), rounds, map[bool]string{true: "decode", false: "extract"}[decodeOnly])
	// Other work on the machine skews the comparison (the peer runs as
	// three threads in two processes, ours as GOMAXPROCS threads), so the
	// load is printed with the figures.
	fmt.Printf("load average at the start: %s\n", machine.LoadAvg())

	ours := func(pure bool) func(dest string) error {
		return func(dest string) error {
			if decodeOnly {
				return decodeOurs(ctx, file, pure)
			}
			return archive.Extract(ctx, file, dest, archive.Options{Decoders: archive.Decoders{archive.FormatTarXz: xzpar.Decompressor(xzpar.Options{PureGo: pure})}})
		}
	}
	peer := func(dest string) error {
		if decodeOnly {
			cmd := exec.Command("xz", "-T0", "-dc", file)
			cmd.Stderr = os.Stderr
			devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer devnull.Close()
			cmd.Stdout = devnull
			return cmd.Run()
		}
		if err := os.MkdirAll(dest, 0o755); err != nil {
			return err
		}
		cmd := exec.Command("sh", "-c", `xz -T0 -dc "$1" | tar -x -C "$2"`, "sh", file, dest)
		cmd.Stderr = os.Stderr
		return cmd.Run()
	}
	type contender struct {
		name      string
		run       func(dest string) error
		child     bool // CPU time is the waited-for children's
		wall, cpu []time.Duration
	}
	cs := []*contender{{name: "tritonbuild", run: ours(false)}, {name: "xz|tar", run: peer, child: true}}
	if pureGo {
		cs = append(cs, &contender{name: "pure-go", run: ours(true)})
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		run, profiled := cs[0].run, false
		cs[0].run = func(dest string) error {
			// One profile per file: only the first round is profiled.
			if profiled {
				return run(dest)
			}
			profiled = true
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
			return run(dest)
		}
	}

	for i := 0; i < rounds; i++ {
		// Rotate who goes first so that drift in the machine's speed
		// falls on every side.
		order := append(slices.Clone(cs[i%len(cs):]), cs[:i%len(cs)]...)
		for ci, c := range order {
			dest := filepath.Join(workdir, fmt.Sprintf("r%d-%d", i, ci))
			// Flush earlier rounds' dirty pages so that neither side pays
			// for the other's writeback.
			_ = exec.Command("sync").Run() // best effort: only evens out the page cache between rounds
			// CPU time (user+sys) is printed beside wall time: it is
			// much less sensitive to other load on the machine.
			who := syscall.RUSAGE_SELF
			if c.child {
				who = syscall.RUSAGE_CHILDREN
			}
			before := cpuTime(who)
			start := time.Now()
			err := c.run(dest)
			d := time.Since(start)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", i+1, c.name, err)
			}
			cpu := cpuTime(who) - before
			c.wall, c.cpu = append(c.wall, d), append(c.cpu, cpu)
			fmt.Printf("round %d  %-12s %7.2fs wall %7.2fs cpu\n", i+1, c.name, d.Seconds(), cpu.Seconds())
			if err := os.RemoveAll(dest); err != nil {
				return err
			}
		}
	}
	tOurs, cOurs, tPeer, cPeer := cs[0].wall, cs[0].cpu, cs[1].wall, cs[1].cpu
	mo, mp := median(tOurs), median(tPeer)
	peerName := "xz -T0 -dc | tar -x"
	if decodeOnly {
		peerName = "xz -T0 -dc >/dev/null"
	}
	fmt.Printf("load average at the end: %s\n", machine.LoadAvg())
	fmt.Printf("median wall: tritonbuild %.2fs, %s %.2fs, ratio %.2fx (below 1 is faster)\n",
		mo.Seconds(), peerName, mp.Seconds(), mo.Seconds()/mp.Seconds())
	co, cp := median(cOurs), median(cPeer)
	fmt.Printf("median cpu:  tritonbuild %.2fs, %s %.2fs, ratio %.2fx\n",
		co.Seconds(), peerName, cp.Seconds(), co.Seconds()/cp.Seconds())
	if pureGo {
		c := cs[2]
		fmt.Printf("pure-Go decoder: median wall %.2fs (%.2fx of the peer), cpu %.2fs (%.2fx)\n",
			median(c.wall).Seconds(), median(c.wall).Seconds()/mp.Seconds(),
			median(c.cpu).Seconds(), median(c.cpu).Seconds()/cp.Seconds())
	}
	return nil
}

func decodeOurs(ctx context.Context, file string, pureGo bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	r, err := xzpar.NewDecoder(ctx, f, st.Size(), xzpar.Options{PureGo: pureGo})
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(io.Discard, r)
	return err
}

// cpuTime returns user+sys time of the process or of its waited-for
// children (which include the shell pipeline's xz and tar).
func cpuTime(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(ds []time.Duration) time.Duration {
	return sweep.Median(ds, func(d time.Duration) time.Duration { return d })
}
