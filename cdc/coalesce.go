package cdc

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/reshard/reshard/internal/pgsession"
)

// The walsender sends every pgoutput message on its own (one send() per
// BEGIN, change and COMMIT), so a reader that keeps up reads them one
// by one: for single-row source transactions the applier spent more than
// half its CPU in read and epoll system calls, one of each per message
// (make bench, section cdc-hot). coalescingConn lets the messages gather
// in the socket's buffer instead: after a read that did not fill the
// buffer it was given, the next read waits readCoalesce first, so a busy
// stream is read a few kilobytes at a time. An idle stream costs nothing
// (the wait comes after data, never instead of it), and no message waits
// more than readCoalesce longer than it would have. The applier turns it
// on only while it is behind (catching up, where throughput counts): a
// stream that keeps up — a cutover's drain — reads every message at once.
type coalescingConn struct {
	net.Conn
	wait    time.Duration
	on      *atomic.Bool // nil: always
	partial bool         // the last read returned less than it could have
}

// readCoalesce is how long a read waits after a partial one. At the
// walsender's rate on this machine (some 300k messages/s) 300µs gathers
// ~100 messages; it is small against a cutover's write pause (tens of ms)
// and the lag a move reports.
const readCoalesce = 300 * time.Microsecond

func (c *coalescingConn) Read(p []byte) (int, error) {
	if c.partial && (c.on == nil || c.on.Load()) {
		time.Sleep(c.wait)
	}
	n, err := c.Conn.Read(p)
	c.partial = err == nil && n < len(p)
	return n, err
}

// ConnectReplication opens a replication connection (dsn has
// replication=database) whose reads coalesce while on is true (nil: always).
func ConnectReplication(ctx context.Context, dsn string, on *atomic.Bool) (*pgconn.PgConn, error) {
	cfg, err := pgsession.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &coalescingConn{Conn: conn, wait: readCoalesce, on: on}, nil
	}
	return pgconn.ConnectConfig(ctx, cfg)
}
