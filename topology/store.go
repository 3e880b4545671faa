package topology

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
)

// NotifyChannel is the channel Publish notifies, with the new version as
// payload ("keyspace:version" for a keyspace other than DefaultKeyspace).
const NotifyChannel = "reshard_topology"

// ErrNoTopology: nothing has been published yet.
var ErrNoTopology = errors.New("no topology published yet; publish version 1 with expected version 0")

// ErrVersionConflict is matched (errors.Is) by every *VersionConflictError.
var ErrVersionConflict = errors.New("topology version conflict")

// VersionConflictError: Publish expected the current version to be Want but
// it is Have. Someone else published first; reload, re-plan, publish again.
type VersionConflictError struct {
	Have int64 // the current version in the control database
	Want int64 // the version the publisher expected
}

func (e *VersionConflictError) Error() string {
	return fmt.Sprintf("topology version conflict: expected current version %d, the control database has %d; reload the topology and publish against it", e.Want, e.Have)
}

// Is makes errors.Is(err, ErrVersionConflict) true.
func (e *VersionConflictError) Is(target error) bool { return target == ErrVersionConflict }

// Store reads and writes the topology of one keyspace in the control
// database (versions, ring, ranges are per keyspace; the shard registry,
// keyspaces and plans are the cluster's). Call Migrate once before using it.
type Store struct {
	pool     *pgxpool.Pool
	keyspace string
}

// NewStore returns a store over a pool on the control database, for the
// keyspace DefaultKeyspace (In gives another).
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, keyspace: DefaultKeyspace} }

// In returns a store of the same database for keyspace ks ("" is
// DefaultKeyspace).
func (s *Store) In(ks string) *Store {
	if ks == "" {
		ks = DefaultKeyspace
	}
	return &Store{pool: s.pool, keyspace: ks}
}

// Keyspace is the keyspace whose topology the store reads and writes.
func (s *Store) Keyspace() string { return s.keyspace }

// ConnConfig is a copy of the configuration of the store's connections, for
// a session of its own (a router's LISTEN).
func (s *Store) ConnConfig() *pgx.ConnConfig { return s.pool.Config().ConnConfig.Copy() }

// notifyPayload is the NOTIFY payload of a version: the version for the
// default keyspace (as before keyspaces), "keyspace:version" otherwise.
func notifyPayload(ks string, version int64) string {
	if ks == DefaultKeyspace {
		return strconv.FormatInt(version, 10)
	}
	return ks + ":" + strconv.FormatInt(version, 10)
}

// ParseNotifyPayload reads notifyPayload's form: the keyspace and version a
// NOTIFY on NotifyChannel announces (package router listens for them).
func ParseNotifyPayload(p string) (ks string, version int64, err error) {
	ks = DefaultKeyspace
	if i := strings.LastIndexByte(p, ':'); i >= 0 {
		ks, p = p[:i], p[i+1:]
	}
	version, err = strconv.ParseInt(p, 10, 64)
	return ks, version, err
}

const selectVersion = `SELECT version, ring, ranges, reason, coalesce(migration_id, ''), created_at FROM reshard.topology_versions WHERE keyspace = $1`

// Current returns the newest version, or ErrNoTopology.
func (s *Store) Current(ctx context.Context) (Topology, error) {
	t, err := s.scanOne(ctx, selectVersion+` ORDER BY version DESC LIMIT 1`, s.keyspace)
	if errors.Is(err, pgx.ErrNoRows) {
		return Topology{}, ErrNoTopology
	}
	if err != nil {
		return Topology{}, fmt.Errorf("load current topology: %w", err)
	}
	return t, nil
}

// Load returns one version.
func (s *Store) Load(ctx context.Context, version int64) (Topology, error) {
	t, err := s.scanOne(ctx, selectVersion+` AND version = $2`, s.keyspace, version)
	if errors.Is(err, pgx.ErrNoRows) {
		return Topology{}, fmt.Errorf("load topology version %d: no such version", version)
	}
	if err != nil {
		return Topology{}, fmt.Errorf("load topology version %d: %w", version, err)
	}
	return t, nil
}

func (s *Store) scanOne(ctx context.Context, sql string, args ...any) (Topology, error) {
	var (
		t             Topology
		ringJ, rangeJ []byte
	)
	if err := s.pool.QueryRow(ctx, sql, args...).Scan(&t.Version, &ringJ, &rangeJ, &t.Reason, &t.MigrationID, &t.CreatedAt); err != nil {
		return Topology{}, err
	}
	t.Ring = new(ring.Ring)
	if err := json.Unmarshal(ringJ, t.Ring); err != nil {
		return Topology{}, fmt.Errorf("version %d: ring: %w", t.Version, err)
	}
	var states []RangeState
	if err := json.Unmarshal(rangeJ, &states); err != nil {
		return Topology{}, fmt.Errorf("version %d: ranges: %w", t.Version, err)
	}
	t.migrating = fromStates(states)
	if err := t.validate(); err != nil {
		return Topology{}, fmt.Errorf("version %d: %w", t.Version, err)
	}
	return t, nil
}

// HistoryEntry summarizes one version.
type HistoryEntry struct {
	Version     int64     `json:"version"`
	Reason      string    `json:"reason"`
	MigrationID string    `json:"migration_id,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	Shards      int       `json:"shards"`
	VNodes      int       `json:"vnodes"`
	Migrating   int       `json:"migrating_ranges"`
}

// History returns the newest limit versions, newest first (limit <= 0: all),
// summarized in SQL so that no ring is decoded.
func (s *Store) History(ctx context.Context, limit int) ([]HistoryEntry, error) {
	sql := `SELECT version, reason, coalesce(migration_id, ''), created_at,
	(SELECT count(DISTINCT v->>'shard') FROM jsonb_array_elements(ring->'vnodes') v),
	jsonb_array_length(ring->'vnodes'),
	(SELECT count(*) FROM jsonb_array_elements(ranges) r WHERE r->>'state' = 'migrating')
FROM reshard.topology_versions WHERE keyspace = $1 ORDER BY version DESC`
	args := []any{s.keyspace}
	if limit > 0 {
		sql += ` LIMIT $2`
		args = append(args, limit)
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("topology history: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (HistoryEntry, error) {
		var h HistoryEntry
		err := r.Scan(&h.Version, &h.Reason, &h.MigrationID, &h.CreatedAt, &h.Shards, &h.VNodes, &h.Migrating)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("topology history: %w", err)
	}
	return out, nil
}

// Publish makes next the version expected+1, if and only if the current
// version is expected (0 for the first publish): a compare-and-set. Of
// concurrent publishers on the same expected version exactly one wins; the
// others get a *VersionConflictError (errors.Is ErrVersionConflict). In the
// same transaction it notifies NotifyChannel with the new version, so routers
// hear of it exactly when it is visible. Every shard named by next must be
// registered. It returns next as stored (Version, CreatedAt set).
func (s *Store) Publish(ctx context.Context, expected int64, next Topology) (Topology, error) {
	return s.PublishGuarded(ctx, expected, next, nil)
}

// Guard runs inside a publish's transaction after the compare-and-set
// lock: a precondition (an error refuses the publish; a cutover publishes
// only while its attempt is the move's newest) or a write that must commit
// with the version and only with it (a migration's end sets the planned
// weights).
type Guard func(ctx context.Context, tx pgx.Tx) error

// PublishGuarded is Publish with a precondition checked in the same
// transaction (nil: none).
func (s *Store) PublishGuarded(ctx context.Context, expected int64, next Topology, guard Guard) (Topology, error) {
	if err := next.validate(); err != nil {
		return Topology{}, fmt.Errorf("publish topology: %w", err)
	}
	if next.Reason == "" {
		return Topology{}, errors.New("publish topology: a reason is required (it is the audit trail of who changed ownership and why)")
	}
	ringJ, err := json.Marshal(next.Ring)
	if err != nil {
		return Topology{}, fmt.Errorf("publish topology: %w", err)
	}
	rangeJ, err := json.Marshal(next.States())
	if err != nil {
		return Topology{}, fmt.Errorf("publish topology: %w", err)
	}
	names := next.Ring.Shards()
	for _, m := range next.migrating {
		names = append(names, m.From, m.To)
	}
	var migrationID *string
	if next.MigrationID != "" {
		migrationID = &next.MigrationID
	}
	next.Version = expected + 1
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The lock, the compare and the registry check in one round trip,
		// the insert and the notification in another: a cutover publishes
		// inside its write pause.
		b := &pgx.Batch{}
		// Self-conflicting, so publishers queue here; readers are not blocked.
		b.Queue(`LOCK TABLE reshard.topology_versions IN SHARE ROW EXCLUSIVE MODE`)
		var have int64
		b.Queue(`SELECT coalesce(max(version), 0) FROM reshard.topology_versions WHERE keyspace = $1`, s.keyspace).QueryRow(func(r pgx.Row) error { return r.Scan(&have) })
		var missing []string
		b.Queue(`SELECT coalesce(array_agg(DISTINCT n ORDER BY n), '{}') FROM unnest($1::text[]) n
WHERE NOT EXISTS (SELECT 1 FROM reshard.shards s WHERE s.name = n)`, names).QueryRow(func(r pgx.Row) error { return r.Scan(&missing) })
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if have != expected {
			return &VersionConflictError{Have: have, Want: expected}
		}
		if guard != nil {
			if err := guard(ctx, tx); err != nil {
				return err
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("shards %v are not registered; register them (RegisterShard) before publishing a topology naming them", missing)
		}
		b = &pgx.Batch{}
		b.Queue(`INSERT INTO reshard.topology_versions (keyspace, version, ring, ranges, reason, migration_id)
VALUES ($1, $2, $3, $4, $5, $6) RETURNING created_at`, s.keyspace, next.Version, ringJ, rangeJ, next.Reason, migrationID).QueryRow(func(r pgx.Row) error { return r.Scan(&next.CreatedAt) })
		b.Queue(`SELECT pg_notify($1, $2)`, NotifyChannel, notifyPayload(s.keyspace, next.Version))
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerr.CodeUniqueViolation { // a racing insert that skipped the lock
			have, herr := s.currentVersion(ctx)
			if herr != nil {
				have = -1
			}
			err = &VersionConflictError{Have: have, Want: expected}
		}
		return Topology{}, fmt.Errorf("publish topology version %d: %w", expected+1, err)
	}
	return next, nil
}

func (s *Store) currentVersion(ctx context.Context) (int64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM reshard.topology_versions WHERE keyspace = $1`, s.keyspace).Scan(&v)
	return v, err
}
