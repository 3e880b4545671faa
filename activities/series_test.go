package activities

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reshard/reshard/workflows"
)

var variableLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)

// touchMoveSeries gives every move-labelled vector registered through m a
// series of move (the other labels "x"), as a copy, a verify and the
// forward and reverse streams of a move do; it returns how many families
// carry a move label.
func touchMoveSeries(t *testing.T, m *Metrics, move string) int {
	t.Helper()
	families := 0
	m.series.mu.Lock()
	vecs := slices.Clone(m.series.vecs)
	m.series.mu.Unlock()
	for _, c := range vecs {
		ch := make(chan *prometheus.Desc, 8)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			sm := variableLabels.FindStringSubmatch(d.String())
			if sm == nil {
				t.Fatalf("cannot read the labels of %s", d)
			}
			names := strings.Split(sm[1], ",")
			if !slices.Contains(names, "move") {
				continue
			}
			families++
			labels := prometheus.Labels{}
			for _, n := range names {
				labels[n] = "x"
			}
			for _, mv := range []string{move, move + "/reverse"} {
				labels["move"] = mv
				switch v := c.(type) {
				case *prometheus.CounterVec:
					v.With(labels).Inc()
				case *prometheus.GaugeVec:
					v.With(labels).Set(1)
				case *prometheus.HistogramVec:
					v.With(labels).Observe(1)
				default:
					t.Fatalf("%T with a move label: the test does not know how to fill it", c)
				}
			}
		}
	}
	return families
}

func seriesCount(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

// The series of a move are gone when it ends: after N move lifecycles the
// worker exports as many series as after one (main kept every move's
// series for the life of the worker: 295 series after 4 migrations).
func TestMoveSeriesBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	a := New(&Resolver{}, nil, m)
	lifecycle := func(i int) {
		ref := workflows.MoveRef{MigrationID: fmt.Sprintf("add-%d", i),
			Spec: workflows.MoveSpec{ID: fmt.Sprintf("add-%d-shard1-shard3", i), EstRows: 100, EstBytes: 1000}}
		if n := touchMoveSeries(t, m, ref.Spec.ID); n < 10 {
			t.Fatalf("%d metric families carry a move label; want the copy's, the streams' and the progress gauges (10 or more)", n)
		}
		a.progressGauges(workflows.CopySliceInput{Move: ref}, workflows.CopyProgress{Rows: 40, Bytes: 400})
		// The cutover stops the forward stream: its gauges go at once.
		a.metrics.streamStopped(ref.Spec.ID)
		if n := gaugesOf(t, reg, ref.Spec.ID); n != 0 {
			t.Errorf("move %s: %d stream gauge series left after its stream stopped", ref.Spec.ID, n)
		}
		a.metrics.moveEnded(ref.Spec.ID) // what Cleanup and Rollback do once done
	}
	lifecycle(0)
	after1 := seriesCount(t, reg)
	for i := 1; i < 10; i++ {
		lifecycle(i)
	}
	if after10 := seriesCount(t, reg); after10 != after1 {
		t.Errorf("%d series after 10 move lifecycles, %d after 1", after10, after1)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "move" || l.GetName() == "migration" {
					t.Errorf("%s{%s=%q} outlived its move", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// gaugesOf counts the stream gauge series (reshard_cdc_*) of a move label.
func gaugesOf(t *testing.T, reg *prometheus.Registry, move string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetType().String() != "GAUGE" || !strings.HasPrefix(mf.GetName(), "reshard_cdc_") {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "move" && l.GetValue() == move {
					n++
				}
			}
		}
	}
	return n
}
