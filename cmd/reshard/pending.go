package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/control"
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
		ago := now.Sub(p.SentAt).Round(time.Second)
		if p.Lost {
			fmt.Fprintf(out, "lost request: %s sent %s (%s ago, --request-id %s) is no longer held by Temporal (its server restarted or the workflow ended before a worker took it): it was NOT applied; send it again if it is still wanted\n",
				p.Verb, p.SentAt.Local().Format(time.TimeOnly), ago, p.RequestID)
			continue
		}
		fmt.Fprintf(out, "pending request: %s sent %s (%s ago, --request-id %s), not applied yet: Temporal holds it until a worker runs the workflow\n",
			p.Verb, p.SentAt.Local().Format(time.TimeOnly), ago, p.RequestID)
	}
}
