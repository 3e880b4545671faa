package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// cliConnect is the one file of cmd/reshard that may speak to PostgreSQL
// itself: it opens the pools the commands hand to the domain packages.
const cliConnect = "connect.go"

// cliSQLAllowed are the files of cmd/reshard that still hold SQL or import
// pgx. The list may only shrink: a command parses flags, calls one domain
// function, prints.
var cliSQLAllowed = map[string]string{}

// sqlStatement: a string literal that begins with an SQL statement's
// keyword (upper case, as this module writes its SQL) and goes on.
var sqlStatement = regexp.MustCompile(`^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|TRUNCATE|COPY|GRANT|REVOKE|LOCK|CALL|DO|SET|SHOW|BEGIN|COMMIT|ROLLBACK)\s+\S`)

// TestNoSQLInTheCLI: cmd/reshard holds no SQL outside its connection helper
// (issue #32 item 3): no pgx import, no string literal that is a statement.
func TestNoSQLInTheCLI(t *testing.T) {
	found := cliSQL(t, "../../cmd/reshard")
	files := map[string]bool{}
	for _, f := range found {
		file, _, _ := strings.Cut(f, ":")
		files[file] = true
		if file == cliConnect || cliSQLAllowed[file] != "" {
			continue
		}
		t.Errorf("%s: move the SQL (and the pgx pool it runs on) into a domain package; the command calls one function of it", f)
	}
	for file := range cliSQLAllowed {
		if !files[file] {
			t.Errorf("cmd/reshard/%s holds no SQL any more: take it off cliSQLAllowed", file)
		}
	}
}

// The check must be able to fail: a file importing pgx and one with a
// query in a literal are both caught, and help text naming SQL is not.
func TestNoSQLInTheCLISeesSQL(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a.go": "package main\n\nimport \"github.com/jackc/pgx/v5/pgxpool\"\n\nvar _ *pgxpool.Pool\n",
		"b.go": "package main\n\nconst q = `\n\tSELECT n FROM t WHERE k = $1`\n",
		"c.go": "package main\n\nconst help = \"the probe query (default SELECT 1)\"\n",
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := cliSQL(t, dir)
	if len(got) != 2 || !strings.HasPrefix(got[0], "a.go:3: imports github.com/jackc/pgx/v5/pgxpool") || !strings.HasPrefix(got[1], "b.go:3: SQL") {
		t.Fatalf("found %q, want a.go's import and b.go's query", got)
	}
}

// cliSQL lists, as "file:line: what", the pgx imports and SQL literals of
// the non-test Go files of dir, sorted.
func cliSQL(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, path := range names {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(path)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ImportSpec:
				p, _ := strconv.Unquote(n.Path.Value)
				if strings.HasPrefix(p, "github.com/jackc/") {
					found = append(found, base+":"+strconv.Itoa(fset.Position(n.Pos()).Line)+": imports "+p)
				}
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(n.Value)
				if err == nil && sqlStatement.MatchString(s) {
					found = append(found, base+":"+strconv.Itoa(fset.Position(n.Pos()).Line)+": SQL "+strconv.Quote(firstLine(s)))
				}
			}
			return true
		})
	}
	slices.Sort(found)
	return found
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
