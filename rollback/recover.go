package rollback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/cleanup"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// RecoverOptions configure Recover.
type RecoverOptions struct {
	// Store is any store of the control database (Recover scopes it to the
	// migration's keyspace); Control is its pool.
	Store   *topology.Store
	Control *pgxpool.Pool
	// Shards opens a pool on a shard by name; Recover does not close them.
	Shards func(ctx context.Context, name string) (*pgxpool.Pool, error)
	// Tables are the keyspace's tables, introspected on each shard.
	Tables tableset.Spec
	// BatchRows and RowsPerSec throttle the deletions (as in Options).
	BatchRows  int
	RowsPerSec float64
	// Budget bounds the write pause of a cutover reversed by the recovery
	// (default 2s).
	Budget time.Duration
	Logger *slog.Logger
}

// MoveRecovery is what Recover did to one move.
type MoveRecovery struct {
	Move, From, To string
	// Action: "rolled back" (the ranges stay with, or went back to, the old
	// owner), "completed" (the cutover was published: the move was
	// cleaned up), or "already ended (<outcome>)".
	Action string
}

// Recovery is what Recover did.
type Recovery struct {
	MigrationID string
	Keyspace    string
	Moves       []MoveRecovery
	// Version is the topology version that ends the migration (0: none
	// was published by this call, see Note).
	Version int64
	Note    string
}

// ErrRecoverRunning: another Recover of the migration holds its lock.
var ErrRecoverRunning = errors.New("another recovery of this migration is running")

// Recover brings back to a clean state the cluster a migration left behind
// when its workflow ended without finishing (terminated, reset, failed after
// its retries, cancelled by an older worker, its history lost). It works
// from the control database alone (DESIGN.md §3: the stored plan and the
// topology), never from what the workflow remembered. For each move of the
// stored plan whose end is not recorded:
//   - a reverse cutover (a rollback in GRACE) interrupted in the middle is
//     settled from its journal first (cutover.Resume);
//   - cut over (the topology gives its ranges to the new owner): it is
//     completed (cleanup.Run: the ranges stable on the new owner, both
//     streams dropped, the old owner's copy deleted);
//   - otherwise it is rolled back (BeforeCutover: a forward cutover
//     interrupted is settled, the ranges given back to the old owner of the
//     plan's ring before, the streams dropped, the copy on the target
//     deleted);
//
// and its end is recorded (reshard.moves). The holds of its cutovers are
// released and both shards' fences and TRUNCATE guards reconciled with the
// topology. Then the migration's end is published (the planned ring if
// every move completed, else the ring as it stands; no range migrating),
// the shard states synced, and every shard of the plan reconciled again.
//
// The caller makes sure no workflow of the migration runs (a running one
// is rolled back with its rollback Update). Idempotent: a recovery
// interrupted anywhere is finished by running it again; on a migration
// with nothing left it changes nothing.
func Recover(ctx context.Context, id string, o RecoverOptions) (Recovery, error) {
	rec := Recovery{MigrationID: id}
	if o.Store == nil || o.Control == nil || o.Shards == nil {
		return rec, fmt.Errorf("recover migration %s: the topology store, the control pool and the shards are required", id)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	log := o.Logger.With("migration", id, "phase", "RECOVER")
	unlock, err := lockRecovery(ctx, o.Control, id)
	if err != nil {
		return rec, err
	}
	defer unlock()
	// A control database older than this binary may lack the journal and
	// holds tables recover reads.
	if err := topology.Migrate(ctx, o.Control); err != nil {
		return rec, fmt.Errorf("recover migration %s: %w", id, err)
	}
	start, err := o.Store.FindMigration(ctx, id)
	if errors.Is(err, topology.ErrNotStarted) {
		rec.Note = "no topology version names it: it changed nothing (stopped before its migrating topology was published)"
		return rec, nil
	}
	if err != nil {
		return rec, fmt.Errorf("recover migration %s: %w", id, err)
	}
	rec.Keyspace = start.Keyspace
	store := o.Store.In(start.Keyspace)
	plan, err := store.LoadPlan(ctx, id)
	if err != nil {
		return rec, fmt.Errorf("recover migration %s: %w", id, err)
	}
	ends, err := store.MoveEnds(ctx, id)
	if err != nil {
		return rec, fmt.Errorf("recover migration %s: %w", id, err)
	}
	fences := fence.Control{Pool: o.Control, Store: store}
	sh := recoverShards{o: o, pools: map[string]*pgxpool.Pool{}, sets: map[string]tableset.Set{}}
	open := func(name string) (*pgxpool.Pool, error) { return sh.open(ctx, name) }
	shard := func(name string) (*pgxpool.Pool, tableset.Set, error) { return sh.shard(ctx, name) }
	completed := 0
	planned := plan.PlannedMoves()
	for _, pm := range planned {
		mr := MoveRecovery{Move: pm.ID, From: pm.From, To: pm.To}
		if outcome, ok := ends[[2]string{pm.From, pm.To}]; ok {
			mr.Action = fmt.Sprintf("already ended (%s)", outcome)
			if outcome == topology.MoveCleanedUp {
				completed++
			}
			// Its streams went with its end; dropping them again is a
			// no-op, and removes what a crash between may have left. A
			// shard gone since (removed from the configuration) has
			// nothing of it to drop.
			src, serr := open(pm.From)
			dst, derr := open(pm.To)
			if serr == nil && derr == nil {
				if err := cleanup.DropStreams(ctx, cutover.Move{ID: pm.ID, From: pm.From, To: pm.To, Source: src, Target: dst}); err != nil {
					return rec, fmt.Errorf("recover move %s of migration %s: %w", pm.ID, id, err)
				}
			}
			rec.Moves = append(rec.Moves, mr)
			continue
		}
		src, _, err := shard(pm.From)
		if err != nil {
			return rec, fmt.Errorf("recover move %s of migration %s: %w", pm.ID, id, err)
		}
		dst, set, err := shard(pm.To)
		if err != nil {
			return rec, fmt.Errorf("recover move %s of migration %s: %w", pm.ID, id, err)
		}
		m := cutover.Move{ID: pm.ID, From: pm.From, To: pm.To, Source: src, Target: dst, Set: set, Ranges: pm.Ranges}
		outcome, err := recoverMove(ctx, m, plan, store, fences, o, log.With("move", pm.ID))
		if err != nil {
			return rec, fmt.Errorf("recover move %s of migration %s: %w", pm.ID, id, err)
		}
		if err := store.RecordMoveEnd(ctx, topology.MoveEnd{MigrationID: id, MoveID: pm.ID, From: pm.From, To: pm.To, Ranges: pm.Ranges, Outcome: outcome}); err != nil {
			return rec, err
		}
		mr.Action = "rolled back"
		if outcome == topology.MoveCleanedUp {
			mr.Action = "completed"
			completed++
		}
		rec.Moves = append(rec.Moves, mr)
	}
	if start.Ended {
		rec.Note = "its end was already published"
	} else {
		if err := publishEnd(ctx, store, start, plan, completed == len(planned), &rec); err != nil {
			return rec, fmt.Errorf("recover migration %s: %w", id, err)
		}
		log.Info("migration ended", "ring_version", rec.Version, "completed", completed, "moves", len(planned))
	}
	// The guards of every shard of the plan go with the migrating ranges.
	for name, set := range sh.sets {
		if _, err := fence.Reconcile(ctx, sh.pools[name], name, set, fences); err != nil {
			return rec, fmt.Errorf("recover migration %s: shard %s: %w", id, name, err)
		}
	}
	return rec, nil
}

// recoverShards opens each shard once and reads its table set once; the
// shards whose set was read are those of the moves recovered, reconciled at
// the end.
type recoverShards struct {
	o     RecoverOptions
	pools map[string]*pgxpool.Pool
	sets  map[string]tableset.Set
}

func (r recoverShards) open(ctx context.Context, name string) (*pgxpool.Pool, error) {
	if p, ok := r.pools[name]; ok {
		return p, nil
	}
	p, err := r.o.Shards(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", name, err)
	}
	r.pools[name] = p
	return p, nil
}

func (r recoverShards) shard(ctx context.Context, name string) (*pgxpool.Pool, tableset.Set, error) {
	p, err := r.open(ctx, name)
	if err != nil {
		return nil, tableset.Set{}, err
	}
	if set, ok := r.sets[name]; ok {
		return p, set, nil
	}
	set, err := tableset.Introspect(ctx, p, r.o.Tables, "shard "+name)
	if err != nil {
		return nil, tableset.Set{}, err
	}
	r.sets[name] = set
	return p, set, nil
}

// publishEnd publishes the end of the migration start began: its planned
// ring when every move completed, the ring as it stands otherwise (the
// rolled back moves' ranges on their old owners); nothing, said in
// rec.Note, when a newer migration's version is current.
func publishEnd(ctx context.Context, store *topology.Store, start topology.MigrationStart, plan topology.Plan, allCompleted bool, rec *Recovery) error {
	var after *ring.Ring
	var weights map[string]float64
	if allCompleted {
		after, weights = plan.After, plan.Weights
	}
	cur, err := store.Current(ctx)
	if err != nil {
		return err
	}
	if cur.MigrationID != rec.MigrationID {
		// Its moves have ended, and a newer version (not one of its own)
		// is current: nothing of it is left to clear.
		rec.Note = fmt.Sprintf("topology v%d belongs to %q now; no end published", cur.Version, cur.MigrationID)
		return nil
	}
	if rec.Version, err = topology.EndMigration(ctx, store, rec.MigrationID, start.Kind, after, weights); err != nil {
		return err
	}
	return store.SyncShardStates(ctx)
}

// recoverMove completes a cut-over move or rolls back one that is not, and
// says which.
func recoverMove(ctx context.Context, m cutover.Move, plan topology.Plan, store *topology.Store, fences fence.Control, o RecoverOptions, log *slog.Logger) (topology.MoveOutcome, error) {
	ro := Options{Store: store, Control: o.Control, Old: plan.Before, BatchRows: o.BatchRows, RowsPerSec: o.RowsPerSec,
		Budget: o.Budget, MigrationID: plan.MigrationID, Logger: log}
	runs, err := verifyRuns(ctx, m)
	if err != nil {
		return "", err
	}
	ro.VerifyRunIDs = runs
	// A reverse cutover interrupted between its fence and its end: undone
	// before its publish, finished after it.
	rj := cutover.PGJournal{Pool: o.Control, Move: m.ID + journalSuffix}
	last, err := rj.Last(ctx)
	if err != nil {
		return "", fmt.Errorf("read the rollback's journal: %w", err)
	}
	if last != "" && last != cutover.StepDone {
		j, err := rj.Claim(ctx)
		if err != nil {
			return "", err
		}
		if _, err := cutover.Resume(ctx, cutover.NewPG(m.Reversed(), nil, fences, giveBack(m, ro), j), j); err != nil {
			return "", fmt.Errorf("settle the interrupted reverse cutover: %w", err)
		}
	}
	c, err := cutOver(ctx, store, m)
	if err != nil {
		return "", err
	}
	if !c {
		err := BeforeCutover(ctx, m, ro)
		if err == nil {
			log.Info("move rolled back")
			return topology.MoveRolledBack, nil
		}
		if !errors.Is(err, ErrCutOver) { // a forward cutover it settled had published
			return "", err
		}
	}
	if _, err := cleanup.Run(ctx, m, cleanup.Options{Fences: fences, Target: plan.After, BatchRows: o.BatchRows, RowsPerSec: o.RowsPerSec,
		VerifyRunIDs: runs, MigrationID: plan.MigrationID, Logger: log}); err != nil {
		return "", err
	}
	log.Info("move completed: its cutover was published")
	return topology.MoveCleanedUp, nil
}

// verifyRuns are the verify runs of move m recorded on its target
// (<move>_v<n>, as the workflow names them).
func verifyRuns(ctx context.Context, m cutover.Move) ([]string, error) {
	rows, err := m.Target.Query(ctx, `SELECT run_id FROM reshard.verify_run WHERE starts_with(run_id, $1) ORDER BY run_id`, m.ID+"_v")
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == pgerr.CodeUndefinedTable || pe.Code == pgerr.CodeInvalidSchemaName) { // verify never ran on this shard
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the verify runs of move %s on %s: %w", m.ID, m.To, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		if rest := strings.TrimPrefix(id, m.ID+"_v"); rest != "" && strings.Trim(rest, "0123456789") == "" {
			out = append(out, id)
		}
	}
	return out, rows.Err()
}

// lockRecovery takes the migration's recovery lock (a session advisory lock
// in the control database) for the caller, or fails with ErrRecoverRunning.
func lockRecovery(ctx context.Context, pool *pgxpool.Pool, id string) (unlock func(), err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("recover migration %s: %w", id, err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended('reshard recover ' || $1, 0))`, id).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("recover migration %s: take its lock: %w", id, err)
	}
	if !ok {
		conn.Release()
		return nil, fmt.Errorf("recover migration %s: %w; wait for it to end", id, ErrRecoverRunning)
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtextextended('reshard recover ' || $1, 0))`, id); err != nil {
			// Closing the session releases the lock (once its backend has
			// exited).
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}, nil
}
