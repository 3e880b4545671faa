package activities

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// moveSeries is the Registerer every metric of the activities and of the
// packages they drive is registered through. It remembers the vectors, so
// that the series of a move can be deleted when the move ends: move ids are
// unbounded, and without this each move would leave its series (and its
// gauges frozen at their last value) for the life of the worker.
type moveSeries struct {
	prometheus.Registerer
	mu   sync.Mutex
	vecs []prometheus.Collector
}

// partialDeleter is every *prometheus.XxxVec.
type partialDeleter interface {
	DeletePartialMatch(labels prometheus.Labels) int
}

func (r *moveSeries) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	if _, ok := c.(partialDeleter); ok {
		r.mu.Lock()
		r.vecs = append(r.vecs, c)
		r.mu.Unlock()
	}
	return nil
}

func (r *moveSeries) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// forget deletes the series labelled move=label, of gauges only or of every
// vector; it returns how many went.
func (r *moveSeries) forget(label string, gaugesOnly bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.vecs {
		if _, gauge := c.(*prometheus.GaugeVec); gaugesOnly && !gauge {
			continue
		}
		n += c.(partialDeleter).DeletePartialMatch(prometheus.Labels{"move": label})
	}
	return n
}

// streamStopped drops the gauges of a stream that no longer runs in this
// process (lag, retained WAL, positions): a stopped stream has no lag, and a
// gauge left behind would show its last value forever. Its counters stay
// until the move ends, so that rates over them stay right.
func (m *Metrics) streamStopped(label string) {
	if m.series != nil {
		m.series.forget(label, true)
	}
}

// moveEnded deletes every series of a move that ended (cleaned up or rolled
// back): its copy, verify, forward and reverse streams ("<id>/reverse",
// cdc.ReverseOptions) and its progress gauges.
func (m *Metrics) moveEnded(move string) {
	if m.series != nil {
		m.series.forget(move, false)
		m.series.forget(move+"/reverse", false)
	}
}
