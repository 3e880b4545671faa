package cdc

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/reshard/reshard/internal/pgerr"
)

// The target side of a failover. The applier commits each batch with the
// replication origin's progress (pg_replication_origin_xact_setup), so the
// progress is WAL-logged with the rows and a synchronous standby holds both
// or neither: after its promotion the stream resumes from the origin's
// progress as the new primary reads it, and nothing is applied twice or
// lost (TestTargetFailoverAppliesEveryChangeOnce). What a Run must not do
// is take another server for the one it applied to without looking: it
// reads the target's identity on the applier's own session, before the
// origin, and a new timeline of the same system is a failover to report
// (TargetFailover), a different system a server that holds none of the
// move's history (*TargetReplacedError).

// ServerIdentity is a server's system identifier and timeline (the
// source's is a SourceIdentity, read by IDENTIFY_SYSTEM; the target's is
// read by SQL on the applier's session).
type ServerIdentity = SourceIdentity

// queryRower is a target session or pool.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// identifyTarget reads the identity of the server q is connected to: the
// system identifier from pg_control_system() and the timeline WAL is being
// written on (pg_walfile_name uses the insertion timeline: right after a
// promotion, when pg_control_checkpoint() still shows the old one until
// the next checkpoint). Neither needs a privilege.
func identifyTarget(ctx context.Context, q queryRower) (ServerIdentity, error) {
	var id ServerIdentity
	var tli string
	err := q.QueryRow(ctx, `SELECT system_identifier::text, left(pg_walfile_name(pg_current_wal_lsn()), 8) FROM pg_control_system()`).Scan(&id.SystemID, &tli)
	if err != nil {
		return ServerIdentity{}, wrapOp("identify the target (system identifier, timeline)", err)
	}
	n, err := strconv.ParseInt(tli, 16, 32)
	if err != nil {
		return ServerIdentity{}, fmt.Errorf("identify the target: timeline %q: %w", tli, err)
	}
	id.Timeline = int32(n)
	return id, nil
}

// CheckTarget reads the identity of the target q reaches and compares it
// with was, the one the move last saw (zero: nothing to compare). A later
// timeline of the same system is a failover, returned for the caller to
// report (whatever it holds on the target — copy checkpoints, the
// origin's progress — it reads again there); another system is a
// *TargetReplacedError. The stream runs it on the applier's session, the
// copy on its target pool before a slice.
func CheckTarget(ctx context.Context, q queryRower, target string, was ServerIdentity) (ServerIdentity, *TargetFailover, error) {
	now, err := identifyTarget(ctx, q)
	if err != nil {
		return ServerIdentity{}, nil, err
	}
	if was.known() && was.SystemID != now.SystemID {
		return now, nil, &TargetReplacedError{Target: target, Was: was, Now: now}
	}
	if was.known() && was.Timeline != now.Timeline {
		return now, &TargetFailover{Target: target, Was: was, Now: now, At: time.Now()}, nil
	}
	return now, nil, nil
}

// TargetFailover is a Run's finding that the target is the server the
// stream applied to, on a later timeline: its standby was promoted (or it
// was switched over and back). The stream resumed from the origin's
// progress on the new primary.
type TargetFailover struct {
	Target     string // Options.Target
	Was, Now   ServerIdentity
	At         time.Time     // when it was found
	ResumeFrom pglogrepl.LSN // a stream's: the origin's progress on the new primary
}

func (f TargetFailover) String() string {
	s := fmt.Sprintf("target %s failed over at %s (timeline %d → %d)", f.Target, f.At.UTC().Format(time.RFC3339), f.Was.Timeline, f.Now.Timeline)
	if f.ResumeFrom != 0 {
		s += fmt.Sprintf(": resumed from %s, the replication origin's progress on the new primary", f.ResumeFrom)
	}
	return s
}

// TargetReplacedError: the target answers with another system identifier
// than the one the stream applied to. A promoted standby keeps its
// primary's; another one is a different database cluster (restored by
// dump, or created anew), whose replication origin and rows are not the
// ones this stream wrote. Resuming there could apply changes on top of the
// wrong rows or from the slot's start; nothing retries it.
type TargetReplacedError struct {
	Target   string
	Was, Now ServerIdentity
}

func (e *TargetReplacedError) Error() string {
	return fmt.Sprintf("target %s is another database cluster than the one the stream applied to (system id %s → %s): its rows and replication origin are not the move's; roll the move back (reshard rollback) and plan it again",
		e.Target, e.Was.SystemID, e.Now.SystemID)
}

// Is makes errors.Is(err, ErrFailedOver) true: a side of the move is not
// the server its positions belong to, and resuming cannot fix it.
func (e *TargetReplacedError) Is(target error) bool { return target == ErrFailedOver }

// Retryable: another server answers as the target; a repair, not a retry,
// follows.
func (e *TargetReplacedError) Retryable() bool { return false }

// StopKind: a failover of the target, as FailedOverError's of the source.
func (e *TargetReplacedError) StopKind() string { return pgerr.StopFailedOver }

// checkTarget compares the target the applier's session reached with the
// identity the stream expects (Options.TargetIdentity, else the last one a
// Run of this Stream saw). A new timeline is noted as a TargetFailover,
// completed by noteResume once the origin was read on the new primary.
func (r *runner) checkTarget(ctx context.Context) error {
	r.s.mu.Lock()
	was := r.s.tgtIdentity
	r.s.mu.Unlock()
	now, f, err := CheckTarget(ctx, r.tg.conn, r.o.Target, was)
	if err != nil {
		return err
	}
	if f != nil {
		// Recorded once the origin was read there (noteResume): until
		// then TargetIdentity stays the old one, so that the next Stream
		// finds the failover again if this Run fails before.
		r.tgtFailover = f
		return nil
	}
	r.s.mu.Lock()
	r.s.tgtIdentity = now
	r.s.mu.Unlock()
	return nil
}

// noteResume records this Run's TargetFailover, with the position the
// stream resumes from, and says so in the log.
func (r *runner) noteResume(start pglogrepl.LSN) {
	if r.tgtFailover == nil {
		return
	}
	f := *r.tgtFailover
	f.ResumeFrom = start
	r.s.mu.Lock()
	r.s.tgtFailover, r.s.tgtIdentity = &f, f.Now
	r.s.mu.Unlock()
	r.s.log.Warn(f.String(), "shard", f.Target, "lsn", start.String())
}

// TargetIdentity is the target's identity as the last Run saw it (else
// Options.TargetIdentity): the caller records it with the move and passes
// it to the next Stream, so that a worker that starts the stream again
// after a failover still sees the change.
func (s *Stream) TargetIdentity() ServerIdentity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tgtIdentity
}

// TargetFailedOver is the target failover a Run of this Stream found and
// resumed from, if any.
func (s *Stream) TargetFailedOver() (TargetFailover, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tgtFailover == nil {
		return TargetFailover{}, false
	}
	return *s.tgtFailover, true
}
