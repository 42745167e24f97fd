package torch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// hangingModel is a forward() that never returns until released, like a
// TorchScript loop without end. tid receives the OS thread it runs on.
type hangingModel struct {
	release chan struct{}
	tid     chan int
}

func (m *hangingModel) Forward([]backend.Tensor) ([]backend.Tensor, error) {
	if m.tid != nil {
		m.tid <- unix.Gettid()
	}
	<-m.release
	return nil, nil
}

// TestExecuteTimeoutRetiresInstance is the pytorch side of issue 17's
// case 5: with EXECUTE_TIMEOUT_SECS a forward that does not return fails
// its batch in time, the instance answers later requests at once with an
// error, reports itself unhealthy, and Close does not wait for it.
func TestExecuteTimeoutRetiresInstance(t *testing.T) {
	spec := rowSpec(8)
	spec.Parameters = map[string]string{ParamExecuteTimeout: "0.2"}
	timeout, err := secondsParam(spec.Parameters, ParamExecuteTimeout)
	if err != nil || timeout != 200*time.Millisecond {
		t.Fatalf("parameter: %v %v", timeout, err)
	}
	m := &hangingModel{release: make(chan struct{})}
	defer close(m.release)
	inst, err := newInstance(spec, m, []string{"x"}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	inst.timeout = timeout
	inst.close = func() error { t.Error("the module of a running forward was freed"); return nil }
	start := time.Now()
	resps, err := inst.Execute(context.Background(), []*backend.Request{rowRequest(1, 2, 0)})
	if err != nil || resps[0].Err == nil || !strings.Contains(resps[0].Err.Error(), "did not return within 200ms (EXECUTE_TIMEOUT_SECS)") {
		t.Fatalf("hanging forward: %v %v", resps, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the batch failed after %s", d)
	}
	if inst.Healthy() == nil {
		t.Error("a retired instance reports healthy")
	}
	if _, err := inst.Execute(context.Background(), []*backend.Request{rowRequest(1, 2, 0)}); err == nil || !strings.Contains(err.Error(), "reload the model") {
		t.Errorf("a request to the retired instance: %v", err)
	}
	if err := inst.Close(); err == nil {
		t.Error("Close of a retired instance claims it freed it")
	}
	for _, bad := range []string{"0", "-1", "x"} {
		if _, err := secondsParam(map[string]string{ParamExecuteTimeout: bad}, ParamExecuteTimeout); err == nil {
			t.Errorf("%s=%q accepted", ParamExecuteTimeout, bad)
		}
	}
}

// TestExecuteTimeoutEndsPlacedThread: under a host policy, a forward that
// outlived the execute timeout keeps its confined thread until it
// returns, and Close of the retired instance lets the thread end then
// instead of leaving it waiting for forwards that never come.
func TestExecuteTimeoutEndsPlacedThread(t *testing.T) {
	cpu := testenv.ConfinableCPU(t)
	spec := rowSpec(8)
	m := &hangingModel{release: make(chan struct{}), tid: make(chan int, 1)}
	placed, err := placeForwards(backend.HostPolicy{CPUs: []int{cpu}}, opened(m))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := newInstance(spec, placed, []string{"x"}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	inst.placed = placed
	inst.timeout = 200 * time.Millisecond
	inst.close = func() error { t.Error("the module of a running forward was freed"); return nil }
	resps, err := inst.Execute(context.Background(), []*backend.Request{rowRequest(1, 2, 0)})
	if err != nil || resps[0].Err == nil {
		t.Fatalf("hanging forward: %v %v", resps, err)
	}
	task := filepath.Join("/proc/self/task", strconv.Itoa(<-m.tid))
	if err := inst.Close(); err == nil {
		t.Error("Close of a retired instance claims it freed it")
	}
	if _, err := os.Stat(task); err != nil {
		t.Fatalf("the thread of the stuck forward ended before the forward returned: %v", err)
	}
	close(m.release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still runs after its stuck forward returned and the instance closed", task)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
