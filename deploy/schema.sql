-- The demo schema of docker-compose.yml, created on every shard by its
-- `schema` service before `reshard init --table users:id --table
-- orders:user_id` registers these tables in the keyspace. Idempotent.
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
