package recipe

import (
	"strings"
	"testing"
)

// A script step's name names its log file (logs/NAME/HASH/STEP.log): a
// name with a slash fails only when the build runs, without the recipe's
// file and line, and ".." components put the log outside the store's logs.
func TestStepNameMustBeAFileName(t *testing.T) {
	for _, name := range []string{"a/b", "../../escape"} {
		y := "name: s\nversions:\n  - version: \"1\"\n    source: {local: .}\nbuild:\n  script:\n    steps:\n      - name: \"" + name + "\"\n        run: \"true\"\n"
		_, err := Parse("s.yaml", []byte(y))
		if err == nil || !strings.Contains(err.Error(), "s.yaml:8:") {
			t.Errorf("step name %q: err %v, want an error at s.yaml:8", name, err)
		}
	}
	ok := "name: s\nversions:\n  - version: \"1\"\n    source: {local: .}\nbuild:\n  script:\n    steps:\n      - name: build-all.v2\n        run: \"true\"\n"
	if _, err := Parse("s.yaml", []byte(ok)); err != nil {
		t.Errorf("a plain step name refused: %v", err)
	}
}
