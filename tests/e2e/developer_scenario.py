"""Developer endpoints with boto3 against a running Orderly: a test helper written for
LocalStack (reading /_aws/sqs/messages, also as a boto3 endpoint URL) and a small suite that
resets the server between its cases with POST /_orderly/reset.

Usage: python developer_scenario.py ENDPOINT
Prints one line per check and a closing 'N passed, N failed' line; exits non-zero on failure.
"""

import json
import sys
import urllib.parse
import urllib.request

import boto3

endpoint = sys.argv[1]
session = dict(region_name="us-east-1", aws_access_key_id="dev", aws_secret_access_key="dev")
sqs = boto3.client("sqs", endpoint_url=endpoint, **session)
sns = boto3.client("sns", endpoint_url=endpoint, **session)
results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(("ok   " if condition else "FAIL ") + name + ("" if condition else f"  ({detail})"))


# ---- A helper as LocalStack users write it ----


def peek(queue_url, **flags):
    """Every message in the queue, without receiving any (LocalStack's developer endpoint)."""
    params = urllib.parse.urlencode({"QueueUrl": queue_url, **{k: str(v) for k, v in flags.items()}})
    request = urllib.request.Request(
        f"{endpoint}/_aws/sqs/messages?{params}", headers={"Accept": "application/json"}
    )
    with urllib.request.urlopen(request) as response:
        doc = json.load(response)
    messages = (doc["ReceiveMessageResponse"]["ReceiveMessageResult"] or {}).get("Message", [])
    return messages if isinstance(messages, list) else [messages]


def attributes(message):
    listed = message["Attribute"] if isinstance(message["Attribute"], list) else [message["Attribute"]]
    return {a["Name"]: a["Value"] for a in listed}


def reset(everything=False):
    url = f"{endpoint}/_orderly/reset" + ("?all=true" if everything else "")
    with urllib.request.urlopen(urllib.request.Request(url, method="POST")) as response:
        return json.load(response)["reset"]


# ---- Peeking ----

url = sqs.create_queue(QueueName="peek.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
for body, group in [("m1", "a"), ("m2", "a"), ("m3", "b")]:
    sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=body)
sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)
visible = peek(url)
check("peek shows the visible messages", [m["Body"] for m in visible] == ["m2", "m3"], visible)
everything = peek(url, ShowInvisible=True)
check("ShowInvisible adds the in-flight one", [m["Body"] for m in everything] == ["m1", "m2", "m3"], everything)
check(
    "attributes as LocalStack lists them",
    attributes(everything[0])["IsVisible"] == "false" and attributes(everything[0])["MessageGroupId"] == "a",
    attributes(everything[0]),
)
backdoor = boto3.client("sqs", endpoint_url=f"{endpoint}/_aws/sqs/messages", **session)
got = backdoor.receive_message(QueueUrl=url, MaxNumberOfMessages=1, AttributeNames=["All"])["Messages"]
check("boto3 pointed at the endpoint gets every visible message", [m["Body"] for m in got] == ["m2", "m3"], got)
counts = [attributes(m)["ApproximateReceiveCount"] for m in peek(url, ShowInvisible=True)]
check("peeking received nothing", counts == ["1", "0", "0"], counts)
inspect = json.load(urllib.request.urlopen(f"{endpoint}/_orderly/queues"))
peeked = [q for q in inspect["queues"] if q["name"] == "peek.fifo"][0]
check("GET /_orderly/queues counts and groups", (peeked["visible"], peeked["inFlight"], peeked["lockedGroups"]) == (2, 1, 1), peeked)

# ---- A suite reusing one server, reset between cases ----


def case_publish_with_a_fixed_dedup_id(n):
    topic = sns.create_topic(Name="suite.fifo", Attributes={"FifoTopic": "true"})["TopicArn"]
    queue = sqs.create_queue(QueueName="suite.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"})
    sns.publish(TopicArn=topic, Message=f"case {n}", MessageGroupId="g", MessageDeduplicationId="fixed")
    first = [m["Body"] for m in peek(queue)]  # empty if an earlier case's id were remembered
    sqs.purge_queue(QueueUrl=queue)  # refused within 60 s of an earlier purge, unless reset
    sns.publish(TopicArn=topic, Message=f"case {n} again", MessageGroupId="g", MessageDeduplicationId="fixed")
    return first, [m["Body"] for m in peek(queue)]


for n in (1, 2, 3):
    check(f"suite case {n} starts clean", reset() == "messages")
    first, after_purge = case_publish_with_a_fixed_dedup_id(n)
    check(f"suite case {n}: no deduplication id leaks in from earlier cases", first == [f"case {n}"], first)
    # Within the case the topic remembers the id for 5 minutes: the second publish is a duplicate.
    check(f"suite case {n}: deduplication still works within it", after_purge == [], after_purge)
    sns.publish(
        TopicArn="arn:aws:sns:us-east-1:000000000000:suite.fifo",
        Message=f"fresh {n}",
        MessageGroupId="g",
        MessageDeduplicationId=f"fresh-{n}",
    )
    bodies = [m["Body"] for m in peek(sqs.get_queue_url(QueueName="suite.fifo")["QueueUrl"])]
    check(f"suite case {n}: the subscription kept working", bodies == [f"fresh {n}"], bodies)

check("reset ?all=true", reset(everything=True) == "everything")
check("no queues left", sqs.list_queues().get("QueueUrls", []) == [])
check("no topics left", sns.list_topics().get("Topics", []) == [])

print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
