package topology

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations are applied in order, each exactly once, recorded in
// reshard.topology_schema. Append new steps; never edit an applied one.
var migrations = []string{
	// 1: shards, versions, and the triggers that keep versions append-only.
	`CREATE SCHEMA IF NOT EXISTS reshard;

CREATE TABLE reshard.shards (
	name           text PRIMARY KEY CHECK (name <> ''),
	-- A connection reference only: where the shard is and as whom to
	-- connect. The password comes from the environment of whoever connects
	-- (PGPASSWORD, ~/.pgpass, a secret store) and is never stored here.
	host           text NOT NULL CHECK (host <> ''),
	port           integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
	dbname         text NOT NULL CHECK (dbname <> ''),
	username       text NOT NULL CHECK (username <> ''),
	failure_domain text NOT NULL DEFAULT '',
	weight         double precision NOT NULL DEFAULT 1 CHECK (weight > 0),
	state          text NOT NULL CHECK (state IN ('active', 'joining', 'leaving')),
	created_at     timestamptz NOT NULL DEFAULT now(),
	updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE reshard.topology_versions (
	version      bigint PRIMARY KEY CHECK (version > 0),
	ring         jsonb NOT NULL,
	-- Every range of the token space with its owner and state
	-- (stable, or migrating with from/to), readable without the ring code.
	ranges       jsonb NOT NULL,
	reason       text NOT NULL,
	migration_id text,
	created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION reshard.topology_versions_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'reshard.topology_versions is append-only: % refused', TG_OP
		USING ERRCODE = 'restrict_violation',
		      HINT = 'publish a new version instead of changing an old one';
END $$;

CREATE TRIGGER append_only_row BEFORE UPDATE OR DELETE ON reshard.topology_versions
	FOR EACH ROW EXECUTE FUNCTION reshard.topology_versions_append_only();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON reshard.topology_versions
	FOR EACH STATEMENT EXECUTE FUNCTION reshard.topology_versions_append_only();

-- Versions have no gaps: an insert must be exactly the next one. Publish
-- also checks this under a lock; the trigger covers hand-written inserts.
CREATE FUNCTION reshard.topology_versions_next_only() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	cur bigint;
BEGIN
	SELECT coalesce(max(version), 0) INTO cur FROM reshard.topology_versions;
	IF NEW.version <> cur + 1 THEN
		RAISE EXCEPTION 'reshard.topology_versions: version % inserted, the next one is %', NEW.version, cur + 1
			USING ERRCODE = 'restrict_violation';
	END IF;
	RETURN NEW;
END $$;

CREATE TRIGGER next_only BEFORE INSERT ON reshard.topology_versions
	FOR EACH ROW EXECUTE FUNCTION reshard.topology_versions_next_only();`,

	// 2: keyspaces — what is sharded: the tables that move together, each
	// with its key column. Every migration moves every table of its
	// keyspace.
	`CREATE TABLE reshard.keyspaces (
	name       text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
	key_type   text NOT NULL CHECK (key_type IN ('bigint', 'text', 'uuid')),
	created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE reshard.keyspace_tables (
	keyspace    text NOT NULL REFERENCES reshard.keyspaces (name),
	schema_name text NOT NULL,
	table_name  text NOT NULL,
	key_column  text NOT NULL,
	added_at    timestamptz NOT NULL DEFAULT now(),
	-- A table belongs to one keyspace: its rows follow one ring.
	PRIMARY KEY (schema_name, table_name)
);`,

	// 3: a shard that owns nothing and that no move names is removed.
	`ALTER TABLE reshard.shards DROP CONSTRAINT shards_state_check;
ALTER TABLE reshard.shards ADD CONSTRAINT shards_state_check CHECK (state IN ('active', 'joining', 'leaving', 'removed'));`,

	// 4: plans, computed once when a migration starts and read by every
	// step after (never planned again).
	`CREATE TABLE reshard.plans (
	migration_id text PRIMARY KEY,
	from_version bigint NOT NULL,
	ring_before  jsonb NOT NULL,
	ring_after   jsonb NOT NULL,
	moves        jsonb NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now()
);`,

	// 5: a topology per keyspace: versions are numbered, appended and
	// notified per keyspace. Versions from before keyspaces are the
	// default keyspace's.
	`ALTER TABLE reshard.topology_versions ADD COLUMN keyspace text NOT NULL DEFAULT 'default';
ALTER TABLE reshard.topology_versions DROP CONSTRAINT topology_versions_pkey;
ALTER TABLE reshard.topology_versions ADD PRIMARY KEY (keyspace, version);

CREATE OR REPLACE FUNCTION reshard.topology_versions_next_only() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	cur bigint;
BEGIN
	SELECT coalesce(max(version), 0) INTO cur FROM reshard.topology_versions WHERE keyspace = NEW.keyspace;
	IF NEW.version <> cur + 1 THEN
		RAISE EXCEPTION 'reshard.topology_versions: version % of keyspace % inserted, the next one is %', NEW.version, NEW.keyspace, cur + 1
			USING ERRCODE = 'restrict_violation';
	END IF;
	RETURN NEW;
END $$;`,
}

// migrateLockKey serializes concurrent Migrate calls (pg_advisory_xact_lock).
const migrateLockKey = 0x7265736861726401 // "reshard\x01"

// Migrate creates or upgrades the topology schema in the control database.
// It is idempotent and safe to run concurrently from several processes.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLockKey)); err != nil {
			return fmt.Errorf("migrate topology schema: lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS reshard;
CREATE TABLE IF NOT EXISTS reshard.topology_schema (
	step       integer PRIMARY KEY,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
			return fmt.Errorf("migrate topology schema: %w", err)
		}
		var done int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(step), 0) FROM reshard.topology_schema`).Scan(&done); err != nil {
			return fmt.Errorf("migrate topology schema: read applied steps: %w", err)
		}
		if done > len(migrations) {
			return fmt.Errorf("migrate topology schema: the control database is at step %d, this binary knows %d; upgrade reshard", done, len(migrations))
		}
		for i := done; i < len(migrations); i++ {
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return fmt.Errorf("migrate topology schema: step %d: %w", i+1, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO reshard.topology_schema (step) VALUES ($1)`, i+1); err != nil {
				return fmt.Errorf("migrate topology schema: record step %d: %w", i+1, err)
			}
		}
		return nil
	})
}
