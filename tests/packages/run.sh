#!/usr/bin/env bash
# The packages as their users get them: the orderly-server wheel built by maturin and installed
# into a fresh virtual environment (`orderly` on its PATH, the pytest fixtures run by
# tests/packages/python), and the orderly-server npm tarball from `npm pack` installed into a
# fresh directory (`npx orderly`, startOrderly() run by node:test in tests/packages/js).
# Needs network access to PyPI (maturin, pytest, boto3) and the npm registry
# (@aws-sdk/client-sqs). The release binary is built once, by maturin's cargo run; the npm
# package's prepack copies that same binary.
# Usage: tests/packages/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
# maturin only builds the wheel: it lives in a venv of its own under target/, kept between runs.
maturin_version=1.16.0
tools=${ORDERLY_PACKAGE_TOOLS:-$root/target/package-tools}/maturin-$maturin_version
release_binary=${CARGO_TARGET_DIR:-$root/target}/release/orderly
# The tests find the packaged binaries, not one named in the environment.
unset ORDERLY_BINARY

work=$(mktemp -d)
# Every server the suites start is stopped and waited for by the suite itself (the fixtures'
# teardown, the node:test `after`) before its runner exits, so nothing writes here any more.
trap 'rm -rf "$work"' EXIT

echo "== The Python wheel, built by maturin"
if [ ! -x "$tools/bin/maturin" ]; then
  "$python" -m venv "$tools"
  "$tools/bin/pip" install --quiet --disable-pip-version-check "maturin==$maturin_version"
fi
started=$SECONDS
(cd "$root/packaging/python" && "$tools/bin/maturin" build --release --out "$work/wheels")
echo "wheel built in $((SECONDS - started)) s"
wheel=$(ls "$work"/wheels/orderly_server-*.whl)

echo "== The wheel installed into a fresh virtual environment"
started=$SECONDS
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "$wheel" pytest boto3
found=$(PATH="$work/venv/bin:$PATH" command -v orderly)
[ "$found" = "$work/venv/bin/orderly" ] || { echo "FAIL orderly on PATH is $found, not the venv's"; exit 1; }
help=$(PATH="$work/venv/bin:$PATH" orderly --help)
[[ $help == *--clock* ]] || { echo "FAIL orderly --help: $help"; exit 1; }
help=$("$work/venv/bin/python" -m orderly_server --help)
[[ $help == *--ephemeral* ]] || { echo "FAIL python -m orderly_server --help: $help"; exit 1; }
echo "ok   orderly --help from the venv's PATH, and python -m orderly_server"
(cd "$here/python" && PYTHONDONTWRITEBYTECODE=1 TMPDIR="$work" \
  "$work/venv/bin/python" -m pytest -p no:cacheprovider --durations=3 -q)
echo "Python package checked in $((SECONDS - started)) s"

echo "== The npm package, packed and installed into a fresh directory"
started=$SECONDS
mkdir -p "$work/npm" "$work/js"
(cd "$root/packaging/npm" && ORDERLY_BINARY="$release_binary" npm pack --silent --pack-destination "$work/npm" >/dev/null)
tarball=$(ls "$work"/npm/orderly-server-*.tgz)
cp "$here/js/package.json" "$here/js/orderly.test.mjs" "$work/js/"
(cd "$work/js" && npm install --silent --no-audit --no-fund --no-package-lock "$tarball")
help=$(cd "$work/js" && npx --no-install orderly --help)
[[ $help == *--clock* ]] || { echo "FAIL npx orderly --help: $help"; exit 1; }
echo "ok   npx orderly --help"
(cd "$work/js" && TMPDIR="$work" NODE_NO_WARNINGS=1 node --test orderly.test.mjs)
echo "npm package checked in $((SECONDS - started)) s"

echo "== cargo install --path . (into a fresh root, reusing the release build)"
started=$SECONDS
cargo install --quiet --locked --path "$root" --bin orderly --root "$work/cargo" \
  --target-dir "${CARGO_TARGET_DIR:-$root/target}"
help=$("$work/cargo/bin/orderly" --help)
[[ $help == *--clock* ]] || { echo "FAIL the installed orderly --help: $help"; exit 1; }
echo "ok   cargo install puts a working orderly in its root's bin ($((SECONDS - started)) s)"
# The Dockerfile and `docker compose up` need a Docker daemon, which CI machines lack: the
# compose file's PostgreSQL profile is run without Docker by tests/e2e/compose_profile.sh.
echo "skipped: docker build and docker compose up (no Docker daemon here)"
