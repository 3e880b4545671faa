-- The privileges reshard needs, without superuser (PostgreSQL 15 or later;
-- docs/operations.md, "Privileges", says why each one). Run it as a superuser
-- with psql, once per database, after creating the role (CREATE ROLE reshard
-- LOGIN PASSWORD '...'):
--
--   on each shard's database, naming the roles that own the keyspace's tables:
--     psql -v role=reshard -v owners=app -d <shard database> -f deploy/reshard-role.sql
--   on the control database, naming the roles whose routers read the topology:
--     psql -v role=reshard -v control=1 -v readers=app -d <control database> -f deploy/reshard-role.sql
--
-- Idempotent: run it again after adding a shard or a table owner. Preflight
-- (`reshard plan`) names any privilege still missing with the statement that
-- grants it.
\set ON_ERROR_STOP on

\if :{?role}
\else
DO $$ BEGIN RAISE EXCEPTION 'name the role: psql -v role=reshard ...'; END $$;
\endif
\if :{?control}
\elif :{?owners}
\else
DO $$ BEGIN RAISE EXCEPTION 'on a shard, name the roles owning its tables: -v owners=app[,other]; on the control database: -v control=1'; END $$;
\endif

-- Control database and shards: the schema reshard (topology, workers; fences,
-- checkpoints, journal) is created by the role, and publications need CREATE
-- on the database too.
SELECT format('GRANT CREATE ON DATABASE %I TO %I', current_database(), :'role') \gexec

-- A schema reshard made before by another role (a superuser that ran reshard)
-- is handed over with everything in it.
SELECT format('ALTER SCHEMA reshard OWNER TO %I', :'role') FROM pg_namespace WHERE nspname = 'reshard' \gexec
SELECT format('ALTER %s %s OWNER TO %I', CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END, c.oid::regclass, :'role')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'reshard' AND c.relkind IN ('r', 'p', 'v', 'S')
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i')) \gexec
SELECT format('ALTER FUNCTION %s OWNER TO %I', p.oid::regprocedure, :'role')
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'reshard' \gexec

\if :{?control}
\if :{?readers}
-- Routers read the topology (docs/contract.md): the schema reshard and its
-- tables, those there now and those later versions of reshard add.
SELECT format('ALTER DEFAULT PRIVILEGES FOR ROLE %I GRANT USAGE ON SCHEMAS TO %I', :'role', btrim(o)),
       format('ALTER DEFAULT PRIVILEGES FOR ROLE %I GRANT SELECT ON TABLES TO %I', :'role', btrim(o))
FROM unnest(string_to_array(:'readers', ',')) o WHERE btrim(o) <> '' \gexec
SELECT format('GRANT USAGE ON SCHEMA reshard TO %I', btrim(o)), format('GRANT SELECT ON ALL TABLES IN SCHEMA reshard TO %I', btrim(o))
FROM unnest(string_to_array(:'readers', ',')) o, pg_namespace n WHERE n.nspname = 'reshard' AND btrim(o) <> '' \gexec
\endif
\quit
\endif

-- Shards only.
-- Replication slots: the move's (with its exported snapshot), the reverse
-- stream's during GRACE, verify's temporary ones.
SELECT format('ALTER ROLE %I REPLICATION', :'role') \gexec
-- The appliers (copy, CDC, reverse CDC, cleanup) pass the fence triggers with
-- session_replication_role = replica.
SELECT format('GRANT SET ON PARAMETER session_replication_role TO %I', :'role') \gexec
-- The appliers record what they applied in a replication origin.
SELECT format('GRANT EXECUTE ON FUNCTION %s TO %I', f, :'role')
FROM unnest(ARRAY['pg_replication_origin_create(text)', 'pg_replication_origin_drop(text)',
                  'pg_replication_origin_session_setup(text)', 'pg_replication_origin_session_progress(boolean)',
                  'pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone)']) f \gexec
-- --read-from standby: a verify pauses the standby's replay for the few
-- milliseconds of its snapshot (granted here, replicated to the standby).
SELECT format('GRANT EXECUTE ON FUNCTION %s TO %I', f, :'role')
FROM unnest(ARRAY['pg_wal_replay_pause()', 'pg_wal_replay_resume()']) f \gexec
-- Every session's type and state in pg_stat_activity: the cutover's in-flight
-- wait, the copy's backoff on busy sessions, free WAL senders.
SELECT format('GRANT pg_read_all_stats TO %I', :'role') \gexec
-- Row-level security: every reshard session runs with row_security = off, so
-- a query that a policy would filter fails instead of seeing fewer rows (a
-- copy of 0 rows, a verify that passes on 0). A table with FORCE ROW LEVEL
-- SECURITY applies its policies to its owner's members too: only BYPASSRLS
-- lets reshard move it. It gives the role no more than the owners'
-- privileges below already do (an owner may disable the table's policies).
SELECT format('ALTER ROLE %I BYPASSRLS', :'role') \gexec
-- The owners' privileges: only a table's owner may publish it and drop its
-- triggers; the copy, CDC and cleanup read and write its rows.
SELECT format('GRANT %I TO %I', btrim(o), :'role') FROM unnest(string_to_array(:'owners', ',')) o WHERE btrim(o) <> '' \gexec
