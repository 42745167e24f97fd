package torch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// hangingModel is a forward() that never returns until released, like a
// TorchScript loop without end.
type hangingModel struct{ release chan struct{} }

func (m *hangingModel) Forward([]backend.Tensor) ([]backend.Tensor, error) {
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
