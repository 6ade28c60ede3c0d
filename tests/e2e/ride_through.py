"""A send/receive/delete load with boto3's default client (its default retries) through one
node, until STOP_FILE exists; exits 1 if a single call failed.

Usage: ride_through.py ENDPOINT QUEUE_NAME STOP_FILE
"""
import json
import os
import sys

import boto3

endpoint, name, stop_file = sys.argv[1:4]
sqs = boto3.client(
    "sqs",
    endpoint_url=endpoint,
    region_name="us-east-1",
    aws_access_key_id="AKIDRIDE",
    aws_secret_access_key="secret",
)
url = sqs.create_queue(QueueName=name)["QueueUrl"]
calls = 0
failures = []
sent = 0
while not os.path.exists(stop_file):
    try:
        calls += 1
        sqs.send_message(QueueUrl=url, MessageBody=f"py-{sent}")
        sent += 1
        calls += 1
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
        for message in got.get("Messages", []):
            calls += 1
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    except Exception as error:  # every failure counts, whatever its kind
        failures.append(f"{type(error).__name__}: {error}")
print(json.dumps({"client": "boto3", "calls": calls, "sent": sent, "failures": failures}))
sys.exit(1 if failures else 0)
