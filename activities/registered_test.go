package activities

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/reshard/reshard/workflows"
)

// calledActivities are the activity names the workflows package executes:
// the constant name of every workflow.ExecuteActivity call, and, where the
// name is a parameter of the function making the call (moveRun.inSession),
// the constant each caller passes for it. Found in the source, so a new
// call is found without a list to keep.
func calledActivities(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob("../workflows/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// Only the package's own constants need resolving: every import is an
	// empty package, and the errors that leaves are ignored.
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: emptyImporter{}, Error: func(error) {}}
	_, _ = conf.Check("workflows", fset, files, info)
	constant := func(e ast.Expr) (string, bool) {
		tv, ok := info.Types[e]
		if !ok || tv.Value == nil {
			return "", false
		}
		return strings.Trim(tv.Value.ExactString(), `"`), true
	}
	called := map[string]string{} // name → where
	forwarded := map[string]int{} // function → the index of its parameter passed as the name
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) < 2 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "ExecuteActivity" && sel.Sel.Name != "ExecuteLocalActivity") {
					return true
				}
				if name, ok := constant(call.Args[1]); ok {
					called[name] = fset.Position(call.Pos()).String()
					return true
				}
				id, ok := call.Args[1].(*ast.Ident)
				i := -1
				if ok {
					for _, fld := range fd.Type.Params.List {
						for _, n := range fld.Names {
							i++
							if n.Name == id.Name {
								forwarded[fd.Name.Name] = i
							}
						}
					}
				}
				if _, ok := forwarded[fd.Name.Name]; !ok {
					t.Errorf("%s: the activity name %s is neither a constant nor a parameter of %s", fset.Position(call.Pos()), astString(call.Args[1]), fd.Name.Name)
				}
				return true
			})
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			i, ok := forwarded[sel.Sel.Name]
			if !ok || i >= len(call.Args) {
				return true
			}
			name, ok := constant(call.Args[i])
			if !ok {
				t.Errorf("%s: %s is passed a name that is not a constant", fset.Position(call.Pos()), sel.Sel.Name)
				return true
			}
			called[name] = fset.Position(call.Pos()).String()
			return true
		})
	}
	return called
}

type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	p := types.NewPackage(path, filepath.Base(path))
	p.MarkComplete()
	return p, nil
}

func astString(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return "an expression"
}

// TestEveryCalledActivityIsRegistered: every activity a workflow executes
// is registered by the worker (Activities.Register), under its name, so a
// missing registration fails here, not in an e2e run that waits for an
// activity no worker has.
func TestEveryCalledActivityIsRegistered(t *testing.T) {
	called := calledActivities(t)
	if len(called) < 10 || called[workflows.ActivityPlan] == "" || called[workflows.ActivityVerify] == "" {
		t.Fatalf("found %d activity names in the workflows (%v): the scan would check nothing", len(called), called)
	}
	registered := map[string]bool{}
	New(&Resolver{}, nil, nil).Register(func(fn any, name string) {
		if registered[name] {
			t.Errorf("activity %s is registered twice", name)
		}
		registered[name] = true
	})
	var missing []string
	for name, where := range called {
		if !registered[name] {
			missing = append(missing, name+" (called at "+where+")")
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the workflows execute activities the worker does not register: %s", strings.Join(missing, "; "))
	}
	for name := range registered {
		if called[name] == "" {
			t.Errorf("activity %s is registered but no workflow executes it", name)
		}
	}
}
