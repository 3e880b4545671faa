#!/usr/bin/env bash
# Runs reshard's benchmark program (two throwaway PostgreSQL servers, 1M rows by
# default; the rebalance section starts a whole local cluster of its own).
# Installs the peer tool pgcopydb first when it is missing.
# Usage: bench/run.sh [-rows N] [-sections backfill,...] [-rebalance-users N]
#        [-rebalance-max-parallel-moves N] [-out docs/benchmarks.md]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v pgcopydb >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y pgcopydb >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y pgcopydb >/dev/null; } ||
      echo "bench/run.sh: could not install pgcopydb; its figure is skipped" >&2
  else
    echo "bench/run.sh: pgcopydb missing (Debian: apt-get install -y pgcopydb); its figure is skipped" >&2
  fi
fi
exec go run ./cmd/reshard-bench "$@"
