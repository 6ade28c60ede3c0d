// The FIFO scenario with the AWS SDK for JavaScript v3 (JSON protocol). The SDK checks the
// body MD5 of every send and receive, so a wrong checksum fails the call.
// Usage: node scenario.mjs ENDPOINT
import {
  SQSClient,
  CreateQueueCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  ReceiveMessageCommand,
  DeleteMessageBatchCommand,
  GetQueueUrlCommand,
  DeleteQueueCommand,
} from "@aws-sdk/client-sqs";

const endpoint = process.argv[2];
const sqs = new SQSClient({
  endpoint,
  region: "us-east-1",
  credentials: { accessKeyId: "AKIDJS", secretAccessKey: "secret" },
});
let passed = 0;
let failed = 0;
const check = (name, ok, detail = "") => {
  ok ? passed++ : failed++;
  console.log(`${ok ? "ok  " : "FAIL"} ${name}${ok ? "" : `  (${detail})`}`);
};

const name = `js-${Date.now()}.fifo`;
const { QueueUrl: url } = await sqs.send(
  new CreateQueueCommand({ QueueName: name, Attributes: { FifoQueue: "true", ContentBasedDeduplication: "true" } }),
);
check("queue url on the endpoint's origin", url.startsWith(endpoint), url);

const groups = ["EUR", "GBP", "JPY"];
const sent = Object.fromEntries(groups.map((g) => [g, []]));
for (let batch = 0; batch < 3; batch++) {
  const Entries = groups.flatMap((g, i) =>
    [0, 1].map((k) => {
      const body = `${g}:${batch}:${k}:\r\nünïcødé`;
      sent[g].push(body);
      return {
        Id: `e${i}${k}`,
        MessageBody: body,
        MessageGroupId: g,
        MessageAttributes: { rate: { DataType: "Number", StringValue: `${1 + i / 10}` } },
      };
    }),
  );
  const out = await sqs.send(new SendMessageBatchCommand({ QueueUrl: url, Entries }));
  check(`batch ${batch} accepted`, out.Successful?.length === 6 && !out.Failed, JSON.stringify(out.Failed));
}

const got = Object.fromEntries(groups.map((g) => [g, []]));
for (let i = 0; i < 20 && Object.values(got).flat().length < 18; i++) {
  const out = await sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: url,
      MaxNumberOfMessages: 10,
      WaitTimeSeconds: 1,
      MessageSystemAttributeNames: ["MessageGroupId"],
      MessageAttributeNames: ["All"],
    }),
  );
  const messages = out.Messages ?? [];
  for (const m of messages) got[m.Attributes.MessageGroupId].push(m.Body);
  if (messages.length) {
    await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: url,
        Entries: messages.map((m, k) => ({ Id: `d${k}`, ReceiptHandle: m.ReceiptHandle })),
      }),
    );
  }
}
for (const g of groups) {
  check(`group ${g} in order, once`, JSON.stringify(got[g]) === JSON.stringify(sent[g]), JSON.stringify(got[g]));
}

try {
  await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "no group" }));
  check("missing group rejected", false);
} catch (e) {
  check("missing group is MissingParameter", e.name === "MissingParameter" || e.Code === "MissingParameter", e.name);
}
try {
  await sqs.send(new GetQueueUrlCommand({ QueueName: "nope-js" }));
  check("unknown queue rejected", false);
} catch (e) {
  check("unknown queue is QueueDoesNotExist", e.name === "QueueDoesNotExist", e.name);
}
await sqs.send(new DeleteQueueCommand({ QueueUrl: url }));

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
