package workflows

import (
	"fmt"
	"strings"
	"time"

	"github.com/reshard/reshard/keyspace"
)

// Activity names and their inputs and outputs: the contract between these
// workflows and package activities, which registers its methods under these
// names. Like the workflow inputs they carry shard names only.
const (
	ActivityPlan             = "Plan"
	ActivityPublishMigrating = "PublishMigrating"
	ActivityPublishStable    = "PublishStable"
	ActivityPreflightMove    = "PreflightMove"
	ActivityJoin             = "Join"
	ActivityCopySlice        = "CopySlice"
	ActivityRunCDC           = "RunCDC"
	ActivityCDCStatus        = "CDCStatus"
	ActivityVerify           = "Verify"
	ActivityPrepareReverse   = "PrepareReverse"
	ActivityCutover          = "Cutover"
	ActivityStopForward      = "StopForward"
	ActivityRunReverse       = "RunReverse"
	ActivityCleanup          = "Cleanup"
	ActivityRollback         = "Rollback"
	ActivityRecoverSource    = "RecoverSource"
	ActivityRepair           = "Repair"
	ActivityRecoverReverse   = "RecoverReverse"
)

// Application error types the activities return and the workflows act on.
const (
	// ErrTypePreflight: a PLAN check failed; the message lists every problem
	// with its fix. Nothing was changed.
	ErrTypePreflight = "PreflightFailed"
	// ErrTypeVerification: source and target differ; the details hold a
	// VerifySummary.
	ErrTypeVerification = "VerificationFailed"
	// ErrTypeCutoverAborted: the write-pause budget was spent (or a step
	// before publish failed); the source owns the ranges again, retry later.
	ErrTypeCutoverAborted = "CutoverAborted"
	// ErrTypeBadInput, ErrTypeCollision, ErrTypeSchemaChange: the move
	// cannot go on by itself.
	ErrTypeBadInput     = "BadInput"
	ErrTypeCollision    = "Collision"
	ErrTypeSchemaChange = "SchemaChange"
	// ErrTypeNoStream: a phase activity needs the move's CDC stream in its
	// worker and the stream is not running there (it ended: its source
	// crashed, say). The workflow restarts the stream and runs the activity
	// again at once, instead of letting the activity's retries wait for a
	// stream that will not come back by itself.
	ErrTypeNoStream = "NoStream"
	// ErrTypeFailedOver: a side of the move failed over (its slot is
	// missing or lost, or its timeline or system id changed): changes may
	// be missing on the target, which no retry or resume brings back. The
	// move recovers by itself from a source failover in SNAPSHOT_COPY,
	// CDC_CATCH_UP or VERIFY (RecoverSource, then Repair), and from a
	// failover of the new owner under GRACE's reverse stream or a
	// rollback's drain of it (RecoverReverse, then a reverse Repair);
	// elsewhere it stops for the operator with that said.
	ErrTypeFailedOver = "FailedOver"
	// ErrTypeFiringTrigger: a trigger or rule of the application that fires
	// for reshard's writes (ENABLE ALWAYS or REPLICA) appeared on a shard a
	// phase writes to after PLAN; the phase stopped before writing. The move
	// stops for the operator, in CUTOVER and GRACE too, naming the trigger
	// and the statement that fixes it; resume runs the phase again.
	ErrTypeFiringTrigger = "FiringTrigger"
	// ErrTypeWrongCluster: the activity was sent to a worker of another
	// cluster (its control database's id is not the request's Cluster):
	// two clusters' workers poll one task queue. The worker touched
	// nothing.
	ErrTypeWrongCluster = "WrongCluster"
)

// PlanResult is the plan of a migration: the moves, grouped by (source,
// target) pair, with the estimates of their preflight.
type PlanResult struct {
	FromVersion   int64         `json:"from_version"`
	Moves         []MoveSpec    `json:"moves"`
	MovedFraction float64       `json:"moved_fraction"`
	EstRows       int64         `json:"est_rows"`
	EstBytes      int64         `json:"est_bytes"`
	ETA           time.Duration `json:"eta"`
	Warnings      []string      `json:"warnings,omitempty"`
}

// PublishInput asks for the topology of the migration's start (migrating
// ranges) or end (stable ranges).
type PublishInput struct {
	Request     MigrationRequest `json:"request"`
	FromVersion int64            `json:"from_version"`
	Moves       []MoveSpec       `json:"moves"`
	// RolledBack lists the moves that were rolled back (PublishStable):
	// their ranges stay with the old owner.
	RolledBack []string `json:"rolled_back,omitempty"`
}

// MoveRef identifies a move to its activities.
type MoveRef struct {
	MigrationID string        `json:"migration_id"`
	Spec        MoveSpec      `json:"spec"`
	Tables      keyspace.Spec `json:"tables"`
	// FromVersion and Request let the activities compute the rings of the
	// migration (the pre-migration ring: topology FromVersion; the target
	// ring: the planner over it) instead of carrying them in payloads.
	FromVersion int64             `json:"from_version,omitempty"`
	Request     *MigrationRequest `json:"request,omitempty"`
	// Source is the source server the move's slot was created on
	// (JOINING's JoinResult.Source): every activity that holds a position
	// on the source compares the server with it (nil: a move joined before
	// it was recorded; nothing to compare).
	Source *SourceIdentity `json:"source_identity,omitempty"`
	// Reverse is the new owner's server the GRACE reverse slot was created
	// on (PrepareReverse's JoinResult.Source, RecoverReverse's): the
	// reverse stream, a rollback's drain and a reverse repair compare the
	// new owner with it (nil: not recorded; nothing to compare).
	Reverse *SourceIdentity `json:"reverse_identity,omitempty"`
	// Target is the target server as JOINING found it, or as a copy slice
	// or the stream last found it (L0 empty): a worker that did not see
	// the move before (a fresh one) compares the target with it, so that
	// a failover while no worker watched is reported too (nil: not
	// recorded; the worker's first look is its record).
	Target *SourceIdentity `json:"target_identity,omitempty"`
	// Stream names the forward stream (RunCDC) the move's workflow last
	// started, which a phase activity in its session works next to: a
	// phase activity whose stream ended in its worker returns at once
	// instead of waiting for a stream only the workflow starts again.
	Stream string `json:"stream,omitempty"`
	// RecreateReverse asks PrepareReverse to drop the reverse slot, if an
	// earlier attempt made it, and create it again: a repair wrote the
	// target's moving ranges since (without the forward applier's origin, so
	// a reverse stream from the old slot would send those rows back). Set
	// only on PrepareReverse's input.
	RecreateReverse bool `json:"recreate_reverse,omitempty"`
}

// SourceIdentity is the server a move's slot and positions belong to: its
// system identifier and timeline (IDENTIFY_SYSTEM) when the slot was
// created, and the slot's consistent point. A promoted standby has the same
// system identifier on a later timeline and, on PostgreSQL 15, no slot.
type SourceIdentity struct {
	SystemID string `json:"system_id"`
	Timeline int32  `json:"timeline"`
	L0       string `json:"l0"`
}

// EndInput ends a move: CLEANUP after GRACE, or a rollback (before the
// cutover, or during GRACE with the reverse stream's L0).
type EndInput struct {
	Move         MoveRef  `json:"move"`
	VerifyRunIDs []string `json:"verify_run_ids,omitempty"`
	// Grace: roll back a cut-over move by the reverse cutover.
	Grace     bool          `json:"grace,omitempty"`
	ReverseL0 string        `json:"reverse_l0,omitempty"`
	Budget    time.Duration `json:"budget,omitempty"`
	// Adaptive limits of CLEANUP's and a rollback's deletes (nil: not
	// adaptive) and, for CLEANUP, the copy's baselines.
	Adaptive *AdaptiveThrottle `json:"adaptive,omitempty"`
	Baseline *AdaptiveStatus   `json:"baseline,omitempty"`
}

// JoinResult is what JOINING (and PrepareReverse) records: the slot's
// consistent point L0 and the server it was created on (the source; the
// new owner for the reverse slot).
type JoinResult struct {
	L0     string          `json:"l0"`
	Source *SourceIdentity `json:"source,omitempty"`
	// Target is the target server (JOINING): MoveRef.Target.
	Target *SourceIdentity `json:"target,omitempty"`
}

// CopySliceInput is one bounded slice of SNAPSHOT_COPY.
type CopySliceInput struct {
	Move      MoveRef       `json:"move"`
	ChunkRows int           `json:"chunk_rows"`
	Throttle  Throttle      `json:"throttle"`
	MaxTime   time.Duration `json:"max_time"`
	// Adaptive is where the last slice's adaptive throttle stopped (its
	// baselines and rate), so that a slice does not measure again and start
	// slow; nil: the first slice.
	Adaptive *AdaptiveStatus `json:"adaptive,omitempty"`
	// StreamDuringCopy: the copy runs beside the move's stream
	// (backfill.Options.StreamDuringCopy) and ends its slice between two
	// chunks, so that the stream holds nothing while no slice runs.
	StreamDuringCopy bool `json:"stream_during_copy,omitempty"`
}

// CopyProgress is the copy's position after a slice, read from the
// checkpoints on the target (all runs included).
type CopyProgress struct {
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"` // this slice's bytes
	Done  bool  `json:"done"`
	Units int   `json:"units"`
	Left  int   `json:"units_left"`
	// Adaptive: the slice's adaptive throttle at its end (nil: none).
	Adaptive *AdaptiveStatus `json:"adaptive,omitempty"`
	// CopyEnd is when the copy should end at the slice's recent rate
	// (zero: no estimate, or done).
	CopyEnd time.Time `json:"copy_end,omitzero"`
	// Failover is the target's failover the slice found before it
	// copied ("" none): MoveState.Failover.
	Failover string `json:"failover,omitempty"`
	// Target is the target server the slice copied to: MoveRef.Target.
	Target *SourceIdentity `json:"target,omitempty"`
}

// CDCInput starts a move's stream: forward (source → target, from L0) or
// reverse (GRACE: target → source, from the reverse slot's L0).
type CDCInput struct {
	Move    MoveRef `json:"move"`
	L0      string  `json:"l0"`
	Reverse bool    `json:"reverse,omitempty"`
	// Phase is the move's phase when the stream starts: the label of
	// reshard_failovers_total when this stream finds a failover.
	Phase Phase `json:"phase,omitempty"`
	// CopyGate: the stream runs beside the move's copy and gates its
	// changes by the copy's progress (cdc.Options.CopyGate).
	CopyGate bool `json:"copy_gate,omitempty"`
}

// CDCStatus is the forward stream's position, from the stream running in the
// session.
type CDCStatus struct {
	Received string `json:"received"`
	Applied  string `json:"applied"`
	LagBytes int64  `json:"lag_bytes"`
	// Failover is the failover of the target the stream found when it
	// started ("" if none): MoveState.Failover.
	Failover string `json:"failover,omitempty"`
	// Target is the target server the stream applies to: MoveRef.Target.
	Target *SourceIdentity `json:"target,omitempty"`
}

// VerifyInput is one verification run of a move.
type VerifyInput struct {
	Move  MoveRef `json:"move"`
	RunID string  `json:"run_id"`
	// Recheck: the run's verified chunks are older than changes made since
	// (a cutover attempt was aborted after the run passed): compare again
	// the chunks those changes touched, at a point a long transaction on
	// the source does not hold up (verify.Options.Recheck).
	Recheck bool `json:"recheck,omitempty"`
	// RowsPerSec throttles the rows read per side (0 = unlimited).
	RowsPerSec float64 `json:"rows_per_sec"`
	// Adaptive limits and the copy's baselines (nil: not adaptive).
	Adaptive *AdaptiveThrottle `json:"adaptive,omitempty"`
	Baseline *AdaptiveStatus   `json:"baseline,omitempty"`
	// EstRows is how many rows the verify expects to compare per side: the
	// rows the copy wrote (0: the plan's estimate). Its progress and ETA are
	// reckoned against it.
	EstRows int64 `json:"est_rows,omitempty"`
}

// HeartbeatWaiting, in the heartbeat's map of a stream or a verify: why it
// waits for the shards' schemas to agree (reshard status shows it).
const HeartbeatWaiting = "waiting"

// HeartbeatLagBytes is the forward or reverse stream's lag in its heartbeat
// (a map of strings; the figure reshard_cdc_lag_bytes shows): status shows
// it while the stream runs, where the workflow's own figure is from the
// last time it asked (CDC_CATCH_UP).
const HeartbeatLagBytes = "lag_bytes"

// HeartbeatGateSkipped and HeartbeatGateHeld are, in the heartbeat of a
// forward stream beside its copy (CDCInput.CopyGate), the changes the copy
// gate skipped (the copy reads them) and held (until their chunk commits)
// so far (cdc.GateStats).
const (
	HeartbeatGateSkipped = "gate_skipped"
	HeartbeatGateHeld    = "gate_held"
)

// The first heartbeat detail of a verify is a map of these keys (and
// "chunks", the chunks compared by this attempt, as before them): status
// shows them as the verify's progress bar and ETA.
const (
	// HeartbeatVerifyRows are the rows compared so far per side (chunks
	// accepted from an earlier attempt included), HeartbeatVerifyEstRows
	// what it expects in all.
	HeartbeatVerifyRows    = "verify_rows"
	HeartbeatVerifyEstRows = "verify_est_rows"
	// HeartbeatVerifyChunksDone and HeartbeatVerifyChunks: chunks done
	// (accepted ones included) of the run's plan (0 until planned).
	HeartbeatVerifyChunksDone = "verify_chunks_done"
	HeartbeatVerifyChunks     = "verify_chunks"
	// HeartbeatVerifyEndMillis is when the verify should end at its rate so
	// far, in Unix milliseconds (-1: no estimate yet).
	HeartbeatVerifyEndMillis = "verify_end_ms"
)

// The heartbeat of a copy slice is a map of these keys to the rows and bytes
// the slice has committed so far; status adds them to the move's count.
const (
	HeartbeatSliceRows  = "slice_rows"
	HeartbeatSliceBytes = "slice_bytes"
	// HeartbeatCopyEndMillis is when the copy should end at its recent
	// rate, in Unix milliseconds (-1: no estimate yet). An instant, not a
	// time left: the reader subtracts its own clock, so a heartbeat read a
	// while after it was recorded shows no older figure.
	HeartbeatCopyEndMillis = "copy_end_ms"
	// HeartbeatETAMillis is the time left at the heartbeat's own time (-1:
	// no estimate yet), for readers older than HeartbeatCopyEndMillis.
	HeartbeatETAMillis = "eta_ms"
)

// HeartbeatFailover is the key, in the heartbeat of a stream (RunCDC,
// RunReverse: a map of strings), of the failover that stream found when
// it started; reshard status shows it as the move's Failover.
const HeartbeatFailover = "failover"

// The second detail of the heartbeat of a copy slice, a verify and a
// cleanup is an *AdaptiveStatus (nil without an adaptive throttle): status
// shows it as the move's throttle now.

// CutoverInput is one cutover attempt.
type CutoverInput struct {
	Move   MoveRef       `json:"move"`
	Budget time.Duration `json:"budget"`
}

// CutoverResult is a completed cutover; an aborted attempt returns it as
// the details of its ErrTypeCutoverAborted error (Pauses only).
type CutoverResult struct {
	// WritePause is the pause of the attempt that succeeded.
	WritePause time.Duration `json:"write_pause"`
	Version    int64         `json:"version"`
	// Pauses counts every attempt of the move so far (from its journal).
	Pauses WritePauses `json:"pauses"`
	// PauseSteps is where the write pause of the attempt that succeeded went.
	PauseSteps []PauseStep `json:"pause_steps,omitempty"`
	// Failover is the target's failover the move's stream found ("" none):
	// MoveState.Failover.
	Failover string `json:"failover,omitempty"`
}

// PauseStep is how long one cutover step took inside the write pause
// (cutover.Step names; "journal" is the control database's records between
// the steps).
type PauseStep struct {
	Step     string        `json:"step"`
	Duration time.Duration `json:"duration"`
}

// PauseStepsText is "drain 80ms, publish 10ms, ...", the steps in order
// ("" for none).
func PauseStepsText(steps []PauseStep) string {
	parts := make([]string, 0, len(steps))
	for _, s := range steps {
		parts = append(parts, fmt.Sprintf("%s %s", s.Step, s.Duration.Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// WritePauses is what a move's cutover attempts have cost the application:
// every interval during which its ranges were fenced on the source and not
// yet writable on the target, aborted attempts included.
type WritePauses struct {
	Total   time.Duration `json:"total"`
	Longest time.Duration `json:"longest"`
	// Attempts that fenced the source.
	Attempts int `json:"fenced_attempts"`
}

// CleanupResult is what CLEANUP (or a rollback) deleted.
type CleanupResult struct {
	RowsDeleted int64 `json:"rows_deleted"`
	// Version is the topology version a rollback's reverse cutover
	// published (0: none).
	Version int64 `json:"version,omitempty"`
}

// RecoverSourceResult is the move's slot created again on the source's new
// primary after a failover: its consistent point L0 (the stream starts
// there) and the server, which every later activity compares with.
type RecoverSourceResult struct {
	L0     string          `json:"l0"`
	Source *SourceIdentity `json:"source"`
}

// RepairInput repairs a move's target from its source (verify.Repair), its
// stream stopped.
type RepairInput struct {
	Move MoveRef `json:"move"`
	// Reverse repairs the old owner from the new owner (GRACE, after the
	// new owner failed over under the reverse stream): the new owner is
	// the truth for the reverse direction.
	Reverse bool `json:"reverse,omitempty"`
	// Phase is the move's (for reshard_failovers_total, should the repair
	// find the source failed over again).
	Phase Phase `json:"phase,omitempty"`
}

// RepairResult is what a repair compared and rewrote.
type RepairResult struct {
	Chunks      int   `json:"chunks"`
	Repaired    int   `json:"repaired"`
	RowsCopied  int64 `json:"rows_copied"`
	RowsDeleted int64 `json:"rows_deleted"`
}

// Owner is the migration an activity input belongs to and the cluster its
// request names ("" for a request of a reshard from before cluster ids):
// every activity's input has it, and the activities' cluster guard reads
// it before touching anything.
func (r MigrationRequest) Owner() (migration, cluster string) { return r.ID, r.Cluster }

// Owner: the request's (MigrationRequest.Owner).
func (in PublishInput) Owner() (migration, cluster string) { return in.Request.Owner() }

// Owner: the migration's id, and the cluster of the request the ref
// carries ("" without one).
func (m MoveRef) Owner() (migration, cluster string) {
	if m.Request == nil {
		return m.MigrationID, ""
	}
	return m.MigrationID, m.Request.Cluster
}

// Owner of the phase inputs: their move's (MoveRef.Owner).
func (in CopySliceInput) Owner() (migration, cluster string) { return in.Move.Owner() }
func (in CDCInput) Owner() (migration, cluster string)       { return in.Move.Owner() }
func (in VerifyInput) Owner() (migration, cluster string)    { return in.Move.Owner() }
func (in CutoverInput) Owner() (migration, cluster string)   { return in.Move.Owner() }
func (in EndInput) Owner() (migration, cluster string)       { return in.Move.Owner() }
func (in RepairInput) Owner() (migration, cluster string)    { return in.Move.Owner() }
