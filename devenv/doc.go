// Package devenv starts, reuses, stops and removes a local reshard cluster: a
// control database server and N shard servers, each a real PostgreSQL started
// with initdb/pg_ctl on a free 127.0.0.1 port with wal_level=logical, plus a
// Temporal dev server (temporal server start-dev) as a detached child.
//
// Invariants: every server listens on loopback only; `up` is idempotent and
// restarts what crashed; processes it starts outlive the command that started
// them and are stopped only by Down; passwords never appear in what it prints.
//
// Layout: postgres.go drives initdb/pg_ctl for one server; temporal.go
// finds and runs the Temporal dev server; cluster.go is `reshard dev`: the
// state file, up, status and down of a whole local cluster.
package devenv
