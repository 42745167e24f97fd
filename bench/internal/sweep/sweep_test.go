package sweep

import (
	"slices"
	"strings"
	"testing"
)

func TestLevels(t *testing.T) {
	got, err := Levels("1, 8,64")
	if err != nil || !slices.Equal(got, []int{1, 8, 64}) {
		t.Errorf("Levels(\"1, 8,64\") = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1,,2", "0", "-3", "x"} {
		if _, err := Levels(bad); err == nil || !strings.Contains(err.Error(), "bad level") {
			t.Errorf("Levels(%q): %v, want a bad level error", bad, err)
		}
	}
}

func TestMedian(t *testing.T) {
	type round struct{ a, b int }
	rs := []round{{3, 30}, {1, 20}, {2, 10}, {9, 40}}
	if got := Median(rs, func(r round) int { return r.a }); got != 3 {
		t.Errorf("median of a = %d, want 3 (the upper middle of 1 2 3 9)", got)
	}
	if got := Median(rs[:3], func(r round) int { return r.b }); got != 20 {
		t.Errorf("median of b = %d, want 20", got)
	}
	if rs[0].a != 3 {
		t.Error("Median reordered its input")
	}
}
