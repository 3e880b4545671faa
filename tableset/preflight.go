package tableset

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/eta"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
)

// Checks of the PLAN phase, as they appear in Problem.Check.
const (
	CheckTable           = "table"
	CheckPrimaryKey      = "primary_key"
	CheckKey             = "shard_key"
	CheckColumns         = "columns"
	CheckReplicaIdentity = "replica_identity"
	CheckWalLevel        = "wal_level"
	CheckSlots           = "replication_slots"
	CheckWalSenders      = "wal_senders"
	CheckTruncate        = "truncate_published"
	CheckReplicaTriggers = "replica_triggers"
)

// Problem is one failed check: what is wrong where, and the fix. Shard is
// the name the caller gave the server ("source", "target shard2"); Table is
// empty for server-wide checks.
type Problem struct {
	Check   string `json:"check"`
	Shard   string `json:"shard"`
	Table   string `json:"table,omitempty"`
	Problem string `json:"problem"`
	Fix     string `json:"fix"`
}

func (p *Problem) Error() string { return p.Problem + ": " + p.Fix }

// StopKind: nothing was changed; the fix is the operator's.
func (p *Problem) StopKind() string { return pgerr.StopPreflight }

// Warning is a risk worth reading that does not stop a move.
type Warning struct {
	Shard   string `json:"shard"`
	Table   string `json:"table"`
	Message string `json:"message"`
}

// IndexAdvice says whether a shard has the token expression index of a table,
// and the statement that creates it (CreateTokenIndex runs it).
type IndexAdvice struct {
	Shard     string `json:"shard"`
	Table     string `json:"table"`
	Present   bool   `json:"present"`
	Statement string `json:"statement"`
}

// Estimate is the expected size of one table's rows in one range on the source.
type Estimate struct {
	Table  string     `json:"table"`
	Range  ring.Range `json:"range"`
	Rows   int64      `json:"rows"`
	Bytes  int64      `json:"bytes"`
	Method string     `json:"method"` // "statistics" (pg_class) or "sample N%" (TABLESAMPLE)
}

// PreflightOptions name the two servers in messages and say what the move
// will need of them.
type PreflightOptions struct {
	SourceName string // default "source"
	TargetName string // default "target"
	// TargetShard is the target's name in the cluster's configuration:
	// the fix of a table the target lacks and the source has is
	// "reshard schema sync <TargetShard>". Empty: TargetName.
	TargetShard string
	// Ranges are the moving ranges, for the estimates.
	Ranges []ring.Range
	// Slots and WalSenders are the free replication slots and WAL senders
	// each server must have: the forward stream uses one on the source, the
	// reverse stream of GRACE one on the target. Zero means 1.
	Slots, WalSenders int
	// CatchUpSlots are the temporary copies of its slot a CDC catch-up
	// reads with, beside the move's slots (cdc.CatchUpSlots): a server
	// with fewer to spare is warned of a slower catch-up. Zero means 1.
	CatchUpSlots int
}

// Report is the outcome of Preflight.
type Report struct {
	Source    Set           `json:"source"`
	Target    Set           `json:"target"`
	Problems  []*Problem    `json:"problems,omitempty"`
	Warnings  []Warning     `json:"warnings,omitempty"`
	Indexes   []IndexAdvice `json:"indexes,omitempty"`
	Estimates []Estimate    `json:"estimates,omitempty"`
}

// Err joins the problems; nil when every check passed.
func (r Report) Err() error {
	errs := make([]error, len(r.Problems))
	for i, p := range r.Problems {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// Rows and Bytes are the estimated totals of the move.
func (r Report) Rows() (n int64) {
	for _, e := range r.Estimates {
		n += e.Rows
	}
	return n
}

func (r Report) Bytes() (n int64) {
	for _, e := range r.Estimates {
		n += e.Bytes
	}
	return n
}

// ETA is the copy time at the given throttle (0 = unlimited, which gives
// 0): eta.AtLimit of the estimated rows and bytes.
func (r Report) ETA(rowsPerSec, bytesPerSec float64) time.Duration {
	return eta.AtLimit(eta.Rate{Rows: rowsPerSec, Bytes: bytesPerSec}, r.Rows(), r.Bytes())
}

// Preflight runs the PLAN checks of a move from source to target (DESIGN.md
// §4.1). It changes nothing: every query runs in a read-only transaction that
// is rolled back. Failed checks are in Report.Problems and, joined, in the
// returned error; an error without a report means a server could not be asked.
func Preflight(ctx context.Context, source, target *pgxpool.Pool, spec Spec, opts PreflightOptions) (Report, error) {
	if opts.SourceName == "" {
		opts.SourceName = "source"
	}
	if opts.TargetName == "" {
		opts.TargetName = "target"
	}
	if opts.Slots <= 0 {
		opts.Slots = 1
	}
	if opts.WalSenders <= 0 {
		opts.WalSenders = 1
	}
	if opts.CatchUpSlots <= 0 {
		opts.CatchUpSlots = 1
	}
	if len(spec.Tables) == 0 {
		return Report{}, fmt.Errorf("table set %q lists no tables: add at least one table with its key column", spec.Name)
	}
	var rep Report
	src, err := source.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return Report{}, fmt.Errorf("preflight: begin on %s: %w", opts.SourceName, err)
	}
	defer src.Rollback(context.WithoutCancel(ctx))
	dst, err := target.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return Report{}, fmt.Errorf("preflight: begin on %s: %w", opts.TargetName, err)
	}
	defer dst.Rollback(context.WithoutCancel(ctx))

	if rep.Source, err = rep.introspect(ctx, src, spec, opts.SourceName); err != nil {
		return Report{}, err
	}
	if rep.Target, err = rep.introspect(ctx, dst, spec, opts.TargetName); err != nil {
		return Report{}, err
	}
	rep.syncFix(opts)
	rep.compare(opts)
	for _, side := range []struct {
		tx   pgx.Tx
		name string
		set  Set
	}{{src, opts.SourceName, rep.Source}, {dst, opts.TargetName, rep.Target}} {
		if err := rep.checkServer(ctx, side.tx, side.name, opts); err != nil {
			return Report{}, err
		}
		for _, t := range side.set.Tables {
			if err := rep.checkTable(ctx, side.tx, side.name, t); err != nil {
				return Report{}, err
			}
		}
	}
	if err := rep.warnUnregistered(ctx, src, opts.SourceName); err != nil {
		return Report{}, err
	}
	for _, t := range rep.Source.Tables {
		if rep.hidden(opts.SourceName, t) {
			continue // a sample would fail (row_security off); the Problem says why
		}
		est, err := EstimateRanges(ctx, src, t, opts.Ranges)
		if err != nil {
			return Report{}, fmt.Errorf("preflight: estimate %s on %s: %w", t, opts.SourceName, err)
		}
		rep.Estimates = append(rep.Estimates, est...)
	}
	return rep, rep.Err()
}

func (rep *Report) add(p *Problem) { rep.Problems = append(rep.Problems, p) }

// hidden reports a row-security Problem of table t on shard.
func (rep *Report) hidden(shard string, t Table) bool {
	for _, p := range rep.Problems {
		if p.Check == CheckRowSecurity && p.Shard == shard && p.Table == t.String() {
			return true
		}
	}
	return false
}

// warnUnregistered names the tables of a server that the set leaves out but
// that have a column named like one of the set's key columns, of the same
// key type: most likely sharded by the same key and forgotten. A migration
// would leave their rows on shards that no longer own them.
func (rep *Report) warnUnregistered(ctx context.Context, q Querier, where string) error {
	if len(rep.Source.Tables) == 0 {
		return nil
	}
	var keys, in []string
	for _, t := range rep.Source.Tables {
		keys = append(keys, t.KeyColumn)
		in = append(in, t.Schema+"."+t.Name)
	}
	rows, err := q.Query(ctx, `
		SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE a.attname = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped
		  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'reshard') AND n.nspname NOT LIKE 'pg\_%'
		  AND NOT (n.nspname || '.' || c.relname = ANY($2))
		ORDER BY 1, 2, 3`, keys, in)
	if err != nil {
		return fmt.Errorf("preflight: look for unregistered tables on %s: %w", where, err)
	}
	defer rows.Close()
	for rows.Next() {
		var schema, table, col, typ string
		if err := rows.Scan(&schema, &table, &col, &typ); err != nil {
			return err
		}
		if kt, err := ring.ParseKeyType(baseType(typ)); err != nil || kt != rep.Source.KeyType {
			continue
		}
		name := pgx.Identifier{schema, table}.Sanitize()
		rep.Warnings = append(rep.Warnings, Warning{Shard: where, Table: schema + "." + table,
			Message: fmt.Sprintf("table %s has a column %q of the key type %s but is not in the keyspace: if it is sharded by the same key, a migration leaves its rows on shards that no longer own them; register it first: reshard keyspace add-table %s.%s:%s",
				name, col, rep.Source.KeyType, schema, table, col)})
	}
	return rows.Err()
}

// introspect reads every table it can, recording the catalog problems of the
// others; only a failure to query is returned.
func (rep *Report) introspect(ctx context.Context, q Querier, spec Spec, where string) (Set, error) {
	set := Set{Name: spec.Name}
	for _, ts := range spec.Tables {
		t, err := introspectTable(ctx, q, ts, where)
		var p *Problem
		if errors.As(err, &p) {
			rep.add(p)
			continue
		}
		if err != nil {
			return Set{}, fmt.Errorf("preflight: %w", err)
		}
		if set.KeyType == "" {
			set.KeyType = t.KeyType
		} else if t.KeyType != set.KeyType {
			rep.add(&Problem{Check: CheckKey, Shard: where, Table: t.String(),
				Problem: fmt.Sprintf("key %s.%s is %s but %s.%s is %s on %s", t, t.KeyColumn, t.KeyType, set.Tables[0], set.Tables[0].KeyColumn, set.KeyType, where),
				Fix:     "all tables of a set must share one key type: pick key columns of one type"})
			continue
		}
		set.Tables = append(set.Tables, t)
	}
	return set, nil
}

// syncFix gives each table the target lacks and the source has the fix that
// creates it: schema sync copies its definition from a shard that has it.
func (rep *Report) syncFix(opts PreflightOptions) {
	shard := cmp.Or(opts.TargetShard, opts.TargetName)
	for _, p := range rep.Problems {
		if p.Check != CheckTable || p.Shard != opts.TargetName {
			continue
		}
		if !slices.ContainsFunc(rep.Source.Tables, func(t Table) bool { return t.String() == p.Table }) {
			continue // the source lacks it too: schema sync has nothing to copy
		}
		p.Fix = fmt.Sprintf("create it there with the same schema as on %s: reshard schema sync %s (creates the tables the shard lacks from one that has them)", opts.SourceName, shard)
	}
}

// compare checks that both sides have the same tables, columns and keys.
func (rep *Report) compare(opts PreflightOptions) {
	for _, s := range rep.Source.Tables {
		var d *Table
		for i := range rep.Target.Tables {
			if rep.Target.Tables[i].String() == s.String() {
				d = &rep.Target.Tables[i]
			}
		}
		if d == nil {
			continue // its problem is recorded already
		}
		if diff := ColumnDiff(s, *d, opts.SourceName, opts.TargetName); diff != "" {
			rep.add(&Problem{Check: CheckColumns, Shard: opts.TargetName, Table: s.String(),
				Problem: fmt.Sprintf("table %s differs between %s and %s: %s", s, opts.SourceName, opts.TargetName, diff),
				Fix:     fmt.Sprintf("make the schema of %s on %s the same as on %s (ALTER TABLE %s ...) before moving", s, opts.TargetName, opts.SourceName, s.Quoted())})
		}
	}
}

// ColumnDiff describes the first difference between two shapes of one table
// (columns by name, types, generated columns, primary key), or "" if none.
func ColumnDiff(a, b Table, aName, bName string) string {
	for _, ca := range a.Columns {
		cb, ok := b.Column(ca.Name)
		switch {
		case !ok:
			return fmt.Sprintf("column %q exists on %s but not on %s", ca.Name, aName, bName)
		case ca.Type != cb.Type:
			return fmt.Sprintf("column %q is %s on %s but %s on %s", ca.Name, ca.Type, aName, cb.Type, bName)
		case ca.Generated != cb.Generated:
			return fmt.Sprintf("column %q is generated on one side only (%s: %t, %s: %t)", ca.Name, aName, ca.Generated, bName, cb.Generated)
		}
	}
	for _, cb := range b.Columns {
		if _, ok := a.Column(cb.Name); !ok {
			return fmt.Sprintf("column %q exists on %s but not on %s", cb.Name, bName, aName)
		}
	}
	if strings.Join(a.PK, ",") != strings.Join(b.PK, ",") {
		return fmt.Sprintf("primary key is (%s) on %s but (%s) on %s", strings.Join(a.PK, ", "), aName, strings.Join(b.PK, ", "), bName)
	}
	return ""
}

func (rep *Report) checkServer(ctx context.Context, q Querier, name string, opts PreflightOptions) error {
	var (
		walLevel                            string
		maxSlots, usedSlots, maxSenders, ws int
	)
	err := q.QueryRow(ctx, `
		SELECT current_setting('wal_level'),
		       current_setting('max_replication_slots')::int, (SELECT count(*) FROM pg_replication_slots)::int,
		       current_setting('max_wal_senders')::int,
		       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender')::int`).Scan(&walLevel, &maxSlots, &usedSlots, &maxSenders, &ws)
	if err != nil {
		return fmt.Errorf("preflight: read settings of %s: %w", name, err)
	}
	if walLevel != "logical" {
		rep.add(&Problem{Check: CheckWalLevel, Shard: name,
			Problem: fmt.Sprintf("wal_level is %s on %s; logical replication needs logical (the source streams the move, the target streams back during the grace period)", walLevel, name),
			Fix:     "ALTER SYSTEM SET wal_level = logical; then restart that server"})
	}
	if err := rep.checkPrivileges(ctx, q, name); err != nil {
		return err
	}
	if free := maxSlots - usedSlots; free < opts.Slots {
		rep.add(&Problem{Check: CheckSlots, Shard: name,
			Problem: fmt.Sprintf("%s has %d free replication slots (max_replication_slots %d, %d in use), the move needs %d", name, free, maxSlots, usedSlots, opts.Slots),
			Fix:     "drop unused slots (pg_drop_replication_slot) or raise max_replication_slots and restart"})
	} else if spare := free - opts.Slots; spare < opts.CatchUpSlots {
		how := "one read at a time, the source decoding while the target waits"
		if spare > 0 {
			how = fmt.Sprintf("with %d of them, more slowly", spare)
		}
		rep.Warnings = append(rep.Warnings, Warning{Shard: name,
			Message: fmt.Sprintf("%s has %d free replication slots, the move needs %d: %d left for the %d temporary copies of its slot a CDC catch-up reads with, so a stream far behind catches up %s (raise max_replication_slots to leave %d spare)",
				name, free, opts.Slots, spare, opts.CatchUpSlots, how, opts.CatchUpSlots)})
	}
	if free := maxSenders - ws; free < opts.WalSenders {
		rep.add(&Problem{Check: CheckWalSenders, Shard: name,
			Problem: fmt.Sprintf("%s has %d free WAL senders (max_wal_senders %d, %d running), the move needs %d", name, free, maxSenders, ws, opts.WalSenders),
			Fix:     "stop idle replication connections or raise max_wal_senders and restart"})
	}
	return nil
}

func (rep *Report) checkTable(ctx context.Context, q Querier, name string, t Table) error {
	if err := rep.checkOwner(ctx, q, name, t); err != nil {
		return err
	}
	if err := rep.checkRowSecurity(ctx, q, name, t); err != nil {
		return err
	}
	for _, p := range Shardable(t, name) {
		rep.add(p)
	}
	switch {
	case t.ReplicaIdentity == "n":
		rep.add(&Problem{Check: CheckReplicaIdentity, Shard: name, Table: t.String(),
			Problem: fmt.Sprintf("table %s on %s has REPLICA IDENTITY NOTHING: once published, every UPDATE and DELETE on it fails", t, name),
			Fix:     fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY DEFAULT", t.Quoted())})
	case len(t.IdentityColumns) == 0:
		rep.add(&Problem{Check: CheckReplicaIdentity, Shard: name, Table: t.String(),
			Problem: fmt.Sprintf("table %s on %s has REPLICA IDENTITY USING INDEX but that index is gone: once published, every UPDATE and DELETE on it fails", t, name),
			Fix:     fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY DEFAULT", t.Quoted())})
	}
	rows, err := q.Query(ctx, `
		SELECT p.pubname FROM pg_publication p
		JOIN pg_publication_tables pt ON pt.pubname = p.pubname
		WHERE p.pubtruncate AND pt.schemaname = $1 AND pt.tablename = $2
		ORDER BY 1`, t.Schema, t.Name)
	var pubs []string
	if err == nil {
		pubs, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("preflight: read publications of %s on %s: %w", t, name, err)
	}
	for _, p := range pubs {
		rep.add(&Problem{Check: CheckTruncate, Shard: name, Table: t.String(),
			Problem: fmt.Sprintf("publication %s on %s publishes TRUNCATE of %s; a replicated TRUNCATE ignores row filters and would empty the whole table on its subscribers", p, name, t),
			Fix:     fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert, update, delete'), or drop %s from it", pgx.Identifier{p}.Sanitize(), t)})
	}
	if err := rep.checkReplicaTriggers(ctx, q, name, t); err != nil {
		return err
	}
	if err := rep.warnUniques(ctx, q, name, t); err != nil {
		return err
	}
	for _, c := range t.Columns {
		if c.Identity || strings.Contains(c.Default, "nextval(") {
			if err := rep.warnSequenceIndex(ctx, q, name, t, c.Name); err != nil {
				return err
			}
		}
		switch {
		case c.Identity:
			rep.Warnings = append(rep.Warnings, Warning{Shard: name, Table: t.String(),
				Message: fmt.Sprintf("column %q is an identity column: values are issued per shard: the cutover advances the new owner's sequence past the values it holds; values unique across shards need a disjoint sequence per shard (docs/operations.md, \"Sequences and identity columns\")", c.Name)})
		case strings.Contains(c.Default, "nextval("):
			rep.Warnings = append(rep.Warnings, Warning{Shard: name, Table: t.String(),
				Message: fmt.Sprintf("column %q takes its default from a sequence (%s): values are issued per shard: the cutover advances the new owner's sequence past the values it holds if the sequence is OWNED BY the column (else make it so); values unique across shards need a disjoint sequence per shard (docs/operations.md, \"Sequences and identity columns\")", c.Name, c.Default)})
		case c.Generated:
			rep.Warnings = append(rep.Warnings, Warning{Shard: name, Table: t.String(),
				Message: fmt.Sprintf("column %q is generated: it is not copied but recomputed on the target", c.Name)})
		}
	}
	present, err := HasTokenIndex(ctx, q, t)
	if err != nil {
		return fmt.Errorf("preflight: read indexes of %s on %s: %w", t, name, err)
	}
	rep.Indexes = append(rep.Indexes, IndexAdvice{Shard: name, Table: t.String(), Present: present, Statement: TokenIndexStatement(t)})
	if !present {
		rep.Warnings = append(rep.Warnings, Warning{Shard: name, Table: t.String(),
			Message: fmt.Sprintf("no token index: copy, verify and cleanup of a range scan the whole table; create it with %s", TokenIndexStatement(t))})
	}
	return nil
}

// checkReplicaTriggers refuses a table with a trigger or rule that fires for
// reshard's own writes. The copy, the CDC appliers (forward and reverse) and
// CLEANUP write with session_replication_role = replica, which skips the
// ordinary (ORIGIN) triggers and rules, but not those enabled ALWAYS, and it
// fires those enabled REPLICA: either would run the application's logic a
// second time for changes the application made once (a BEFORE trigger that
// changes NEW changes it again, an audit trigger records writes nobody made
// on that shard). No option lets a move run with them: no setting of
// reshard's can make a trigger that fires on its writes fire only once, and
// the fix is one reversible statement.
func (rep *Report) checkReplicaTriggers(ctx context.Context, q Querier, name string, t Table) error {
	found, err := replicaTriggers(ctx, q, name, t)
	if err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	for _, p := range found {
		rep.add(p)
	}
	return nil
}

// replicaTriggers lists, as problems with their fix, the triggers and rules
// of t on shard name that fire for reshard's writes (checkReplicaTriggers).
func replicaTriggers(ctx context.Context, q Querier, name string, t Table) ([]*Problem, error) {
	rows, err := q.Query(ctx, `
		SELECT 'trigger', tgname, tgenabled::text FROM pg_trigger
		WHERE tgrelid = $1::regclass AND NOT tgisinternal AND tgenabled IN ('A', 'R')
		UNION ALL
		SELECT 'rule', rulename, ev_enabled::text FROM pg_rewrite
		WHERE ev_class = $1::regclass AND rulename <> '_RETURN' AND ev_enabled IN ('A', 'R')
		ORDER BY 1, 2`, t.Quoted())
	if err != nil {
		return nil, fmt.Errorf("read triggers and rules of %s on %s: %w", t, name, err)
	}
	type fires struct{ kind, name, mode string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fires, error) {
		var f fires
		return f, r.Scan(&f.kind, &f.name, &f.mode)
	})
	if err != nil {
		return nil, fmt.Errorf("read triggers and rules of %s on %s: %w", t, name, err)
	}
	var out []*Problem
	for _, f := range found {
		id := pgx.Identifier{f.name}.Sanitize()
		kw := strings.ToUpper(f.kind)
		if f.mode == "A" {
			out = append(out, &Problem{Check: CheckReplicaTriggers, Shard: name, Table: t.String(),
				Problem: fmt.Sprintf("%s %s on %s of %s is ENABLE ALWAYS: it fires for reshard's copy, catch-up and cleanup writes too (session_replication_role = replica does not stop it), running the application's logic a second time for rows it wrote once", f.kind, id, name, t),
				Fix: fmt.Sprintf("ALTER TABLE %s ENABLE %s %s (it then fires for the application's writes only), or ALTER TABLE %s DISABLE %s %s for the move; after CLEANUP, ENABLE ALWAYS %s %s restores it",
					t.Quoted(), kw, id, t.Quoted(), kw, id, kw, id)})
			continue
		}
		out = append(out, &Problem{Check: CheckReplicaTriggers, Shard: name, Table: t.String(),
			Problem: fmt.Sprintf("%s %s on %s of %s is ENABLE REPLICA: it fires only for replicated writes, so for every row reshard copies, applies or cleans up there, and never for the application's", f.kind, id, name, t),
			Fix: fmt.Sprintf("ALTER TABLE %s DISABLE %s %s for the move; after CLEANUP, ALTER TABLE %s ENABLE REPLICA %s %s restores it",
				t.Quoted(), kw, id, t.Quoted(), kw, id)})
	}
	return out, nil
}

// FiringError: a trigger or rule that fires for reshard's writes was found
// on a shard a move writes to, after PLAN (an application deploy switched it
// to ENABLE ALWAYS or REPLICA). The move stops before it can fire there.
type FiringError struct {
	Problems []*Problem
}

func (e *FiringError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.Problem + "; fix: " + p.Fix
	}
	return "a trigger or rule fires for reshard's writes, enabled after the move was planned: " + strings.Join(parts, "; ") +
		"; then resume the move"
}

// StopKind: the phase stopped before writing; the operator disables the
// trigger and resumes.
func (e *FiringError) StopKind() string { return pgerr.StopFiringTrigger }

// CheckFiring is preflight's trigger check again, for the phases that write
// rows on shard name (copy, catch-up, the reverse stream, before cutover):
// a *FiringError when a table of set has a trigger or rule that would fire
// for reshard's writes there.
func CheckFiring(ctx context.Context, q Querier, name string, set Set) error {
	var all []*Problem
	for _, t := range set.Tables {
		found, err := replicaTriggers(ctx, q, name, t)
		if err != nil {
			return fmt.Errorf("check triggers: %w", err)
		}
		all = append(all, found...)
	}
	if len(all) > 0 {
		return &FiringError{Problems: all}
	}
	return nil
}

// warnUniques names the unique constraints and indexes of a table beyond its
// primary key: values unique per shard can collide when rows of one shard
// land on another. A collision stops the copy or the catch-up naming the
// constraint, the key and the value (docs/operations.md).
func (rep *Report) warnUniques(ctx context.Context, q Querier, name string, t Table) error {
	rows, err := q.Query(ctx, `
		SELECT c.relname, pg_get_indexdef(i.indexrelid)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = $1::regclass AND i.indisunique AND NOT i.indisprimary
		ORDER BY 1`, t.Quoted())
	if err != nil {
		return fmt.Errorf("preflight: read unique indexes of %s on %s: %w", t, name, err)
	}
	type unique struct{ name, def string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (unique, error) {
		var u unique
		return u, r.Scan(&u.name, &u.def)
	})
	if err != nil {
		return fmt.Errorf("preflight: read unique indexes of %s on %s: %w", t, name, err)
	}
	for _, u := range found {
		rep.Warnings = append(rep.Warnings, Warning{Shard: name, Table: t.String(),
			Message: fmt.Sprintf("unique index %s beyond the primary key (%s): a value unique on each shard can collide when moved rows arrive on the other; the copy or catch-up then stops naming the constraint, the key and the value", pgx.Identifier{u.name}.Sanitize(), u.def)})
	}
	return nil
}

// warnSequenceIndex warns of a column drawing from a sequence that no btree
// index leads with: the cutover's sequences step reads max(column) inside
// the write pause, a scan of the whole table without one.
func (rep *Report) warnSequenceIndex(ctx context.Context, q Querier, name string, t Table, col string) error {
	var indexed bool
	err := q.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM pg_index i
			JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam AND am.amname = 'btree'
			JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
			WHERE i.indrelid = $1::regclass AND a.attname = $2 AND i.indisvalid AND i.indpred IS NULL)`, t.Quoted(), col).Scan(&indexed)
	if err != nil {
		return fmt.Errorf("preflight: read indexes of %s.%s on %s: %w", t, col, name, err)
	}
	if !indexed {
		rep.Warnings = append(rep.Warnings, Warning{Shard: name, Table: t.String(),
			Message: fmt.Sprintf("column %q draws from a sequence but no index leads with it: the cutover reads its max() inside the write pause, a scan of the table that can exhaust the cutover budget; CREATE INDEX CONCURRENTLY ON %s (%s)",
				col, t.Quoted(), pgx.Identifier{col}.Sanitize())})
	}
	return nil
}
