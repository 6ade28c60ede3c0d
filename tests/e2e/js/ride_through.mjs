// A send/receive/delete load with the AWS SDK for JavaScript v3's default client (its default
// retries) through one node, until STOP_FILE exists; exits 1 if a single call failed.
// Usage: node ride_through.mjs ENDPOINT QUEUE_NAME STOP_FILE
import { existsSync } from "node:fs";
import {
  SQSClient,
  CreateQueueCommand,
  SendMessageCommand,
  ReceiveMessageCommand,
  DeleteMessageCommand,
} from "@aws-sdk/client-sqs";

const [endpoint, name, stopFile] = process.argv.slice(2);
const sqs = new SQSClient({
  endpoint,
  region: "us-east-1",
  credentials: { accessKeyId: "AKIDRIDE", secretAccessKey: "secret" },
});
const { QueueUrl: url } = await sqs.send(new CreateQueueCommand({ QueueName: name }));
let calls = 0;
let sent = 0;
const failures = [];
while (!existsSync(stopFile)) {
  try {
    calls++;
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: `js-${sent}` }));
    sent++;
    calls++;
    const got = await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10 }));
    for (const message of got.Messages ?? []) {
      calls++;
      await sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: message.ReceiptHandle }));
    }
  } catch (error) {
    failures.push(`${error.name}: ${error.message}`);
  }
}
console.log(JSON.stringify({ client: "@aws-sdk/client-sqs", calls, sent, failures }));
process.exit(failures.length ? 1 : 0);
