// Command config measures loading a model whose configuration carries many
// parameters (issue 17's case 4: rendering them sorted took quadratic
// time). In the same run it measures the floor, protobuf's own text parse
// of the same config.pbtxt, and reports the whole load (read, parse,
// validate, render the JSON form, build the version with the fake backend)
// as a ratio of it, for n and 4n parameters: linear handling keeps both
// ratios alike, a quadratic step makes the second grow fourfold.
//
//	go run ./bench/config [-params 100000] [-runs 5]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
)

const base = `backend: "fake"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
`

func main() {
	params := flag.Int("params", 100_000, "parameters in the config (the second size is four times this)")
	runs := flag.Int("runs", 5, "timed runs per measurement")
	flag.Parse()
	if err := run(*params, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "config:", err)
		os.Exit(1)
	}
}

func run(params, runs int) error {
	fmt.Printf("%-10s %-12s %-22s %-22s %s\n", "params", "config size", "prototext parse (floor)", "repository load", "load / floor")
	for _, n := range []int{params, 4 * params} {
		root, err := os.MkdirTemp("", "config-bench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(root)
		text := config(n)
		if err := os.MkdirAll(filepath.Join(root, "m", "1"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, "m", "config.pbtxt"), []byte(text), 0o644); err != nil {
			return err
		}
		floor, err := measure(runs, func() error {
			return prototext.Unmarshal([]byte(text), &modelconfig.ModelConfig{})
		})
		if err != nil {
			return err
		}
		mgr, err := repository.New(repository.Options{Repositories: []string{root},
			Backends: map[string]backend.Backend{"fake": fake.New()}, MaxConfigSize: int64(len(text)) + 1})
		if err != nil {
			return err
		}
		load, err := measure(runs, func() error { return mgr.Load(context.Background(), "m") })
		_ = mgr.Close(context.Background())
		if err != nil {
			return err
		}
		fmt.Printf("%-10d %-12s %-22s %-22s %.2f (%.2f-%.2f)\n", n, fmt.Sprintf("%.1f MB", float64(len(text))/1e6),
			floor.String(), load.String(), load.median/floor.median, load.min/floor.max, load.max/floor.min)
	}
	return nil
}

// config is base with n parameters in reverse key order, the worst case
// for an insertion sort.
func config(n int) string {
	var b strings.Builder
	b.WriteString(base)
	for i := n; i > 0; i-- {
		fmt.Fprintf(&b, "parameters { key: \"p%07d\" value { string_value: \"value\" } }\n", i)
	}
	return b.String()
}

type stats struct{ min, median, max float64 } // seconds

func (s stats) String() string {
	return fmt.Sprintf("%.3fs (%.3f-%.3f)", s.median, s.min, s.max)
}

func measure(runs int, f func() error) (stats, error) {
	var ts []float64
	for i := 0; i < runs; i++ {
		start := time.Now()
		if err := f(); err != nil {
			return stats{}, err
		}
		ts = append(ts, time.Since(start).Seconds())
	}
	slices.Sort(ts)
	return stats{ts[0], ts[len(ts)/2], ts[len(ts)-1]}, nil
}
