package main

import (
	"strings"
	"testing"
	"time"
)

// A section re-run alone with -out replaces its own rows, keeps every other
// section's, in the order of sections, and says when it was measured.
func TestMergeMarkdown(t *testing.T) {
	old := "# Benchmarks\n\n- date: then\n- load average (1, 5, 15 min) around section backfill: 1 before, 2 after\n" +
		"- load average (1, 5, 15 min) around section adaptive: 9 before, 9 after\n\nThe loads ...\n\n" +
		"| section | figure | value | unit | details |\n|---|---|---:|---|---|\n" +
		"| backfill | copy | 1 | rows/s | a |\n| adaptive | p99 | 99 | ms | stale |\n| cdc | apply | 3 | changes/s | c |\n"
	r := &report{idleLoad: "5 5 5", loads: []sectionLoad{{"adaptive", "6 6 6", "7 7 7"}}}
	r.section = "adaptive"
	r.figures = []figure{{section: "adaptive", name: "p99", value: 12, unit: "ms", details: "fresh | piped"}}
	got := mergeMarkdown(old, config{only: []string{"adaptive"}, out: "docs/benchmarks.md"}, r, 3*time.Minute)
	rows := got[strings.Index(got, "| section |"):]
	want := "| section | figure | value | unit | details |\n|---|---|---:|---|---|\n" +
		"| backfill | copy | 1 | rows/s | a |\n| adaptive | p99 | 12 | ms | fresh \\| piped |\n| cdc | apply | 3 | changes/s | c |\n"
	if rows != want {
		t.Fatalf("rows:\n%s\nwant:\n%s", rows, want)
	}
	if strings.Contains(got, "around section adaptive") || !strings.Contains(got, "around section backfill") ||
		!strings.Contains(got, "- section adaptive re-run alone on ") || !strings.Contains(got, "6 6 6 before the section, 7 7 7 after") {
		t.Fatalf("header:\n%s", got[:strings.Index(got, "| section |")])
	}
}
