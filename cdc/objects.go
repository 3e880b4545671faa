package cdc

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Object is a slot, publication or replication origin of a move's stream
// found on a server, by its name (NamesFor, ReverseNamesFor).
type Object struct {
	Kind string `json:"kind"` // "slot", "publication", "origin"
	Name string `json:"name"`
	// Active: a walsender streams from the slot now.
	Active bool `json:"active,omitempty"`
}

// Objects lists the reshard_* slots (not temporary ones: verify's) and
// publications of the connected database and the reshard_* replication
// origins of its server.
func Objects(ctx context.Context, conn *pgxpool.Pool) ([]Object, error) {
	rows, err := conn.Query(ctx, `
SELECT 'slot', slot_name::text, active FROM pg_replication_slots
WHERE database = current_database() AND NOT temporary AND starts_with(slot_name::text, 'reshard_')
UNION ALL
SELECT 'publication', pubname::text, false FROM pg_publication WHERE starts_with(pubname::text, 'reshard_')
UNION ALL
SELECT 'origin', roname, false FROM pg_replication_origin WHERE starts_with(roname, 'reshard_')
ORDER BY 1, 2`)
	if err != nil {
		return nil, wrapOp("list the streams' slots, publications and origins", err)
	}
	defer rows.Close()
	var out []Object
	for rows.Next() {
		var o Object
		if err := rows.Scan(&o.Kind, &o.Name, &o.Active); err != nil {
			return nil, fmt.Errorf("list the streams' slots, publications and origins: %w", err)
		}
		out = append(out, o)
	}
	return out, wrapOp("list the streams' slots, publications and origins", rows.Err())
}

// MoveOf is the move whose stream an object name belongs to, among the
// moves known says exist, and whether it is the reverse stream's
// (reshard_r_<move>); ok is false for a name no known move makes.
func MoveOf(name string, known func(move string) bool) (move string, reverse, ok bool) {
	if m, found := strings.CutPrefix(name, "reshard_r_"); found && known(m) {
		return m, true, true
	}
	if m, found := strings.CutPrefix(name, "reshard_"); found && known(m) {
		return m, false, true
	}
	return "", false, false
}

// DropSQL is the statement that drops o by hand, for an operator's fix.
func (o Object) DropSQL() string {
	switch o.Kind {
	case "slot":
		return fmt.Sprintf("SELECT pg_drop_replication_slot('%s')", o.Name)
	case "publication":
		return fmt.Sprintf("DROP PUBLICATION %q", o.Name)
	default:
		return fmt.Sprintf("SELECT pg_replication_origin_drop('%s')", o.Name)
	}
}
