package topology

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/reshard/reshard/testkit/pgtest"
)

// shardObjects are the reshard.* names production code uses that are not
// in the control database: the shards' own objects (fences, their
// TRUNCATE guard of old, the accelerator, copy checkpoints, verify runs) and the
// configuration file's name.
var shardObjects = []string{"fence", "fence_accel", "refuse_truncate", "copy_checkpoint", "verify_run", "verify_chunk", "yaml"}

// TestFreshControlHasEveryObject: Migrate, the one entry point of the
// control database's schema, leaves a fresh database with every reshard.*
// table, view and function that any package's production code, deploy's SQL
// or the Python router names (the
// cutover journal and attempts, the fence holds included), so no caller
// needs a second call to prepare what it reads.
func TestFreshControlHasEveryObject(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.NewDB(t, 0)
	if err := Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	named := map[string]string{} // name → a file naming it
	re := regexp.MustCompile(`\breshard\.([a-z_][a-z0-9_]*)`)
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		// Go's production files, and the SQL and Python an operator or an
		// application runs against the control database (deploy/, the
		// Python router of examples/).
		if d.IsDir() || strings.HasSuffix(path, "_test.go") || !slices.Contains([]string{".go", ".sql", ".py"}, filepath.Ext(path)) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if _, ok := named[m[1]]; !ok {
				named[m[1]] = path
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(named) < 15 || named["topology_versions"] == "" || named["cutover_journal"] == "" {
		t.Fatalf("the scan found %d names (%v): it would check nothing", len(named), named)
	}
	for name, file := range named {
		if slices.Contains(shardObjects, name) {
			continue
		}
		var ok bool
		if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_class WHERE relnamespace = 'reshard'::regnamespace AND relname = $1)
	OR EXISTS (SELECT FROM pg_proc WHERE pronamespace = 'reshard'::regnamespace AND proname = $1)`, name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Errorf("%s names reshard.%s, which a fresh control database migrated by Migrate lacks: add a step to migrations (or, if it lives on the shards, to shardObjects)", file, name)
		}
	}
	// Migrate again changes nothing and fails nothing.
	if err := Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if n := db.QueryInt64(t, `SELECT max(step) FROM reshard.topology_schema`); n != int64(len(migrations)) {
		t.Errorf("recorded step %d, want %d", n, len(migrations))
	}
}
