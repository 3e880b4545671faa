// Package worker assembles a reshard worker: the Temporal worker that runs
// the Migration and Move workflows and their activities, its HTTP endpoint
// (/metrics, /livez, /healthz, /readyz), the reload of its configuration
// file, and its row in the control database's worker registry. `reshard
// worker` and `reshard demo` run it through Run; the CLI only reads its
// flags and configuration.
//
// Layout: worker.go (Run: the registry, the activities, the Temporal
// client, the HTTP endpoint, the health checks); reload.go (the
// configuration watch and the worker registry's report); phasemetrics.go
// (the workflows' phase timers as a histogram); movemetrics.go (the
// move-state gauges read at scrape time).
package worker
