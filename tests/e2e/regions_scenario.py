"""Regions and accounts with boto3: the credential scope's region and a
12-digit access key's account choose where a request acts.

Usage: python regions_scenario.py ENDPOINT
Prints one line per check and a closing 'N passed, N failed' line; exits non-zero on failure.
"""

import sys
import uuid

import boto3
from botocore.exceptions import ClientError

endpoint = sys.argv[1]
results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(("ok   " if condition else "FAIL ") + name + ("" if condition else f"  ({detail})"))


def client(service, region, key="AKIDE2E"):
    return boto3.client(
        service, endpoint_url=endpoint, region_name=region, aws_access_key_id=key, aws_secret_access_key="secret"
    )


def error_code(call):
    try:
        call()
        return None
    except ClientError as e:
        return e.response["Error"]["Code"]


suffix = uuid.uuid4().hex[:8]
east, west = client("sqs", "us-east-1"), client("sqs", "eu-west-1")
name = f"prices-{suffix}"
east_url = east.create_queue(QueueName=name)["QueueUrl"]
west_url = west.create_queue(QueueName=name)["QueueUrl"]
check("one name in two regions has two URLs", east_url != west_url, (east_url, west_url))
west_arn = west.get_queue_attributes(QueueUrl=west_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
check("the ARN names the client's region", west_arn.startswith("arn:aws:sqs:eu-west-1:"), west_arn)
west.send_message(QueueUrl=west_url, MessageBody="west")
east_got = east.receive_message(QueueUrl=east_url).get("Messages", [])
west_got = west.receive_message(QueueUrl=west_url).get("Messages", [])
check("a message sent in one region stays there", not east_got and [m["Body"] for m in west_got] == ["west"])

west_sns = client("sns", "eu-west-1")
topic = west_sns.create_topic(Name=f"quotes-{suffix}")["TopicArn"]
check("a topic's ARN names its region", topic.startswith("arn:aws:sns:eu-west-1:"), topic)
east_arn = east.get_queue_attributes(QueueUrl=east_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
west_sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=east_arn, Attributes={"RawMessageDelivery": "true"})
west_sns.publish(TopicArn=topic, Message="across")
bodies = [m["Body"] for m in east.receive_message(QueueUrl=east_url, WaitTimeSeconds=2).get("Messages", [])]
check("a topic delivers to a queue of another region", bodies == ["across"], bodies)
code = error_code(lambda: client("sns", "us-east-1").publish(TopicArn=topic, Message="x"))
check("another region's topic ARN is refused", code == "InvalidParameter", code)

owner, other = client("sqs", "us-east-1", "111111111111"), client("sqs", "us-east-1", "222222222222")
orders = owner.create_queue(QueueName=f"orders-{suffix}")["QueueUrl"]
check("a 12-digit key acts in its own account", "/111111111111/" in orders, orders)
code = error_code(lambda: other.send_message(QueueUrl=orders, MessageBody="x"))
check("another account is denied by default", code == "AccessDenied", code)
owner.add_permission(QueueUrl=orders, Label="partner", AWSAccountIds=["222222222222"], Actions=["SendMessage"])
code = error_code(lambda: other.send_message(QueueUrl=orders, MessageBody="granted"))
check("a granted account may send", code is None, code)
bodies = [m["Body"] for m in owner.receive_message(QueueUrl=orders).get("Messages", [])]
check("the owner receives what it sent", bodies == ["granted"], bodies)

print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
