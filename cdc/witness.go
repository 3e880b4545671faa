package cdc

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
)

// The stream's witness: what it received, kept so that verify can compare at
// a point that needs no replication slot (verify/snapshot.go, DESIGN.md §4.5).
//
// A temporary slot's snapshot is exact but waits for every transaction
// holding an xid on the source, among them the long one that aborted a
// cutover. A plain snapshot S waits for nothing, and the stream held at the
// WAL position L read right after S has applied every transaction S sees;
// what it may hold beyond S are transactions committed before L that S does
// not see yet (committing while S was taken, or waiting for a synchronous
// standby). Those are found here: the stream keeps the ids of the
// transactions it received until a later source snapshot sees them
// (pruned), and the keys each changed, so that a re-verify compares only
// what changed since the last one.

// maxWitnessXids bounds the transactions kept unseen (a synchronous standby
// that stops confirming leaves every commit invisible); past it the record
// starts again from a new snapshot (witness.before).
const maxWitnessXids = 1 << 20

// maxWitnessKeys bounds the keys kept; past it the record of keys starts
// again, and a re-verify since an older position compares every chunk.
const maxWitnessKeys = 1 << 20

// witnessPruneEvery: the received ids are pruned against a source snapshot
// at most this often, once more than witnessPruneAt are kept.
const (
	witnessPruneEvery = time.Second
	witnessPruneAt    = 4096
)

type witness struct {
	mu sync.Mutex
	// xids are source transactions received, by id, with their commit LSN,
	// until a source snapshot taken while no verify pins the record sees
	// them.
	xids map[uint32]pglogrepl.LSN
	// before is a source snapshot taken when the record of ids (re)started:
	// a transaction committed before that and not visible to a later
	// snapshot is among before's running ones.
	before string
	pins   int
	// keys are the primary keys (pkMapKey) each table's received changes
	// touched, with the commit LSN of the last one; complete for every
	// transaction committed at or after keysFrom.
	keys     map[string]map[string]pglogrepl.LSN
	nkeys    int
	keysFrom pglogrepl.LSN
	keysSet  bool
	pruned   time.Time
}

// start (re)starts the record of ids when a runner starts streaming at
// start: the keys go on where an earlier runner of this Stream left them
// (it received every commit up to start), the ids start from a new snapshot.
func (w *witness) start(before string, start pglogrepl.LSN) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.before = before
	if w.xids == nil {
		w.xids = map[uint32]pglogrepl.LSN{}
	}
	if !w.keysSet {
		w.keys, w.keysFrom, w.keysSet = map[string]map[string]pglogrepl.LSN{}, start, true
	}
}

func (w *witness) received(xid uint32, commit pglogrepl.LSN) {
	w.mu.Lock()
	if w.xids != nil {
		w.xids[xid] = commit
	}
	w.mu.Unlock()
}

func (w *witness) touched(table string, pk []string, commit pglogrepl.LSN) {
	if pk == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.keysSet {
		return
	}
	m := w.keys[table]
	if m == nil {
		m = map[string]pglogrepl.LSN{}
		w.keys[table] = m
	}
	k := pkMapKey(pk)
	if _, ok := m[k]; !ok {
		w.nkeys++
	}
	m[k] = commit
	if w.nkeys > maxWitnessKeys {
		w.keys, w.nkeys, w.keysFrom = map[string]map[string]pglogrepl.LSN{}, 0, commit+1
	}
}

// prune drops the ids visible in snap, unless a verify pins the record (a
// snapshot newer than the verify's may see what the verify's does not).
func (w *witness) prune(snap string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pruned = time.Now()
	if w.pins > 0 {
		return nil
	}
	for x := range w.xids {
		v, err := visibleIn(snap, x)
		if err != nil {
			return err
		}
		if v {
			delete(w.xids, x)
		}
	}
	if len(w.xids) > maxWitnessXids {
		w.xids, w.before = map[uint32]pglogrepl.LSN{}, snap
	}
	return nil
}

func (w *witness) wantsPrune() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pins == 0 && len(w.xids) > witnessPruneAt && time.Since(w.pruned) >= witnessPruneEvery
}

// pruneWitness is called between transactions: when the record of ids has
// grown, one snapshot of the source prunes it.
func (r *runner) pruneWitness(ctx context.Context) error {
	if !r.s.witness.wantsPrune() {
		return nil
	}
	src, err := r.sourceConn(ctx)
	if err != nil {
		return err
	}
	var snap string
	if err := src.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return wrapOp("read a source snapshot to prune the stream's witness", err)
	}
	return r.s.witness.prune(snap)
}

// startWitness records, when a runner starts at start, a source snapshot
// taken after it: what earlier runners applied and that snapshot did not
// see yet is among its running transactions.
func (r *runner) startWitness(ctx context.Context, start pglogrepl.LSN) error {
	src, err := r.sourceConn(ctx)
	if err != nil {
		return err
	}
	var snap string
	if err := src.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return wrapOp("read a source snapshot for the stream's witness", err)
	}
	r.s.witness.start(snap, start)
	return nil
}

// ErrNoWitness: the stream has not started, so it cannot say what it
// received.
var ErrNoWitness = errors.New("the stream has not started: it cannot vouch for what it applied")

// Pin keeps the record of received transactions from being pruned until
// the returned function is called: a verify pins it before taking its
// source snapshot and asks InDoubt after.
func (s *Stream) Pin() (unpin func()) {
	w := &s.witness
	w.mu.Lock()
	w.pins++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			w.pins--
			w.mu.Unlock()
		})
	}
}

// InDoubt compares what the stream received with a source snapshot snap
// (the text of a pg_snapshot) taken while pinned, the stream held so that it
// applied exactly the source transactions committed before below:
//   - doubt: transactions applied (commit before below) that snap does not
//     see; the target holds them, snap does not;
//   - unknown: the transactions running both when the record started
//     (before) and in snap that the stream did not receive itself; an
//     earlier runner or process may have applied them, if they committed.
//
// Both empty (the unknown ones still running on the source), the target
// held at below and snap hold the same transactions.
func (s *Stream) InDoubt(snap string, below pglogrepl.LSN) (doubt []uint32, unknown []uint64, err error) {
	w := &s.witness
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.xids == nil || w.before == "" {
		return nil, nil, ErrNoWitness
	}
	for x, commit := range w.xids {
		if commit >= below {
			continue
		}
		v, err := visibleIn(snap, x)
		if err != nil {
			return nil, nil, err
		}
		if !v {
			doubt = append(doubt, x)
		}
	}
	was, err := runningIn(w.before)
	if err != nil {
		return nil, nil, err
	}
	for _, x := range was {
		if _, ok := w.xids[uint32(x)]; ok {
			continue
		}
		v, err := visibleIn(snap, uint32(x))
		if err != nil {
			return nil, nil, err
		}
		if !v {
			unknown = append(unknown, x)
		}
	}
	return doubt, unknown, nil
}

// Touched returns, per table (schema.table), the primary keys (as text
// values) of the moving rows that source transactions committed at or after
// since changed, as far as this stream received them, each with the commit
// LSN of its last change; complete is false when its record does not reach
// back to since (the stream started later, or the record overflowed): then
// any row may have changed.
func (s *Stream) Touched(since pglogrepl.LSN) (keys map[string][]TouchedKey, complete bool) {
	w := &s.witness
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.keysSet || w.keysFrom > since {
		return nil, false
	}
	keys = map[string][]TouchedKey{}
	for t, m := range w.keys {
		for k, commit := range m {
			if commit >= since {
				keys[t] = append(keys[t], TouchedKey{PK: strings.Split(k, "\x00"), Commit: commit})
			}
		}
	}
	return keys, true
}

// TouchedKey is a primary key a received change touched, and the commit LSN
// of the last such change.
type TouchedKey struct {
	PK     []string
	Commit pglogrepl.LSN
}

// runningIn lists the transactions running in a pg_snapshot's text.
func runningIn(snap string) ([]uint64, error) {
	parts := strings.Split(snap, ":")
	if len(parts) != 3 {
		return nil, errors.New("source snapshot " + snap + ": want xmin:xmax:xip")
	}
	if parts[2] == "" {
		return nil, nil
	}
	var out []uint64
	for _, s := range strings.Split(parts[2], ",") {
		var x uint64
		for _, c := range s {
			if c < '0' || c > '9' {
				return nil, errors.New("source snapshot " + snap + ": bad running transaction " + s)
			}
			x = x*10 + uint64(c-'0')
		}
		out = append(out, x)
	}
	return out, nil
}
