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
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// section is one group of measurements sharing the environment.
type section struct {
	name  string
	about string
	run   func(ctx context.Context, e *env, r *report) error
}

// sections run in this order; add yours here.
var sections = []section{
	{name: "ring", about: "scale-out simulation, Owner lookup, planning 1,000 shards × 256 vnodes, 4 → 8 and 16 → 64 as one rebalance against add-nodes one at a time (no servers)", run: runRing},
	{name: "backfill", about: "range copy vs raw COPY pipe and pgcopydb", run: runBackfill},
	{name: "cutover", about: "write pause of cutovers under router writers; fence trigger overhead (pgbench)", run: runCutover},
	{name: "verify", about: "chunked checksum verification vs a plain checksum scan", run: runVerify},
	{name: "cdc", about: "apply rate and CPU for small transactions vs the source and its walsender, staged vs text[] flushes, peak RSS for one huge transaction", run: runCDC},
	{name: "cdc-hot", about: "apply rate for 200k single-row updates over 2,000 keys vs the source's decoding of them", run: runCDCHot},
	{name: "cdc-stage", about: "staged vs text[] flushes by flush size: where staging starts to pay (cdc.DefaultStageMinRows)", run: runCDCStage},
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
	flag.StringVar(&cfg.cdcProfile, "cdc-profile", "", "write a CPU profile of the CDC apply (small transactions) to this file")
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
	if cfg.rows <= 0 || cfg.chunkRows <= 0 {
		fmt.Fprintln(os.Stderr, "reshard-bench: -rows and -chunk-rows must be positive")
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
	e, err := newEnv(ctx, cfg, out)
	if err != nil {
		return err
	}
	defer e.close()
	r := &report{out: out, idleLoad: idle}
	for _, s := range sections {
		if cfg.only != nil && !slices.Contains(cfg.only, s.name) {
			continue
		}
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
	fmt.Fprintf(out, "\n(%d rows, total %s)\n", cfg.rows, time.Since(start).Round(time.Second))
	if cfg.out != "" {
		if err := writeMarkdown(ctx, cfg, e, r, time.Since(start)); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", cfg.out)
	}
	return nil
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

// writeMarkdown writes the report with what it was measured on.
func writeMarkdown(ctx context.Context, cfg config, e *env, r *report, took time.Duration) error {
	var version string
	if err := e.srcPool.QueryRow(ctx, `SELECT version()`).Scan(&version); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\nGenerated by `make bench` (`bench/run.sh -out docs/benchmarks.md`, program `cmd/reshard-bench`); do not edit by hand.\n\n")
	fmt.Fprintf(&b, "- date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- machine: %d CPUs (nproc), %s memory, %s\n", runtime.NumCPU(), memTotal(), runtime.GOOS+"/"+runtime.GOARCH)
	fmt.Fprintf(&b, "- PostgreSQL: %s (two local servers, shared_buffers 256MB, max_wal_size 4GB)\n", version)
	fmt.Fprintf(&b, "- data: users table of ../shared/bench/pglimits.sh, %d rows, %d bytes; run took %s\n", cfg.rows, e.tableBytes, took.Round(time.Second))
	fmt.Fprintf(&b, "- load average (1, 5, 15 min) before the servers started (other work only): %s\n", r.idleLoad)
	for _, l := range r.loads {
		fmt.Fprintf(&b, "- load average (1, 5, 15 min) around section %s: %s before, %s after\n", l.section, l.before, l.after)
	}
	b.WriteString("\nThe loads around a section include the benchmark's own processes (two to four busy during a measurement). " +
		"Ratios compare figures measured in the same run; other work on the machine skews them unevenly.\n")
	r.print(&b)
	return os.WriteFile(cfg.out, []byte(b.String()), 0o644)
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

// figure is one measured number.
type figure struct {
	section, name string
	value         float64
	unit, details string
}

type report struct {
	out     io.Writer
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
	for _, f := range r.figures {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", f.section, f.name, format(f.value), f.unit, strings.ReplaceAll(f.details, "|", `\|`))
	}
}
