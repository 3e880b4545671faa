package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/reshard/reshard/ring"
)

// runRing runs the CLI with stdin and returns stdout, stderr-like error text
// and the exit code.
func runRing(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	if err := root.ExecuteContext(context.Background()); err != nil {
		return out.String() + "reshard: " + err.Error() + "\n", exitCode(err)
	}
	return out.String(), 0
}

func TestRingTokenArgsAndStdin(t *testing.T) {
	out, code := runRing(t, "", "ring", "token", "--type", "text", "abc", "key-0")
	want := fmt.Sprintf("abc\t%d\nkey-0\t%d\n", ring.TokenText("abc"), ring.TokenText("key-0"))
	if code != 0 || out != want {
		t.Fatalf("exit %d, output %q, want %q", code, out, want)
	}
	// stdin: one key per line, an empty line is the empty key, CRLF tolerated,
	// a last line without newline counts.
	out, code = runRing(t, "a\n\nlé\r\nz", "ring", "token", "--type", "text")
	want = fmt.Sprintf("a\t%d\n\t%d\nlé\t%d\nz\t%d\n", ring.TokenText("a"), ring.TokenText(""), ring.TokenText("lé"), ring.TokenText("z"))
	if code != 0 || out != want {
		t.Fatalf("stdin: exit %d, output %q, want %q", code, out, want)
	}
	out, code = runRing(t, "42\n-9223372036854775808\n", "ring", "token", "--type", "bigint")
	want = fmt.Sprintf("42\t%d\n-9223372036854775808\t%d\n", ring.TokenInt64(42), ring.TokenInt64(math.MinInt64))
	if code != 0 || out != want {
		t.Fatalf("bigint: exit %d, output %q", code, out)
	}
	// 42 is 8010225493015854792 on PostgreSQL 15 (ring/testdata/tokens.json).
	if !strings.Contains(out, "42\t8010225493015854792\n") {
		t.Fatalf("bigint 42: %q", out)
	}
	u := "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
	tok, _ := ring.TokenOf(ring.KeyUUID, u)
	if out, code = runRing(t, "", "ring", "token", "--type", "uuid", u); code != 0 || out != fmt.Sprintf("%s\t%d\n", u, tok) {
		t.Fatalf("uuid: exit %d, output %q", code, out)
	}
}

func TestRingBadInputIsUsageError(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "--type", "float", "1"}, "--type"},
		{[]string{"token", "1"}, "--type is required"},
		{[]string{"token", "--type", "bigint", "x"}, "--type bigint"},
		{[]string{"token", "--type", "uuid", "nope"}, "uuid"},
		{[]string{"plan", "--shards", "", "--add", "e"}, "--shards"},
		{[]string{"plan", "--shards", " , ", "--add", "e"}, "--shards"},
		{[]string{"plan", "--shards", "a,b", "--add", "a"}, "--add a"},
		{[]string{"plan", "--shards", "a,b", "--split", "z"}, "--split z"},
		{[]string{"plan", "--shards", "a,b", "--remove", "z"}, "--remove z"},
		{[]string{"plan", "--shards", "a", "--remove", "a"}, "--remove a"},
		{[]string{"plan", "--shards", "a,b"}, "exactly one kind of change"},
		{[]string{"plan", "--shards", "a,b", "--add", "c", "--split", "a"}, "exactly one kind of change"},
		{[]string{"plan", "--shards", "a,b", "--remove", "a", "--move", "1:5", "--to", "b"}, "exactly one kind of change"},
		{[]string{"plan", "--shards", "a,b", "--add", "c,d,c"}, "--add: c is listed twice"},
		{[]string{"plan", "--shards", "a,b", "--add", "c,b"}, "--add b"},
		{[]string{"plan", "--shards", "a,b", "--remove", "a,b"}, "every shard"},
		{[]string{"plan", "--shards", "a,b", "--remove", "a,z"}, "--remove z"},
		{[]string{"plan", "--shards", "a,b", "--weight", "a=0"}, "--weight"},
		{[]string{"plan", "--shards", "a,b", "--weight", "a"}, "--weight"},
		{[]string{"plan", "--shards", "a,b", "--weight", "a=x"}, "--weight"},
		{[]string{"plan", "--shards", "a,b", "--weight", "a=2,a=3"}, "given twice"},
		{[]string{"plan", "--shards", "a,b", "--weight", "z=2"}, "--weight z"},
		{[]string{"plan", "--shards", "a,b", "--remove", "a", "--weight", "a=2"}, "--weight a: the shard is removed"},
		{[]string{"plan", "--shards", "a,b", "--weight", "a=2", "--tokens", "hash"}, "balanced"},
		{[]string{"plan", "--shards", "a,b", "--add", "c", "--tokens", "random"}, "--tokens"},
		{[]string{"plan", "--shards", "a,b", "--add", "c", "--vnodes", "0"}, "--vnodes"},
		{[]string{"plan", "--shards", "a,a", "--add", "c"}, "--shards"},
		{[]string{"plan", "--shards", "a,b", "--move", "5:1", "--to", "a"}, "--move"},
		{[]string{"plan", "--shards", "a,b", "--move", "1:5"}, "--to"},
		{[]string{"simulate", "--shards", "0"}, "--shards"},
		{[]string{"simulate", "--add", "0"}, "--add"},
		{[]string{"simulate", "--algo", "magic"}, "--algo magic"},
		{[]string{"simulate", "--keys", "0"}, "--keys"},
	} {
		out, code := runRing(t, "", append([]string{"ring"}, tc.args...)...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("reshard ring %s: exit %d, output %q; want exit 2 mentioning %q", strings.Join(tc.args, " "), code, out, tc.want)
		}
	}
}

type planOut struct {
	Moves []struct {
		Lo   *int64  `json:"lo"`
		Hi   *int64  `json:"hi"`
		From *string `json:"from"`
		To   *string `json:"to"`
	} `json:"moves"`
}

func decodePlan(t *testing.T, out string) []ring.Move {
	t.Helper()
	var p planOut
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("plan output %q: %v", out, err)
	}
	var moves []ring.Move
	for _, m := range p.Moves {
		if m.Lo == nil || m.Hi == nil || m.From == nil || m.To == nil {
			t.Fatalf("move without lo, hi, from or to: %s", out)
		}
		moves = append(moves, ring.Move{Range: ring.Range{Lo: *m.Lo, Hi: *m.Hi}, From: *m.From, To: *m.To})
	}
	return moves
}

func TestRingPlanJSON(t *testing.T) {
	for _, tokens := range []string{"balanced", "hash"} {
		out, code := runRing(t, "", "ring", "plan", "--shards", "a,b,c,d", "--add", "e", "--vnodes", "16", "--tokens", tokens, "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, out)
		}
		moves := decodePlan(t, out)
		old, _ := ring.Build([]ring.Shard{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}}, ring.Options{VNodes: 16, Tokens: ring.Allocation(tokens)})
		next, want, err := ring.PlanAddNode(old, ring.Shard{Name: "e"}, ring.Options{VNodes: 16, Tokens: ring.Allocation(tokens)})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(moves) != fmt.Sprint(want) {
			t.Fatalf("%s: CLI moves differ from ring.PlanAddNode", tokens)
		}
		for _, m := range moves {
			if m.To != "e" || !m.Range.Valid() || next.Owner(m.Range.Hi) != "e" || old.Owner(m.Range.Hi) != m.From {
				t.Fatalf("%s: bad move %v", tokens, m)
			}
		}
		if f := ring.MovedFraction(moves); tokens == "balanced" && math.Abs(f-0.2) > 0.001 {
			t.Errorf("balanced add moved %.4f, want 0.2", f)
		}
	}
	out, code := runRing(t, "", "ring", "plan", "--shards", "a,b,c,d", "--split", "a", "--json")
	if code != 0 {
		t.Fatalf("split: exit %d: %s", code, out)
	}
	for _, m := range decodePlan(t, out) {
		if m.From != "a" || m.To != "a-2" {
			t.Fatalf("split move %v", m)
		}
	}
	out, code = runRing(t, "", "ring", "plan", "--shards", "a,b,c,d", "--remove", "b", "--json")
	if code != 0 {
		t.Fatalf("remove: exit %d: %s", code, out)
	}
	moves := decodePlan(t, out)
	if len(moves) == 0 || math.Abs(ring.MovedFraction(moves)-0.25) > 1e-9 {
		t.Fatalf("remove moved %v", moves)
	}
	// A readable table with the moved fraction.
	out, code = runRing(t, "", "ring", "plan", "--shards", "a,b,c,d", "--add", "e")
	if code != 0 || !strings.Contains(out, "moved fraction 0.2000") || !strings.Contains(out, "FROM") {
		t.Fatalf("table: exit %d\n%s", code, out)
	}
}

// TestRingPlanRebalance: several shards at once, the same --json shape as a
// single change, and the comparison with one shard at a time.
func TestRingPlanRebalance(t *testing.T) {
	out, code := runRing(t, "", "ring", "plan", "--shards", "a,b,c,d", "--add", "e,f,g,h", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	moves := decodePlan(t, out) // the same shape: unknown fields are refused
	o := ring.Options{VNodes: 16, Tokens: ring.AllocBalanced}
	old, _ := ring.Build([]ring.Shard{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}}, o)
	next, want, err := ring.PlanRebalance(old, ring.Target{Add: []ring.Shard{{Name: "e"}, {Name: "f"}, {Name: "g"}, {Name: "h"}}}, o)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(moves) != fmt.Sprint(want) {
		t.Fatal("CLI moves differ from ring.PlanRebalance")
	}
	for _, m := range moves {
		if !strings.Contains("abcd", m.From) || !strings.Contains("efgh", m.To) || old.Owner(m.Range.Hi) != m.From || next.Owner(m.Range.Hi) != m.To {
			t.Fatalf("bad move %v", m)
		}
	}
	if f := ring.MovedFraction(moves); math.Abs(f-0.5) > 0.01 {
		t.Errorf("4 → 8 moved %.4f, want 0.50", f)
	}
	out, code = runRing(t, "", "ring", "plan", "--shards", "a,b,c,d", "--add", "e,f,g,h")
	if code != 0 || !strings.Contains(out, "moved fraction 0.5000") ||
		!strings.Contains(out, "one shard at a time: 4 steps, moved fraction 0.6345; one rebalance moves 0.5000") {
		t.Fatalf("table: exit %d\n%s", code, out)
	}
	// Add, remove and reweigh at once: b=2, c, d, e=1 of 5, so a gives its
	// 0.25, c and d 0.05 each.
	out, code = runRing(t, "", "ring", "plan", "--shards", "a,b,c,d", "--add", "e", "--remove", "a", "--weight", "b=2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	moves = decodePlan(t, out)
	if f := ring.MovedFraction(moves); math.Abs(f-0.35) > 1e-6 {
		t.Errorf("add e, remove a, b=2 moved %.6f, want 0.35", f)
	}
	to := map[string]float64{}
	for _, m := range moves {
		if m.From == "b" || m.From == "e" || m.To == "a" {
			t.Fatalf("move %v: b and e only receive, a only gives", m)
		}
		to[m.To] += m.Range.Width() / 18446744073709551616.0
	}
	if math.Abs(to["b"]-0.15) > 1e-6 || math.Abs(to["e"]-0.2) > 1e-6 {
		t.Errorf("received %v, want b 0.15, e 0.20", to)
	}
	// One shard alone prints no comparison: it is the same plan.
	out, code = runRing(t, "", "ring", "plan", "--shards", "a,b,c,d", "--remove", "c")
	if code != 0 || strings.Contains(out, "one shard at a time") || !strings.Contains(out, "moved fraction 0.2500") {
		t.Fatalf("remove c: exit %d\n%s", code, out)
	}
}

func TestRingSimulateJSON(t *testing.T) {
	out, code := runRing(t, "", "ring", "simulate", "--shards", "4", "--add", "1", "--vnodes", "16", "--keys", "100000", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var res []map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(res) != len(ring.Algorithms) {
		t.Fatalf("%d results", len(res))
	}
	for _, r := range res {
		for _, k := range []string{"algo", "tokens", "moved_fraction", "ideal_fraction", "max_over_mean"} {
			if _, ok := r[k]; !ok {
				t.Fatalf("result without %s: %v", k, r)
			}
		}
		if r["algo"] == "ring-balanced" && math.Abs(r["moved_fraction"].(float64)-0.2) > 0.01 {
			t.Errorf("ring-balanced moved %v", r["moved_fraction"])
		}
	}
	out, code = runRing(t, "", "ring", "simulate", "--keys", "10000", "--algo", "modulo,jump")
	if code != 0 || !strings.Contains(out, "modulo") || !strings.Contains(out, "jump") || strings.Contains(out, "slots") {
		t.Fatalf("table: exit %d\n%s", code, out)
	}
}
