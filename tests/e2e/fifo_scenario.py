"""The FIFO scenario with boto3 against a running Orderly.

Usage: python fifo_scenario.py ENDPOINT EXPECTED_PROTOCOL   (EXPECTED_PROTOCOL: json or query)
Prints one line per check and a closing 'N passed, N failed' line; exits non-zero on failure.
"""

import hashlib
import sys
import time
import uuid

import boto3
import botocore
from botocore.exceptions import ClientError

endpoint, expected_protocol = sys.argv[1], sys.argv[2]
sqs = boto3.client(
    "sqs",
    endpoint_url=endpoint,
    region_name="us-east-1",
    aws_access_key_id="AKIDE2E",
    aws_secret_access_key="secret",
)
results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(("ok   " if condition else "FAIL ") + name + ("" if condition else f"  ({detail})"))


protocol = sqs.meta.service_model.protocol
check(f"botocore {botocore.__version__} speaks {expected_protocol}", protocol == expected_protocol, protocol)

suffix = uuid.uuid4().hex[:8]
url = sqs.create_queue(
    QueueName=f"prices-{suffix}.fifo",
    Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
)["QueueUrl"]
check("queue url points at the endpoint", url.startswith(endpoint), url)

groups = ["AAPL", "MSFT", "GOOG"]
sent = {g: [] for g in groups}
for batch in range(4):
    entries = []
    for i, g in enumerate(groups * 3):
        body = f"{g}:{batch}:{i}"
        sent[g].append(body)
        entries.append(
            {
                "Id": f"e{i}",
                "MessageBody": body,
                "MessageGroupId": g,
                "MessageAttributes": {"price": {"DataType": "Number", "StringValue": str(100 + i)}},
            }
        )
    out = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    check(f"batch {batch} fully accepted", len(out.get("Successful", [])) == 9 and not out.get("Failed"), out.get("Failed"))

dup = sqs.send_message(QueueUrl=url, MessageBody=sent["AAPL"][0], MessageGroupId="AAPL")
check("duplicate send is accepted", "MessageId" in dup)

got = {g: [] for g in groups}
deadline = time.time() + 20
while sum(map(len, got.values())) < 36 and time.time() < deadline:
    out = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=1,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )
    messages = out.get("Messages", [])
    for m in messages:
        group = m["Attributes"]["MessageGroupId"]
        got[group].append(m["Body"])
        if hashlib.md5(m["Body"].encode()).hexdigest() != m["MD5OfBody"]:
            check("body md5", False, m["MessageId"])
    if messages:
        sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
        )
for g in groups:
    check(f"group {g} delivered in order, once", got[g] == sent[g], got[g][:5])

attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
check("queue drained", attrs["ApproximateNumberOfMessages"] == "0" and attrs["ApproximateNumberOfMessagesNotVisible"] == "0", attrs)
check("fifo attributes reported", attrs.get("FifoQueue") == "true" and attrs.get("ContentBasedDeduplication") == "true", attrs)

try:
    sqs.get_queue_url(QueueName="does-not-exist")
    check("missing queue raises", False)
except ClientError as e:
    code = e.response["Error"]["Code"]
    check("missing queue code", code == "AWS.SimpleQueueService.NonExistentQueue", code)
    check("missing queue is the modeled exception", isinstance(e, sqs.exceptions.QueueDoesNotExist), type(e))
    if expected_protocol == "query":
        # SQS's Query error shape carries an empty <Detail/> (SNS's does not).
        check("SQS Query errors carry Detail", "Detail" in e.response["Error"], e.response["Error"])
    expected = {
        "query": "The specified queue does not exist for this wsdl version.",
        "json": "The specified queue does not exist.",
    }[expected_protocol]
    check("missing queue worded as AWS does in this protocol", e.response["Error"]["Message"] == expected, e.response["Error"])

try:
    sqs.send_message_batch(QueueUrl=url, Entries=[])
    check("an empty batch raises", False)
except ClientError as e:
    code = e.response["Error"]["Code"]
    check("an empty batch is EmptyBatchRequest", code == "AWS.SimpleQueueService.EmptyBatchRequest", e.response["Error"])

try:
    sqs.send_message(QueueUrl=url, MessageBody="no group")
    check("missing group raises", False)
except ClientError as e:
    check("missing group id is MissingParameter", e.response["Error"]["Code"] == "MissingParameter", e.response["Error"])

sqs.send_message(QueueUrl=url, MessageBody="crlf\r\nbody", MessageGroupId="x")
m = sqs.receive_message(QueueUrl=url)["Messages"][0]
check("carriage return survives", m["Body"] == "crlf\r\nbody", repr(m["Body"]))
sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
again = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])["Messages"][0]
check("visibility 0 redelivers", again["Attributes"]["ApproximateReceiveCount"] == "2", again["Attributes"])
sqs.delete_queue(QueueUrl=url)

print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
