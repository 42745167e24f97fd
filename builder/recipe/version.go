package recipe

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// Constraint is a version requirement: a comma-separated conjunction of
// terms, each "=V", ">=V", ">V", "<=V", "<V", or "V" (V itself or any
// version below it: "1.13" matches 1.13, 1.13.1 and 1.13.0a0). Empty
// matches everything.
type Constraint string

type constraintTerm struct {
	op string
	v  string
}

func (c Constraint) terms() ([]constraintTerm, error) {
	var out []constraintTerm
	for _, raw := range strings.Split(string(c), ",") {
		t := strings.TrimSpace(raw)
		if t == "" {
			continue
		}
		op := ""
		for _, p := range []string{">=", "<=", ">", "<", "="} {
			if strings.HasPrefix(t, p) {
				op = p
				t = strings.TrimSpace(t[len(p):])
				break
			}
		}
		if t == "" || strings.ContainsAny(t, " <>=") {
			return nil, fmt.Errorf("invalid version constraint %q", string(c))
		}
		out = append(out, constraintTerm{op, t})
	}
	return out, nil
}

// Validate reports a malformed constraint.
func (c Constraint) Validate() error {
	_, err := c.terms()
	return err
}

// UnmarshalYAML checks the constraint's syntax at decode time.
func (c *Constraint) UnmarshalYAML(node ast.Node) error {
	s, err := scalarString(node)
	if err != nil {
		return err
	}
	*c = Constraint(s)
	if err := c.Validate(); err != nil {
		return nodeError(node, err.Error())
	}
	return nil
}

// Match reports whether version v satisfies every term.
func (c Constraint) Match(v string) bool {
	terms, err := c.terms()
	if err != nil {
		return false
	}
	for _, t := range terms {
		cmp := compareVersions(v, t.v)
		ok := false
		switch t.op {
		case "=":
			ok = cmp == 0
		case ">=":
			ok = cmp >= 0
		case ">":
			ok = cmp > 0
		case "<=":
			ok = cmp <= 0
		case "<":
			ok = cmp < 0
		default:
			ok = v == t.v || strings.HasPrefix(v, t.v+".") || strings.HasPrefix(v, t.v+"a") || strings.HasPrefix(v, t.v+"+")
		}
		if !ok {
			return false
		}
	}
	return true
}

// compareVersions compares dotted versions numerically component by
// component; non-numeric parts compare as strings. An epoch prefix "N:" as in
// Debian versions is ignored.
func compareVersions(a, b string) int {
	strip := func(s string) string {
		if i := strings.IndexByte(s, ':'); i >= 0 {
			return s[i+1:]
		}
		return s
	}
	pa := strings.FieldsFunc(strip(a), func(r rune) bool { return r == '.' || r == '-' || r == '+' })
	pb := strings.FieldsFunc(strip(b), func(r rune) bool { return r == '.' || r == '-' || r == '+' })
	for i := 0; i < len(pa) || i < len(pb); i++ {
		if i >= len(pa) {
			return -1
		}
		if i >= len(pb) {
			return 1
		}
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		switch {
		case ea == nil && eb == nil:
			if na != nb {
				if na < nb {
					return -1
				}
				return 1
			}
		default:
			if c := strings.Compare(pa[i], pb[i]); c != 0 {
				return c
			}
		}
	}
	return 0
}
