package workflows

import (
	"fmt"
	"strings"
	"time"

	"github.com/reshard/reshard/ring"
)

// The defaults of a migration's settings, each written once. The CLI's flag
// defaults, the workflows (WithDefaults) and docs/operations.md ("Settings")
// use these; a test reads all three.
const (
	DefaultVNodes          = 16
	DefaultTokens          = "balanced"
	DefaultCopyChunkRows   = 5000
	DefaultVerifyChunkRows = 50_000
	// DefaultMaxLagBytes gates CDC_CATCH_UP → VERIFY: the move verifies once
	// its CDC lag is at most this.
	DefaultMaxLagBytes      int64 = 8 << 20
	DefaultCutoverBudget          = 2 * time.Second
	DefaultCopySlice              = 20 * time.Second
	DefaultHeartbeatTimeout       = 30 * time.Second
	DefaultPollInterval           = 5 * time.Second
	DefaultCutoverBackoff         = 30 * time.Second
)

// WithDefaults is the request with every unset setting at its default.
// GracePeriod stays as it is: nil means DefaultGracePeriod (Grace), 0 means
// none.
func (r MigrationRequest) WithDefaults() MigrationRequest {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&r.VNodes, DefaultVNodes)
	def(&r.ChunkRows, DefaultCopyChunkRows)
	def(&r.VerifyChunkRows, DefaultVerifyChunkRows)
	if r.Tokens == "" {
		r.Tokens = DefaultTokens
	}
	if r.MaxLagBytes == 0 {
		r.MaxLagBytes = DefaultMaxLagBytes
	}
	if r.OnVerifyFail == "" {
		r.OnVerifyFail = VerifyFailWait
	}
	defD(&r.CutoverBudget, DefaultCutoverBudget)
	defD(&r.CopySlice, DefaultCopySlice)
	defD(&r.HeartbeatTimeout, DefaultHeartbeatTimeout)
	defD(&r.PollInterval, DefaultPollInterval)
	defD(&r.CutoverBackoff, DefaultCutoverBackoff)
	return r
}

// Validate checks the request's kind and what it names, and the settings
// (zero means the default); errors name the CLI flag that sets the value.
// The CLI runs it before anything starts and the PLAN activity again.
func (r MigrationRequest) Validate() error {
	if err := r.validateKind(); err != nil {
		return err
	}
	switch {
	case r.VNodes < 0 || r.VNodes > 4096:
		return fmt.Errorf("--vnodes %d: want 1 to 4096", r.VNodes)
	case r.Throttle.RowsPerSec < 0 || r.Throttle.BytesPerSec < 0:
		return fmt.Errorf("--rows-per-sec and --bytes-per-sec: want 0 (unlimited) or more")
	case r.Throttle.Adaptive.Validate() != nil:
		return r.Throttle.Adaptive.Validate()
	case r.ChunkRows < 0:
		return fmt.Errorf("--copy-chunk-rows %d: want 1 or more", r.ChunkRows)
	case r.VerifyChunkRows < 0:
		return fmt.Errorf("--verify-chunk-rows %d: want 1 or more", r.VerifyChunkRows)
	case r.MaxLagBytes < 0:
		return fmt.Errorf("--max-lag-bytes %d: want 0 or more", r.MaxLagBytes)
	case r.MaxParallelMoves < 0 || r.MaxMovesPerShard < 0:
		return fmt.Errorf("--max-parallel-moves %d, --max-moves-per-shard %d: want 0 (no bound) or more", r.MaxParallelMoves, r.MaxMovesPerShard)
	case r.GracePeriod != nil && *r.GracePeriod < 0:
		return fmt.Errorf("--grace %s: want 0 (clean up right after cutover, no rollback) or more", *r.GracePeriod)
	case r.CutoverBudget != 0 && r.CutoverBudget < 100*time.Millisecond:
		return fmt.Errorf("--cutover-budget %s: want 100ms or more", r.CutoverBudget)
	}
	switch r.OnVerifyFail {
	case "", VerifyFailWait, VerifyFailRollback:
	default:
		return fmt.Errorf("--on-verify-fail %q: want wait or rollback", r.OnVerifyFail)
	}
	switch r.ReadFrom {
	case "", ReadFromPrimary, ReadFromStandby:
	default:
		return fmt.Errorf("--read-from %q: want primary or standby", r.ReadFrom)
	}
	if r.StreamDuringCopy && r.ReadFrom == ReadFromStandby {
		// The copy gate skips a change once the source's primary shows it;
		// a chunk read on a standby that has not replayed it would miss it.
		return fmt.Errorf("--stream-during-copy with --read-from standby: the copy gate needs the chunks read on the primary; drop one of the two")
	}
	return nil
}

// Validate checks the adaptive throttle's limits (nil: none); errors name
// the CLI flag that sets the value (reshard migrate and reshard throttle
// share them).
func (a *AdaptiveThrottle) Validate() error {
	if a == nil {
		return nil
	}
	switch {
	case a.MaxLatencyIncrease < 0 || a.MaxLatencyIncrease > 10_000:
		return fmt.Errorf("--max-source-latency-increase %g: want a percentage over the baseline, 0 (not watched) to 10000", a.MaxLatencyIncrease)
	case a.MaxProbeLatency < 0 || (a.MaxProbeLatency > 0 && a.MaxProbeLatency < 100*time.Microsecond):
		return fmt.Errorf("--max-probe-latency %s: want 0 (not watched) or 100µs or more", a.MaxProbeLatency)
	case a.MaxReplicaLag < 0 || (a.MaxReplicaLag > 0 && a.MaxReplicaLag < 100*time.Millisecond):
		return fmt.Errorf("--max-replica-lag %s: want 0 (not watched) or 100ms or more", a.MaxReplicaLag)
	case a.MaxSlotWAL < 0 || (a.MaxSlotWAL > 0 && a.MaxSlotWAL < 16<<20):
		return fmt.Errorf("--max-slot-wal %d: want 0 (not watched) or 16 MiB (one WAL segment) or more", a.MaxSlotWAL)
	case a.MaxActiveBackends < 0:
		return fmt.Errorf("--max-active-backends %d: want 0 (not watched) or more", a.MaxActiveBackends)
	case len(a.ProbeQuery) > 1000:
		return fmt.Errorf("--probe-query: %d characters, want at most 1000", len(a.ProbeQuery))
	case strings.Contains(strings.TrimRight(strings.TrimSpace(a.ProbeQuery), ";"), ";"):
		return fmt.Errorf("--probe-query %q: want one statement", a.ProbeQuery)
	case a.ProbeQuery != "" && !a.Enabled():
		return fmt.Errorf("--probe-query without a limit to watch: give --max-source-latency-increase or --max-probe-latency")
	}
	return nil
}

// validateKind checks that the request names what its kind needs.
func (r MigrationRequest) validateKind() error {
	switch r.Kind {
	case KindAddNode, KindRemoveNode:
		if r.Shard == "" {
			return fmt.Errorf("%s needs the shard", r.Kind)
		}
	case KindSplit:
		if r.Shard == "" || r.Into == "" {
			return fmt.Errorf("split needs the shard to split and the new shard (--into)")
		}
	case KindMove:
		if r.Range == nil || r.To == "" {
			return fmt.Errorf("move needs --range and --to")
		}
	case KindRebalance:
		if len(r.Add) == 0 && len(r.Remove) == 0 && len(r.Weights) == 0 {
			return fmt.Errorf("rebalance needs --add shards, --remove shards or --weight shard=w")
		}
	default:
		return fmt.Errorf("unknown migration kind %q (add-node, split, remove-node, move, rebalance)", r.Kind)
	}
	return nil
}

// Change is the request as the ring's planner sees it (ring.PlanChange),
// its token allocation parsed (ring.ParseAllocation; "" the planner's
// default).
func (r MigrationRequest) Change() (ring.Change, error) {
	c := ring.Change{Kind: string(r.Kind), Shard: r.Shard, Into: r.Into, Range: r.Range, To: r.To,
		Add: r.Add, Remove: r.Remove, Weights: r.Weights, Opts: ring.Options{VNodes: r.VNodes}}
	if r.Tokens != "" {
		alloc, err := ring.ParseAllocation(r.Tokens)
		if err != nil {
			return c, fmt.Errorf("--tokens: %w", err)
		}
		c.Opts.Tokens = alloc
	}
	return c, nil
}
