package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// machineCounters are the whole machine's CPU time by kind (/proc/stat, in
// USER_HZ ticks) and its reads from storage and page faults (/proc/vmstat):
// where a phase's CPU went, kernel or user, and whether its reads came from
// the page cache or the disk. The machine is otherwise idle when section
// large runs, so they are the phase's.
type machineCounters struct {
	user, nice, system, idle, iowait, irq, softirq, steal int64
	pgpginKiB, majFaults, faults                          int64
}

func readMachine() machineCounters {
	var m machineCounters
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0]) // cpu user nice system idle iowait irq softirq steal
		for i, dst := range []*int64{&m.user, &m.nice, &m.system, &m.idle, &m.iowait, &m.irq, &m.softirq, &m.steal} {
			if i+1 < len(f) {
				*dst, _ = strconv.ParseInt(f[i+1], 10, 64)
			}
		}
	}
	if b, err := os.ReadFile("/proc/vmstat"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "pgpgin":
				m.pgpginKiB = n
			case "pgmajfault":
				m.majFaults = n
			case "pgfault":
				m.faults = n
			}
		}
	}
	return m
}

func (m machineCounters) minus(o machineCounters) machineCounters {
	return machineCounters{m.user - o.user, m.nice - o.nice, m.system - o.system, m.idle - o.idle, m.iowait - o.iowait,
		m.irq - o.irq, m.softirq - o.softirq, m.steal - o.steal, m.pgpginKiB - o.pgpginKiB, m.majFaults - o.majFaults, m.faults - o.faults}
}

// String says the counters in seconds (USER_HZ is 100 on Linux), GiB and
// faults.
func (m machineCounters) String() string {
	s := func(t int64) float64 { return float64(t) / 100 }
	return fmt.Sprintf("the machine: user %.0f s, system %.0f s (irq %.0f, softirq %.0f), iowait %.0f s, idle %.0f s, steal %.0f s; %.2f GiB read from storage; %d page faults (%d major)",
		s(m.user+m.nice), s(m.system), s(m.irq), s(m.softirq), s(m.iowait), s(m.idle), s(m.steal), float64(m.pgpginKiB)/(1<<20), m.faults, m.majFaults)
}
