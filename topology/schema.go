package topology

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgddl"
	"github.com/reshard/reshard/internal/pgerr"
)

// migrations are the control database's schema: every table, view and
// function any package reads there (topology, keyspaces, plans, workers,
// requests, the routing contract, the cutover journal, the fence holds),
// applied in order by Migrate, each exactly once, recorded in
// reshard.topology_schema. A package that needs a new control table appends
// a step here; never edit an applied one. (The shards' own objects, fences,
// copy checkpoints and verify runs, are their packages'.)
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

	// 6: the routing contract in SQL (docs/contract.md) and the end of
	// every move. A range is published stable on its new owner before the
	// old owner's rows are deleted, so the topology alone cannot say when
	// a move is over: move_ends records it (cleanup: rows gone from the old
	// owner; rollback: the copy gone from the target). Moves of migrations
	// that ended before this step (their "migration <id> (<kind>) ends"
	// version published) are recorded as 'ended'.
	contractSQL,

	// 7: the running workers and the shards their configuration names,
	// refreshed every few seconds by each worker (topology.Workers): the
	// CLI refuses a migration whose shards no running worker knows.
	`CREATE TABLE reshard.workers (
	identity   text PRIMARY KEY,
	task_queue text NOT NULL,
	shards     text[] NOT NULL,
	seen_at    timestamptz NOT NULL DEFAULT now()
);`,

	// 8: operator requests (Updates) the CLI sent and no worker answered
	// in time: Temporal holds them and applies them when a worker runs the
	// workflow. status asks Temporal about each and shows those still
	// waiting (topology.Requests).
	`CREATE TABLE reshard.requests (
	update_id    text PRIMARY KEY,
	migration_id text NOT NULL,
	verb         text NOT NULL,
	request_id   text NOT NULL,
	sent_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX requests_by_migration ON reshard.requests (migration_id, sent_at);`,

	// 9: the weights a migration's plan sets (a rebalance --weight, or the
	// weight of an added shard), written to reshard.shards by the publish
	// of its planned ring (EndMigration). NULL: the plan sets none.
	`ALTER TABLE reshard.plans ADD COLUMN weights jsonb;`,

	// 10: the capacity a migration was predicted to need when it was
	// planned (capacity.Report, as JSON), for status to set against what
	// it took. NULL: planned before predictions, or a dry run.
	`ALTER TABLE reshard.plans ADD COLUMN capacity jsonb;`,

	// 11: the cutover journal and the attempts of each move (package
	// cutover: PGJournal). Before this step cutover created them itself, so
	// every statement takes them as they may already be.
	`CREATE TABLE IF NOT EXISTS reshard.cutover_journal (
	id     bigserial PRIMARY KEY,
	move   text NOT NULL,
	step   text NOT NULL,
	detail text NOT NULL DEFAULT '',
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS cutover_journal_move ON reshard.cutover_journal (move, id);
ALTER TABLE reshard.cutover_journal ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS reshard.cutover_epoch (
	move  text PRIMARY KEY,
	epoch bigint NOT NULL
);`,

	// 12: the fence holds of cutovers in progress (package fence: Control,
	// Wanted). Before this step fence created the table itself.
	`CREATE TABLE IF NOT EXISTS reshard.fence_hold (
	keyspace   text NOT NULL,
	shard      text NOT NULL,
	hold       text NOT NULL,
	ranges     jsonb NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (keyspace, shard, hold)
);
ALTER TABLE reshard.fence_hold ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0;`,

	// 13: the cluster's id (topology.ClusterID): random, made once with the
	// control database, never derived from a DSN. A migration request
	// carries it, and a worker runs an activity only for its own cluster's
	// control database (two clusters' workers on one Temporal task queue).
	`CREATE TABLE reshard.cluster (
	one        boolean PRIMARY KEY DEFAULT true CHECK (one),
	id         text NOT NULL CHECK (id <> ''),
	created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO reshard.cluster (id) VALUES ('cluster-' || left(replace(gen_random_uuid()::text, '-', ''), 16));`,
}

// contractSQL is schema step 6. Tokens are PostgreSQL's own immutable hash
// functions with seed 0, the ones ring ports to Go bit for bit; text keys
// are hashed under "C" (their bytes), as ring.TokenText does, whatever the
// argument's collation.
const contractSQL = `CREATE TABLE reshard.move_ends (
	keyspace     text NOT NULL,
	migration_id text NOT NULL,
	-- A move is the ranges of one migration going from one shard to another.
	from_shard   text NOT NULL,
	to_shard     text NOT NULL,
	move_id      text NOT NULL,
	ranges       jsonb NOT NULL, -- [{"lo":..,"hi":..}], (lo, hi] as in the topology
	outcome      text NOT NULL CHECK (outcome IN ('cleaned_up', 'rolled_back', 'ended')),
	ended_at     timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (migration_id, from_shard, to_shard)
);

INSERT INTO reshard.move_ends (keyspace, migration_id, from_shard, to_shard, move_id, ranges, outcome)
SELECT v.keyspace, p.migration_id, m->>'from', m->>'to', '',
	jsonb_agg(jsonb_build_object('lo', (m->>'lo')::bigint, 'hi', (m->>'hi')::bigint) ORDER BY (m->>'lo')::bigint), 'ended'
FROM reshard.plans p
JOIN LATERAL (SELECT t.keyspace FROM reshard.topology_versions t
	WHERE t.migration_id = p.migration_id
	  AND t.reason LIKE 'migration ' || replace(replace(replace(p.migration_id, '\', '\\'), '%', '\%'), '_', '\_') || ' (%) ends'
	LIMIT 1) v ON true
CROSS JOIN LATERAL jsonb_array_elements(p.moves) m
GROUP BY v.keyspace, p.migration_id, m->>'from', m->>'to';

CREATE FUNCTION reshard.token(key bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT hashint8extended($1, 0)';
CREATE FUNCTION reshard.token(key integer) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT hashint8extended($1::bigint, 0)';
CREATE FUNCTION reshard.token(key smallint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT hashint8extended($1::bigint, 0)';
CREATE FUNCTION reshard.token(key text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT hashtextextended($1 COLLATE "C", 0)';
CREATE FUNCTION reshard.token(key uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT uuid_hash_extended($1, 0)';

-- The token of a key in PostgreSQL text form, by its keyspace's key type
-- (ring.TokenOf): one spelling for every key type.
CREATE FUNCTION reshard.token_of(keyspace text, key text) RETURNS bigint
LANGUAGE plpgsql STABLE STRICT AS $fn$
DECLARE
	kt text;
BEGIN
	SELECT k.key_type INTO kt FROM reshard.keyspaces k WHERE k.name = $1;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'keyspace % is not registered', $1
			USING ERRCODE = 'no_data_found', HINT = 'SELECT name FROM reshard.keyspaces lists the keyspaces';
	END IF;
	CASE kt
	WHEN 'bigint' THEN RETURN hashint8extended($2::bigint, 0);
	WHEN 'text' THEN RETURN hashtextextended($2 COLLATE "C", 0);
	WHEN 'uuid' THEN RETURN uuid_hash_extended($2::uuid, 0);
	END CASE;
END $fn$;

-- The newest version of a keyspace; an error naming it when none is published.
CREATE FUNCTION reshard.current_topology(keyspace text)
RETURNS TABLE (version bigint, ring jsonb, ranges jsonb, reason text, migration_id text, created_at timestamptz)
LANGUAGE plpgsql STABLE STRICT AS $fn$
BEGIN
	RETURN QUERY SELECT t.version, t.ring, t.ranges, t.reason, t.migration_id, t.created_at
		FROM reshard.topology_versions t WHERE t.keyspace = $1 ORDER BY t.version DESC LIMIT 1;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'keyspace %: no topology published', $1
			USING ERRCODE = 'no_data_found', HINT = 'the keyspace is created by reshard init; SELECT DISTINCT keyspace FROM reshard.topology_versions lists those with a topology';
	END IF;
END $fn$;

-- The shard serving token in the keyspace's newest version: the range
-- (lo, hi] holding it, the range starting at MinInt64 including MinInt64.
CREATE FUNCTION reshard.owner(keyspace text, token bigint) RETURNS text
LANGUAGE plpgsql STABLE STRICT AS $fn$
DECLARE
	o text;
BEGIN
	SELECT e->>'owner' INTO o
	FROM reshard.current_topology($1) c, jsonb_array_elements(c.ranges) e
	WHERE $2 <= (e->'range'->>'hi')::bigint
	  AND ($2 > (e->'range'->>'lo')::bigint OR (e->'range'->>'lo')::bigint = -9223372036854775808)
	LIMIT 1;
	IF o IS NULL THEN
		RAISE EXCEPTION 'keyspace %: no range of the current topology holds token %', $1, $2
			USING ERRCODE = 'data_corrupted';
	END IF;
	RETURN o;
END $fn$;

-- Every move of a started migration (one that published a version) and
-- whether it has ended: 'running' until its cleanup deleted the moved rows
-- from the old owner (or its rollback the copy from the target).
CREATE VIEW reshard.moves AS
SELECT v.keyspace, p.migration_id, m->>'from' AS from_shard, m->>'to' AS to_shard,
	jsonb_agg(jsonb_build_object('lo', (m->>'lo')::bigint, 'hi', (m->>'hi')::bigint) ORDER BY (m->>'lo')::bigint) AS ranges,
	coalesce(e.outcome, 'running') AS state, e.ended_at
FROM reshard.plans p
JOIN LATERAL (SELECT t.keyspace FROM reshard.topology_versions t WHERE t.migration_id = p.migration_id LIMIT 1) v ON true
CROSS JOIN LATERAL jsonb_array_elements(p.moves) m
LEFT JOIN reshard.move_ends e ON e.migration_id = p.migration_id AND e.from_shard = m->>'from' AND e.to_shard = m->>'to'
GROUP BY v.keyspace, p.migration_id, m->>'from', m->>'to', e.outcome, e.ended_at;

-- Every range of every keyspace's newest version. settled: the range is
-- stable and no running move touches it, so its rows are on its owner
-- only (a move's rows leave the old owner after the stable publish).
CREATE VIEW reshard.current_ranges AS
WITH cur AS (
	SELECT DISTINCT ON (t.keyspace) t.keyspace, t.version, t.ranges
	FROM reshard.topology_versions t ORDER BY t.keyspace, t.version DESC
), running AS (
	SELECT m.keyspace, (r->>'lo')::bigint AS lo, (r->>'hi')::bigint AS hi
	FROM reshard.moves m, jsonb_array_elements(m.ranges) r WHERE m.state = 'running'
)
SELECT cur.keyspace, cur.version, x.lo, x.hi, x.owner, x.state, x.from_shard, x.to_shard,
	x.state = 'stable' AND NOT EXISTS (
		SELECT 1 FROM running r WHERE r.keyspace = cur.keyspace AND r.lo < x.hi AND x.lo < r.hi) AS settled
FROM cur, LATERAL (
	SELECT (e->'range'->>'lo')::bigint AS lo, (e->'range'->>'hi')::bigint AS hi, e->>'owner' AS owner,
		e->>'state' AS state, e->>'from' AS from_shard, e->>'to' AS to_shard
	FROM jsonb_array_elements(cur.ranges) e) x;

-- Whether every range of the keyspace is settled: no migration of it has a
-- move still running, and none of its ranges is migrating.
CREATE FUNCTION reshard.settled(keyspace text) RETURNS boolean
LANGUAGE plpgsql STABLE STRICT AS $fn$
BEGIN
	PERFORM FROM reshard.current_topology($1); -- the error naming a keyspace without topology
	RETURN (SELECT bool_and(r.settled) FROM reshard.current_ranges r WHERE r.keyspace = $1);
END $fn$;`

// migrateLockKey serializes concurrent Migrate calls (pgddl.Locked).
const migrateLockKey = 0x7265736861726401 // "reshard\x01"

// Migrate creates or upgrades the control database's schema (migrations):
// the one entry point, called once by each process that uses the control
// database (the worker, the CLI commands that write to it, test helpers).
// It is idempotent and safe to run concurrently from several processes.
//
// A role refused a privilege gets the fix: reshard needs no superuser on
// the control database, only CREATE on it (docs/operations.md, "Privileges").
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	err := migrateTo(ctx, pool, len(migrations))
	if !pgerr.Privilege(err) {
		return err
	}
	var role, db string
	if pool.QueryRow(ctx, `SELECT current_user, current_database()`).Scan(&role, &db) != nil {
		return err
	}
	return fmt.Errorf("%w: role %s needs CREATE on the control database %s and the schema reshard as its own; as a superuser: GRANT CREATE ON DATABASE %s TO %s, or psql -v role=%s -v control=1 -d %s -f deploy/reshard-role.sql, which also hands over a schema reshard made by another role",
		err, role, db, pgx.Identifier{db}.Sanitize(), pgx.Identifier{role}.Sanitize(), role, db)
}

// migrateTo applies the steps up to step last (tests build older schemas
// with it).
func migrateTo(ctx context.Context, pool *pgxpool.Pool, last int) error {
	return pgddl.Locked(ctx, pool, migrateLockKey, 0, func(tx pgx.Tx) error {
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
		for i := done; i < last; i++ {
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
