package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/verify"
)

// runStandby moves a fifth of the token space twice on the same servers,
// under the same steady writes to another table (section capacity's
// writer): once reading the copy and the verify from the source's primary,
// once from an asynchronous streaming standby of it (--read-from standby),
// the slot on the primary both times. Each time it counts the CPU the
// primary's processes spent during the copy and the verify (the
// postmaster's children, from /proc), and the standby's.
func runStandby(ctx context.Context, e *env, r *report) error {
	sb := devenv.Server{Name: "source_standby", DataDir: filepath.Join(e.dir, "source_standby", "data")}
	ports, err := devenv.FreePorts(1)
	if err != nil {
		return err
	}
	sb.Port = ports[0]
	if err := e.pg.StartAsyncStandby(ctx, e.src, sb); err != nil {
		return err
	}
	defer func() { _ = e.pg.Kill(context.WithoutCancel(ctx), sb) }()
	sbPool, err := pgxpool.New(ctx, sb.DSN("postgres", false))
	if err != nil {
		return err
	}
	defer sbPool.Close()
	set, err := tableset.Introspect(ctx, e.srcPool, tableset.Spec{Name: "bench", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}, "source")
	if err != nil {
		return err
	}
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: ring.MinToken + 2*(ring.MaxToken/5)}}
	if _, err := e.srcPool.Exec(ctx, `DROP TABLE IF EXISTS capwrites; CREATE TABLE capwrites (id bigserial PRIMARY KEY, pad text)`); err != nil {
		return err
	}
	stopWrites := steadyWrites(ctx, e.srcPool)
	defer stopWrites()
	time.Sleep(2 * time.Second)

	type result struct {
		primaryCPU, standbyCPU time.Duration
		took                   time.Duration
		rows                   int64
	}
	move := func(mode string) (result, error) {
		var res result
		if err := e.truncateTarget(ctx); err != nil {
			return res, err
		}
		slot := "reshard_bench_standby_" + mode
		var l0s string
		if err := e.srcPool.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, slot).Scan(&l0s); err != nil {
			return res, fmt.Errorf("create the slot: %w", err)
		}
		defer func() { _, _ = e.srcPool.Exec(context.WithoutCancel(ctx), `SELECT pg_drop_replication_slot($1)`, slot) }()
		l0, err := pglogrepl.ParseLSN(l0s)
		if err != nil {
			return res, err
		}
		read, opts, vopts := e.srcPool, backfill.Options{Move: "standby_" + mode, Set: set, Ranges: ranges, ChunkRows: e.cfg.chunkRows},
			verify.Options{Set: set, Ranges: ranges}
		if mode == "standby" {
			read = sbPool
			opts.Standby = &backfill.Standby{Name: "the source's standby", Floor: l0}
			vopts.Primary = e.srcPool
		}
		p0, err := treeCPU(e.src)
		if err != nil {
			return res, err
		}
		s0, err := treeCPU(sb)
		if err != nil {
			return res, err
		}
		start := time.Now()
		st, err := backfill.Copy(ctx, read, e.dstPool, opts)
		if err != nil {
			return res, fmt.Errorf("copy from the %s: %w", mode, err)
		}
		rep, err := verify.Run(ctx, read, e.dstPool, vopts)
		if err != nil {
			return res, fmt.Errorf("verify from the %s: %w", mode, err)
		}
		if !rep.OK() {
			return res, fmt.Errorf("verify from the %s: %d rows differ", mode, rep.Mismatches())
		}
		res.took = time.Since(start)
		p1, err := treeCPU(e.src)
		if err != nil {
			return res, err
		}
		s1, err := treeCPU(sb)
		if err != nil {
			return res, err
		}
		res.primaryCPU, res.standbyCPU, res.rows = p1-p0, s1-s0, st.Rows
		fmt.Fprintf(e.out, "read from the %s: copied %d rows and verified %d in %s; CPU of the primary %s, of the standby %s\n",
			mode, st.Rows, rep.Rows, res.took.Round(time.Millisecond), res.primaryCPU.Round(time.Millisecond), res.standbyCPU.Round(time.Millisecond))
		return res, nil
	}
	onPrimary, err := move("primary")
	if err != nil {
		return err
	}
	onStandby, err := move("standby")
	if err != nil {
		return err
	}
	// The writer's own cost on the primary, over as long: what neither
	// mode can take away.
	p0, err := treeCPU(e.src)
	if err != nil {
		return err
	}
	time.Sleep(onStandby.took)
	p1, err := treeCPU(e.src)
	if err != nil {
		return err
	}
	// The writer's rate alone, to take out of both: what reshard itself
	// costs the primary.
	writer := (p1 - p0).Seconds() / onStandby.took.Seconds()
	netPrimary := onPrimary.primaryCPU.Seconds() - writer*onPrimary.took.Seconds()
	netStandby := onStandby.primaryCPU.Seconds() - writer*onStandby.took.Seconds()
	details := fmt.Sprintf("%d rows (1/5 of the space), copy + verify; a steady writer of ~1 MiB/s of WAL to another table on the primary throughout", onPrimary.rows)
	r.add("primary CPU, copy+verify from the primary", onPrimary.primaryCPU.Seconds(), "s", details+fmt.Sprintf("; took %s", onPrimary.took.Round(time.Millisecond)))
	r.add("primary CPU, copy+verify from a standby", onStandby.primaryCPU.Seconds(), "s", fmt.Sprintf("the same move read from an asynchronous standby (--read-from standby), slot on the primary; took %s; the standby spent %.2f s", onStandby.took.Round(time.Millisecond), onStandby.standbyCPU.Seconds()))
	r.add("primary CPU from a standby / from the primary", 100*onStandby.primaryCPU.Seconds()/onPrimary.primaryCPU.Seconds(), "%", fmt.Sprintf("goal ≤ 30 %%; the writer's share included: alone it cost the primary %.2f s over %s", (p1-p0).Seconds(), onStandby.took.Round(time.Millisecond)))
	r.add("primary CPU from a standby / from the primary, the writer's taken out", 100*netStandby/netPrimary, "%", fmt.Sprintf("reshard's own cost on the primary: %.2f s reading from the standby, %.2f s from the primary (each run's CPU less the writer's %.3f CPU-s/s alone × its duration)", netStandby, netPrimary, writer))
	return nil
}

// treeCPU is the CPU time a server's processes have spent: the
// postmaster's own and its reaped children's (cutime, cstime) and that of
// its live children, from /proc. A backend that exits moves its time from
// the second sum to the first, so a difference of two readings is what the
// server spent between them.
func treeCPU(s devenv.Server) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(s.DataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("postmaster of %s: %w", s.Name, err)
	}
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return 0, fmt.Errorf("postmaster.pid of %s: %w", s.Name, err)
	}
	_, ticks, err := procTicks(pm, true)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == pm {
			continue
		}
		parent, t, err := procTicks(pid, false)
		if err != nil || parent != pm {
			continue // gone, or not the server's
		}
		ticks += t
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ticks) * time.Second / hz, nil
}

// procTicks reads a process's parent and its utime+stime (with cutime and
// cstime when children), in clock ticks.
func procTicks(pid int, children bool) (ppid int, ticks int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	s := string(b)
	// The command may hold spaces and parentheses: fields start after the
	// last ')'.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ppid, _ = strconv.Atoi(f[1])
	last := 13 // fields 14, 15 of stat(5): f[11], f[12]; 16, 17: f[13], f[14]
	if children {
		last = 15
	}
	for _, v := range f[11:last] {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return ppid, ticks, nil
}
