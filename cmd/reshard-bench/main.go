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
	"slices"
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
	{name: "backfill", about: "range copy vs raw COPY pipe and pgcopydb", run: runBackfill},
	{name: "cutover", about: "write pause of cutovers under router writers; fence trigger overhead (pgbench)", run: runCutover},
	{name: "verify", about: "chunked checksum verification vs a plain checksum scan", run: runVerify},
}

// config is the benchmark's one configuration.
type config struct {
	rows      int
	only      []string
	chunkRows int
	keep      bool
}

func main() {
	var (
		cfg  config
		only string
	)
	flag.IntVar(&cfg.rows, "rows", 1_000_000, "rows of the users table (~200 B each)")
	flag.StringVar(&only, "sections", "", "comma-separated sections to run (default all): "+sectionNames())
	flag.IntVar(&cfg.chunkRows, "chunk-rows", 10_000, "backfill rows per chunk")
	flag.BoolVar(&cfg.keep, "keep", false, "leave the servers' data directories behind (their path is printed)")
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
	e, err := newEnv(ctx, cfg, out)
	if err != nil {
		return err
	}
	defer e.close()
	r := &report{out: out}
	for _, s := range sections {
		if cfg.only != nil && !slices.Contains(cfg.only, s.name) {
			continue
		}
		fmt.Fprintf(out, "## %s: %s\n", s.name, s.about)
		r.section = s.name
		if err := s.run(ctx, e, r); err != nil {
			r.print()
			return fmt.Errorf("section %s: %w", s.name, err)
		}
	}
	r.print()
	fmt.Fprintf(out, "\n(%d rows, total %s)\n", cfg.rows, time.Since(start).Round(time.Second))
	return nil
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

func (r *report) print() {
	fmt.Fprintln(r.out, "\n| section | figure | value | unit | details |\n|---|---|---:|---|---|")
	for _, f := range r.figures {
		fmt.Fprintf(r.out, "| %s | %s | %s | %s | %s |\n", f.section, f.name, format(f.value), f.unit, strings.ReplaceAll(f.details, "|", `\|`))
	}
}
