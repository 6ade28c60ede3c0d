#!/usr/bin/env bash
# The database's own ceiling for what a batched send stores (doc/scale-out.md): pgbench with
# CLIENTS clients (8, the benchmark's producers) running transactions that insert 10 rows into
# Orderly's own messages table (its migrations: the same columns, indexes and foreign key;
# 256-byte contents), as one INSERT … SELECT and as ten prepared INSERTs, DURATION seconds each,
# on a fresh database of the server ORDERLY_BENCH_POSTGRES names (postgres://USER@HOST:PORT/DB).
#
# Then the rate of a write-through store, the pattern fauxqs's PostgreSQL store follows (read in
# its source; no release with that store installs here): an in-memory store that mirrors each
# change as its own autocommitted statement through a pool of POOL (10, node-postgres's default)
# connections, into a table with only a primary key. "write-through send" is one INSERT per
# message; "write-through cycle" is a message's INSERT, the UPDATE that marks it received and
# its DELETE. They bound such a store's durable rate: it cannot acknowledge more messages a
# second than its database commits, whatever its in-memory side does.
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
psql "$url" -q -v ON_ERROR_STOP=1 <<'SQL'
CREATE TABLE mirrored_queues (name text PRIMARY KEY);
CREATE TABLE mirrored_messages (
    id text PRIMARY KEY,
    queue text NOT NULL REFERENCES mirrored_queues (name) ON DELETE CASCADE,
    body text NOT NULL,
    body_md5 text NOT NULL,
    attributes text NOT NULL,
    attributes_md5 text NOT NULL,
    sent bigint NOT NULL,
    receives bigint NOT NULL DEFAULT 0,
    first_received bigint,
    delayed_until bigint,
    group_id text,
    dedup_id text,
    sequence text,
    handle text,
    hidden_until bigint
);
INSERT INTO mirrored_queues VALUES ('ceiling.fifo');
SQL
insert="INSERT INTO mirrored_messages (id, queue, body, body_md5, attributes, attributes_md5, sent, group_id, dedup_id, sequence) VALUES (md5(random()::text) || :client_id, 'ceiling.fifo', repeat('x', 256), md5('x'), '{}', '', 0, 'g' || :g, md5(random()::text), '1')"
{
    echo '\set g random(1, 64)'
    echo "$insert;"
} >"$scripts/write-through-send.sql"
{
    echo '\set g random(1, 64)'
    echo "$insert RETURNING id \gset"
    echo "UPDATE mirrored_messages SET handle = md5(random()::text), hidden_until = 30, receives = 1, first_received = 0 WHERE id = :id;"
    echo "DELETE FROM mirrored_messages WHERE id = :id;"
} >"$scripts/write-through-cycle.sql"
pool="${POOL:-10}"
for form in write-through-send write-through-cycle; do
    tps=$("$pgbench" -n -M prepared -c "$pool" -j 2 -T "$duration" -f "$scripts/$form.sql" "$url" \
        | awk '/^tps/ {print int($3)}')
    echo "$form: $tps messages/s ($pool connections, each statement its own transaction)"
done
rm -r "$scripts"
