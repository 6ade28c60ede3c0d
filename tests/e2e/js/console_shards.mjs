// The web console of one of two nodes leading their shares of four shards (--spread-shards),
// shards 2 and 3 kept in a database of their own: a queue shows its shard, the node that leads
// it (this one or the other) and the database keeping it, whichever node the console is read on.
// Usage: node console_shards.mjs ENDPOINT_A ENDPOINT_B DATABASE DATABASE_2_3
//   DATABASE: --storage's URL (no password), DATABASE_2_3: the --shard-database 2-3 URL.
import { chromium } from "playwright-core";
import { SQSClient, CreateQueueCommand } from "@aws-sdk/client-sqs";

const [a, b, database, second] = process.argv.slice(2);
let passed = 0;
let failed = 0;
const check = (name, ok, detail = "") => {
  ok ? passed++ : failed++;
  console.log(`${ok ? "ok  " : "FAIL"} ${name}${ok ? "" : `  (${detail})`}`);
};
const read = async (url) => {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.json();
};

// Node B answers the shards it leads itself: what the console on A should name as their leader.
const [clusterA, clusterB] = [await read(`${a}/_orderly/cluster`), await read(`${b}/_orderly/cluster`)];
check("the two nodes share the four shards", clusterA.led.length + clusterB.led.length === 4 && clusterB.led.length > 0,
  `${clusterA.led} / ${clusterB.led}`);

const sqs = new SQSClient({ endpoint: a, region: "us-east-1", credentials: { accessKeyId: "a", secretAccessKey: "b" } });
for (let n = 0; n < 12; n++) {
  await sqs.send(new CreateQueueCommand({ QueueName: `where-${n}.fifo`, Attributes: { FifoQueue: "true" } }));
}
const listed = (await read(`${a}/_orderly/queues`)).queues.filter((q) => q.name.startsWith("where-"));
check("the twelve queues are listed on A", listed.length === 12, listed.length);
const onB = listed.find((q) => clusterB.led.includes(q.shard));
const onA = listed.find((q) => clusterA.led.includes(q.shard));
check("a queue is led by each node", onA && onB, JSON.stringify(listed));

const kept = (shard) => (shard >= 2 ? second : database);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
const page = await browser.newPage();
const pageErrors = [];
page.on("pageerror", (error) => pageErrors.push(error.message));
await page.goto(`${a}/_orderly/console`);
// The queue picked from the table, as a user would; the line shown once it names the queue's shard.
const shown = async (queue) => {
  await page.locator(`#queues tr[data-queue="${queue.name}"] a`).click();
  const where = page.locator("#queue-shard", { hasText: `in shard ${queue.shard} of 4,` });
  await where.waitFor();
  return (await where.textContent()).trim();
};
if (onA && onB) {
  const other = await shown(onB);
  const wanted = `in shard ${onB.shard} of 4, led by ${clusterB.leader}, kept in ${kept(onB.shard)}`;
  check("a queue the other node leads names it and its database", other === wanted, `${other} / ${wanted}`);
  const own = await shown(onA);
  const ownWanted = `in shard ${onA.shard} of 4, led by ${clusterA.leader} (this node), kept in ${kept(onA.shard)}`;
  check("a queue this node leads says so", own === ownWanted, `${own} / ${ownWanted}`);
}
check("no script errors on the page", pageErrors.length === 0, pageErrors.join("; "));
await browser.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
