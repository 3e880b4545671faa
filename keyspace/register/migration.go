package register

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// MigrationTables resolves the keyspace a migration changes (named, or the
// cluster's only one) and gives the migration its tables: every migration
// moves every registered table. given (from --table) may be empty (the
// registry's tables are taken) or must name exactly the registered tables
// with their keys; anything else is an *pgerr.InputError naming the difference.
// A cluster with no keyspace yet (set up before keyspaces) takes given as
// the default keyspace, to be registered when the migration starts
// (register).
func MigrationTables(ctx context.Context, store *topology.Store, name string, given tableset.Spec) (ks string, spec tableset.Spec, register bool, err error) {
	k, err := store.ResolveKeyspace(ctx, name)
	if errors.Is(err, topology.ErrNoKeyspace) {
		if name != "" && name != topology.DefaultKeyspace {
			return "", given, false, badInput("keyspace %s is not registered: create it with reshard init --keyspace %s --shards ... --table t:key", name, name)
		}
		if len(given.Tables) == 0 {
			return "", given, false, badInput("no keyspace is registered, so reshard does not know which tables are sharded: register them with reshard keyspace add-table users:id orders:user_id (or name them here with --table)")
		}
		given.Name = topology.DefaultKeyspace // the versions from before keyspaces are its
		return topology.DefaultKeyspace, given, true, nil
	}
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return "", given, false, err
		}
		return "", given, false, &pgerr.InputError{Err: err}
	}
	if len(given.Tables) == 0 {
		return k.Name, k.Spec(), false, nil
	}
	if same, diff := topology.SameTables(k.Tables, given.Tables); !same {
		var all []string
		for _, t := range k.Tables {
			all = append(all, "--table "+topology.TableKey(t))
		}
		return "", given, false, badInput("--table %s: keyspace %s registers %d table(s) and every migration moves all of them (a table left behind keeps rows on shards that no longer own them): leave --table out, or give %s; register a new table with reshard keyspace add-table; nothing was started",
			diff, k.Name, len(k.Tables), strings.Join(all, " "))
	}
	return k.Name, k.Spec(), false, nil
}
