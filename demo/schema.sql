-- The demo's table set: users and their orders, sharded by user id.
-- payload is stored out of line (TOAST), so updates that leave it unchanged
-- arrive in CDC as 'u' (unchanged TOAST) columns.
CREATE TABLE IF NOT EXISTS users (
	id         bigint PRIMARY KEY,
	email      text NOT NULL DEFAULT '',
	name       text,
	balance    bigint NOT NULL DEFAULT 0,
	payload    text,
	updated_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE users ALTER COLUMN payload SET STORAGE EXTERNAL;
CREATE TABLE IF NOT EXISTS orders (
	user_id    bigint NOT NULL,
	id         bigint NOT NULL,
	amount     numeric(12,2) NOT NULL,
	note       text,
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (user_id, id)
);
