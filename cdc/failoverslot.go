package cdc

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// failoverSlotsFrom is the first server_version_num with failover slots
// (PostgreSQL 17): a logical slot created with FAILOVER true is synchronized
// to a standby that runs with sync_replication_slots = on, and survives its
// promotion. On PostgreSQL 15 and 16 no slot survives a promotion, and the
// repair path (RecoverSource, verify.Repair) is the one that runs.
const failoverSlotsFrom = 170000

// slotCommand is the CREATE_REPLICATION_SLOT command for a move's slot on a
// server of version versionNum (server_version_num): a failover slot from
// PostgreSQL 17 on (the option list that version takes), the PostgreSQL 15
// form otherwise. Both export the snapshot at the slot's consistent point.
// name is a validated slot name (validName).
func slotCommand(name string, versionNum int) string {
	if versionNum >= failoverSlotsFrom {
		return "CREATE_REPLICATION_SLOT " + name + " LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)"
	}
	return "CREATE_REPLICATION_SLOT " + name + " LOGICAL pgoutput EXPORT_SNAPSHOT"
}

// serverVersionNum is the server's server_version_num, over a replication
// connection (which takes SHOW).
func serverVersionNum(ctx context.Context, replConn *pgconn.PgConn) (int, error) {
	res, err := replConn.Exec(ctx, "SHOW server_version_num").ReadAll()
	if err != nil {
		return 0, wrapOp("read server_version_num", err)
	}
	if len(res) == 0 || len(res[0].Rows) == 0 || len(res[0].Rows[0]) == 0 {
		return 0, fmt.Errorf("read server_version_num: no row")
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(res[0].Rows[0][0])))
	if err != nil {
		return 0, fmt.Errorf("read server_version_num: %q: %w", res[0].Rows[0][0], err)
	}
	return v, nil
}

// slotRow is a slot as pg_replication_slots shows it to CheckSource.
type slotRow struct {
	Exists, Lost bool
	// Failover: created with FAILOVER true (the column exists from
	// PostgreSQL 17 on; false before).
	Failover       bool
	ConfirmedFlush pglogrepl.LSN
}

// slotSurvived tells whether a source that moved to a new timeline (a
// promoted standby) kept the move's slot, so that nothing is missing and
// no repair is needed: the slot is there and not lost, it is a failover
// slot (synchronized from the old primary, PostgreSQL 17+; a slot of the
// same name created by hand after the promotion is not one), the server is
// the same system on a later timeline, and the slot confirmed no position
// past resumeFrom (the position the caller resumes from: the target holds
// every change up to it). A slot that confirmed past it would skip the
// changes in between: START_REPLICATION starts a logical slot no earlier
// than its confirmed_flush_lsn.
func slotSurvived(was, now SourceIdentity, s slotRow, resumeFrom pglogrepl.LSN) bool {
	return s.Exists && !s.Lost && s.Failover &&
		was.known() && now.SystemID == was.SystemID && now.Timeline > was.Timeline &&
		s.ConfirmedFlush > 0 && s.ConfirmedFlush <= resumeFrom
}

// slotQuery reads a slot's row for CheckSource, on any version: the
// failover column (PostgreSQL 17+) through to_jsonb, which reads a missing
// column as NULL.
func slotQuery(slot string) string {
	return "SELECT coalesce(s.wal_status, ''), coalesce(s.confirmed_flush_lsn::text, ''), coalesce(to_jsonb(s)->>'failover', 'false') FROM pg_replication_slots s WHERE s.slot_name = " + quoteLiteral(slot)
}

// parseSlotRow reads slotQuery's result.
func parseSlotRow(res []*pgconn.Result) slotRow {
	if len(res) == 0 || len(res[0].Rows) == 0 {
		return slotRow{}
	}
	r := res[0].Rows[0]
	s := slotRow{Exists: true, Lost: string(r[0]) == "lost", Failover: string(r[2]) == "true"}
	if lsn, err := pglogrepl.ParseLSN(string(r[1])); err == nil {
		s.ConfirmedFlush = lsn
	}
	return s
}
