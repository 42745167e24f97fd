package status

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestFrontendsUseThisMapping holds the package's promise: the frontends
// and the server command choose no protocol status themselves. In their
// non-test sources no WriteHeader gets a literal code other than 200, and
// nothing calls http.Error or uses the gRPC codes package.
func TestFrontendsUseThisMapping(t *testing.T) {
	for _, dir := range []string{"../httpapi", "../grpcapi", "../../cmd/tritonserver"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s (%v)", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			for _, bad := range literalStatuses(t, f) {
				t.Errorf("%s: %s; map the error with runtime/status instead", bad.pos, bad.what)
			}
		}
	}
}

type finding struct {
	pos  token.Position
	what string
}

func literalStatuses(t *testing.T, path string) []finding {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // local name -> import path
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		names[name] = p
	}
	var out []finding
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && names[x.Name] == "google.golang.org/grpc/codes" {
				out = append(out, finding{fset.Position(n.Pos()), "uses codes." + n.Sel.Name})
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && names[x.Name] == "net/http" && sel.Sel.Name == "Error" {
				out = append(out, finding{fset.Position(n.Pos()), "calls http.Error"})
			}
			if sel.Sel.Name == "WriteHeader" && len(n.Args) == 1 {
				switch a := n.Args[0].(type) {
				case *ast.BasicLit:
					out = append(out, finding{fset.Position(n.Pos()), "writes status " + a.Value})
				case *ast.SelectorExpr:
					if x, ok := a.X.(*ast.Ident); ok && names[x.Name] == "net/http" && a.Sel.Name != "StatusOK" {
						out = append(out, finding{fset.Position(n.Pos()), "writes http." + a.Sel.Name})
					}
				}
			}
		}
		return true
	})
	return out
}
