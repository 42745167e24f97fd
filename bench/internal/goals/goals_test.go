package goals

import (
	"testing"
	"time"
)

func TestPythonOverPytorch(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 400 * time.Microsecond, 3: 400 * time.Microsecond, 4: 200 * time.Microsecond, 8: 200 * time.Microsecond} {
		if got := PythonOverPytorch(n); got != want {
			t.Errorf("%d instances: %v, want %v", n, got, want)
		}
	}
}
