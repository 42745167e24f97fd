package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// timedBackend wraps the backend the server's scheduler calls and records
// the wall time of every Execute of plainModel by its total rows: what the
// scheduler's compute_infer sums, kept per execution so that a median can
// be taken. On a loaded machine a few executions preempted for
// milliseconds make the mean (Triton's statistic, printed too) a measure
// of the machine rather than of the server.
type timedBackend struct {
	backend.Backend
	rec *execTimes
}

type execTimes struct {
	mu    sync.Mutex
	times map[int][]time.Duration
}

func (b timedBackend) NewInstance(ctx context.Context, spec *backend.ModelSpec, idx int) (backend.Instance, error) {
	in, err := b.Backend.NewInstance(ctx, spec, idx)
	if err != nil || spec.Name != plainModel {
		return in, err
	}
	return timedInstance{Instance: in, rec: b.rec}, nil
}

type timedInstance struct {
	backend.Instance
	rec *execTimes
}

func (in timedInstance) Execute(ctx context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	t0 := time.Now()
	resps, err := in.Instance.Execute(ctx, reqs)
	el := time.Since(t0)
	rows := 0
	for _, r := range reqs {
		if len(r.Inputs) > 0 && len(r.Inputs[0].Shape) > 0 {
			rows += int(r.Inputs[0].Shape[0])
		}
	}
	in.rec.add(rows, el)
	return resps, err
}

func (r *execTimes) add(rows int, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.times[rows] = append(r.times[rows], d)
}

func (r *execTimes) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.times)
}

// stats returns the mean and median execution time at rows since reset.
func (r *execTimes) stats(rows int) (mean, p50 time.Duration, n int) {
	r.mu.Lock()
	ts := slices.Clone(r.times[rows])
	r.mu.Unlock()
	return meanMedian(ts)
}

// meanMedian of ts; zeros for none.
func meanMedian(ts []time.Duration) (mean, p50 time.Duration, n int) {
	if len(ts) == 0 {
		return 0, 0, 0
	}
	var sum time.Duration
	for _, t := range ts {
		sum += t
	}
	slices.Sort(ts)
	return sum / time.Duration(len(ts)), ts[len(ts)/2], len(ts)
}
