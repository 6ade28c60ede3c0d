// The web console in a real headless Chromium (Debian's, driven by playwright-core): it shows
// the seeded queues' depths, a FIFO queue's locked group and a peeked message, and a message
// sent from its form arrives through the AWS SDK, and the selected queue's shard; a queue of
// large messages is shown up to the peek's 8 MiB, saying so. Saves a screenshot.
// Usage: node console.mjs ENDPOINT SCREENSHOT.png KEY:SECRET   (the server runs with
// --init examples/price-updates.toml and --auth holding that key: the browser opens the console
// with HTTP Basic credentials and its form acts with them)
import { chromium } from "playwright-core";
import {
  SQSClient,
  SendMessageCommand,
  ReceiveMessageCommand,
  GetQueueUrlCommand,
  CreateQueueCommand,
} from "@aws-sdk/client-sqs";

// userId: the IAM user id the key file gives the key (its messages' SenderId).
const [endpoint, screenshot, key, userId] = process.argv.slice(2);
const [username, password] = key.split(":");
const sqs = new SQSClient({
  endpoint,
  region: "us-east-1",
  credentials: { accessKeyId: username, secretAccessKey: password },
});
let passed = 0;
let failed = 0;
const check = (name, ok, detail = "") => {
  ok ? passed++ : failed++;
  console.log(`${ok ? "ok  " : "FAIL"} ${name}${ok ? "" : `  (${detail})`}`);
};

const { QueueUrl: url } = await sqs.send(new GetQueueUrlCommand({ QueueName: "prices-eu.fifo" }));
for (const [body, group] of [["AAPL 189.50", "AAPL"], ["AAPL 189.75", "AAPL"], ["MSFT 410.10", "MSFT"]]) {
  await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: body, MessageGroupId: group, MessageDeduplicationId: body.replace(/\W/g, "") }));
}
// Holds AAPL's first message for five minutes: the group is locked, its second waits.
const held = await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 1, VisibilityTimeout: 300 }));
check("seeded: AAPL's head is in flight", held.Messages?.[0]?.Body === "AAPL 189.50", JSON.stringify(held.Messages));

// 34 bodies of 250 kB: one look holds 33 of them (8 MiB).
const { QueueUrl: large } = await sqs.send(new CreateQueueCommand({ QueueName: "large-peek" }));
for (let i = 0; i < 34; i++) {
  await sqs.send(new SendMessageCommand({ QueueUrl: large, MessageBody: `${i} `.padEnd(250000, "x") }));
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
const stranger = await browser.newPage();
// (Chromium's navigation turns a refused challenge into an error page; its request API shows the answer.)
const challenged = await stranger.request.get(`${endpoint}/_orderly/console`);
check("without credentials the console answers 401", challenged.status() === 401, challenged.status());
const wrong = await stranger.request.post(`${endpoint}/_orderly/sqs`, {
  headers: { "X-Amz-Target": "AmazonSQS.PurgeQueue", "Content-Type": "application/x-amz-json-1.0" },
  data: JSON.stringify({ QueueUrl: url }),
});
check("without credentials an action is refused", wrong.status() === 401, wrong.status());
await stranger.close();

const page = await browser.newPage({
  viewport: { width: 1280, height: 900 },
  httpCredentials: { username, password },
});
const pageErrors = [];
page.on("pageerror", (error) => pageErrors.push(error.message));
await page.goto(`${endpoint}/_orderly/console`);

const row = page.locator('#queues tr[data-queue="prices-eu.fifo"]');
await row.waitFor();
const text = async (locator) => (await locator.textContent()).trim();
check("queue depth: 2 visible", (await text(row.locator("td.visible"))) === "2", await text(row));
check("queue depth: 1 in flight", (await text(row.locator("td.in-flight"))) === "1", await text(row));
check(
  "the dead-letter queue is linked",
  (await text(row)).includes("prices-dlq.fifo"),
  await text(row),
);

await row.locator("a", { hasText: "prices-eu.fifo" }).click();
// The server runs with --shards 4: the queue's shard, as the inspection API gives it, is shown.
const listed = await (await page.request.get(`${endpoint}/_orderly/queues`)).json();
const shard = listed.queues.find((q) => q.name === "prices-eu.fifo")?.shard;
const where = page.locator("#queue-shard", { hasText: "of 4" });
await where.waitFor();
check("the queue's shard is shown", (await text(where)) === `in shard ${shard} of 4`, `${await text(where)} / ${shard}`);
const aapl = page.locator('#groups tr[data-group="AAPL"]');
await aapl.waitFor();
check("AAPL is locked with one waiting", (await text(aapl)).includes("locked, 1 waiting behind"), await text(aapl));
const msft = page.locator('#groups tr[data-group="MSFT"]');
check("MSFT is ready", (await text(msft)).includes("ready"), await text(msft));
const peeked = page.locator("#messages tbody tr", { hasText: "AAPL 189.50" });
await peeked.waitFor();
check("the in-flight message is peeked", (await text(peeked)).includes("inFlight"), await text(peeked));

const subscriptions = page.locator("#subscriptions tbody tr");
check("the three subscriptions are listed", (await subscriptions.count()) === 3, await subscriptions.count());
const warned = page.locator("#subscriptions tbody td.warning", { hasText: "AWS would not deliver this" });
check("a queue whose policy would refuse SNS on AWS is flagged", (await warned.count()) >= 1, await warned.count());

await page.fill("#send-body", "GOOG 175.20 from the console");
await page.fill("#send-group", "GOOG");
await page.click('#send button[type="submit"]');
const result = page.locator("#action-result");
await result.filter({ hasText: /^(sent|not sent)/ }).waitFor();
check("the form sends (with the Basic credentials)", (await text(result)).startsWith("sent "), await text(result));
await page.locator("#messages tbody tr", { hasText: "from the console" }).waitFor();
await page.screenshot({ path: screenshot, fullPage: true });

const truncated = page.locator("#messages-truncated");
check("a queue whose messages fit says nothing was left out", !(await truncated.isVisible()));
await page.locator('#queues tr[data-queue="large-peek"] a', { hasText: "large-peek" }).click();
await page.locator("#messages-truncated:not([hidden])").waitFor();
const shown = await page.locator("#messages tbody tr").count();
check("a queue past the peek's 8 MiB shows what fits and says more are there", shown === 33, shown);

const received = await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, MessageSystemAttributeNames: ["SenderId"] }));
const bodies = (received.Messages || []).map((m) => m.Body);
check(
  "the console's message arrives through the SDK (AAPL still locked)",
  JSON.stringify(bodies) === JSON.stringify(["MSFT 410.10", "GOOG 175.20 from the console"]),
  JSON.stringify(bodies),
);
const sender = (received.Messages || []).find((m) => m.Body.endsWith("from the console"))?.Attributes?.SenderId;
check("it was sent as the user of the key the console was opened with", sender === userId, sender);
check("no script errors on the page", pageErrors.length === 0, pageErrors.join("; "));
await browser.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
