package topology

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Request is an operator request (a Temporal Update) the CLI sent to a
// migration and no worker answered before the CLI gave up waiting: Temporal
// holds it and applies it (or the workflow's checks reject it) when a
// worker runs the workflow. Whether it is still waiting is Temporal's to
// say; the record only remembers that it was sent.
type Request struct {
	UpdateID    string
	MigrationID string
	Verb        string
	RequestID   string
	SentAt      time.Time
}

// RecordRequest remembers a request left pending; the same update sent
// again (the same --request-id) keeps its first record.
func (s *Store) RecordRequest(ctx context.Context, r Request) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO reshard.requests (update_id, migration_id, verb, request_id, sent_at) VALUES ($1, $2, $3, $4, now())
ON CONFLICT (update_id) DO NOTHING`, r.UpdateID, r.MigrationID, r.Verb, r.RequestID); err != nil {
		return fmt.Errorf("record the pending %s of migration %s: %w", r.Verb, r.MigrationID, err)
	}
	return nil
}

// Requests lists the requests recorded for a migration, oldest first, and
// forgets those older than a week (Temporal has long answered or dropped
// them).
func (s *Store) Requests(ctx context.Context, migrationID string) ([]Request, error) {
	if _, err := s.pool.Exec(ctx, `DELETE FROM reshard.requests WHERE sent_at < now() - interval '7 days'`); err != nil {
		return nil, fmt.Errorf("read the pending requests of migration %s: %w", migrationID, err)
	}
	rows, err := s.pool.Query(ctx, `SELECT update_id, migration_id, verb, request_id, sent_at FROM reshard.requests
WHERE migration_id = $1 ORDER BY sent_at, update_id`, migrationID)
	if err != nil {
		return nil, fmt.Errorf("read the pending requests of migration %s: %w", migrationID, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Request, error) {
		var q Request
		err := r.Scan(&q.UpdateID, &q.MigrationID, &q.Verb, &q.RequestID, &q.SentAt)
		return q, err
	})
}
