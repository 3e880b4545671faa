package layering

import (
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sessionExempt are the directories whose connections are not reshard's
// sessions: the development environment's setup, the tools beside the CLI,
// and the test helpers (which give the code under test its DSNs, which it
// pins itself).
var sessionExempt = []string{"devenv", "cmd/reshard-bench", "cmd/reshard-uishot", "testkit/pgtest", "testkit/movetest", "internal/pgsession", "e2e", "examples"}

// configMakers are the pgx functions that make a connection configuration
// from a connection string (or connect with one): only internal/pgsession
// may call them, so that every session reshard opens runs under
// pgsession.Settings (ConnectConfig and NewWithConfig take a configuration,
// which then came from pgsession or from a pool it made).
var configMakers = map[string][]string{
	"github.com/jackc/pgx/v5":         {"Connect", "ParseConfig"},
	"github.com/jackc/pgx/v5/pgconn":  {"Connect", "ParseConfig", "ParseConfigWithOptions", "ConnectWithOptions"},
	"github.com/jackc/pgx/v5/pgxpool": {"New", "ParseConfig"},
}

// TestSessionsArePinned: no production file of the module makes a
// connection configuration but through internal/pgsession.
func TestSessionsArePinned(t *testing.T) {
	bad := sessionBypasses(t, "../..")
	for _, b := range bad {
		t.Errorf("%s: make the configuration with internal/pgsession (ParseConfig, ParseConnConfig, ParsePoolConfig) so the session runs under its settings", b)
	}
}

// The check must be able to fail: a file that connects with pgx.Connect is
// caught.
func TestSessionsArePinnedSeesBypass(t *testing.T) {
	dir := t.TempDir()
	src := "package x\n\nimport (\n\t\"context\"\n\n\tpg \"github.com/jackc/pgx/v5\"\n)\n\nfunc f() { pg.Connect(context.Background(), \"\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if bad := sessionBypasses(t, dir); len(bad) != 1 || !strings.Contains(bad[0], "pgx/v5.Connect") {
		t.Fatalf("a file calling pgx.Connect gave %v, want it named", bad)
	}
}

func sessionBypasses(t *testing.T, root string) []string {
	t.Helper()
	var bad []string
	eachGoFile(t, root, sessionExempt, func(_ string, fset *token.FileSet, f *ast.File) {
		names := map[string]string{} // local name -> import path
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if _, ok := configMakers[p]; !ok {
				continue
			}
			name := p[strings.LastIndex(p, "/")+1:]
			if p == "github.com/jackc/pgx/v5" {
				name = "pgx"
			}
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[name] = p
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			id, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			p, ok := names[id.Name]
			if !ok {
				return true
			}
			for _, fn := range configMakers[p] {
				if sel.Sel.Name == fn {
					bad = append(bad, fset.Position(sel.Pos()).String()+": "+p+"."+fn)
				}
			}
			return true
		})
	})
	return bad
}
