package main

import (
	"os"
	"strings"
	"testing"
)

// TestCompatPageListsEveryFlag keeps docs/triton-compat.md true: every
// flag the server defines or refuses has a row.
func TestCompatPageListsEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/triton-compat.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(doc)
	var names []string
	for name := range refusedFlags {
		names = append(names, name)
	}
	out := &strings.Builder{}
	_, _ = parseFlags([]string{"--help"}, out)
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "-") {
			names = append(names, strings.TrimLeft(f[0], "-"))
		}
	}
	if len(names) < 60 {
		t.Fatalf("found only %d flags in --help", len(names))
	}
	for _, n := range names {
		prefixed := "`--" + n
		if !strings.Contains(page, prefixed+"`") && !strings.Contains(page, prefixed+",") && !strings.Contains(page, prefixed+" ") {
			t.Errorf("docs/triton-compat.md has no row for --%s", n)
		}
	}
}
