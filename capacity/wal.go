package capacity

import (
	"math"
	"time"
)

// WALReading is what the probe read of a shard's WAL over its window.
type WALReading struct {
	Window time.Duration `json:"window"`
	// Bytes is the WAL written over the window (pg_current_wal_lsn() at
	// both ends): the rate the probe took before it told the images apart.
	Bytes int64 `json:"bytes"`
	// Records, FPI and StatBytes are pg_stat_wal's wal_records, wal_fpi
	// and wal_bytes over the window; Parts the same by sub-window.
	Records   int64     `json:"records"`
	FPI       int64     `json:"fpi"`
	StatBytes int64     `json:"stat_bytes"`
	Parts     []WALPart `json:"parts,omitempty"`
	// SinceCheckpoint is the time from the last checkpoint's start
	// (pg_control_checkpoint().checkpoint_time) to the window's end; -1:
	// not read.
	SinceCheckpoint   time.Duration `json:"since_checkpoint"`
	CheckpointTimeout time.Duration `json:"checkpoint_timeout"`
	MaxWALSize        int64         `json:"max_wal_size"`
	// End is when the window ended (zero in a reading stored before it
	// was recorded): with a move probe's end (MoveProbe.Done), how far
	// into its checkpoint cycle the copy will start.
	End time.Time `json:"end,omitzero"`
}

// WALPart is pg_stat_wal's counters over one sub-window.
type WALPart struct {
	Records int64 `json:"records"`
	FPI     int64 `json:"fpi"`
	Bytes   int64 `json:"bytes"`
}

// RawRate is the WAL position's rate over the window: what the probe took
// for the source's WAL rate before it told the full-page images apart.
func (r WALReading) RawRate() float64 { return rate(r.Bytes, r.Window) }

// FPIBytes is the estimated size of one full-page image in the window: a
// least-squares fit of each sub-window's bytes to its records and images
// (bytes = b·records + f·images) when the share of images varies enough
// between sub-windows to tell them apart (it does after a checkpoint, as
// the pages touched for the first time run out), else a whole page
// (BLCKSZ; an image leaves out its page's free space, so it is at most
// that).
func (r WALReading) FPIBytes() float64 {
	var srr, srf, sff, srb, sfb float64
	for _, p := range r.Parts {
		R, F, B := float64(p.Records), float64(p.FPI), float64(p.Bytes)
		srr += R * R
		srf += R * F
		sff += F * F
		srb += R * B
		sfb += F * B
	}
	det := srr*sff - srf*srf
	if sff == 0 || det <= 0.05*srr*sff { // no images, or the same share in every part
		return pageSize
	}
	f := (srr*sfb - srf*srb) / det
	b := (sff*srb - srf*sfb) / det
	if b < 0 || f < 512 || f > pageSize+512 {
		return pageSize
	}
	return f
}

// FPIShare is the share of the window's WAL bytes that were full-page
// images (0 to 1).
func (r WALReading) FPIShare() float64 {
	if r.FPI <= 0 || r.StatBytes <= 0 {
		return 0
	}
	return min(float64(r.FPI)*r.FPIBytes()/float64(r.StatBytes), 1)
}

// images is the window's full-page images as the model follows them:
// their rate over the window and at its end (in bytes/s), how fast they
// die away (tau: the e-folding time of their rate, fitted from the
// window's halves; +Inf when they do not slow), the checkpoint cycle and
// where in it the window ends. ok is false when there are none to follow
// (no images, or the checkpoint's time not read): then the WAL comes at
// the window's own rate.
func (r WALReading) images() (records, rate, end, tau, cycle, since float64, ok bool) {
	raw := r.RawRate()
	share := r.FPIShare()
	if raw == 0 || share == 0 || r.SinceCheckpoint < 0 {
		return raw, 0, 0, 0, 0, 0, false
	}
	rate = raw * share
	records = raw - rate
	cycle = r.CheckpointTimeout.Seconds()
	if r.MaxWALSize > 0 && records > 0 {
		cycle = min(cycle, float64(r.MaxWALSize)/records)
	}
	if cycle <= 0 {
		return raw, 0, 0, 0, 0, 0, false
	}
	since = min(r.SinceCheckpoint.Seconds(), cycle)
	end, tau = rate, math.Inf(1)
	var f1, f2 int64
	for i, p := range r.Parts {
		if i < len(r.Parts)/2 {
			f1 += p.FPI
		} else if len(r.Parts)%2 == 0 || i > len(r.Parts)/2 {
			f2 += p.FPI
		}
	}
	if len(r.Parts) >= 2 && f1 > 0 && f2 < f1 {
		half := r.Window.Seconds() / 2
		tau = half / math.Log(float64(f1)/math.Max(float64(f2), 0.5))
		// The second half's mean rate is the rate about its middle; at
		// the window's end, a rate dying away as exp(−t/tau) is that
		// mean × x/(exp(x) − 1), x = half/tau (0.82 of it at 20 GB,
		// where the images a copy met from 37 s after the window came
		// at half the rate the mean took for the end's).
		x := half / tau
		end = rate * 2 * float64(f2) / float64(f1+f2) * x / math.Expm1(x)
	}
	return records, rate, end, tau, cycle, since, true
}

// after is the images' bytes over the next d seconds from the window's
// end, their rate end dying away with tau.
func after(end, tau, d float64) float64 {
	if math.IsInf(tau, 1) {
		return end * d
	}
	return end * tau * (1 - math.Exp(-d/tau))
}

// SteadyRate is the WAL rate the model uses for the source's writes: its
// rate over a checkpoint cycle, not the burst of full-page images that
// follows a checkpoint. The first change to a page after a checkpoint
// writes the whole page, so just after one (a restart's, or the one the
// probe's window happens to follow) the WAL rate can be many times the
// rate of the records alone: under load, a 30-s window after a restart
// saw 5.6 MiB/s where the copy that followed saw 0.44 (cmd/reshard-bench
// -sections large at 20 GB). The rule:
//
//   - the records' own rate (the window's WAL without its images:
//     pg_stat_wal's wal_fpi × FPIBytes) is taken as it is;
//   - the images of a cycle (checkpoint_timeout, or less when
//     max_wal_size fills first) are those from the checkpoint's start to
//     the window's end, as if they had come no faster before the window
//     than in it, and those of the rest of the cycle, their rate at the
//     window's end dying away as it did from the window's first half to
//     its second (not at all when it did not slow: the pages being
//     touched for the first time are not running out);
//   - the rate is the records' plus the cycle's images over the cycle.
//
// A burst that dies within the window counts for the share of the cycle
// it took; images that keep coming count whole. Without the checkpoint's
// time (SinceCheckpoint < 0) the window's rate is taken as it is.
func (r WALReading) SteadyRate() float64 {
	records, rate, end, tau, cycle, since, ok := r.images()
	if !ok {
		return records
	}
	images := rate*since + after(end, tau, cycle-since)
	return records + images/cycle
}

// CopyWAL is the WAL the source writes over a copy of d that starts gap
// after the window's end: what the copy's slot keeps when it is created
// before the copy and streamed after it. The records come at their rate
// (the window's WAL without its images); the images are those the copy's
// own span of the checkpoint cycle meets, not the cycle's average
// (SteadyRate):
//
//   - in the rest of the window's cycle, the window's images at its end
//     dying away as they did in the window (SteadyRate's rule), from the
//     copy's start: a copy that starts late in its cycle meets only the
//     tail of the burst that followed the checkpoint;
//   - in each later cycle (the copy runs past a checkpoint), the images
//     of a cycle as SteadyRate counts them, those of its first part as a
//     burst that dies away the same way (evenly when it did not slow).
//
// A copy longer than a cycle comes to SteadyRate × d. The first rule took
// SteadyRate × d for every copy: at 20 GB (cmd/reshard-bench -sections
// large) a window 57 to 87 s after a checkpoint, 87 % images dying away
// with an e-folding time of 40 s, gave 810.7 KiB/s for a copy of 2m20s
// that started 2m4s into its 10-minute cycle and met 370.6 KiB/s, 29 %
// of it images: the images of the cycle's first minutes spread over it.
// Without the checkpoint's time (SinceCheckpoint < 0) the window's own
// rate is taken.
func (r WALReading) CopyWAL(gap, d time.Duration) float64 {
	records, rate, end, tau, cycle, since, ok := r.images()
	s := d.Seconds()
	if !ok || s <= 0 {
		return records * max(s, 0)
	}
	perCycle := rate*since + after(end, tau, cycle-since) // SteadyRate's images of a cycle
	// cum is the images from the window's end to t, t the time from the
	// start of the window's cycle.
	cum := func(t float64) float64 {
		if t <= cycle {
			return after(end, tau, t-since)
		}
		n := math.Floor((t - cycle) / cycle)
		x := t - cycle - n*cycle // into its cycle
		first := x / cycle       // the share of a cycle's images in its first x
		if !math.IsInf(tau, 1) {
			first = (1 - math.Exp(-x/tau)) / (1 - math.Exp(-cycle/tau))
		}
		return after(end, tau, cycle-since) + n*perCycle + first*perCycle
	}
	from := since + max(gap.Seconds(), 0)
	return records*s + cum(from+s) - cum(from)
}

// minFollowParts is the fewest sub-windows of about a second in which
// SteadyRate follows a reading's images by its halves: a backend flushes
// its WAL counters to pg_stat_wal at most once a second, each at its own
// moment, so a half of one or two parts can see a writer's flush twice or
// not at all. At 2 GB (cmd/reshard-bench -sections large -large-gb 2) a
// first tenth of 2 parts took 270.6 KiB/s for the cycle where the copy
// met about 0.8 MiB/s.
const minFollowParts = 6

// Followable says whether the reading has the parts (minFollowParts)
// that SteadyRate needs to see its images die away.
func (r WALReading) Followable() bool { return len(r.Parts) >= minFollowParts }

// SlotWALAt predicts the most WAL a move's slot retains from its copy
// under way, when the slot keeps the whole copy's WAL (created before
// the copy, streamed after it): retained, the slot's WAL measured now
// (pg_replication_slots: what the copy so far has made it keep, the
// images just after its creation or a checkpoint included, since those
// are kept), plus the source's WAL over the rest of the copy by the
// start's rule (CopyWAL: the records at their rate, the images of the
// rest's own span of the checkpoint cycle). The rest of the copy is at
// the copy's own rate: elapsed for copied of total rows.
//
// The reading is tenth's, of the copy so far (WALMeter), when it is
// Followable: the rest starts at its end. Else (a copy whose tenth took
// a few seconds) it is the start's, the probe's reading before the copy,
// the rest starting as long after its end as tenth ended after it.
//
// The rule before this one took the rest at SteadyRate, the images of a
// whole cycle spread over it: at 20 GB a tenth read 2m21s into its cycle
// (images dying away with an e-folding time of 35 s) gave 374.1 KiB/s
// for the rest, this rule 336, and the rest met 341 (40.9 MiB in its
// last 2m3s; TestSlotWALAtATenthOfSection20GB).
//
// The rule before it took the WAL of the copy so far over its time as
// the rate of the whole copy: the first tenth starts just after the
// slot's creation, often just after a checkpoint, and is full of images
// that die away, so it predicted +77 % and +152 % at 20 GB
// (docs/benchmarks.md, section large) where the start's prediction
// (SteadyRate × the copy) was +15 % and −19 %.
func SlotWALAt(retained int64, tenth, start WALReading, copied, total int64, elapsed time.Duration) int64 {
	if copied <= 0 || elapsed <= 0 || total <= copied {
		return retained
	}
	r, gap := tenth, time.Duration(0)
	if !r.Followable() {
		r = start
		if !tenth.End.IsZero() && !start.End.IsZero() {
			gap = max(tenth.End.Sub(start.End), 0)
		}
	}
	rest := elapsed.Seconds() * float64(total-copied) / float64(copied)
	return retained + int64(r.CopyWAL(gap, time.Duration(rest*float64(time.Second))))
}
