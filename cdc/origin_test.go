package cdc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A batch that records its position in the replication origin
// (pg_replication_origin_xact_setup) and then fails to commit must leave the
// origin where the last committed batch left it, also once the applier's
// session has ended: the next stream resumes from the origin, and a position
// past the failed batch would skip its transactions for good.
//
// PostgreSQL keeps the position given to pg_replication_origin_xact_setup in
// the session after a rollback, and any later transaction of that session
// that writes commits it into the origin, even one the server runs by itself
// at the session's end (dropping the session's temporary tables). A session
// killed between the xact_setup and its COMMIT (TestCrashResume kills the
// applier's) ends the same way as the failed COMMIT here, which a deferred
// trigger on the target refuses ("refused"); in "killed", the session is
// killed while that trigger holds its COMMIT, after the xact_setup and
// before the commit record.
//
// A cutover's DrainToMarker waiting for the marker of the failed batch
// ends with the stream's error as soon as the stream stops (the cutover
// then aborts and unfences), not at its deadline: the next stream is a new
// Stream, which the waiting drain never sees.
func TestFailedBatchLeavesOriginAtLastCommit(t *testing.T) {
	for _, path := range applyPaths {
		for _, end := range []string{"refused", "killed"} {
			t.Run(path.name+"/"+end, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				e := newEnv(t, "originfail"+path.name+end, usersOnly...)
				seedSource(t, e)
				owned := seedTargetOwned(t, e)
				e.createSlot(t)
				e.copyRanges(t)
				in := insideUsers(2, 1)
				e.dst.Exec(t, `CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
						IF NEW.email = 'refused' THEN RAISE EXCEPTION 'commit refused by the test'; END IF;
						IF NEW.email = 'killed' THEN PERFORM pg_sleep(60); END IF;
						RETURN NULL; END $$;
					CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT OR UPDATE ON users
						DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hold_commit();
					ALTER TABLE users ENABLE ALWAYS TRIGGER hold_commit`)

				// In one session: a batch commits (on the staged path, its
				// stage is created, and dropped at the commit), then the next
				// batch's COMMIT fails and the stream stops.
				e.src.Exec(t, "UPDATE users SET email = 'first', payload = 'full row' WHERE id = $1", in[0])
				e.src.Exec(t, "SELECT pg_logical_emit_message(true, 'reshard', 'first')")
				e.src.Exec(t, "UPDATE users SET email = $2, payload = 'full row too' WHERE id = $1", in[1], end)
				e.src.Exec(t, "SELECT pg_logical_emit_message(true, 'reshard', 'end')")
				s, err := New(oneBatch(e.options(), path.stageMin))
				if err != nil {
					t.Fatal(err)
				}
				drained := make(chan error, 1)
				go func() { _, err := s.DrainToMarker(ctx, "end"); drained <- err }()
				ran := make(chan error, 1)
				go func() { ran <- s.Run(ctx) }()
				if end == "killed" {
					for e.dst.QueryInt64(t, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'reshard_cdc_test' AND wait_event = 'PgSleep'") == 0 {
						if ctx.Err() != nil {
							t.Fatal("the applier's COMMIT never reached the trigger")
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
				if err := <-ran; err == nil || errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Run = %v, want the failed commit", err)
				}
				select {
				case err := <-drained:
					if err == nil || errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("DrainToMarker of the failed batch's marker = %v, want the stream's error", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("DrainToMarker of the failed batch's marker still waits 5 s after its stream stopped")
				}
				_, committed, _ := s.Positions()
				if first, ok := s.markers["first"]; !ok || committed != first {
					t.Fatalf("applied %s, want the first batch committed (its marker: %s, %v)", committed, first, ok)
				}
				if staged := counterValue(s.mFlushes[1]); (path.stageMin == 1) != (staged > 0) {
					t.Errorf("%v staged flushes on the %s path", staged, path.name)
				}
				// The applier's session has ended (its end runs after Run
				// returns).
				for e.dst.QueryInt64(t, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'reshard_cdc_test'") > 0 {
					if ctx.Err() != nil {
						t.Fatal("the applier's session did not end")
					}
					time.Sleep(20 * time.Millisecond)
				}
				if got := originLSN(t, e); got != committed {
					t.Errorf("origin progress %s after the failed batch and the end of its session, want %s (the last committed batch)", got, committed)
				}

				// Once the target accepts it, the batch is applied again.
				e.dst.Exec(t, "DROP TRIGGER hold_commit ON users")
				s, err = New(e.options())
				if err != nil {
					t.Fatal(err)
				}
				applyToMarker(t, e, s)
				assertConverged(t, e, owned)
			})
		}
	}
}

// A stream that starts after its move ended — its slot, publication and
// origin dropped by cleanup or rollback — leaves no replication origin on
// its target. The worker can start one so: an activity the server has
// already timed out (its first heartbeat late on a loaded machine) still
// runs, and the workflow, told it ended, goes on to drop the stream's
// objects; the late stream's start created the origin again, and its
// START_REPLICATION then failed on the missing slot, leaving the origin.
func TestStreamAfterItsSlotIsDroppedLeavesNoOrigin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := newEnv(t, "late", usersOnly...)
	seedSource(t, e)
	e.createSlot(t)
	e.copyRanges(t)
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	stop := runStream(t, s)
	drain(t, e, s)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// What cleanup does (cleanup.DropStreams): slot and publication on the
	// source, then the origin on the target.
	if err := DropSlot(ctx, e.src.Pool, e.names.Slot); err != nil {
		t.Fatal(err)
	}
	if err := DropPublication(ctx, e.src.Pool, e.names.Publication); err != nil {
		t.Fatal(err)
	}
	if err := DropOrigin(ctx, e.dst.Pool, e.names.Origin); err != nil {
		t.Fatal(err)
	}
	for _, peek := range []bool{false, true} { // started by a walsender, or by SQL peeks
		o := e.options()
		if peek {
			o.PeekCatchUpBytes = 1
		}
		err := Run(ctx, o)
		if err == nil || !strings.Contains(err.Error(), e.names.Slot) {
			t.Errorf("peek %v: Run after the slot was dropped = %v, want an error naming slot %s", peek, err, e.names.Slot)
		}
		if n := e.dst.QueryInt64(t, "SELECT count(*) FROM pg_replication_origin WHERE roname = $1", e.names.Origin); n != 0 {
			t.Errorf("peek %v: the late stream left replication origin %s on the target (Run: %v)", peek, e.names.Origin, err)
			DropOrigin(ctx, e.dst.Pool, e.names.Origin)
		}
	}
	// An origin that was there before the stream (a stream of a move that
	// has not ended, whose slot is missing for another reason) is kept:
	// it is the target's record of what it holds.
	e.dst.Exec(t, "SELECT pg_replication_origin_create($1)", e.names.Origin)
	if err := Run(ctx, e.options()); err == nil {
		t.Error("Run without a slot passed")
	}
	if n := e.dst.QueryInt64(t, "SELECT count(*) FROM pg_replication_origin WHERE roname = $1", e.names.Origin); n != 1 {
		t.Errorf("an origin the stream did not create was dropped")
	}
}
