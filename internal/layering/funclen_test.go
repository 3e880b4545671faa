package layering

import (
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines bounds a function of the module (issue #32): one that does
// not fit on a screen and a half does more than one thing.
const maxFuncLines = 120

// longFuncs are the functions still over maxFuncLines, by "dir/file.go
// Func" (a method as Type.Method). The list may only shrink.
var longFuncs = map[string]string{}

// TestNoLongFunctions: no function of the module's production code is over
// maxFuncLines lines, outside cmd/reshard-bench (a benchmark's report).
func TestNoLongFunctions(t *testing.T) {
	found := map[string]int{}
	for name, n := range longFunctions(t, "../..") {
		found[name] = n
		if longFuncs[name] == "" {
			t.Errorf("%s is %d lines, over %d: split it", name, n, maxFuncLines)
		}
	}
	for name := range longFuncs {
		if _, ok := found[name]; !ok {
			t.Errorf("%s is no longer over %d lines (or is gone): take it off longFuncs", name, maxFuncLines)
		}
	}
}

// The check must be able to fail: a 121-line function is caught, a
// 120-line one is not.
func TestNoLongFunctionsSeesOne(t *testing.T) {
	dir := t.TempDir()
	body := func(name string, lines int) string {
		return "func " + name + "() {\n" + strings.Repeat("\t_ = 0\n", lines-2) + "}\n"
	}
	src := "package x\n\n" + body("long", 121) + body("fits", 120) + "type T struct{}\n\nfunc (*T) " + strings.TrimPrefix(body("M", 130), "func ")
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := longFunctions(t, dir)
	if len(got) != 2 || got["x.go long"] != 121 || got["x.go T.M"] != 130 {
		t.Fatalf("found %v, want x.go long (121 lines) and x.go T.M (130)", got)
	}
}

// longFunctions maps "dir/file.go Func" to its length in lines, for every
// function over maxFuncLines in the non-test Go files under root.
func longFunctions(t *testing.T, root string) map[string]int {
	t.Helper()
	out := map[string]int{}
	eachGoFile(t, root, []string{"cmd/reshard-bench", "testdata"}, func(rel string, fset *token.FileSet, f *ast.File) {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if n > maxFuncLines {
				out[rel+" "+funcName(fn)] = n
			}
		}
	})
	return out
}

// funcName is "Func", or "Type.Method" for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if g, ok := typ.(*ast.IndexExpr); ok {
		typ = g.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
