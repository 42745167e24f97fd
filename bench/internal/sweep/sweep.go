// Package sweep is what the benchmarks here share to measure at several
// levels over several rounds: the comma-separated level lists their flags
// take (concurrencies, batch sizes, jobs) and the median of a figure over
// rounds, taken for each figure on its own so that one disturbed round
// moves none of them.
package sweep

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Levels parses a comma-separated list of positive integers.
func Levels(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad level %q in %q: want positive integers separated by commas", f, list)
		}
		out = append(out, n)
	}
	return out, nil
}

// Median is the median of figure over rounds (the upper middle one of an
// even count); rounds must not be empty.
func Median[R any, T cmp.Ordered](rounds []R, figure func(R) T) T {
	v := make([]T, len(rounds))
	for i, r := range rounds {
		v[i] = figure(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}
