package ring

import (
	"errors"
	"strings"
	"testing"
)

// The ring commands' refusals, without the CLI: each is an *InputError
// whose message names the flag to fix.
func TestRequestRefusalsNameTheFlag(t *testing.T) {
	plan := func(r PlanRequest) error {
		if r.VNodes == 0 {
			r.VNodes = 16
		}
		if r.Tokens == "" {
			r.Tokens = "balanced"
		}
		_, _, _, err := r.Plan()
		return err
	}
	sim := func(r SimRequest) error {
		_, err := r.Options()
		return err
	}
	token := func(kt string, keys ...string) error {
		return EachToken(kt, keys, strings.NewReader(""), func(string, int64) error { return nil })
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{token("float", "1"), "--type"},
		{token("", "1"), "--type is required"},
		{token("bigint", "x"), "--type bigint"},
		{token("uuid", "nope"), "uuid"},
		{plan(PlanRequest{Shards: " , ", Add: "e"}), "--shards is empty"},
		{plan(PlanRequest{Shards: "a,a", Add: "c"}), "--shards: a is listed twice"},
		{plan(PlanRequest{Shards: "a,b", Add: "a"}), "--add a: the ring already has"},
		{plan(PlanRequest{Shards: "a,b", Split: "z"}), "--split z"},
		{plan(PlanRequest{Shards: "a,b", Split: "a", Into: "b"}), "--into b"},
		{plan(PlanRequest{Shards: "a,b", Remove: "z"}), "--remove z"},
		{plan(PlanRequest{Shards: "a", Remove: "a"}), "that is every shard"},
		{plan(PlanRequest{Shards: "a,b"}), "exactly one kind of change"},
		{plan(PlanRequest{Shards: "a,b", Add: "c", Split: "a"}), "exactly one kind of change"},
		{plan(PlanRequest{Shards: "a,b", Add: "c,d,c"}), "--add: c is listed twice"},
		{plan(PlanRequest{Shards: "a,b", Weights: []string{"a=0"}}), "--weight \"a=0\""},
		{plan(PlanRequest{Shards: "a,b", Weights: []string{"a=2,a=3"}}), "given twice"},
		{plan(PlanRequest{Shards: "a,b", Weights: []string{"z=2"}}), "--weight z: no such shard"},
		{plan(PlanRequest{Shards: "a,b", Remove: "a", Weights: []string{"a=2"}}), "--weight a: the shard is removed"},
		{plan(PlanRequest{Shards: "a,b", Weights: []string{"a=2"}, Tokens: "hash"}), "balanced"},
		{plan(PlanRequest{Shards: "a,b", Add: "c", Tokens: "random"}), "--tokens \"random\""},
		{plan(PlanRequest{Shards: "a,b", Add: "c", VNodes: -1}), "--vnodes -1"},
		{plan(PlanRequest{Shards: "a,b", Move: "5:1", To: "a"}), "--move"},
		{plan(PlanRequest{Shards: "a,b", Move: "1:5"}), "--move needs --to"},
		{sim(SimRequest{Shards: 0, Add: 1, VNodes: 1, Keys: 1}), "--shards 0"},
		{sim(SimRequest{Shards: 1, Add: 0, VNodes: 1, Keys: 1}), "--add 0"},
		{sim(SimRequest{Shards: 1, Add: 1, VNodes: 0, Keys: 1}), "--vnodes 0"},
		{sim(SimRequest{Shards: 1, Add: 1, VNodes: 1, Keys: 0}), "--keys 0"},
		{sim(SimRequest{Shards: 1, Add: 1, VNodes: 1, Keys: 1, Algo: "jump,magic"}), "--algo magic"},
	} {
		var in *InputError
		if !errors.As(tc.err, &in) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("got %v (%T), want an *InputError naming %q", tc.err, tc.err, tc.want)
		}
	}
}

// A well-formed request plans; a read error of the keys is a failure, not
// bad input.
func TestRequestPlans(t *testing.T) {
	o, moves, steps, err := PlanRequest{Shards: "a,b,c,d", VNodes: 16, Tokens: "balanced", Add: "e,f"}.Plan()
	if err != nil || o.VNodes != 16 || len(moves) == 0 || len(steps) != 2 {
		t.Fatalf("plan: %v, %d moves, %d steps", err, len(moves), len(steps))
	}
	if _, moves, _, err := (PlanRequest{Shards: "a,b", VNodes: 4, Tokens: "balanced", Split: "a"}).Plan(); err != nil || len(moves) == 0 || moves[0].To != "a-2" {
		t.Fatalf("split: %v %v", err, moves)
	}
	so, err := SimRequest{Shards: 4, Add: 1, VNodes: 16, Keys: 10, Algo: "jump, slots"}.Options()
	if err != nil || len(so.Algos) != 2 {
		t.Fatalf("simulate: %v %+v", err, so)
	}
	var keys []string
	var toks []int64
	err = EachToken("bigint", nil, strings.NewReader("1\r\n2\n\n3"), func(k string, tok int64) error {
		keys, toks = append(keys, k), append(toks, tok)
		return nil
	})
	if err == nil && keys[2] != "" {
		t.Fatalf("keys %q: the empty line is the empty key", keys)
	}
	if err == nil || !errors.As(err, new(*InputError)) {
		t.Fatalf("an empty bigint key: %v, want an *InputError", err)
	}
	keys = nil
	err = EachToken("text", nil, strings.NewReader("1\r\n\n3"), func(k string, tok int64) error {
		keys = append(keys, k)
		return nil
	})
	if err != nil || strings.Join(keys, "|") != "1||3" {
		t.Fatalf("keys %q, %v; want 1, the empty key, 3", keys, err)
	}
	err = EachToken("text", nil, failingReader{}, func(string, int64) error { return nil })
	if err == nil || errors.As(err, new(*InputError)) {
		t.Fatalf("a read error: %v, want a failure that is not bad input", err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }
