-- The example schema, created on the shards before `reshard init --table
-- users:id --table orders:user_id` registers these tables in the keyspace:
-- on every shard by docker-compose.yml's `schema` service, on the ring's
-- shards of the local cluster by the README's Quick start (`reshard dev
-- psql shard1 -- -f deploy/schema.sql`). Idempotent; psql exits 1 on an
-- error.
\set ON_ERROR_STOP on
CREATE TABLE IF NOT EXISTS users (
    id      bigint PRIMARY KEY,
    name    text   NOT NULL,
    balance int    NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS orders (
    user_id bigint NOT NULL,
    id      bigint NOT NULL,
    amount  int    NOT NULL,
    PRIMARY KEY (user_id, id)
);
