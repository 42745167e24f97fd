// Command noop measures a no-op `tritonbuild all` on a fully cached graph:
// the time a developer or CI pays when nothing changed. In the same run it
// measures the floor (the tritonbuild process starting and printing its
// help) and `make -q` on an up-to-date Makefile of the same size as the
// peer, and reports ratios.
//
//	go run ./bench/noop [-profile system] [-runs 15] [-store DIR]
//
// The first run builds whatever is not cached yet (timed, not counted).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

func main() {
	profile := flag.String("profile", "system", "build.yaml profile")
	runs := flag.Int("runs", 15, "timed runs per command")
	root := flag.String("root", ".", "project root (holds build.yaml)")
	store := flag.String("store", "", "store directory (default: build.yaml's)")
	flag.Parse()
	if err := run(*root, *profile, *store, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "noop:", err)
		os.Exit(1)
	}
}

func run(root, profile, store string, runs int) error {
	tmp, err := os.MkdirTemp("", "noop-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "tritonbuild")
	build := exec.Command("go", "build", "-o", bin, "./cmd/tritonbuild")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building tritonbuild: %w\n%s", err, out)
	}
	all := []string{"all", "--profile", profile}
	if store != "" {
		all = append(all, "--store", store)
	}
	start := time.Now()
	first := exec.Command(bin, all...)
	first.Dir, first.Stdout, first.Stderr = root, os.Stderr, os.Stderr
	if err := first.Run(); err != nil {
		return fmt.Errorf("first (building) run: %w", err)
	}
	fmt.Printf("first run (builds what is missing): %s\n", time.Since(start).Round(time.Millisecond))

	// The peer: make deciding that nothing is to be done for a graph of
	// the same number of nodes, each a file depending on the previous one.
	mk := filepath.Join(tmp, "Makefile")
	var rules string
	for i := 0; i < 4; i++ {
		dep := ""
		if i > 0 {
			dep = fmt.Sprintf("n%d", i-1)
		}
		rules += fmt.Sprintf("n%d: %s\n\ttouch $@\n", i, dep)
	}
	if err := os.WriteFile(mk, []byte("all: n3\n"+rules), 0o644); err != nil {
		return err
	}
	if out, err := exec.Command("make", "-C", tmp).CombinedOutput(); err != nil {
		return fmt.Errorf("make: %w\n%s", err, out)
	}

	cases := []struct {
		name string
		dir  string
		args []string
	}{
		{"floor: tritonbuild --help", root, []string{bin, "--help"}},
		{"peer: make -q (4 up-to-date targets)", tmp, []string{"make", "-q", "-C", tmp}},
		{"tritonbuild all (no-op)", root, append([]string{bin}, all...)},
	}
	med := map[string]time.Duration{}
	// Interleave the commands so machine noise hits all of them alike.
	times := map[string][]time.Duration{}
	for r := 0; r < runs; r++ {
		for _, c := range cases {
			cmd := exec.Command(c.args[0], c.args[1:]...)
			cmd.Dir = c.dir
			t0 := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %w\n%s", c.name, err, out)
			}
			times[c.name] = append(times[c.name], time.Since(t0))
		}
	}
	for _, c := range cases {
		ts := times[c.name]
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		med[c.name] = ts[len(ts)/2]
		fmt.Printf("%-42s median %8s  min %8s  max %8s\n", c.name, ts[len(ts)/2].Round(time.Microsecond), ts[0].Round(time.Microsecond), ts[len(ts)-1].Round(time.Microsecond))
	}
	noop := med["tritonbuild all (no-op)"]
	fmt.Printf("ratio no-op all / floor: %.2f\n", float64(noop)/float64(med["floor: tritonbuild --help"]))
	fmt.Printf("ratio no-op all / make -q: %.2f\n", float64(noop)/float64(med["peer: make -q (4 up-to-date targets)"]))
	verdict := "meets"
	if noop >= 500*time.Millisecond {
		verdict = "MISSES"
	}
	fmt.Printf("goal: no-op all under 0.5 s: %s (%s)\n", verdict, noop.Round(time.Millisecond))
	return nil
}
