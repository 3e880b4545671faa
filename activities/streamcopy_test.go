package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/join"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

// TestMoveStreamsDuringCopy: a move with --stream-during-copy through the
// activities, as the workflow runs them, writers busy on the source all
// along. PLAN refuses a keyspace with a text primary key, naming the table
// and the fix, and creates nothing. The forward stream starts from the
// slot's L0 before the first copy slice, through the copy gate; the copy
// runs in 1 s slices, and each slice that ends by its time leaves no chunk
// for the stream to hold; one slice is killed mid-chunk (its context
// cancelled, as a dead worker's) and one stream killed and started again,
// both during the copy. The slot's confirmed position moves during the
// copy (the stream runs beside it), and once the writers stop and the
// stream drains, the target holds exactly the source's moving rows:
// nothing lost, duplicated or resurrected.
func TestMoveStreamsDuringCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	const ddl = `CREATE TABLE users (id bigint PRIMARY KEY, name text, n int NOT NULL DEFAULT 0);
		CREATE TABLE tags (name text PRIMARY KEY, user_id bigint NOT NULL)`
	src.Exec(t, ddl+`; INSERT INTO users SELECT g, 'n' || g FROM generate_series(1, 20000) g; ANALYZE users`)
	dst.Exec(t, ddl)
	if err := backfill.EnsureSchema(ctx, dst.Pool); err != nil {
		t.Fatal(err)
	}
	a := New(&Resolver{Shards: map[string]string{"src": src.DSN, "dst": dst.DSN}}, nil, nil)
	t.Cleanup(a.Close)
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken / 3}}
	inRange := ring.Predicate("hashint8extended(id, 0)", ranges)
	moveID := fmt.Sprintf("actgw%d_m1", time.Now().UnixNano()%1_000_000)
	req := &workflows.MigrationRequest{ID: "actgw", StreamDuringCopy: true}
	spec := keyspace.Spec{Name: "users", Tables: []keyspace.TableSpec{{Table: "users", KeyColumn: "id"}}}
	ref := workflows.MoveRef{MigrationID: "actgw", Spec: workflows.MoveSpec{ID: moveID, Source: "src", Target: "dst", Ranges: ranges}, Tables: spec, Request: req}

	// PLAN: a text primary key is refused, naming the table and the fix.
	withTags := ref
	withTags.Tables = keyspace.Spec{Name: "users", Tables: []keyspace.TableSpec{{Table: "users", KeyColumn: "id"}, {Table: "tags", KeyColumn: "user_id"}}}
	err := a.PreflightMove(ctx, withTags)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypePreflight || !strings.Contains(err.Error(), "public.tags") ||
		!strings.Contains(err.Error(), "--stream-during-copy=false") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("PLAN with a text key: %v, want a %s error naming public.tags and the flag", err, workflows.ErrTypePreflight)
	}
	t.Logf("PLAN with a text key: %v", err)
	if n := src.QueryInt64(t, `SELECT count(*) FROM pg_replication_slots`); n != 0 {
		t.Fatalf("the refused PLAN left %d slots", n)
	}
	if err := a.PreflightMove(ctx, ref); err != nil {
		t.Fatalf("PLAN with integer keys: %v", err)
	}

	writes, stop := startUserWriters(ctx, src.Pool, 24000, 7, `INSERT INTO users VALUES ($1, 'w', 1) ON CONFLICT (id) DO UPDATE SET n = users.n + 1, name = 'w' || users.n`)
	defer stop()

	names, err := cdc.NamesFor(moveID)
	if err != nil {
		t.Fatal(err)
	}
	set, err := tableset.Introspect(ctx, src.Pool, spec, "source")
	if err != nil {
		t.Fatal(err)
	}
	if err := cdc.CreatePublication(ctx, src.Pool, names.Publication, set, ranges); err != nil {
		t.Fatal(err)
	}
	l0, id, err := join.Slot(ctx, a.replication("src"), "src", names.Slot)
	if err != nil {
		t.Fatal(err)
	}
	ref.Source = &workflows.SourceIdentity{SystemID: id.SystemID, Timeline: id.Timeline, L0: l0.String()}

	// The stream, as the workflow's session runs it: started before the
	// copy, killed once during it and started again.
	var (
		smu        sync.Mutex
		stopStream context.CancelFunc
		streamDone chan error
	)
	startStream := func(n int) {
		sctx, c := context.WithCancel(ctx)
		done := make(chan error, 1)
		r := ref
		r.Stream = fmt.Sprintf("test#%d", n)
		go func() {
			done <- a.RunCDC(sctx, workflows.CDCInput{Move: r, L0: l0.String(), Phase: workflows.PhaseSnapshotCopy, CopyGate: true})
		}()
		smu.Lock()
		stopStream, streamDone = c, done
		smu.Unlock()
	}
	killStream := func() {
		smu.Lock()
		defer smu.Unlock()
		stopStream()
		if err := <-streamDone; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("stream: %v", err)
		}
	}
	startStream(1)
	defer killStream()

	confirmed := func() pglogrepl.LSN {
		var s string
		if err := src.Pool.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1`, names.Slot).Scan(&s); err != nil {
			t.Fatal(err)
		}
		lsn, err := pglogrepl.ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		return lsn
	}
	// 2,500 rows/s: the copy's 13,000-odd moving rows then last 5 s or more,
	// so the restarted stream runs for over its 2 s status interval (the
	// slot's confirmed position moves with its status updates) before the
	// last sample below. At 4,000 rows/s an idle CI machine copied in four
	// slices, the last sample 1.2 s after the restart, and the slot had
	// not yet confirmed past L0.
	in := workflows.CopySliceInput{Move: ref, ChunkRows: 500, MaxTime: time.Second, Throttle: workflows.Throttle{RowsPerSec: 2500}, StreamDuringCopy: true}
	var movedDuringCopy pglogrepl.LSN
	start := time.Now()
	slices, killed := 0, false
	for {
		slices++
		if slices == 2 && !killed {
			// The stream's worker dies during the copy, after its first
			// slice, and the copy goes on once the restarted stream runs
			// (its origin read): the rest of the copy, three slices or
			// more, is left for it to skip the writers' changes ahead of.
			// (Restarted before the fourth slice, on a loaded machine a
			// stream slow to start first read the copy's progress in the
			// copy's last chunk: it held one change and skipped none.)
			killStream()
			restarted := time.Now()
			startStream(2)
			s2, err := a.stream(ctx, ref, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if _, applied, _ := s2.Positions(); applied > 0 {
					t.Logf("the restarted stream runs from %s after %s", applied, time.Since(restarted).Round(time.Millisecond))
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the restarted stream did not start in 30 s")
				}
			}
			killed = true
		}
		if slices == 2 {
			// A worker killed mid-chunk: its slice's context ends as soon
			// as it has marked a new chunk as being read.
			kctx, kc := context.WithCancel(ctx)
			before, err := cdc.ReadCopyProgress(ctx, dst.Pool, moveID)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				defer kc()
				for kctx.Err() == nil {
					prog, err := cdc.ReadCopyProgress(kctx, dst.Pool, moveID)
					if err == nil && fmt.Sprint(prog["public.users"].ReadingTo) != fmt.Sprint(before["public.users"].ReadingTo) {
						return
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
			_, err = a.CopySlice(kctx, in)
			kc()
			if err == nil {
				t.Fatal("a slice killed mid-chunk returned no error")
			}
			prog, perr := cdc.ReadCopyProgress(ctx, dst.Pool, moveID)
			if perr != nil {
				t.Fatal(perr)
			}
			p := prog["public.users"]
			t.Logf("slice killed mid-chunk (%v): copied to %v, reading to %v", err, p.Copied, p.ReadingTo)
			continue
		}
		p, err := a.CopySlice(ctx, in)
		if err != nil {
			t.Fatalf("copy slice %d: %v", slices, err)
		}
		prog, err := cdc.ReadCopyProgress(ctx, dst.Pool, moveID)
		if err != nil {
			t.Fatal(err)
		}
		if u := prog["public.users"]; !u.Done && u.ReadingTo != nil && fmt.Sprint(u.ReadingTo) != fmt.Sprint(u.Copied) {
			t.Fatalf("slice %d ended by its time with a chunk in flight: copied to %v, reading to %v", slices, u.Copied, u.ReadingTo)
		}
		if p.Done {
			break
		}
		movedDuringCopy = confirmed()
	}
	t.Logf("copied in %d slices, %s, %d writes so far; slot confirmed at %s during the copy (L0 %s)", slices, time.Since(start).Round(time.Millisecond), writes.Load(), movedDuringCopy, l0)
	if movedDuringCopy <= l0 {
		t.Fatalf("the slot's confirmed position %s did not move past L0 %s during the copy: the stream did not run beside it", movedDuringCopy, l0)
	}

	st, err := a.stream(ctx, ref, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g := st.GateStats(); g.Skipped == 0 {
		t.Fatalf("the gate skipped no change of the %d writes during the copy: the stream did not run through it (%+v)", writes.Load(), g)
	} else {
		t.Logf("the restarted stream's gate: %d changes skipped, %d held", g.Skipped, g.Held)
	}

	stop()
	q := `SELECT coalesce(string_agg(u::text, '|' ORDER BY id), '') FROM users u WHERE ` + inRange
	deadline := time.Now().Add(60 * time.Second)
	for {
		var want, got string
		if err := src.Pool.QueryRow(ctx, q).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if err := dst.Pool.QueryRow(ctx, q).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want == got {
			break
		}
		if time.Now().After(deadline) {
			w, g := strings.Split(want, "|"), strings.Split(got, "|")
			t.Fatalf("60 s after %d writes stopped, the target's moving rows (%d) still differ from the source's (%d)", writes.Load(), len(g), len(w))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("after %d writes, the target holds exactly the source's %d moving rows", writes.Load(), dst.QueryInt64(t, `SELECT count(*) FROM users`))
}
