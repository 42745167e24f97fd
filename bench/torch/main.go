// Command torchbench compares one TorchScript forward of the report's
// simple_linear model called from Go through runtime/torch (cgo, in process)
// with the same forward called from Python torch, in the same run. Each round
// measures Go then Python at every batch size (both one intra-op thread, both
// under inference mode, both the median of timed repeats); the rounds'
// medians and the Go/Python ratios are printed, for wall time and for the
// calling thread's CPU time (the steadier figure on a busy machine).
//
// Usage (from the repository root):
//
//	runtime/csrc/build.sh /tmp/tbtorch
//	CGO_LDFLAGS="-L/tmp/tbtorch -Wl,-rpath,/tmp/tbtorch" go run -tags libtorch ./bench/torch
//
// Flags: -model FILE (default: written by make_model.py, found through
// -shared or TRITONBUILD_SHARED), -python (default /usr/bin/python3),
// -batches 1,8,32, -rounds 3, -number 2000, -repeats 5.
//
// With -blas it times a transformer's 768-3072-768 feed-forward block
// instead, on the BLAS the dynamic loader resolves libblas.so.3 to (the
// server's) and on netlib's reference BLAS (-reference-blas), one child
// process each, alternating, and prints the reference/loaded ratio.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/bench/internal/sweep"
	"github.com/tritonbuild/tritonbuild/bench/torch/direct"
)

// pythonBench mirrors direct.Measure: same input values, same warmup,
// number and repeats, median repeat, wall and thread CPU time. (A plain
// loop rather than timeit so that both clocks cover the same calls; the
// loop's own cost is tens of nanoseconds.)
const pythonBench = `
import json, math, sys, time, torch
model, features, number, repeats, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
batches = [int(b) for b in sys.argv[6].split(",")]
torch.set_num_threads(1)
torch.set_num_interop_threads(1)
m = torch.jit.load(model)
m.eval()
out = {}
with torch.inference_mode():
    for b in batches:
        x = torch.tensor([math.sin(i) for i in range(b * features)], dtype=torch.float32).reshape(b, features)
        for _ in range(warmup):
            m(x)
        wall, cpu = [], []
        for _ in range(repeats):
            w0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(number):
                m(x)
            c1, w1 = time.thread_time(), time.perf_counter()
            wall.append((w1 - w0) / number)
            cpu.append((c1 - c0) / number)
        out[str(b)] = [sorted(wall)[repeats // 2], sorted(cpu)[repeats // 2]]
print(json.dumps(out))
`

func main() {
	model := flag.String("model", "", "TorchScript simple_linear model (default: made by make_model.py)")
	shared := flag.String("shared", os.Getenv("TRITONBUILD_SHARED"), "directory holding examples/make_model.py")
	python := flag.String("python", "/usr/bin/python3", "python interpreter with torch")
	batchList := flag.String("batches", "1,8,32", "batch sizes")
	rounds := flag.Int("rounds", 3, "rounds; each measures Go then Python at every batch size")
	number := flag.Int("number", 2000, "calls per timed repeat")
	repeats := flag.Int("repeats", 5, "timed repeats per batch size (median taken)")
	gaps := flag.String("gaps", "", "instead: time single forwards after each gap in this list (none,spin,sleep,http,mem)")
	gapLen := flag.Duration("gap", 50*time.Microsecond, "length of the spin and sleep gaps")
	blas := flag.Bool("blas", false, "instead: time a 768-3072-768 MLP's forward on the BLAS the loader finds and on -reference-blas")
	refBLAS := flag.String("reference-blas", "/usr/lib/x86_64-linux-gnu/blas:/usr/lib/x86_64-linux-gnu/lapack", "LD_LIBRARY_PATH for netlib's reference libblas.so.3 and liblapack.so.3 (Debian's libblas3, liblapack3); the first directory holds libblas.so.3")
	blasChildMode := flag.Bool("blas-child", false, "internal: one -blas measurement of -model in this process, as JSON")
	flag.Parse()
	if *blasChildMode {
		if err := blasChild(*model, *batchList, *number, *repeats); err != nil {
			fmt.Fprintln(os.Stderr, "torchbench:", err)
			os.Exit(1)
		}
		return
	}
	if *blas {
		if err := runBLAS(*python, *refBLAS, *batchList, *rounds, *number, *repeats); err != nil {
			fmt.Fprintln(os.Stderr, "torchbench:", err)
			os.Exit(1)
		}
		return
	}
	if *gaps != "" {
		if err := runGaps(*model, *shared, *python, *gaps, *gapLen, *rounds, *number); err != nil {
			fmt.Fprintln(os.Stderr, "torchbench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*model, *shared, *python, *batchList, *rounds, *number, *repeats); err != nil {
		fmt.Fprintln(os.Stderr, "torchbench:", err)
		os.Exit(1)
	}
}

// runGaps times one-row forwards after each kind of gap, rounds times in
// turn, and prints the medians over rounds.
func runGaps(model, shared, python, list string, gapLen time.Duration, rounds, number int) error {
	model, cleanup, err := ensureModel(model, shared, python)
	if err != nil {
		return err
	}
	defer cleanup()
	var gaps []direct.Gap
	for _, name := range strings.Split(list, ",") {
		g, err := makeGap(strings.TrimSpace(name), gapLen)
		if err != nil {
			return err
		}
		gaps = append(gaps, g)
	}
	wall, cpu, mean := map[string][]time.Duration{}, map[string][]time.Duration{}, map[string][]time.Duration{}
	for r := 0; r < rounds; r++ {
		res, err := direct.MeasureAfter(direct.Options{Model: model, Features: 10, Threads: 1, Number: number, Warmup: 200}, 1, gaps)
		if err != nil {
			return err
		}
		for _, x := range res {
			wall[x.Gap] = append(wall[x.Gap], x.Wall)
			cpu[x.Gap] = append(cpu[x.Gap], x.CPU)
			mean[x.Gap] = append(mean[x.Gap], x.CPUMean)
		}
	}
	fmt.Printf("simple_linear one-row forward after a gap of %v, 1 intra-op thread, locked thread, median of %d rounds x %d calls\n", gapLen, rounds, number)
	fmt.Printf("%-6s %12s %12s %13s %10s\n", "gap", "wall p50 us", "cpu p50 us", "cpu mean us", "cpu/none")
	base := us(direct.Median(cpu[gaps[0].Name]))
	for _, g := range gaps {
		c := us(direct.Median(cpu[g.Name]))
		fmt.Printf("%-6s %12.2f %12.2f %13.2f %10.2f\n", g.Name, us(direct.Median(wall[g.Name])), c, us(direct.Median(mean[g.Name])), c/base)
	}
	return nil
}

// makeGap returns what runs between two forwards: nothing, a busy wait, a
// sleep (the thread leaves its core), a loopback HTTP round trip to an
// in-process echo server (what a server does between forwards), or a walk
// over 4 MiB of memory (evicting the core's 2 MiB L2).
func makeGap(name string, d time.Duration) (direct.Gap, error) {
	switch name {
	case "none":
		return direct.Gap{Name: name}, nil
	case "spin":
		return direct.Gap{Name: name, Run: func() {
			for t := time.Now(); time.Since(t) < d; {
			}
		}}, nil
	case "sleep":
		return direct.Gap{Name: name, Run: func() { time.Sleep(d) }}, nil
	case "mem":
		junk := make([]byte, 4<<20)
		return direct.Gap{Name: name, Run: func() {
			for k := 0; k < len(junk); k += 64 {
				junk[k]++
			}
		}}, nil
	case "http":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return direct.Gap{}, err
		}
		go func() {
			_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				_, _ = w.Write(b)
			}))
		}()
		url := "http://" + ln.Addr().String()
		body := make([]byte, 40)
		client := &http.Client{}
		return direct.Gap{Name: name, Run: func() {
			resp, err := client.Post(url, "application/octet-stream", bytes.NewReader(body))
			if err != nil {
				panic(fmt.Sprintf("http gap: %v", err))
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}}, nil
	}
	return direct.Gap{}, fmt.Errorf("-gaps: unknown gap %q (none, spin, sleep, http, mem)", name)
}

// ensureModel returns model, or writes simple_linear with make_model.py
// into a temporary directory that cleanup removes.
func ensureModel(model, shared, python string) (string, func(), error) {
	if model != "" {
		return model, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "torchbench-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	model = filepath.Join(dir, "model.pt")
	script, err := findMakeModel(shared)
	if err != nil {
		cleanup()
		return "", nil, err
	}
	if out, err := exec.Command(python, script, model).CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("%s %s: %w\n%s", python, script, err, out)
	}
	return model, cleanup, nil
}

func run(model, shared, python, batchList string, rounds, number, repeats int) error {
	batches, err := sweep.Levels(batchList)
	if err != nil {
		return fmt.Errorf("-batches: %w", err)
	}
	model, cleanup, err := ensureModel(model, shared, python)
	if err != nil {
		return err
	}
	defer cleanup()
	const warmup = 200
	// Per batch size, one entry per round.
	goWall, goCPU := map[int][]time.Duration{}, map[int][]time.Duration{}
	pyWall, pyCPU := map[int][]time.Duration{}, map[int][]time.Duration{}
	for r := 0; r < rounds; r++ {
		res, err := direct.Measure(direct.Options{Model: model, Features: 10, Batches: batches, Threads: 1,
			Number: number, Repeats: repeats, Warmup: warmup})
		if err != nil {
			return err
		}
		for _, x := range res {
			goWall[x.Batch] = append(goWall[x.Batch], x.PerCall)
			goCPU[x.Batch] = append(goCPU[x.Batch], x.CPUPerCall)
		}
		py, err := runPython(python, model, batches, number, repeats, warmup)
		if err != nil {
			return err
		}
		for b, d := range py {
			pyWall[b] = append(pyWall[b], d[0])
			pyCPU[b] = append(pyCPU[b], d[1])
		}
	}
	fmt.Printf("simple_linear forward, 1 intra-op thread, median of %d rounds x %d repeats x %d calls\n", rounds, repeats, number)
	fmt.Printf("%6s | %12s %12s %9s | %12s %12s %9s\n", "batch",
		"go wall us", "py wall us", "go/py", "go cpu us", "py cpu us", "go/py")
	for _, b := range batches {
		gw, pw := us(direct.Median(goWall[b])), us(direct.Median(pyWall[b]))
		gc, pc := us(direct.Median(goCPU[b])), us(direct.Median(pyCPU[b]))
		fmt.Printf("%6d | %12.2f %12.2f %9.2f | %12.2f %12.2f %9.2f\n", b, gw, pw, gw/pw, gc, pc, gc/pc)
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// runPython returns, per batch size, the median wall and thread CPU time
// per call.
func runPython(python, model string, batches []int, number, repeats, warmup int) (map[int][2]time.Duration, error) {
	bs := make([]string, len(batches))
	for i, b := range batches {
		bs[i] = strconv.Itoa(b)
	}
	cmd := exec.Command(python, "-c", pythonBench, model, "10", strconv.Itoa(number), strconv.Itoa(repeats),
		strconv.Itoa(warmup), strings.Join(bs, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("python benchmark: %w", err)
	}
	var secs map[string][2]float64
	if err := json.Unmarshal(out, &secs); err != nil {
		return nil, fmt.Errorf("python benchmark output %q: %w", out, err)
	}
	res := map[int][2]time.Duration{}
	for k, s := range secs {
		b, err := strconv.Atoi(k)
		if err != nil {
			return nil, fmt.Errorf("python benchmark output: batch %q", k)
		}
		res[b] = [2]time.Duration{time.Duration(s[0] * float64(time.Second)), time.Duration(s[1] * float64(time.Second))}
	}
	return res, nil
}

// findMakeModel locates examples/make_model.py under dir, or under a
// "shared" directory in the working directory or one of its parents.
func findMakeModel(dir string) (string, error) {
	const rel = "examples/make_model.py"
	if dir != "" {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("-shared %s: %w", dir, err)
		}
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "shared", rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("%s not found above %s: pass -model or -shared (or set TRITONBUILD_SHARED)", rel, wd)
		}
	}
}
