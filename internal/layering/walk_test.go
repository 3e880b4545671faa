package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// eachGoFile parses every non-test Go file under root, outside the
// directories skip names (relative to root) and hidden ones, and calls fn
// with its slash-separated path relative to root.
func eachGoFile(t *testing.T, root string, skip []string, fn func(rel string, fset *token.FileSet, f *ast.File)) {
	t.Helper()
	goFiles(t, root, skip, false, func(rel, path string) error {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		fn(rel, fset, f)
		return nil
	})
}

// goFiles calls fn with the slash-separated path relative to root and the
// path of every Go file under root (test files too when tests), outside
// the directories skip names (relative to root) and hidden ones.
func goFiles(t *testing.T, root string, skip []string, tests bool, fn func(rel, path string) error) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if slices.Contains(skip, rel) || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || !tests && strings.HasSuffix(path, "_test.go") {
			return nil
		}
		return fn(rel, path)
	})
	if err != nil {
		t.Fatal(err)
	}
}
