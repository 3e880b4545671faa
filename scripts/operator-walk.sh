#!/usr/bin/env bash
# The operator walk of issues #15 and #33, run for real against a local cluster of its own: a
# migration started with no worker, an action refused with no worker, throttle, the verify's
# progress bar and ETA, the approval wait, approve, GRACE with the current topology version (and
# topology check meanwhile), a rollback, the header of the rolled-back migration and the list. Every
# command is echoed with its exit code, as an operator would see it; status ends with its "next:"
# line, and --json carries the same commands as next_steps.
#
#   scripts/operator-walk.sh [reshard-binary]      (default bin/reshard: make build)
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-bin/reshard}")
state=$(mktemp -d /tmp/reshard-walk.XXXXXX)
cfg="$state/reshard.yaml"
worker=
cleanup() {
	[ -n "$worker" ] && kill "$worker" 2>/dev/null && wait "$worker" 2>/dev/null
	"$bin" --state-dir "$state" dev destroy >/dev/null 2>&1
	rm -rf "$state"
}
trap cleanup EXIT

say() { printf '\n$ reshard %s\n' "$*"; "$bin" "$@" --config "$cfg" 2>&1; printf '[exit %d]\n' $?; }
quiet() { "$bin" "$@" >/dev/null 2>&1 || { echo "setup step failed: reshard $*" >&2; "$bin" "$@"; exit 1; }; }
wait_for() { # text, command...
	local want=$1; shift
	local out
	for _ in $(seq 300); do
		out=$("$bin" "$@" --config "$cfg" 2>&1) # status exits 1 for a rolled-back migration
		grep -q -- "$want" <<<"$out" && return 0
		sleep 1
	done
	echo "gave up waiting for '$want' in reshard $*" >&2; exit 1
}

quiet --state-dir "$state" dev up --shards 3
for s in shard1 shard2 shard3; do
	quiet --state-dir "$state" dev psql "$s" -- -q -c 'CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL)'
done
quiet init --config "$cfg" --shards shard1,shard2 --table users:id
python3 -c 'print("id,name"); [print(f"{i},user {i}") for i in range(1, 30001)]' >"$state/users.csv"
quiet load --config "$cfg" --table users --file "$state/users.csv"

echo "# 1. A migration started while no worker runs, then an action with no worker"
say add-node shard3 --id walk --rows-per-sec 300 --require-approval --grace 20s --verify-chunk-rows 1000
say pause walk --timeout 5s

echo; echo "# 2. A worker starts; throttle; status shows the new limit and the live copy"
"$bin" worker --config "$cfg" --listen 127.0.0.1:0 >"$state/worker.log" 2>&1 &
worker=$!
wait_for SNAPSHOT_COPY status walk
sleep 3
say throttle walk --rows-per-sec 5000
sleep 2
say status walk

echo; echo "# 3. Verify has a progress bar, rows compared, chunks and an ETA (slowed to be seen)"
say throttle walk --rows-per-sec 400
wait_for "rows compared" status walk
say status walk
sleep 5
say status walk
say throttle walk --rows-per-sec 5000

echo; echo "# 4. The approval wait is its own state (next: approve or rollback, in --json too), then approve,"
echo "#    then GRACE with the topology version now current, and topology check meanwhile"
wait_for "waiting for approval" status walk
say status walk
printf '\n$ reshard status walk --json | next_steps\n'
"$bin" status walk --config "$cfg" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["next_steps"])'
say approve walk --json
echo "#    (status at once after the approval: no move reads 'waiting for approval' any more)"
say status walk
wait_for GRACE status walk
say status walk
say topology check
say complete walk
wait_for "ended: DONE" status walk --watch --interval 1s
say status walk

echo; echo "# 5. A rollback during the copy, the header of the rolled-back migration, the list"
say remove-node shard3 --id walk2 --rows-per-sec 200
wait_for SNAPSHOT_COPY status walk2
say rollback walk2
wait_for "ended: ROLLED_BACK" status walk2 --watch --interval 1s
say status walk2
say list
