package cdc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/testkit/pgtest"
)

// applyPaths are the two ways a flush reaches the target; every test below
// runs under both, so each path is held to the same semantics.
var applyPaths = []struct {
	name     string
	stageMin int
}{
	{"staged", 1},      // every flush by binary COPY into the stage
	{"array", 1 << 30}, // every flush by text[] parameters
}

// insideUsers returns user ids whose token is in the moving ranges.
func insideUsers(n int, from int64) []int64 {
	var out []int64
	for id := from; len(out) < n; id++ {
		if inTestRanges(id) {
			out = append(out, id)
		}
	}
	return out
}

// oneBatch: a batch commits only at a marker's transaction, so everything
// before the marker is one target transaction.
func oneBatch(o Options, stageMin int) Options {
	o.StageMinRows = stageMin
	o.BatchRows = 1 << 30
	o.BatchDelay = time.Hour
	o.FlushRows = 1 << 20
	return o
}

// applyToMarker emits a marker on the source, runs a stream until it has
// applied it, and stops the stream.
func applyToMarker(t *testing.T, e *env, s *Stream) {
	t.Helper()
	payload := fmt.Sprintf("drain-%d", rand.Int64())
	e.src.Exec(t, "SELECT pg_logical_emit_message(true, 'reshard', $1::text)", payload)
	stop := runStream(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.DrainToMarker(ctx, payload); err != nil {
		t.Fatalf("drain to marker: %v (stream: %v)", err, stop())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func originLSN(t *testing.T, e *env) pglogrepl.LSN {
	t.Helper()
	var s *string
	if err := e.dst.Pool.QueryRow(context.Background(), "SELECT max(remote_lsn)::text FROM pg_replication_origin_status WHERE external_id = $1", e.names.Origin).Scan(&s); err != nil {
		t.Fatal(err)
	}
	if s == nil {
		return 0
	}
	lsn, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// TestBatchSemantics: many source transactions touching the same keys, all
// applied in one target transaction. The last image of each key wins, a
// delete wins over earlier writes, a key that leaves the ranges is deleted,
// unchanged TOAST values come from the key's earlier image in the batch or
// are left as the target has them, and a row the source updated but the
// target lacks is inserted.
func TestBatchSemantics(t *testing.T) {
	for _, path := range applyPaths {
		t.Run(path.name, func(t *testing.T) {
			e := newEnv(t, "sem"+path.name, usersOrders...)
			seedSource(t, e)
			owned := seedTargetOwned(t, e)
			e.createSlot(t)
			e.copyRanges(t)
			in := insideUsers(11, 1)
			fresh := insideUsers(4, 10_000_000)
			out := outsideUsers(2, 20_000_000)
			// e6: the copy has not reached it yet (the source's UPDATE
			// finds no target row).
			e.dst.Exec(t, "DELETE FROM users WHERE id = $1", in[6])
			e.dst.Exec(t, "DELETE FROM users WHERE id = $1", in[8])
			for _, q := range []struct {
				sql  string
				args []any
			}{
				// last image wins, TOAST merged from the batch's own image
				{"INSERT INTO users VALUES ($1, 'n1', 1, 'p')", []any{fresh[0]}},
				{"UPDATE users SET balance = 5 WHERE id = $1", []any{fresh[0]}},
				{"UPDATE users SET payload = " + bigSQL + " WHERE id = $1", []any{fresh[0]}},
				{"UPDATE users SET balance = 6 WHERE id = $1", []any{fresh[0]}}, // payload unchanged TOAST
				// a delete wins over an earlier insert and update
				{"INSERT INTO users VALUES ($1, 'n2', 1, 'p')", []any{fresh[1]}},
				{"UPDATE users SET email = 'n2b' WHERE id = $1", []any{fresh[1]}},
				{"DELETE FROM users WHERE id = $1", []any{fresh[1]}},
				{"UPDATE users SET balance = balance + 1 WHERE id = $1", []any{in[0]}},
				{"DELETE FROM users WHERE id = $1", []any{in[0]}},
				// TOAST merged from an earlier full image of the batch
				{"UPDATE users SET payload = " + bigSQL + " WHERE id = $1", []any{in[1]}},
				{"UPDATE users SET balance = balance + 7 WHERE id = $1", []any{in[1]}},
				{"UPDATE users SET email = 'e1' WHERE id = $1", []any{in[1]}},
				// no earlier image: the TOAST column is left as it is
				{"UPDATE users SET balance = balance + 3 WHERE id = $1", []any{in[2]}},
				// ... and twice: the second image takes the first's columns
				{"UPDATE users SET balance = balance + 4 WHERE id = $1", []any{in[9]}},
				{"UPDATE users SET email = 'e9' WHERE id = $1", []any{in[9]}},
				// ... then deleted
				{"UPDATE users SET balance = balance + 5 WHERE id = $1", []any{in[10]}},
				{"DELETE FROM users WHERE id = $1", []any{in[10]}},
				// ... on a row the copy has not reached: read from the source
				{"UPDATE users SET balance = balance + 6 WHERE id = $1", []any{in[8]}},
				// the key leaves the ranges: a delete on the target
				{"UPDATE users SET balance = balance + 1 WHERE id = $1", []any{in[3]}},
				{"UPDATE users SET id = $2 WHERE id = $1", []any{in[3], out[0]}},
				// the key moves inside the ranges, its payload unchanged
				{"UPDATE users SET email = 'moved' WHERE id = $1", []any{in[4]}},
				{"UPDATE users SET id = $2 WHERE id = $1", []any{in[4], fresh[2]}},
				// deleted, inserted again: the insert is the last image
				{"DELETE FROM users WHERE id = $1", []any{in[5]}},
				{"INSERT INTO users VALUES ($1, 'again', 2, 'q')", []any{in[5]}},
				// updated on the source, missing on the target
				{"UPDATE users SET email = 'late', payload = 'small' WHERE id = $1", []any{in[6]}},
				// orders: the key (user_id, outside the replica identity)
				// leaves the ranges, and an order moves inside them
				{"UPDATE orders SET user_id = $2 WHERE user_id = $1", []any{in[7], out[1]}},
				{"UPDATE orders SET amount = amount + 1 WHERE user_id = $1", []any{in[1]}},
			} {
				e.src.Exec(t, q.sql, q.args...)
			}
			// A stream of many small transactions on the same keys too.
			for i := range 300 {
				e.src.Exec(t, "UPDATE users SET balance = balance + 1 WHERE id = $1", in[1+i%2])
			}
			s, err := New(oneBatch(e.options(), path.stageMin))
			if err != nil {
				t.Fatal(err)
			}
			applyToMarker(t, e, s)
			assertConverged(t, e, owned)
			if n := counterValue(s.mBatches); n != 1 {
				t.Errorf("%v target transactions, want the whole backlog in 1", n)
			}
			staged := counterValue(s.mFlushes[1])
			if (path.stageMin == 1) != (staged > 0) {
				t.Errorf("%v staged flushes on the %s path", staged, path.name)
			}
			for _, id := range []int64{fresh[1], in[0], in[3], in[4], in[10]} {
				if n := e.dst.QueryInt64(t, "SELECT count(*) FROM users WHERE id = $1", id); n != 0 {
					t.Errorf("user %d should be gone from the target", id)
				}
			}
			if n := e.dst.QueryInt64(t, "SELECT count(*) FROM users WHERE id = $1 AND length(payload) > 2000", fresh[2]); n != 1 {
				t.Errorf("user %d moved inside the ranges lost its unchanged payload", fresh[2])
			}
		})
	}
}

// TestStagedCollisionStops: a change whose key the target holds outside the
// moving ranges stops the stream with a CollisionError, whether it arrives
// as an INSERT, as an UPDATE (which the staged path writes by UPDATE) or as
// an UPDATE that left a TOASTed column out (a partial update), and
// the whole batch is rolled back with its origin progress: the rows and the
// applied position stay those of the last committed batch.
func TestStagedCollisionStops(t *testing.T) {
	for _, path := range applyPaths {
		for _, kind := range []string{"insert", "update", "partial"} {
			t.Run(path.name+"/"+kind, func(t *testing.T) {
				e := newEnv(t, "col"+path.name+kind, usersOrders...)
				seedSource(t, e)
				outside := outsideUsers(1, 1)[0]
				in := insideUsers(12, 1)
				switch kind { // a source row the copy skipped: the target has its own 9001
				case "update":
					e.src.Exec(t, "INSERT INTO orders VALUES (9001, $1, 7, 'theirs')", in[0])
				case "partial": // updated below with its TOASTed note unchanged
					e.src.Exec(t, "INSERT INTO orders VALUES (9001, $1, 7, "+bigSQL+")", in[0])
				}
				e.createSlot(t)
				e.copyRanges(t)
				e.dst.Exec(t, "DELETE FROM orders WHERE id = 9001")
				e.dst.Exec(t, "INSERT INTO orders VALUES (9001, $1, 5, 'mine')", outside)

				// A first batch commits.
				e.src.Exec(t, "UPDATE users SET email = 'first' WHERE id = $1", in[1])
				s, err := New(oneBatch(e.options(), path.stageMin))
				if err != nil {
					t.Fatal(err)
				}
				applyToMarker(t, e, s)
				committed := originLSN(t, e)
				if committed == 0 {
					t.Fatal("no origin progress after the first batch")
				}
				// The next batch: good changes, then the collision.
				e.src.Exec(t, "UPDATE users SET email = 'second' WHERE id = ANY($1)", in[1:])
				switch kind {
				case "update":
					e.src.Exec(t, "UPDATE orders SET note = 'theirs2' WHERE id = 9001")
				case "partial":
					e.src.Exec(t, "UPDATE orders SET amount = amount + 1 WHERE id = 9001")
				default:
					e.src.Exec(t, "INSERT INTO orders VALUES (9001, $1, 7, 'theirs')", in[0])
				}
				e.src.Exec(t, "SELECT pg_logical_emit_message(true, 'reshard', 'end')")
				s, err = New(oneBatch(e.options(), path.stageMin))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				err = s.Run(ctx)
				var ce *CollisionError
				if !errors.As(err, &ce) || ce.Table != "public.orders" || ce.Key != "id=9001" || pgerr.Retryable(err) {
					t.Fatalf("Run = %v, want a non-retryable collision on public.orders id=9001", err)
				}
				var note string
				var user int64
				if err := e.dst.Pool.QueryRow(ctx, "SELECT note, user_id FROM orders WHERE id = 9001").Scan(&note, &user); err != nil || note != "mine" || user != outside {
					t.Fatalf("target row after the collision: %q %d %v, want it intact", note, user, err)
				}
				if n := e.dst.QueryInt64(t, "SELECT count(*) FROM users WHERE email = 'second'"); n != 0 {
					t.Errorf("%d rows of the failed batch on the target, want none", n)
				}
				if n := e.dst.QueryInt64(t, "SELECT count(*) FROM users WHERE email = 'first'"); n != 1 {
					t.Errorf("the committed batch's row: %d, want 1", n)
				}
				if got := originLSN(t, e); got != committed {
					t.Errorf("origin progress %s after the failed batch, want %s (the last committed batch)", got, committed)
				}
				if staged := counterValue(s.mFlushes[1]); (path.stageMin == 1) != (staged > 0) {
					t.Errorf("%v staged flushes on the %s path", staged, path.name)
				}
			})
		}
	}
}

// TestStagedBigTransaction: one source transaction larger than FlushRows
// goes through the stage in several flushes within one target transaction
// (the stage is emptied between them) and converges; so does one of
// partial updates (its TOASTed payload unchanged), in several UPDATEs.
func TestStagedBigTransaction(t *testing.T) {
	e := newEnv(t, "stagebig", usersOnly...)
	seedSource(t, e)
	owned := seedTargetOwned(t, e)
	e.createSlot(t)
	e.copyRanges(t)
	e.src.Exec(t, "UPDATE users SET balance = balance + 1, email = email || 'x', payload = payload || 'y'")
	e.src.Exec(t, "UPDATE users SET balance = balance + 1")
	e.src.Exec(t, "DELETE FROM users WHERE id % 7 = 0")
	e.src.Exec(t, "INSERT INTO users SELECT g, 'b'||g, g, 'p' FROM generate_series(3000, 4000) g")
	o := oneBatch(e.options(), 1)
	o.FlushRows = 150
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	applyToMarker(t, e, s)
	assertConverged(t, e, owned)
	if n := counterValue(s.mFlushes[1]); n < 5 {
		t.Errorf("%v staged flushes, want several", n)
	}
	if n := counterValue(s.mFlushes[0]); n < 5 {
		t.Errorf("%v text[] flushes (the partial updates'), want several", n)
	}
	if n := counterValue(s.mBatches); n != 1 {
		t.Errorf("%v target transactions, want 1", n)
	}
}

// TestCatchUpBatches: a backlog of small source transactions is applied in
// batches bounded by CatchUpBatchDelay, not BatchDelay, and converges; with
// CatchUpBatchDelay no longer than BatchDelay it takes many more batches.
// Two slots see the same backlog, one per setting.
func TestCatchUpBatches(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "catchup", usersOnly...)
	seedSource(t, e)
	owned := seedTargetOwned(t, e)
	e.createSlot(t)
	off, err := NamesFor("catchup_off")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := pgconn.Connect(ctx, e.src.ReplicationDSN())
	if err != nil {
		t.Fatal(err)
	}
	offL0, _, err := CreateSlot(ctx, rc, off.Slot)
	rc.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.copyRanges(t)
	// 10,000: the stream without catch-up batching reads them in bursts
	// (a few hundred transactions in a millisecond), which a backlog of
	// 3,000 left at 9 batches.
	e.src.Exec(t, `DO $$ BEGIN FOR i IN 1..10000 LOOP
		UPDATE users SET balance = balance + 1 WHERE id = i % 500 + 1; COMMIT;
	END LOOP; END $$`)
	batches := map[string]float64{}
	for _, c := range []struct {
		name    string
		catchUp time.Duration
	}{{"catch-up", time.Minute}, {"off", time.Millisecond}} {
		o := e.options()
		o.BatchDelay, o.CatchUpBatchDelay, o.BatchRows = time.Millisecond, c.catchUp, 1<<30
		if c.name == "off" {
			o.Move, o.Slot, o.Origin, o.StartLSN = "off", off.Slot, off.Origin, offL0
		}
		s, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		applyToMarker(t, e, s)
		assertConverged(t, e, owned)
		batches[c.name] = counterValue(s.mBatches)
	}
	t.Logf("batches: %v", batches)
	if batches["catch-up"] > 3 || batches["off"] < 10 {
		t.Errorf("batches for a backlog of 10000 transactions: %v with catch-up batching, %v without; want <= 3 and >= 10", batches["catch-up"], batches["off"])
	}
}

// TestHotKeyBatchesCountRowsWritten: a batch is bounded by the rows it
// writes, not by the changes it receives. A backlog of 3,000 updates of 50
// keys writes each key once per batch, so with BatchRows 100 it fits one
// batch (ended by the marker's commit); counted by changes received, it
// took one per 100 changes in the ranges. Whether the updates set the
// TOASTed payload (full rows) or leave it unchanged (partial updates, which
// were written one by one: 15 transactions).
func TestHotKeyBatchesCountRowsWritten(t *testing.T) {
	for _, c := range []struct{ name, set string }{{"full", ", payload = 'p' || i"}, {"partial", ""}} {
		t.Run(c.name, func(t *testing.T) { testHotKeyBatches(t, c.name, c.set) })
	}
}

func testHotKeyBatches(t *testing.T, name, set string) {
	e := newEnv(t, "hotbatch"+name, usersOnly...)
	seedSource(t, e)
	owned := seedTargetOwned(t, e)
	e.createSlot(t)
	e.copyRanges(t)
	e.src.Exec(t, `DO $$ BEGIN FOR i IN 1..3000 LOOP
		UPDATE users SET balance = balance + 1`+set+` WHERE id = i % 50 + 1; COMMIT;
	END LOOP; END $$`)
	o := e.options()
	o.BatchDelay, o.CatchUpBatchDelay, o.BatchRows, o.FlushRows = time.Millisecond, time.Minute, 100, 1000
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	applyToMarker(t, e, s)
	assertConverged(t, e, owned)
	changes := counterValue(s.mChanges[Update])
	batches := counterValue(s.mBatches)
	t.Logf("%v updates applied in %v target transactions", changes, batches)
	if changes < 1000 {
		t.Fatalf("%v updates in the ranges applied, want most of 3000 (is the test's key range still moving?)", changes)
	}
	if batches > 2 {
		t.Errorf("%v target transactions for %v updates of at most 50 keys with BatchRows 100, want <= 2", batches, changes)
	}
}

// TestPartialAfterDeletes: a partial update that takes a unique value a
// delete in the same flush frees runs after the delete, as the flush's
// upserts do: the deletes of a table go first.
func TestPartialAfterDeletes(t *testing.T) {
	for _, path := range applyPaths {
		t.Run(path.name, func(t *testing.T) {
			e := newEnv(t, "partdel"+path.name, usersOnly...)
			seedSource(t, e)
			owned := seedTargetOwned(t, e)
			e.createSlot(t)
			e.copyRanges(t)
			for _, db := range []*pgtest.DB{e.src, e.dst} {
				db.Exec(t, "CREATE UNIQUE INDEX users_email ON users (email) WHERE email <> 'own'") // the target's own rows share one
			}
			in := insideUsers(2, 1)
			e.src.Exec(t, "DELETE FROM users WHERE id = $1", in[0])
			// email sent, the TOASTed payload not: a partial update
			e.src.Exec(t, "UPDATE users SET email = 'u' || $1::bigint WHERE id = $2", in[0], in[1])
			s, err := New(oneBatch(e.options(), path.stageMin))
			if err != nil {
				t.Fatal(err)
			}
			applyToMarker(t, e, s)
			assertConverged(t, e, owned)
		})
	}
}
