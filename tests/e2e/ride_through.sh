#!/usr/bin/env bash
# Default SDK clients ride through a failover: three nodes on PostgreSQL, boto3 and the AWS SDK
# for JavaScript v3 (each with its default retry settings) sending, receiving and deleting
# through the two standbys while the leader is killed with SIGKILL. Not one call may fail: a
# standby holds what it cannot pass on until the next node leads.
#
# Usage: tests/e2e/ride_through.sh ORDERLY_BINARY PYTHON NODE_DIR POSTGRES_URL
#   PYTHON: a venv with boto3; NODE_DIR: where @aws-sdk/client-sqs is installed, with
#   ride_through.mjs copied in; POSTGRES_URL: a cluster scripts/postgres-cluster started.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
binary=$1 python=$2 node_dir=$3 cluster=$4
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work" || true
}
trap cleanup EXIT

database=$("$root/scripts/postgres-cluster" database "$cluster" ride_through 2>/dev/null)
ports=()
for n in 1 2 3; do
  ORDERLY_STORAGE="$database" "$binary" --bind 127.0.0.1:0 >"$work/node$n.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do grep -q "listening on" "$work/node$n.log" && break; sleep 0.1; done
  port=$(grep -o 'listening on http://[0-9.:]*' "$work/node$n.log" | head -n 1 | sed 's/.*://')
  [ -n "$port" ] || { echo "FAIL node $n did not start"; cat "$work/node$n.log"; exit 1; }
  ports+=("$port")
done
role() { curl -fs "http://127.0.0.1:$1/_orderly/cluster" | "$python" -c 'import json, sys; print(json.load(sys.stdin)["role"])'; }
[ "$(role "${ports[0]}")" = leader ] || { echo "FAIL the first node does not lead"; exit 1; }

stop="$work/stop"
"$python" "$here/ride_through.py" "http://127.0.0.1:${ports[1]}" ride-py "$stop" >"$work/py.out" 2>&1 &
py=$!
NODE_NO_WARNINGS=1 node "$node_dir/ride_through.mjs" "http://127.0.0.1:${ports[2]}" ride-js "$stop" >"$work/js.out" 2>&1 &
js=$!
# Under load for two seconds, then the leader is killed.
sleep 2
kill -9 "${pids[0]}"
killed=$(date +%s%N)
for _ in $(seq 1 300); do
  if [ "$(role "${ports[1]}" 2>/dev/null)" = leader ] || [ "$(role "${ports[2]}" 2>/dev/null)" = leader ]; then
    break
  fi
  sleep 0.1
done
took=$(( ($(date +%s%N) - killed) / 1000000 ))
echo "ok   a standby leads ${took} ms after the leader's SIGKILL"
# The load goes on a little past the takeover.
sleep 2
touch "$stop"
status=0
wait "$py" || status=1
wait "$js" || status=1
cat "$work/py.out" "$work/js.out"
if [ "$status" != 0 ]; then
  echo "FAIL a call failed through a standby while the leader was replaced"
  for n in 2 3; do tail -n 20 "$work/node$n.log"; done
  exit 1
fi
echo "ok   boto3 and the JS SDK v3, default clients, through the standbys: not one call failed"
