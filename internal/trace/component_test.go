package trace

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// component is how every trace message starts (doc.go, Output): one of the
// components, then optionally the rank it traced for, then a colon.
var component = regexp.MustCompile(`^(mpi|lapi|shm|udp|inproc|verbs|stripe|route|trace|mark)( %d| \d+)?: `)

// TestComponents reads every trace.Printf call in the module's code (not
// its tests) and checks that its format starts with its component, so that
// every line carries one. A format of "%v" alone passes an error on, whose
// text starts with its package's name by Go's convention.
func TestComponents(t *testing.T) {
	root := "../.."
	fset := token.NewFileSet()
	calls := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		inTrace := f.Name.Name == "trace"
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 || !isPrintf(call.Fun, inTrace) {
				return true
			}
			calls++
			pos := fset.Position(call.Pos())
			lit, ok := call.Args[1].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: trace.Printf with a format that is not a literal: its component cannot be checked", pos)
				return true
			}
			format, _ := strconv.Unquote(lit.Value)
			if format != "%v" && !component.MatchString(format) {
				t.Errorf("%s: trace format %q does not start with its component (%s)", pos, format, component)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 50 {
		t.Errorf("found %d trace.Printf calls in the module, fewer than there are: is the walk reading it?", calls)
	}
}

// isPrintf reports whether fun is trace.Printf (or Printf, inside package
// trace).
func isPrintf(fun ast.Expr, inTrace bool) bool {
	switch f := fun.(type) {
	case *ast.SelectorExpr:
		x, ok := f.X.(*ast.Ident)
		return ok && x.Name == "trace" && f.Sel.Name == "Printf"
	case *ast.Ident:
		return inTrace && f.Name == "Printf"
	}
	return false
}
