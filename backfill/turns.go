package backfill

import (
	"context"
	"math"
	"sync"
)

// turns hands out a copy's chunks, a fixed number at a time, to the table
// furthest behind: the one whose share of its estimated rows is the
// smallest. A table ahead of one still copying waits for it, even with
// turns free: the one behind may be busy reading a slow chunk or waiting for
// its writer, and the free turns would let the others run away from it.
// Every table of a copy then advances at the same pace, so the mix of rows
// being copied is the same from the first chunk to the last, and so is the
// copy's rate. Copied table after table, a demo move of
// narrow orders and wide users ran at 16k rows/s for the orders and 5k for
// the users that followed, and an ETA made from the first rate came out
// 38-46% short; nothing seen before the first table ends tells what the
// next one costs.
//
// A turn lasts from a chunk's read on the source to its commit on the
// target. There are three turns per unit copied at once: a unit's read, the
// chunk waiting for its writer and the one being written, the depth its
// pipeline had before the tables took turns. So a table is read while the
// chunks of another are written, as one table's next chunk was read while
// its last was written.
//
// No turn is given before every table has asked for its first or finished
// without (its units done by an earlier run): a table set up first would
// otherwise be chunks ahead of the others before they start.
type turns struct {
	mu      sync.Mutex
	free    int
	waiting []*turn
	lanes   []*lane
	absent  int // lanes that have not asked for a turn yet
}

// lane is one table's progress, as turns weighs it.
type lane struct {
	est     int64 // estimated rows (0: unknown)
	rows    int64 // rows read by this run and left by earlier ones
	arrived bool  // has asked for a turn, or finished
	left    bool  // asks for no more turns
}

// turnsPerUnit is the turns of each unit copied at once (see turns).
const turnsPerUnit = 3

// behind is how far the lane has gone: its share of the estimate, or past
// every estimated lane when it has none (it is copied once they are done),
// its rows breaking ties.
func (l *lane) behind() (float64, int64) {
	if l.est <= 0 {
		return math.Inf(1), l.rows
	}
	return float64(l.rows) / float64(l.est), l.rows
}

type turn struct {
	lane    *lane
	granted chan struct{}
}

// newTurns makes the turns of a copy of parallel units at once.
func newTurns(parallel int) *turns { return &turns{free: turnsPerUnit * max(parallel, 1)} }

// expect registers the lanes that will ask for turns.
func (t *turns) expect(ls ...*lane) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range ls {
		t.lanes = append(t.lanes, l)
		if !l.arrived {
			t.absent++
		}
	}
}

// leave says lane l asks for no more turns.
func (t *turns) leave(l *lane) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.arrive(l)
	l.left = true
	t.dispatch()
}

func (t *turns) arrive(l *lane) {
	if !l.arrived {
		l.arrived = true
		t.absent--
	}
}

// take waits for a turn of lane l; give ends it.
func (t *turns) take(ctx context.Context, l *lane) error {
	w := &turn{lane: l, granted: make(chan struct{})}
	t.mu.Lock()
	t.arrive(l)
	t.waiting = append(t.waiting, w)
	t.dispatch()
	t.mu.Unlock()
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
		t.mu.Lock()
		defer t.mu.Unlock()
		select {
		case <-w.granted: // granted meanwhile: hand it on
			t.free++
			t.dispatch()
		default:
			for i, o := range t.waiting {
				if o == w {
					t.waiting = append(t.waiting[:i], t.waiting[i+1:]...)
					break
				}
			}
		}
		return ctx.Err()
	}
}

// copying is the number of lanes that have not left.
func (t *turns) copying() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, l := range t.lanes {
		if !l.left {
			n++
		}
	}
	return max(n, 1)
}

// give ends a turn.
func (t *turns) give() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.free++
	t.dispatch()
}

// count adds rows to lane l: a chunk read, or what an earlier run of the
// copy left. A lane that waited for l may go now.
func (t *turns) count(l *lane, rows int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l.rows += rows
	t.dispatch()
}

// dispatch grants the free turns to the waiting lanes furthest behind,
// earliest waiter first among equals, as long as no lane still copying is
// further behind than they are.
func (t *turns) dispatch() {
	if t.absent > 0 {
		return
	}
	for t.free > 0 {
		i := t.next()
		if i < 0 {
			return
		}
		w := t.waiting[i]
		t.waiting = append(t.waiting[:i], t.waiting[i+1:]...)
		t.free--
		close(w.granted)
	}
}

// next is the index of the waiter to grant, or -1.
func (t *turns) next() int {
	best := -1
	for i, w := range t.waiting {
		if best < 0 || less(w.lane, t.waiting[best].lane) {
			best = i
		}
	}
	if best < 0 {
		return -1
	}
	for _, l := range t.lanes {
		if !l.left && less(l, t.waiting[best].lane) {
			return -1
		}
	}
	return best
}

func less(a, b *lane) bool {
	fa, ra := a.behind()
	fb, rb := b.behind()
	if fa != fb {
		return fa < fb
	}
	return ra < rb
}
