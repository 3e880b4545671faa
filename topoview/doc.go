// Package topoview renders what `reshard topology` and `reshard ring` show:
// a topology version (its shards, their share of the token space, the
// migrating ranges) as a table or JSON, the history, the skew report,
// topology check's lines per shard, a ring and its ranges, a ring plan and
// the scale-out simulation. Pure: the caller reads the control database
// (topology.Store) or computes the plan (ring) and hands the result here
// to print; the commands only parse flags.
package topoview
