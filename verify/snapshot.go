package verify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/internal/pgsession"
)

// Holder stops the CDC applier exactly at a source LSN: HoldAt returns once
// every source transaction with commit LSN ≤ lsn is applied and committed on
// the target and none after, and the applier then waits until Release. The
// cdc stream satisfies it. HoldAt may fail with cdc.ErrHoldPassed when the
// applier has already committed past lsn; it then waits where it is and
// verify takes a new source snapshot, which it cannot have passed.
type Holder interface {
	HoldAt(ctx context.Context, lsn pglogrepl.LSN) error
	Release()
}

// readTx is one REPEATABLE READ, READ ONLY transaction on its own connection.
type readTx struct {
	conn *pgx.Conn
	tx   pgx.Tx
}

func (r *readTx) close() {
	if r == nil || r.conn == nil {
		return
	}
	ctx := context.Background()
	if r.tx != nil {
		_ = r.tx.Rollback(ctx)
	}
	_ = r.conn.Close(ctx)
}

// session is what one worker reads through: a source and a target
// transaction, each in the snapshot shared by all workers of the run.
type session struct {
	src, dst *readTx
}

// snapshots holds the sessions of one run, all reading the same pair of
// snapshots.
type snapshots struct {
	sessions []*session
	lsn      string // the source snapshot's LSN; "" without a holder
}

func (s *snapshots) close() {
	for _, ss := range s.sessions {
		ss.src.close()
		ss.dst.close()
	}
}

// maxHoldAttempts bounds the source snapshots taken when the applier has
// already passed the previous one's LSN (cdc.ErrHoldPassed).
const maxHoldAttempts = 5

var snapshotName = regexp.MustCompile(`^[0-9A-Fa-f-]+$`)

// begin opens a dedicated connection (so verify never starves the caller's
// pool) and starts a read-only REPEATABLE READ transaction in it, importing
// snapshot when not empty.
func begin(ctx context.Context, pool *pgxpool.Pool, snapshot string) (*readTx, error) {
	// Whoever made the pool, the text form of a value hashed as text
	// (columnValue) must be the same on both servers, and no policy may
	// hide a row from the comparison (an error instead: row_security off).
	conn, err := dial(ctx, pool, "reshard verify")
	if err != nil {
		return nil, err
	}
	r := &readTx{conn: conn}
	if r.tx, err = conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}); err != nil {
		r.close()
		return nil, err
	}
	if snapshot != "" {
		if !snapshotName.MatchString(snapshot) {
			r.close()
			return nil, fmt.Errorf("unexpected snapshot name %q", snapshot)
		}
		if _, err := r.tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+snapshot+"'"); err != nil {
			r.close()
			return nil, fmt.Errorf("import snapshot %s: %w", snapshot, err)
		}
	}
	return r, nil
}

// export starts a transaction and exports its snapshot; the first query
// pins the snapshot.
func export(ctx context.Context, pool *pgxpool.Pool) (*readTx, string, error) {
	r, err := begin(ctx, pool, "")
	if err != nil {
		return nil, "", err
	}
	var snap string
	if err := r.tx.QueryRow(ctx, "SELECT pg_export_snapshot()").Scan(&snap); err != nil {
		r.close()
		return nil, "", fmt.Errorf("export snapshot: %w", err)
	}
	return r, snap, nil
}

// importN opens n transactions importing snapshot.
func importN(ctx context.Context, pool *pgxpool.Pool, snapshot string, n int) ([]*readTx, error) {
	out := make([]*readTx, 0, n)
	for range n {
		r, err := begin(ctx, pool, snapshot)
		if err != nil {
			for _, o := range out {
				o.close()
			}
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// openSnapshots takes the source and target snapshots of a run and opens n
// sessions in them.
//
// With a holder the two snapshots are at one position of the source's
// history: a temporary logical slot exports a source snapshot whose LSN is
// the slot's consistent point; the applier is held at exactly that LSN while
// the target snapshot is taken, and released at once. Without a holder (a
// quiescent source, or a check outside a move) both snapshots are simply
// taken one after the other.
//
// With primary set, src is a streaming standby of it and the source's
// snapshot is taken there (standby.go).
func openSnapshots(ctx context.Context, src, dst, primary *pgxpool.Pool, holder Holder, n int) (_ *snapshots, err error) {
	s := &snapshots{sessions: make([]*session, n)}
	for i := range s.sessions {
		s.sessions[i] = &session{}
	}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	var srcTx []*readTx
	if holder == nil && primary != nil {
		if srcTx, _, err = standbySnapshot(ctx, src, primary, n); err != nil {
			return nil, fmt.Errorf("source's standby: %w", err)
		}
	} else if holder == nil {
		first, snap, err := export(ctx, src)
		if err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
		rest, err := importN(ctx, src, snap, n-1)
		if err != nil {
			first.close()
			return nil, fmt.Errorf("source: %w", err)
		}
		srcTx = append([]*readTx{first}, rest...)
	} else {
		for attempt := 1; ; attempt++ {
			var lsn pglogrepl.LSN
			if primary != nil {
				srcTx, lsn, err = standbySnapshot(ctx, src, primary, n)
			} else {
				srcTx, lsn, err = slotSnapshot(ctx, src, n)
			}
			if err != nil {
				if attempt > 1 {
					holder.Release() // gated by the passed hold below
				}
				return nil, fmt.Errorf("source: %w", err)
			}
			s.lsn = lsn.String()
			// The snapshot holds the transactions whose commit record starts
			// before the consistent point (or the standby's replay position);
			// the slot streams those from it on
			// (PG15 decode.c: skipped iff commit LSN < start_decoding_at).
			// HoldAt counts commit LSN <= its argument, hence lsn-1.
			err = holder.HoldAt(ctx, lsn-1)
			if err == nil {
				break
			}
			for _, r := range srcTx {
				r.close()
			}
			// An applier running close behind the source may already have
			// committed past the slot's LSN. It then waits at a gate where it
			// is, which a new slot's LSN lies beyond: take a new snapshot.
			if errors.Is(err, cdc.ErrHoldPassed) && attempt < maxHoldAttempts {
				continue
			}
			if errors.Is(err, cdc.ErrHoldPassed) {
				holder.Release()
			}
			return nil, fmt.Errorf("hold the applier at %s (attempt %d): %w", lsn, attempt, err)
		}
	}
	for i, r := range srcTx {
		s.sessions[i].src = r
	}
	first, snap, err := export(ctx, dst)
	if holder != nil {
		holder.Release()
	}
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	s.sessions[0].dst = first
	rest, err := importN(ctx, dst, snap, n-1)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	for i, r := range rest {
		s.sessions[i+1].dst = r
	}
	return s, nil
}

// slotSnapshot creates a temporary logical slot exporting its snapshot,
// imports the snapshot into n transactions and drops the slot (by closing
// its connection: the export is valid only until the next command there, and
// a slot left open would pin WAL for the whole verification).
func slotSnapshot(ctx context.Context, pool *pgxpool.Pool, n int) ([]*readTx, pglogrepl.LSN, error) {
	cfg := pool.Config().ConnConfig.Config.Copy()
	pgsession.PinConfig(cfg)
	cfg.RuntimeParams["replication"] = "database"
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "reshard verify"
	}
	repl, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("replication connection: %w", err)
	}
	defer repl.Close(context.Background())
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, 0, err
	}
	name := "reshard_verify_" + hex.EncodeToString(b[:])
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, name, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary:      true,
		SnapshotAction: "(SNAPSHOT 'export')",
		Mode:           pglogrepl.LogicalReplication,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("create temporary slot: %w", err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return nil, 0, fmt.Errorf("temporary slot %s: consistent point %q: %w", name, res.ConsistentPoint, err)
	}
	if res.SnapshotName == "" {
		return nil, 0, errors.New("temporary slot exported no snapshot")
	}
	txs, err := importN(ctx, pool, res.SnapshotName, n)
	if err != nil {
		return nil, 0, err
	}
	return txs, lsn, nil
}
