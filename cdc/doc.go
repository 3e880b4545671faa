// Package cdc streams pgoutput changes from a move's logical slot and applies
// those whose token falls in the moving ranges to the target (CDC_CATCH_UP),
// and, reversed with SkipOrigin, from the new owner back to the old one
// during GRACE.
//
// Invariants: changes are applied in source commit order; the applied LSN
// commits in the same target transaction as the changes (replication origin);
// the flush LSN acknowledged to the source is only ever an applied and
// committed one; every write on the target carries the moving-range predicate;
// a read on the source made while applying a transaction (the unsent TOAST
// values of a row entering the ranges) uses a snapshot that sees that
// transaction, which the stream may deliver before its commit is visible.
// Every session the stream opens (walsender, SQL peeks, fetches, the
// applier) runs under internal/pgsession's settings: pgoutput's values are
// text formatted by the decoding session and parsed by the applier's, so
// both must agree whatever the shards' defaults (TestValuesArriveUnchanged).
//
// Memory: the stream asks for pgoutput proto_version 1 without streaming, so a
// transaction arrives only after it committed, whole and contiguous (the
// source spills it to disk past logical_decoding_work_mem). The applier can
// therefore write it as it arrives, inside one target transaction, flushing
// every FlushRows operations and committing at a source commit: memory is
// bounded by FlushRows (twice: one flush is in flight, in pipeline mode,
// while the next is decoded), not by the transaction's size, with nothing to buffer
// by xid and nothing to spill. (Streaming in-progress transactions would
// force either buffering them or applying them in a second session, which
// cannot share the replication origin and would break commit order.)
//
// Within a batch only the last image of each primary key is written (a
// delete wins over earlier writes; unchanged TOAST values are taken from the
// key's earlier image in the batch, else left as the target has them; across
// a key change only from an image the stream sent, else from the new key's
// row, on the target or read from the source: see target.partial).
// A flush of StageMinRows operations or more is staged: one binary COPY into
// a temporary table of the transaction, then one statement per kind; smaller
// ones go as text[] parameters.
//
// Layout: decode.go is pure (bytes in, typed messages out, fuzzed), and so is
// visible.go (is a source transaction visible in a snapshot); apply.go builds
// the target's statements and sends the text[] flushes; stage.go the staged
// ones; partial.go the updates that left unchanged TOAST columns out (one
// UPDATE per set of columns sent, after the table's deletes); stream.go
// owns the connections, the replication protocol and the dispatch of
// messages, and creates the origin (only while the slot exists: no origin
// outlives its move); batch.go the applier's batches, their commit with the
// origin's progress and the acknowledgements; controller.go the Controller
// API (HoldAt, Release, Positions, WaitApplied, DrainToMarker) and how the
// runner holds; joining.go creates and drops the publication and slot, and
// drops the origin (package join creates them for a move, package cleanup
// drops them); reverse.go derives the GRACE reverse stream's options; schema.go follows schema changes (a new Relation
// message's columns mapped by name onto the target's current ones, and the
// retryable wait while the target lacks one the source sends); objects.go lists those a server holds (topology check's
// leftovers); failover.go checks, before a Run reads, that the source is the
// server its positions belong to (IDENTIFY_SYSTEM's system id and timeline,
// the slot present and not lost) and reports a *FailedOverError — repair
// needed, never "no changes" — when it is not; targetfailover.go reads the
// target's identity on the applier's session before the origin: a new
// timeline (a promoted synchronous standby, which holds every committed
// batch with its origin progress) is reported as a TargetFailover and the
// stream resumes from the origin there, another system stops the stream;
// copygate.go is the copy gate (Options.CopyGate, off by default): with the
// copy running beside the stream (backfill.Options.StreamDuringCopy), a
// change is applied when its key's chunk is committed on the target, held
// while that chunk is being copied and skipped while it has not started,
// the progress read only after the change's transaction is visible on the
// source, so the slot retains the stream's lag, not the copy's length;
// witness.go keeps what the stream received (the ids of source transactions
// until a source snapshot sees them, the keys each changed) so that verify
// can re-check, at a point without a slot, only what changed since its run.
package cdc
