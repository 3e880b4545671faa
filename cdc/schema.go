package cdc

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/tableset"
)

// Schema changes while the stream runs (DESIGN.md §7). pgoutput sends a new
// Relation message before the first change of a table after DDL on the
// source; the applier maps its columns by name onto the target's current
// columns:
//   - a column the target has and the source no longer sends (dropped on the
//     source, or added on the target first) is left out of the applier's
//     writes: the target's default fills it on insert, an update keeps it;
//   - a type that differs is written as the text the source sends, cast to
//     the target's type (a widening on its way);
//   - a column the source sends (as the table was when the change was
//     written) that the source no longer has and the target lacks was
//     dropped on both: its values are left out;
//   - a column the source sends and the target lacks, even after re-reading
//     the target's catalog, makes the stream end with a retryable
//     *tableset.ColumnWaitError naming the column and the schema apply that
//     adds it: nothing of the transaction is committed, and the restarted
//     stream resumes from the target's replication origin, so no change is
//     skipped while it waits.
// A write that fails because a column vanished from the target (42703)
// ends the stream retryably too; the next Run re-reads the target's tables.

// ColumnVanishedError: a statement named a column that a table no longer
// has (SQLSTATE 42703: DDL by hand on a shard while the stream ran).
// Retryable: the next Run re-reads the target, and the source's next
// Relation message says what it sends.
type ColumnVanishedError struct {
	Op  string
	Err error
}

func (e *ColumnVanishedError) Error() string {
	return fmt.Sprintf("%s: %v: a column changed under the stream; it re-reads the tables and resumes (a column dropped by hand on one shard: drop it on the others too, with reshard schema apply)", e.Op, e.Err)
}
func (e *ColumnVanishedError) Unwrap() error { return e.Err }

// Retryable: the shards' schemas are on their way to agree.
func (e *ColumnVanishedError) Retryable() bool { return true }

// undefinedColumn: SQLSTATE 42703.
func undefinedColumn(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgerr.CodeUndefinedColumn
}

func (r *runner) targetName() string {
	if r.o.Target != "" {
		return "target " + r.o.Target
	}
	return "the target"
}

func (r *runner) sourceName() string {
	if r.o.Source != "" {
		return "source " + r.o.Source
	}
	return "the source"
}

// readTarget reads table t's current shape from the target, through the
// applier's session (inside its open transaction, if any).
func (r *runner) readTarget(ctx context.Context, t tableset.Table) (tableset.Table, error) {
	spec := tableset.Spec{Name: r.o.Set.Name, Tables: []tableset.TableSpec{{Schema: t.Schema, Table: t.Name, KeyColumn: t.KeyColumn}}}
	set, err := tableset.Introspect(ctx, r.tg.conn, spec, r.targetName())
	if err != nil {
		return tableset.Table{}, wrapOp("re-read the columns of "+t.String()+" on the target", err)
	}
	return set.Tables[0], nil
}

// refreshPlans re-reads every table on the target as a Run starts: a plan
// whose target shape changed since (DDL on the target) is rebuilt on the
// new shape, every column of it (the Relation messages to come narrow it).
func (r *runner) refreshPlans(ctx context.Context) error {
	for _, p := range r.s.plans {
		base, err := r.readTarget(ctx, p.base)
		if err != nil {
			return err
		}
		if slices.Equal(base.Columns, p.base.Columns) && slices.Equal(p.t.Columns, p.base.Columns) {
			continue
		}
		np, err := newTablePlan(base, p.ranges, p.n)
		if err != nil {
			return err
		}
		*p = *np
	}
	return nil
}

// rebind binds a Relation message to its table's plan, reshaping the plan
// when the source's columns differ from it (see the top of this file).
func (r *runner) rebind(ctx context.Context, rel *Relation, p *tablePlan) (*binding, error) {
	b, diff := bind(rel, p)
	if diff == nil {
		return b, nil
	}
	// What is pending for the table was decoded in its old shape: written
	// (not committed) before the plan changes.
	if err := r.tg.flushTable(ctx, p); err != nil {
		return nil, err
	}
	if err := r.tg.await(ctx); err != nil {
		return nil, err
	}
	base, err := r.readTarget(ctx, p.base)
	if err != nil {
		return nil, err
	}
	sent := map[string]bool{}
	var lacking []tableset.Column
	dropped := map[string]bool{}
	for _, rc := range rel.Columns {
		sent[rc.Name] = true
		if c, ok := base.Column(rc.Name); ok && !c.Generated {
			continue
		}
		// A column the target lacks: added on the source (wait for the
		// target to get it), or dropped there too since these changes were
		// written (the Relation describes the table as it was then: its
		// values are left out).
		typ, has := r.sourceColumn(ctx, p.base, rc.Name)
		if has {
			lacking = append(lacking, tableset.Column{Name: rc.Name, Type: typ})
		} else {
			dropped[rc.Name] = true
		}
	}
	if len(lacking) > 0 {
		return nil, &tableset.ColumnWaitError{Keyspace: r.o.Set.Name, Table: p.base, Has: r.sourceName(), Lacking: r.targetName(), Columns: lacking, Why: "the applier"}
	}
	t := base
	t.Columns = nil
	for _, c := range base.Columns {
		if sent[c.Name] || c.Generated {
			t.Columns = append(t.Columns, c)
		}
	}
	np, err := newTablePlan(t, p.ranges, p.n)
	if err != nil {
		return nil, err
	}
	np.base = base
	if _, ok := r.tg.staged[p]; ok && r.tg.tx != nil {
		// The transaction's stage has the old columns: dropped, created
		// again with the new ones by the next staged flush.
		if _, err := r.tg.tx.Exec(ctx, "DROP TABLE IF EXISTS "+p.stage.name); err != nil {
			return nil, wrapOp("drop the stage of "+p.t.String(), err)
		}
		delete(r.tg.staged, p)
	}
	r.s.log.Info("the source's columns changed: the applier follows them", "table", p.t.String(),
		"was", len(p.cols), "now", len(np.cols), "target_only", len(base.WritableColumns())-len(np.cols))
	*p = *np
	b, diff = bindLoose(rel, p)
	if diff != nil && len(diff.OnlyTarget) > 0 {
		return nil, diff // cannot happen: the plan has only columns sent
	}
	for _, c := range diffOnlySource(diff) {
		if !dropped[c] {
			return nil, diff // cannot happen: the target has every other column sent
		}
	}
	return b, nil // types may differ: the text sent is cast to the target's
}

func diffOnlySource(d *SchemaChangeError) []string {
	if d == nil {
		return nil
	}
	return d.OnlySource
}

// sourceColumn says whether the source's table has column col now, and its
// type (for the message that says how to add it). When the source cannot be
// asked, the column is taken to be there: the applier waits rather than
// leave values out.
func (r *runner) sourceColumn(ctx context.Context, t tableset.Table, col string) (typ string, has bool) {
	src, err := r.sourceConn(ctx)
	if err != nil {
		return "", true
	}
	err = src.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2 AND attnum > 0 AND NOT attisdropped`,
		t.Quoted(), col).Scan(&typ)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false
	}
	return typ, true
}

// fetchExisting rebuilds p's read of a row on the source with the columns
// the source has now: those it dropped read as NULL (the change being
// applied predates the drop, and the column is on its way out).
func (r *runner) fetchExisting(ctx context.Context, p *tablePlan) error {
	src, err := r.sourceConn(ctx)
	if err != nil {
		return err
	}
	rows, err := src.Query(ctx, `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, p.t.Quoted())
	if err != nil {
		return wrapOp("read the columns of "+p.t.String()+" on the source", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return wrapOp("read the columns of "+p.t.String()+" on the source", err)
	}
	gone := map[string]bool{}
	for _, c := range p.cols {
		if !slices.Contains(names, c.Name) {
			gone[c.Name] = true
		}
	}
	p.buildFetchSQL(gone)
	return nil
}
