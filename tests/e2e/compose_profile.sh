#!/usr/bin/env bash
# `docker compose --profile postgres up` without Docker (none runs here or in CI): the profile's
# parts, as docker-compose.yml declares them, on this machine. Its Orderly nodes start with the
# environment the file gives them (their database, listening and advertised addresses swapped
# for the test's),
# deploy/nginx.conf runs in a real nginx with the node names pointed at them, and boto3 drives
# the FIFO and SNS scenarios through the balancer. Both nodes must have served requests.
#
# Usage: tests/e2e/compose_profile.sh ORDERLY_BINARY PYTHON POSTGRES_URL
#   PYTHON: a venv with boto3 and PyYAML; POSTGRES_URL: a cluster scripts/postgres-cluster
#   started (a database of its own is made on it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
binary=$1 python=$2 cluster=$3
work=$(mktemp -d)
pids=()
# Everything stopped is waited for before its directory goes: nginx and the nodes still write
# there (logs, the pid file, temporary directories) while they exit.
cleanup() {
  local master=
  [ -f "$work/nginx.pid" ] && master=$(cat "$work/nginx.pid")
  [ -n "$master" ] && kill "$master" 2>/dev/null || true
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  # nginx is not this shell's child (it daemonizes): poll its master, at most 10 s.
  for _ in $(seq 1 100); do
    { [ -z "$master" ] || ! kill -0 "$master" 2>/dev/null; } && break
    sleep 0.1
  done
  rm -rf "$work" || true
}
trap cleanup EXIT
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The profile's nodes (services with ORDERLY_STORAGE) and their settings; the balancer's config.
"$python" - "$root/docker-compose.yml" >"$work/profile" <<'PY'
import sys
import yaml

services = yaml.safe_load(open(sys.argv[1]))["services"]
profile = {name: s for name, s in services.items() if "postgres" in s.get("profiles", [])}
nodes = [name for name, s in profile.items() if "ORDERLY_STORAGE" in s.get("environment", {})]
balancers = [s for s in profile.values() if str(s.get("image", "")).startswith("nginx")]
assert "postgres" in profile, "the profile has no PostgreSQL"
assert len(nodes) == 2, f"the profile should have two Orderly nodes: {nodes}"
assert len(balancers) == 1, "the profile should have one nginx balancer"
mounted = [v.split(":")[0] for v in balancers[0]["volumes"]]
assert "./deploy/nginx.conf" in mounted, mounted
for name in nodes:
    environment = profile[name]["environment"]
    # Each node names its own service to the other (here: its listening address, the default).
    advertised = environment.get("ORDERLY_ADVERTISE_URL")
    assert advertised == f"http://{name}:4566", f"{name} advertises {advertised}"
    swapped = ("ORDERLY_BIND", "ORDERLY_STORAGE", "ORDERLY_ADVERTISE_URL")
    settings = {k: v for k, v in environment.items() if k not in swapped}
    print(name, " ".join(f"{k}={v}" for k, v in settings.items()))
PY

database=$("$root/scripts/postgres-cluster" database "$cluster" compose_profile 2>/dev/null)
cp "$root/deploy/nginx.conf" "$work/default.conf"
ports=()
while read -r name settings; do
  # shellcheck disable=SC2086 # the settings are NAME=value words
  env $settings ORDERLY_STORAGE="$database" ORDERLY_BIND=127.0.0.1:0 "$binary" >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do grep -q "listening on" "$work/$name.log" && break; sleep 0.1; done
  # The listening line's address (a standby's log names the leader's before it).
  port=$(grep -o 'listening on http://[0-9.:]*' "$work/$name.log" | head -n 1 | sed 's/.*://')
  [ -n "$port" ] || { echo "FAIL $name did not start"; cat "$work/$name.log"; exit 1; }
  sed -i "s/server $name:4566\([ ;]\)/server 127.0.0.1:$port\1/" "$work/default.conf"
  ports+=("$port")
  echo "ok   $name on PostgreSQL at 127.0.0.1:$port with the profile's settings ($settings)"
done <"$work/profile"
if grep -q "orderly-node" "$work/default.conf"; then
  echo "FAIL deploy/nginx.conf names a node the profile does not have"; exit 1
fi

balancer_port=$(free_port)
sed -i "s/listen 4567;/listen 127.0.0.1:$balancer_port;/" "$work/default.conf"
mkdir -p "$work/temp"
chmod 777 "$work/temp"
cat >"$work/nginx.conf" <<EOF
daemon on;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $work/temp/body;
    proxy_temp_path $work/temp/proxy;
    fastcgi_temp_path $work/temp/fastcgi;
    uwsgi_temp_path $work/temp/uwsgi;
    scgi_temp_path $work/temp/scgi;
    include $work/default.conf;
}
EOF
nginx=$(command -v nginx || echo /usr/sbin/nginx)
"$nginx" -q -t -p "$work" -c "$work/nginx.conf"
"$nginx" -p "$work" -c "$work/nginx.conf"
endpoint="http://127.0.0.1:$balancer_port"
for _ in $(seq 1 50); do curl -fs "$endpoint/health" >/dev/null && break; sleep 0.1; done
echo "ok   deploy/nginx.conf balances at $endpoint"

"$python" "$here/fifo_scenario.py" "$endpoint" json
# Signed notifications verify whichever node signed them and served the certificate.
"$python" "$here/sns_scenario.py" "$endpoint" verify

# One node leads and answers; the other passes what it gets on to the leader.
[ "${ports[0]}" != "${ports[1]}" ] || { echo "FAIL both nodes found at ${ports[0]}"; exit 1; }
roles=$(for port in "${ports[@]}"; do curl -fs "http://127.0.0.1:$port/_orderly/cluster" | "$python" -c 'import json, sys; print(json.load(sys.stdin)["role"])'; done | sort | tr '\n' ' ')
[ "$roles" = "leader standby " ] || { echo "FAIL the nodes' roles: $roles"; exit 1; }
echo "ok   one node leads, the other is a standby"
for port in "${ports[@]}"; do
  served=$(curl -fs "http://127.0.0.1:$port/metrics" | awk '/^orderly_requests_total\{|^orderly_forwarded_requests_total\{outcome="answered"\}/ { n += $NF } END { print n + 0 }')
  [ "$served" -gt 0 ] || { echo "FAIL the node at $port served no request through the balancer"; exit 1; }
  echo "ok   the node at $port served $served requests"
done
