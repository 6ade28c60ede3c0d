#!/usr/bin/env bash
# The database's own ceiling for what a batched send stores (doc/scale-out.md): pgbench with
# CLIENTS clients (8, the benchmark's producers) running transactions that insert 10 rows into
# Orderly's own messages table (its migrations: the same columns, indexes and foreign key;
# 256-byte contents), as one INSERT … SELECT and as ten prepared INSERTs, DURATION seconds each, on a fresh database of
# the server ORDERLY_BENCH_POSTGRES names (postgres://USER@HOST:PORT/DB).
set -euo pipefail
base="${ORDERLY_BENCH_POSTGRES:?set ORDERLY_BENCH_POSTGRES to a PostgreSQL URL}"
clients="${CLIENTS:-8}"
duration="${DURATION:-10}"
pgbench="${PGBENCH:-$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | tail -n 1)}"
name="ceiling_$(date +%s%N)"
psql "$base" -qc "CREATE DATABASE $name" >/dev/null
url="${base%/*}/$name"
trap 'psql "$base" -qc "DROP DATABASE IF EXISTS $name" >/dev/null' EXIT
# Orderly's own queues and messages tables (its first two migrations), one queue.
migrations="$(dirname "$0")/../src/backend/postgres/migrations"
psql "$url" -q -v ON_ERROR_STOP=1 -f "$migrations/001_queues.sql" -f "$migrations/002_messages.sql"
queue=$(psql "$url" -qAtc "INSERT INTO queues (name, fifo, attributes, created_at, last_modified_at) VALUES ('ceiling.fifo', true, '{}', 0, 0) RETURNING uid")
scripts=$(mktemp -d)
cat >"$scripts/select.sql" <<'SQL'
\set g random(1, 64)
INSERT INTO messages (queue_uid, seq, group_id, visible_at, enqueued_at, content)
SELECT :queue, nextval('message_seq'), 'g' || :g, 0, 0, convert_to(repeat('x', 256), 'UTF8')
FROM generate_series(1, 10);
SQL
{
    echo '\set g random(1, 64)'
    echo 'BEGIN;'
    for _ in $(seq 1 10); do
        echo "INSERT INTO messages (queue_uid, seq, group_id, visible_at, enqueued_at, content) VALUES (:queue, nextval('message_seq'), 'g' || :g, 0, 0, convert_to(repeat('x', 256), 'UTF8'));"
    done
    echo 'END;'
} >"$scripts/prepared.sql"
for form in select prepared; do
    tps=$("$pgbench" -n -M prepared -c "$clients" -j 2 -T "$duration" -D queue="$queue" -f "$scripts/$form.sql" "$url" \
        | awk '/^tps/ {print int($3)}')
    echo "$form: $tps transactions/s of 10 rows ($((tps * 10)) rows/s)"
done
rm -r "$scripts"
