"""Webhooks with boto3 and a plain Python HTTP receiver that checks every signature with the
`cryptography` package against the certificate downloaded from SigningCertURL.

Usage: python webhook_scenario.py ENDPOINT
The server must run with --fifo-http-subscriptions (the ordered FIFO part).
Prints one line per check and a closing 'N passed, N failed' line; exits non-zero on failure.
"""

import base64
import json
import queue
import sys
import threading
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

endpoint = sys.argv[1]
session = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="AKIDE2E", aws_secret_access_key="secret")
sns = boto3.client("sns", **session)
results = {"passed": 0, "failed": 0}
received = queue.Queue()


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(("ok   " if condition else "FAIL ") + name + ("" if condition else f"  ({detail})"))


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        received.put((self.path, dict(self.headers), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
threading.Thread(target=server.serve_forever, daemon=True).start()
hook = f"http://127.0.0.1:{server.server_port}"


def next_request():
    try:
        return received.get(timeout=10)
    except queue.Empty:
        check("a webhook request arrived within 10 s", False)
        raise SystemExit(1)


def verify(message):
    """What SNS message validators do: the fixed key set, each key present as Key\\nValue\\n."""
    pem = urllib.request.urlopen(message["SigningCertURL"]).read()
    key = x509.load_pem_x509_certificate(pem).public_key()
    keys = ["Message", "MessageId", "Subject", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"]
    text = "".join(f"{k}\n{message[k]}\n" for k in keys if k in message).encode()
    digest = hashes.SHA256() if message["SignatureVersion"] == "2" else hashes.SHA1()
    try:
        key.verify(base64.b64decode(message["Signature"]), text, padding.PKCS1v15(), digest)
        return True
    except Exception:
        return False


suffix = uuid.uuid4().hex[:8]
for version in ("1", "2"):
    topic = sns.create_topic(Name=f"hooks-{version}-{suffix}", Attributes={"SignatureVersion": version})["TopicArn"]
    answer = sns.subscribe(TopicArn=topic, Protocol="http", Endpoint=f"{hook}/v{version}")
    check(f"v{version}: subscribe answers 'pending confirmation'", answer["SubscriptionArn"] == "pending confirmation", answer)
    path, headers, body = next_request()
    confirmation = json.loads(body)
    check(f"v{version}: SubscriptionConfirmation POSTed", headers.get("x-amz-sns-message-type") == "SubscriptionConfirmation", headers)
    check(f"v{version}: confirmation signature verifies", verify(confirmation), confirmation)
    with urllib.request.urlopen(confirmation["SubscribeURL"]) as response:
        xml = response.read().decode()
    check(f"v{version}: GET SubscribeURL confirms", "<SubscriptionArn>arn:aws:sns:" in xml, xml)
    sns.publish(TopicArn=topic, Message="price ✓ 42", Subject="AAPL")
    path, headers, body = next_request()
    notification = json.loads(body)
    check(f"v{version}: notification body", notification["Message"] == "price ✓ 42" and notification["Subject"] == "AAPL", notification)
    check(f"v{version}: notification signature verifies", verify(notification), notification)
    check(f"v{version}: tampered notification fails", not verify(dict(notification, Message="price 43")))
    subscription = headers.get("x-amz-sns-subscription-arn")
    sns.unsubscribe(SubscriptionArn=subscription)
    path, headers, body = next_request()
    goodbye = json.loads(body)
    check(f"v{version}: UnsubscribeConfirmation verifies", goodbye["Type"] == "UnsubscribeConfirmation" and verify(goodbye), goodbye)
    sns.delete_topic(TopicArn=topic)

# Orderly's extension: ordered webhooks on a FIFO topic (one request in flight per group).
topic = sns.create_topic(
    Name=f"ordered-{suffix}.fifo", Attributes={"FifoTopic": "true", "ContentBasedDeduplication": "true"}
)["TopicArn"]
sns.subscribe(TopicArn=topic, Protocol="http", Endpoint=f"{hook}/fifo")
confirmation = json.loads(next_request()[2])
sns.confirm_subscription(TopicArn=topic, Token=confirmation["Token"])
sent = [f"{symbol} {tick}" for tick in range(5) for symbol in ("AAPL", "MSFT")]
for body in sent:
    sns.publish(TopicArn=topic, Message=body, MessageGroupId=body.split(" ")[0])
got = [json.loads(next_request()[2]) for _ in sent]
per_group = {}
for message in got:
    per_group.setdefault(message["Message"].split(" ")[0], []).append(message["Message"])
check("FIFO webhooks: every message once", sorted(m["Message"] for m in got) == sorted(sent), got)
check("FIFO webhooks: per-group order", all(v == [s for s in sent if s.startswith(k)] for k, v in per_group.items()), per_group)
check("FIFO webhooks: signed and carry SequenceNumber", all(verify(m) and "SequenceNumber" in m for m in got))
sns.delete_topic(TopicArn=topic)
server.shutdown()

print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
