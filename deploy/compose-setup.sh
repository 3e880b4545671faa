#!/bin/sh
# The one-shot `setup` of docker-compose.yml: the example tables on every shard
# (deploy/schema.sql), owned by an application role, and the least-privileged
# role reshard runs as (deploy/reshard-role.sql), so that the worker and init
# never connect as a superuser.
#
#   deploy/compose-setup.sh CONTROL SHARD...
#
# Each argument is a libpq connection string (or URI) of a superuser:
# the control database first, then every shard. Environment:
#   RESHARD_DB_PASSWORD  password given to the reshard role (required)
#   RESHARD_ROLE         its name (default reshard)
#   APP_ROLE             the role owning the example tables (default app)
# PGPASSWORD (or ~/.pgpass) holds the superuser's password. Idempotent.
set -eu
here=$(dirname "$0")
role=${RESHARD_ROLE:-reshard}
app=${APP_ROLE:-app}
: "${RESHARD_DB_PASSWORD:?set RESHARD_DB_PASSWORD, the password of the reshard role}"
[ $# -ge 2 ] || { echo "usage: $0 CONTROL SHARD..." >&2; exit 2; }

sql() {
	db=$1
	shift
	psql -d "$db" -X -q -v ON_ERROR_STOP=1 -v role="$role" -v app="$app" "$@"
}

# The two roles, cluster-wide on each server; the password never on a
# command line (psql reads it from the environment).
roles() {
	PGOPTIONS='-c log_statement=none' sql "$1" -v pw="$RESHARD_DB_PASSWORD" <<'SQL'
SELECT format('CREATE ROLE %I NOLOGIN', :'app') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'app') \gexec
SELECT format('CREATE ROLE %I LOGIN', :'role') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER ROLE %I PASSWORD %L', :'role', :'pw') \gexec
SQL
}

control=$1
shift
roles "$control"
sql "$control" -v control=1 -v readers="$app" -f "$here/reshard-role.sql"
for shard in "$@"; do
	sql "$shard" -f "$here/schema.sql"
	roles "$shard"
	sql "$shard" <<'SQL'
SELECT format('ALTER TABLE %s OWNER TO %I', c.oid::regclass, :'app')
FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND c.relname IN ('users', 'orders') \gexec
SQL
	sql "$shard" -v owners="$app" -f "$here/reshard-role.sql"
done
echo "setup: example tables owned by $app on $# shard(s); role $role (no superuser) on every server"
