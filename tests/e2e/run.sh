#!/usr/bin/env bash
# End-to-end: the real orderly binary, driven by current boto3 (JSON protocol), by
# boto3 1.34.89 (the last Query-protocol release), by the AWS SDK for JavaScript v3, by the
# AWS CLI, by a Python webhook receiver and by the examples; then boto3 against --auth, and
# the developer endpoints (peek helper, reset between cases) on a server of their own,
# docker-compose's PostgreSQL profile run without Docker (compose_profile.sh), deploy/haproxy.cfg
# keeping requests off a node that is not ready (balancer_readiness.sh), the console of one of two
# nodes sharing shards naming each queue's leader and database (console_shards.sh), and default SDK clients
# riding through a leader's SIGKILL (ride_through.sh).
# Usage: tests/e2e/run.sh [path/to/orderly]   (default: target/debug/orderly)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
binary=${1:-$root/target/debug/orderly}
venvs=${ORDERLY_E2E_VENVS:-$root/target/e2e-venvs}
python=${PYTHON:-python3}

make_venv() { # name, pip requirements...
  local dir=$venvs/$1; shift
  if [ ! -x "$dir/bin/python" ]; then
    "$python" -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
  fi
}
make_venv current boto3 awscli cryptography pyyaml
make_venv legacy boto3==1.34.89 botocore==1.34.89
node_dir=$venvs/js
if [ ! -d "$node_dir/node_modules/@aws-sdk/client-sqs" ] || [ ! -d "$node_dir/node_modules/playwright-core" ]; then
  mkdir -p "$node_dir"
  cp "$here/js/package.json" "$node_dir/"
  (cd "$node_dir" && npm install --silent --no-audit --no-fund --no-package-lock)
fi
cp "$here/js/scenario.mjs" "$here/js/console.mjs" "$here/js/console_shards.mjs" "$here/js/ride_through.mjs" "$node_dir/"

# Durable, as by default, in a fresh data directory.
log=$(mktemp)
data=$(mktemp -d)
server=
# The server is waited for before its directory goes: a stopping server writes there (its
# clean-stop marker).
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$log" "$data" || true' EXIT
start_server() { # extra flags...
  : >"$log"
  "$binary" --fifo-http-subscriptions --data-dir "$data" "$@" >"$log" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    grep -q "listening on" "$log" && break
    sleep 0.1
  done
  endpoint=$(grep -o 'http://[0-9.:]*' "$log" | head -n 1)
  [ -n "$endpoint" ] || { echo "server did not start"; cat "$log"; exit 1; }
}
start_server --bind 127.0.0.1:0
echo "orderly at $endpoint"

echo "== boto3 (current, JSON protocol)"
"$venvs/current/bin/python" "$here/fifo_scenario.py" "$endpoint" json
echo "== boto3 1.34.89 (Query protocol)"
"$venvs/legacy/bin/python" "$here/fifo_scenario.py" "$endpoint" query
echo "== SNS FIFO fan-out, boto3 (current and 1.34.89)"
"$venvs/current/bin/python" "$here/sns_scenario.py" "$endpoint" verify
"$venvs/legacy/bin/python" "$here/sns_scenario.py" "$endpoint"

echo "== Regions and accounts, boto3 (current and 1.34.89)"
"$venvs/current/bin/python" "$here/regions_scenario.py" "$endpoint"
"$venvs/legacy/bin/python" "$here/regions_scenario.py" "$endpoint"

echo "== Webhooks: boto3 and a Python receiver verifying signatures with cryptography"
"$venvs/current/bin/python" "$here/webhook_scenario.py" "$endpoint"

echo "== AWS SDK for JavaScript v3 (JSON protocol)"
NODE_NO_WARNINGS=1 node "$node_dir/scenario.mjs" "$endpoint"

echo "== AWS CLI"
export AWS_ACCESS_KEY_ID=cli AWS_SECRET_ACCESS_KEY=cli AWS_DEFAULT_REGION=us-east-1
aws() { "$venvs/current/bin/aws" --endpoint-url "$endpoint" --output text "$@"; }
url=$(aws sqs create-queue --queue-name cli.fifo --attributes FifoQueue=true,ContentBasedDeduplication=true --query QueueUrl)
aws sqs send-message --queue-url "$url" --message-body "from-cli" --message-group-id g >/dev/null
body=$(aws sqs receive-message --queue-url "$url" --query 'Messages[0].Body')
[ "$body" = "from-cli" ] || { echo "FAIL cli receive: $body"; exit 1; }
aws sqs list-queues --query 'QueueUrls' | grep -q cli.fifo || { echo "FAIL cli list-queues"; exit 1; }
aws sqs delete-queue --queue-url "$url"
echo "ok   AWS CLI sqs create/send/receive/list/delete"
topic=$(aws sns create-topic --name cli-topic.fifo --attributes FifoTopic=true,ContentBasedDeduplication=true --query TopicArn)
url=$(aws sqs create-queue --queue-name cli-sub.fifo --attributes FifoQueue=true --query QueueUrl)
aws sns subscribe --topic-arn "$topic" --protocol sqs --notification-endpoint arn:aws:sqs:us-east-1:000000000000:cli-sub.fifo \
  --attributes RawMessageDelivery=true >/dev/null
aws sns publish --topic-arn "$topic" --message "via-sns" --message-group-id g >/dev/null
body=$(aws sqs receive-message --queue-url "$url" --query 'Messages[0].Body')
[ "$body" = "via-sns" ] || { echo "FAIL cli sns fan-out: $body"; exit 1; }
aws sns delete-topic --topic-arn "$topic"
echo "ok   AWS CLI sns create-topic/subscribe/publish/delete-topic"
url=$(aws --region eu-west-1 sqs create-queue --queue-name cli-west --query QueueUrl)
case "$url" in */queue/eu-west-1/000000000000/cli-west) ;; *) echo "FAIL cli region URL: $url"; exit 1 ;; esac
if aws sqs list-queues --query 'QueueUrls' | grep -q cli-west; then echo "FAIL cli region listed in us-east-1"; exit 1; fi
aws --region eu-west-1 sqs delete-queue --queue-url "$url"
echo "ok   AWS CLI --region eu-west-1 acts in its own region"
who=$(aws sts get-caller-identity --query '[Account,Arn]')
[ "$who" = "$(printf '000000000000\tarn:aws:iam::000000000000:user/cli')" ] || { echo "FAIL cli sts get-caller-identity: $who"; exit 1; }
echo "ok   AWS CLI sts get-caller-identity"
if said=$(aws dynamodb list-tables 2>&1); then echo "FAIL cli dynamodb answered: $said"; exit 1; fi
case "$said" in *"this request is for DynamoDB"*) ;; *) echo "FAIL cli dynamodb: $said"; exit 1 ;; esac
echo "ok   AWS CLI: a service not served is named"
for name in price_updates topic_fanout webhook_consumer; do
  example=$(dirname "$binary")/examples/$name
  [ -x "$example" ] || { echo "FAIL $example is missing (cargo build --examples)"; exit 1; }
  echo "== examples/$name"
  "$example" "$endpoint" | tail -n 1
done
echo "== Restart: SIGTERM exits 0, the same data directory brings queue and message back"
url=$(aws sqs create-queue --queue-name restart.fifo --attributes FifoQueue=true --query QueueUrl)
aws sqs send-message --queue-url "$url" --message-body "survives" --message-group-id g \
  --message-deduplication-id d1 >/dev/null
port=${endpoint##*:}
kill -TERM "$server"
status=0; wait "$server" || status=$?
[ "$status" = 0 ] || { echo "FAIL SIGTERM exit status $status"; cat "$log"; exit 1; }
start_server --bind "127.0.0.1:$port"
grep -q "recovered" "$log" || { echo "FAIL no recovery line"; cat "$log"; exit 1; }
seq_again=$(aws sqs send-message --queue-url "$url" --message-body "survives" --message-group-id g \
  --message-deduplication-id d1 --query SequenceNumber)
body=$(aws sqs receive-message --queue-url "$url" --query 'Messages[0].Body')
[ "$body" = "survives" ] || { echo "FAIL after restart: $body"; exit 1; }
[ "$seq_again" = "18000000000000000001" ] || { echo "FAIL dedup forgot: $seq_again"; exit 1; }
echo "ok   restart keeps the queue, the message and its deduplication id"

echo "== --auth: boto3 (current and 1.34.89) with right, wrong, unknown and other-account keys"
keys=$(mktemp)
auth_log=$(mktemp)
printf '%s' '{"Keys":[{"AccessKeyId":"AKIDE2E","SecretAccessKey":"secret","UserName":"e2e","UserId":"AIDAE2EUSER0000000001"},{"AccessKeyId":"AKIDOTHER","SecretAccessKey":"other","Account":"111111111111"}]}' >"$keys"
"$binary" --ephemeral --bind 127.0.0.1:0 --auth "$keys" >"$auth_log" 2>&1 &
auth_server=$!
for _ in $(seq 1 100); do grep -q "listening on" "$auth_log" && break; sleep 0.1; done
auth_endpoint=$(grep -o 'http://[0-9.:]*' "$auth_log" | head -n 1)
[ -n "$auth_endpoint" ] || { echo "auth server did not start"; cat "$auth_log"; exit 1; }
"$venvs/current/bin/python" "$here/auth_scenario.py" "$auth_endpoint"
"$venvs/legacy/bin/python" "$here/auth_scenario.py" "$auth_endpoint"
kill "$auth_server"
rm -f "$keys" "$auth_log"
echo "== Developer endpoints: a LocalStack-style peek helper and a suite resetting between cases (boto3)"
dev_log=$(mktemp)
"$binary" --ephemeral --bind 127.0.0.1:0 >"$dev_log" 2>&1 &
dev_server=$!
for _ in $(seq 1 100); do grep -q "listening on" "$dev_log" && break; sleep 0.1; done
dev_endpoint=$(grep -o 'http://[0-9.:]*' "$dev_log" | head -n 1)
[ -n "$dev_endpoint" ] || { echo "developer server did not start"; cat "$dev_log"; exit 1; }
"$venvs/current/bin/python" "$here/developer_scenario.py" "$dev_endpoint"
kill "$dev_server"
rm -f "$dev_log"
echo "== Web console in headless Chromium (playwright-core), seeded by --init examples/price-updates.toml, with --auth, over four shards"
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ -x "$chromium" ]; then
  console_log=$(mktemp)
  console_keys=$(mktemp)
  printf '%s' '{"Keys":[{"AccessKeyId":"AKIDCONSOLE","SecretAccessKey":"console-secret","UserName":"console","UserId":"AIDACONSOLEUSER000001"}]}' >"$console_keys"
  "$binary" --ephemeral --shards 4 --bind 127.0.0.1:0 --init "$root/examples/price-updates.toml" --auth "$console_keys" >"$console_log" 2>&1 &
  console_server=$!
  for _ in $(seq 1 100); do grep -q "listening on" "$console_log" && break; sleep 0.1; done
  console_endpoint=$(grep -o 'http://[0-9.:]*' "$console_log" | head -n 1)
  [ -n "$console_endpoint" ] || { echo "console server did not start"; cat "$console_log"; exit 1; }
  CHROMIUM="$chromium" NODE_NO_WARNINGS=1 node "$node_dir/console.mjs" "$console_endpoint" "$root/target/console.png" AKIDCONSOLE:console-secret AIDACONSOLEUSER000001
  kill "$console_server"
  rm -f "$console_log" "$console_keys"
  echo "screenshot: target/console.png"
elif [ -n "${CI:-}" ]; then
  echo "FAIL no Chromium at $chromium (.ci/run installs Debian's chromium)"; exit 1
else
  echo "skipped: no Chromium at $chromium (apt-get install chromium, or set CHROMIUM)"
fi
echo "== The console of one of two nodes sharing four shards on PostgreSQL: each queue's leader and database"
if [ -x "$chromium" ] && [ -n "${ORDERLY_TEST_POSTGRES:-}" ]; then
  "$here/console_shards.sh" "$binary" "$node_dir" "$chromium" "$ORDERLY_TEST_POSTGRES" ${ORDERLY_TEST_POSTGRES_SECOND:+"$ORDERLY_TEST_POSTGRES_SECOND"}
elif [ -n "${CI:-}" ]; then
  echo "FAIL no Chromium or no PostgreSQL (.ci/run installs both; scripts/test starts the cluster)"; exit 1
else
  echo "skipped: needs Chromium and ORDERLY_TEST_POSTGRES (scripts/test sets it)"
fi
echo "== docker compose --profile postgres, without Docker: its two nodes on PostgreSQL behind deploy/nginx.conf in nginx"
nginx=$(command -v nginx || echo /usr/sbin/nginx)
if [ -x "$nginx" ] && [ -n "${ORDERLY_TEST_POSTGRES:-}" ]; then
  "$here/compose_profile.sh" "$binary" "$venvs/current/bin/python" "$ORDERLY_TEST_POSTGRES"
elif [ -n "${CI:-}" ]; then
  echo "FAIL no nginx or no PostgreSQL (.ci/run installs both; scripts/test starts the cluster)"; exit 1
else
  echo "skipped: needs nginx (apt-get install nginx) and ORDERLY_TEST_POSTGRES (scripts/test sets it)"
fi
echo "== deploy/haproxy.cfg in HAProxy: a node that is not ready (cut off from its database) gets no request"
haproxy=$(command -v haproxy || echo /usr/sbin/haproxy)
if [ -x "$haproxy" ] && [ -n "${ORDERLY_TEST_POSTGRES:-}" ]; then
  "$here/balancer_readiness.sh" "$binary" "$venvs/current/bin/python" "$ORDERLY_TEST_POSTGRES"
elif [ -n "${CI:-}" ]; then
  echo "FAIL no HAProxy or no PostgreSQL (.ci/run installs both; scripts/test starts the cluster)"; exit 1
else
  echo "skipped: needs HAProxy (apt-get install haproxy) and ORDERLY_TEST_POSTGRES (scripts/test sets it)"
fi
echo "== Default SDK clients ride through a leader's SIGKILL: boto3 and the JS SDK v3 through standbys on PostgreSQL"
if [ -n "${ORDERLY_TEST_POSTGRES:-}" ]; then
  "$here/ride_through.sh" "$binary" "$venvs/current/bin/python" "$node_dir" "$ORDERLY_TEST_POSTGRES"
elif [ -n "${CI:-}" ]; then
  echo "FAIL no PostgreSQL (scripts/test starts the cluster)"; exit 1
else
  echo "skipped: needs ORDERLY_TEST_POSTGRES (scripts/test sets it)"
fi
echo "e2e: all scenarios passed"
