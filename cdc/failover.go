package cdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/internal/pgsession"
)

// SourceIdentity names the server a stream's positions belong to: its
// system identifier and timeline, as IDENTIFY_SYSTEM reports them. A
// promoted standby keeps the system identifier and moves to the next
// timeline; a server rebuilt from elsewhere has another identifier.
type SourceIdentity struct {
	SystemID string
	Timeline int32
}

func (id SourceIdentity) known() bool { return id.SystemID != "" }

// IdentifySource runs IDENTIFY_SYSTEM on a replication connection.
func IdentifySource(ctx context.Context, replConn *pgconn.PgConn) (SourceIdentity, error) {
	res, err := pglogrepl.IdentifySystem(ctx, replConn)
	if err != nil {
		return SourceIdentity{}, wrapOp("identify the source (IDENTIFY_SYSTEM)", err)
	}
	return SourceIdentity{SystemID: res.SystemID, Timeline: res.Timeline}, nil
}

// FailedOverError: the source is not the server the stream's positions
// were taken on, or its slot is gone. On PostgreSQL 15 a logical slot does
// not survive a promotion, so the changes between the last applied position
// and whatever a new slot would start from may be missing on the target.
// Nothing brings the old slot back and a new one starts later: retrying or
// resuming cannot fix it, and recreating the slot by hand would skip those
// changes silently. The moving ranges must be repaired (verified and the
// differing chunks copied again) from a new slot's snapshot.
type FailedOverError struct {
	Source        string // the source shard (Options.Source)
	Slot          string
	Since         pglogrepl.LSN // the position the stream would have resumed from
	Was, Now      SourceIdentity
	SlotMissing   bool
	SlotLost      bool // wal_status = 'lost': the WAL it needed was removed
	SystemChanged bool
}

func (e *FailedOverError) Error() string {
	var why []string
	if e.Was.known() && e.Was.Timeline != e.Now.Timeline {
		why = append(why, fmt.Sprintf("timeline %d → %d", e.Was.Timeline, e.Now.Timeline))
	}
	if e.SystemChanged {
		why = append(why, fmt.Sprintf("system id changed %s → %s", e.Was.SystemID, e.Now.SystemID))
	}
	if e.SlotMissing {
		why = append(why, "slot "+e.Slot+" missing")
	}
	if e.SlotLost {
		why = append(why, "slot "+e.Slot+" lost (wal_status lost: its WAL was removed)")
	}
	return fmt.Sprintf("source %s failed over (%s): the changes since %s may be missing on the target; repair needed",
		e.Source, strings.Join(why, ", "), e.Since)
}

// ErrFailedOver matches every *FailedOverError (and *TargetReplacedError)
// with errors.Is.
var ErrFailedOver error = failedOver{}

type failedOver struct{}

func (failedOver) Error() string    { return "source failed over" }
func (failedOver) StopKind() string { return pgerr.StopFailedOver }

// Is makes errors.Is(err, ErrFailedOver) true.
func (e *FailedOverError) Is(target error) bool { return target == ErrFailedOver }

// Retryable: the changes since the failover may be missing; a repair, not
// a retry, follows.
func (e *FailedOverError) Retryable() bool { return false }

// StopKind: the move recovers (RecoverSource, Repair) or stops for the
// operator, as the workflow decides.
func (e *FailedOverError) StopKind() string { return pgerr.StopFailedOver }

// checkSource compares the source with the identity the stream expects
// (Options.SourceIdentity, else the one an earlier Run of this Stream saw)
// and looks at the slot, before anything is read from it: a missing slot,
// a lost one or another timeline or system is a *FailedOverError, never
// "no changes". The first identity seen is remembered for later Runs.
func (r *runner) checkSource(ctx context.Context, since pglogrepl.LSN) error {
	r.s.mu.Lock()
	was := r.o.SourceIdentity
	if !was.known() {
		was = r.s.identity
	}
	r.s.mu.Unlock()
	now, err := CheckSource(ctx, r.o.SourceReplicationDSN, r.o.Source, r.o.Slot, was, since)
	if err != nil {
		return err
	}
	r.s.mu.Lock()
	if !r.s.identity.known() {
		r.s.identity = now
	}
	r.s.mu.Unlock()
	return nil
}

// CheckSource tells whether the source is still the server a move's
// positions belong to, for every activity that holds one (the stream, a
// copy slice, a verify): it runs IDENTIFY_SYSTEM over replicationDSN and
// reads the slot's row. A missing slot, a lost one (wal_status lost), or a
// timeline or system id other than was's (when known) is a
// *FailedOverError naming source and since (the position the caller's
// work started from); otherwise it returns the identity found. A failover
// slot that survived a promotion (slotSurvived, PostgreSQL 17+) and
// confirmed nothing past since is not a failover: the caller goes on.
func CheckSource(ctx context.Context, replicationDSN, source, slot string, was SourceIdentity, since pglogrepl.LSN) (SourceIdentity, error) {
	cfg, err := pgsession.ParseConfig(replicationDSN)
	if err != nil {
		return SourceIdentity{}, fmt.Errorf("parse source connection string: %w", redactParseError(err))
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return SourceIdentity{}, wrapOp("connect to the source for replication", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	now, err := IdentifySource(ctx, conn)
	if err != nil {
		return SourceIdentity{}, err
	}
	// Replication connections take simple queries only, hence the quoting.
	res, err := conn.Exec(ctx, slotQuery(slot)).ReadAll()
	if err != nil {
		return SourceIdentity{}, wrapOp("look up replication slot "+slot, err)
	}
	row := parseSlotRow(res)
	// A failover slot that came through the promotion (PostgreSQL 17+)
	// needs no repair.
	if slotSurvived(was, now, row, since) {
		return now, nil
	}
	missing, lost := !row.Exists, row.Lost
	fe := &FailedOverError{Source: source, Slot: slot, Since: since, Was: was, Now: now, SlotMissing: missing, SlotLost: lost,
		SystemChanged: was.known() && was.SystemID != now.SystemID}
	if missing || lost || fe.SystemChanged || (was.known() && was.Timeline != now.Timeline) {
		return now, fe
	}
	return now, nil
}

// Identity is the source identity this Stream's Runs have seen (zero before
// the first one got as far as the source): the caller may record it with
// the move, to pass back as Options.SourceIdentity to a later Stream.
func (s *Stream) Identity() SourceIdentity {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.SourceIdentity.known() {
		return s.opts.SourceIdentity
	}
	return s.identity
}

// dsnHosts is the host:port list of a DSN, for messages (never the DSN,
// which may hold a password).
func dsnHosts(dsn string) string {
	cfg, err := pgsession.ParseConfig(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	hosts := []string{fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)}
	for _, f := range cfg.Fallbacks {
		if h := fmt.Sprintf("%s:%d", f.Host, f.Port); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return strings.Join(hosts, ",")
}

// failedOverSince is the *FailedOverError of a Run that found the slot
// missing, when the source's timeline or system id changed (a promoted
// standby) against what the stream knows of it (Options.SourceIdentity, or
// an earlier Run's): since is the target origin's position, or StartLSN
// when the target has none yet. Nil otherwise (a cleanup dropped the slot
// first: setUpOrigin's error says so).
func (r *runner) failedOverSince(ctx context.Context) error {
	since := r.o.StartLSN
	var progress *string
	if err := r.tg.conn.QueryRow(ctx, `SELECT pg_replication_origin_progress(roname, true)::text FROM pg_replication_origin WHERE roname = $1`, r.o.Origin).Scan(&progress); err == nil && progress != nil {
		if lsn, err := pglogrepl.ParseLSN(*progress); err == nil && lsn > 0 {
			since = lsn
		}
	}
	var fe *FailedOverError
	if err := r.checkSource(ctx, since); errors.As(err, &fe) && (fe.SystemChanged || (fe.Was.known() && fe.Was.Timeline != fe.Now.Timeline)) {
		return err
	}
	return nil
}

// SlotReader is the process id of the walsender reading the slot (0: none)
// and whether the slot exists at all.
func SlotReader(ctx context.Context, conn Querier, slot string) (pid int32, exists bool, err error) {
	var active *int32
	err = conn.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, wrapOp("read replication slot "+slot, err)
	}
	if active != nil {
		pid = *active
	}
	return pid, true, nil
}

// NotStandbyOfError: the server configured as a source shard's standby is
// not a streaming standby of the server the move's slot is on (another
// system, another timeline, or not in recovery). Reading a copy or a
// verify there would read another history: not retryable.
type NotStandbyOfError struct {
	Source     string // the source shard
	Was, Now   SourceIdentity
	InRecovery bool
}

func (e *NotStandbyOfError) Error() string {
	var why string
	switch {
	case !e.InRecovery:
		why = "it is not in recovery (a primary, or a promoted standby)"
	case e.Was.SystemID != e.Now.SystemID:
		why = fmt.Sprintf("its system id is %s, the source's %s", e.Now.SystemID, e.Was.SystemID)
	default:
		why = fmt.Sprintf("it replays timeline %d, the move's slot was created on timeline %d", e.Now.Timeline, e.Was.Timeline)
	}
	return fmt.Sprintf("the standby configured for source %s is not a standby of it: %s; fix shards.%s.standby in reshard.yaml, or read from the primary (--read-from primary)",
		e.Source, why, e.Source)
}

// Retryable: a configuration to fix, not a state that passes.
func (e *NotStandbyOfError) Retryable() bool { return false }

// StopKind: the configuration is the input to fix.
func (e *NotStandbyOfError) StopKind() string { return pgerr.StopBadInput }

// CheckStandby tells whether the server at standbyReplicationDSN is a
// streaming standby of the source whose identity was recorded with the
// move (was: the server its slot is on): in recovery, with the same system
// identifier, replaying the same timeline (IDENTIFY_SYSTEM on a standby
// reports the timeline it replays). Otherwise a *NotStandbyOfError.
func CheckStandby(ctx context.Context, standbyReplicationDSN, source string, was SourceIdentity) error {
	cfg, err := pgsession.ParseConfig(standbyReplicationDSN)
	if err != nil {
		return fmt.Errorf("parse the connection string of %s's standby: %w", source, redactParseError(err))
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return wrapOp("connect to the standby of "+source+" for replication", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	now, err := IdentifySource(ctx, conn)
	if err != nil {
		return err
	}
	res, err := conn.Exec(ctx, "SELECT pg_is_in_recovery()").ReadAll()
	if err != nil {
		return wrapOp("ask the standby of "+source+" whether it is in recovery", err)
	}
	recovery := len(res) == 1 && len(res[0].Rows) == 1 && string(res[0].Rows[0][0]) == "t"
	if !recovery || (was.known() && (now.SystemID != was.SystemID || now.Timeline != was.Timeline)) {
		return &NotStandbyOfError{Source: source, Was: was, Now: now, InRecovery: recovery}
	}
	return nil
}
