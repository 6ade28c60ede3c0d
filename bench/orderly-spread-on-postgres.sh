#!/usr/bin/env bash
# Two Orderly nodes leading their shares of one PostgreSQL database behind the benchmark's
# round-robin balancer, as one peer of the benchmark
# (`--peer "orderly-spread=bench/orderly-spread-on-postgres.sh {port}"`): each start gets a fresh
# database on the server ORDERLY_BENCH_POSTGRES names, cut into ORDERLY_BENCH_SHARDS shards (32).
# The nodes end with the balancer this script becomes (the benchmark kills its peers).
set -euo pipefail
port="$1"
base="${ORDERLY_BENCH_POSTGRES:?set ORDERLY_BENCH_POSTGRES to a PostgreSQL URL}"
shards="${ORDERLY_BENCH_SHARDS:-32}"
bin="${ORDERLY_BIN:-target/release/orderly}"
name="bench_$(date +%s%N)"
for old in $(psql "$base" -Atc "SELECT datname FROM pg_database WHERE datname ~ '^bench_[0-9]{19}$'"); do
    psql "$base" -qc "DROP DATABASE IF EXISTS \"$old\"" >/dev/null 2>&1 || true
done
psql "$base" -qc "CREATE DATABASE $name" >/dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
upstreams=""
for _ in 1 2; do
    node_port="$(free_port)"
    # Each node dies with its parent, the balancer this script becomes (setpriv, util-linux).
    setpriv --pdeathsig KILL -- "$bin" --storage "${base%/*}/$name" \
        --bind "127.0.0.1:$node_port" --shards "$shards" --spread-shards >/dev/null 2>&1 &
    upstreams="${upstreams:+$upstreams,}127.0.0.1:$node_port"
done
# Started together, the nodes agree on their shares once two readings of the live nodes agree
# (a second or two); the balancer listens once they lead them.
sleep "${ORDERLY_BENCH_SETTLE:-8}"
exec "${ORDERLY_BENCH:-target/release/orderly-bench}" --balance "127.0.0.1:$port=$upstreams"
