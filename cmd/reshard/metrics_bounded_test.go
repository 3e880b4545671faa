package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

// reshardSeries counts the reshard_* series a worker's /metrics exports.
func reshardSeries(t *testing.T, base string) (int, []string) {
	t.Helper()
	code, body := get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	var series []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "reshard_") {
			name, _, _ := strings.Cut(l, " ")
			series = append(series, name)
		}
	}
	return len(series), series
}

// Sequential migrations over the same shards (shard3 added, removed, added
// again, ...) leave the worker's /metrics with no more series than the first
// one did: each move's series go when it ends (main: every move added its own
// for good). Four migrations (add-node, remove-node, twice): each after
// the first must export no more series than the first; a series kept per
// move shows after the second. make test's budget took the count down from
// ten, then six (88 s of CI's 14.5 minutes; each migration about 13 s).
func TestMetricsBoundedOverMigrations(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	c := newTestCluster(t, true)
	if out, code := c.run(t, "init", "--shards", "shard1,shard2"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	placeByOwner(t, c, 300)
	wc, err := devenv.ReadWorkerConfig(c.config)
	if err != nil {
		t.Fatal(err)
	}
	base := startWorker(t, wc)

	const migrations = 4
	var after1 int
	var first []string
	for i := 1; i <= migrations; i++ {
		id := fmt.Sprintf("bounded-%d", i)
		verb := "add-node"
		if i%2 == 0 {
			verb = "remove-node"
		}
		args := []string{verb, "shard3", "--id", id, "--grace", "2s", "--wal-window", "200ms"}
		if i == 1 {
			args = append(args, "--table", "users:id", "--table", "orders:user_id")
		}
		if out, code := c.run(t, args...); code != 0 {
			t.Fatalf("%s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		if i == 1 {
			movesGauged(t, base)
		}
		out, code := runFor(t, 3*time.Minute, "status", "--config", c.config, id, "--watch", "--interval", "500ms")
		if code != 0 || !strings.Contains(out, "migration "+id+" ended: "+string(workflows.PhaseDone)) {
			t.Fatalf("migration %d (%s shard3): exit %d\n%s", i, verb, code, out)
		}
		n, series := reshardSeries(t, base)
		t.Logf("after migration %d (%s shard3): %d reshard_* series", i, verb, n)
		for _, s := range series {
			if strings.Contains(s, `move="`) || strings.Contains(s, `migration="`) {
				t.Errorf("after migration %d ended: %s is still exported", i, s)
			}
		}
		if i == 1 {
			after1, first = n, series
			continue
		}
		if n > after1 {
			var extra []string
			for _, s := range series {
				if !strings.Contains(strings.Join(first, "\n"), s) {
					extra = append(extra, s)
				}
			}
			t.Errorf("after migration %d: %d reshard_* series, after the first %d; new:\n%s", i, n, after1, strings.Join(extra, "\n"))
		}
	}
}

// movesGauged waits until the worker's move-state gauges show the running
// migration: reshard_migrations_running 1 and one move in some phase.
func movesGauged(t *testing.T, base string) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	for {
		code, body := get(t, base+"/metrics")
		moves := 0
		running := false
		for _, l := range strings.Split(body, "\n") {
			if l == "reshard_migrations_running 1" {
				running = true
			}
			if strings.HasPrefix(l, "reshard_moves{phase=") && !strings.HasSuffix(l, " 0") {
				moves++
			}
		}
		if running && moves > 0 {
			t.Logf("the move-state gauges showed the running migration %s after it started", time.Since(start).Round(10*time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the move-state gauges never showed the running migration: /metrics %d\n%s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
