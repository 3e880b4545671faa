// Package keyspace names what is sharded, as plain values: a keyspace's
// tables, each with its shard-key column. It imports nothing, so the
// workflows' contract can carry it (package tableset reads the tables'
// shapes from a server's catalog; package topology registers keyspaces in
// the control database).
package keyspace

// Spec is a keyspace's tables: the tables that move together, sharing one
// logical shard key (users.id, orders.user_id). Every migration moves every
// table of its keyspace.
type Spec struct {
	Name   string      `json:"name" yaml:"name"`
	Tables []TableSpec `json:"tables" yaml:"tables"`
}

// TableSpec names one table and its shard-key column.
type TableSpec struct {
	Schema    string `json:"schema,omitempty" yaml:"schema,omitempty"` // default "public"
	Table     string `json:"table" yaml:"table"`
	KeyColumn string `json:"key" yaml:"key"`
}
