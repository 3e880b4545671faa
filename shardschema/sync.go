package shardschema

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// Table is what Sync does with one table on the target.
type Table struct {
	Table  string `json:"table"`
	Action string `json:"action"` // create, in-sync
	// TokenIndex: the token index the target gets (or has).
	TokenIndex string `json:"token_index"`
}

// Options of a Sync: the keyspace's tables, the shards' names (From is
// the source), whether to change nothing, and how to find pg_dump (asked
// only when a table is to be created).
type Options struct {
	Spec         tableset.Spec
	From, Target string
	DryRun       bool
	PGDump       func() (string, error)
}

// Source is the shard a sync onto target copies from by default: the
// first (by name) of the ring's other shards ("" when there is none).
func Source(cur topology.Topology, target string) string {
	from := ""
	for _, s := range cur.Ring.Shards() {
		if s != target && (from == "" || s < from) {
			from = s
		}
	}
	return from
}

// Sync gives the target (dst) the keyspace's tables it lacks, as the source
// (src) defines them, and every table its token index; it returns what it
// did (with DryRun, what it would do, changing nothing). The tables are
// created as the roles that own them on the source; pg_dump connects as
// src's configuration says.
func Sync(ctx context.Context, src, dst *pgxpool.Pool, o Options) ([]Table, error) {
	plan, missing, err := Plan(ctx, src, dst, o.Spec, o.From, o.Target)
	if err != nil || o.DryRun {
		return plan, err
	}
	if len(missing) > 0 {
		ddl, err := dump(ctx, o.PGDump, &src.Config().ConnConfig.Config, o.From, missing)
		if err != nil {
			return nil, err
		}
		owners, err := tableOwners(ctx, src, missing)
		if err != nil {
			return nil, fmt.Errorf("read the owners of the tables on %s: %w", o.From, err)
		}
		if err := apply(ctx, dst, missing, owners, ddl); err != nil {
			return nil, fmt.Errorf("create the tables of keyspace %s on %s: %w (nothing was created)", o.Spec.Name, o.Target, ownerHint(ctx, dst, err, owners, o.From, o.Target))
		}
	}
	srcSet, err := tableset.Introspect(ctx, src, o.Spec, "source "+o.From)
	if err != nil {
		return nil, err
	}
	for _, t := range srcSet.Tables {
		if err := tableset.CreateTokenIndex(ctx, dst, t); err != nil {
			return nil, fmt.Errorf("token index of %s on %s: %w", t, o.Target, err)
		}
	}
	return plan, nil
}

// Plan compares the keyspace's tables on the source and the target: the
// tables to create (missing) and what Sync does with each. A table that
// exists on both and differs is an *pgerr.InputError naming the difference.
func Plan(ctx context.Context, src, dst *pgxpool.Pool, spec tableset.Spec, from, target string) ([]Table, []tableset.Table, error) {
	srcSet, err := tableset.Introspect(ctx, src, spec, "source "+from)
	if err != nil {
		return nil, nil, &pgerr.InputError{Err: err}
	}
	for _, t := range srcSet.Tables {
		for _, p := range tableset.Shardable(t, "source "+from) {
			if p.Check == tableset.CheckPartitioned {
				return nil, nil, &pgerr.InputError{Err: fmt.Errorf("%w; nothing was changed", p)}
			}
		}
	}
	var plan []Table
	var missing []tableset.Table
	var conflicts []string
	for i, t := range srcSet.Tables {
		var reg *string
		if err := dst.QueryRow(ctx, `SELECT to_regclass($1)::text`, t.Quoted()).Scan(&reg); err != nil {
			return nil, nil, fmt.Errorf("look for %s on %s: %w", t, target, err)
		}
		p := Table{Table: t.String(), TokenIndex: tableset.TokenIndexName(t)}
		if reg == nil {
			p.Action = "create"
			missing = append(missing, t)
			plan = append(plan, p)
			continue
		}
		if c := conflict(ctx, dst, spec, i, t, from, target); c != "" {
			conflicts = append(conflicts, c)
			continue
		}
		p.Action = "in-sync"
		plan = append(plan, p)
	}
	if len(conflicts) > 0 {
		return nil, nil, &pgerr.InputError{Err: fmt.Errorf("%s has %d table(s) defined unlike on %s; make them alike (or drop the empty table on %s and run schema sync again), nothing was changed:\n  %s",
			target, len(conflicts), from, target, strings.Join(conflicts, "\n  "))}
	}
	if err := tableset.MissingTypes(ctx, src, dst, missing, from, target); err != nil {
		var p *tableset.Problem
		if errors.As(err, &p) {
			return nil, nil, &pgerr.InputError{Err: fmt.Errorf("the tables to create on %s use types it lacks; create them there first, nothing was changed:\n%w", target, err)}
		}
		return nil, nil, err
	}
	return plan, missing, nil
}

// conflict says how table t (the i-th of spec) on the target differs from
// the source's ("" when alike: columns, types, primary key).
func conflict(ctx context.Context, dst *pgxpool.Pool, spec tableset.Spec, i int, t tableset.Table, from, target string) string {
	one := tableset.Spec{Name: spec.Name, Tables: []tableset.TableSpec{spec.Tables[i]}}
	dstSet, err := tableset.Introspect(ctx, dst, one, "target "+target)
	if err != nil {
		return err.Error()
	}
	if d := tableset.ColumnDiff(t, dstSet.Tables[0], from, target); d != "" {
		return fmt.Sprintf("%s: %s", t, d)
	}
	if !slices.Equal(t.PK, dstSet.Tables[0].PK) {
		return fmt.Sprintf("%s: primary key (%s) on %s, (%s) on %s", t, strings.Join(t.PK, ", "), from, strings.Join(dstSet.Tables[0].PK, ", "), target)
	}
	return ""
}

// tableOwners returns the role owning each table on the source, in the
// order of tables.
func tableOwners(ctx context.Context, src *pgxpool.Pool, tables []tableset.Table) ([]string, error) {
	owners := make([]string, len(tables))
	for i, t := range tables {
		err := src.QueryRow(ctx, `
			SELECT pg_get_userbyid(c.relowner) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&owners[i])
		if err != nil {
			return nil, fmt.Errorf("owner of %s: %w", t, err)
		}
	}
	return owners, nil
}

// ownerHint adds the fix to an error of a role that cannot create the
// tables as their owners (docs/operations.md, "Privileges").
func ownerHint(ctx context.Context, dst *pgxpool.Pool, err error, owners []string, from, target string) error {
	// A missing role is 42704 too, as is a missing type: only the former
	// is the owners' business (MissingTypes names the latter first).
	var pe *pgconn.PgError
	if !pgerr.Privilege(err) && !(pgerr.UndefinedObject(err) && errors.As(err, &pe) && strings.HasPrefix(pe.Message, "role ")) {
		return err
	}
	var role string
	if dst.QueryRow(ctx, `SELECT current_user`).Scan(&role) != nil {
		return err
	}
	var quoted []string
	for _, o := range owners {
		q := pgx.Identifier{o}.Sanitize()
		if o != role && !slices.Contains(quoted, q) {
			quoted = append(quoted, q)
		}
	}
	if len(quoted) == 0 {
		return err // reshard's role owns the tables: a GRANT would change nothing
	}
	return fmt.Errorf("%w; the tables are created as their owners on %s (%s): those roles must exist on %s with CREATE on the tables' schemas, and %s must be a member of them (GRANT %s TO %s, as deploy/reshard-role.sql -v owners= does)",
		err, from, strings.Join(quoted, ", "), target, role, strings.Join(quoted, ", "), pgx.Identifier{role}.Sanitize())
}

// apply runs the script on the target in one transaction, creating the
// tables' schemas first. The tables are created as the role that owns
// them on the source, as the source's (the script has no owners: the role
// reshard connects as may not be a superuser), so that the application
// reaches them on the new shard as on the others.
func apply(ctx context.Context, dst *pgxpool.Pool, tables []tableset.Table, owners []string, script string) error {
	return pgx.BeginFunc(ctx, dst, func(tx pgx.Tx) error {
		for i, t := range tables {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{t.Schema}.Sanitize()+" AUTHORIZATION "+pgx.Identifier{owners[i]}.Sanitize()); err != nil {
				return err
			}
		}
		// One script, run as the first table's owner; a table another role
		// owns on the source is given to it afterwards.
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{owners[0]}.Sanitize()); err != nil {
			return err
		}
		// The script sets search_path to '' for its own statements; the
		// transaction's end restores it (SET LOCAL semantics do not apply:
		// reset it explicitly).
		if _, err := tx.Exec(ctx, script); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "RESET ROLE"); err != nil {
			return err
		}
		for i, t := range tables {
			if owners[i] != owners[0] {
				if _, err := tx.Exec(ctx, "ALTER TABLE "+t.Quoted()+" OWNER TO "+pgx.Identifier{owners[i]}.Sanitize()); err != nil {
					return err
				}
			}
		}
		_, err := tx.Exec(ctx, "RESET search_path")
		return err
	})
}
