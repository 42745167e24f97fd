package tracing

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

func TestSamplingAndModelFallback(t *testing.T) {
	file := filepath.Join(t.TempDir(), "t.json")
	m, err := New(Options{Global: Setting{Level: LevelTimestamps, Rate: 2, Count: 3, File: file}})
	if err != nil {
		t.Fatal(err)
	}
	sampled := 0
	for i := 0; i < 10; i++ {
		if tr := m.Sample("a", nil); tr != nil {
			sampled++
			tr.Activity("REQUEST_START", time.Now())
			tr.SetModel("a", 1, "")
			tr.RequestEnd(nil)
			tr.End()
		}
	}
	if sampled != 3 {
		t.Errorf("rate 2, count 3: %d sampled of 10", sampled)
	}
	if got := m.Settings("")[KeyCount][0]; got != "0" {
		t.Errorf("remaining count %s", got)
	}
	// A model setting overrides the rate; its count follows the global one
	// until set, and clearing the override returns to the global setting.
	if err := m.Update("b", map[string][]string{KeyRate: {"1"}, KeyCount: {"-1"}}); err != nil {
		t.Fatal(err)
	}
	if m.Sample("b", nil) == nil || m.Sample("a", nil) != nil {
		t.Error("model b's own setting does not trace it, or a traced with count 0")
	}
	if err := m.Update("", map[string][]string{KeyLevel: {"TIMESTAMPS", "TENSORS"}}); err != nil {
		t.Fatal(err)
	}
	if lv := m.Settings("b")[KeyLevel]; len(lv) != 2 {
		t.Errorf("model b does not follow the global level: %v", lv)
	}
	if err := m.Update("b", map[string][]string{KeyRate: nil, KeyCount: nil}); err != nil {
		t.Fatal(err)
	}
	if m.Settings("b")[KeyRate][0] != "2" {
		t.Errorf("cleared model setting: %v", m.Settings("b"))
	}
	for _, bad := range []map[string][]string{{KeyLevel: {"OFF", "TENSORS"}}, {KeyRate: {"x"}}, {KeyCount: {"-2"}}, {"colour": {"1"}}, {KeyFile: {"/x"}}} {
		if err := m.Update("", bad); err == nil {
			t.Errorf("update %v accepted", bad)
		}
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A finite count collects into an indexed file, written when it runs out.
	data, _ := os.ReadFile(file + ".0")
	var recs []map[string]any
	if err := json.Unmarshal(data, &recs); err != nil || len(recs) != 3*4 {
		t.Errorf("trace file: %v, %d records: %s", err, len(recs), data)
	}

	off, _ := New(Options{Global: Setting{Rate: 1, Count: -1, File: file}})
	if off.active.Load() || off.Sample("a", nil) != nil {
		t.Error("level OFF samples")
	}
	var none *Manager
	if none.Sample("a", nil) != nil {
		t.Error("nil manager samples")
	}
}

func TestTensorRecords(t *testing.T) {
	file := filepath.Join(t.TempDir(), "t.json")
	m, err := New(Options{Global: Setting{Level: LevelTimestamps | LevelTensors, Rate: 1, Count: -1, File: file}})
	if err != nil {
		t.Fatal(err)
	}
	tr := m.Sample("m", nil)
	data := []byte{1, 0, 0, 0, 2, 0, 0, 0}
	tr.Tensors("TENSOR_QUEUE_INPUT", []backend.Tensor{{Name: "X", DataType: backend.Int32, Shape: []int64{1, 2}, Data: data}})
	data[0] = 9 // the caller reuses its buffer
	tr.SetModel("m", 3, "r1")
	tr.RequestEnd(&backend.Response{Outputs: []backend.Tensor{{Name: "S", DataType: backend.Bytes, Shape: []int64{1}, Data: []byte{2, 0, 0, 0, 'h', 'i'}}}})
	tr.End()
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(file)
	var recs []map[string]any
	if err := json.Unmarshal(raw, &recs); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	var got []string
	for _, r := range recs {
		if tn, ok := r["tensor"].(map[string]any); ok {
			got = append(got, r["activity"].(string)+" "+tn["name"].(string)+" "+tn["data"].(string)+" "+tn["shape"].(string)+" "+tn["dtype"].(string))
		}
	}
	if want := `TENSOR_QUEUE_INPUT X 1,2 1,2 INT32|TENSOR_BACKEND_OUTPUT S "hi" 1 BYTES`; strings.Join(got, "|") != want {
		t.Errorf("tensor records %q, want %q\n%s", got, want, raw)
	}
}
