"""The orderly-server wheel used as a project would: the pytest fixtures `orderly` and
`orderly_server`, and `orderly_server.start()` directly. Time only moves through the manual
clock, so the 5-minute and 12-hour windows below take no time.
"""

import datetime
import urllib.request

import pytest

import orderly_server


def fifo_queue(sqs, name="prices.fifo", **attributes):
    return sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attributes})["QueueUrl"]


def test_settings_from_pytest_ini(orderly):
    assert orderly.region == "eu-west-1"
    url = fifo_queue(orderly.client("sqs"))
    arn = orderly.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    assert arn["Attributes"]["QueueArn"].startswith("arn:aws:sqs:eu-west-1:")


def test_duplicate_dropped_within_five_minutes_accepted_after(orderly):
    sqs = orderly.client("sqs")
    url = fifo_queue(sqs)
    send = dict(QueueUrl=url, MessageBody="189.50", MessageGroupId="AAPL", MessageDeduplicationId="tick-1")
    sqs.send_message(**send)
    orderly.advance(299)  # seconds, as a number
    sqs.send_message(**send)
    assert len(orderly.messages(url)) == 1, "a duplicate inside the window is dropped"
    orderly.advance("5m")
    sqs.send_message(**send)
    assert [m["body"] for m in orderly.messages(url)] == ["189.50", "189.50"]


def test_twelve_hour_visibility_timeout_passes_with_advance(orderly):
    sqs = orderly.client("sqs")
    url = fifo_queue(sqs, VisibilityTimeout="43200")
    sqs.send_message(QueueUrl=url, MessageBody="order-1", MessageGroupId="g", MessageDeduplicationId="1")
    first = sqs.receive_message(QueueUrl=url)["Messages"]
    assert [m["Body"] for m in first] == ["order-1"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url), "in flight for 12 hours"
    before = orderly.now()
    after = orderly.advance("12h")
    assert after - before == datetime.timedelta(hours=12)
    again = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert [m["Body"] for m in again] == ["order-1"]
    assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"


# The two tests below each expect to start with no queue and leave one behind: whichever runs
# second passes only if the fixture reset the server in between.
@pytest.mark.parametrize("run", ["one", "two"])
def test_each_test_starts_with_no_queues(orderly, run):
    sqs = orderly.client("sqs")
    assert sqs.list_queues().get("QueueUrls", []) == []
    fifo_queue(sqs, name="left-behind.fifo")


def test_peek_does_not_consume(orderly):
    sqs = orderly.client("sqs")
    url = fifo_queue(sqs)
    for body, group in [("m1", "a"), ("m2", "a"), ("m3", "b")]:
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=body)
    peeked = orderly.messages(url)
    assert [(m["body"], m["groupId"], m["state"], m["receiveCount"]) for m in peeked] == [
        ("m1", "a", "visible", 0),
        ("m2", "a", "visible", 0),
        ("m3", "b", "visible", 0),
    ]
    assert orderly.messages(url) == peeked, "peeking twice changes nothing"
    assert peeked.truncated is False
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"]
    assert [m["Body"] for m in received] == ["m1"]
    assert [(m["body"], m["state"], m["receiveCount"]) for m in orderly.messages(url)] == [
        ("m1", "inFlight", 1),
        ("m2", "visible", 0),
        ("m3", "visible", 0),
    ]
    assert [m["body"] for m in orderly.messages("prices.fifo", state=["visible"], limit=1)] == ["m2"]


def test_a_peek_past_its_bytes_says_it_left_messages_out(orderly):
    sqs = orderly.client("sqs")
    url = sqs.create_queue(QueueName="large")["QueueUrl"]
    # 34 bodies of 250 kB pass the peek's 8 MiB: 33 fit.
    for n in range(34):
        sqs.send_message(QueueUrl=url, MessageBody=f"{n:02}" + "x" * 249_998)
    peek = orderly.messages(url)
    assert (len(peek), peek.truncated) == (33, True)
    assert [m["body"][:2] for m in peek] == [f"{n:02}" for n in range(33)], "oldest first"
    few = orderly.messages(url, limit=5)
    assert (len(few), few.truncated) == (5, False), "a limit alone does not truncate"


def test_topic_fans_out_to_a_queue(orderly):
    sqs, sns = orderly.client("sqs"), orderly.client("sns")
    url = sqs.create_queue(QueueName="audit")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    topic = sns.create_topic(Name="prices")["TopicArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"})
    sns.publish(TopicArn=topic, Message="189.50")
    assert [m["body"] for m in orderly.messages(url)] == ["189.50"]


def test_reset_messages_only_keeps_queues(orderly):
    sqs = orderly.client("sqs")
    url = sqs.create_queue(QueueName="kept")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="gone")
    orderly.reset(messages_only=True)
    assert orderly.messages(url) == []
    assert sqs.list_queues()["QueueUrls"] == [url]


def test_start_as_a_context_manager():
    with orderly_server.start(clock="manual", account_id="123456789012") as server:
        assert server.region == "us-east-1" and server.account_id == "123456789012"
        with urllib.request.urlopen(server.endpoint_url + "/health") as answer:
            assert answer.read() == b"ok"
        sqs = server.client("sqs")
        url = sqs.create_queue(QueueName="direct")["QueueUrl"]
        assert url.endswith("/123456789012/direct")
        sqs.send_message(QueueUrl=url, MessageBody="hello", DelaySeconds=90)
        assert [m["state"] for m in server.messages(url)] == ["delayed"]
        server.advance(datetime.timedelta(seconds=90))
        assert [m["state"] for m in server.messages(url)] == ["visible"]
        assert server.running
    assert not server.running
    assert "listening on" in server.logs()


def test_start_without_manual_clock_refuses_advance():
    with orderly_server.start() as server:
        with pytest.raises(orderly_server.OrderlyError, match="--clock manual"):
            server.advance("5m")


def test_a_server_that_cannot_start_says_why():
    with pytest.raises(orderly_server.StartError) as failed:
        orderly_server.start(no_such_setting=True)
    assert "--no-such-setting" in failed.value.logs
