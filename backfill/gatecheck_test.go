package backfill

import (
	"strings"
	"testing"

	"github.com/reshard/reshard/tableset"
)

// PLAN's check of --stream-during-copy names each table whose primary key
// the copy gate cannot order (text, alone or in a composite key), on the
// shard it read, with the fix; integer and uuid keys pass.
func TestStreamDuringCopyProblemsNameEachTable(t *testing.T) {
	table := func(name string, types ...string) tableset.Table {
		tb := tableset.Table{Schema: "public", Name: name, KeyColumn: "k0"}
		for i, ty := range types {
			c := "k" + string(rune('0'+i))
			tb.Columns = append(tb.Columns, tableset.Column{Name: c, Type: ty})
			tb.PK = append(tb.PK, c)
		}
		return tb
	}
	set := tableset.Set{Tables: []tableset.Table{
		table("users", "bigint"), table("tags", "text"), table("sessions", "uuid"), table("events", "bigint", "text"), table("orders", "integer", "bigint"),
	}}
	probs := StreamDuringCopyProblems(set, "shard1")
	var got []string
	for _, p := range probs {
		got = append(got, p.Table)
		if p.Shard != "shard1" || !strings.Contains(p.Error(), "of type text") || !strings.Contains(p.Fix, "--stream-during-copy=false") {
			t.Errorf("problem %+v: want shard1, the key's type and the fix", p)
		}
	}
	if strings.Join(got, ",") != "public.tags,public.events" {
		t.Fatalf("refused %v, want public.tags and public.events", got)
	}
	if probs := StreamDuringCopyProblems(tableset.Set{Tables: set.Tables[:1]}, "shard1"); len(probs) != 0 {
		t.Fatalf("an integer key refused: %v", probs[0])
	}
	// The default's reason for streaming after the copy names the first
	// such table and its key's type; "" when every key can be ordered.
	for _, tc := range []struct {
		tables []tableset.Table
		want   string
	}{
		{set.Tables, "table public.tags has a text primary key"},
		{set.Tables[3:4], "table public.events has a text column (k1) in its primary key"},
		{[]tableset.Table{{Schema: "public", Name: "nopk"}}, "table public.nopk has no primary key"},
		{[]tableset.Table{set.Tables[0], set.Tables[2], set.Tables[4]}, ""},
	} {
		if got := StreamAfterCopyReason(tableset.Set{Tables: tc.tables}); got != tc.want {
			t.Errorf("reason %q, want %q", got, tc.want)
		}
	}
}
