package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/devenv"
)

// usersDDL is the table of ../shared/bench/pglimits.sh (~200 B rows).
const usersDDL = `CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, name text, balance bigint NOT NULL DEFAULT 0,
	payload text, updated_at timestamptz NOT NULL DEFAULT now())`

// env is what every section shares: a source and a target server, tuned like
// pglimits.sh, with the users table loaded on the source and empty on the
// target.
type env struct {
	cfg        config
	out        io.Writer
	pg         *devenv.PG
	dir        string
	src, dst   devenv.Server
	srcPool    *pgxpool.Pool
	dstPool    *pgxpool.Pool
	tableBytes int64
}

func newEnv(ctx context.Context, cfg config, out io.Writer) (*env, error) {
	pg, err := devenv.NewPG()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "reshard-bench-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, out: out, pg: pg, dir: dir}
	ports, err := devenv.FreePorts(2)
	if err != nil {
		return nil, err
	}
	e.src = devenv.Server{Name: "source", Port: ports[0], DataDir: filepath.Join(dir, "source", "data")}
	e.dst = devenv.Server{Name: "target", Port: ports[1], DataDir: filepath.Join(dir, "target", "data")}
	conf := devenv.ServerOptions{ExtraConf: []string{"shared_buffers = 256MB", "max_wal_size = 4GB", "max_replication_slots = 10", "max_wal_senders = 10"}}
	for _, s := range []devenv.Server{e.src, e.dst} {
		if err := pg.Init(ctx, s, conf); err != nil {
			e.close()
			return nil, err
		}
		if err := pg.Start(ctx, s); err != nil {
			e.close()
			return nil, err
		}
	}
	if e.srcPool, err = pgxpool.New(ctx, e.src.DSN("postgres", false)); err != nil {
		e.close()
		return nil, err
	}
	if e.dstPool, err = pgxpool.New(ctx, e.dst.DSN("postgres", false)); err != nil {
		e.close()
		return nil, err
	}
	fmt.Fprintf(out, "servers: source :%d, target :%d (%s)\n", e.src.Port, e.dst.Port, dir)
	start := time.Now()
	if _, err := e.dstPool.Exec(ctx, usersDDL); err != nil {
		e.close()
		return nil, fmt.Errorf("create users on the target: %w", err)
	}
	if _, err := e.srcPool.Exec(ctx, usersDDL); err != nil {
		e.close()
		return nil, fmt.Errorf("create users on the source: %w", err)
	}
	if _, err := e.srcPool.Exec(ctx, `INSERT INTO users SELECT g, 'u'||g||'@example.com', 'name '||g, g%1000, repeat(md5(g::text),4), now()
		FROM generate_series(1, $1::int) g`, cfg.rows); err != nil {
		e.close()
		return nil, fmt.Errorf("load users: %w", err)
	}
	if _, err := e.srcPool.Exec(ctx, `VACUUM ANALYZE users`); err != nil {
		e.close()
		return nil, err
	}
	if err := e.srcPool.QueryRow(ctx, `SELECT pg_table_size('users')`).Scan(&e.tableBytes); err != nil {
		e.close()
		return nil, err
	}
	fmt.Fprintf(out, "loaded %d rows, %d bytes, in %s\n", cfg.rows, e.tableBytes, time.Since(start).Round(time.Millisecond))
	return e, nil
}

func (e *env) close() {
	if e.srcPool != nil {
		e.srcPool.Close()
	}
	if e.dstPool != nil {
		e.dstPool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range []devenv.Server{e.src, e.dst} {
		if s.DataDir != "" {
			_ = e.pg.Kill(ctx, s)
		}
	}
	if e.cfg.keep {
		fmt.Fprintf(e.out, "kept %s\n", e.dir)
		return
	}
	os.RemoveAll(e.dir)
}

// psql is the psql command line of a server (no password: trust).
func psql(s devenv.Server) string {
	return fmt.Sprintf("psql -X -q -v ON_ERROR_STOP=1 %q", s.DSN("postgres", false))
}

// shell runs a shell pipeline and returns how long it took.
func shell(ctx context.Context, script string) (time.Duration, error) {
	start := time.Now()
	out, err := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", script).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %s", script, err, out)
	}
	return time.Since(start), nil
}

// truncateTarget empties the target's users table between measurements.
func (e *env) truncateTarget(ctx context.Context) error {
	_, err := e.dstPool.Exec(ctx, `TRUNCATE users; DROP SCHEMA IF EXISTS reshard CASCADE; CHECKPOINT`)
	return err
}
