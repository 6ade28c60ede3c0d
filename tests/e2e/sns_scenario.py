"""SNS FIFO fan-out with boto3: one FIFO topic, two FIFO queues (one raw, one enveloped).

Usage: python sns_scenario.py ENDPOINT [verify]   ('verify': signatures must be checked with `cryptography`)
Prints one line per check and a closing 'N passed, N failed' line; exits non-zero on failure.
"""

import base64
import json
import sys
import urllib.request
import uuid

import boto3
from botocore.exceptions import ClientError

endpoint = sys.argv[1]
must_verify = sys.argv[2:] == ["verify"]
session = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="AKIDE2E", aws_secret_access_key="secret")
sns = boto3.client("sns", **session)
sqs = boto3.client("sqs", **session)
results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(("ok   " if condition else "FAIL ") + name + ("" if condition else f"  ({detail})"))


suffix = uuid.uuid4().hex[:8]
topic = sns.create_topic(
    Name=f"prices-{suffix}.fifo", Attributes={"FifoTopic": "true", "ContentBasedDeduplication": "true"}
)["TopicArn"]
queues = {}
for kind in ("raw", "envelope"):
    name = f"{kind}-{suffix}.fifo"
    url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=arn,
        Attributes={"RawMessageDelivery": "true" if kind == "raw" else "false"},
    )
    queues[kind] = url

subs = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
check("two subscriptions listed", len(subs) == 2, subs)

sent = []
for tick in range(5):
    for symbol in ("AAPL", "MSFT"):
        body = f"{symbol} {tick}"
        sent.append(body)
        sns.publish(TopicArn=topic, Message=body, MessageGroupId=symbol)
dup = sns.publish(TopicArn=topic, Message=sent[0], MessageGroupId="AAPL")
try:
    sns.publish(TopicArn=topic, Message="no group")
    check("FIFO publish without a group raises", False)
except ClientError as e:
    error = e.response["Error"]
    check("FIFO publish without a group is InvalidParameter", error["Code"] == "InvalidParameter", error)
    # SNS's error shape has no <Detail/> (SQS's has), and botocore shows exactly that.
    check("SNS errors carry no Detail", "Detail" not in error, error)
check("duplicate publish accepted", "MessageId" in dup)
batch = sns.publish_batch(
    TopicArn=topic,
    PublishBatchRequestEntries=[{"Id": f"b{i}", "Message": f"NVDA {i}", "MessageGroupId": "NVDA"} for i in range(3)],
)
check("publish batch all successful", len(batch["Successful"]) == 3 and batch["Failed"] == [], batch)
sent += [f"NVDA {i}" for i in range(3)]


def drain(url):
    got = []
    while True:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not messages:
            return got
        for m in messages:
            got.append(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def per_symbol(bodies):
    out = {}
    for b in bodies:
        out.setdefault(b.split(" ")[0], []).append(b)
    return out


raw = drain(queues["raw"])
wrapped = [json.loads(b)["Message"] for b in drain(queues["envelope"])]
check("raw queue got every message once", sorted(raw) == sorted(sent), raw)
check("envelope queue got every message once", sorted(wrapped) == sorted(sent), wrapped)
check("per-symbol order kept in both queues", per_symbol(raw) == per_symbol(sent) == per_symbol(wrapped))
attrs = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
check("topic attributes", attrs["FifoTopic"] == "true" and attrs["SubscriptionsConfirmed"] == "2", attrs)
try:
    sns.get_topic_attributes(TopicArn=topic + "-missing")
    check("missing topic raises", False)
except sns.exceptions.NotFoundException:
    check("missing topic is NotFoundException", True)
sns.delete_topic(TopicArn=topic)


def verify_signature(envelope):
    """Checks an SNS signature the way subscriber code does, with an independent RSA library."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding
    except ImportError:
        return None
    pem = urllib.request.urlopen(envelope["SigningCertURL"]).read()
    key = x509.load_pem_x509_certificate(pem).public_key()
    fields = ["Message", "MessageId"] + (["Subject"] if "Subject" in envelope else []) + ["Timestamp", "TopicArn", "Type"]
    text = "".join(f"{k}\n{envelope[k]}\n" for k in fields).encode()
    digest = hashes.SHA256() if envelope["SignatureVersion"] == "2" else hashes.SHA1()
    try:
        key.verify(base64.b64decode(envelope["Signature"]), text, padding.PKCS1v15(), digest)
        return True
    except Exception:
        return False


# Standard topics sign their envelopes; check both signature versions.
for version in ("1", "2"):
    std_topic = sns.create_topic(Name=f"signed-{version}-{suffix}", Attributes={"SignatureVersion": version})["TopicArn"]
    url = sqs.create_queue(QueueName=f"signed-{version}-{suffix}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=std_topic, Protocol="sqs", Endpoint=arn)
    sns.publish(TopicArn=std_topic, Message="signed body ✓", Subject="hello")
    envelope = json.loads(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"][0]["Body"])
    check(f"signature version {version} in the envelope", envelope.get("SignatureVersion") == version, envelope)
    verified = verify_signature(envelope)
    if must_verify and verified is None:
        check("the cryptography package is installed for signature checks", False)
    if verified is not None:
        check(f"SignatureVersion {version} verifies with the certificate at SigningCertURL", verified, envelope)
    tampered = dict(envelope, Message="changed")
    if verified:
        check(f"a changed message fails SignatureVersion {version}", verify_signature(tampered) is False)
    sns.delete_topic(TopicArn=std_topic)

print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
