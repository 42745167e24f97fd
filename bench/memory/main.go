// Command memory benchmarks memory-aware parallelism against fixed -j in
// one run, under one real memory cgroup limit: the fixture make project
// (toolchain/memtest) is built with several fixed make -j values and then
// with make -jN through the launcher and broker, cold (nothing learned)
// and warm (stats saved by the cold run and loaded again). For each it
// prints wall time and OOM kills, and the ratio of the broker's wall time
// to the best fixed -j that survived.
//
//	go run ./bench/memory            # needs root and a memory cgroup
//	go run ./bench/memory -jobs 1,2,3,4 -objects 8 -mem 200M -limit 600M
//
// The program re-executes itself as the launcher ("launch") and as the
// fixture compiler ("fakecc").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tritonbuild/tritonbuild/bench/internal/sweep"
	"github.com/tritonbuild/tritonbuild/toolchain"
	"github.com/tritonbuild/tritonbuild/toolchain/memtest"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "launch":
			os.Exit(toolchain.Launch(context.Background(), os.Args[2:], os.Environ()))
		case "fakecc":
			os.Exit(memtest.FakeCompiler(os.Args[2:]))
		}
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/memory:", err)
		os.Exit(1)
	}
}

type row struct {
	name     string
	res      memtest.Result
	counters *toolchain.Counters
}

func run() error {
	limitS := flag.String("limit", "600M", "memory cgroup limit")
	objects := flag.Int("objects", 8, "compiles in the fixture project")
	mem := flag.String("mem", "200M", "memory each compile and the link touch")
	hold := flag.Duration("hold", time.Second, "how long each command holds its memory")
	jobsS := flag.String("jobs", "1,2,3,4", "fixed make -j values to compare")
	brokerJobs := flag.Int("broker-jobs", 0, "make -j under the broker (0 = largest fixed value)")
	reserveS := flag.String("reserve", "64M", "memory kept out of the broker budget")
	flag.Parse()

	limit, err := memtest.ParseSize(*limitS)
	if err != nil {
		return err
	}
	reserve, err := memtest.ParseSize(*reserveS)
	if err != nil {
		return err
	}
	jobs, err := sweep.Levels(*jobsS)
	if err != nil {
		return fmt.Errorf("-jobs: %w", err)
	}
	if *brokerJobs == 0 {
		for _, j := range jobs {
			*brokerJobs = max(*brokerJobs, j)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "bench-memory")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	p, err := memtest.WriteProject(filepath.Join(work, "project"), *objects)
	if err != nil {
		return err
	}
	ctx := context.Background()
	base := memtest.MakeOptions{Mem: *mem, Hold: *hold}
	fmt.Printf("fixture: %d compiles + 1 link, %s each, held %v; cgroup limit %s; %s\n",
		*objects, *mem, *hold, toolchain.FormatBytes(limit), time.Now().UTC().Format(time.RFC3339))

	// Each configuration gets a fresh group and a clean project, so that
	// none inherits another's page cache, charge or oom counter.
	build := func(o memtest.MakeOptions, withBroker func(*memtest.Group) (*toolchain.Broker, error)) (memtest.Result, *toolchain.Counters, error) {
		if err := p.Clean(); err != nil {
			return memtest.Result{}, nil, err
		}
		g, err := memtest.NewGroup(limit)
		if err != nil {
			return memtest.Result{}, nil, err
		}
		defer g.Close()
		var b *toolchain.Broker
		if withBroker != nil {
			if b, err = withBroker(g); err != nil {
				return memtest.Result{}, nil, err
			}
			o.Env = b.Env()
		}
		res := memtest.RunMake(ctx, g, p, o)
		if b == nil {
			return res, nil, nil
		}
		c := b.Counters()
		if err := b.Close(); err != nil {
			return res, &c, err
		}
		return res, &c, nil
	}

	var rows []row
	for _, j := range jobs {
		o := base
		o.Jobs, o.CC = j, exe+" fakecc"
		res, _, err := build(o, nil)
		if err != nil {
			return err
		}
		rows = append(rows, row{name: fmt.Sprintf("make -j%d", j), res: res})
	}

	statsPath := filepath.Join(work, "stats.json")
	cc := strings.TrimPrefix(toolchain.Launcher{Exe: exe}.MakeEnv(exe+" fakecc", "")[0], "CC=")
	for _, phase := range []string{"cold", "warm"} {
		o := base
		o.Jobs, o.CC = *brokerJobs, cc
		res, c, err := build(o, func(g *memtest.Group) (*toolchain.Broker, error) {
			ml, err := g.Cgroup.ReadMemoryLimit()
			if err != nil {
				return nil, err
			}
			stats, err := toolchain.LoadStats(statsPath, "fixture", "1")
			if err != nil {
				return nil, err
			}
			return toolchain.StartBroker(ctx, toolchain.BrokerOptions{
				Budget: ml.Available - reserve, Stats: stats, StatsPath: statsPath, TrimPrefixes: []string{p.Dir},
			})
		})
		if err != nil {
			return err
		}
		rows = append(rows, row{name: fmt.Sprintf("broker %s, make -j%d", phase, *brokerJobs), res: res, counters: c})
	}

	var best *row
	for i := range rows {
		r := &rows[i]
		if r.counters == nil && r.res.Err == nil && (best == nil || r.res.Wall < best.res.Wall) {
			best = r
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "config\twall\toom_kills\tresult\tpeak_concurrency\tvs best fixed")
	for _, r := range rows {
		result := "ok"
		if r.res.Err != nil {
			result = "FAILED (" + r.res.Err.Error() + ")"
		}
		peak, ratio := "-", "-"
		if r.counters != nil {
			peak = strconv.Itoa(r.counters.PeakConcurrency)
		}
		if best != nil && r.res.Err == nil {
			ratio = fmt.Sprintf("%.2fx", r.res.Wall.Seconds()/best.res.Wall.Seconds())
		}
		fmt.Fprintf(tw, "%s\t%.2fs\t%d\t%s\t%s\t%s\n", r.name, r.res.Wall.Seconds(), r.res.OOMKills, result, peak, ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if best == nil {
		fmt.Println("no fixed -j survived the limit")
	} else {
		fmt.Printf("best surviving fixed: %s (%.2fs)\n", best.name, best.res.Wall.Seconds())
	}
	var failed []string
	for _, r := range rows {
		if r.counters != nil && (r.res.Err != nil || r.res.OOMKills > 0) {
			failed = append(failed, r.name)
		}
	}
	if len(failed) > 0 {
		return errors.New("broker runs failed or were OOM-killed: " + strings.Join(failed, ", "))
	}
	return nil
}
