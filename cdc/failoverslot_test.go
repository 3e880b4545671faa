package cdc

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// The slot's command per server version: a failover slot from PostgreSQL 17
// on, the PostgreSQL 15 form (which knows no FAILOVER option) before.
func TestSlotCommandPerVersion(t *testing.T) {
	for _, tc := range []struct {
		version  int
		want     string
		failover bool
	}{
		{150008, "CREATE_REPLICATION_SLOT reshard_t_m1 LOGICAL pgoutput EXPORT_SNAPSHOT", false},
		{160004, "CREATE_REPLICATION_SLOT reshard_t_m1 LOGICAL pgoutput EXPORT_SNAPSHOT", false},
		{170000, "CREATE_REPLICATION_SLOT reshard_t_m1 LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)", true},
		{180001, "CREATE_REPLICATION_SLOT reshard_t_m1 LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)", true},
	} {
		got := slotCommand("reshard_t_m1", tc.version)
		if got != tc.want || strings.Contains(got, "FAILOVER") != tc.failover {
			t.Errorf("server_version_num %d: %q, want %q", tc.version, got, tc.want)
		}
	}
}

// slotSurvived: only a failover slot found on the same system's later
// timeline, that confirmed nothing past the caller's position, skips the
// repair; everything else is the repair path.
func TestSlotSurvived(t *testing.T) {
	was := SourceIdentity{SystemID: "7", Timeline: 1}
	promoted := SourceIdentity{SystemID: "7", Timeline: 2}
	synced := slotRow{Exists: true, Failover: true, ConfirmedFlush: 0x3000}
	for _, tc := range []struct {
		name   string
		was    SourceIdentity
		now    SourceIdentity
		slot   slotRow
		resume pglogrepl.LSN
		want   bool
	}{
		{"failover slot synchronized to the promoted standby", was, promoted, synced, 0x3000, true},
		{"confirmed behind the target's position", was, promoted, synced, 0x5000, true},
		{"confirmed past the target's position: changes would be skipped", was, promoted, synced, 0x2fff, false},
		{"slot missing (PostgreSQL 15)", was, promoted, slotRow{}, 0x3000, false},
		{"slot lost", was, promoted, slotRow{Exists: true, Lost: true, Failover: true, ConfirmedFlush: 0x3000}, 0x3000, false},
		{"not a failover slot (created by hand after the promotion)", was, promoted, slotRow{Exists: true, ConfirmedFlush: 0x3000}, 0x3000, false},
		{"another system", was, SourceIdentity{SystemID: "8", Timeline: 2}, synced, 0x3000, false},
		{"same timeline: no promotion", was, was, synced, 0x3000, false},
		{"nothing recorded to compare with", SourceIdentity{}, promoted, synced, 0x3000, false},
		{"no confirmed position", was, promoted, slotRow{Exists: true, Failover: true}, 0x3000, false},
	} {
		if got := slotSurvived(tc.was, tc.now, tc.slot, tc.resume); got != tc.want {
			t.Errorf("%s: survived %v, want %v", tc.name, got, tc.want)
		}
	}
}
