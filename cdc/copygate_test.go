package cdc

import (
	"strings"
	"testing"

	"github.com/reshard/reshard/tableset"
)

func gateTable(types ...string) tableset.Table {
	t := tableset.Table{Schema: "public", Name: "t", KeyColumn: "a"}
	for i, ty := range types {
		n := string(rune('a' + i))
		t.Columns = append(t.Columns, tableset.Column{Name: n, Type: ty})
		t.PK = append(t.PK, n)
	}
	t.Columns = append(t.Columns, tableset.Column{Name: "v", Type: "text"})
	return t
}

// Every case of the gate (copygate.go): a key at or before the committed
// position is applied, one in the chunk being read is held, one past it is
// skipped; an unregistered table skips and a done one applies.
func TestCopyGateDecides(t *testing.T) {
	o, err := NewKeyOrder(gateTable("bigint"))
	if err != nil {
		t.Fatal(err)
	}
	k := func(s ...string) []string { return s }
	for _, tc := range []struct {
		name string
		p    CopyProgress
		key  []string
		want GateDecision
	}{
		{"not registered: the copy will read it", CopyProgress{}, k("5"), GateSkip},
		{"registered, nothing read yet", CopyProgress{Registered: true}, k("5"), GateSkip},
		{"done: every key applies", CopyProgress{Registered: true, Done: true}, k("99999"), GateApply},
		{"below the committed position", CopyProgress{Registered: true, Copied: k("100"), ReadingTo: k("200")}, k("7"), GateApply},
		{"at the committed position", CopyProgress{Registered: true, Copied: k("100"), ReadingTo: k("200")}, k("100"), GateApply},
		{"in the chunk being read", CopyProgress{Registered: true, Copied: k("100"), ReadingTo: k("200")}, k("101"), GateHold},
		{"at the chunk's end", CopyProgress{Registered: true, Copied: k("100"), ReadingTo: k("200")}, k("200"), GateHold},
		{"past the chunk being read", CopyProgress{Registered: true, Copied: k("100"), ReadingTo: k("200")}, k("201"), GateSkip},
		{"first chunk being read", CopyProgress{Registered: true, ReadingTo: k("200")}, k("-5"), GateHold},
		{"numeric, not text, order", CopyProgress{Registered: true, Copied: k("9"), ReadingTo: k("20")}, k("10"), GateHold},
		{"the last chunk: everything past the position holds", CopyProgress{Registered: true, Copied: k("100"), ReadingTo: k("200"), ReadingAll: true}, k("5000"), GateHold},
		{"the last chunk: below still applies", CopyProgress{Registered: true, Copied: k("100"), ReadingAll: true}, k("3"), GateApply},
		{"a chunk read by a killed run, caught up", CopyProgress{Registered: true, Copied: k("300"), ReadingTo: k("200")}, k("250"), GateApply},
	} {
		got, err := tc.p.Decide(o, tc.key)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
}

func TestCopyGateComposite(t *testing.T) {
	o, err := NewKeyOrder(gateTable("integer", "uuid"))
	if err != nil {
		t.Fatal(err)
	}
	p := CopyProgress{Registered: true, Copied: []string{"5", "00000000-0000-0000-0000-0000000000ff"},
		ReadingTo: []string{"6", "10000000-0000-0000-0000-000000000000"}}
	for _, tc := range []struct {
		key  []string
		want GateDecision
	}{
		{[]string{"5", "00000000-0000-0000-0000-0000000000FE"}, GateApply},
		{[]string{"5", "00000000-0000-0000-0000-000000000100"}, GateHold},
		{[]string{"6", "0fffffff-ffff-ffff-ffff-ffffffffffff"}, GateHold},
		{[]string{"6", "a0000000-0000-0000-0000-000000000000"}, GateSkip},
		{[]string{"4", "ffffffff-ffff-ffff-ffff-ffffffffffff"}, GateApply},
	} {
		if got, err := p.Decide(o, tc.key); err != nil || got != tc.want {
			t.Errorf("%v: %v %v, want %v", tc.key, got, err, tc.want)
		}
	}
	if _, err := p.Decide(o, []string{"5"}); err == nil {
		t.Error("a key of one value against a two-column key: no error")
	}
	if _, err := p.Decide(o, []string{"x", "00000000-0000-0000-0000-0000000000fe"}); err == nil {
		t.Error("a key that is not an integer: no error")
	}
}

// A key the gate cannot order as the server does is refused, naming the
// table, the column, its type and the way out.
func TestCopyGateRefusesTextKeys(t *testing.T) {
	_, err := NewKeyOrder(gateTable("bigint", "text"))
	if err == nil || !strings.Contains(err.Error(), "primary-key column b of public.t is of type text") || !strings.Contains(err.Error(), "after the copy (--stream-during-copy=false") {
		t.Errorf("text key: %v", err)
	}
	if _, err := NewKeyOrder(tableset.Table{Schema: "public", Name: "nopk"}); err == nil {
		t.Error("no primary key: no error")
	}
}
