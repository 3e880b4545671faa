package workflows

import (
	"fmt"
	"strings"
	"time"

	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
)

// The names below are the contract between the workflows, the worker and the
// CLI. Inputs and states carry shard NAMES only: DSNs (and their passwords)
// are resolved on the worker from its own configuration.
const (
	// TaskQueue is the task queue of the reshard worker.
	TaskQueue = "reshard"

	MigrationWorkflow = "Migration"
	MoveWorkflow      = "Move"

	// QueryState returns a MigrationState (parent) or a MoveState (child).
	QueryState = "state"
	// QueryThrottle returns the Throttle a move's work runs under now (the
	// Move workflow): a running verify, CLEANUP or rollback asks it, and so
	// takes a throttle change while it runs.
	QueryThrottle = "throttle-in-force"

	UpdatePause    = "pause"           // no args
	UpdateResume   = "resume"          // no args
	UpdateThrottle = "throttle"        // Throttle
	UpdateApprove  = "approve-cutover" // no args; only with RequireApproval, in VERIFY (passed) or CUTOVER
	UpdateRollback = "rollback"        // no args; any phase before CLEANUP
	UpdateComplete = "complete"        // no args; ends GRACE early
	UpdateReverify = "reverify"        // no args; after a failed verify
)

// MigrationWorkflowID is the workflow id of a migration.
func MigrationWorkflowID(id string) string { return "reshard-" + id }

// MoveWorkflowID is the workflow id of a move: its migration's workflow id,
// "/" and the move id.
func MoveWorkflowID(migrationWorkflowID, moveID string) string {
	return migrationWorkflowID + "/" + moveID
}

// Kind is what a migration does to the ring.
type Kind string

const (
	KindAddNode    Kind = "add-node"
	KindSplit      Kind = "split"
	KindRemoveNode Kind = "remove-node"
	KindMove       Kind = "move"
	KindRebalance  Kind = "rebalance"
)

// Throttle limits copy (and verify) speed; 0 means unlimited.
type Throttle struct {
	RowsPerSec  float64 `json:"rows_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	// ChunkRows, when positive, replaces the migration's copy chunk size
	// (MigrationRequest.ChunkRows) from the next chunk on; 0 keeps it.
	ChunkRows int `json:"chunk_rows,omitempty"`
	// Adaptive, when set, lowers the rows/s of copy, verify and cleanup
	// while the shards are under pressure. In a throttle update, nil keeps
	// the adaptive limits in force.
	Adaptive *AdaptiveThrottle `json:"adaptive,omitempty"`
	// KeepRates: a throttle update that changes the adaptive limits only
	// (the rates and chunk size stay as they are).
	KeepRates bool `json:"keep_rates,omitempty"`
}

// AdaptiveThrottle are the operator's targets for the adaptive throttle
// (backfill.Controller): the rows/s go up while every watched signal is
// below its limit, and down when one is over it. Zero: not watched. A
// throttled move never fails for it; it gets slow (down to
// backfill.DefaultMinRate rows/s).
type AdaptiveThrottle struct {
	// MaxLatencyIncrease is the percentage the probe query's latency may
	// rise over its baseline, measured on each shard before the copy.
	MaxLatencyIncrease float64 `json:"max_latency_increase,omitempty"`
	// MaxProbeLatency is a ceiling on the probe's latency.
	MaxProbeLatency time.Duration `json:"max_probe_latency,omitempty"`
	// MaxReplicaLag bounds the replay lag of the shards' physical replicas
	// (pg_stat_replication).
	MaxReplicaLag time.Duration `json:"max_replica_lag,omitempty"`
	// MaxSlotWAL bounds the WAL the move's slot retains on the source.
	MaxSlotWAL int64 `json:"max_slot_wal,omitempty"`
	// MaxActiveBackends bounds the source's client backends running a
	// statement (reshard's own not counted).
	MaxActiveBackends int `json:"max_active_backends,omitempty"`
	// ProbeQuery is the probe (default SELECT 1): a query like the
	// application's tracks its latency best.
	ProbeQuery string `json:"probe_query,omitempty"`
}

// Enabled reports whether any limit is set.
func (a *AdaptiveThrottle) Enabled() bool {
	return a != nil && (a.MaxLatencyIncrease > 0 || a.MaxProbeLatency > 0 || a.MaxReplicaLag > 0 || a.MaxSlotWAL > 0 || a.MaxActiveBackends > 0)
}

// AdaptiveStatus is what a move's adaptive throttle does: its rate, the
// signal that holds it back, and the probe baselines (measured before the
// copy; verify and cleanup compare against them too).
type AdaptiveStatus struct {
	RowsPerSec float64 `json:"rows_per_sec"`
	// Signal names the limiting signal (backfill.Signal*; "none"), Reason
	// says it in words: "source probe latency +14% (…) > +10%".
	Signal         string        `json:"signal,omitempty"`
	Reason         string        `json:"reason,omitempty"`
	SourceBaseline time.Duration `json:"source_baseline,omitempty"`
	TargetBaseline time.Duration `json:"target_baseline,omitempty"`
	// SourceNoise and TargetNoise are the baselines' own spread: a reading
	// within it is not taken for load (backfill.Controller).
	SourceNoise time.Duration `json:"source_noise,omitempty"`
	TargetNoise time.Duration `json:"target_noise,omitempty"`
	// BaselineAt is when the baselines were measured (they are measured
	// again every activities.Rebaseline, the work held meanwhile).
	BaselineAt time.Time `json:"baseline_at,omitzero"`
}

// Text is how the adaptive throttle is shown everywhere (status, --json's
// phase text, the Temporal UI's details): "throttled: <reason>, N rows/s",
// or "adaptive: N rows/s" while nothing holds it back.
func (a *AdaptiveStatus) Text() string {
	if a == nil || a.RowsPerSec <= 0 {
		return ""
	}
	if a.Signal == "" || a.Signal == "none" {
		return fmt.Sprintf("adaptive: %.0f rows/s", a.RowsPerSec)
	}
	return fmt.Sprintf("throttled: %s, %.0f rows/s", a.Reason, a.RowsPerSec)
}

// OnVerifyFail says what a failed verify does: wait for an operator's
// rollback or reverify (default), or roll back by itself.
type OnVerifyFail string

const (
	VerifyFailWait     OnVerifyFail = "wait"
	VerifyFailRollback OnVerifyFail = "rollback"
)

// ReadFrom says which server of a source shard the copy and verify read
// its rows from; the move's slot and stream stay on the primary.
type ReadFrom string

const (
	// ReadFromPrimary (or ""): the source's primary.
	ReadFromPrimary ReadFrom = "primary"
	// ReadFromStandby: the source's streaming standby (the worker
	// configuration's shards.<name>.standby), sparing the primary.
	ReadFromStandby ReadFrom = "standby"
)

// DefaultGracePeriod is the GRACE period of a request that sets none.
const DefaultGracePeriod = time.Hour

// MigrationRequest is the input of the Migration workflow.
type MigrationRequest struct {
	ID   string `json:"id"`
	Kind Kind   `json:"kind"`
	// Cluster is the id of the cluster the migration belongs to (its
	// control database's, topology.ClusterID), set by whoever starts it:
	// a worker runs the migration's activities only when its own control
	// database has this id. "": started before cluster ids (a worker runs
	// its activities only when its control database holds its plan).
	Cluster string `json:"cluster,omitempty"`
	// Shard is the new shard (add-node), the shard split (split) or the
	// shard retired (remove-node).
	Shard string `json:"shard,omitempty"`
	// Into is the new shard that takes half of Shard (split).
	Into string `json:"into,omitempty"`
	// Range and To describe a manual move.
	Range *ring.Range `json:"range,omitempty"`
	To    string      `json:"to,omitempty"`
	// Add, Remove and Weights are a rebalance's wanted end state (one plan,
	// ring.PlanRebalance): shards added, shards removed, new weights.
	Add     []string           `json:"add,omitempty"`
	Remove  []string           `json:"remove,omitempty"`
	Weights map[string]float64 `json:"weights,omitempty"`

	// Keyspace names the keyspace whose ring the migration changes ("":
	// the default keyspace, as before keyspaces).
	Keyspace string `json:"keyspace,omitempty"`
	// Tables is the table set that moves together: every table of the
	// keyspace.
	Tables keyspace.Spec `json:"tables"`

	// Ring allocation for new vnodes.
	VNodes int    `json:"vnodes,omitempty"`
	Tokens string `json:"tokens,omitempty"` // "balanced" (default) or "hash"

	Throttle        Throttle     `json:"throttle"`
	ChunkRows       int          `json:"chunk_rows,omitempty"`
	RequireApproval bool         `json:"require_approval,omitempty"`
	OnVerifyFail    OnVerifyFail `json:"on_verify_fail,omitempty"`
	// ReadFrom: where the copy and verify read the source's rows ("":
	// the primary).
	ReadFrom ReadFrom `json:"read_from,omitempty"`
	// StreamDuringCopy starts each move's forward stream at the start of
	// SNAPSHOT_COPY, behind the copy gate (cdc.Options.CopyGate), and
	// copies beside it (backfill.Options.StreamDuringCopy): the source's
	// slot then retains about the stream's lag of WAL, not the whole
	// copy's. Integer and uuid primary keys only (PLAN refuses others);
	// not with ReadFrom standby. It is the decision the workflow reads: a
	// request from the CLI without --stream-during-copy (StreamAuto) has
	// it resolved there, before the workflow starts; a request stored
	// before the default became "where allowed" has it false (off).
	StreamDuringCopy bool `json:"stream_during_copy,omitempty"`
	// StreamAuto: StreamDuringCopy was not given, so it is on where the
	// keyspace allows it (plan.CheckOptions.StreamAuto resolves it: every
	// table with an integer or uuid primary key, and no ReadFrom
	// standby); StreamAfterCopy then says why it is off, when it is.
	StreamAuto      bool   `json:"stream_auto,omitempty"`
	StreamAfterCopy string `json:"stream_after_copy,omitempty"`
	// GracePeriod is how long GRACE keeps the old owner current by reverse
	// CDC before CLEANUP: nil is DefaultGracePeriod, 0 cleans up right
	// after the cutover (no rollback after it). A pointer because 0 is a
	// choice; requests recorded before it was one omitted a 0, which
	// still reads as unset.
	GracePeriod   *time.Duration `json:"grace_period,omitempty"`
	CutoverBudget time.Duration  `json:"cutover_budget,omitempty"` // write-pause budget, default 2s
	MaxLagBytes   int64          `json:"max_lag_bytes,omitempty"`  // CDC_CATCH_UP → VERIFY gate
	// VerifyChunkRows is the target number of moving rows per verify chunk.
	VerifyChunkRows int `json:"verify_chunk_rows,omitempty"`
	// MaxParallelMoves bounds how many moves run at once, MaxMovesPerShard
	// how many a shard takes part in at once (as source or target); the
	// others wait in PLAN (Waiting WaitSlot) and start as moves end. 0: no
	// bound.
	MaxParallelMoves int `json:"max_parallel_moves,omitempty"`
	MaxMovesPerShard int `json:"max_moves_per_shard,omitempty"`

	// DryRun stops after PLAN: the workflow returns the plan and its
	// estimates and changes nothing.
	DryRun bool `json:"dry_run,omitempty"`

	// Timing knobs, defaults for production; tests shorten them.
	// CopySlice bounds one copy activity call (default 20s).
	CopySlice time.Duration `json:"copy_slice,omitempty"`
	// HeartbeatTimeout of the long activities and of the CDC session
	// (default 30s): how soon a dead worker's work moves elsewhere.
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
	// PollInterval of CDC_CATCH_UP (default 5s).
	PollInterval time.Duration `json:"poll_interval,omitempty"`
	// CutoverBackoff is the wait after an aborted cutover (default 30s).
	CutoverBackoff time.Duration `json:"cutover_backoff,omitempty"`

	// Resume is set by the workflow itself when a run continues as new
	// (migration.go, movesPerRun); nil when a migration starts.
	Resume *MigrationResume `json:"resume,omitempty"`
}

// StreamText says in one line when the request's moves stream: during
// the copy or after it, and, when the default chose after, why.
func (r MigrationRequest) StreamText() string {
	switch {
	case r.StreamDuringCopy && r.StreamAuto:
		return "stream during the copy (the default where the keyspace allows it)"
	case r.StreamDuringCopy:
		return "stream during the copy (--stream-during-copy)"
	case r.StreamAfterCopy != "":
		return "stream after the copy: " + r.StreamAfterCopy
	}
	return "stream after the copy"
}

// Grace is the request's grace period: DefaultGracePeriod when unset.
func (r MigrationRequest) Grace() time.Duration {
	if r.GracePeriod == nil {
		return DefaultGracePeriod
	}
	return *r.GracePeriod
}

// ORDERING RULE (DESIGN.md §4.3–4.4): the CDC applier of a move starts only
// after its SNAPSHOT_COPY has finished. The slot (created in JOINING, before
// the copy) retains every change meanwhile. Applying CDC while the copy runs
// can resurrect a deleted row: copy reads K, the source deletes K, CDC applies
// the delete (K not there yet), then the copy writes K. Sequential copy → CDC
// replays every change after L0 over the copied rows, so each row ends at its
// last write.

// MoveSpec is one move: ranges going from one source shard to one target,
// with exactly one logical replication slot on the source.
type MoveSpec struct {
	ID       string       `json:"id"`
	Source   string       `json:"source"`
	Target   string       `json:"target"`
	Ranges   []ring.Range `json:"ranges"`
	EstRows  int64        `json:"est_rows"`
	EstBytes int64        `json:"est_bytes"`
	// EstTables splits the estimate by table (none in a plan made before
	// it): the copy's ETA weighs each table's rows by their width.
	EstTables []TableEstimate `json:"est_tables,omitempty"`
	// Predicted is what the capacity model predicted for the move when it
	// was planned (nil: planned without): status sets it against what the
	// move takes.
	Predicted *Predicted `json:"predicted,omitempty"`
}

// Predicted is a move's predicted cost (the capacity model's figures).
type Predicted struct {
	Copy    time.Duration `json:"copy"`
	CatchUp time.Duration `json:"catch_up"` // negative: the catch-up was predicted never to converge
	Verify  time.Duration `json:"verify"`
	// SlotWALBytes is the WAL the move's slot was predicted to retain when
	// its stream starts; TargetGrowthBytes what the target gains.
	SlotWALBytes      int64 `json:"slot_wal_bytes"`
	TargetGrowthBytes int64 `json:"target_growth_bytes"`
}

// TableEstimate is one table's share of a move's estimate.
type TableEstimate struct {
	Table string `json:"table"` // schema.name, as the copy's checkpoints name it
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
}

// PhaseTiming is when a phase started and ended (End zero while in it).
type PhaseTiming struct {
	Phase Phase     `json:"phase"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end,omitempty"`
}

// VerifySummary is the outcome of the last verify of a move.
type VerifySummary struct {
	Passed bool  `json:"passed"`
	Rows   int64 `json:"rows"` // compared by this verify
	// ReusedRows were accepted from an earlier attempt of the same verify
	// run (a worker died in it, or a cutover aborted after it), verified
	// then at an earlier LSN and not compared again.
	ReusedRows int64 `json:"reused_rows,omitempty"`
	// ReusedLSN and ReusedAt: the oldest reused chunk's position and time.
	ReusedLSN  string    `json:"reused_lsn,omitempty"`
	ReusedAt   time.Time `json:"reused_at,omitzero"`
	Mismatches int64     `json:"mismatches"`
	Samples    []string  `json:"samples,omitempty"` // "missing users id=42"
	RowsPerSec float64   `json:"rows_per_sec"`
	// Problem: why it failed although no row differs (it compared nothing
	// of a non-empty range).
	Problem string `json:"problem,omitempty"`
}

// Text is how a verify result is shown everywhere (status, the Temporal
// UI's details): what was compared, what was reused from an earlier attempt
// and how old that is, or why it failed.
func (v VerifySummary) Text(now time.Time) string {
	switch {
	case !v.Passed && v.Problem != "":
		return "FAILED: " + v.Problem
	case !v.Passed:
		s := fmt.Sprintf("FAILED: %d mismatch(es)", v.Mismatches)
		if len(v.Samples) > 0 {
			s += " e.g. " + strings.Join(v.Samples[:min(3, len(v.Samples))], "; ")
		}
		return s
	case v.ReusedRows > 0:
		return fmt.Sprintf("passed (%d rows compared, %d reused from an earlier attempt at LSN %s, %s ago)",
			v.Rows, v.ReusedRows, v.ReusedLSN, now.Sub(v.ReusedAt).Round(time.Second))
	}
	return fmt.Sprintf("passed (%d rows)", v.Rows)
}

// Short is the verify result in a few words, for a table cell: "passed",
// "FAILED: 3 mismatch(es)", "FAILED" (Text says why).
func (v VerifySummary) Short() string {
	switch {
	case v.Passed:
		return fmt.Sprintf("passed (%d rows)", v.Rows+v.ReusedRows)
	case v.Problem != "":
		return "FAILED"
	}
	return fmt.Sprintf("FAILED: %d mismatch(es)", v.Mismatches)
}

// VerifyProgress is how far a running verify is: rows compared of those
// expected, chunks done of its plan, and when it should end. The worker
// reports it in the verify's heartbeat; reshard status reads it there.
type VerifyProgress struct {
	Rows        int64     `json:"rows"`
	EstRows     int64     `json:"est_rows"`
	ChunksDone  int64     `json:"chunks_done"`
	Chunks      int64     `json:"chunks"` // 0: not planned yet
	End         time.Time `json:"end,omitzero"`
	HeartbeatAt time.Time `json:"heartbeat_at,omitzero"`
}

// Text is the running verify as status shows it: "running: 3/5 chunks".
func (p *VerifyProgress) Text() string {
	if p == nil {
		return ""
	}
	if p.Chunks == 0 {
		return "running: planning chunks"
	}
	return fmt.Sprintf("running: %d/%d chunks", p.ChunksDone, p.Chunks)
}

// MoveState is the progress of one move (the Move workflow's state query).
type MoveState struct {
	Spec        MoveSpec       `json:"spec"`
	Phase       Phase          `json:"phase"`
	Paused      bool           `json:"paused"`
	RowsCopied  int64          `json:"rows_copied"`
	BytesCopied int64          `json:"bytes_copied"`
	CopyDone    bool           `json:"copy_done"`
	LagBytes    int64          `json:"lag_bytes"`
	Verify      *VerifySummary `json:"verify,omitempty"`
	// WritePause is the pause of the cutover attempt that succeeded;
	// Pauses sums every attempt's, aborted ones included.
	WritePause time.Duration `json:"write_pause"`
	// PauseSteps is where that pause went, step by step.
	PauseSteps []PauseStep   `json:"pause_steps,omitempty"`
	Pauses     WritePauses   `json:"write_pauses"`
	Attempts   int           `json:"cutover_attempts"`
	Timings    []PhaseTiming `json:"timings"`
	Error      string        `json:"error,omitempty"`
	// Stopped: an error no retry fixes stopped the move in its phase (Error
	// says which and what to do); resume runs the phase again, rollback
	// undoes the move.
	Stopped bool `json:"stopped,omitempty"`
	// Waiting names the operator action the move waits for, if any:
	// WaitApproval (CUTOVER before its first attempt, with
	// --require-approval) or WaitVerdict (a failed verify: reverify or
	// rollback).
	Waiting string `json:"waiting,omitempty"`
	// GraceUntil is when GRACE ends by itself (zero outside GRACE).
	GraceUntil time.Time `json:"grace_until,omitzero"`
	UpdatedAt  time.Time `json:"updated_at"`
	// Retrying is filled by reshard status, not by the workflow: the
	// activities of the move being retried and their last failure (a shard
	// down, a password changed), which the workflow itself cannot see.
	Retrying string `json:"retrying,omitempty"`
	// CopyEnd is when the copy should end at its recent rate (zero: no
	// estimate): the last slice's estimate, which reshard status replaces
	// with the running slice's from its last heartbeat. ETAText shows it.
	CopyEnd time.Time `json:"copy_end,omitzero"`
	// Adaptive is the adaptive throttle of the copy as its last slice left
	// it; reshard status replaces it with the running activity's (copy,
	// verify or cleanup), from its heartbeat.
	Adaptive *AdaptiveStatus `json:"adaptive,omitempty"`
	// Failover is the last failover of a shard the move holds that its
	// activities found ("target shard5 failed over at T (timeline 1 → 2):
	// resumed from …"): recorded by the move from a copy slice's result,
	// its catch-up's lag poll or its cutover's result; filled by reshard
	// status from the running
	// stream's heartbeat while the stream that found it runs. PhaseText
	// shows it.
	Failover string `json:"failover,omitempty"`
	// LagAt is when LagBytes was measured (status: the stream's last
	// heartbeat).
	LagAt time.Time `json:"lag_at,omitzero"`
	// Version is the topology version the move's cutover published, or its
	// reverse cutover in a rollback (0: none yet).
	Version int64 `json:"version,omitempty"`
	// VerifyProgress is filled by reshard status, not by the workflow: the
	// running verify's progress, from its heartbeat (nil: none running).
	VerifyProgress *VerifyProgress `json:"verify_progress,omitempty"`
	// Failovers are the failovers the move met and recovered from (or is
	// recovering from), oldest first.
	Failovers []FailoverEvent `json:"failovers,omitempty"`
	// StreamDuringCopy: the forward stream runs beside the copy through
	// the copy gate (MigrationRequest.StreamDuringCopy); false again once
	// a source failover in the copy moved the stream after it.
	StreamDuringCopy bool `json:"stream_during_copy,omitempty"`
}

// What a move waits for (MoveState.Waiting).
const (
	WaitApproval = "approval"
	WaitVerdict  = "verdict"
	WaitSlot     = "slot" // queued: --max-parallel-moves or --max-moves-per-shard
)

// PhaseText is how a move's phase is shown everywhere (status, --json, the
// Temporal UI's details): the phase and what it is doing or waiting for —
// paused, waiting for approval (not counted as cutover work: nothing is
// fenced meanwhile), waiting for a verdict on a failed verify, GRACE until
// when.
func (m MoveState) PhaseText() string {
	s := string(m.Phase)
	var sub []string
	if m.Paused {
		sub = append(sub, "paused")
	}
	switch m.Waiting {
	case WaitApproval:
		sub = append(sub, "waiting for approval: reshard approve")
	case WaitVerdict:
		sub = append(sub, "waiting for reshard reverify or rollback")
	case WaitSlot:
		sub = append(sub, "queued: waiting for a move slot")
	}
	if t := m.Adaptive.Text(); t != "" && adaptivePhase(m.Phase) {
		sub = append(sub, t)
	}
	if m.Phase == PhaseGrace && !m.GraceUntil.IsZero() {
		// No countdown: the text stays the same while nothing changes
		// (status --watch prints a line per change).
		sub = append(sub, fmt.Sprintf("until %s; reshard complete ends it now", m.GraceUntil.UTC().Format(time.RFC3339)))
	}
	if m.Failover != "" {
		sub = append(sub, m.Failover)
	}
	if m.Phase == PhaseSnapshotCopy && m.StreamDuringCopy {
		sub = append(sub, "stream running beside the copy")
	}
	if len(sub) > 0 {
		s += " (" + strings.Join(sub, "; ") + ")"
	}
	return s
}

// adaptivePhase: the phases whose work the adaptive throttle steers.
func adaptivePhase(p Phase) bool {
	return p == PhaseSnapshotCopy || p == PhaseVerify || p == PhaseCleanup
}

// PauseText is how a move's write pause is shown everywhere (status, the
// Temporal UI's details, the demo): the sum over its cutover attempts, with
// their number and the longest when there was more than one; "" when no
// attempt fenced anything yet.
func (m MoveState) PauseText() string {
	r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	p := m.Pauses
	switch {
	case p.Attempts == 0 && m.WritePause > 0: // a move from before pauses were summed
		return r(m.WritePause)
	case p.Attempts == 0:
		return ""
	case p.Attempts == 1:
		return r(p.Total)
	}
	return fmt.Sprintf("%s over %d attempts (longest %s)", r(p.Total), p.Attempts, r(p.Longest))
}

// MigrationState is the progress of a migration (the Migration workflow's
// state query): the plan and every move.
type MigrationState struct {
	Request     MigrationRequest `json:"request"`
	Phase       Phase            `json:"phase"`
	FromVersion int64            `json:"from_version"`
	// Version is the newest topology version the migration or one of its
	// moves published: v+1 marks the ranges migrating, each cutover and
	// reverse cutover publishes one more, and the end one more.
	Version       int64       `json:"version"`
	MovedFraction float64     `json:"moved_fraction"`
	Moves         []MoveState `json:"moves"`
	Error         string      `json:"error,omitempty"`
	// Retrying: as MoveState.Retrying, for the migration's own activities
	// (plan, topology publication).
	Retrying string `json:"retrying,omitempty"`
	// Throttle is the throttle in force when an operator changed it
	// (reshard throttle); nil: the request's.
	Throttle *Throttle `json:"throttle,omitempty"`
}

// Headline is the migration's one-line summary as status, --watch and the
// UI show it: what it does to the topology now, from the current version,
// and how much of the token space moves (moved, or nothing once rolled
// back).
func (s MigrationState) Headline() string {
	if s.FromVersion <= 0 {
		return ""
	}
	topo := fmt.Sprintf("topology v%d", s.FromVersion)
	if s.Version > s.FromVersion {
		topo = fmt.Sprintf("topology v%d → v%d", s.FromVersion, s.Version)
	}
	pct := 100 * s.MovedFraction
	switch s.Phase {
	case PhaseRolledBack:
		if s.Version > s.FromVersion {
			return fmt.Sprintf("rolled back: nothing moved (topology v%d has the ring of v%d)", s.Version, s.FromVersion)
		}
		return fmt.Sprintf("rolled back: nothing moved (topology v%d)", s.FromVersion)
	case PhaseDone:
		return fmt.Sprintf("%s  moved %.2f%% of the token space", topo, pct)
	case PhaseRollingBack:
		return fmt.Sprintf("%s  rolling back %.2f%% of the token space", topo, pct)
	case PhaseFailed:
		return topo
	}
	if pct > 0 {
		return fmt.Sprintf("%s  moving %.2f%% of the token space", topo, pct)
	}
	return topo
}

// Text is a throttle as status, plan and the UI show it: "500 rows/s,
// 1.0 MiB/s, adaptive (…)" or "unlimited".
func (t Throttle) Text() string {
	var parts []string
	if t.RowsPerSec > 0 {
		parts = append(parts, fmt.Sprintf("%g rows/s", t.RowsPerSec))
	}
	if t.BytesPerSec > 0 {
		parts = append(parts, HumanBytes(int64(t.BytesPerSec))+"/s")
	}
	if t.ChunkRows > 0 {
		parts = append(parts, fmt.Sprintf("copy chunks of %d rows", t.ChunkRows))
	}
	if t.Adaptive.Enabled() {
		parts = append(parts, "adaptive ("+t.Adaptive.Text()+")")
	}
	if len(parts) == 0 {
		return "unlimited"
	}
	return strings.Join(parts, ", ")
}

// ThrottleNow is the throttle in force: the operator's last change, else
// the request's.
func (s MigrationState) ThrottleNow() Throttle {
	if s.Throttle != nil {
		return *s.Throttle
	}
	return s.Request.Throttle
}

// HumanBytes is a byte count as people read it: 56 B, 2.0 KiB, 1.5 GiB.
func HumanBytes(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

// LagText is the forward stream's lag as status and the UI show it: while
// the stream runs (catch-up, verify, cutover; during the copy once known),
// else "-" — after the cutover the last figure would only be stale.
func (m MoveState) LagText() string {
	switch m.Phase {
	case PhaseCDCCatchUp, PhaseVerify, PhaseCutover:
		return HumanBytes(m.LagBytes)
	case PhaseSnapshotCopy:
		if m.LagBytes > 0 || m.StreamDuringCopy {
			return HumanBytes(m.LagBytes)
		}
	}
	return "-"
}

// ETAText is the copy's time left as status, the UI and the demo show it:
// the copy's own estimate at its recent rate (CopyEnd, less now: "0s" once
// it is due), else the rate since the copy started, else the throttle; "-"
// outside the copy, "?" when nothing tells.
func (m MoveState) ETAText(t Throttle, now time.Time) string {
	if m.CopyDone || m.Phase.Terminal() {
		return "-"
	}
	if m.Paused {
		return "paused"
	}
	if !m.CopyEnd.IsZero() {
		return max(m.CopyEnd.Sub(now), 0).Round(time.Second).String()
	}
	left := m.Spec.EstRows - m.RowsCopied
	if left <= 0 {
		return "-"
	}
	var start time.Time
	for _, pt := range m.Timings {
		if pt.Phase == PhaseSnapshotCopy {
			start = pt.Start
		}
	}
	at := m.UpdatedAt
	if at.IsZero() {
		at = now
	}
	if !start.IsZero() && m.RowsCopied > 0 && at.After(start) {
		rate := float64(m.RowsCopied) / at.Sub(start).Seconds()
		return (time.Duration(float64(left)/rate) * time.Second).Round(time.Second).String()
	}
	if t.RowsPerSec > 0 {
		return (time.Duration(float64(left)/t.RowsPerSec) * time.Second).Round(time.Second).String()
	}
	return "?"
}

// Text lists the watched limits: "latency +10%, replica lag 2s".
func (a *AdaptiveThrottle) Text() string {
	if !a.Enabled() {
		return "off"
	}
	var parts []string
	if a.MaxLatencyIncrease > 0 {
		parts = append(parts, fmt.Sprintf("probe latency +%g%%", a.MaxLatencyIncrease))
	}
	if a.MaxProbeLatency > 0 {
		parts = append(parts, fmt.Sprintf("probe latency ≤ %s", a.MaxProbeLatency))
	}
	if a.MaxReplicaLag > 0 {
		parts = append(parts, fmt.Sprintf("replica lag ≤ %s", a.MaxReplicaLag))
	}
	if a.MaxSlotWAL > 0 {
		parts = append(parts, fmt.Sprintf("slot WAL ≤ %d MiB", a.MaxSlotWAL>>20))
	}
	if a.MaxActiveBackends > 0 {
		parts = append(parts, fmt.Sprintf("active backends ≤ %d", a.MaxActiveBackends))
	}
	return strings.Join(parts, ", ")
}

// RepairRefusal says why reshard verify --repair may not rewrite this move's
// target now ("": it may). A repair must be the only writer of the moving
// ranges on the target and no cutover may start while it runs, so the move
// must be stopped for the operator (State.Stopped) in SNAPSHOT_COPY,
// CDC_CATCH_UP or VERIFY, or wait for the verdict on a failed verify in
// VERIFY (its stream is stopped then, and only reverify or rollback goes
// on). The caller also checks that no stream reads the move's slot.
func (m MoveState) RepairRefusal() string {
	switch {
	case m.Phase == PhaseVerify && m.Waiting == WaitVerdict:
		return ""
	case m.Stopped && (m.Phase == PhaseSnapshotCopy || m.Phase == PhaseCDCCatchUp || m.Phase == PhaseVerify):
		return ""
	case m.Stopped:
		return fmt.Sprintf("move %s is stopped in %s: a repair runs only in SNAPSHOT_COPY, CDC_CATCH_UP or VERIFY", m.Spec.ID, m.Phase)
	}
	return fmt.Sprintf("move %s is in %s and neither stopped for the operator nor waiting for the verdict on a failed verify: its stream or a cutover may write the target; repair it once reshard status shows it stopped, or after a failed verify", m.Spec.ID, m.Phase)
}

// FailoverEvent is a failover a move met and what its recovery cost, as
// status and the Temporal UI show it ("source shard2 failed over at T
// (timeline 3 → 4): repairing"). A metric of failovers by shard and phase
// counts them from these events.
type FailoverEvent struct {
	Side  string    `json:"side"` // "source" or "target"
	Shard string    `json:"shard"`
	Phase Phase     `json:"phase"`
	At    time.Time `json:"at"`
	// FromTimeline and ToTimeline are the server's timeline before and
	// after (equal: the slot was lost on the same server).
	FromTimeline int32 `json:"from_timeline"`
	ToTimeline   int32 `json:"to_timeline"`
	// Repaired: the repair is done, with these figures.
	Repaired       bool  `json:"repaired"`
	Chunks         int   `json:"chunks"`
	ChunksRepaired int   `json:"chunks_repaired"`
	RowsCopied     int64 `json:"rows_copied"`
	RowsDeleted    int64 `json:"rows_deleted"`
}

// String is the event as an operator reads it.
func (e FailoverEvent) String() string {
	s := fmt.Sprintf("%s %s failed over in %s at %s (timeline %d → %d)", e.Side, e.Shard, e.Phase, e.At.UTC().Format(time.RFC3339), e.FromTimeline, e.ToTimeline)
	if !e.Repaired {
		return s + ": slot created again on the new primary, repair of the moving ranges pending"
	}
	return s + fmt.Sprintf(": repaired %d of %d chunks, %d rows copied, %d deleted", e.ChunksRepaired, e.Chunks, e.RowsCopied, e.RowsDeleted)
}
