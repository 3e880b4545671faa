package demo

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/testkit/ledger"
	"github.com/reshard/reshard/topology"
)

// Writers update and delete users through a router while a migration
// runs, each write acknowledged in a ledger, so that every acknowledged
// write can be looked for on its owner afterwards.
type Writers struct {
	router     *router.Router
	led        *ledger.Ledger
	table      ledger.Table
	keys       []int64
	stats      *ledger.Stats
	stopRouter func()
	stopWrites func()
	stopped    bool
}

// WritersOptions size the writers.
type WritersOptions struct {
	Users   int64 // the loaded users, 1..Users
	Keys    int   // users the writers write (LedgerKeys)
	Workers int
	Seed    uint64
}

// StartWriters starts a router over pools (the shards of store's keyspace)
// and the writers through it; Close stops both.
func StartWriters(ctx context.Context, store *topology.Store, pools map[string]*pgxpool.Pool, o WritersOptions) (*Writers, error) {
	rt, err := router.New(ctx, store, pools, router.Options{PollInterval: 500 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	rctx, stopRouter := context.WithCancel(ctx)
	go func() { _ = rt.Run(rctx) }()
	w := &Writers{router: rt, led: ledger.New(), table: ledger.Table{Name: "users", Key: "id", Val: "name"}, keys: LedgerKeys(o.Users, o.Keys), stopRouter: stopRouter}
	for _, k := range w.keys {
		w.led.Ack(k, ledger.Value{V: "name " + strconv.FormatInt(k, 10)})
	}
	wctx, stopWrites := context.WithCancel(ctx)
	w.stopWrites = stopWrites
	w.stats = ledger.Write(wctx, rt, w.led, ledger.WriterOptions{Table: w.table, Keys: w.keys, Workers: o.Workers, Pause: 2 * time.Millisecond, Seed: o.Seed})
	return w, nil
}

// Keys is how many users the writers write.
func (w *Writers) Keys() int { return len(w.keys) }

// stop stops the writers and waits for them (once).
func (w *Writers) stop() {
	if !w.stopped {
		w.stopped = true
		w.stopWrites()
		w.stats.Wait()
	}
}

// Close stops the writers, then the router.
func (w *Writers) Close() {
	w.stop()
	w.stopRouter()
}

// Check stops the writers, then looks for every acknowledged write on its
// owner in the router's newest topology and checks every row's placement;
// it fills those figures of sum.
func (w *Writers) Check(ctx context.Context, pools map[string]*pgxpool.Pool, sum *Summary) error {
	w.stop()
	if err := w.router.Refresh(ctx); err != nil {
		return err
	}
	final := w.router.Topology()
	mismatches, err := w.led.Check(ctx, w.table, pools, func(k int64) string { return final.Ring.OwnerInt64(k) })
	if err != nil {
		return err
	}
	place, err := CheckPlacement(ctx, pools, final.Ring)
	if err != nil {
		return err
	}
	sum.Final, sum.Stats, sum.Mismatches, sum.Placement, sum.Ledger = final, w.stats, mismatches, place, len(w.keys)
	return nil
}
