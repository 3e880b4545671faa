package main

import (
	"context"
	"io"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/statusview"
	"github.com/reshard/reshard/topology"
)

// recordPending remembers a request left pending in the control database,
// for status. It is best effort: the request itself is in Temporal, and a
// control database that cannot be reached only means status cannot list it.
func recordPending(ctx context.Context, cfg *clusterConfig, r topology.Request) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	store, pool, err := cfg.openStore(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	return store.RecordRequest(ctx, r)
}

// pendingRequests are the requests recorded for a migration that Temporal
// still holds unanswered (or has lost): control.PendingOf.
func pendingRequests(ctx context.Context, cfg *clusterConfig, tc client.Client, id, wfID string) ([]control.Pending, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	store, pool, err := cfg.openStore(ctx)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	recorded, err := store.Requests(ctx, id)
	if err != nil {
		return nil, err
	}
	return control.PendingOf(ctx, tc, wfID, recorded), nil
}

// printPending writes one line per pending request.
func printPending(out io.Writer, ps []control.Pending, now time.Time) {
	for _, p := range ps {
		statusview.PrintPending(out, p.Verb, p.RequestID, p.SentAt, p.Lost, now)
	}
}
