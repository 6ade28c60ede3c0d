#!/usr/bin/env bash
# Orderly on PostgreSQL as a peer of the benchmark (`--peer "orderly-pg=bench/orderly-on-postgres.sh {port}"`):
# each start gets a fresh database on the server ORDERLY_BENCH_POSTGRES names
# (postgres://USER@HOST:PORT/DB, a user that may create databases).
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
exec "${ORDERLY_BIN:-target/release/orderly}" --storage "${base%/*}/$name" \
    --bind "127.0.0.1:$port" ${ORDERLY_BENCH_ARGS:-}
