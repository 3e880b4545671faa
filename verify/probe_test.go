package verify

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestProbeSourceChecksumsTheRangesChunks: ProbeSource checksums the
// moving rows in the verify's planned chunks, its workers at once, and
// stops at its bounds.
func TestProbeSourceChecksumsTheRangesChunks(t *testing.T) {
	src := pgtest.NewDB(t, 0)
	src.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, email text);
		INSERT INTO users SELECT g, 'u'||g FROM generate_series(1, 20000) g; ANALYZE users`)
	ctx := context.Background()
	set, err := tableset.Introspect(ctx, src.Pool, tableset.Spec{Name: "app", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}, "source")
	if err != nil {
		t.Fatal(err)
	}
	half := []ring.Range{{Lo: math.MinInt64, Hi: 0}}
	want := src.QueryInt64(t, `SELECT count(*) FROM users WHERE hashint8extended(id, 0) < 0`)
	st, err := ProbeSource(ctx, src.Pool, set.Tables[0], half, ProbeOptions{ChunkRows: 1000, Parallel: 3, MinTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != want || st.Chunks < 5 || st.Workers != 3 || st.Elapsed <= 0 {
		t.Errorf("probe %+v: want all %d rows of the range in chunks of about 1,000, 3 workers", st, want)
	}
	st, err = ProbeSource(ctx, src.Pool, set.Tables[0], half, ProbeOptions{ChunkRows: 1000, Parallel: 2, MaxTime: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if st.Chunks != 2 || st.Rows >= want || st.Rows < 1000 {
		t.Errorf("probe %+v: want a chunk a worker, no more, past MaxTime", st)
	}
}
