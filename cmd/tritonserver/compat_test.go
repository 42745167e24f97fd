package main

import (
	"os"
	"regexp"
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
	for name := range helpFlags(t) {
		names = append(names, name)
	}
	for _, n := range names {
		prefixed := "`--" + n
		if !strings.Contains(page, prefixed+"`") && !strings.Contains(page, prefixed+",") && !strings.Contains(page, prefixed+" ") {
			t.Errorf("docs/triton-compat.md has no row for --%s", n)
		}
	}
}

// helpFlags returns every flag of --help with its default as the flag
// package prints it ("" when it prints none, then the type's zero value).
func helpFlags(t *testing.T) map[string]string {
	t.Helper()
	out := &strings.Builder{}
	_, _ = parseFlags([]string{"--help"}, out)
	flags := map[string]string{}
	lines := strings.Split(out.String(), "\n")
	defRE := regexp.MustCompile(`\(default "?([^")]*)"?\)$`)
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "-") || strings.HasPrefix(line, "    ") {
			continue
		}
		def := map[string]string{"int": "0", "uint": "0", "int64": "0", "float": "0", "string": ""}[strings.Join(f[1:], "")]
		if len(f) == 1 {
			def = "false" // a boolean
		}
		if i+1 < len(lines) {
			if m := defRE.FindStringSubmatch(strings.TrimSpace(lines[i+1])); m != nil {
				def = m[1]
			}
		}
		flags[strings.TrimLeft(f[0], "-")] = def
	}
	if len(flags) < 60 {
		t.Fatalf("found only %d flags in --help", len(flags))
	}
	return flags
}

// TestSecurityPageFlags keeps docs/security.md true: every flag it names
// exists (or is one the server refuses by name), and every row of its
// limits table states the flag's real default.
func TestSecurityPageFlags(t *testing.T) {
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	flags := helpFlags(t)
	for _, m := range regexp.MustCompile("--([a-z][a-z0-9-]*)").FindAllStringSubmatch(string(doc), -1) {
		if _, ok := flags[m[1]]; !ok {
			if _, refused := refusedFlags[m[1]]; !refused {
				t.Errorf("docs/security.md names --%s, which the server does not define", m[1])
			}
		}
	}
	rows := 0
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| `([^`]*)`").FindAllStringSubmatch(string(doc), -1) {
		rows++
		if def, ok := flags[m[1]]; ok && def != m[2] {
			t.Errorf("docs/security.md: --%s defaults to %q, the page says %q", m[1], def, m[2])
		}
	}
	if rows < 15 {
		t.Errorf("found only %d rows in the limits table", rows)
	}
}
