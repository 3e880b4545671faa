package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/devenv"
)

// ordersDDL is section large's table: rows of a realistic width (text,
// numeric, timestamps, a jsonb of about 250 bytes, a note that is a 3 KiB
// incompressible value, stored out of line in TOAST, on one row in
// largeToastEvery), with two secondary indexes. Every column has a default
// so that the router's writers may insert a row by its key and value alone.
const ordersDDL = `CREATE TABLE orders (
	id bigint NOT NULL,
	account_id bigint NOT NULL DEFAULT 0,
	email text NOT NULL DEFAULT '',
	name text NOT NULL DEFAULT '',
	status text NOT NULL DEFAULT 'new',
	amount numeric(12,2) NOT NULL DEFAULT 0,
	score double precision,
	created_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now(),
	attrs jsonb NOT NULL DEFAULT '{}',
	note text)`

// ordersIndexes are its primary key and secondary indexes, built after the
// load on the source and before the copy on the target.
var ordersIndexes = []string{
	`ALTER TABLE orders ADD PRIMARY KEY (id)`,
	`CREATE INDEX orders_account_idx ON orders (account_id)`,
	`CREATE INDEX orders_created_idx ON orders (created_at)`,
}

// largeToastEvery: one row in this many has a 3 KiB note (TOASTed).
const largeToastEvery = 20

// ordersRows generates rows id lo..hi of orders (the columns in
// ordersDDL's order); blobs holds 1,000 distinct random 3 KiB strings. The
// jsonb is built as text and cast with jsonCast ("::jsonb" for an INSERT,
// "" for a COPY, which parses it).
func ordersRows(lo, hi int64, jsonCast string) string {
	return strings.NewReplacer("{toast}", strconv.Itoa(largeToastEvery), "{lo}", strconv.FormatInt(lo, 10), "{hi}", strconv.FormatInt(hi, 10),
		"{json}", jsonCast).Replace(ordersSelect)
}

const ordersSelect = `SELECT g, (g * 7919) % 5000000, 'user' || g || '@example.com', 'Customer ' || left(h, 12),
	(ARRAY['new','paid','shipped','delivered','returned'])[1 + g % 5], (g % 1000000) / 100.0, (g % 997) / 997.0,
	timestamptz '2020-01-01' + g * interval '2 seconds', timestamptz '2020-01-01' + g * interval '2 seconds' + (g % 86400) * interval '1 second',
	('{"sku": "SKU-' || g % 50000 || '", "qty": ' || g % 7 + 1 || ', "channel": "' || (ARRAY['web','app','store'])[1 + g % 3] ||
		'", "tags": ["t' || g % 13 || '", "t' || g % 17 || '"], "address": {"street": "' || h || '", "city": "City ' || g % 500 ||
		'", "zip": "' || lpad((g % 99999)::text, 5, '0') || '"}, "gift": ' || (g % 11 = 0) || '}'){json},
	CASE WHEN g % {toast} = 0 THEN b.b ELSE 'note ' || reverse(h) END
	FROM generate_series({lo}::bigint, {hi}::bigint) g CROSS JOIN LATERAL (SELECT md5(g::text) AS h) x LEFT JOIN blobs b ON b.i = g % 1000`

// largeServers starts section large's source and target in dir. The
// source starts with wal_level minimal, so that the load into the table
// created in its transaction writes no WAL; loadOrders then restarts it
// with wal_level logical.
func largeServers(ctx context.Context, pg *devenv.PG, dir string) (src, dst devenv.Server, err error) {
	ports, err := devenv.FreePorts(2)
	if err != nil {
		return src, dst, err
	}
	src = devenv.Server{Name: "source", Port: ports[0], DataDir: filepath.Join(dir, "source", "data")}
	dst = devenv.Server{Name: "target", Port: ports[1], DataDir: filepath.Join(dir, "target", "data")}
	common := []string{"shared_buffers = 1GB", "max_wal_size = 4GB", "min_wal_size = 256MB", "checkpoint_timeout = 10min",
		"maintenance_work_mem = 1GB", "max_parallel_maintenance_workers = 2", "max_replication_slots = 10", "shared_preload_libraries = 'pg_stat_statements'"}
	for _, s := range []struct {
		srv  devenv.Server
		conf []string
	}{{src, append(common, "wal_level = minimal", "max_wal_senders = 0")}, {dst, append(common, "max_wal_senders = 10")}} {
		if err := pg.Init(ctx, s.srv, devenv.ServerOptions{ExtraConf: s.conf}); err != nil {
			return src, dst, err
		}
		if err := pg.Start(ctx, s.srv); err != nil {
			return src, dst, err
		}
	}
	return src, dst, nil
}

// largeTemplateRows is how many rows loadOrders generates; the rest are
// copies of them with new ids.
const largeTemplateRows = 1_000_000

// loadOrders loads orders on the source until its table data
// (pg_table_size: heap and TOAST) is about bytes, builds its indexes, and
// restarts the source with wal_level logical. It returns the rows loaded.
//
// The source runs with wal_level minimal while it loads, and the table is
// created in the load's transaction, so the load writes no WAL. Generating
// every row by expression ran at 24k rows/s at load 15, about 25 minutes
// for 20 GB; so it generates largeTemplateRows rows into a template and
// inserts copies of them with their ids (and what derives from the id:
// email, timestamps) shifted, in id order (the template's, as it was
// generated), as a serial key would lay them out. A VACUUM then sets every row's hint bits and the visibility map, as
// on a table in service.
func loadOrders(ctx context.Context, pg *devenv.PG, src devenv.Server, bytes int64, out func(string, ...any)) (int64, error) {
	pool, err := pgxpool.New(ctx, src.DSN("postgres", false))
	if err != nil {
		return 0, err
	}
	defer func() {
		if pool != nil {
			pool.Close()
		}
	}()
	if _, err := pool.Exec(ctx, `CREATE TABLE blobs AS SELECT i, (SELECT string_agg(md5(i || ':' || j), '') FROM generate_series(1, 96) j) AS b FROM generate_series(0, 999) i`); err != nil {
		return 0, fmt.Errorf("blobs: %w", err)
	}
	start := time.Now()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, ordersDDL+` WITH (autovacuum_enabled = false)`); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE tmpl (LIKE orders)`); err != nil {
		return 0, err
	}
	// In id order: the join with blobs hands rows out by g % 1000, and a
	// template in that order put ids 1000 apart side by side on a page, so
	// that a scan in primary-key order fetched another heap page for every
	// row (twice the source's CPU of the copy, against the same table
	// CLUSTERed: 12.0-16.4 s against 5.9 s for 0.556 GiB moved).
	if _, err := tx.Exec(ctx, `INSERT INTO tmpl `+ordersRows(1, largeTemplateRows, "::jsonb")+` ORDER BY 1`); err != nil {
		return 0, fmt.Errorf("generate the template rows: %w", err)
	}
	var perRow float64
	if err := tx.QueryRow(ctx, `SELECT pg_table_size('tmpl')::float8 / $1`, largeTemplateRows).Scan(&perRow); err != nil {
		return 0, err
	}
	// Rounded up: -large-gb is a floor (a 20 GB run that loaded 19.7 GB,
	// 33 copies of 597-byte rows, fell short of the 20 GB).
	copies := max(1, int64(math.Ceil(float64(bytes)/perRow/largeTemplateRows)))
	rows := copies * largeTemplateRows
	out("orders: %.0f bytes per row (heap and TOAST) in %d generated rows (%s): loading %d copies of them, %d rows", perRow, largeTemplateRows,
		time.Since(start).Round(time.Second), copies, rows)
	for k := range copies {
		shift := k * largeTemplateRows
		if _, err := tx.Exec(ctx, `INSERT INTO orders SELECT id + $1, account_id, 'user' || (id + $1) || '@example.com', name, status, amount, score,
			created_at + $1 * interval '2 seconds', updated_at + $1 * interval '2 seconds', attrs, note FROM tmpl`, shift); err != nil {
			return 0, fmt.Errorf("load orders: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	out("orders: %d rows loaded in %s", rows, time.Since(start).Round(time.Second))
	start = time.Now()
	for _, q := range append(ordersIndexes, `DROP TABLE tmpl`, `DROP TABLE blobs`, `VACUUM ANALYZE orders`) {
		if _, err := pool.Exec(ctx, q); err != nil {
			return 0, fmt.Errorf("%s: %w", q, err)
		}
	}
	out("orders: indexes built, vacuumed and analyzed in %s", time.Since(start).Round(time.Second))
	for _, q := range []string{`ALTER SYSTEM SET wal_level = logical`, `ALTER SYSTEM SET max_wal_senders = 10`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return 0, err
		}
	}
	pool.Close()
	pool = nil
	if err := pg.Stop(ctx, src); err != nil {
		return 0, err
	}
	return rows, pg.Start(ctx, src)
}

// freeBytes is the free space of the file system holding path.
func freeBytes(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// gib formats bytes as GiB.
func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
