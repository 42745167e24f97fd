package main

import (
	"fmt"
	"math"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// goal is one of issue 18's targets, stated as a ratio or a difference of
// figures measured in the same run.
type goal struct {
	name string
	// client is what sent the requests: "in-process" (Go clients in this
	// process, beside the servers) or the outside load generator; a
	// ratio's two sides always share it.
	client   string
	measured float64
	limit    float64
	atMost   bool // measured <= limit (else >=)
	unit     string
}

func (g goal) met() bool {
	if g.atMost {
		return g.measured <= g.limit
	}
	return g.measured >= g.limit
}

// report prints every goal with its measurement and returns how many
// missed.
func report(goals []goal) int {
	missed := 0
	fmt.Println("goals (issue 18):")
	fmt.Printf("  %-48s %-14s %s\n", "goal", "client", "measured")
	for _, g := range goals {
		if math.IsNaN(g.measured) {
			fmt.Printf("  %-48s %-14s not measured (-cases)\n", g.name, g.client)
			continue
		}
		op, verdict := ">=", "met"
		if g.atMost {
			op = "<="
		}
		if !g.met() {
			verdict = "MISSED"
			missed++
		}
		fmt.Printf("  %-48s %-14s %9.2f%s %s %.2f%s  %s\n", g.name, g.client, g.measured, g.unit, op, g.limit, g.unit, verdict)
	}
	return missed
}

// batchInfer is the compute_infer total per batch size of a stats snapshot.
func batchInfer(st scheduler.Stats) map[int]scheduler.Duration {
	m := map[int]scheduler.Duration{}
	for _, b := range st.Batches {
		m[b.BatchSize] = b.ComputeInfer
	}
	return m
}

// meanExecute is the mean execution time of batch size rows between two
// snapshots (Triton's compute_infer per execution).
func meanExecute(before, after map[int]scheduler.Duration, rows int) (time.Duration, uint64) {
	n := after[rows].Count - before[rows].Count
	if n == 0 {
		return 0, 0
	}
	return time.Duration((after[rows].Ns - before[rows].Ns) / n), n
}
