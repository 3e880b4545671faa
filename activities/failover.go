package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/workflows"
)

// newFailoverMetric is reshard_failovers_total: failovers of a shard a move
// holds, found by a move's stream, copy slice, verify or repair, by shard
// and by the phase of the move that found it first (both bounded: the
// cluster's shards, the eight phases).
func newFailoverMetric() *failoverCounter {
	return &failoverCounter{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reshard_failovers_total",
		Help: "Failovers of a shard moves hold (source or target), once per shard and timeline change found by this worker, by shard and the phase of the move that found it.",
	}, []string{"shard", "phase"}), seen: map[string]bool{}}
}

// failoverCounter counts each failover once per worker: every move that
// holds the shard finds the same failover (four moves out of one source
// stop on it, their streams and copy slices each), so a failover is known
// by its shard and the server it led to (system id and timeline), and
// only the first finding is counted. Another worker that finds it counts
// it in its own series; a restarted worker may count it again.
type failoverCounter struct {
	vec  *prometheus.CounterVec
	mu   sync.Mutex
	seen map[string]bool // shard, system id, timeline of the new server
}

// count records the failover of shard to the server now (from was),
// found in phase; it reports whether this was its first finding.
func (c *failoverCounter) count(shard, phase string, was, now cdc.ServerIdentity) bool {
	if phase == "" {
		phase = "unknown"
	}
	key := fmt.Sprintf("%s\x00%s\x00%d", shard, now.SystemID, now.Timeline)
	if now.SystemID == "" { // not identified (cannot happen for a found failover): by the old server
		key = fmt.Sprintf("%s\x00was %s\x00%d", shard, was.SystemID, was.Timeline)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[key] {
		return false
	}
	c.seen[key] = true
	c.vec.WithLabelValues(shard, phase).Inc()
	return true
}

// sourceFailedOver counts the source failover in err, if it is one
// (*cdc.FailedOverError), found in phase.
func (a *Activities) sourceFailedOver(err error, phase workflows.Phase) {
	var fe *cdc.FailedOverError
	if errors.As(err, &fe) {
		if a.metrics.failovers.count(fe.Source, string(phase), fe.Was, fe.Now) {
			a.log.Warn("move's source failed over", "shard", fe.Source, "phase", string(phase), "failover", fe.Error())
		}
	}
}

// targetIdentity is the target's identity as the move was last seen by
// this worker (its last forward stream or copy slice), else as the move
// recorded it (MoveRef.Target: JOINING's, or a slice's or stream's
// report), for the next stream's cdc.Options.TargetIdentity and the next
// slice's check: a stream started again after a failover then sees the new
// timeline, in a fresh worker too. Zero: nothing recorded (a move joined
// before the record was kept); the first look is the record.
func (a *Activities) targetIdentity(m workflows.MoveRef) cdc.ServerIdentity {
	a.mu.Lock()
	id, ok := a.targets[m.Spec.ID]
	a.mu.Unlock()
	if ok && id.SystemID != "" {
		return id
	}
	return sourceIdentity(m.Target)
}

// failoverWatch reports, once per stream, the failover its Run found: the
// target's (cdc.TargetFailover, while it runs) or the source's (the
// *cdc.FailedOverError it stopped on).
type failoverWatch struct {
	a       *Activities
	in      workflows.CDCInput
	counted bool
	note    string
}

func (a *Activities) watchFailovers(in workflows.CDCInput) *failoverWatch {
	return &failoverWatch{a: a, in: in}
}

func (w *failoverWatch) phase() string {
	if w.in.Phase == "" {
		return "unknown"
	}
	return string(w.in.Phase)
}

// seen records the target identity st has seen and returns the failover
// it found ("" none), counted the first time.
func (w *failoverWatch) seen(st *cdc.Stream) string {
	if !w.in.Reverse {
		if id := st.TargetIdentity(); id.SystemID != "" {
			w.a.mu.Lock()
			w.a.targets[w.in.Move.Spec.ID] = id
			w.a.mu.Unlock()
		}
	}
	f, ok := st.TargetFailedOver()
	if !ok {
		return w.note
	}
	if !w.counted {
		shard := w.in.Move.Spec.Target
		w.counted, w.note = true, f.String()
		if w.in.Reverse { // the reverse stream applies to the old owner
			shard, w.note = w.in.Move.Spec.Source, "reverse stream: "+w.note
		}
		w.a.metrics.failovers.count(shard, w.phase(), f.Was, f.Now)
		w.a.log.Warn("the shard a move's stream applies to failed over", "move", w.in.Move.Spec.ID, "shard", shard, "phase", w.phase(), "failover", w.note)
	}
	return w.note
}

// ended counts the source failover the stream stopped on, if it did.
func (w *failoverWatch) ended(st *cdc.Stream, err error) {
	w.seen(st)
	var fe *cdc.FailedOverError
	if errors.As(err, &fe) {
		shard := w.in.Move.Spec.Source
		if w.in.Reverse {
			shard = w.in.Move.Spec.Target // the reverse stream reads the new owner
		}
		w.a.metrics.failovers.count(shard, w.phase(), fe.Was, fe.Now)
	}
}

// checkTarget compares the target a copy slice reaches with the one the
// move last saw in this worker (the copy's checkpoints commit with its
// chunks on the target, so the copy resumes from what the new primary
// holds; this only says that it changed): a failover is counted and
// returned as text for the move's state.
func (a *Activities) checkTarget(ctx context.Context, m workflows.MoveRef, dst *pgxpool.Pool, phase workflows.Phase) (string, cdc.ServerIdentity, error) {
	now, f, err := cdc.CheckTarget(ctx, dst, m.Spec.Target, a.targetIdentity(m))
	if err != nil {
		return "", now, err
	}
	a.mu.Lock()
	a.targets[m.Spec.ID] = now
	a.mu.Unlock()
	if f == nil {
		return "", now, nil
	}
	a.metrics.failovers.count(m.Spec.Target, string(phase), f.Was, f.Now)
	a.log.Warn("move's target failed over", "move", m.Spec.ID, "shard", m.Spec.Target, "phase", string(phase), "failover", f.String())
	return f.String(), now, nil
}

// identityRecord is id as the workflow records it (nil: unknown).
func identityRecord(id cdc.ServerIdentity) *workflows.SourceIdentity {
	if id.SystemID == "" {
		return nil
	}
	return &workflows.SourceIdentity{SystemID: id.SystemID, Timeline: id.Timeline}
}

// streamFailover is the target's failover the move's stream running in
// this worker found ("" none): a cutover returns it, so that the move
// records a failover found in VERIFY or CUTOVER, whose streams' notes are
// otherwise only in their heartbeats.
func (a *Activities) streamFailover(move string) string {
	a.mu.Lock()
	st := a.streams[move]
	a.mu.Unlock()
	if st == nil {
		return ""
	}
	if f, ok := st.TargetFailedOver(); ok {
		return f.String()
	}
	return ""
}
