package cdc

import "testing"

// DropSQL gives the operator the statement that drops each kind of object.
func TestObjectDropSQL(t *testing.T) {
	for _, tc := range []struct {
		o    Object
		want string
	}{
		{Object{Kind: "slot", Name: "reshard_m1"}, "SELECT pg_drop_replication_slot('reshard_m1')"},
		{Object{Kind: "publication", Name: "reshard_m1"}, `DROP PUBLICATION "reshard_m1"`},
		{Object{Kind: "origin", Name: "reshard_m1"}, "SELECT pg_replication_origin_drop('reshard_m1')"},
	} {
		if got := tc.o.DropSQL(); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.o.Kind, got, tc.want)
		}
	}
}
