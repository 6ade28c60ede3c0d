#!/usr/bin/env bash
# NODES Orderly nodes on one fresh PostgreSQL database, behind orderly-bench's round-robin
# balancer on {port}, as a peer of the benchmark:
#   --peer "orderly-pg-2=bench/orderly-nodes-on-postgres.sh {port} 2"
# (with 1, the same single node through the same balancer hop, for comparison). The database
# server is ORDERLY_BENCH_POSTGRES's (postgres://USER@HOST:PORT/DB, a user that may create
# databases). The nodes die with the balancer (the benchmark kills it when a scenario ends).
set -euo pipefail
port="$1"
nodes="${2:-2}"
base="${ORDERLY_BENCH_POSTGRES:?set ORDERLY_BENCH_POSTGRES to a PostgreSQL URL}"
bin="${ORDERLY_BIN:-target/release/orderly}"
bench="${ORDERLY_BENCH_BIN:-$(dirname "$bin")/orderly-bench}"
name="bench_$(date +%s%N)"
psql "$base" -qc "CREATE DATABASE $name" >/dev/null
upstreams=()
for i in $(seq 1 "$nodes"); do
    node_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    # Killed with this process's successor (the balancer, exec'd below).
    setpriv --pdeathsig KILL "$bin" --storage "${base%/*}/$name" \
        --bind "127.0.0.1:$node_port" ${ORDERLY_BENCH_ARGS:-} &
    upstreams+=("127.0.0.1:$node_port")
done
exec "$bench" --balance "127.0.0.1:$port=$(IFS=,; echo "${upstreams[*]}")"
