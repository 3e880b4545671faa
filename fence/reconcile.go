package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgddl"
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

const holdSQL = `
CREATE SCHEMA IF NOT EXISTS reshard;
CREATE TABLE IF NOT EXISTS reshard.fence_hold (
	keyspace   text NOT NULL,
	shard      text NOT NULL,
	hold       text NOT NULL,
	ranges     jsonb NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (keyspace, shard, hold)
);
ALTER TABLE reshard.fence_hold ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0;
`

// EnsureControl creates the holds table in the control database;
// idempotent and safe to run concurrently.
func EnsureControl(ctx context.Context, pool *pgxpool.Pool) error {
	if err := pgddl.Apply(ctx, pool, holdSQL, 0); err != nil {
		return fmt.Errorf("create the fence holds table: %w", err)
	}
	return nil
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
	cur, err := c.Store.Current(ctx)
	if err != nil {
		return Want{}, fmt.Errorf("fences of %s: %w", shard, err)
	}
	holds, err := c.Holds(ctx, shard)
	if err != nil {
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
		if !h.Trigger {
			out = append(out, Drift{shard, h.Table, "no fence trigger"})
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
	var w float64
	for _, r := range rs {
		w += r.Width()
	}
	if len(rs) <= 3 {
		return fmt.Sprintf("%v (%.4f of the space)", rs, w)
	}
	return fmt.Sprintf("%d ranges (%.4f of the space)", len(rs), w)
}

// Inspect reads what a shard has for every table of set.
func Inspect(ctx context.Context, pool *pgxpool.Pool, set tableset.Set) ([]Have, error) {
	var registry bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('reshard.fence') IS NOT NULL`).Scan(&registry); err != nil {
		return nil, fmt.Errorf("look up the fence registry: %w", err)
	}
	out := make([]Have, 0, len(set.Tables))
	for _, t := range set.Tables {
		h := Have{Table: t.String()}
		err := pool.QueryRow(ctx, `SELECT
	EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = 'reshard_fence'),
	EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = 'reshard_no_truncate')`, t.Quoted()).Scan(&h.Trigger, &h.Guard)
		if err != nil {
			return nil, fmt.Errorf("read the triggers of %s: %w", t, err)
		}
		if registry {
			if h.Ranges, h.Epoch, err = Fenced(ctx, pool, t); err != nil {
				return nil, err
			}
		}
		if !h.Trigger {
			h.Ranges = nil // a registry row without its trigger fences nothing
		}
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
	Installed bool // fence triggers were installed
}

// Changed reports whether the shard was changed.
func (c Change) Changed() bool {
	return c.Installed || len(c.Refenced)+len(c.GuardsOn)+len(c.GuardsOff) > 0
}

// Reconcile makes one shard's fences and TRUNCATE guards for set exactly
// what the control database wants (Control.Want: Wanted over the current
// topology and the holds), in one transaction on the shard. It is the only
// code that lifts a fence. Idempotent.
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
	var registry bool
	var triggers int
	if err := pool.QueryRow(ctx, `SELECT to_regclass('reshard.fence') IS NOT NULL,
	(SELECT count(*) FROM pg_trigger WHERE tgname = 'reshard_fence' AND tgrelid = ANY($1::text[]::regclass[]))`, names).Scan(&registry, &triggers); err != nil {
		return ch, fmt.Errorf("reconcile fences of %s: look up the fence triggers: %w", shard, err)
	}
	if !registry || triggers < len(set.Tables) {
		if err := InstallTriggers(ctx, pool, set, false); err != nil {
			return ch, fmt.Errorf("reconcile fences of %s: %w", shard, err)
		}
		ch.Installed = true
	}
	err := withLockRetry(ctx, func() error {
		c2 := Change{Installed: ch.Installed}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+strconv.Itoa(int(lockTimeout.Milliseconds()))+"ms'"); err != nil {
				return err
			}
			// The registry rows, locked in the set's order (Fence locks
			// them in the same order).
			rows, err := tx.Query(ctx, `SELECT tbl::oid FROM reshard.fence WHERE tbl = ANY($1::text[]::regclass[])
ORDER BY array_position($1::text[]::regclass[], tbl) FOR UPDATE`, names)
			if err != nil {
				return fmt.Errorf("lock the fences: %w", err)
			}
			oids, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
			if err != nil {
				return fmt.Errorf("lock the fences: %w", err)
			}
			if len(oids) != len(set.Tables) {
				return fmt.Errorf("%d of the set's %d tables have a fence registry row: install the triggers (InstallTriggers)", len(oids), len(set.Tables))
			}
			byOID := map[uint32]tableset.Table{}
			for i, o := range oids {
				byOID[o] = set.Tables[i]
			}
			want, err := c.Want(ctx, shard)
			if err != nil {
				return err
			}
			c2.Want = want
			mr := multirange(want.Ranges)
			if len(want.Ranges) == 0 {
				mr = "'{}'::int8multirange"
			}
			rows, err = tx.Query(ctx, `UPDATE reshard.fence SET ranges = `+mr+`, epoch = greatest(epoch, $2)
WHERE tbl = ANY($1::oid[]::regclass[]) AND ranges <> `+mr+` RETURNING tbl::oid, ranges::text, epoch`, oids, want.Version)
			if err != nil {
				return fmt.Errorf("fence: %w", err)
			}
			type refence struct {
				oid    uint32
				ranges string
				epoch  int64
			}
			changed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (refence, error) {
				var f refence
				err := r.Scan(&f.oid, &f.ranges, &f.epoch)
				return f, err
			})
			if err != nil {
				return fmt.Errorf("fence: %w", err)
			}
			// The new fence compiled into each trigger, committed with the
			// registry row (see fenceFunctionSQL for when sessions use it).
			for _, f := range changed {
				t := byOID[f.oid]
				if _, err := tx.Exec(ctx, fenceFunctionSQL(t, f.ranges, f.epoch)); err != nil {
					return fmt.Errorf("compile the fence of %s: %w", t, err)
				}
				c2.Refenced = append(c2.Refenced, t.String())
			}
			rows, err = tx.Query(ctx, `SELECT tgrelid::oid FROM pg_trigger WHERE tgname = 'reshard_no_truncate' AND tgrelid = ANY($1::oid[])`, oids)
			if err != nil {
				return err
			}
			guarded, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
			if err != nil {
				return err
			}
			for _, o := range oids {
				t, has := byOID[o], slices.Contains(guarded, o)
				switch {
				case want.Guard && !has:
					if _, err := tx.Exec(ctx, "CREATE OR REPLACE TRIGGER reshard_no_truncate BEFORE TRUNCATE ON "+t.Quoted()+" FOR EACH STATEMENT EXECUTE FUNCTION reshard.refuse_truncate()"); err != nil {
						return fmt.Errorf("TRUNCATE guard on %s: %w", t, err)
					}
					c2.GuardsOn = append(c2.GuardsOn, t.String())
				case !want.Guard && has:
					if _, err := tx.Exec(ctx, "DROP TRIGGER IF EXISTS reshard_no_truncate ON "+t.Quoted()); err != nil {
						return fmt.Errorf("lift the TRUNCATE guard of %s: %w", t, err)
					}
					c2.GuardsOff = append(c2.GuardsOff, t.String())
				}
			}
			return nil
		})
		if err == nil {
			ch = c2
		}
		return err
	})
	if err != nil {
		return ch, fmt.Errorf("reconcile fences of %s: %w", shard, err)
	}
	return ch, nil
}
