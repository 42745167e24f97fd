package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/bench/internal/sweep"
	"github.com/tritonbuild/tritonbuild/bench/torch/direct"
	"github.com/tritonbuild/tritonbuild/runtime/torch"
)

// makeMLP writes a transformer's feed-forward block (768 -> 3072, GELU,
// -> 768), the matrix products a Linear-heavy model spends its time in.
const makeMLP = `
import sys, torch
torch.manual_seed(0)
torch.jit.script(torch.nn.Sequential(torch.nn.Linear(768, 3072), torch.nn.GELU(), torch.nn.Linear(3072, 768)).eval()).save(sys.argv[1])
`

// mlpFeatures is makeMLP's input width.
const mlpFeatures = 768

// blasRun is what one child process measured: the BLAS it ran on and the
// median wall and thread CPU time per forward at each batch size.
type blasRun struct {
	BLAS    string                      `json:"blas"`
	Tuned   bool                        `json:"tuned"`
	Batches map[string][2]time.Duration `json:"batches"`
}

// runBLAS times the MLP block's forward from Go on the BLAS the loader
// resolves (what the server runs on) and on netlib's reference BLAS found
// through refDir (an LD_LIBRARY_PATH), each in a child process of its own (the loader picks the BLAS
// once), alternating round by round, and prints both with their ratio.
func runBLAS(python, refDir, batchList string, rounds, number, repeats int) error {
	if _, err := os.Stat(filepath.Join(strings.Split(refDir, ":")[0], "libblas.so.3")); err != nil {
		return fmt.Errorf("-reference-blas: %w (Debian's libblas3 installs netlib's BLAS there)", err)
	}
	batches, err := sweep.Levels(batchList)
	if err != nil {
		return fmt.Errorf("-batches: %w", err)
	}
	dir, err := os.MkdirTemp("", "torchbench-blas-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	model := filepath.Join(dir, "mlp.pt")
	if out, err := exec.Command(python, "-c", makeMLP, model).CombinedOutput(); err != nil {
		return fmt.Errorf("writing the MLP with %s: %w\n%s", python, err, out)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	variants := []struct{ name, libPath string }{{"loaded", ""}, {"reference", refDir}}
	runs := map[string][]blasRun{}
	for r := 0; r < rounds; r++ {
		for i := range variants {
			v := variants[(i+r)%len(variants)] // alternate which goes first
			cmd := exec.Command(self, "-blas-child", "-model", model, "-batches", batchList,
				"-number", strconv.Itoa(number), "-repeats", strconv.Itoa(repeats))
			cmd.Env = os.Environ()
			if v.libPath != "" {
				cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+v.libPath)
			}
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("%s BLAS child: %w", v.name, err)
			}
			var br blasRun
			if err := json.Unmarshal(out, &br); err != nil {
				return fmt.Errorf("%s BLAS child output %q: %w", v.name, out, err)
			}
			runs[v.name] = append(runs[v.name], br)
		}
	}
	loaded, ref := runs["loaded"][0], runs["reference"][0]
	fmt.Printf("768-3072-768 MLP forward from Go (runtime/torch), 1 intra-op thread, median of %d rounds x %d repeats x %d calls\n", rounds, repeats, number)
	fmt.Printf("loaded BLAS:    %s (tuned: %v)\nreference BLAS: %s (tuned: %v)\n", loaded.BLAS, loaded.Tuned, ref.BLAS, ref.Tuned)
	if loaded.BLAS == ref.BLAS {
		fmt.Println("the loader already resolves libblas.so.3 to the reference BLAS: install an optimized one (Debian: libopenblas0-openmp) to compare")
	}
	fmt.Printf("%6s | %14s %14s %9s | %14s %14s %9s\n", "batch", "loaded wall us", "ref wall us", "ref/load", "loaded cpu us", "ref cpu us", "ref/load")
	for _, n := range batches {
		b := strconv.Itoa(n) // the children's keys
		med := func(name string, k int) float64 {
			var ds []time.Duration
			for _, br := range runs[name] {
				ds = append(ds, br.Batches[b][k])
			}
			return us(direct.Median(ds))
		}
		lw, rw, lc, rc := med("loaded", 0), med("reference", 0), med("loaded", 1), med("reference", 1)
		fmt.Printf("%6s | %14.1f %14.1f %9.2f | %14.1f %14.1f %9.2f\n", b, lw, rw, rw/lw, lc, rc, rc/lc)
	}
	return nil
}

// blasChild measures the model in this process and prints a blasRun.
func blasChild(model, batchList string, number, repeats int) error {
	batches, err := sweep.Levels(batchList)
	if err != nil {
		return fmt.Errorf("-batches: %w", err)
	}
	res, err := direct.Measure(direct.Options{Model: model, Features: mlpFeatures, Batches: batches, Threads: 1,
		Number: number, Repeats: repeats, Warmup: max(number/10, 3)})
	if err != nil {
		return err
	}
	br := blasRun{Batches: map[string][2]time.Duration{}}
	br.BLAS, br.Tuned = torch.BLAS()
	for _, x := range res {
		br.Batches[strconv.Itoa(x.Batch)] = [2]time.Duration{x.PerCall, x.CPUPerCall}
	}
	return json.NewEncoder(os.Stdout).Encode(br)
}
