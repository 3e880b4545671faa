package capacity

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/reshard/reshard/cdc"
)

// Budget is what an operator says a shard can spare (reshard.yaml's
// capacity section); a zero field is not configured.
type Budget struct {
	// DiskBytes is the free space the shard has for a move's rows and
	// indexes when it is a target.
	DiskBytes int64 `json:"disk_bytes,omitempty" yaml:"disk_bytes"`
	// WALBytes is the WAL a move's slot may retain on the shard when it is a
	// source (below max_slot_wal_keep_size, or where that is unlimited).
	WALBytes int64 `json:"wal_budget_bytes,omitempty" yaml:"wal_budget_bytes"`
}

// ShardProbe is what the probe read from one shard.
type ShardProbe struct {
	Shard string `json:"shard"`
	// WALBytesPerSec is the shard's steady WAL rate, the one the model
	// uses: WAL.SteadyRate(), the full-page images after a checkpoint
	// spread over its cycle.
	WALBytesPerSec float64       `json:"wal_bytes_per_sec"`
	WALWindow      time.Duration `json:"wal_window"`
	// WAL is what the probe read over the window.
	WAL WALReading `json:"wal"`
	// MaxSlotWALKeep is max_slot_wal_keep_size in bytes, -1 when unlimited:
	// a slot that retains more is invalidated (wal_status lost).
	MaxSlotWALKeep int64 `json:"max_slot_wal_keep_size"`
	// MaxWALSize is max_wal_size in bytes: past it a slot's wal_status is
	// extended.
	MaxWALSize int64 `json:"max_wal_size"`
	// RTT is the median round trip of a trivial statement.
	RTT time.Duration `json:"rtt"`
	// Tables are the row changes the shard's tables of the moves made over
	// the WAL's window (pg_stat_user_tables), for the catch-up: its work is
	// these changes, decoded and applied, not the WAL's bytes (most of
	// which can be full-page images the stream skips).
	Tables []TableChanges `json:"tables,omitempty"`
	// Decode is the shard's logical decoding of the window's WAL, timed
	// (nil: not a source, or a plan stored before it was measured).
	Decode *DecodeReading `json:"decode,omitempty"`
}

// DecodeReading is a source's logical decoding timed: the WAL of the probe's
// window (Bytes, from a temporary slot's restart point) decoded by
// test_decoding in Time, Changes rows out; or why it was not measured.
// test_decoding formats every change of every table, where the stream's
// pgoutput sends only the moving tables' rows in the ranges: a lower bound
// of the stream's rate.
//
// StreamBytes (the same window from a second temporary slot's restart
// point) were streamed by the source's walsender in StreamTime, from
// START_REPLICATION until it had decoded past the window's end, over a
// replication connection made in StreamConnect: the stream's own path,
// which sends each message with its own send() and polls for replies at
// every WAL record (cdc/peek.go), and its start (the walsender reading the
// slot from its restart point). Section large at 1 GB streamed its slot's
// 14.1 MiB at 3.5 MiB/s where test_decoding's SQL peek of the window ran
// at 12.7 MiB/s. test_decoding sends every table's changes where pgoutput
// sends only the moving rows: an upper bound of the walsender's time.
// StreamNotMeasured: why not (a plan stored before has none of them).
type DecodeReading struct {
	Bytes             int64         `json:"bytes,omitempty"`
	Changes           int64         `json:"changes,omitempty"`
	Time              time.Duration `json:"time,omitempty"`
	NotMeasured       string        `json:"not_measured,omitempty"`
	StreamBytes       int64         `json:"stream_bytes,omitempty"`
	StreamTime        time.Duration `json:"stream_time,omitempty"`
	StreamConnect     time.Duration `json:"stream_connect,omitempty"`
	StreamNotMeasured string        `json:"stream_not_measured,omitempty"`
}

// StreamRate is the WAL the walsender decoded and sent a second (0: not
// measured).
func (d *DecodeReading) StreamRate() float64 {
	if d == nil {
		return 0
	}
	return rate(d.StreamBytes, d.StreamTime)
}

// Rate is the WAL decoded a second (0: not measured).
func (d *DecodeReading) Rate() float64 {
	if d == nil {
		return 0
	}
	return rate(d.Bytes, d.Time)
}

// TableChanges are the rows one table had inserted, updated and deleted
// (pg_stat_user_tables' n_tup_ins, n_tup_upd, n_tup_del) over a shard
// probe's WAL window.
type TableChanges struct {
	Table                     string `json:"table"`
	Inserts, Updates, Deletes int64
}

// Changes is all of them.
func (c TableChanges) Changes() int64 { return c.Inserts + c.Updates + c.Deletes }

// MoveProbe is what the probe measured for one move.
type MoveProbe struct {
	// Table is the table sampled (the move's largest by estimate).
	Table string `json:"table"`
	// SampleRows rows of Table were copied into a temporary table on the
	// target in CopyTime, and SampleBytes is their share of the table's
	// size (pg_table_size per row): the copy's rate in the units of the
	// estimates.
	SampleRows  int64         `json:"sample_rows"`
	SampleBytes int64         `json:"sample_bytes"`
	CopyTime    time.Duration `json:"copy_time"`
	// CopyChunks chunks (CopyWireBytes of binary COPY) were read in
	// CopyOrder ("pk" or "token"), as the copy reads them.
	CopyChunks    int64  `json:"copy_chunks,omitempty"`
	CopyOrder     string `json:"copy_order,omitempty"`
	CopyWireBytes int64  `json:"copy_wire_bytes,omitempty"`
	// CopyParts is how many parts of the key space the chunks were read
	// from in turn (backfill.ProbeStats.Segments; 1 or 0: from the first
	// key on).
	CopyParts int `json:"copy_parts,omitempty"`
	// VerifyRows rows (VerifyBytes) were checksummed on the source the way
	// verify does, by VerifyWorkers at once, in VerifyTime; and at the same
	// time, as verify reads both sides side by side with its workers on
	// each, VerifyTargetRows (VerifyTargetBytes) on the target, of the rows
	// the copy's sample wrote there. VerifySourceBusy and VerifyTargetBusy
	// are each side's time in its checksums (the mean over its workers).
	// A plan stored before the target was read has only the source's.
	VerifyRows        int64         `json:"verify_rows"`
	VerifyBytes       int64         `json:"verify_bytes"`
	VerifyTime        time.Duration `json:"verify_time"`
	VerifyWorkers     int           `json:"verify_workers,omitempty"`
	VerifyTargetRows  int64         `json:"verify_target_rows,omitempty"`
	VerifyTargetBytes int64         `json:"verify_target_bytes,omitempty"`
	VerifySourceBusy  time.Duration `json:"verify_source_busy,omitempty"`
	VerifyTargetBusy  time.Duration `json:"verify_target_busy,omitempty"`
	// VerifyChunks of the verify's VerifyPlanned chunks were checksummed,
	// taken spread over the table (verify.ProbeStats).
	VerifyChunks  int64 `json:"verify_chunks,omitempty"`
	VerifyPlanned int   `json:"verify_planned,omitempty"`
	// Load is what else ran while the probe measured.
	Load ProbeLoad `json:"load"`
	// FenceTime is one CREATE OR REPLACE FUNCTION of a fence-sized plpgsql
	// function on each side (rolled back): the work of a fence step per
	// table.
	FenceTime time.Duration `json:"fence_time"`
	// ApplyChanges row changes were applied to the rows the copy's probe
	// wrote, by the stream's own statements and batches (cdc.ProbeApply:
	// deletes, updates and inserts in the source's proportions, staged
	// when ApplyStaged) in ApplyTime, in the same rolled-back transaction.
	ApplyChanges int64         `json:"apply_changes,omitempty"`
	ApplyTime    time.Duration `json:"apply_time,omitempty"`
	ApplyStaged  bool          `json:"apply_staged,omitempty"`
	// The cleanup's work, timed without deleting an application row:
	// CleanupFindRows moving rows found on the source by the cleanup's
	// batches' search (its statement without the DELETE, read only, in
	// CleanupBatchRows-row batches: the rows outside the ranges read and
	// passed over too) in CleanupFindTime; CleanupDeleteRows of the copied
	// rows deleted on the target by their ctid, as the cleanup deletes
	// them, in CleanupDeleteTime (in the copy's probe's transaction, rolled
	// back: pages written in that transaction, so no full-page image);
	// ImageBytes of page-sized WAL records written on the source in
	// ImageTime, flushed (timeImages), for the images the deletes write,
	// or why not (ImageNotMeasured). Zero in a plan stored before they
	// were measured: the cleanup is then taken at the verify's rate.
	CleanupFindRows   int64         `json:"cleanup_find_rows,omitempty"`
	CleanupFindTime   time.Duration `json:"cleanup_find_time,omitempty"`
	CleanupDeleteRows int64         `json:"cleanup_delete_rows,omitempty"`
	CleanupDeleteTime time.Duration `json:"cleanup_delete_time,omitempty"`
	ImageBytes        int64         `json:"image_bytes,omitempty"`
	ImageTime         time.Duration `json:"image_time,omitempty"`
	ImageNotMeasured  string        `json:"image_not_measured,omitempty"`
	// Done is when the probe ended (zero in a plan stored before it was
	// recorded): the copy starts no sooner, so its source's WAL window
	// (WALReading.End) ended at least Done − End before it.
	Done time.Time `json:"done,omitzero"`
}

// ProbeLoad is what else ran while a move's probe measured: the rates it
// took are the rates under that load.
type ProbeLoad struct {
	// SourceActive and TargetActive are the other sessions running a
	// statement on each server (pg_stat_activity, the mean of samples a
	// second apart).
	SourceActive float64 `json:"source_active"`
	TargetActive float64 `json:"target_active"`
	// HostLoad is the highest 1-minute load average of the host the probe
	// ran on (0: not read): the servers' own when they share it.
	HostLoad float64 `json:"host_load,omitempty"`
}

// CopyRate is the sampled copy's rate in table bytes/s (0: not measured).
func (p MoveProbe) CopyRate() float64 { return rate(p.SampleBytes, p.CopyTime) }

// VerifyRate is the sampled verify's rate in table bytes/s a side (0: not
// measured): with both sides read, the mean of the two sides' bytes over
// the time the pair took (the probe gives each side about as many rows);
// with the source alone (a plan stored before), its bytes over its time.
func (p MoveProbe) VerifyRate() float64 {
	if p.VerifyTargetBytes > 0 {
		return rate((p.VerifyBytes+p.VerifyTargetBytes)/2, p.VerifyTime)
	}
	return rate(p.VerifyBytes, p.VerifyTime)
}

// ApplyRate is the sampled applier's rate in row changes/s (0: not measured).
func (p MoveProbe) ApplyRate() float64 { return rate(p.ApplyChanges, p.ApplyTime) }

func rate(bytes int64, d time.Duration) float64 {
	if bytes <= 0 || d <= 0 {
		return 0
	}
	return float64(bytes) / d.Seconds()
}

// Measured is m with its copy's own rate for the probe's: rows copied in
// elapsed, as the copy reports them (backfill.Progress), in the
// estimate's bytes (Bytes/Rows a row). Predict then gives the move's
// figures again, at a tenth of its copy say, from what the copy met
// rather than from a sample taken before it.
func (m Move) Measured(rows int64, elapsed time.Duration) Move {
	if rows <= 0 || elapsed <= 0 || m.Rows <= 0 {
		return m
	}
	m.Probe.SampleRows = rows
	m.Probe.SampleBytes = int64(float64(rows) * float64(m.Bytes) / float64(m.Rows))
	m.Probe.CopyTime = elapsed
	m.Probe.CopyChunks, m.Probe.CopyOrder, m.Probe.CopyParts = 0, "the move's own copy", 0
	return m
}

// Move is one move as the model sees it: the plan's estimates and the probe.
type Move struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	Target string `json:"target"`
	Tables int    `json:"tables"`
	// Rows and Bytes are the plan's estimate of the moving rows (bytes:
	// their share of pg_table_size, TOAST included); IndexBytes their share
	// of the tables' indexes on the source.
	Rows       int64 `json:"rows"`
	Bytes      int64 `json:"bytes"`
	IndexBytes int64 `json:"index_bytes"`
	// SetBytes is the size of the set's tables on the source (pg_table_size):
	// the share of the source's writes that falls in the moving ranges is
	// taken as Bytes/SetBytes.
	SetBytes int64     `json:"set_bytes"`
	Probe    MoveProbe `json:"probe"`
	// Changes is the application's row changes to the move's tables on
	// the source, what the catch-up applies (Window 0: not measured).
	Changes ChangeRate `json:"changes,omitzero"`
}

// ChangeRate is the row changes the application makes to a move's tables
// on its source, measured over the shard probe's WAL window.
type ChangeRate struct {
	Window time.Duration `json:"window"`
	// Inserts, Updates and Deletes were counted in the move's tables, all
	// their rows, over Window.
	Inserts, Updates, Deletes int64
	// Moving is the changes a second that fall in the moving ranges: each
	// table's rate × the ranges' share of its bytes (the estimates').
	Moving float64 `json:"moving_per_sec"`
}

// Tables is the changes a second to the move's tables, all their rows.
func (c ChangeRate) Tables() float64 {
	if c.Window <= 0 {
		return 0
	}
	return float64(c.Inserts+c.Updates+c.Deletes) / c.Window.Seconds()
}

// Options are the migration's knobs the model follows.
type Options struct {
	// RowsPerSec and BytesPerSec are the copy's throttle per move (0: none).
	RowsPerSec, BytesPerSec float64
	// MaxParallelMoves and MaxMovesPerShard bound how many moves run at
	// once (0: no bound); moves sharing a shard share its probed rate.
	MaxParallelMoves, MaxMovesPerShard int
	// CutoverBudget bounds the write pause (over it the cutover aborts and
	// retries).
	CutoverBudget time.Duration
	// StreamDuringCopy: the moves' streams run during their copies through
	// the copy gate (backfill.Options.StreamDuringCopy), so a slot retains
	// StreamRetention of the source's WAL, not the copy's length of it, and
	// the catch-up drains only the changes of that time.
	StreamDuringCopy bool
}

// StreamRetention is how much of the source's WAL, as time, the slot of a
// stream that keeps up retains: the slot's restart_lsn moves only to a
// point the decoder found at an xl_running_xacts record, which the source
// logs every 15 s while it is busy (LOG_SNAPSHOT_INTERVAL_MS), and only
// once the confirmed position has passed the next one: up to two
// intervals, plus the stream's status interval (2 s). Measured
// (cmd/reshard-bench -sections capstream, a 5-minute copy under about
// 1.6 MiB/s of WAL): a peak of 49.5 MiB, 31 s of WAL, with the stream's
// own lag under 1 MiB.
const StreamRetention = 32 * time.Second

// MovePrediction is the model's figures for one move.
type MovePrediction struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	Target string `json:"target"`
	// CopyBytesPerSec is the rate the copy is predicted to run at: the
	// probe's, shared with the moves running beside it on the same shards,
	// capped by the throttle.
	CopyBytesPerSec float64 `json:"copy_bytes_per_sec"`
	Copy            Seconds `json:"copy_seconds"`
	CatchUp         Seconds `json:"catch_up_seconds"`
	Verify          Seconds `json:"verify_seconds"`
	// Cleanup is the deletion of the moved rows on the source, in
	// batches that walk its primary key (backfill.DeleteRanges): the
	// search of the moving rows among all the source's at the probe's
	// rate (MoveProbe.CleanupFindRows), their deletes at the target's
	// (CleanupDeleteRows), and the full-page images of the pages they
	// are deleted from (cleanupImages, an upper bound) at the rate the
	// source wrote page-sized WAL (ImageBytes): CleanupFind,
	// CleanupDelete and CleanupImages, their sum. A delete probe on the
	// source itself would lock the application's rows. Without those
	// probes (a plan stored before), the verify's rate, which predicted
	// it short: 1m9s for 1m26s at 20 GB (cmd/reshard-bench -sections
	// large), −5 to −56 % in TestPredictedCopyMatchesTheCopy (tag e2e).
	Cleanup       Seconds `json:"cleanup_seconds"`
	CleanupFind   Seconds `json:"cleanup_find_seconds,omitempty"`
	CleanupDelete Seconds `json:"cleanup_delete_seconds,omitempty"`
	CleanupImages Seconds `json:"cleanup_images_seconds,omitempty"`
	WritePause    Seconds `json:"write_pause_seconds"`
	// SlotWAL is the most WAL the move's slot retains: the source's WAL
	// over the copy when the stream starts after the copy (its records,
	// and the images of the copy's own span of its checkpoint cycle:
	// WALReading.CopyWAL), its rate × StreamRetention when the stream
	// runs during it (Options.StreamDuringCopy).
	SlotWAL int64 `json:"slot_wal_bytes"`
	// TargetGrowth is the rows and indexes the target gains.
	TargetGrowth int64 `json:"target_growth_bytes"`
	// CleanupWAL is the WAL the source writes deleting the moved rows.
	CleanupWAL int64 `json:"cleanup_wal_bytes"`
	// ChangesPerSec is the row changes a second the application makes in
	// the moving ranges, HeldChanges those the slot holds when the stream
	// starts (the copy's, or StreamRetention's with the stream during the
	// copy), ApplyChangesPerSec the stream's rate applying them (the
	// probe's, shared like the copy's): the catch-up is HeldChanges /
	// (ApplyChangesPerSec − ChangesPerSec). Zero in a plan stored before
	// they were measured.
	ChangesPerSec      float64 `json:"changes_per_sec,omitempty"`
	HeldChanges        int64   `json:"held_changes,omitempty"`
	ApplyChangesPerSec float64 `json:"apply_changes_per_sec,omitempty"`
	// DecodeBytesPerSec is the source's logical decoding of its WAL a
	// second (ShardProbe.Decode, shared by the moves from the source at
	// once; 0: not measured). The walsender reads every byte the slot
	// holds, so the catch-up takes at least SlotWAL / (DecodeBytesPerSec −
	// the source's WAL rate); DecodeBound: that is the longer of the two.
	DecodeBytesPerSec float64 `json:"decode_bytes_per_sec,omitempty"`
	DecodeBound       bool    `json:"decode_bound,omitempty"`
	// DecodeStreamed: DecodeBytesPerSec is the walsender's streaming rate
	// (DecodeReading.StreamTime), and the decoding's term starts after
	// its replication connection (StreamConnect); else test_decoding's
	// SQL rate, which leaves the walsender's sending out.
	DecodeStreamed bool `json:"decode_streamed,omitempty"`
	// DecodePeekedBytes of the slot's WAL, past cdc.DefaultPeekCatchUpBytes
	// of lag, are read by SQL peeks at the SQL rate (DecodeReading.Rate)
	// before the walsender streams the rest.
	DecodePeekedBytes int64 `json:"decode_peeked_bytes,omitempty"`
	// Basis says where the figures come from.
	Basis string `json:"basis"`
	// Converges is false when the changes to the moving ranges come no
	// slower than the stream applies them: the catch-up would never end.
	Converges bool `json:"converges"`
}

// Total is the predicted time to the cutover: copy, catch-up and verify.
func (m MovePrediction) Total() time.Duration {
	return (m.Copy + m.CatchUp + m.Verify).Duration()
}

// ShardPrediction is the model's figures for one shard.
type ShardPrediction struct {
	Shard          string  `json:"shard"`
	WALBytesPerSec float64 `json:"wal_bytes_per_sec"`
	// PeakSlotWAL is the most WAL a slot of a move from this shard retains
	// (each move's slot holds the WAL of its own copy); 0 when the shard is
	// no source.
	PeakSlotWAL int64 `json:"peak_slot_wal_bytes"`
	// WALBudget is the budget PeakSlotWAL is held to (-1: none) and
	// WALBudgetFrom what sets it.
	WALBudget     int64  `json:"wal_budget_bytes"`
	WALBudgetFrom string `json:"wal_budget_from,omitempty"`
	// TargetGrowth is what the shard gains as a target; DiskBytes the free
	// space configured for it (0: not configured).
	TargetGrowth int64 `json:"target_growth_bytes"`
	DiskBytes    int64 `json:"disk_bytes,omitempty"`
}

// Refusal is a reason the plan cannot run: the shard, the figures, the fix.
type Refusal struct {
	Shard   string `json:"shard"`
	Check   string `json:"check"` // "wal" or "disk"
	Problem string `json:"problem"`
	Fix     string `json:"fix"`
}

func (r Refusal) Error() string { return r.Shard + ": " + r.Problem + "; fix: " + r.Fix }

// Report is a migration's predicted cost.
type Report struct {
	Moves    []MovePrediction  `json:"moves"`
	Shards   []ShardPrediction `json:"shards"`
	Refusals []Refusal         `json:"refusals,omitempty"`
	Warnings []string          `json:"warnings,omitempty"`
	// Probes are the shards' readings the figures come from.
	Probes []ShardProbe `json:"probes,omitempty"`
}

// Seconds is a duration that reads as seconds in JSON.
type Seconds float64

// Duration is s as a time.Duration.
func (s Seconds) Duration() time.Duration { return time.Duration(float64(s) * float64(time.Second)) }

func secs(d float64) Seconds {
	if math.IsInf(d, 0) || math.IsNaN(d) {
		return -1
	}
	return Seconds(d)
}

// deleteRecord is the WAL of one heap tuple's DELETE record without its
// key (PostgreSQL 15: record header, block reference, xl_heap_delete, with
// wal_level=logical the old key): a format size, not a speed.
const deleteRecord = 64

// pageSize is PostgreSQL's block size (BLCKSZ), the size of a full-page
// image.
const pageSize = 8192

// cleanupWAL is the WAL the source writes deleting m's rows: a DELETE
// record per row, and a full-page image of every page it deletes from (the
// first change to a page after a checkpoint writes one). The moving rows
// are spread over the whole table by their token, not gathered in the
// moving share of its pages: a page of r rows keeps none of them with
// probability (1-f)^r, f the moving share, so the pages touched are the
// table's pages × (1 - (1-f)^r), r from the moving rows' width, and no
// fewer than the moving rows' own bytes. A fifth of
// a table of 13 rows a page touches 95 % of its pages: cmd/reshard-bench
// -sections large measured 642.5 MiB of WAL deleting a fifth (0.19 GiB) of
// a 0.93 GiB table, where the moving bytes alone predicted 213.9 MiB and
// this predicts 928.5 MiB. It is an upper bound: TOAST pages, which hold a
// few long values each, are counted as if they held rows of the average
// width, and a full-page image leaves out the page's free space.
func cleanupWAL(m Move) int64 {
	if m.Rows <= 0 || m.Bytes <= 0 {
		return 0
	}
	return int64(cleanupImages(m)) + m.Rows*deleteRecord
}

// cleanupImages is the bytes of the source's pages the cleanup deletes
// from, each page writing a full-page image (cleanupWAL).
func cleanupImages(m Move) float64 {
	if m.Rows <= 0 || m.Bytes <= 0 {
		return 0
	}
	table := max(m.SetBytes, m.Bytes)
	f := float64(m.Bytes) / float64(table)
	perPage := pageSize * float64(m.Rows) / float64(m.Bytes)
	// Rows wider than a page (TOAST) touch at least their own pages.
	touched := max(float64(table)*(1-math.Pow(1-f, perPage)), float64(m.Bytes))
	return touched
}

// cleanupTime sets p's cleanup from the cleanup's probes
// (MovePrediction.Cleanup): the move's rows found at the source's search
// rate and deleted at the target's delete rate, and its pages' images
// written at the source's rate of page-sized WAL; no faster than the
// throttle's rows per second (the cleanup takes the copy's rows limit).
// Without the probes p keeps the verify's rate.
func cleanupTime(p *MovePrediction, m Move, o Options) {
	pr := m.Probe
	find, del, img := rate(pr.CleanupFindRows, pr.CleanupFindTime), rate(pr.CleanupDeleteRows, pr.CleanupDeleteTime), rate(pr.ImageBytes, pr.ImageTime)
	if find == 0 || del == 0 || img == 0 || m.Rows <= 0 {
		return
	}
	p.CleanupFind = secs(float64(m.Rows) / find)
	p.CleanupDelete = secs(float64(m.Rows) / del)
	p.CleanupImages = secs(cleanupImages(m) / img)
	s := float64(p.CleanupFind + p.CleanupDelete + p.CleanupImages)
	if o.RowsPerSec > 0 {
		s = max(s, float64(m.Rows)/o.RowsPerSec)
	}
	p.Cleanup = secs(s)
}

// fenceRoundTrips is how many statements a cutover sends to each side
// between the fence and the unfence besides the fence functions (lock,
// read, write, in-flight wait, marker, commit): the count in
// cutover.Run's steps.
const fenceRoundTrips = 8

// Predict computes the report from the moves, the shards' probes and the
// budgets. Pure.
func Predict(moves []Move, shards map[string]ShardProbe, budgets map[string]Budget, o Options) Report {
	var rep Report
	// Moves sharing a shard share its rate: as many as run at once.
	perShard := map[string]int{}
	for _, m := range moves {
		perShard[m.Source]++
		perShard[m.Target]++
	}
	running := func(shard string) int {
		n := perShard[shard]
		if o.MaxMovesPerShard > 0 {
			n = min(n, o.MaxMovesPerShard)
		}
		if o.MaxParallelMoves > 0 {
			n = min(n, o.MaxParallelMoves)
		}
		return max(n, 1)
	}
	peak := map[string]int64{}
	growth := map[string]int64{}
	for _, m := range moves {
		src := shards[m.Source]
		p := MovePrediction{ID: m.ID, Source: m.Source, Target: m.Target, Converges: true}
		probeRate := m.Probe.CopyRate()
		share := max(running(m.Source), running(m.Target))
		r := probeRate / float64(share)
		if o.BytesPerSec > 0 && (r == 0 || o.BytesPerSec < r) {
			r = o.BytesPerSec
		}
		if o.RowsPerSec > 0 && m.Rows > 0 {
			if br := o.RowsPerSec * float64(m.Bytes) / float64(m.Rows); r == 0 || br < r {
				r = br
			}
		}
		p.CopyBytesPerSec = r
		copyS := 0.0
		if m.Bytes > 0 && r > 0 {
			copyS = float64(m.Bytes) / r
		} else if m.Bytes > 0 {
			// Nothing sampled (the probe found no row): not guessed.
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("move %s: the probe copied no row, so its durations and WAL are not predicted", m.ID))
		}
		p.Copy = secs(copyS)
		// The slot is created before the copy and streamed after it: it
		// keeps the copy's WAL; streamed during it, StreamRetention's.
		held := copyS
		if o.StreamDuringCopy && copyS > 0 {
			held = min(copyS, StreamRetention.Seconds())
		}
		// The source's WAL over the copy's own span of its checkpoint
		// cycle (WALReading.CopyWAL), the copy starting once the move's
		// probe has ended (PLAN runs just before JOINING and the copy);
		// without the window's reading (a plan stored before it was
		// kept), or with the stream during the copy (its slot keeps the
		// WAL of a lag that moves through the cycle with the copy), the
		// source's rate over a cycle (SteadyRate).
		p.SlotWAL = int64(src.WALBytesPerSec * held)
		if !o.StreamDuringCopy && src.WAL.Window > 0 && held > 0 {
			var gap time.Duration
			if !m.Probe.Done.IsZero() && !src.WAL.End.IsZero() {
				gap = max(m.Probe.Done.Sub(src.WAL.End), 0)
			}
			p.SlotWAL = int64(src.WAL.CopyWAL(gap, time.Duration(held*float64(time.Second))))
		}
		rep.Warnings = append(rep.Warnings, catchUp(&p, m, src, copyS, held, share, running(m.Source))...)
		// Verify reads both sides side by side at the rate the probe's pair
		// of sides achieved (VerifyRate), and no faster than the throttle's
		// rows per second (verify takes the copy's rows limit per side: at
		// 100 rows/s a 7,500-row move verified in 1m20s against a
		// prediction of 107ms).
		if vr := m.Probe.VerifyRate(); vr > 0 {
			verifyS := float64(m.Bytes) / vr
			if o.RowsPerSec > 0 {
				verifyS = max(verifyS, float64(m.Rows)/o.RowsPerSec)
			}
			p.Verify = secs(verifyS)
			p.Cleanup = secs(float64(m.Bytes) / vr)
		}
		cleanupTime(&p, m, o)
		p.CleanupWAL = cleanupWAL(m)
		p.TargetGrowth = m.Bytes + m.IndexBytes
		tgt := shards[m.Target]
		pause := time.Duration(m.Tables)*2*m.Probe.FenceTime + fenceRoundTrips*(src.RTT+tgt.RTT)
		if o.CutoverBudget > 0 {
			pause = min(pause, o.CutoverBudget)
		}
		p.WritePause = Seconds(pause.Seconds())
		p.Basis = basis(m, share, src)
		peak[m.Source] = max(peak[m.Source], p.SlotWAL)
		growth[m.Target] += p.TargetGrowth
		rep.Moves = append(rep.Moves, p)
	}
	names := make([]string, 0, len(perShard))
	for n := range perShard {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sp := ShardPrediction{Shard: n, WALBytesPerSec: shards[n].WALBytesPerSec, PeakSlotWAL: peak[n], TargetGrowth: growth[n],
			DiskBytes: budgets[n].DiskBytes}
		sp.WALBudget, sp.WALBudgetFrom = walBudget(shards[n], budgets[n])
		rep.Shards = append(rep.Shards, sp)
		if sp.WALBudget >= 0 && sp.PeakSlotWAL > sp.WALBudget {
			rep.Refusals = append(rep.Refusals, walRefusal(sp, rep.Moves, o))
		}
		if sp.DiskBytes > 0 && sp.TargetGrowth > sp.DiskBytes {
			rep.Refusals = append(rep.Refusals, Refusal{Shard: n, Check: "disk",
				Problem: fmt.Sprintf("as a target it grows by %s (the moving rows and their indexes) but disk_bytes in reshard.yaml gives it %s",
					HumanBytes(sp.TargetGrowth), HumanBytes(sp.DiskBytes)),
				Fix: fmt.Sprintf("free space on %s and raise its disk_bytes to at least %s, or move less to it at once (fewer ranges, or another target)",
					n, HumanBytes(sp.TargetGrowth))})
		}
	}
	return rep
}

// catchUp sets p's catch-up: the changes to the moving ranges held over
// held seconds (of a copyS-second copy) applied at the applier's rate,
// shared by share moves, and the slot's WAL decoded at the source's rate,
// shared by the srcRunning moves from it; it returns the warnings.
func catchUp(p *MovePrediction, m Move, src ShardProbe, copyS, held float64, share, srcRunning int) (warns []string) {
	// The catch-up applies the changes to the moving ranges the slot
	// held while the source keeps making them: held changes / (apply −
	// incoming). Its work is rows, not WAL bytes: most of a busy
	// source's WAL can be full-page images, which the stream skips
	// (87-95 % of the writers' WAL in cmd/reshard-bench -sections large).
	incoming := m.Changes.Moving
	apply := m.Probe.ApplyRate() / float64(share)
	p.ChangesPerSec, p.ApplyChangesPerSec = incoming, apply
	p.HeldChanges = int64(incoming * held)
	switch {
	case copyS == 0:
	case m.Changes.Window <= 0:
		warns = append(warns, fmt.Sprintf("move %s: the catch-up is not predicted: the probe measured no change rate of its tables", m.ID))
	case apply == 0:
		warns = append(warns, fmt.Sprintf("move %s: the catch-up is not predicted: the probe did not time the applier", m.ID))
	case incoming == 0:
	case apply > incoming:
		p.CatchUp = secs(incoming * held / (apply - incoming))
	default:
		p.CatchUp, p.Converges = -1, false
		warns = append(warns, fmt.Sprintf("move %s: the application changes about %.0f rows/s in the moving ranges on %s, no fewer than the stream applies (%.0f/s): the catch-up may not converge; throttle the application's writes to these ranges or split the migration",
			m.ID, incoming, m.Source, apply))
	}
	// The source's walsender decodes every byte the slot holds, other
	// tables' changes and full-page images too, while the source keeps
	// writing; it runs beside the applier, so the catch-up is the
	// longer of the two.
	// Streamed by the walsender, as the stream reads it, when the probe
	// timed it (DecodeReading.StreamTime), after its replication
	// connection; else at test_decoding's SQL rate. A stream more than
	// cdc.DefaultPeekCatchUpBytes behind reads by SQL peeks until it is
	// that close (cdc/peek.go), then streams the rest: the WAL past that
	// at the SQL rate, the last of it at the walsender's.
	sql := src.Decode.Rate() / float64(srcRunning)
	dec, connect, peeked := sql, 0.0, 0.0
	if sr := src.Decode.StreamRate(); sr > 0 {
		dec, connect = sr/float64(srcRunning), src.Decode.StreamConnect.Seconds()
		p.DecodeStreamed = true
		if over := float64(p.SlotWAL - cdc.DefaultPeekCatchUpBytes); over > 0 && sql > src.WALBytesPerSec {
			p.DecodePeekedBytes = int64(over)
			peeked = over / (sql - src.WALBytesPerSec)
		}
	}
	p.DecodeBytesPerSec = dec
	switch {
	case dec == 0 || copyS == 0 || !p.Converges:
	case dec > src.WALBytesPerSec:
		if d := peeked + connect + float64(p.SlotWAL-p.DecodePeekedBytes)/(dec-src.WALBytesPerSec); d > float64(p.CatchUp) {
			p.CatchUp, p.DecodeBound = secs(d), true
		}
	default:
		p.CatchUp, p.Converges = -1, false
		warns = append(warns, fmt.Sprintf("move %s: %s writes %s/s of WAL, no slower than it decodes it (%s/s): the catch-up may not converge; throttle the application's writes or split the migration",
			m.ID, m.Source, HumanBytes(int64(src.WALBytesPerSec)), HumanBytes(int64(dec))))
	}
	return warns
}

// walBudget is the WAL a new slot on the shard may retain: the lower of
// max_slot_wal_keep_size (pg_replication_slots.safe_wal_size of a slot
// created now) and the configured budget; -1 when neither is set.
func walBudget(p ShardProbe, b Budget) (int64, string) {
	switch {
	case p.MaxSlotWALKeep >= 0 && b.WALBytes > 0 && b.WALBytes < p.MaxSlotWALKeep, p.MaxSlotWALKeep < 0 && b.WALBytes > 0:
		return b.WALBytes, "wal_budget_bytes in reshard.yaml"
	case p.MaxSlotWALKeep >= 0:
		return p.MaxSlotWALKeep, "max_slot_wal_keep_size"
	}
	return -1, ""
}

func walRefusal(sp ShardPrediction, moves []MovePrediction, o Options) Refusal {
	var worst MovePrediction
	n := 0
	for _, m := range moves {
		if m.Source == sp.Shard {
			n++
			if m.SlotWAL >= worst.SlotWAL {
				worst = m
			}
		}
	}
	problem := fmt.Sprintf("move %s's slot would retain %s of WAL (what the source writes over the %s of its copy, %s/s over a checkpoint cycle: the stream starts after the copy) but the budget is %s (%s)",
		worst.ID, HumanBytes(sp.PeakSlotWAL), worst.Copy.Duration().Round(time.Second), HumanBytes(int64(sp.WALBytesPerSec)), HumanBytes(sp.WALBudget), sp.WALBudgetFrom)
	var fixes []string
	if sp.WALBytesPerSec > 0 && worst.CopyBytesPerSec > 0 {
		fits := float64(sp.WALBudget) / sp.WALBytesPerSec // the longest copy that fits
		need := worst.CopyBytesPerSec * worst.Copy.Duration().Seconds() / fits
		if o.RowsPerSec > 0 || o.BytesPerSec > 0 {
			fixes = append(fixes, fmt.Sprintf("a faster throttle (the copy must take under %s: at least %s/s)", time.Duration(fits*float64(time.Second)).Round(time.Second), HumanBytes(int64(need))))
		}
	}
	if n > 1 || o.MaxMovesPerShard != 1 {
		fixes = append(fixes, "fewer parallel moves (--max-moves-per-shard 1) or fewer ranges at once")
	}
	fixes = append(fixes, fmt.Sprintf("a bigger budget (max_slot_wal_keep_size, or wal_budget_bytes of %s in reshard.yaml, of at least %s, with that much free space for pg_wal)", sp.Shard, HumanBytes(sp.PeakSlotWAL)))
	fix := fixes[0]
	for _, f := range fixes[1:] {
		fix += "; or " + f
	}
	return Refusal{Shard: sp.Shard, Check: "wal", Problem: problem, Fix: fix}
}

func basis(m Move, share int, src ShardProbe) string {
	p := m.Probe
	if p.SampleRows == 0 {
		return "no rows to sample: durations not calibrated"
	}
	parts := ""
	if p.CopyParts > 1 {
		parts = fmt.Sprintf(", from %d parts of its key space in turn", p.CopyParts)
	}
	s := fmt.Sprintf("%d rows of %s copied as the copy does (%d chunks by %s%s, written into a table rolled back) in %s (%s/s), ",
		p.SampleRows, p.Table, p.CopyChunks, p.CopyOrder, parts, p.CopyTime.Round(time.Millisecond), HumanBytes(int64(p.CopyRate())))
	if p.VerifyTargetRows > 0 {
		s += fmt.Sprintf("checksummed as the verify does, both sides at once (%d workers a side): %d rows on %s (busy %s, %s/s) beside %d of the copied rows on %s (busy %s, %s/s) in %s (%s/s a side)",
			p.VerifyWorkers, p.VerifyRows, m.Source, p.VerifySourceBusy.Round(time.Millisecond), HumanBytes(int64(rate(p.VerifyBytes, p.VerifySourceBusy))),
			p.VerifyTargetRows, m.Target, p.VerifyTargetBusy.Round(time.Millisecond), HumanBytes(int64(rate(p.VerifyTargetBytes, p.VerifyTargetBusy))),
			p.VerifyTime.Round(time.Millisecond), HumanBytes(int64(p.VerifyRate())))
	} else {
		s += fmt.Sprintf("%d checksummed as the verify does on %s alone (%d workers) in %s (%s/s)",
			p.VerifyRows, m.Source, p.VerifyWorkers, p.VerifyTime.Round(time.Millisecond), HumanBytes(int64(p.VerifyRate())))
	}
	if p.VerifyPlanned > 0 {
		s += fmt.Sprintf(" (%d of its %d planned chunks, spread over the table)", p.VerifyChunks, p.VerifyPlanned)
	}
	l := p.Load
	s += fmt.Sprintf("; meanwhile %.1f other active sessions on %s and %.1f on %s", l.SourceActive, m.Source, l.TargetActive, m.Target)
	if l.HostLoad > 0 {
		s += fmt.Sprintf(", load average %.1f on the prober's host", l.HostLoad)
	}
	if share > 1 {
		s += fmt.Sprintf("; the rate shared by %d moves at once", share)
	}
	return s + catchUpBasis(m, src) + cleanupBasis(p)
}

// cleanupBasis says where the cleanup's figure comes from.
func cleanupBasis(p MoveProbe) string {
	if p.CleanupFindRows == 0 || p.CleanupDeleteRows == 0 {
		return "; cleanup: not probed, taken at the verify's rate"
	}
	s := fmt.Sprintf("; cleanup: %d moving rows found on the source by its batches' search (read only) in %s (%.0f/s), %d of the copied rows deleted by ctid on the target (rolled back) in %s (%.0f/s)",
		p.CleanupFindRows, p.CleanupFindTime.Round(time.Millisecond), rate(p.CleanupFindRows, p.CleanupFindTime),
		p.CleanupDeleteRows, p.CleanupDeleteTime.Round(time.Millisecond), rate(p.CleanupDeleteRows, p.CleanupDeleteTime))
	if p.ImageNotMeasured != "" {
		return s + "; its page images not timed (" + p.ImageNotMeasured + "), so taken at the verify's rate"
	}
	return s + fmt.Sprintf(", %s of page-sized WAL written and flushed on the source (rolled back) in %s (%s/s) for its page images",
		HumanBytes(p.ImageBytes), p.ImageTime.Round(time.Millisecond), HumanBytes(int64(rate(p.ImageBytes, p.ImageTime))))
}

// catchUpBasis says where the catch-up's figures come from.
func catchUpBasis(m Move, src ShardProbe) string {
	c, p := m.Changes, m.Probe
	if c.Window <= 0 {
		return "; catch-up: the changes to its tables not measured"
	}
	s := fmt.Sprintf("; catch-up: %.0f row changes/s in the moving ranges, of %.0f/s to its tables (%d inserts, %d updates, %d deletes over the %s WAL window; each table's by the ranges' share of its bytes)",
		c.Moving, c.Tables(), c.Inserts, c.Updates, c.Deletes, c.Window.Round(time.Millisecond))
	if p.ApplyChanges == 0 {
		return s + ", the applier not timed"
	}
	how := "text[] statements"
	if p.ApplyStaged {
		how = "staged"
	}
	s += fmt.Sprintf(", %d applied as the stream applies them (%s, to the copied rows, rolled back) in %s (%.0f/s)",
		p.ApplyChanges, how, p.ApplyTime.Round(time.Millisecond), p.ApplyRate())
	switch d := src.Decode; {
	case d == nil:
		return s + "; the source's decoding not measured"
	case d.NotMeasured != "":
		return s + "; the source's decoding not measured: " + d.NotMeasured
	}
	d := src.Decode
	s += fmt.Sprintf("; the window's %s of WAL decoded on %s in %s (%s/s, test_decoding, %d changes out)",
		HumanBytes(d.Bytes), m.Source, d.Time.Round(time.Millisecond), HumanBytes(int64(d.Rate())), d.Changes)
	if d.StreamRate() == 0 {
		if d.StreamNotMeasured != "" {
			return s + "; not streamed through a walsender: " + d.StreamNotMeasured
		}
		return s
	}
	return s + fmt.Sprintf(", and %s of it streamed by its walsender in %s (%s/s) after a replication connection of %s",
		HumanBytes(d.StreamBytes), d.StreamTime.Round(time.Millisecond), HumanBytes(int64(d.StreamRate())), d.StreamConnect.Round(time.Millisecond))
}

// HumanBytes formats n in binary units.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < 0 {
		return "-" + HumanBytes(-n)
	}
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	exp := min(int(math.Log(float64(n))/math.Log(unit)), 5)
	return fmt.Sprintf("%.1f %ciB", float64(n)/math.Pow(unit, float64(exp)), "KMGTP"[exp-1])
}
