package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// RateLimiter is Triton's rate limiter (--rate-limit=execution_count): an
// instance that lists resources in its instance group's rate_limiter may
// execute only while it holds that many copies of each, across every
// model of the server; instances waiting for resources are granted in
// order of their priority scaled by how often they already executed
// (priority 2 gets half the turns of priority 1), then of arrival. A
// resource has the copies --rate-limit-resource gives it, and otherwise
// the most any loaded instance lists. All instances here run on the CPU,
// device 0, so a per-device resource is one pool, as is a global one.
// It is safe for concurrent use.
type RateLimiter struct {
	mu       sync.Mutex
	explicit map[poolKey]int // --rate-limit-resource counts
	used     map[poolKey]int
	tickets  map[*Ticket]struct{} // registered instances
	waiting  []*Ticket
	arrivals uint64
}

type poolKey struct {
	name   string // lower case: Triton's resource names are case-insensitive
	global bool
}

// Resource is one rate_limiter resource of an instance group.
type Resource struct {
	Name   string
	Global bool
	Count  int
}

// Ticket is one instance's place in the rate limiter.
type Ticket struct {
	rl       *RateLimiter
	needs    map[poolKey]int
	priority uint64
	execs    uint64
	arrival  uint64
	granted  bool
	ready    chan struct{}
}

// NewRateLimiter returns a rate limiter. Each of resources is a
// --rate-limit-resource value <name>:<count>[:<device>]; a device other
// than 0 names none of this server's, so only a global resource of that
// name takes its count.
func NewRateLimiter(resources []string) (*RateLimiter, error) {
	rl := &RateLimiter{explicit: map[poolKey]int{}, used: map[poolKey]int{}, tickets: map[*Ticket]struct{}{}}
	for _, r := range resources {
		f := strings.Split(r, ":")
		if len(f) < 2 || len(f) > 3 || f[0] == "" {
			return nil, fmt.Errorf("--rate-limit-resource %q: want <resource_name>:<count>[:<device>]", r)
		}
		var n, dev int
		if _, err := fmt.Sscanf(f[1], "%d", &n); err != nil || n < 0 || fmt.Sprint(n) != f[1] {
			return nil, fmt.Errorf("--rate-limit-resource %q: count %q is not a non-negative integer", r, f[1])
		}
		if len(f) == 3 {
			if _, err := fmt.Sscanf(f[2], "%d", &dev); err != nil || dev < 0 || fmt.Sprint(dev) != f[2] {
				return nil, fmt.Errorf("--rate-limit-resource %q: device %q is not a device id", r, f[2])
			}
		}
		name := strings.ToLower(f[0])
		rl.explicit[poolKey{name, true}] = n
		if dev == 0 {
			rl.explicit[poolKey{name, false}] = n
		}
	}
	return rl, nil
}

// Register adds an instance needing resources, with priority (0 counts as
// 1). It fails when --rate-limit-resource gives a resource fewer copies
// than the instance needs, since it could never run.
func (rl *RateLimiter) Register(resources []Resource, priority uint32) (*Ticket, error) {
	t := &Ticket{rl: rl, needs: map[poolKey]int{}, priority: uint64(max(priority, 1)), ready: make(chan struct{}, 1)}
	for _, r := range resources {
		if r.Name == "" {
			return nil, fmt.Errorf("rate_limiter resource has no name")
		}
		if r.Count < 0 {
			return nil, fmt.Errorf("rate_limiter resource %q has a negative count", r.Name)
		}
		t.needs[poolKey{strings.ToLower(r.Name), r.Global}] += r.Count
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	for k, n := range t.needs {
		if have, ok := rl.explicit[k]; ok && n > have {
			return nil, fmt.Errorf("resource count for %q is limited to %d by --rate-limit-resource, which would prevent this instance from ever executing: it needs %d", k.name, have, n)
		}
	}
	rl.tickets[t] = struct{}{}
	rl.grant() // the default counts may have grown
	return t, nil
}

// Unregister removes an instance that no longer executes.
func (t *Ticket) Unregister() {
	rl := t.rl
	rl.mu.Lock()
	defer rl.mu.Unlock()
	delete(rl.tickets, t)
	rl.waiting = slices.DeleteFunc(rl.waiting, func(w *Ticket) bool { return w == t })
	rl.grant()
}

// available is the number of copies of k.
func (rl *RateLimiter) available(k poolKey) int {
	if n, ok := rl.explicit[k]; ok {
		return n
	}
	n := 0
	for t := range rl.tickets {
		n = max(n, t.needs[k])
	}
	return n
}

func (rl *RateLimiter) fits(t *Ticket) bool {
	for k, n := range t.needs {
		if rl.used[k]+n > rl.available(k) {
			return false
		}
	}
	return true
}

// grant hands resources to the waiting instances that fit, best scaled
// priority first. One that does not fit does not hold back those after
// it that do (resources are never left idle while someone could run).
func (rl *RateLimiter) grant() {
	if len(rl.waiting) == 0 {
		return
	}
	slices.SortStableFunc(rl.waiting, func(a, b *Ticket) int {
		pa, pb := a.priority*(a.execs+1), b.priority*(b.execs+1)
		switch {
		case pa != pb:
			return int(min(max(int64(pa)-int64(pb), -1), 1))
		case a.arrival < b.arrival:
			return -1
		case a.arrival > b.arrival:
			return 1
		}
		return 0
	})
	kept := rl.waiting[:0]
	for _, t := range rl.waiting {
		if !rl.fits(t) {
			kept = append(kept, t)
			continue
		}
		for k, n := range t.needs {
			rl.used[k] += n
		}
		t.granted = true
		t.ready <- struct{}{}
	}
	clear(rl.waiting[len(kept):])
	rl.waiting = kept
}

// tryAcquire takes t's resources if they are free and no instance waits
// for any before t, and reports whether it did.
func (t *Ticket) tryAcquire() bool {
	rl := t.rl
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if len(rl.waiting) > 0 || !rl.fits(t) {
		return false
	}
	for k, n := range t.needs {
		rl.used[k] += n
	}
	t.granted = true
	return true
}

// acquire waits until t holds its resources. It returns false, holding
// nothing, when ctx ends first.
func (t *Ticket) acquire(ctx context.Context) bool {
	rl := t.rl
	rl.mu.Lock()
	rl.arrivals++
	t.arrival, t.granted = rl.arrivals, false
	rl.waiting = append(rl.waiting, t)
	rl.grant()
	rl.mu.Unlock()
	select {
	case <-t.ready:
		return true
	case <-ctx.Done():
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if t.granted {
		<-t.ready
		t.giveBack()
		return false
	}
	rl.waiting = slices.DeleteFunc(rl.waiting, func(w *Ticket) bool { return w == t })
	return false
}

// release returns t's resources after an execution.
func (t *Ticket) release() {
	t.rl.mu.Lock()
	defer t.rl.mu.Unlock()
	t.execs++
	t.giveBack()
}

func (t *Ticket) giveBack() {
	for k, n := range t.needs {
		t.rl.used[k] -= n
	}
	t.granted = false
	t.rl.grant()
}
