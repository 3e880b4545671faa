package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// cmdSQLHelper is the one file of cmd/reshard that may reach the servers
// itself: its connection helper (connect, ping, open the control store).
const cmdSQLHelper = "config.go"

// sqlCalls are the pgx methods that run a statement or open a transaction.
var sqlCalls = map[string]bool{"Exec": true, "Query": true, "QueryRow": true, "CopyFrom": true, "SendBatch": true, "Begin": true, "BeginTx": true, "BeginFunc": true}

// sqlText is a string literal that is a statement (reshard writes its SQL
// in upper case; prose that names one, "ALTER TABLE ...", does not start
// with it).
var sqlText = regexp.MustCompile(`(?s)^\s*(SELECT|INSERT INTO|UPDATE|DELETE FROM|CREATE|ALTER|DROP|COPY|TRUNCATE|GRANT|REVOKE|WITH)\s`)

// TestCLIHasNoSQL: the CLI parses flags, calls a domain function and
// prints; statements and catalog queries live in packages a test reaches
// without cobra (docs/architecture.md, "Dependencies").
func TestCLIHasNoSQL(t *testing.T) {
	for _, b := range cliSQL(t, "../../cmd/reshard") {
		t.Errorf("%s: cmd/reshard runs SQL only through its connection helper (%s); move it into a domain package", b, cmdSQLHelper)
	}
}

// The check must be able to fail: a file that queries is caught, twice.
func TestCLIHasNoSQLSeesQueries(t *testing.T) {
	dir := t.TempDir()
	src := "package main\n\nfunc f(p interface{ QueryRow(string) }) { p.QueryRow(\"SELECT 1\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if bad := cliSQL(t, dir); len(bad) != 2 {
		t.Fatalf("a file calling QueryRow(\"SELECT 1\") gave %v, want the call and the statement", bad)
	}
}

func cliSQL(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") || filepath.Base(path) == cmdSQLHelper {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sqlCalls[sel.Sel.Name] && !isIdent(sel.X, "syscall") {
					bad = append(bad, fset.Position(n.Pos()).String()+": "+sel.Sel.Name)
				}
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					if s, err := strconv.Unquote(n.Value); err == nil && sqlText.MatchString(s) {
						bad = append(bad, fset.Position(n.Pos()).String()+": "+strings.Fields(s)[0]+" ...")
					}
				}
			}
			return true
		})
	}
	return bad
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
