#!/usr/bin/env bash
# A standby of Orderly's log in PostgreSQL as a peer of the benchmark
# (`--peer "orderly-standby=bench/orderly-standby-on-postgres.sh {port}"`): a leader starts on a
# fresh database on the server ORDERLY_BENCH_POSTGRES names, then a standby on {port}, which
# passes every request on to the leader; the leader stops with it. Its CPU is counted with the
# standby's (the benchmark counts a peer's descendants).
set -euo pipefail
port="$1"
base="${ORDERLY_BENCH_POSTGRES:?set ORDERLY_BENCH_POSTGRES to a PostgreSQL URL}"
name="bench_$(date +%s%N)"
# Databases of earlier starts are dropped once nothing uses them (the benchmark kills its peers,
# so they cannot drop their own): left, autovacuum's work on them would count as this run's.
for old in $(psql "$base" -Atc "SELECT datname FROM pg_database WHERE datname ~ '^bench_[0-9]{19}$'"); do
    psql "$base" -qc "DROP DATABASE IF EXISTS \"$old\"" >/dev/null 2>&1 || true
done
psql "$base" -qc "CREATE DATABASE $name" >/dev/null
url="${base%/*}/$name"
bin="${ORDERLY_BIN:-target/release/orderly}"
# The leader dies with its parent, the standby this script becomes (setpriv, util-linux).
setpriv --pdeathsig KILL -- "$bin" --storage "$url" --bind 127.0.0.1:0 \
    >/dev/null 2>&1 &
# The standby starts once the leader holds the lease.
for _ in $(seq 100); do
    [ "$(psql "$url" -Atc "SELECT epoch FROM log_shards" 2>/dev/null)" = 1 ] && break
    sleep 0.1
done
exec "$bin" --storage "$url" --bind "127.0.0.1:$port"
