#!/usr/bin/env bash
# Screenshots of the Temporal UI (2.42, bundled with the temporal CLI v1.5.1) during a migration,
# for docs/img:
#   docs/img/ui-list-during-copy.png   the list filtered to one migration (ReshardMigration = "<id>"):
#                                      the Migration and its Moves while they copy
#   docs/img/ui-move-during-copy.png   one Move's User Metadata: its summary and current details
#                                      (phase, rows copied, ETA, throttle, lag) as status shows them
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

"$bin" --state-dir "$state" demo --keep --users 50000 --rows-per-sec 100 --grace 5s --listen "127.0.0.1:$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")" >"$state/demo.log" 2>&1 &
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
shot() { # url file
	bin/reshard-uishot -chromium "$chrome" -url "$1" -out "$2" -wait 25s
	echo "wrote $2 ($1)"
}
q=$(python3 -c 'import urllib.parse,sys; print(urllib.parse.quote(sys.argv[1]))' "ReshardMigration = \"$mig\"")
shot "$ui/namespaces/$ns/workflows/reshard-$mig%2F$move/$run/user-metadata" "$out/ui-move-during-copy.png"
shot "$ui/namespaces/$ns/workflows?query=$q" "$out/ui-list-during-copy.png"
"$bin" status "$mig" --config "$cfg" | sed 's/^/status: /'
wait "$demo"; demo=
tail -5 "$state/demo.log"
