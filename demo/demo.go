// Package demo holds what `reshard demo` and the end-to-end suites share: the
// sample schema (users + orders sharded by user id, TOASTed payloads), a
// loader that puts every key on its owner only, and a row-for-row placement
// check of a whole cluster against a topology. Run is the demo itself
// (cluster, data, worker, writers, add-node, follow, check); the command
// gives it the CLI's configuration and steps (Env).
package demo

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

//go:embed schema.sql
var SchemaSQL string

// Spec is the demo's table set.
var Spec = tableset.Spec{Name: "demo", Tables: []tableset.TableSpec{
	{Table: "users", KeyColumn: "id"},
	{Table: "orders", KeyColumn: "user_id"},
}}

// CreateSchema creates the tables on every pool (idempotent).
func CreateSchema(ctx context.Context, pools map[string]*pgxpool.Pool) error {
	for name, p := range pools {
		if _, err := p.Exec(ctx, SchemaSQL); err != nil {
			return fmt.Errorf("create demo schema on %s: %w", name, err)
		}
	}
	return nil
}

// LoadOptions size the data.
type LoadOptions struct {
	Users          int64 // keys 1..Users
	OrdersPerUser  int   // orders rows per user
	PayloadBytes   int   // size of users.payload (TOASTed past ~2 KB)
	PayloadEvery   int   // one user in PayloadEvery has a payload (default 10)
	SkipIfNotEmpty bool
}

// Load inserts users 1..Users and their orders, each on the shard that owns
// its token in r, in parallel per shard. Every shard generates the whole key
// sequence and keeps its own keys, so the data never crosses the network.
func Load(ctx context.Context, pools map[string]*pgxpool.Pool, r *ring.Ring, o LoadOptions) (rows int64, err error) {
	if o.PayloadEvery <= 0 {
		o.PayloadEvery = 10
	}
	var g errgroup.Group
	counts := make(map[string]*int64, len(pools))
	for _, shard := range r.Shards() {
		p := pools[shard]
		if p == nil {
			return 0, fmt.Errorf("load demo data: no connection for shard %s of the ring", shard)
		}
		var n int64
		counts[shard] = &n
		pred := ring.Predicate("hashint8extended(g, 0)", r.Ranges(shard))
		g.Go(func() error {
			if o.SkipIfNotEmpty {
				var have bool
				if err := p.QueryRow(ctx, `SELECT EXISTS (SELECT FROM users)`).Scan(&have); err != nil {
					return fmt.Errorf("load demo data on %s: %w", shard, err)
				}
				if have {
					return nil
				}
			}
			// A payload of PayloadBytes incompressible characters (md5 chunks).
			chunks := strconv.Itoa(o.PayloadBytes/32 + 1)
			tag, err := p.Exec(ctx, `INSERT INTO users (id, email, name, balance, payload)
				SELECT g, 'user'||g||'@example.com', 'name '||g, g % 1000,
				       CASE WHEN g % `+strconv.Itoa(o.PayloadEvery)+` = 0 THEN
				         left((SELECT string_agg(md5(g::text||i::text), '') FROM generate_series(1, `+chunks+`) i), `+strconv.Itoa(o.PayloadBytes)+`) END
				FROM generate_series(1::bigint, $1::bigint) g WHERE `+pred, o.Users)
			if err != nil {
				return fmt.Errorf("load users on %s: %w", shard, err)
			}
			*counts[shard] += tag.RowsAffected()
			if o.OrdersPerUser > 0 {
				tag, err = p.Exec(ctx, `INSERT INTO orders (user_id, id, amount, note)
					SELECT u.id, u.id * 1000 + k, (u.id % 997) + k * 0.5, 'order '||k
					FROM users u CROSS JOIN generate_series(1, $1::int) k`, o.OrdersPerUser)
				if err != nil {
					return fmt.Errorf("load orders on %s: %w", shard, err)
				}
				*counts[shard] += tag.RowsAffected()
			}
			_, err = p.Exec(ctx, `ANALYZE users; ANALYZE orders`)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	for _, n := range counts {
		rows += *n
	}
	return rows, nil
}

// Placement is the outcome of a placement check.
type Placement struct {
	Rows      map[string]int64 // rows per shard (both tables)
	Misplaced map[string]int64 // rows on a shard that does not own their key
}

// OK reports whether every row is on its owner.
func (p Placement) OK() bool {
	for _, n := range p.Misplaced {
		if n != 0 {
			return false
		}
	}
	return true
}

// CheckPlacement counts, on every shard, the rows of the demo tables whose key
// the ring gives to another shard: after a finished move there must be none
// (the copy moved them, cleanup deleted them on the old owner).
func CheckPlacement(ctx context.Context, pools map[string]*pgxpool.Pool, r *ring.Ring) (Placement, error) {
	res := Placement{Rows: map[string]int64{}, Misplaced: map[string]int64{}}
	for shard, p := range pools {
		owned := r.Ranges(shard)
		for _, t := range []struct{ table, key string }{{"users", "id"}, {"orders", "user_id"}} {
			tok := ring.TokenSQL(ring.KeyInt, "", t.key)
			var all, foreign int64
			err := p.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE NOT (`+ring.Predicate(tok, owned)+`)) FROM `+t.table).Scan(&all, &foreign)
			if err != nil {
				return res, fmt.Errorf("check placement of %s on %s: %w", t.table, shard, err)
			}
			res.Rows[shard] += all
			res.Misplaced[shard] += foreign
		}
	}
	return res, nil
}
