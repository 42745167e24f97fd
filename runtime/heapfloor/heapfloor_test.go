package heapfloor

import (
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

func readUint(t *testing.T, name string) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("runtime metric %s is not available", name)
	}
	return s[0].Value.Uint64()
}

// unsetGOGC clears GOGC for the test, so that Start tunes.
func unsetGOGC(t *testing.T) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		os.Unsetenv("GOGC")
		t.Cleanup(func() { os.Setenv("GOGC", v) })
	}
}

// settle runs collections until cond holds, at least two first (so that
// the goal checked is one the floor set after a cycle, not the one before
// it), and fails after a few seconds.
func settle(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for range 2 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: heap goal %d B, GC percent %d", what, readUint(t, "/gc/heap/goal:bytes"), readUint(t, "/gc/gogc:percent"))
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFloorSetsTheHeapGoal(t *testing.T) {
	unsetGOGC(t)
	const floor = 32 << 20
	f, how := Start(floor)
	if f == nil {
		t.Fatalf("Start did not tune: %s", how)
	}
	if how != "Go heap floor 32 MiB" {
		t.Errorf("Start(32 MiB) says %q", how)
	}
	// A small live heap: the goal is the floor (Go's own would be 4 MiB).
	settle(t, "small heap", func() bool {
		g := readUint(t, "/gc/heap/goal:bytes")
		return g >= floor*95/100 && g <= floor*105/100
	})

	// A live heap above half the floor: Go's default pacing, so the
	// heap grows no more than GOGC=100 lets it.
	live := make([][]byte, 48)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	settle(t, "large heap", func() bool { return readUint(t, "/gc/gogc:percent") == 100 })
	if g, l := readUint(t, "/gc/heap/goal:bytes"), readUint(t, "/gc/heap/live:bytes"); g > 2*l+(8<<20) {
		t.Errorf("with %d B live the goal is %d B: more than GOGC=100's", l, g)
	}
	runtime.KeepAlive(live) // and no longer: the heap is small again

	settle(t, "small heap again", func() bool {
		g := readUint(t, "/gc/heap/goal:bytes")
		return g >= floor*95/100 && g <= floor*105/100
	})
	f.Stop()
	if p := readUint(t, "/gc/gogc:percent"); p != 100 {
		t.Fatalf("after Stop the GC percent is %d, want 100", p)
	}
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if p := readUint(t, "/gc/gogc:percent"); p != 100 {
		t.Fatalf("a cycle after Stop set the GC percent to %d", p)
	}
	if g := readUint(t, "/gc/heap/goal:bytes"); g > 8<<20 {
		t.Fatalf("after Stop the heap goal is still %d B", g)
	}
}

func TestGOGCWins(t *testing.T) {
	t.Setenv("GOGC", "150")
	before := readUint(t, "/gc/gogc:percent")
	f, reason := Start(DefaultBytes)
	if f != nil {
		f.Stop()
		t.Fatal("Start tuned the collector although GOGC is set")
	}
	if !strings.Contains(reason, "GOGC=150") {
		t.Errorf("reason %q does not name GOGC", reason)
	}
	if p := readUint(t, "/gc/gogc:percent"); p != before {
		t.Errorf("GC percent changed to %d", p)
	}
}

// Two floors that overlap, as the servers of one test process do, leave
// GOGC=100 behind once both stop, whichever order they stop in.
func TestOverlappingFloors(t *testing.T) {
	unsetGOGC(t)
	a, _ := Start(32 << 20)
	b, _ := Start(64 << 20)
	if a == nil || b == nil {
		t.Fatal("Start did not tune")
	}
	runtime.GC()
	a.Stop()
	settle(t, "the second floor alone", func() bool {
		g := readUint(t, "/gc/heap/goal:bytes")
		return g >= 64<<20*95/100 && g <= 64<<20*105/100
	})
	b.Stop()
	settle(t, "both stopped", func() bool { return readUint(t, "/gc/gogc:percent") == 100 })
}

func TestZeroFloorChangesNothing(t *testing.T) {
	unsetGOGC(t)
	if f, reason := Start(0); f != nil || reason == "" {
		t.Fatalf("Start(0) = %v, %q; want nil and a reason", f, reason)
	}
	var f *Floor
	f.Stop() // a nil floor stops as nothing
}
