// The orderly-server npm package used as a project would, from node:test with the AWS SDK for
// JavaScript v3: one server for the file, with a manual clock, reset before each test. Time
// only moves through advance(), so the 5-minute and 12-hour windows below take no time.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, before, beforeEach, test } from "node:test";
import {
  CreateQueueCommand,
  ListQueuesCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";
import { startOrderly } from "orderly-server";

let orderly;
let sqs;

before(async () => {
  orderly = await startOrderly({ clock: "manual", region: "eu-west-1" });
  sqs = new SQSClient({
    endpoint: orderly.endpoint,
    region: orderly.region,
    credentials: { accessKeyId: "test", secretAccessKey: "test" },
  });
});
after(async () => {
  sqs.destroy();
  await orderly.stop();
});
beforeEach(() => orderly.reset());

async function fifoQueue(name = "prices.fifo", attributes = {}) {
  const made = await sqs.send(
    new CreateQueueCommand({ QueueName: name, Attributes: { FifoQueue: "true", ...attributes } }),
  );
  return made.QueueUrl;
}

test("a duplicate is dropped within five minutes and accepted after", async () => {
  const url = await fifoQueue();
  const send = () =>
    sqs.send(
      new SendMessageCommand({
        QueueUrl: url,
        MessageBody: "189.50",
        MessageGroupId: "AAPL",
        MessageDeduplicationId: "tick-1",
      }),
    );
  await send();
  await orderly.advance(299); // seconds, as a number
  await send();
  assert.equal((await orderly.messages(url)).length, 1, "a duplicate inside the window is dropped");
  await orderly.advance("5m");
  await send();
  assert.deepEqual((await orderly.messages(url)).map((m) => m.body), ["189.50", "189.50"]);
});

test("a 12-hour visibility timeout passes with advance", async () => {
  const url = await fifoQueue("orders.fifo", { VisibilityTimeout: "43200" });
  await sqs.send(
    new SendMessageCommand({ QueueUrl: url, MessageBody: "order-1", MessageGroupId: "g", MessageDeduplicationId: "1" }),
  );
  const receive = () =>
    sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MessageSystemAttributeNames: ["ApproximateReceiveCount"] }));
  assert.deepEqual((await receive()).Messages.map((m) => m.Body), ["order-1"]);
  assert.equal((await receive()).Messages, undefined, "in flight for 12 hours");
  const before = await orderly.now();
  const later = await orderly.advance("12h");
  assert.equal(later - before, 12 * 3600 * 1000);
  const again = (await receive()).Messages;
  assert.deepEqual(again.map((m) => m.Body), ["order-1"]);
  assert.equal(again[0].Attributes.ApproximateReceiveCount, "2");
});

// Each expects to start with no queue and leaves one behind: whichever runs second passes only
// if the reset between them happened.
for (const run of ["one", "two"]) {
  test(`each test starts with no queues (${run})`, async () => {
    assert.deepEqual((await sqs.send(new ListQueuesCommand({}))).QueueUrls ?? [], []);
    await fifoQueue("left-behind.fifo");
  });
}

test("a peek does not consume", async () => {
  const url = await fifoQueue();
  for (const [body, group] of [["m1", "a"], ["m2", "a"], ["m3", "b"]]) {
    await sqs.send(
      new SendMessageCommand({ QueueUrl: url, MessageBody: body, MessageGroupId: group, MessageDeduplicationId: body }),
    );
  }
  const peeked = await orderly.messages(url);
  assert.deepEqual(
    peeked.map((m) => [m.body, m.groupId, m.state, m.receiveCount]),
    [["m1", "a", "visible", 0], ["m2", "a", "visible", 0], ["m3", "b", "visible", 0]],
  );
  assert.deepEqual(await orderly.messages(url), peeked, "peeking twice changes nothing");
  assert.equal(peeked.truncated, false);
  const received = await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 1 }));
  assert.deepEqual(received.Messages.map((m) => m.Body), ["m1"]);
  assert.deepEqual(
    (await orderly.messages(url)).map((m) => [m.body, m.state, m.receiveCount]),
    [["m1", "inFlight", 1], ["m2", "visible", 0], ["m3", "visible", 0]],
  );
  const visible = await orderly.messages("prices.fifo", { state: ["visible"], limit: 1 });
  assert.deepEqual(visible.map((m) => m.body), ["m2"]);
});

test("a peek past its bytes says it left messages out", async () => {
  const url = (await sqs.send(new CreateQueueCommand({ QueueName: "large" }))).QueueUrl;
  // 34 bodies of 250 kB pass the peek's 8 MiB: 33 fit.
  for (let n = 0; n < 34; n++) {
    const body = String(n).padStart(2, "0") + "x".repeat(249_998);
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: body }));
  }
  const peek = await orderly.messages(url);
  assert.deepEqual([peek.length, peek.truncated], [33, true]);
  assert.deepEqual(
    peek.map((m) => m.body.slice(0, 2)),
    Array.from({ length: 33 }, (_, n) => String(n).padStart(2, "0")),
    "oldest first",
  );
  const few = await orderly.messages(url, { limit: 5 });
  assert.deepEqual([few.length, few.truncated], [5, false], "a limit alone does not truncate");
});

test("messages sent with a delay wait for the manual clock", async () => {
  const url = (await sqs.send(new CreateQueueCommand({ QueueName: "plain" }))).QueueUrl;
  await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "later", DelaySeconds: 90 }));
  assert.deepEqual((await orderly.messages(url)).map((m) => m.state), ["delayed"]);
  await orderly.advance(90);
  assert.deepEqual((await orderly.messages(url)).map((m) => m.state), ["visible"]);
});

test("reset({ messagesOnly: true }) keeps the queues", async () => {
  const url = await fifoQueue();
  await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "gone", MessageGroupId: "g", MessageDeduplicationId: "1" }));
  await orderly.reset({ messagesOnly: true });
  assert.deepEqual(await orderly.messages(url), []);
  assert.deepEqual((await sqs.send(new ListQueuesCommand({}))).QueueUrls, [url]);
});

test("CommonJS require gives the same API and the packaged binary", async () => {
  const require = createRequire(import.meta.url);
  const cjs = require("orderly-server");
  assert.equal(typeof cjs.startOrderly, "function");
  assert.match(cjs.binaryPath(), /node_modules\/orderly-server\/vendor\/orderly$/);
});

test("a second server of its own, without the manual clock, refuses advance and stops", async () => {
  const other = await startOrderly();
  assert.equal(other.region, "us-east-1");
  assert.notEqual(other.endpoint, orderly.endpoint);
  const health = await fetch(`${other.endpoint}/health`);
  assert.equal(await health.text(), "ok");
  await assert.rejects(other.advance("5m"), /--clock manual/);
  await other.stop();
  assert.equal(other.running, false);
  assert.match(other.logs(), /listening on/);
});

test("a server that cannot start says why", async () => {
  await assert.rejects(startOrderly({ noSuchSetting: true }), /--no-such-setting/);
});
