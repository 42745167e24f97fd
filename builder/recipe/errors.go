package recipe

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// PosError is an error in a recipe or config file at a position. Field is the
// YAML path of the offending value ("versions[0].source.sha256").
type PosError struct {
	File   string
	Line   int
	Column int
	Field  string
	Msg    string
}

func (e *PosError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	if e.Field != "" {
		fmt.Fprintf(&b, "%s: ", e.Field)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList joins several positioned errors; loading reports all of them,
// not only the first.
type ErrorList []error

func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap lets errors.As find the individual errors.
func (l ErrorList) Unwrap() []error { return l }

// nodeError makes a decode error carrying the node's token so that the
// loader can report file:line:column.
func nodeError(node ast.Node, msg string) error {
	return &yaml.SyntaxError{Message: msg, Token: node.GetToken()}
}

// doc is a parsed YAML file kept for position lookups after decoding.
type doc struct {
	file string
	ast  *ast.File
}

// errAt returns a PosError for the value at YAML path field ("a.b[0].c"),
// falling back to the closest existing parent and finally to 1:1.
func (d *doc) errAt(field, format string, args ...any) *PosError {
	line, col := d.pos(field)
	return &PosError{File: d.file, Line: line, Column: col, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func (d *doc) pos(field string) (int, int) {
	if d.ast == nil {
		return 1, 1
	}
	for f := field; ; {
		if p, err := yaml.PathString("$" + dotted(f)); err == nil {
			if n, err := p.FilterFile(d.ast); err == nil && n != nil {
				tok := keyToken(d.ast, f, n)
				return tok.Position.Line, tok.Position.Column
			}
		}
		i := strings.LastIndexAny(f, ".[")
		if i <= 0 {
			return 1, 1
		}
		f = f[:i]
	}
}

// keyToken prefers the token of the value; for mappings and sequences whose
// own token is the first child, this still points inside the field.
func keyToken(_ *ast.File, _ string, n ast.Node) *token.Token {
	if t := n.GetToken(); t != nil {
		return t
	}
	return &token.Token{Position: &token.Position{Line: 1, Column: 1}}
}

func dotted(field string) string {
	if field == "" {
		return ""
	}
	if strings.HasPrefix(field, "[") {
		return field
	}
	// Quote keys that are not plain identifiers (option names with dashes
	// are fine; dots inside map keys such as defines are not).
	return "." + field
}

// decodeError converts go-yaml's errors into PosErrors for file.
func decodeError(file string, f *ast.File, err error) error {
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil && ye.GetToken().Position != nil {
		p := ye.GetToken().Position
		pe := &PosError{File: file, Line: p.Line, Column: p.Column, Msg: cleanYAMLMessage(ye.GetMessage())}
		if f != nil {
			pe.Field = fieldAt(f, p.Line, p.Column)
		}
		return pe
	}
	return fmt.Errorf("%s: %w", file, err)
}

func cleanYAMLMessage(m string) string {
	m = strings.TrimSpace(m)
	if i := strings.Index(m, "\n"); i >= 0 {
		m = m[:i]
	}
	// The decoder speaks of Go types and struct fields; say what the file
	// should hold instead.
	if g := goTypeRE.FindStringSubmatch(m); g != nil {
		return fmt.Sprintf("expected %s, got %s", yamlKind(g[2]), yamlKind(g[1]))
	}
	return m
}

var goTypeRE = regexp.MustCompile(`cannot unmarshal (.+?) into Go (?:struct field \S+|value) of type (\S+)`)

// yamlKind names a Go type by what a YAML file writes for it.
func yamlKind(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["):
		return "a mapping"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "a whole number"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	}
	return "a mapping"
}

// fieldAt finds the YAML path of the innermost value whose token sits at
// line:col, so that type errors name the field and not only the position.
func fieldAt(f *ast.File, line, col int) string {
	best := ""
	var walk func(n ast.Node, path string)
	walk = func(n ast.Node, path string) {
		if n == nil {
			return
		}
		if t := n.GetToken(); t != nil && t.Position != nil && t.Position.Line == line && t.Position.Column == col && len(path) >= len(best) {
			best = path
		}
		switch v := n.(type) {
		case *ast.MappingNode:
			for _, mv := range v.Values {
				walk(mv, path)
			}
		case *ast.MappingValueNode:
			key := v.Key.GetToken().Value
			child := key
			if path != "" {
				child = path + "." + key
			}
			if t := v.Key.GetToken(); t != nil && t.Position != nil && t.Position.Line == line && t.Position.Column == col {
				best = child
			}
			walk(v.Value, child)
		case *ast.SequenceNode:
			for i, e := range v.Values {
				walk(e, fmt.Sprintf("%s[%d]", path, i))
			}
		case *ast.TagNode:
			walk(v.Value, path)
		case *ast.AnchorNode:
			walk(v.Value, path)
		}
	}
	for _, d := range f.Docs {
		walk(d.Body, "")
	}
	return best
}
