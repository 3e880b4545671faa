package cdc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// appliedLogSQL records, on the target, every row the applier writes to
// users (ENABLE ALWAYS: the applier's session_replication_role = replica
// does not skip it), in commit order of the target. The log commits with
// the applier's batch, so it survives a failover exactly as the rows do.
const appliedLogSQL = `
CREATE TABLE applied_log (seq bigserial PRIMARY KEY, id bigint NOT NULL, op text NOT NULL, balance bigint);
CREATE FUNCTION log_applied() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO applied_log (id, op, balance) VALUES (OLD.id, 'D', OLD.balance);
	ELSE
		INSERT INTO applied_log (id, op, balance) VALUES (NEW.id, left(TG_OP, 1), NEW.balance);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER log_applied AFTER INSERT OR UPDATE OR DELETE ON users FOR EACH ROW EXECUTE FUNCTION log_applied();
ALTER TABLE users ENABLE ALWAYS TRIGGER log_applied;`

// TestTargetFailoverAppliesEveryChangeOnce: the target's synchronous
// standby is promoted (the primary killed) while the stream applies live
// writes. The applier, which reaches the target through a multi-host DSN
// with target_session_attrs=read-write, resumes from the replication
// origin's progress as the promoted target holds it: the moving ranges end
// equal to the source's, and no change was applied twice (every row is
// inserted at most once, and each update of a row carries a greater
// balance than the last one applied: a replayed transaction would write an
// image again). The streams are restarted as the move's CDC activity is
// restarted: a new Stream per attempt.
func TestTargetFailoverAppliesEveryChangeOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pg := pgtest.PG(t)
	tgt := pgtest.OwnServer(t, "tgtfailover")
	sb, both := pgtest.SyncStandby(t, tgt)
	pool, err := pgxpool.New(ctx, both)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e := &env{src: pgtest.NewDB(t, 0), dst: &pgtest.DB{Name: "postgres", Server: &tgt, DSN: both, Pool: pool}}
	e.src.Exec(t, schemaSQL)
	e.dst.Exec(t, schemaSQL)
	e.dst.Exec(t, appliedLogSQL)
	if e.set, err = tableset.Introspect(ctx, e.dst.Pool, tableset.Spec{Name: "s", Tables: usersOnly}, "target"); err != nil {
		t.Fatal(err)
	}
	if e.names, err = NamesFor("tgtfailover"); err != nil {
		t.Fatal(err)
	}
	if err := CreatePublication(ctx, e.src.Pool, e.names.Publication, e.set, testRanges); err != nil {
		t.Fatal(err)
	}
	e.createSlot(t) // before any row: every row reaches the target through the stream
	o := e.options()
	o.Target = "shard_t"

	// The move's CDC activity: a new Stream per attempt, started again
	// after a retryable error, with what the last one recorded.
	var cur atomic.Pointer[Stream]
	var runs []error
	var found []TargetFailover
	var mu sync.Mutex
	rctx, rcancel := context.WithCancel(ctx)
	loopDone := make(chan error, 1)
	go func() {
		for {
			st, err := New(o)
			if err != nil {
				loopDone <- err
				return
			}
			cur.Store(st)
			err = st.Run(rctx)
			if rctx.Err() != nil {
				loopDone <- nil
				return
			}
			mu.Lock()
			runs = append(runs, err)
			if f, ok := st.TargetFailedOver(); ok {
				found = append(found, f)
			}
			mu.Unlock()
			if !pgerr.Retryable(err) {
				loopDone <- err
				return
			}
			o.TargetIdentity = st.TargetIdentity() // recorded with the move
			time.Sleep(200 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { rcancel(); <-loopDone })

	w := startLedgerWriter(t, e.src)
	time.Sleep(1500 * time.Millisecond)
	if err := pg.Kill(ctx, tgt); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	if err := pg.Promote(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := devenv.ClearSyncStandby(ctx, sb); err != nil {
		t.Fatal(err)
	}
	t.Logf("target killed and its standby promoted in %s", time.Since(killedAt))
	time.Sleep(1500 * time.Millisecond)
	w.finish(t)
	for {
		st := cur.Load()
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		payload := fmt.Sprintf("drain-%d", rand.Int64())
		e.src.Exec(t, "SELECT pg_logical_emit_message(true, 'reshard', $1::text)", payload)
		_, err := st.DrainToMarker(dctx, payload)
		dcancel()
		if err == nil {
			break
		}
		select {
		case err := <-loopDone:
			t.Fatalf("the stream stopped: %v", err)
		default:
		}
		if ctx.Err() != nil {
			t.Fatalf("drain: %v", err)
		}
	}
	mu.Lock()
	t.Logf("stream runs ended before the last one: %v", runs)
	if f, ok := cur.Load().TargetFailedOver(); ok {
		found = append(found, f)
	}
	mu.Unlock()
	if len(found) != 1 {
		t.Fatalf("target failovers found: %v, want one", found)
	}
	f := found[0]
	t.Logf("found: %s", f)
	if f.Target != "shard_t" || f.Was.Timeline != 1 || f.Now.Timeline != 2 || f.Was.SystemID != f.Now.SystemID || f.ResumeFrom == 0 || f.At.Before(killedAt) {
		t.Fatalf("failover %+v, want shard_t, timeline 1 → 2 of the same system, after the kill, resumed from the origin's progress", f)
	}
	for _, want := range []string{"target shard_t failed over at ", "(timeline 1 → 2)", "resumed from " + f.ResumeFrom.String()} {
		if !strings.Contains(f.String(), want) {
			t.Fatalf("%q lacks %q", f, want)
		}
	}

	assertConverged(t, e, map[string][]string{"users": nil})
	assertAppliedOnce(t, e.dst)
}

// startLedgerWriter writes users on the source until finished: inserts of
// new ids (balance 0), updates that add 1 to a balance, and deletes, from
// four sessions.
func startLedgerWriter(t *testing.T, db *pgtest.DB) *writer {
	var stopped atomic.Bool
	var n atomic.Int64
	w := &writer{stop: func() { stopped.Store(true) }, done: make(chan struct{})}
	var wg sync.WaitGroup
	var errOnce sync.Once
	for k := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(k), 7))
			next := int64(k) * 1_000_000
			for !stopped.Load() {
				var sql string
				var args []any
				switch op := rnd.IntN(10); {
				case op < 4 || next == int64(k)*1_000_000:
					next++
					sql, args = "INSERT INTO users (id, email) VALUES ($1::bigint, 'u' || $1::bigint)", []any{next}
				case op < 9:
					sql, args = "UPDATE users SET balance = balance + 1 WHERE id = $1", []any{int64(k)*1_000_000 + 1 + rnd.Int64N(next-int64(k)*1_000_000)}
				default:
					sql, args = "DELETE FROM users WHERE id = $1", []any{int64(k)*1_000_000 + 1 + rnd.Int64N(next-int64(k)*1_000_000)}
				}
				if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
					errOnce.Do(func() { w.err = err })
					return
				}
				n.Add(1)
			}
		}()
	}
	go func() { wg.Wait(); w.n = int(n.Load()); close(w.done) }()
	t.Cleanup(func() { w.stop(); <-w.done })
	return w
}

// assertAppliedOnce reads the target's applied_log: a row inserted twice,
// or an update whose balance is not greater than the one before it, is a
// change applied twice.
func assertAppliedOnce(t *testing.T, db *pgtest.DB) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "SELECT id, op, coalesce(balance, -1) FROM applied_log ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	inserted := map[int64]bool{}
	last := map[int64]int64{}
	var n, twice int
	var bad []string
	for rows.Next() {
		var id, bal int64
		var op string
		if err := rows.Scan(&id, &op, &bal); err != nil {
			t.Fatal(err)
		}
		n++
		switch op {
		case "I":
			if inserted[id] {
				twice++
				bad = append(bad, fmt.Sprintf("id %d inserted again", id))
			}
			inserted[id], last[id] = true, bal
		case "U":
			if bal <= last[id] {
				twice++
				bad = append(bad, fmt.Sprintf("id %d updated to balance %d after %d", id, bal, last[id]))
			}
			last[id] = bal
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("the applier wrote %d rows on the target; %d writes applied twice", n, twice)
	if n < 100 {
		t.Fatalf("only %d rows applied: the test proves nothing", n)
	}
	if twice > 0 {
		t.Fatalf("%d changes applied twice, e.g. %v", twice, bad[:min(len(bad), 5)])
	}
}

// TestTargetOfAnotherSystemStops: a target that answers with another
// system identifier than the one the move's stream applied to (a cluster
// restored by dump, or created anew, behind the same address) stops the
// stream before it reads or creates the replication origin: not
// retryable, and nothing written.
func TestTargetOfAnotherSystemStops(t *testing.T) {
	e := newEnv(t, "tgtreplaced", usersOnly...)
	e.createSlot(t)
	e.src.Exec(t, "INSERT INTO users (id, email) SELECT g, 'u' || g FROM generate_series(1, 100) g")
	o := e.options()
	o.Target = "shard_t"
	o.TargetIdentity = ServerIdentity{SystemID: "7000000000000000001", Timeline: 1}
	st, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = st.Run(ctx)
	var re *TargetReplacedError
	if !errors.As(err, &re) || !errors.Is(err, ErrFailedOver) || pgerr.Retryable(err) {
		t.Fatalf("Run = %v, want a non-retryable *TargetReplacedError", err)
	}
	for _, want := range []string{"target shard_t is another database cluster", "system id 7000000000000000001 → ", "reshard rollback"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q lacks %q", err, want)
		}
	}
	if n := e.dst.QueryInt64(t, "SELECT count(*) FROM users"); n != 0 {
		t.Fatalf("%d rows applied to the other cluster", n)
	}
	if n := e.dst.QueryInt64(t, "SELECT count(*) FROM pg_replication_origin WHERE roname = $1", e.names.Origin); n != 0 {
		t.Fatalf("origin %s created on the other cluster", e.names.Origin)
	}
}
