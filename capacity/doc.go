// Package capacity predicts what a migration will cost before anything
// moves, from a short probe of the real servers, and refuses a plan that
// cannot fit (DESIGN.md §7, "Capacity is predicted, not discovered").
//
// Invariant: the probe changes nothing. It reads the source's WAL position
// and pg_stat_wal over a window (the WAL rate, without the burst of
// full-page images a checkpoint causes: WALReading.SteadyRate), the
// settings that bound a slot's retention, table and index sizes from
// pg_class, and times the copy's own chunks (backfill.Probe: written into
// a table like the moving one on the target, in a transaction rolled back;
// the target writes their WAL and keeps nothing) and the verify's own
// chunk checksums with its workers (verify.ProbeSource) on the
// source's rows. The model then follows what the code does today: a move's
// slot is created before its copy and its stream starts after it, so the
// slot retains the source's WAL of the whole copy. With Options.
// StreamDuringCopy (the copy gate: backfill.Options.StreamDuringCopy and
// cdc.Options.CopyGate; a migration's --stream-during-copy) the stream runs
// during the copy and the slot retains StreamRetention of WAL instead. The
// figures are per move and per shard, with the basis of each figure
// printed beside it.
//
// Layout: model.go is pure (the prediction and the refusals from probes and
// budgets: table-tested); probe.go runs the probes (real PostgreSQL);
// wal.go is the WAL rate's rule (pure); assess.go is the one entry the
// CLI's plan and the worker's PLAN call.
package capacity
