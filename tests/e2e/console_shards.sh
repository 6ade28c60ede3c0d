#!/usr/bin/env bash
# The console over two nodes leading their shares of four shards on PostgreSQL
# (--spread-shards), shards 2 and 3 kept in a database of their own (on a second server when one
# is given): each queue shows its shard, its leader and its database (console_shards.mjs).
#
# Usage: tests/e2e/console_shards.sh ORDERLY_BINARY NODE_DIR CHROMIUM POSTGRES_URL [SECOND_URL]
#   NODE_DIR: where playwright-core and @aws-sdk/client-sqs are installed, with
#   console_shards.mjs copied in; the URLs: clusters scripts/postgres-cluster started.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
binary=$1 node_dir=$2 chromium=$3 cluster=$4 second_cluster=${5:-$4}
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work" || true
}
trap cleanup EXIT

database=$("$root/scripts/postgres-cluster" database "$cluster" console_shards 2>/dev/null)
second=$("$root/scripts/postgres-cluster" database "$second_cluster" console_shards_2_3 2>/dev/null)
endpoints=()
for n in 1 2; do
  "$binary" --bind 127.0.0.1:0 --storage "$database" --shards 4 --spread-shards \
    --shard-database "2-3=$second" >"$work/node$n.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do grep -q "listening on" "$work/node$n.log" && break; sleep 0.1; done
  endpoint=$(grep -o 'listening on http://[0-9.:]*' "$work/node$n.log" | head -n 1 | sed 's/listening on //' || true)
  [ -n "$endpoint" ] || { echo "FAIL node $n did not start"; cat "$work/node$n.log"; exit 1; }
  endpoints+=("$endpoint")
done
# Each leads its two shards, and every shard's leader is known to both (the second node's
# share moves to it within a few lease readings).
settled() {
  curl -fs "${endpoints[0]}/_orderly/cluster" >"$work/a.json" && curl -fs "${endpoints[1]}/_orderly/cluster" >"$work/b.json" &&
    "${PYTHON:-python3}" - "$work/a.json" "$work/b.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
led = sorted(a["led"] + b["led"])
known = all(a["leaders"]) and all(b["leaders"]) and a["leaders"] == b["leaders"]
sys.exit(0 if led == [0, 1, 2, 3] and len(a["led"]) == 2 and known else 1)
PY
}
for _ in $(seq 1 300); do settled && break; sleep 0.1; done
settled || { echo "FAIL the two nodes did not settle their shares"; cat "$work/a.json" "$work/b.json" "$work"/node*.log; exit 1; }
CHROMIUM="$chromium" NODE_NO_WARNINGS=1 node "$node_dir/console_shards.mjs" "${endpoints[0]}" "${endpoints[1]}" "$database" "$second"
