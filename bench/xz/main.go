// Command xzbench compares tritonbuild's archive extraction with the system
// tools on one .tar.xz file, in the same run: each round extracts the file
// once with builder/extract and once with `xz -T0 -dc FILE | tar -x`,
// alternating which goes first, and the medians and their ratio are printed.
// With -decode-only it compares decoding to /dev/null instead
// (builder/extract/xzpar against `xz -T0 -dc`).
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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/extract"
	"github.com/tritonbuild/tritonbuild/builder/extract/xzpar"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds; each runs both extractors once")
	workdir := flag.String("workdir", "", "scratch directory for extracted trees (default: a temp dir)")
	decodeOnly := flag.Bool("decode-only", false, "compare decoding to /dev/null instead of extracting")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: xzbench [flags] FILE.tar.xz\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *workdir, *rounds, *decodeOnly); err != nil {
		fmt.Fprintln(os.Stderr, "xzbench:", err)
		os.Exit(1)
	}
}

func run(archive, workdir string, rounds int, decodeOnly bool) error {
	ctx := context.Background()
	if workdir == "" {
		d, err := os.MkdirTemp("", "xzbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		workdir = d
	}
	st, err := os.Stat(archive)
	if err != nil {
		return err
	}
	fmt.Printf("file %s (%d bytes), GOMAXPROCS %d, %d rounds, mode %s\n",
		archive, st.Size(), runtime.GOMAXPROCS(0), rounds, map[bool]string{true: "decode", false: "extract"}[decodeOnly])
	// Other work on the machine skews the comparison (the peer runs as
	// three threads in two processes, ours as GOMAXPROCS threads), so the
	// load is printed with the figures.
	fmt.Printf("load average at the start: %s\n", loadavg())

	ours := func(dest string) error {
		if decodeOnly {
			return decodeOurs(ctx, archive)
		}
		return extract.Archive(ctx, archive, dest, extract.Options{})
	}
	peer := func(dest string) error {
		if decodeOnly {
			cmd := exec.Command("xz", "-T0", "-dc", archive)
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
		cmd := exec.Command("sh", "-c", `xz -T0 -dc "$1" | tar -x -C "$2"`, "sh", archive, dest)
		cmd.Stderr = os.Stderr
		return cmd.Run()
	}

	var tOurs, tPeer, cOurs, cPeer []time.Duration
	for i := 0; i < rounds; i++ {
		order := []string{"tritonbuild", "xz|tar"}
		if i%2 == 1 {
			order = []string{"xz|tar", "tritonbuild"}
		}
		for _, who := range order {
			dest := filepath.Join(workdir, fmt.Sprintf("r%d-%s", i, map[string]string{"tritonbuild": "ours", "xz|tar": "peer"}[who]))
			// Flush earlier rounds' dirty pages so that neither side pays
			// for the other's writeback.
			exec.Command("sync").Run()
			// CPU time (user+sys) is printed beside wall time: it is
			// much less sensitive to other load on the machine.
			selfBefore, childBefore := cpuTime(syscall.RUSAGE_SELF), cpuTime(syscall.RUSAGE_CHILDREN)
			start := time.Now()
			var err error
			if who == "tritonbuild" {
				err = ours(dest)
			} else {
				err = peer(dest)
			}
			d := time.Since(start)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", i+1, who, err)
			}
			var cpu time.Duration
			if who == "tritonbuild" {
				cpu = cpuTime(syscall.RUSAGE_SELF) - selfBefore
				tOurs, cOurs = append(tOurs, d), append(cOurs, cpu)
			} else {
				cpu = cpuTime(syscall.RUSAGE_CHILDREN) - childBefore
				tPeer, cPeer = append(tPeer, d), append(cPeer, cpu)
			}
			fmt.Printf("round %d  %-12s %7.2fs wall %7.2fs cpu\n", i+1, who, d.Seconds(), cpu.Seconds())
			if err := os.RemoveAll(dest); err != nil {
				return err
			}
		}
	}
	mo, mp := median(tOurs), median(tPeer)
	peerName := "xz -T0 -dc | tar -x"
	if decodeOnly {
		peerName = "xz -T0 -dc >/dev/null"
	}
	fmt.Printf("load average at the end: %s\n", loadavg())
	fmt.Printf("median wall: tritonbuild %.2fs, %s %.2fs, ratio %.2fx (below 1 is faster)\n",
		mo.Seconds(), peerName, mp.Seconds(), mo.Seconds()/mp.Seconds())
	co, cp := median(cOurs), median(cPeer)
	fmt.Printf("median cpu:  tritonbuild %.2fs, %s %.2fs, ratio %.2fx\n",
		co.Seconds(), peerName, cp.Seconds(), co.Seconds()/cp.Seconds())
	return nil
}

func decodeOurs(ctx context.Context, archive string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	r, err := xzpar.NewDecoder(ctx, f, st.Size(), xzpar.Options{})
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

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
