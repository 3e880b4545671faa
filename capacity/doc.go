// Package capacity predicts what a migration will cost before anything
// moves, from a short probe of the real servers, and refuses a plan that
// cannot fit (DESIGN.md §7, "Capacity is predicted, not discovered").
//
// Invariant: the probe changes nothing. It reads the source's WAL position
// and pg_stat_wal over a window (the WAL rate, without the burst of
// full-page images a checkpoint causes: WALReading.SteadyRate) and, over
// the same window, the rows inserted, updated and deleted in the moved
// tables (pg_stat_user_tables) and the source's logical decoding of that
// WAL (a temporary slot, dropped; given up when its creation waits on
// running transactions; and the same WAL streamed by a walsender over a
// replication connection with its own temporary slot, the stream's own
// path and start), the settings that bound a slot's
// retention, table and index sizes from pg_class, and times the copy's own
// chunks (backfill.Probe: written into tables like the moving one on the
// target, in transactions rolled back; the target writes their WAL and
// keeps nothing), then, before that rollback, the verify's own chunk
// checksums with its workers a side (verify.Probe) on the source's moving
// rows and at the same time on the rows the copy's probe wrote on the
// target, as verify reads both sides side by side (the verify is
// predicted at the rate of that pair), and the stream's applier on the
// rows so written, in one of those transactions (cdc.ProbeApply: a
// catch-up's batch in the source's mix of changes) and the cleanup's
// deletes by ctid (backfill.ProbeDelete); then the cleanup's search on the
// source, read only (backfill.ProbeFind), and the source writing 32 MiB of
// page-sized WAL records, the size of the images the cleanup's deletes
// write (logical messages in a transaction rolled back, flushed by an
// empty one: timeImages). The model then follows what
// the code does today: a move's slot is created before its copy and its
// stream starts after it, so the slot retains the source's WAL of the
// whole copy, and the catch-up applies the row changes to the moving
// ranges made meanwhile (not the WAL's bytes, most of which can be
// full-page images the stream skips). With Options.StreamDuringCopy (the
// copy gate: backfill.Options.StreamDuringCopy and cdc.Options.CopyGate; a
// migration's --stream-during-copy) the stream runs during the copy and
// the slot retains StreamRetention of WAL, and the catch-up that time's
// changes, instead. The figures are per move and per shard, with the
// basis of each figure printed beside it.
//
// Layout: model.go is pure (the prediction and the refusals from probes and
// budgets: table-tested); probe.go runs the probes (real PostgreSQL);
// wal.go is the WAL rate's rule (pure); assess.go is the one entry the
// CLI's plan and the worker's PLAN call.
package capacity
