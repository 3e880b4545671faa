package router_test

import (
	"context"
	"errors"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/topology"
)

// An application's write, routed to the key's owner and retried there
// while a move cuts the key's range over.
func Example() {
	ctx := context.Background()
	control, err := pgxpool.New(ctx, "host=control dbname=reshard user=app")
	if err != nil {
		log.Fatal(err)
	}
	shards := map[string]*pgxpool.Pool{}
	for _, name := range []string{"shard1", "shard2"} {
		if shards[name], err = pgxpool.New(ctx, "host="+name+" dbname=app user=app"); err != nil {
			log.Fatal(err)
		}
	}
	r, err := router.New(ctx, topology.NewStore(control), shards, router.Options{})
	if err != nil {
		log.Fatal(err)
	}
	go r.Run(ctx)
	err = r.Do(ctx, int64(42), func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := pool.Exec(ctx, `UPDATE users SET name = $2 WHERE id = $1`, int64(42), "Ada")
		return err
	})
	if errors.Is(err, router.ErrFenced) {
		log.Print("the range stayed fenced: a cutover is stuck; try again later")
	}
}
