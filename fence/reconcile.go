package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// Want is what one shard must have for one table set: the fenced token space
// and whether its TRUNCATE guards are on.
type Want struct {
	// Ranges are fenced: normalized, possibly empty.
	Ranges []ring.Range `json:"ranges"`
	// Guard: a live move uses the shard, TRUNCATE is refused.
	Guard bool `json:"guard"`
	// Version is the topology version Ranges and Guard were derived from.
	Version int64 `json:"version"`
}

// Wanted derives a shard's fences and TRUNCATE guards from one topology
// version and the holds of the cutovers in progress on that shard
// (DESIGN.md §3). The fenced space is every token the shard does not own in
// t — a migrating range is owned by its source until its cutover publishes
// and by its target after — plus the held ranges: a cutover fences its
// source from its fence step on, while the source still owns the ranges. A
// shard the ring does not name owns nothing and is fenced everywhere. The
// guards are on while a migrating range of t names the shard as its source
// or its target: a live move streams from or into it.
//
// It is pure: the same version and holds always want the same fences.
func Wanted(t topology.Topology, shard string, holds []ring.Range) Want {
	w := Want{Version: t.Version}
	var fenced []ring.Range
	for _, or := range t.Ring.AllRanges() {
		if or.Shard != shard {
			fenced = append(fenced, or.Range)
		}
	}
	w.Ranges = ring.Normalize(append(fenced, holds...))
	for _, m := range t.Migrating() {
		if m.From == shard || m.To == shard {
			w.Guard = true
			break
		}
	}
	return w
}

// Control reads, in the control database, what Wanted derives from: the
// current topology of one keyspace (Store, scoped to it) and the holds of
// its cutovers in progress.
type Control struct {
	Pool  *pgxpool.Pool
	Store *topology.Store
}

// ErrStaleHold: a newer attempt holds the ranges; the caller must stop.
var ErrStaleHold = errors.New("a newer attempt holds these ranges")

// Hold records that the cutover attempt epoch of hold fences ranges on
// shard although the shard still owns them. Record it before fencing, so
// that a reconcile of the shard by anyone else keeps the fence. Idempotent;
// an older attempt than the one recorded changes nothing and gets
// ErrStaleHold.
func (c Control) Hold(ctx context.Context, shard, hold string, epoch int64, ranges []ring.Range) error {
	j, err := json.Marshal(ring.Normalize(ranges))
	if err != nil {
		return err
	}
	tag, err := c.Pool.Exec(ctx, `INSERT INTO reshard.fence_hold (keyspace, shard, hold, epoch, ranges) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (keyspace, shard, hold) DO UPDATE SET ranges = excluded.ranges, epoch = excluded.epoch WHERE fence_hold.epoch <= excluded.epoch`,
		c.Store.Keyspace(), shard, hold, epoch, j)
	if err != nil {
		return fmt.Errorf("record the fence hold %s on %s: %w", hold, shard, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("fence hold %s on %s by attempt %d: %w", hold, shard, epoch, ErrStaleHold)
	}
	return nil
}

// Release forgets the hold of attempt epoch and of older attempts; a newer
// attempt's hold stays. Idempotent. Reconcile the shard afterwards to lift
// the fence the hold kept.
func (c Control) Release(ctx context.Context, shard, hold string, epoch int64) error {
	if _, err := c.Pool.Exec(ctx, `DELETE FROM reshard.fence_hold WHERE keyspace = $1 AND shard = $2 AND hold = $3 AND epoch <= $4`,
		c.Store.Keyspace(), shard, hold, epoch); err != nil {
		return fmt.Errorf("release the fence hold %s on %s: %w", hold, shard, err)
	}
	return nil
}

// ReleaseAll forgets every hold named hold, of any attempt, on any shard:
// the move it belongs to has ended.
func (c Control) ReleaseAll(ctx context.Context, hold string) error {
	if _, err := c.Pool.Exec(ctx, `DELETE FROM reshard.fence_hold WHERE keyspace = $1 AND hold = $2`, c.Store.Keyspace(), hold); err != nil {
		return fmt.Errorf("release the fence holds %s: %w", hold, err)
	}
	return nil
}

// Holds returns the ranges held on shard by cutovers in progress.
func (c Control) Holds(ctx context.Context, shard string) ([]ring.Range, error) {
	rows, err := c.Pool.Query(ctx, `SELECT ranges FROM reshard.fence_hold WHERE keyspace = $1 AND shard = $2 ORDER BY hold`, c.Store.Keyspace(), shard)
	if err != nil {
		return nil, fmt.Errorf("read the fence holds of %s: %w", shard, err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]ring.Range, error) {
		var j []byte
		if err := r.Scan(&j); err != nil {
			return nil, err
		}
		var rs []ring.Range
		err := json.Unmarshal(j, &rs)
		return rs, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the fence holds of %s: %w", shard, err)
	}
	var out []ring.Range
	for _, rs := range all {
		out = append(out, rs...)
	}
	return ring.Normalize(out), nil
}

// Want reads the current topology and holds and derives what shard wants.
func (c Control) Want(ctx context.Context, shard string) (Want, error) {
	if c.Pool == nil || c.Store == nil {
		return Want{}, errors.New("fence control: the control pool and the topology store are required")
	}
	// The two reads side by side: a cutover reconciles inside its write
	// pause, and neither read depends on the other (the caller holds the
	// registry rows' locks, which order reconciles; see Reconcile).
	var cur topology.Topology
	var holds []ring.Range
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		if cur, err = c.Store.Current(gctx); err != nil {
			return fmt.Errorf("fences of %s: %w", shard, err)
		}
		return nil
	})
	g.Go(func() (err error) { holds, err = c.Holds(gctx, shard); return err })
	if err := g.Wait(); err != nil {
		return Want{}, err
	}
	return Wanted(cur, shard, holds), nil
}

// Have is what one shard has for one table of a set.
type Have struct {
	Table   string       `json:"table"`
	Trigger bool         `json:"trigger"` // the fence trigger is installed
	Ranges  []ring.Range `json:"ranges"`
	Epoch   int64        `json:"epoch"`
	Guard   bool         `json:"guard"`
	// Accelerated: the row triggers call the C accelerator (the extension
	// reshard_fence), not the plpgsql functions.
	Accelerated bool `json:"accelerated"`
	// Problems are what the fence objects do other than what the registry
	// says: a trigger calling another function, disabled, a function whose
	// body was replaced. Reconcile (topology check --repair) fixes them.
	Problems []string `json:"problems,omitempty"`
}

// Drift is one difference between what a shard has and what it wants.
type Drift struct {
	Shard, Table string
	Problem      string
}

func (d Drift) String() string { return d.Shard + " " + d.Table + ": " + d.Problem }

// Compare lists how have differs from want, table by table.
func Compare(shard string, want Want, have []Have) []Drift {
	var out []Drift
	for _, h := range have {
		for _, p := range h.Problems {
			out = append(out, Drift{shard, h.Table, p})
		}
		if !slices.Equal(ring.Normalize(h.Ranges), want.Ranges) {
			out = append(out, Drift{shard, h.Table, fmt.Sprintf("fenced %s, the topology (v%d) wants %s", rangesString(h.Ranges), want.Version, rangesString(want.Ranges))})
		}
		if h.Guard != want.Guard {
			word := map[bool]string{true: "on", false: "off"}
			out = append(out, Drift{shard, h.Table, fmt.Sprintf("TRUNCATE guard %s, the topology (v%d) wants it %s", word[h.Guard], want.Version, word[want.Guard])})
		}
	}
	return out
}

func rangesString(rs []ring.Range) string {
	rs = ring.Normalize(rs)
	if len(rs) == 0 {
		return "nothing"
	}
	share := 100 * ring.SpaceFraction(rs) // Width counts tokens
	if len(rs) <= 3 {
		return fmt.Sprintf("%v (%.2f%% of the space)", rs, share)
	}
	return fmt.Sprintf("%d ranges (%.2f%% of the space)", len(rs), share)
}

// Inspect reads what a shard has for every table of set: the registry row,
// and whether the triggers call the table's own functions and the
// functions compile that row. Ranges and Guard are what is enforced: none
// when the trigger or the function is not reshard's.
func Inspect(ctx context.Context, pool *pgxpool.Pool, set tableset.Set) ([]Have, error) {
	var registry bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('reshard.fence') IS NOT NULL
	AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('reshard.fence') AND attname = 'guard' AND NOT attisdropped)`).Scan(&registry); err != nil {
		return nil, fmt.Errorf("look up the fence registry: %w", err)
	}
	out := make([]Have, 0, len(set.Tables))
	if !registry {
		// None, or an older version's: what its triggers enforce is not
		// read here; Reconcile upgrades it.
		for _, t := range set.Tables {
			out = append(out, Have{Table: t.String(), Problems: []string{"no fence registry of this version (reshard.fence with its guard column): fences not installed, or installed by an older version"}})
		}
		return out, nil
	}
	lay, err := readLayout(ctx, pool, set)
	if err != nil {
		return nil, err
	}
	for i, t := range set.Tables {
		l := lay[i]
		h := Have{Table: t.String(), Trigger: l.fenceOK || !slices.Contains(l.problems, "no fence trigger "+fenceTrigger), Accelerated: l.accel, Problems: l.problems}
		if !l.registry {
			h.Problems = append(h.Problems, "no fence registry row with the table's identity "+Ident(t))
		} else if !l.bodiesMatch(t) {
			h.Problems = append(h.Problems, fmt.Sprintf("the functions %s and %s do not compile the table's registry row (replaced by hand or by an older dump): they fence something else", triggerFunc(t).Sanitize(), guardFunc(t).Sanitize()))
		}
		enforced := l.registry && l.bodiesMatch(t)
		if enforced && l.fenceOK && l.deleteOK {
			if h.Ranges, h.Epoch, err = Fenced(ctx, pool, t); err != nil {
				return nil, err
			}
		}
		h.Guard = enforced && l.guardOK && l.c.guard
		out = append(out, h)
	}
	return out, nil
}

// Change says what one Reconcile did.
type Change struct {
	Want      Want
	Refenced  []string // tables whose fenced ranges changed
	GuardsOn  []string
	GuardsOff []string
	// Recompiled are tables whose functions did not compile their registry
	// row (replaced by hand or by an old dump) and were compiled again.
	Recompiled []string
	Installed  bool // fence triggers were installed
}

// Changed reports whether the shard was changed.
func (c Change) Changed() bool {
	return c.Installed || len(c.Refenced)+len(c.GuardsOn)+len(c.GuardsOff)+len(c.Recompiled) > 0
}

// Reconcile makes one shard's fences and TRUNCATE guards for set exactly
// what the control database wants (Control.Want: Wanted over the current
// topology and the holds), in one transaction on the shard. It is the only
// code that lifts a fence. Idempotent.
//
// Once the triggers are installed (InstallTriggers, the first time, or to
// upgrade an older version's), a reconcile changes only the registry and
// replaces functions: it takes no lock on an application table, so no
// application transaction waits for it or deadlocks with it.
//
// Serialization: the transaction locks the set's fence rows first and only
// then reads the control database, and every other fence change locks the
// same rows. So a topology published, or a hold recorded, before a
// reconcile takes the locks is seen by it, and one published after is
// followed by its own reconcile, which waits for this one: the last to run
// always applies the newest state, and no reconcile undoes a newer one.
func Reconcile(ctx context.Context, pool *pgxpool.Pool, shard string, set tableset.Set, c Control) (Change, error) {
	var ch Change
	if len(set.Tables) == 0 {
		return ch, fmt.Errorf("reconcile fences of %s: the table set %q has no tables", shard, set.Name)
	}
	// A cutover's unfence step reconciles inside the write pause: few round
	// trips, each statement for every table at once.
	names := make([]string, len(set.Tables))
	for i, t := range set.Tables {
		names[i] = t.Quoted()
	}
	// The common case, in a cutover's pause: one round trip to lock the
	// rows and read what the functions compile. A shard without this
	// version's objects (none yet, or an older version's) gets them
	// installed first, outside the transaction, and the reconcile runs
	// again.
	for attempt := 0; ; attempt++ {
		c2, err := reconcileOnce(ctx, pool, shard, set, c, names)
		if errors.Is(err, errNotInstalled) && attempt == 0 {
			if err := InstallTriggers(ctx, pool, set, false); err != nil {
				return ch, fmt.Errorf("reconcile fences of %s: %w", shard, err)
			}
			ch.Installed = true
			continue
		}
		if err != nil {
			return ch, fmt.Errorf("reconcile fences of %s: %w", shard, err)
		}
		c2.Installed = ch.Installed
		return c2, nil
	}
}

// errNotInstalled: a table of the set lacks this version's fence objects.
var errNotInstalled = errors.New("the fence objects of this version are not installed")

// reconcileOnce is Reconcile's transaction, in three round trips to the
// shard and one to the control database, because a cutover runs it inside
// its write pause (the unfence step) and at the pause's start (the fence
// step): BEGIN, the registry rows locked and what the functions compile,
// in one pipeline; the control database read (Want); and the registry
// update, the functions that change and COMMIT in one multi-statement
// simple query, so the transaction flushes its WAL once. Its statements
// were seven round trips before (BEGIN, the pipeline, the update, the
// functions and COMMIT on the shard, two reads in the control database),
// each a wait for the scheduler on a loaded machine.
func reconcileOnce(ctx context.Context, pool *pgxpool.Pool, shard string, set tableset.Set, c Control, names []string) (Change, error) {
	var ch Change
	err := withLockRetry(ctx, func() error {
		c2, err := reconcileTx(ctx, pool, shard, set, c, names)
		if err == nil {
			ch = c2
		}
		return err
	})
	return ch, err
}

func reconcileTx(ctx context.Context, pool *pgxpool.Pool, shard string, set tableset.Set, c Control, names []string) (ch Change, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return ch, err
	}
	defer func() {
		// A transaction left open (an error, before or inside the last
		// query) is rolled back; a connection that cannot is closed by
		// the pool on release.
		if pc := conn.Conn().PgConn(); !pc.IsClosed() && pc.TxStatus() != 'I' {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if _, rerr := conn.Exec(rctx, "ROLLBACK"); rerr != nil {
				pc.Close(rctx)
			}
			cancel()
		}
		conn.Release()
	}()
	// The registry rows, locked in the set's order (Fence locks them in
	// the same order), then what the functions compile, read under the
	// lock.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL lock_timeout = '" + strconv.Itoa(int(registryLockTimeout.Milliseconds())) + "ms'")
	b.Queue(`SELECT tbl::oid FROM reshard.fence WHERE tbl = ANY($1::text[]::regclass[])
ORDER BY array_position($1::text[]::regclass[], tbl) FOR UPDATE`, names)
	sql, args := layoutQuery(set)
	b.Queue(sql, args...)
	br := conn.SendBatch(ctx, b)
	oids, lay, err := func() ([]uint32, []layout, error) {
		defer br.Close()
		for range 2 {
			if _, err := br.Exec(); err != nil {
				return nil, nil, err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return nil, nil, err
		}
		oids, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
		if err != nil {
			return nil, nil, err
		}
		rows, err = br.Query()
		if err != nil {
			return nil, nil, err
		}
		lay, err := scanLayout(rows, set)
		if err != nil {
			return nil, nil, err
		}
		return oids, lay, br.Close()
	}()
	if err != nil {
		return ch, registryMissing(err)
	}
	if len(oids) != len(set.Tables) {
		return ch, errNotInstalled
	}
	for _, l := range lay {
		if !l.installed() {
			return ch, errNotInstalled
		}
	}
	want, err := c.Want(ctx, shard)
	if err != nil {
		return ch, err
	}
	ch.Want = want
	// What each table's row becomes, decided here rather than read back
	// from an UPDATE ... RETURNING (a round trip): the rows are locked and
	// were read under the lock. The epoch is the topology version the
	// ranges were last derived from: it moves only when they change.
	ranges := multirangeText(want.Ranges)
	var upd, ddl strings.Builder
	for i, t := range set.Tables {
		l := lay[i]
		now := compiled{ranges: ranges, epoch: l.c.epoch, guard: want.Guard}
		if now.ranges != l.c.ranges {
			now.epoch = max(l.c.epoch, want.Version)
			ch.Refenced = append(ch.Refenced, t.String())
		}
		if now.guard && !l.c.guard {
			ch.GuardsOn = append(ch.GuardsOn, t.String())
		} else if !now.guard && l.c.guard {
			ch.GuardsOff = append(ch.GuardsOff, t.String())
		}
		if now != l.c {
			if upd.Len() > 0 {
				upd.WriteString(", ")
			}
			fmt.Fprintf(&upd, "(%d, %s, %d, %t)", oids[i], quoteLiteral(now.ranges), now.epoch, now.guard)
		} else if l.bodiesMatch(t) {
			continue
		} else {
			// Functions that do not compile their row, compiled again.
			ch.Recompiled = append(ch.Recompiled, t.String())
		}
		// The new fence compiled into the table's functions, committed
		// with the registry row (see fenceBody for when sessions use it).
		ddl.WriteString(compileChangedSQL(t, now, l))
	}
	var q strings.Builder
	if upd.Len() > 0 {
		q.WriteString("UPDATE reshard.fence f SET ranges = v.ranges::int8multirange, epoch = v.epoch, guard = v.guard FROM (VALUES " +
			upd.String() + ") v(tbl, ranges, epoch, guard) WHERE f.tbl = v.tbl::oid::regclass;\n")
	}
	q.WriteString(ddl.String())
	q.WriteString("COMMIT")
	// No arguments: the simple protocol, which runs the statements of one
	// string in order and stops at the first error (the transaction is
	// then rolled back above).
	if _, err := conn.Exec(ctx, q.String()); err != nil {
		return Change{}, fmt.Errorf("fence: %w", err)
	}
	return ch, nil
}

// multirangeText is rs as PostgreSQL prints an int8multirange holding
// them (canonical ranges [lo+1,hi+1), an unbounded end from MinToken or to
// MaxToken, as multirange builds them): the text the registry's ranges
// read back as, and so the text the fence functions compile.
func multirangeText(rs []ring.Range) string {
	rs = ring.Normalize(rs)
	var b strings.Builder
	b.WriteByte('{')
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(',')
		}
		if r.Lo == ring.MinToken {
			b.WriteString("(")
		} else {
			b.WriteString("[" + strconv.FormatInt(r.Lo+1, 10))
		}
		b.WriteByte(',')
		if r.Hi != ring.MaxToken {
			b.WriteString(strconv.FormatInt(r.Hi+1, 10))
		}
		b.WriteByte(')')
	}
	b.WriteByte('}')
	return b.String()
}

// registryMissing turns the errors of a shard without this version's
// registry (no table, or an older one without its columns) into
// errNotInstalled.
func registryMissing(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == pgerr.CodeUndefinedTable || pe.Code == pgerr.CodeUndefinedColumn) {
		return fmt.Errorf("%w: %v", errNotInstalled, err)
	}
	return err
}
