#!/usr/bin/env bash
# Screenshots of the Temporal UI (2.42, bundled with the temporal CLI v1.5.1) during a migration,
# for docs/img:
#   docs/img/ui-list-during-copy.png   the list filtered to one migration (ReshardMigration = "<id>"):
#                                      the Migration and its Moves while they copy
#   docs/img/ui-move-during-copy.png   one Move's User Metadata: its summary and current details
#                                      (phase, rows copied, ETA, throttle, lag) as status shows them
#   docs/img/ui-move-in-verify.png     a Move's User Metadata while its verify runs
#   docs/img/ui-move-verify-pending.png  the same Move's Pending Activities: the verify's live
#                                      progress (rows compared, chunks, end) in its heartbeat
#   docs/img/ui-migration-in-grace.png the Migration's User Metadata in GRACE: the headline of the
#                                      topology now current, the moves' table, the grace deadline
#   docs/img/ui-list-in-grace.png      the list filtered to ReshardPhase = "GRACE"
#
# It runs `reshard demo --keep` with a slow copy throttle in a cluster of its own, waits until a
# move has copied rows, takes both screenshots with headless Chromium (Debian: apt-get install
# chromium) driven by cmd/reshard-uishot, then lets the demo finish and destroys its cluster.
#
#   scripts/ui-screenshots.sh [out-dir]      (default docs/img; needs bin/reshard: make build)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/img}
bin=bin/reshard
state=$(mktemp -d /tmp/reshard-shots.XXXXXX)
chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$chrome" ] || { echo "no chromium: apt-get install -y chromium" >&2; exit 1; }
[ -x "$bin" ] || { echo "no $bin: run make build" >&2; exit 1; }
go build -o bin/reshard-uishot ./cmd/reshard-uishot # Chromium driven through DevTools

cleanup() {
	[ -n "${demo:-}" ] && kill "$demo" 2>/dev/null && wait "$demo" 2>/dev/null || true
	"$bin" --state-dir "$state" dev destroy >/dev/null 2>&1 || true
	rm -rf "$state"
}
trap cleanup EXIT

"$bin" --state-dir "$state" demo --keep --users 50000 --rows-per-sec 100 --grace 10m --listen "127.0.0.1:$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")" >"$state/demo.log" 2>&1 &
demo=$!

# Wait for the configuration, then for a move that has copied rows.
cfg="$state/reshard.yaml"
for _ in $(seq 600); do [ -f "$cfg" ] && break; sleep 0.5; done
id=
for _ in $(seq 600); do
	if json=$("$bin" status --config "$cfg" --json 2>/dev/null); then
		id=$(python3 -c 'import json,sys; s=json.load(sys.stdin); m=[m for m in s["state"].get("moves") or [] if m.get("phase")=="SNAPSHOT_COPY" and m.get("rows_copied",0)>500]; print(s["id"]+" "+m[0]["spec"]["id"] if m else "")' <<<"$json")
		[ -n "$id" ] && break
	fi
	kill -0 "$demo" 2>/dev/null || { cat "$state/demo.log"; exit 1; }
	sleep 1
done
[ -n "$id" ] || { echo "no move copied rows in 10 minutes" >&2; cat "$state/demo.log"; exit 1; }
read -r mig move <<<"$id"
ui=$(sed -n 's/^ *ui: *//p' "$cfg" | head -1)
addr=$(sed -n 's/^ *address: *//p' "$cfg" | head -1)
temporal=$(command -v temporal || echo "$(go env GOPATH)/bin/temporal")
run=$("$temporal" workflow describe --address "$addr" --namespace reshard -w "reshard-$mig/$move" -o json |
	python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["workflowExecutionInfo"]["execution"]["runId"])')
ns=reshard
mkdir -p "$out"
shot() { # url file [reshard-uishot flags]: three tries (DevTools times out on a loaded machine)
	for try in 1 2 3; do
		bin/reshard-uishot -chromium "$chrome" -url "$1" -out "$2" -wait 30s "${@:3}" && break
		[ "$try" = 3 ] && return 1
	done
	echo "wrote $2 ($1)"
}
q=$(python3 -c 'import urllib.parse,sys; print(urllib.parse.quote(sys.argv[1]))' "ReshardMigration = \"$mig\"")
shot "$ui/namespaces/$ns/workflows/reshard-$mig%2F$move/$run/user-metadata" "$out/ui-move-during-copy.png"
shot "$ui/namespaces/$ns/workflows?query=$q" "$out/ui-list-during-copy.png"
"$bin" status "$mig" --config "$cfg" | sed 's/^/status: /'

# wait_move phase test: prints the id of a move in phase whose status JSON passes the python test
# on m (a move), within 15 minutes.
wait_move() {
	local found=
	for _ in $(seq 900); do
		if json=$("$bin" status "$mig" --config "$cfg" --json 2>/dev/null); then
			found=$(python3 -c 'import json,sys; s=json.load(sys.stdin); ms=[m for m in s["state"].get("moves") or [] if m.get("phase")==sys.argv[1] and eval(sys.argv[2])]; print(ms[0]["spec"]["id"] if ms else "")' "$1" "$2" <<<"$json")
			[ -n "$found" ] && { echo "$found"; return 0; }
		fi
		kill -0 "$demo" 2>/dev/null || { cat "$state/demo.log" >&2; return 1; }
		sleep 1
	done
	echo "no move in $1 in 15 minutes" >&2
	return 1
}
runid() { # workflow id
	"$temporal" workflow describe --address "$addr" --namespace reshard -w "$1" -o json |
		python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["workflowExecutionInfo"]["execution"]["runId"])'
}

# A verify that has compared rows (throttled like the copy: it runs for a minute or so).
vmove=$(wait_move VERIFY '(m.get("verify_progress") or {}).get("rows",0)>200')
# Hold the verify while the UI renders (the throttle applies to a running verify at once).
"$bin" throttle "$mig" --config "$cfg" --rows-per-sec 5 >/dev/null
vrun=$(runid "reshard-$mig/$vmove")
shot "$ui/namespaces/$ns/workflows/reshard-$mig%2F$vmove/$vrun/user-metadata" "$out/ui-move-in-verify.png"
shot "$ui/namespaces/$ns/workflows/reshard-$mig%2F$vmove/$vrun/pending-activities" "$out/ui-move-verify-pending.png" -height 1500
"$bin" status "$mig" --config "$cfg" | sed 's/^/status: /'
"$bin" throttle "$mig" --config "$cfg" --rows-per-sec 100 >/dev/null

# GRACE: the demo's grace lasts 10 minutes; complete ends it once the shots are taken.
gmove=$(wait_move GRACE 'True')
sleep 3 # the migration's details follow its moves' reports
mrun=$(runid "reshard-$mig")
shot "$ui/namespaces/$ns/workflows/reshard-$mig/$mrun/user-metadata" "$out/ui-migration-in-grace.png"
q=$(python3 -c 'import urllib.parse,sys; print(urllib.parse.quote(sys.argv[1]))' "ReshardMigration = \"$mig\" AND ReshardPhase = \"GRACE\"")
shot "$ui/namespaces/$ns/workflows?query=$q" "$out/ui-list-in-grace.png"
"$bin" status "$mig" --config "$cfg" | sed 's/^/status: /'
# Every move in GRACE before complete (it ends GRACE for the moves there).
for _ in $(seq 600); do
	n=$("$bin" status "$mig" --config "$cfg" --json 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin); print(len([m for m in s["state"]["moves"] if m["phase"] not in ("GRACE","CLEANUP","DONE")]))' || echo 1)
	[ "$n" = 0 ] && break
	sleep 1
done
"$bin" complete "$mig" --config "$cfg"
wait "$demo"; demo=
tail -5 "$state/demo.log"
