package activities

import (
	"math"
	"sync"
	"time"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/eta"
	"github.com/reshard/reshard/workflows"
)

// copyMeter follows one copy slice: what it has committed and the move's
// rate over a sliding window (eta.Window), from which the heartbeat
// (read by reshard status), the slice's result (the UI's details) and the
// ETA gauge take when the copy should end. Estimating from the measured
// recent rate, not from the configured throttle or the average since the
// start, keeps the ETA right after a throttle change or a pause.
//
// Where the machine binds, it counts work, not rows: a row weighs 1 plus
// its table's estimated width over rowOverheadBytes, so that the rows of a
// wide table left for later are not expected at the pace of a narrow one
// copied first. Where a rows/s throttle binds, a row is a row.
type copyMeter struct {
	mu          sync.Mutex
	move        string
	rowsWin     eta.Window         // over the move's rows
	workWin     eta.Window         // over the move's work
	throttle    *backfill.Throttle // nil: none
	est         int64              // the move's estimated rows
	tables      map[string]tableWork
	units       map[unitKey]int64 // rows done per unit, all runs
	base        int64             // rows committed before the slice
	rows, bytes int64             // committed by the slice
	at          time.Time         // of the last committed chunk
	// group sums the work of the copies into the same target, and peers
	// are the paces of the others among them that share the machine (nil:
	// the copy is taken alone).
	group    *copyGroup
	peers    func(*copyMeter) []eta.Pace
	credited float64 // the work done as of the last chunk, added to group
}

// rowOverheadBytes is the width a row's own cost is worth (tuple, index
// entries, WAL record). In three demo runs a users row (510 B by the plan's
// estimate, its TOASTed payloads included) took 1.6-1.9 times as long to
// copy as an orders row (68 B): 1 + width/512 says 1.8 (256 said 2.4).
// Counted by rows alone, an ETA made while the orders copied came out up to
// 37% short; a prior, measured on one machine, until the copy has seen both.
const rowOverheadBytes = 512

type tableWork struct {
	rows   int64   // estimated
	weight float64 // work per row
}

type unitKey struct {
	table  string
	lo, hi int64
}

// newCopyMeter starts the meter of a slice of spec's copy, under th (nil:
// none), from the checkpoints earlier slices left.
func newCopyMeter(spec workflows.MoveSpec, th *backfill.Throttle, before []backfill.Checkpoint) *copyMeter {
	c := &copyMeter{move: spec.ID, est: spec.EstRows, throttle: th, tables: map[string]tableWork{}, units: map[unitKey]int64{}}
	for _, t := range spec.EstTables {
		w := 1.0
		if t.Rows > 0 {
			w += float64(t.Bytes) / float64(t.Rows) / rowOverheadBytes
		}
		c.tables[t.Table] = tableWork{rows: t.Rows, weight: w}
	}
	for _, cp := range before {
		c.base += cp.Rows
		c.units[unitKey{cp.Table, cp.RangeLo, cp.RangeHi}] = cp.Rows
	}
	return c
}

func (c *copyMeter) progress(p backfill.Progress) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rows, c.bytes, c.at = p.Rows, p.Bytes, time.Now()
	c.units[unitKey{p.Table, p.Range.Lo, p.Range.Hi}] = p.UnitRows
	done, _ := c.work()
	c.rowsWin.Add(eta.Sample{At: c.at, Rows: c.base + p.Rows})
	c.workWin.Add(eta.Sample{At: c.at, Rows: int64(math.Round(done))})
	if c.group != nil {
		c.group.add(c.at, max(done-c.credited, 0))
	}
	c.credited = done
}

// work is the work done and left: by table where the plan estimated each,
// else by rows (weight 1).
func (c *copyMeter) work() (done, left float64) {
	if len(c.tables) == 0 {
		return float64(c.base + c.rows), float64(c.est - c.base - c.rows)
	}
	byTable := map[string]int64{}
	for u, n := range c.units {
		if _, ok := c.tables[u.table]; ok {
			byTable[u.table] += n
		} else {
			done += float64(n) // a table the plan did not estimate: a row is a row
		}
	}
	for name, t := range c.tables {
		n := byTable[name]
		done += float64(n) * t.weight
		left += float64(max(t.rows-n, 0)) * t.weight
	}
	return done, left
}

// end is when the copy should end, anchored at the last committed chunk;
// false when there is no honest estimate (no rate yet, or no progress in
// the window). A copy past its row estimate is due now: how much more there
// is, nothing tells. Under a rows/s limit the copy's own window says when
// (eta.Window.End). Else the copy shares the machine with the other copies
// this worker runs into the same target, and its end is where its share of
// their summed rate takes it (eta.Shared).
func (c *copyMeter) end() (time.Time, bool) {
	own, end, ok, shared := c.ownEnd()
	if !shared || c.group == nil {
		return end, ok
	}
	rate, _, ok := c.group.rate()
	if !ok {
		return time.Time{}, false
	}
	return eta.Shared(own, c.peers(c), rate)
}

// ownEnd is the copy's end at its own window's rate and its pace; shared
// says whether the pace is the machine's to share (no rows/s limit, work
// left).
func (c *copyMeter) ownEnd() (own eta.Pace, end time.Time, ok, shared bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.est <= 0 {
		return eta.Pace{}, time.Time{}, false, false
	}
	rowsLeft := c.est - c.base - c.rows
	_, workLeft := c.work()
	if rowsLeft <= 0 || workLeft < 1 {
		return eta.Pace{}, c.at, !c.at.IsZero(), false
	}
	if c.rowsThrottled() {
		end, ok := c.rowsWin.End(rowsLeft, 0)
		return eta.Pace{}, end, ok, false
	}
	end, ok = c.workWin.End(int64(math.Ceil(workLeft)), 0)
	return eta.Pace{At: c.at, Left: math.Ceil(workLeft)}, end, ok, true
}

// copyGroup is the work the copies into one target commit in this worker,
// summed over a rate window: the rate at which the machine they share
// copies, whichever of them it serves. A copy that ends leaves what it did
// in the window. A move that starts copying starts the window again: the
// rate of the copies before it is not the rate of all of them (the demo's
// first move copied 70k rows/s alone, the four of them 55k in all).
type copyGroup struct {
	mu    sync.Mutex
	win   eta.Window
	work  float64   // committed since the group started
	at    time.Time // of the last sample
	moves map[string]bool
}

// join counts move among the group's copies.
func (g *copyGroup) join(move string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.moves[move] {
		return // its next slice
	}
	if g.moves == nil {
		g.moves = map[string]bool{}
	}
	g.moves[move] = true
	g.win = eta.Window{Span: g.win.Span, MinSpan: g.win.MinSpan}
}

func (g *copyGroup) add(at time.Time, work float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.work += work
	g.at = at
	g.win.Add(eta.Sample{At: at, Rows: int64(math.Round(g.work))})
}

// idle reports a group without work for longer than eta.DefaultWindow:
// its rate says nothing of the next copies'.
func (g *copyGroup) idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.at.IsZero() && time.Since(g.at) > eta.DefaultWindow
}

func (g *copyGroup) rate() (rate, _ float64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.win.Rate()
}

// doneNow is the work done as of the last chunk.
func (c *copyMeter) doneNow() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	done, _ := c.work()
	return done
}

// rowsThrottled reports a rows/s limit in force (the operator's or the
// adaptive throttle's): it, not the machine, sets the pace of every row.
func (c *copyMeter) rowsThrottled() bool {
	if c.throttle == nil {
		return false
	}
	rowsPerSec, _ := c.throttle.InForce()
	return rowsPerSec > 0
}

// heartbeat is the slice's heartbeat details at now: rows and bytes so far,
// when the copy should end (Unix ms) and the time left from now (-1:
// unknown); the ETA gauge is set to the same time left.
func (c *copyMeter) heartbeat(now time.Time) (details map[string]int64, left time.Duration, ok bool) {
	end, ok := c.end()
	c.mu.Lock()
	defer c.mu.Unlock()
	endMs, leftMs := int64(-1), int64(-1)
	if ok {
		left = max(end.Sub(now), 0)
		endMs, leftMs = end.UnixMilli(), left.Milliseconds()
	}
	return map[string]int64{
		workflows.HeartbeatSliceRows: c.rows, workflows.HeartbeatSliceBytes: c.bytes,
		workflows.HeartbeatCopyEndMillis: endMs, workflows.HeartbeatETAMillis: leftMs,
	}, left, ok
}

// copyRates keeps each move's rate window from one copy slice to the next
// in this process. A window that started empty with every slice would
// never see the time between slices — the workflow's turn, the next slice's
// setup, the chunk the slice's deadline cut short — which took 3-5 s of
// every 20 on a busy machine (a 20-25% slower copy than its slices' rates
// said). A window left idle longer than eta.DefaultWindow (a pause, a slice
// on another worker) is dropped: the rate before says nothing of the rate
// after.
//
// It also knows the copies running now, by target shard: a copy's end
// depends on theirs (copyMeter.end).
type copyRates struct {
	mu      sync.Mutex
	m       map[string]copyRate
	targets map[string]*targetCopies
}

// targetCopies are the copies into one target: the slices running now, and
// the group whose rate they share.
type targetCopies struct {
	live  map[*copyMeter]bool
	group *copyGroup
}

type copyRate struct {
	rows, work eta.Window
	at         time.Time // the last sample's
}

// meter starts a slice's meter (newCopyMeter) with the move's window,
// which the slice owns until it keeps it again (a second attempt of the
// same slice running alongside starts its own).
func (r *copyRates) meter(spec workflows.MoveSpec, th *backfill.Throttle, before []backfill.Checkpoint) *copyMeter {
	c := newCopyMeter(spec, th, before)
	r.mu.Lock()
	defer r.mu.Unlock()
	if kept, ok := r.m[spec.ID]; ok && time.Since(kept.at) <= eta.DefaultWindow {
		c.rowsWin, c.workWin, c.at = kept.rows, kept.work, kept.at
	}
	delete(r.m, spec.ID)
	if r.targets == nil {
		r.targets = map[string]*targetCopies{}
	}
	t := r.targets[spec.Target]
	if t == nil {
		t = &targetCopies{live: map[*copyMeter]bool{}}
		r.targets[spec.Target] = t
	}
	t.live[c] = true
	c.peers = func(c *copyMeter) []eta.Pace { return r.peers(spec.Target, c) }
	if t.group == nil || t.group.idle() {
		t.group = &copyGroup{}
	}
	t.group.join(spec.ID)
	c.group, c.credited = t.group, c.doneNow()
	return c
}

// release says the slice metered by c ended.
func (r *copyRates) release(target string, c *copyMeter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.targets[target]; t != nil {
		delete(t.live, c)
	}
	for name, t := range r.targets {
		if len(t.live) == 0 && t.group.idle() {
			delete(r.targets, name)
		}
	}
}

// peers are the paces of the copies into target other than c that share
// the machine.
func (r *copyRates) peers(target string, c *copyMeter) []eta.Pace {
	r.mu.Lock()
	var others []*copyMeter
	if t := r.targets[target]; t != nil {
		for o := range t.live {
			if o.move != c.move { // another move's copy (a second attempt of c's own slice is not)
				others = append(others, o)
			}
		}
	}
	r.mu.Unlock()
	var out []eta.Pace // each meter's lock taken alone: two ends asked at once take no two locks
	for _, o := range others {
		if p, _, _, shared := o.ownEnd(); shared {
			out = append(out, p)
		}
	}
	return out
}

// keep hands the slice's window back for the move's next slice; a copy
// that is done keeps nothing.
func (r *copyRates) keep(move string, c *copyMeter, done bool) {
	c.mu.Lock()
	kept := copyRate{rows: c.rowsWin, work: c.workWin, at: c.at}
	c.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, old := range r.m { // moves whose copy stopped here and went on elsewhere, or never
		if time.Since(old.at) > eta.DefaultWindow {
			delete(r.m, id)
		}
	}
	if done || kept.at.IsZero() {
		return
	}
	if r.m == nil {
		r.m = map[string]copyRate{}
	}
	r.m[move] = kept
}
