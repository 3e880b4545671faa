package topoview

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// reshard init's text (published, or found) with the keyspace after it, and
// its JSON; a configured shard the ring leaves out is named with the
// command that brings it in. The golden file was printed by cmd/reshard's
// printInit, printKeyspace and init's JSON before they moved.
func TestPrintInit(t *testing.T) {
	r, err := ring.Build([]ring.Shard{{Name: "shard1"}, {Name: "shard2"}}, ring.Options{VNodes: 4, Tokens: ring.AllocBalanced})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := topology.New(r, nil, "init")
	if err != nil {
		t.Fatal(err)
	}
	tp.Version = 1
	configured := []string{"shard1", "shard2", "shard3"}
	control := "postgres://u:xxxxx@h/c"
	ks := &topology.Keyspace{Name: "default", KeyType: ring.KeyInt, Tables: []tableset.TableSpec{{Schema: "public", Table: "users", KeyColumn: "id"}, {Schema: "public", Table: "orders", KeyColumn: "user_id"}}}
	var b bytes.Buffer
	for _, published := range []bool{true, false} {
		PrintInit(&b, tp, published, configured, control)
		PrintKeyspace(&b, *ks)
	}
	j, err := json.Marshal(InitOf(tp, true, configured, control, ks))
	if err != nil {
		t.Fatal(err)
	}
	b.Write(j)
	golden(t, "init.golden", b.String())
	if got := NotInRing([]string{"shard1", "shard2"}, tp); got != nil {
		t.Errorf("every configured shard in the ring: %q, want none", got)
	}
}
