package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// TestStubLoopTimesTheGivenModel: the floor's loop runs the model.py of
// the run's -seed, not always the report's: a model.py that answers no
// outputs fails it, the report's passes, with model.py's own execute
// timed apart from (and below) the stub's whole one.
func TestStubLoopTimesTheGivenModel(t *testing.T) {
	const py = "/usr/bin/python3"
	testenv.NeedPython(t, py, "torch", "numpy")
	bad := filepath.Join(t.TempDir(), "model.py")
	if err := os.WriteFile(bad, []byte("class TritonPythonModel:\n    def execute(self, requests):\n        raise RuntimeError('no outputs here')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Join("..", "..")) // stubparts.py runs from the repository root
	if _, err := stubLoop(py, bad, []int{1}); err == nil || !strings.Contains(err.Error(), "did not answer the frame with outputs") {
		t.Fatalf("a model.py that raises in execute: want the loop refused, got %v", err)
	}
	if _, err := stubLoop(py, filepath.Join(t.TempDir(), "none.py"), []int{1}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("a model.py that does not exist: want it named, got %v", err)
	}
	report := filepath.Join("runtime", "python", "testdata", "seed-model-repository-batched", "simple_linear", "1", "model.py")
	times, err := stubLoop(py, report, []int{1, 3})
	if err != nil {
		t.Fatalf("the report's model.py: %v", err)
	}
	for _, n := range []int{1, 3} {
		// model.py's execute is a part of Stub.execute, which also parses
		// the frame, builds the requests and writes the outputs.
		if m, e := times.model[n], times.execute[n]; m <= 0 || e <= m {
			t.Errorf("a batch of %d: model.py alone %v, the whole Stub.execute %v: want 0 < model < whole", n, m, e)
		}
	}
}

// TestParseStubTimes: stubparts.py's output is read from its last line;
// anything else there, a missing part or size, or a figure that is not a
// positive number is refused with the output quoted, never read as zero.
func TestParseStubTimes(t *testing.T) {
	good := []byte("Model initialized\n{\"execute\": {\"1\": 20.5, \"8\": 150}, \"model\": {\"1\": 10, \"8\": 90.25}}\n")
	times, err := parseStubTimes(good, []int{1, 8})
	if err != nil {
		t.Fatal(err)
	}
	if times.execute[8] != 150*time.Microsecond || times.model[8] != 90250*time.Nanosecond {
		t.Errorf("parsed %v / %v, want 150us / 90.25us", times.execute[8], times.model[8])
	}
	for name, out := range map[string]string{
		"not JSON":          "Traceback (most recent call last):\n  boom",
		"empty":             "",
		"the old shape":     `{"1": 20.5, "8": 150}`,
		"no model part":     `{"execute": {"1": 20.5, "8": 150}}`,
		"a size missing":    `{"execute": {"1": 20.5}, "model": {"1": 10}}`,
		"a zero figure":     `{"execute": {"1": 20.5, "8": 150}, "model": {"1": 0, "8": 90}}`,
		"a negative figure": `{"execute": {"1": 20.5, "8": -1}, "model": {"1": 10, "8": 90}}`,
		"a string figure":   `{"execute": {"1": "fast", "8": 150}, "model": {"1": 10, "8": 90}}`,
	} {
		if _, err := parseStubTimes([]byte(out), []int{1, 8}); err == nil || !strings.Contains(err.Error(), "stubparts.py") {
			t.Errorf("%s: want an error naming stubparts.py, got %v", name, err)
		}
	}
}
