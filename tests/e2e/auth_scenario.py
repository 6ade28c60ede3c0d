"""boto3 against an Orderly started with --auth (keys AKIDE2E/secret, AKIDOTHER/other of
another account). Usage: python auth_scenario.py ENDPOINT
Prints one line per check and a closing 'N passed, N failed' line; exits non-zero on failure.
"""

import sys
import time
import urllib.error
import urllib.request

import boto3
import botocore
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint = sys.argv[1]
results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(("ok   " if condition else "FAIL ") + name + ("" if condition else f"  ({detail})"))


def client(key, secret, service="sqs"):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


def code_of(call):
    try:
        call()
    except ClientError as error:
        return error.response["Error"]["Code"]
    return "no error"


version = botocore.__version__
sqs = client("AKIDE2E", "secret")
url = sqs.create_queue(QueueName="auth-e2e")["QueueUrl"]
sqs.send_message(QueueUrl=url, MessageBody="signed")
got = sqs.receive_message(QueueUrl=url, AttributeNames=["SenderId"])["Messages"][0]
check(f"botocore {version}: the right key works and SenderId is its user's id",
      got["Attributes"]["SenderId"] == "AIDAE2EUSER0000000001", got)
check(f"botocore {version}: a wrong secret is SignatureDoesNotMatch",
      code_of(lambda: client("AKIDE2E", "wrong").list_queues()) == "SignatureDoesNotMatch")
check(f"botocore {version}: an unknown key is InvalidClientTokenId",
      code_of(lambda: client("AKIDNOBODY", "secret").list_queues()) == "InvalidClientTokenId")
other = client("AKIDOTHER", "other")
check(f"botocore {version}: another account's key sees none of this account's queues",
      "QueueUrls" not in other.list_queues())
check(f"botocore {version}: another account's key is AccessDenied on this account's queue",
      code_of(lambda: other.send_message(QueueUrl=url, MessageBody="x")) == "AccessDenied")

# Presigned URLs: the Query protocol's GET form (boto3 up to 1.34.89).
if sqs.meta.service_model.protocol == "query":
    def fetch(target):
        try:
            with urllib.request.urlopen(target) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    # botocore signs for the operation's method (POST) unless told the URL will be a GET.
    presigned = sqs.generate_presigned_url("list_queues", ExpiresIn=2, HttpMethod="GET")
    status, body = fetch(presigned)
    check("presigned ListQueues URL works", status == 200 and "auth-e2e" in body, (status, body))
    time.sleep(3)
    status, body = fetch(presigned)
    check("an expired presigned URL is RequestExpired",
          status == 400 and "RequestExpired" in body, (status, body))
    status, body = fetch(endpoint + "/?Action=ListQueues")
    check("an unsigned request is MissingAuthenticationToken",
          status == 403 and "MissingAuthenticationToken" in body, (status, body))

# STS: tools ask who they are before anything else.
def sts(key, secret):
    return client(key, secret, "sts")


me = sts("AKIDE2E", "secret").get_caller_identity()
check(f"botocore {version}: GetCallerIdentity names the key file's account and user",
      (me["Account"], me["Arn"], me["UserId"])
      == ("000000000000", "arn:aws:iam::000000000000:user/e2e", "AIDAE2EUSER0000000001"), me)
them = sts("AKIDOTHER", "other").get_caller_identity()
check(f"botocore {version}: GetCallerIdentity of another account's key names that account",
      them["Account"] == "111111111111", them)
check(f"botocore {version}: GetCallerIdentity with a wrong secret is SignatureDoesNotMatch",
      code_of(lambda: sts("AKIDE2E", "wrong").get_caller_identity()) == "SignatureDoesNotMatch")
assumed = sts("AKIDE2E", "secret").assume_role(
    RoleArn="arn:aws:iam::111111111111:role/deployer", RoleSessionName="session")["Credentials"]


def with_credentials(credentials, service, token=None):
    return boto3.client(
        service, endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=token or credentials["SessionToken"],
        config=Config(retries={"max_attempts": 1}))


role = with_credentials(assumed, "sts").get_caller_identity()
check(f"botocore {version}: an assumed role's credentials act as the role in its account",
      (role["Account"], role["Arn"])
      == ("111111111111", "arn:aws:sts::111111111111:assumed-role/deployer/session"), role)
role_sqs = with_credentials(assumed, "sqs")
role_url = role_sqs.create_queue(QueueName="assumed-e2e")["QueueUrl"]
check(f"botocore {version}: a queue made with an assumed role is in the role's account",
      "/111111111111/assumed-e2e" in role_url, role_url)
role_sqs.delete_queue(QueueUrl=role_url)
check(f"botocore {version}: a wrong session token is InvalidClientTokenId",
      code_of(lambda: with_credentials(assumed, "sqs", "forged").list_queues())
      == "InvalidClientTokenId")
check(f"botocore {version}: temporary credentials get no more under --auth (AccessDenied)",
      code_of(lambda: with_credentials(assumed, "sts").get_session_token()) == "AccessDenied")
session = sts("AKIDE2E", "secret").get_session_token(DurationSeconds=900)["Credentials"]
check(f"botocore {version}: GetSessionToken's credentials act as the caller",
      with_credentials(session, "sts").get_caller_identity()["Arn"]
      == "arn:aws:iam::000000000000:user/e2e")
if sqs.meta.service_model.protocol != "query":
    request = urllib.request.Request(endpoint + "/", data=b"Action=GetCallerIdentity&Version=2011-06-15")
    try:
        with urllib.request.urlopen(request) as response:
            status, body = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read().decode()
    check("an unsigned GetCallerIdentity is MissingAuthenticationToken",
          status == 403 and "MissingAuthenticationToken" in body, (status, body))
cloudformation = client("AKIDE2E", "secret", "cloudformation")
try:
    cloudformation.list_stacks()
    said = ("no error", "")
except ClientError as error:
    said = (error.response["Error"]["Code"], error.response["Error"]["Message"])
check(f"botocore {version}: a service not served is named, not a signature error",
      said[0] == "InvalidAction" and "this request is for CloudFormation" in said[1], said)

sqs.delete_queue(QueueUrl=url)
print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
