package request

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/workflows"
)

// defaultOptions are the flags' defaults, two tables named.
func defaultOptions() Options {
	return Options{Tables: []string{"users:id", "app.orders:user_id"}, VNodes: 16, Tokens: "balanced", ChunkRows: 5000, VerifyChunkRows: 50000,
		OnVerifyFail: "wait", Grace: workflows.DefaultGracePeriod, CutoverBudget: 2 * time.Second, MaxLagBytes: 16 << 20}
}

func TestBuildRequest(t *testing.T) {
	f := defaultOptions()
	f.ID = "split-1"
	f.Into = "shard5"
	f.RowsPerSec, f.BytesPerSec = 1000, 1<<20
	f.RequireApproval = true
	f.OnVerifyFail = "rollback"
	req, err := Build(workflows.KindSplit, []string{"shard1"}, f)
	if err != nil {
		t.Fatal(err)
	}
	want := workflows.MigrationRequest{ID: "split-1", Kind: workflows.KindSplit, Shard: "shard1", Into: "shard5",
		Tables: tableset.Spec{Name: "users", Tables: []tableset.TableSpec{
			{Schema: "public", Table: "users", KeyColumn: "id"}, {Schema: "app", Table: "orders", KeyColumn: "user_id"}}},
		VNodes: 16, Tokens: "balanced", Throttle: workflows.Throttle{RowsPerSec: 1000, BytesPerSec: 1 << 20}, ChunkRows: 5000,
		RequireApproval: true, OnVerifyFail: workflows.VerifyFailRollback, CutoverBudget: 2 * time.Second, MaxLagBytes: 16 << 20, VerifyChunkRows: 50000,
		StreamDuringCopy: true, StreamAuto: true}
	if req.GracePeriod == nil || *req.GracePeriod != workflows.DefaultGracePeriod {
		t.Errorf("grace period %v, want %s", req.GracePeriod, workflows.DefaultGracePeriod)
	}
	req.GracePeriod = nil
	if fmt.Sprintf("%+v", req) != fmt.Sprintf("%+v", want) {
		t.Errorf("request\n got %+v\nwant %+v", req, want)
	}

	f = defaultOptions()
	f.StreamDuringCopy = new(true)
	if req, err := Build(workflows.KindAddNode, []string{"shard5"}, f); err != nil || !req.StreamDuringCopy {
		t.Errorf("--stream-during-copy: request %+v, %v; want StreamDuringCopy", req, err)
	}

	f = defaultOptions()
	f.Range, f.To = "-100:200", "shard2"
	req, err = Build(workflows.KindMove, nil, f)
	if err != nil {
		t.Fatal(err)
	}
	if req.Range == nil || *req.Range != (ring.Range{Lo: -100, Hi: 200}) || req.To != "shard2" {
		t.Errorf("move request: range %v to %q", req.Range, req.To)
	}
	if !strings.HasPrefix(req.ID, "move-") || !IDPattern.MatchString(req.ID) || len(req.ID) != len("move-")+6 {
		t.Errorf("generated id %q: want move-<6 lower-case chars>", req.ID)
	}
	other, _ := Build(workflows.KindMove, nil, f)
	if other.ID == req.ID {
		t.Errorf("two generated ids are equal: %s", req.ID)
	}
}

func TestBuildRequestBadInput(t *testing.T) {
	for _, tc := range []struct {
		kind workflows.Kind
		args []string
		edit func(*Options)
		want string
	}{
		{workflows.KindAddNode, nil, nil, "takes one shard name"},
		{workflows.KindAddNode, []string{"a", "b"}, nil, "takes one shard name"},
		{workflows.KindAddNode, []string{"bad name"}, nil, "shard name"},
		{workflows.KindSplit, []string{"shard1"}, nil, "needs --into"},
		{workflows.KindSplit, []string{"shard1"}, func(f *Options) { f.Into = "shard1" }, "into itself"},
		{workflows.KindMove, []string{"x"}, nil, "takes no arguments"},
		{workflows.KindMove, nil, func(f *Options) { f.To = "shard2" }, "needs --range"},
		{workflows.KindMove, nil, func(f *Options) { f.Range, f.To = "5:1", "shard2" }, "lower bound must be below"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.Tables = []string{"users"} }, "want [schema.]table:key"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.Tables = []string{"users:id", "public.users:id"} }, "given twice"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.Tables = []string{".users:id"} }, "want [schema.]table:key"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.VNodes = 0 }, "--vnodes"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.Tokens = "random" }, "--tokens"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.RowsPerSec = -1 }, "--rows-per-sec"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.ChunkRows = 0 }, "--copy-chunk-rows"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.VerifyChunkRows = -1 }, "--verify-chunk-rows"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.OnVerifyFail = "ignore" }, "--on-verify-fail"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.Grace = -time.Second }, "--grace"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.CutoverBudget = time.Millisecond }, "--cutover-budget"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.ID = "Upper" }, "--id"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.ID = "-x" }, "--id"},
		{workflows.KindRebalance, nil, nil, "rebalance needs --add"},
		{workflows.KindRebalance, []string{"s5"}, func(f *Options) { f.Add = "s6" }, "takes no arguments"},
		{workflows.KindRebalance, nil, func(f *Options) { f.Add = "s5,s6,s5" }, "s5 is listed twice"},
		{workflows.KindRebalance, nil, func(f *Options) { f.Remove = "bad name" }, "shard name"},
		{workflows.KindRebalance, nil, func(f *Options) { f.Weights = []string{"s1=-2"} }, "--weight"},
		{workflows.KindAddNode, []string{"s5"}, func(f *Options) { f.StreamDuringCopy, f.ReadFrom = new(true), "standby" }, "--stream-during-copy with --read-from standby"},
	} {
		f := defaultOptions()
		if tc.edit != nil {
			tc.edit(&f)
		}
		_, err := Build(tc.kind, tc.args, f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: error %v, want one mentioning %q", tc.kind, tc.args, err, tc.want)
		}
	}
}

// --stream-during-copy left out is the default, on where allowed
// (StreamAuto, resolved by PLAN's checks), off with --read-from standby
// and the reason; given, it is what it says, and true with standby reads
// is refused (TestBuildRequestRefusals).
func TestBuildStreamDuringCopy(t *testing.T) {
	for _, tc := range []struct {
		name       string
		given      *bool
		readFrom   string
		on, auto   bool
		wantReason string
		wantText   string
	}{
		{"default", nil, "primary", true, true, "", "stream during the copy (the default where the keyspace allows it)"},
		{"default, standby reads", nil, "standby", false, true, StreamAfterStandby, "stream after the copy: the copy reads from the standby (--read-from standby)"},
		{"--stream-during-copy", new(true), "primary", true, false, "", "stream during the copy (--stream-during-copy)"},
		{"--stream-during-copy=false", new(false), "primary", false, false, "", "stream after the copy"},
		{"--stream-during-copy=false, standby reads", new(false), "standby", false, false, "", "stream after the copy"},
	} {
		f := defaultOptions()
		f.StreamDuringCopy, f.ReadFrom = tc.given, tc.readFrom
		req, err := Build(workflows.KindAddNode, []string{"shard5"}, f)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if req.StreamDuringCopy != tc.on || req.StreamAuto != tc.auto || req.StreamAfterCopy != tc.wantReason || req.StreamText() != tc.wantText {
			t.Errorf("%s: on %v auto %v reason %q text %q; want %v %v %q %q", tc.name, req.StreamDuringCopy, req.StreamAuto, req.StreamAfterCopy, req.StreamText(),
				tc.on, tc.auto, tc.wantReason, tc.wantText)
		}
	}
}

// A request stored before the default changed has no stream fields, or
// stream_during_copy alone: it decodes as it ran then, off or on, and
// not as the default.
func TestStoredRequestKeepsItsStream(t *testing.T) {
	for _, tc := range []struct {
		stored string
		on     bool
	}{
		{`{"id":"add-old","kind":"add-node","shard":"shard5","tables":{"name":"users"},"throttle":{}}`, false},
		{`{"id":"add-old","kind":"add-node","shard":"shard5","tables":{"name":"users"},"throttle":{},"stream_during_copy":true}`, true},
	} {
		var req workflows.MigrationRequest
		if err := json.Unmarshal([]byte(tc.stored), &req); err != nil {
			t.Fatal(err)
		}
		if req.StreamDuringCopy != tc.on || req.StreamAuto {
			t.Errorf("%s: stream during copy %v, auto %v; want %v, not auto", tc.stored, req.StreamDuringCopy, req.StreamAuto, tc.on)
		}
	}
}

func TestBuildRequestRebalance(t *testing.T) {
	f := defaultOptions()
	f.Add, f.Remove, f.Weights = "shard5, shard6", "shard1", []string{"shard2=2", "shard5=3"}
	req, err := Build(workflows.KindRebalance, nil, f)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(req.Add, req.Remove, req.Weights) != "[shard5 shard6] [shard1] map[shard2:2 shard5:3]" || !strings.HasPrefix(req.ID, "rebalance-") {
		t.Errorf("rebalance request %q: add %v remove %v weights %v", req.ID, req.Add, req.Remove, req.Weights)
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var back workflows.MigrationRequest
	if err := json.Unmarshal(b, &back); err != nil || fmt.Sprint(back.Add, back.Remove, back.Weights) != fmt.Sprint(req.Add, req.Remove, req.Weights) {
		t.Errorf("round trip %s: %v", b, err)
	}
}

// --range of move takes a range as status and ring show print it.
func TestMoveRangeAsPrinted(t *testing.T) {
	want := ring.Range{Lo: -4611686018427387904, Hi: 0}
	for _, in := range []string{"-4611686018427387904:0", want.String()} {
		f := Options{Range: in, To: "shard3", VNodes: 16, Tokens: "balanced", ChunkRows: 1000, VerifyChunkRows: 1000,
			OnVerifyFail: string(workflows.VerifyFailWait), CutoverBudget: workflows.DefaultCutoverBudget}
		req, err := Build(workflows.KindMove, nil, f)
		if err != nil || req.Range == nil || *req.Range != want {
			t.Errorf("move --range %s: %v, %+v", in, err, req.Range)
		}
	}
}

// An --id may not be a workflow id: commands take both forms, so reshard-x
// would name migration x.
func TestIDNotAWorkflowID(t *testing.T) {
	o := Options{ID: "reshard-x", VNodes: 16, Tokens: "balanced", ChunkRows: 1000, VerifyChunkRows: 1000,
		OnVerifyFail: string(workflows.VerifyFailWait), CutoverBudget: workflows.DefaultCutoverBudget}
	if _, err := Build(workflows.KindAddNode, []string{"shard5"}, o); err == nil || !strings.Contains(err.Error(), "may not start with \"reshard-\"") {
		t.Errorf("--id reshard-x: %v", err)
	}
}

// What reshard throttle sends: the adaptive limits given replace them as a
// whole and, alone, keep the rates; the rates alone keep the adaptive
// limits (Adaptive nil); all adaptive limits 0 turn it off.
func TestThrottleUpdate(t *testing.T) {
	for _, tc := range []struct {
		in   Throttle
		want workflows.Throttle
		err  string
	}{
		{Throttle{RowsPerSec: 500, RowsSet: true}, workflows.Throttle{RowsPerSec: 500}, ""},
		{Throttle{ChunkRows: 100, ChunkSet: true}, workflows.Throttle{ChunkRows: 100}, ""},
		{Throttle{AdaptiveSet: true, Adaptive: workflows.AdaptiveThrottle{MaxLatencyIncrease: 10}},
			workflows.Throttle{KeepRates: true, Adaptive: &workflows.AdaptiveThrottle{MaxLatencyIncrease: 10}}, ""},
		{Throttle{AdaptiveSet: true}, workflows.Throttle{KeepRates: true, Adaptive: &workflows.AdaptiveThrottle{}}, ""},
		{Throttle{}, workflows.Throttle{}, "give --rows-per-sec"},
		{Throttle{RowsPerSec: -1, RowsSet: true}, workflows.Throttle{}, "want 0 or more"},
		{Throttle{AdaptiveSet: true, Adaptive: workflows.AdaptiveThrottle{MaxLatencyIncrease: -3}}, workflows.Throttle{}, "--max-source-latency-increase -3"},
	} {
		got, err := ThrottleUpdate(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestNewShards(t *testing.T) {
	rg := ring.Range{Lo: 1, Hi: 2}
	for _, tc := range []struct {
		req  workflows.MigrationRequest
		want string
	}{
		{workflows.MigrationRequest{Kind: workflows.KindAddNode, Shard: "s5"}, "add-node [s5]"},
		{workflows.MigrationRequest{Kind: workflows.KindSplit, Shard: "s1", Into: "s6"}, "--into [s6]"},
		{workflows.MigrationRequest{Kind: workflows.KindMove, Range: &rg, To: "s2"}, "--to [s2]"},
		{workflows.MigrationRequest{Kind: workflows.KindRebalance, Add: []string{"s7", "s8"}, Remove: []string{"s1"}}, "--add [s7 s8]"},
		{workflows.MigrationRequest{Kind: workflows.KindRemoveNode, Shard: "s1"}, " []"},
	} {
		if flag, names := NewShards(tc.req); fmt.Sprint(flag, " ", names) != tc.want {
			t.Errorf("%s: %s %v, want %s", tc.req.Kind, flag, names, tc.want)
		}
	}
}
