package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
)

// seqInfer sends one request of a sequence (id is a JSON number or
// string) and returns the status and body.
func (e *env) seqInfer(model, id string, start, end bool, v int) (int, string, error) {
	body := fmt.Sprintf(`{"parameters":{"sequence_id":%s,"sequence_start":%v,"sequence_end":%v},"inputs":[{"name":"IN","datatype":"INT32","shape":[1,1],"data":[%d]}]}`, id, start, end, v)
	resp, err := e.srv.Client().Post(e.srv.URL+"/v2/models/"+model+"/infer", "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func outOf(body string) (int, error) {
	var r struct {
		Outputs []struct {
			Data []int `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Outputs) != 1 || len(r.Outputs[0].Data) != 1 {
		return 0, fmt.Errorf("unexpected response %s (%w)", body, err)
	}
	return r.Outputs[0].Data[0], nil
}

// TestSequenceBatching runs interleaved sequences from many clients over
// HTTP against both strategies (uint64 ids on the direct model, string ids
// on the oldest one), each checking its own running sum, then Triton's
// refusals and the idle release.
func TestSequenceBatching(t *testing.T) {
	e := newEnv(t, map[string]string{"direct": frontendtest.SeqDirect, "oldest": frontendtest.SeqOldest}, 0)
	for _, tc := range []struct{ model, id string }{{"direct", "%d"}, {"oldest", `"client-%d"`}} {
		var wg sync.WaitGroup
		errs := make(chan error, 12)
		for c := 0; c < 12; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				id := fmt.Sprintf(tc.id, 100+c)
				sum := 0
				for i := 0; i < 5; i++ {
					v := c*10 + i
					sum += v
					code, body, err := e.seqInfer(tc.model, id, i == 0, i == 4, v)
					if err == nil && code != 200 {
						err = fmt.Errorf("status %d: %s", code, body)
					}
					got := 0
					if err == nil {
						got, err = outOf(body)
					}
					if err == nil && got != sum {
						err = fmt.Errorf("got %d, want %d", got, sum)
					}
					if err != nil {
						errs <- fmt.Errorf("%s sequence %s step %d: %w", tc.model, id, i, err)
						return
					}
				}
			}(c)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}

	refused := func(model, id string, start bool, want string) {
		t.Helper()
		code, body, err := e.seqInfer(model, id, start, false, 1)
		if err != nil || code != 400 || !strings.Contains(body, want) {
			t.Errorf("sequence %s: %d %s %v, want 400 with %q", id, code, body, err, want)
		}
	}
	refused("direct", "0", true, "inference request to model 'direct' must specify a non-zero or non-empty correlation ID")
	refused("direct", `""`, true, "inference request to model 'direct' must specify a non-zero or non-empty correlation ID")
	refused("direct", "77", false, "inference request for sequence 77 to model 'direct' must specify the START flag on the first request of the sequence")
	refused("oldest", `"nope"`, false, "inference request for sequence nope to model 'oldest' must specify the START flag on the first request of the sequence")
	// Triton reads an id that is not an unsigned integer as a string,
	// and fails in its JSON library's words (INTERNAL).
	for _, id := range []string{"true", "-1", "1.5", "null"} {
		code, body, err := e.seqInfer("direct", id, true, false, 1)
		if want := errorJSON("Unable to parse 'sequence_id': attempt to access JSON non-string as string"); err != nil || code != 500 || body != want {
			t.Errorf("sequence %s: %d %s %v, want 500 %s", id, code, body, err, want)
		}
	}

	// A sequence idle past max_sequence_idle_microseconds (1 s) is
	// released: its next request is one that never started.
	if code, body, _ := e.seqInfer("direct", "5", true, false, 3); code != 200 {
		t.Fatalf("start: %d %s", code, body)
	}
	if code, body, _ := e.seqInfer("direct", "5", false, false, 4); code != 200 || !strings.Contains(body, "[7]") {
		t.Fatalf("continue within the idle time: %d %s", code, body)
	}
	time.Sleep(3 * time.Second) // the 1 s idle timeout and the reaper's round, with room
	refused("direct", "5", false, "inference request for sequence 5 to model 'direct' must specify the START flag on the first request of the sequence")
	// A restarted sequence starts from fresh state.
	if code, body, _ := e.seqInfer("direct", "5", true, true, 9); code != 200 || !strings.Contains(body, "[9]") {
		t.Fatalf("restart: %d %s", code, body)
	}
}
