// Command reshard-bench measures reshard's data plane against the physical
// limits of the machine and against peer tools, on two throwaway PostgreSQL
// servers it starts itself. It is a program, not a test: `make bench` or
// bench/run.sh runs it.
//
// Each section (backfill, cdc, verify, cutover, ...) lives in its own file and
// is listed in sections below; it adds figures to the report, which prints
// each as a line when measured and all of them as a markdown table at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reshard/reshard/devenv"
)

// section is one group of measurements sharing the environment.
type section struct {
	name  string
	about string
	run   func(ctx context.Context, e *env, r *report) error
	// ownServers: the section needs no shared env (it starts what it
	// measures, or nothing); a run of such sections only starts no env.
	ownServers bool
	// optIn: the section runs only when -sections names it (it takes
	// hours and tens of GB of disk).
	optIn bool
}

// sections run in this order; add yours here.
var sections = []section{
	{name: "ring", about: "scale-out simulation, Owner lookup, planning 1,000 shards × 256 vnodes, 4 → 8 and 16 → 64 as one rebalance against add-nodes one at a time (no servers)", run: runRing, ownServers: true},
	{name: "backfill", about: "range copy vs raw COPY pipe and pgcopydb", run: runBackfill},
	{name: "cutover", about: "write pause of cutovers under router writers; fence trigger overhead (pgbench)", run: runCutover},
	{name: "verify", about: "chunked checksum verification vs a plain checksum scan", run: runVerify},
	{name: "adaptive", about: "a 2-client read/update workload on the source idle, during an unthrottled copy, copies at fixed rates (-adaptive-rates) and copies under the adaptive throttle (+10% probe latency, a read probe and a commit probe): its p50/p99 and the copy rate of each", run: runAdaptive},
	{name: "cdc", about: "apply rate and CPU for small transactions vs the source and its walsender, staged vs text[] flushes, peak RSS for one huge transaction", run: runCDC},
	{name: "cdc-hot", about: "apply rate for 200k single-row updates over 2,000 keys vs the source's decoding of them", run: runCDCHot},
	{name: "cdc-toast", about: "apply rate for 200k single-row updates over 2,000 keys that leave a TOASTed column unchanged vs the source's decoding of them", run: runCDCToast},
	{name: "cdc-long", about: "catch-up over many SQL reads: reading a copy of the slot ahead of the applier vs peeking the slot one read at a time", run: runCDCLong},
	{name: "cdc-stage", about: "staged vs text[] flushes by flush size: where staging starts to pay (cdc.DefaultStageMinRows)", run: runCDCStage},
	{name: "capacity", about: "a whole-table copy throttled to last -capacity-copy under steady writes, its slot created first as the code does: the slot's peak retained WAL, the copy's time and the target's growth against the capacity model's predictions", run: runCapacity},
	{name: "capstream", about: "the slot's peak retained WAL during a whole-table copy throttled to last -capstream-copy under steady writes, with the stream after the copy (before) and during it through the copy gate (after), against the lag budget (-capstream-lag-budget of WAL)", run: runCapStream},
	{name: "standby", about: "the same 1/5 move's copy and verify read from the source's primary, then from its streaming standby (--read-from standby): the CPU the primary spends in each", run: runStandby},
	{name: "verifycpu", about: "the CPU of section large's verify alone: a source of -verifycpu-gb of orders, a target holding the moving fifth, no writers; GiB verified per CPU-second (both servers and the bench), the wall-clock rate with the load average, one-side scans of candidate row hashes, and pglimits.sh's checksum scan in the same run. Not in the default run: name it", run: runVerifyCPU, ownServers: true, optIn: true},
	{name: "large", about: "production size: a source of -large-gb of table data (rows of realistic width, a TOASTed note on 1 row in 20, two secondary indexes) gives a fifth of its token space to a new shard under writers through the router (one source's move when a fifth shard joins four): copy, verify and cleanup in GiB/h and per core, WAL per GiB moved, dead tuples and size after cleanup and VACUUM, write pauses, the capacity model at the start and at 10 % against the actual; then the copy through the copy gate against without (-large-gated). Not in the default run: name it", run: runLarge, ownServers: true, optIn: true},
	{name: "rebalance", about: "4 → 8 shards on a real local cluster (devenv, Temporal, a worker, the reshard CLI): one rebalance against four add-nodes on the same data", run: runRebalance, ownServers: true},
}

// config is the benchmark's one configuration.
type config struct {
	rows      int
	only      []string
	chunkRows int
	keep      bool
	// out, when set, receives the final table as markdown with the machine
	// and the date (docs/benchmarks.md).
	out string
	// cdcProfile, when set, receives a CPU profile of the CDC apply.
	cdcProfile string
	// sqlCatchUp is the appliers' cdc.Options.PeekCatchUpBytes.
	sqlCatchUp int64
	// cdcRounds is how many times sections cdc and cdc-hot measure a
	// catch-up and its ceilings; their ratios are the rounds' medians.
	cdcRounds int
	// rebalanceUsers sizes the rebalance section's data (two orders per
	// user); rebalanceMaxParallel is its --max-parallel-moves (0: no bound).
	rebalanceUsers       int64
	rebalanceMaxParallel int
	// adaptiveWindow is how long each measurement of section adaptive lasts,
	// adaptiveRounds how many rounds of them it takes.
	adaptiveWindow time.Duration
	adaptiveRounds int
	// adaptiveRates are the fixed rows/s of section adaptive's sweep (each
	// round copies at each of them too): the frontier the adaptive throttle
	// should find.
	adaptiveRates []float64
	// cutoverRounds is how many round trips (a cutover and its rollback)
	// section cutover measures; fenceTax whether it also measures the
	// fence trigger's cost with pgbench.
	cutoverRounds int
	fenceTax      bool
	// capacityCopy is how long section capacity's throttled copy lasts.
	capacityCopy time.Duration
	// capStreamCopy is how long section capstream's throttled copies last;
	// capStreamLagBudget is the stream's lag budget, as time of WAL.
	capStreamCopy, capStreamLagBudget time.Duration
	// largeGB is section large's table data on the source (pg_table_size,
	// 1e9 bytes a GB); largeWriters its router writers;
	// largePauseRounds its small cutover round trips; largeWALWindow how
	// long its capacity probe watches the WAL rate; largeGated whether it
	// also measures the copy through the copy gate.
	largeGB      float64
	largeWriters int
	// largeWriteRate is the writers' writes a second in all, each
	// writer's started at a fixed interval (0: each pauses 5 ms after each
	// write, a closed loop).
	largeWriteRate float64
	// largeWarmup is the writes a key the writers make before the
	// capacity probe (0: none waited for).
	largeWarmup float64
	// largeCheckpoint issues a CHECKPOINT on the source just before the
	// capacity probe.
	largeCheckpoint  bool
	largePauseRounds int
	largeWALWindow   time.Duration
	largeGated       bool
	// largeProfile, when set, receives a CPU profile of this process
	// during section large's copy.
	largeProfile string
	// largeReuse is the directory of a killed run of section large whose
	// servers still run: its load is taken up instead of made again.
	largeReuse string
	// largeMove: section large makes its move (false: only the gated
	// copies, -large-gated).
	largeMove bool
	// verifyCPUGB is section verifycpu's table data on the source.
	verifyCPUGB float64
}

func main() {
	if cfg := os.Getenv(childEnv); cfg != "" { // a child applier (cdc.go)
		os.Exit(runChildApply(cfg))
	}
	var (
		cfg  config
		only string
	)
	flag.IntVar(&cfg.rows, "rows", 1_000_000, "rows of the users table (~200 B each)")
	flag.StringVar(&only, "sections", "", "comma-separated sections to run (default all): "+sectionNames())
	flag.IntVar(&cfg.chunkRows, "chunk-rows", 10_000, "backfill rows per chunk")
	flag.BoolVar(&cfg.keep, "keep", false, "leave the servers' data directories behind (their path is printed)")
	flag.StringVar(&cfg.out, "out", "", "also write the final table as markdown, with the machine and the date, to this file")
	flag.DurationVar(&cfg.adaptiveWindow, "adaptive-window", 20*time.Second, "length of each measurement of section adaptive")
	flag.IntVar(&cfg.adaptiveRounds, "adaptive-rounds", 3, "rounds of section adaptive (idle, unthrottled copy, adaptive copy each)")
	rates := flag.String("adaptive-rates", "2000,10000,30000,100000", "fixed copy rates (rows/s, comma-separated; empty: none) section adaptive also measures the workload under, each round")
	flag.StringVar(&cfg.cdcProfile, "cdc-profile", "", "write a CPU profile of the CDC apply (small transactions) to this file")
	flag.IntVar(&cfg.cdcRounds, "cdc-rounds", 3, "rounds of sections cdc and cdc-hot (new transactions, their decoding, streaming and apply each); the figures are the rounds' medians")
	flag.Int64Var(&cfg.sqlCatchUp, "cdc-sql-catch-up-bytes", 0, "the appliers' lag past which they catch up by SQL peeks (0: cdc's default, negative: walsender only)")
	flag.Int64Var(&cfg.rebalanceUsers, "rebalance-users", 600_000, "users of the rebalance section's cluster (each with 2 orders: 3 rows per user)")
	flag.DurationVar(&cfg.capacityCopy, "capacity-copy", 150*time.Second, "how long section capacity's throttled copy lasts (its rows/s follows)")
	flag.DurationVar(&cfg.capStreamCopy, "capstream-copy", 5*time.Minute, "how long each of section capstream's two throttled copies lasts")
	flag.DurationVar(&cfg.capStreamLagBudget, "capstream-lag-budget", 30*time.Second, "section capstream's lag budget, as this much of the source's WAL")
	flag.Float64Var(&cfg.largeGB, "large-gb", 20, "section large: GB (1e9 bytes) of table data on the source (pg_table_size); the run needs about 1.55× that plus 10 GB of free disk")
	flag.IntVar(&cfg.largeWriters, "large-writers", 4, "section large: router writers")
	flag.Float64Var(&cfg.largeWriteRate, "large-write-rate", 500, "section large: the router writers' upserts a second in all, each writer's started at a fixed interval, as an application's demand comes (a slower server does not lower it); 0: each writer pauses 5 ms after each write, a closed loop whose rate falls as the writes slow (before 2026-12-04: 599 writes/s in the probe's window, 516 under the copy at 20 GB)")
	flag.BoolVar(&cfg.largeCheckpoint, "large-checkpoint", false, "section large: a CHECKPOINT on the source just before the capacity probe, so that the probe's WAL window and the copy after it start in a fresh checkpoint cycle's burst of full-page images: the case the slot-WAL rule's images (capacity.WALReading.CopyWAL) are for, which a probe late in its cycle does not test")
	flag.Float64Var(&cfg.largeWarmup, "large-warmup", 6, "section large: before the capacity probe, the router writers write each of their 20,000 keys this many times on average since they started (the pause rounds included), so that the probe sees them steady: on the freshly loaded table the share of their updates that are HOT rose from 69 % in the probe's window to 93 % in the copy a minute later at the same 500 writes/s, their WAL records a write falling with it (-large-gb 1) (0: the probe follows the pause rounds at once)")
	flag.IntVar(&cfg.largePauseRounds, "large-pause-rounds", 5, "section large: small cutover round trips (two write pauses each) on the loaded table")
	flag.DurationVar(&cfg.largeWALWindow, "large-wal-window", 30*time.Second, "section large: how long the capacity probe watches the source's WAL rate")
	flag.BoolVar(&cfg.largeGated, "large-gated", true, "section large: also copy a twentieth of the token space through the copy gate and without")
	flag.StringVar(&cfg.largeProfile, "large-profile", "", "section large: write a CPU profile of this process during the copy to this file")
	flag.BoolVar(&cfg.largeMove, "large-move", true, "section large: make the fifth's move (false: load, then only the copies through the gate and without, -large-gated)")
	flag.Float64Var(&cfg.verifyCPUGB, "verifycpu-gb", 2, "section verifycpu: GB (1e9 bytes) of table data on the source (pg_table_size)")
	flag.StringVar(&cfg.largeReuse, "large-reuse", "", "section large: take up the loaded servers a killed run left running in this directory (printed as servers: ...) instead of loading again; removed at the end like the run's own")
	flag.IntVar(&cfg.rebalanceMaxParallel, "rebalance-max-parallel-moves", 0, "--max-parallel-moves of every migration of the rebalance section (0: no bound)")
	flag.IntVar(&cfg.cutoverRounds, "cutover-rounds", 10, "round trips of section cutover (a cutover and its rollback each: two write pauses)")
	flag.BoolVar(&cfg.fenceTax, "fence-tax", true, "section cutover also measures the fence trigger's cost on single-row updates (pgbench, the accelerated and the plpgsql fence, a no-op C trigger as the floor of any row trigger, and an A/A control: about 10 minutes)")
	flag.Parse()
	if only != "" {
		cfg.only = strings.Split(only, ",")
		for _, s := range cfg.only {
			if !slices.ContainsFunc(sections, func(x section) bool { return x.name == s }) {
				fmt.Fprintf(os.Stderr, "reshard-bench: no section %q (have %s)\n", s, sectionNames())
				os.Exit(2)
			}
		}
	}
	if cfg.rows <= 0 || cfg.chunkRows <= 0 || cfg.rebalanceUsers <= 0 || cfg.adaptiveRounds <= 0 || cfg.adaptiveWindow <= 0 || cfg.cutoverRounds <= 0 || cfg.capacityCopy <= 0 || cfg.capStreamCopy <= 0 || cfg.capStreamLagBudget <= 0 || cfg.largeGB <= 0 || cfg.verifyCPUGB <= 0 || cfg.largeWriters <= 0 || cfg.largeWriteRate < 0 || cfg.largeWarmup < 0 || cfg.largePauseRounds < 0 || cfg.largeWALWindow <= 0 {
		fmt.Fprintln(os.Stderr, "reshard-bench: -rows, -chunk-rows, -rebalance-users, -adaptive-rounds, -adaptive-window, -cutover-rounds, -capacity-copy, -capstream-*, -large-gb, -verifycpu-gb, -large-writers and -large-wal-window must be positive")
		os.Exit(2)
	}
	for _, f := range strings.FieldsFunc(*rates, func(r rune) bool { return r == ',' }) {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 {
			fmt.Fprintf(os.Stderr, "reshard-bench: -adaptive-rates: %q is not a positive rows/s\n", f)
			os.Exit(2)
		}
		cfg.adaptiveRates = append(cfg.adaptiveRates, v)
	}
	if cfg.rebalanceMaxParallel < 0 {
		fmt.Fprintln(os.Stderr, "reshard-bench: -rebalance-max-parallel-moves must be 0 (no bound) or more")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "reshard-bench:", err)
		os.Exit(1)
	}
}

func sectionNames() string {
	names := make([]string, len(sections))
	for i, s := range sections {
		names[i] = s.name
	}
	return strings.Join(names, ",")
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	start := time.Now()
	// Before our servers exist, the load is other work's alone.
	idle := loadAvg()
	fmt.Fprintf(out, "load average before the servers started: %s\n", idle)
	var e *env // the two shared servers, only when a section needs them
	for _, s := range sections {
		if s.ownServers || !cfg.selected(s) {
			continue
		}
		var err error
		if e, err = newEnv(ctx, cfg, out); err != nil {
			return err
		}
		defer e.close()
		break
	}
	r := &report{out: out, cfg: cfg, idleLoad: idle}
	for _, s := range sections {
		if !cfg.selected(s) {
			continue
		}
		r.ran = append(r.ran, s.name)
		fmt.Fprintf(out, "## %s: %s\n", s.name, s.about)
		r.section = s.name
		before := loadAvg()
		err := s.run(ctx, e, r)
		// Other work on the machine skews the figures: say how busy it was.
		r.loads = append(r.loads, sectionLoad{s.name, before, loadAvg()})
		fmt.Fprintf(out, "load average: %s before, %s after\n", before, loadAvg())
		if err != nil {
			r.print(out)
			return fmt.Errorf("section %s: %w", s.name, err)
		}
	}
	r.print(out)
	fmt.Fprintf(out, "\ntotal %s\n", time.Since(start).Round(time.Second))
	if cfg.out != "" {
		if err := writeMarkdown(ctx, cfg, e, r, time.Since(start)); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", cfg.out)
	}
	return nil
}

// selected says whether the run includes section s: every section but the
// opt-in ones when -sections is not given, else the ones it names.
func (cfg config) selected(s section) bool {
	if cfg.only == nil {
		return !s.optIn
	}
	return slices.Contains(cfg.only, s.name)
}

// sectionLoad is the load average around one section.
type sectionLoad struct{ section, before, after string }

// loadAvg is the 1, 5 and 15 minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// writeMarkdown writes the report with what it was measured on. The rows
// of sections not run this time are kept from cfg.out as it was, with the
// date and load of the run that measured them, so one section can be
// measured again without running every other.
func writeMarkdown(ctx context.Context, cfg config, e *env, r *report, took time.Duration) error {
	now := time.Now().UTC().Format("2006-01-02 15:04 MST")
	old := readOldReport(cfg.out)
	kept := func(name string) bool { return !slices.Contains(r.ran, name) && old.lines[name] != "" }
	version, err := pgVersion(ctx, e)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\nGenerated by `make bench` (`bench/run.sh -out docs/benchmarks.md`, program `cmd/reshard-bench`); do not edit by hand.\n\n")
	fmt.Fprintf(&b, "- date: %s (sections %s; a section not run then keeps its rows from the run dated in its line below)\n", now, strings.Join(r.ran, ", "))
	fmt.Fprintf(&b, "- machine: %d CPUs (nproc, %s), %s memory, %s\n", runtime.NumCPU(), cpuModel(), memTotal(), runtime.GOOS+"/"+runtime.GOARCH)
	fmt.Fprintf(&b, "- PostgreSQL: %s\n", version)
	envKept := slices.ContainsFunc(sections, func(s section) bool { return !s.ownServers && kept(s.name) })
	switch {
	case e != nil:
		fmt.Fprintf(&b, "- data of backfill, cutover, verify, cdc: two local servers (shared_buffers 256MB, max_wal_size 4GB), users table of ../shared/bench/pglimits.sh, %d rows, %d bytes\n", cfg.rows, e.tableBytes)
	case envKept && old.data != "":
		b.WriteString(old.data + "\n")
	}
	fmt.Fprintf(&b, "- this run took %s; load average (1, 5, 15 min) before it started its servers (other work only): %s\n", took.Round(time.Second), r.idleLoad)
	for _, s := range sections {
		if i := slices.IndexFunc(r.loads, func(l sectionLoad) bool { return l.section == s.name }); i >= 0 {
			l := r.loads[i]
			fmt.Fprintf(&b, "- section %s: measured %s; load average (1, 5, 15 min) %s before, %s after\n", l.section, now, l.before, l.after)
		} else if kept(s.name) {
			b.WriteString(old.lines[s.name] + "\n")
		}
	}
	b.WriteString("\nThe loads around a section include the benchmark's own processes (two to four busy during a measurement). " +
		"Ratios compare figures measured in the same run; other work on the machine skews them unevenly.\n")
	b.WriteString("\n| section | figure | value | unit | details |\n|---|---|---:|---|---|\n")
	for _, s := range sections {
		if slices.Contains(r.ran, s.name) {
			for _, f := range r.figures {
				if f.section == s.name {
					b.WriteString(f.row())
				}
			}
		} else if kept(s.name) {
			for _, row := range old.rows[s.name] {
				b.WriteString(row + "\n")
			}
		}
	}
	return os.WriteFile(cfg.out, []byte(b.String()), 0o644)
}

// oldReport is what writeMarkdown keeps of the file it replaces: per
// section, its line in the header and its table rows; the env's data line.
type oldReport struct {
	lines map[string]string
	rows  map[string][]string
	data  string
}

// readOldReport reads a file writeMarkdown wrote (an earlier format's
// "load average ... around section X" lines get the file's date). A missing
// file keeps nothing.
func readOldReport(path string) oldReport {
	o := oldReport{lines: map[string]string{}, rows: map[string][]string{}}
	b, err := os.ReadFile(path)
	if err != nil {
		return o
	}
	date := "unknown"
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "- date: "):
			date, _, _ = strings.Cut(strings.TrimPrefix(line, "- date: "), " (")
		case strings.HasPrefix(line, "- data"):
			o.data = line
		case strings.HasPrefix(line, "- section "):
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "- section "), ":")
			o.lines[name] = line
		case strings.HasPrefix(line, "- load average (1, 5, 15 min) around section "):
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "- load average (1, 5, 15 min) around section "), ": ")
			if ok {
				o.lines[name] = fmt.Sprintf("- section %s: measured %s; load average (1, 5, 15 min) %s", name, date, rest)
			}
		case strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| section |"):
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
			o.rows[name] = append(o.rows[name], line)
		}
	}
	return o
}

// pgVersion is version() of the shared servers, or postgres --version when
// this run started none.
func pgVersion(ctx context.Context, e *env) (string, error) {
	if e != nil {
		var v string
		err := e.srcPool.QueryRow(ctx, `SELECT version()`).Scan(&v)
		return v, err
	}
	dir, err := devenv.FindPGBin()
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("postgres --version: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// memTotal is the machine's memory as /proc/meminfo says it.
func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return "unknown"
}

// cpuModel is the first CPU's model name and clock from /proc/cpuinfo:
// a section's figures compare only with those of the same machine, and a
// VM's sessions do not always land on the same hardware.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "model unknown"
	}
	var model, mhz string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		switch k, v = strings.TrimSpace(k), strings.TrimSpace(v); {
		case !ok:
		case k == "model name" && model == "":
			model = v
		case k == "cpu MHz" && mhz == "":
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				mhz = fmt.Sprintf(" at %.0f MHz", f)
			}
		}
	}
	if model == "" {
		return "model unknown"
	}
	return model + mhz
}

// figure is one measured number.
type figure struct {
	section, name string
	value         float64
	unit, details string
}

type report struct {
	out     io.Writer
	cfg     config
	ran     []string // sections run, in order
	section string
	figures []figure
	// idleLoad is the load average before the servers started; loads are
	// around each section and count the benchmark's own processes too.
	idleLoad string
	loads    []sectionLoad
}

// add records a figure and prints it as "name value unit (details)".
func (r *report) add(name string, value float64, unit, details string) {
	f := figure{section: r.section, name: name, value: value, unit: unit, details: details}
	r.figures = append(r.figures, f)
	fmt.Fprintf(r.out, "%s %s %s (%s)\n", name, format(value), unit, details)
}

func format(v float64) string {
	if v >= 100 || v == float64(int64(v)) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func (r *report) print(w io.Writer) {
	fmt.Fprintln(w, "\n| section | figure | value | unit | details |\n|---|---|---:|---|---|")
	r.printRows(w)
}

func (r *report) printRows(w io.Writer) {
	for _, f := range r.figures {
		fmt.Fprint(w, f.row())
	}
}

// row is the figure as a markdown table row.
func (f figure) row() string {
	return fmt.Sprintf("| %s | %s | %s | %s | %s |\n", f.section, f.name, format(f.value), f.unit, strings.ReplaceAll(f.details, "|", `\|`))
}
