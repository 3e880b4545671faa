package eta

import (
	"math"
	"slices"
	"time"
)

// Rate is a speed of work: rows and bytes a second.
type Rate struct {
	Rows, Bytes float64
}

// Time is how long rowsLeft rows and bytesLeft bytes take at r: the longer
// of the two estimates (rows or bytes, whichever the throttle or the
// machine binds on). ok is false when work is left on a side whose rate is
// not positive (it did not move: paused, throttled to zero), or when the
// time overflows a Duration: no honest estimate exists then.
func (r Rate) Time(rowsLeft, bytesLeft int64) (time.Duration, bool) {
	secs := 0.0
	for _, d := range [][2]float64{{float64(rowsLeft), r.Rows}, {float64(bytesLeft), r.Bytes}} {
		if d[0] <= 0 {
			continue
		}
		if d[1] <= 0 { // work left that does not move
			return 0, false
		}
		secs = math.Max(secs, d[0]/d[1])
	}
	if secs >= float64(math.MaxInt64/int64(time.Second)) {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

// AtLimit is Time under a throttle's limits, where a side of 0 is
// unlimited and takes no time: PLAN's estimate of a copy at the operator's
// throttle (unlimited on both sides gives 0, no estimate to make). An
// estimate past a Duration's range is 0 too.
func AtLimit(limit Rate, rowsLeft, bytesLeft int64) time.Duration {
	if limit.Rows <= 0 {
		rowsLeft = 0
	}
	if limit.Bytes <= 0 {
		bytesLeft = 0
	}
	d, _ := limit.Time(rowsLeft, bytesLeft)
	return d
}

// Pace is a copy's work left (the unit is the caller's: rows, or rows
// weighed by their table's width) as of its last progress.
type Pace struct {
	At   time.Time
	Left float64
}

// Shared is when the copy whose pace is own should end, when it and
// peers (the other copies into its target, in this worker) share one
// machine that does rate units of work a second in all: each takes an
// equal share of it, and the share of a copy that ends goes to the ones
// left. Copied alone, that is its own rate. In the demo four moves fill one
// new shard; the first to start copied at 40k rows/s for a second, then at
// 10k beside the other three, and an estimate from its own rate came out
// 66% short.
func Shared(own Pace, peers []Pace, rate float64) (time.Time, bool) {
	if rate <= 0 {
		return time.Time{}, false
	}
	lefts := []float64{own.Left}
	for _, p := range peers {
		lefts = append(lefts, p.Left)
	}
	// The copies end in the order of the work they have left; between two
	// ends, each of the n still copying goes at rate/n.
	slices.Sort(lefts)
	var secs, done float64
	for i, l := range lefts {
		secs += (l - done) * float64(len(lefts)-i) / rate
		done = l
		if l >= own.Left {
			break
		}
	}
	if secs >= float64(math.MaxInt64/int64(time.Second)) {
		return time.Time{}, false
	}
	return own.At.Add(time.Duration(secs * float64(time.Second))), true
}
