#!/bin/bash
# Flame graph of the orderly server under one benchmark scenario: the benchmark runs the
# scenario against a release build while `perf` samples the server for five seconds of its
# load, and `inferno` draws the stacks.
#
#   bench/flamegraph.sh SCENARIO [OUT.svg]     (send, pipeline, fanout, ...)
#
# Needs perf (Debian: linux-perf) and inferno (cargo install inferno), and a release build of
# both binaries: cargo build --release -p orderly -p orderly-bench.
set -euo pipefail
scenario=${1:?usage: bench/flamegraph.sh SCENARIO [OUT.svg]}
out=${2:-doc/flamegraphs/$scenario.svg}
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
./target/release/orderly-bench --orderly target/release/orderly --scenarios "$scenario" \
    --duration 8 > "$work/bench.txt" 2>&1 &
bench=$!
pid=""
for _ in $(seq 1 200); do
    pid=$(pgrep -x orderly | head -1 || true)
    [ -n "$pid" ] && break
    sleep 0.05
done
[ -n "$pid" ] || { echo "the benchmark started no orderly server" >&2; exit 1; }
# Past the start and the set-up, into the measured phase.
sleep 2
perf record -F 499 --call-graph dwarf,16384 -p "$pid" -o "$work/perf.data" -- sleep 5 \
    > "$work/perf.log" 2>&1
wait "$bench"
tail -n 3 "$work/bench.txt"
perf script -i "$work/perf.data" 2>/dev/null | inferno-collapse-perf > "$work/folded.txt"
commit=$(git rev-parse --short HEAD)
inferno-flamegraph --minwidth 0.3 \
    --title "orderly --ephemeral, $scenario scenario (orderly-bench, commit $commit)" \
    "$work/folded.txt" > "$out"
echo "wrote $out"
