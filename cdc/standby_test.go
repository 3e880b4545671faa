package cdc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/testkit/pgtest"
)

// TestCheckStandbyKnowsTheSourcesStandby: a standby of the source's server
// passes; the source itself, another server and a standby checked against
// another system's identity are refused, naming the reason and the fix.
func TestCheckStandbyKnowsTheSourcesStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, other := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	sb := pgtest.Standby(t, 0)
	rc, err := pgconn.Connect(ctx, src.ReplicationDSN())
	if err != nil {
		t.Fatal(err)
	}
	was, err := IdentifySource(ctx, rc)
	rc.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	standbyDSN := sb.DSN(src.Name, false) + "&replication=database"
	if err := CheckStandby(ctx, standbyDSN, "shard_a", was); err != nil {
		t.Fatalf("the source's own standby: %v", err)
	}
	for _, c := range []struct {
		name, dsn string
		was       SourceIdentity
		want      string
	}{
		{"the source itself", src.ReplicationDSN(), was, "not in recovery"},
		{"another server", other.ReplicationDSN(), was, "not in recovery"},
		{"another system", standbyDSN, SourceIdentity{SystemID: "1", Timeline: was.Timeline}, "system id is " + was.SystemID},
		{"another timeline", standbyDSN, SourceIdentity{SystemID: was.SystemID, Timeline: was.Timeline + 1}, "replays timeline"},
	} {
		err := CheckStandby(ctx, c.dsn, "shard_a", c.was)
		var ns *NotStandbyOfError
		if !errors.As(err, &ns) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "shards.shard_a.standby") {
			t.Errorf("%s: %v, want a *NotStandbyOfError saying %q and the fix", c.name, err, c.want)
		}
		t.Logf("%s: %v", c.name, err)
	}
}
