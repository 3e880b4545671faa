package csvload

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/topology"
)

// Prepare is what a load of table into keyspace ("": the only one) reads
// from the control database (store in any keyspace): Load's options but
// Connect, routed by the keyspace's current topology, and the table's
// qualified name. A keyspace or table that does not resolve is an
// *pgerr.InputError; other errors are the control database's.
func Prepare(ctx context.Context, store *topology.Store, keyspace, table string, batchRows int) (Options, string, error) {
	k, err := store.ResolveKeyspace(ctx, keyspace)
	if err != nil {
		return Options{}, "", &pgerr.InputError{Err: err}
	}
	ts, qualified, err := Table(k, table)
	if err != nil {
		return Options{}, "", err
	}
	cur, err := store.In(k.Name).Current(ctx)
	if err != nil {
		return Options{}, "", err
	}
	return Options{Topology: cur, KeyType: k.KeyType, Table: ts, BatchRows: batchRows}, qualified, nil
}

// Result is what a load did: the rows each shard took (all of them
// committed, or, with Error, none unless the error says otherwise).
type Result struct {
	Table   string           `json:"table"`
	Version int64            `json:"topology_version"`
	Rows    map[string]int64 `json:"rows_by_shard"`
	Error   string           `json:"error,omitempty"`
}

// Print renders the result: JSON, or the total and a line per shard.
func (r Result) Print(out io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	var total int64
	for _, c := range r.Rows {
		total += c
	}
	fmt.Fprintf(out, "loaded %d rows of %s by topology v%d:\n", total, r.Table, r.Version)
	for _, n := range slices.Sorted(maps.Keys(r.Rows)) {
		fmt.Fprintf(out, "  %s\t%d\n", n, r.Rows[n])
	}
	return nil
}
