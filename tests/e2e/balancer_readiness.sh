#!/usr/bin/env bash
# deploy/haproxy.cfg in a real HAProxy in front of two nodes on PostgreSQL: a node that is not
# ready gets no request. The leader reaches the database through a relay; the relay is killed
# (its connections cut, new ones refused), so the leader loses its lease, steps down and cannot
# learn who leads: its /health/ready answers 503. Once HAProxy marks it down, a load through the
# balancer (boto3, no client retries) all succeeds and the balancer sends that node nothing. With
# the relay back, the node finds the new leader, is ready again and gets requests again.
#
# Usage: tests/e2e/balancer_readiness.sh ORDERLY_BINARY PYTHON POSTGRES_URL
#   PYTHON: a venv with boto3; POSTGRES_URL: a cluster scripts/postgres-cluster started.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
binary=$1 python=$2 cluster=$3
work=$(mktemp -d)
pids=()
relay=
cleanup() {
  local master=
  [ -f "$work/haproxy.pid" ] && master=$(cat "$work/haproxy.pid")
  [ -n "$master" ] && kill "$master" 2>/dev/null || true
  [ -n "$relay" ] && kill "$relay" 2>/dev/null || true
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work" || true
}
trap cleanup EXIT
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
fail() { echo "FAIL $*"; for f in "$work"/*.log; do echo "--- $f"; tail -n 30 "$f"; done; exit 1; }

database=$("$root/scripts/postgres-cluster" database "$cluster" balancer_readiness 2>/dev/null)
# The same database through the relay: only the port differs.
db_port=$(printf '%s' "$database" | sed -E 's#^[a-z]+://[^@/]*@?[^:/]*:([0-9]+)/.*#\1#')
relay_port=$(free_port)
relayed=${database/:$db_port\//:$relay_port\/}
start_relay() {
  "$python" "$here/relay.py" "$relay_port" 127.0.0.1 "$db_port" >"$work/relay.out" 2>&1 &
  relay=$!
  for _ in $(seq 1 50); do grep -q relaying "$work/relay.out" && return; sleep 0.1; done
  fail "the relay did not start"
}
start_relay

ports=()
start_node() { # name, storage URL
  ORDERLY_STORAGE="$2" "$binary" --bind 127.0.0.1:0 >"$work/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do grep -q "listening on" "$work/$1.log" && break; sleep 0.1; done
  port=$(grep -o 'listening on http://[0-9.:]*' "$work/$1.log" | head -n 1 | sed 's/.*://')
  [ -n "$port" ] || fail "$1 did not start"
  ports+=("$port")
}
role() { curl -fs "http://127.0.0.1:$1/_orderly/cluster" | "$python" -c 'import json, sys; print(json.load(sys.stdin)["role"])'; }
ready() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health/ready"; }
start_node orderly-node-1 "$relayed"
[ "$(role "${ports[0]}")" = leader ] || fail "the node behind the relay does not lead"
start_node orderly-node-2 "$database"
[ "$(role "${ports[1]}")" = standby ] || fail "the second node is not a standby"

balancer_port=$(free_port)
sed -e "s/bind :4567/bind 127.0.0.1:$balancer_port/" \
  -e "s/server orderly-node-1 orderly-node-1:4566/server orderly-node-1 127.0.0.1:${ports[0]}/" \
  -e "s/server orderly-node-2 orderly-node-2:4566/server orderly-node-2 127.0.0.1:${ports[1]}/" \
  -e "s#^global\$#global\n    stats socket $work/haproxy.sock level admin\n    pidfile $work/haproxy.pid\n    daemon#" \
  "$root/deploy/haproxy.cfg" >"$work/haproxy.cfg"
if grep -q "orderly-node-[12]:4566" "$work/haproxy.cfg"; then fail "deploy/haproxy.cfg names other nodes"; fi
haproxy=$(command -v haproxy || echo /usr/sbin/haproxy)
"$haproxy" -q -c -f "$work/haproxy.cfg" || fail "deploy/haproxy.cfg does not check"
"$haproxy" -f "$work/haproxy.cfg" >"$work/haproxy.log" 2>&1
endpoint="http://127.0.0.1:$balancer_port"

# A server's state and how many requests the balancer has sent it, from HAProxy's own counters.
stat() { # server name, field (status or stot)
  "$python" - "$work/haproxy.sock" "$1" "$2" <<'PY'
import csv, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"show stat\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
rows = csv.DictReader(data.decode().lstrip("# ").splitlines())
for row in rows:
    if row["pxname"] == "orderly" and row["svname"] == sys.argv[2]:
        print(row[sys.argv[3]])
PY
}
until_status() { # server, status, seconds
  for _ in $(seq 1 $(($3 * 10))); do
    [ "$(stat "$1" status)" = "$2" ] && return
    sleep 0.1
  done
  fail "$1 is $(stat "$1" status) in HAProxy after $3 s, not $2"
}
until_status orderly-node-1 UP 10
until_status orderly-node-2 UP 10
echo "ok   deploy/haproxy.cfg balances at $endpoint; both nodes ready and up"

# Send, receive and delete through the balancer with no client retries: every call must succeed.
load() { # queue name, messages
  "$python" - "$endpoint" "$1" "$2" <<'PY'
import sys
import boto3
from botocore.config import Config

endpoint, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
sqs = boto3.client(
    "sqs", endpoint_url=endpoint, region_name="us-east-1",
    aws_access_key_id="x", aws_secret_access_key="x",
    config=Config(retries={"total_max_attempts": 1}),
)
url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})["QueueUrl"]
for i in range(count):
    sqs.send_message(QueueUrl=url, MessageBody=f"m{i}", MessageGroupId="g", MessageDeduplicationId=f"{name}-{i}")
received = []
while len(received) < count:
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
    for message in messages:
        received.append(message["Body"])
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
assert received == [f"m{i}" for i in range(count)], received
print(f"{count} sent, received in order and deleted")
PY
}
load before.fifo 20 >"$work/load.out" || { cat "$work/load.out"; fail "the load before the cut"; }
for server in orderly-node-1 orderly-node-2; do
  [ "$(stat "$server" stot)" -gt 0 ] || fail "$server got no request while ready"
done
echo "ok   both nodes served: $(cat "$work/load.out")"

# The leader's database is cut off: it steps down once its lease can have lapsed.
kill -9 "$relay"
wait "$relay" 2>/dev/null || true
relay=
for _ in $(seq 1 300); do [ "$(ready "${ports[0]}")" = 503 ] && break; sleep 0.1; done
[ "$(ready "${ports[0]}")" = 503 ] || fail "the node cut off from its database still says it is ready"
echo "ok   the node cut off from its database answers /health/ready with 503"
for _ in $(seq 1 300); do [ "$(role "${ports[1]}")" = leader ] && break; sleep 0.1; done
[ "$(role "${ports[1]}")" = leader ] || fail "the standby did not take over"
until_status orderly-node-1 DOWN 5
sent_before=$(stat orderly-node-1 stot)
load during.fifo 30 >"$work/load.out" || { cat "$work/load.out"; fail "a call failed while a node was not ready"; }
sent_after=$(stat orderly-node-1 stot)
[ "$(ready "${ports[0]}")" = 503 ] || fail "the cut-off node became ready during the load"
[ "$sent_after" = "$sent_before" ] ||
  fail "HAProxy sent $((sent_after - sent_before)) requests to the node that was not ready"
echo "ok   while it is not ready the balancer sends it nothing ($sent_before before and after); $(cat "$work/load.out")"

# The database is back: the node learns who leads, is ready again and serves again.
start_relay
for _ in $(seq 1 300); do [ "$(ready "${ports[0]}")" = 200 ] && break; sleep 0.1; done
[ "$(ready "${ports[0]}")" = 200 ] || fail "the node did not become ready again"
until_status orderly-node-1 UP 5
load after.fifo 20 >"$work/load.out" || { cat "$work/load.out"; fail "the load after the node came back"; }
[ "$(stat orderly-node-1 stot)" -gt "$sent_after" ] || fail "the node back as a standby got no request"
echo "ok   back as a standby it is ready and served again: $(cat "$work/load.out")"
