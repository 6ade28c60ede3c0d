// The Orderly console: reads the inspection API every two seconds and acts through SQS's own
// actions, posted to /_orderly/sqs (with --auth the browser sends the Basic credentials the
// page was opened with). Everything shown is set as text, never as HTML: message bodies are
// whatever clients sent.
"use strict";

const REFRESH_MS = 2000;

// cluster: GET /_orderly/cluster as last read, for where the selected queue lives.
const state = { queues: [], selected: null, filter: "all", cluster: { role: "single", shards: 1 } };

const $ = (id) => document.getElementById(id);

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (className) td.className = className;
  return td;
}

function link(text, onClick) {
  const a = document.createElement("a");
  a.textContent = text;
  a.addEventListener("click", onClick);
  return a;
}

function fill(tableId, rows) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren(...rows);
}

async function read(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: ${response.status}`);
  return response.json();
}

/** An SQS action over the AWS JSON protocol; answers its JSON or throws its message. */
async function sqs(action, input) {
  const response = await fetch("/_orderly/sqs", {
    method: "POST",
    headers: {
      "Content-Type": "application/x-amz-json-1.0",
      "X-Amz-Target": `AmazonSQS.${action}`,
    },
    body: JSON.stringify(input),
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(answer.message || answer.Message || response.statusText);
  return answer;
}

function renderQueues() {
  const dlqs = new Set(state.queues.map((q) => q.deadLetterQueue).filter(Boolean));
  fill(
    "queues",
    state.queues.map((q) => {
      const tr = document.createElement("tr");
      tr.dataset.queue = q.name;
      if (q.name === state.selected) tr.className = "selected";
      const name = document.createElement("td");
      name.append(link(q.name, () => select(q.name)));
      if (dlqs.has(q.name)) name.append(" ", Object.assign(document.createElement("span"), { className: "muted", textContent: "(dead-letter queue)" }));
      const dlq = document.createElement("td");
      if (q.deadLetterQueue) dlq.append(link(q.deadLetterQueue, () => select(q.deadLetterQueue)));
      tr.append(
        name,
        cell(q.visible, "number visible"),
        cell(q.inFlight, "number in-flight"),
        cell(q.delayed, "number delayed"),
        cell(q.groups, "number"),
        cell(q.lockedGroups, "number"),
        cell(q.oldestMessageAgeSeconds, "number"),
        dlq,
      );
      return tr;
    }),
  );
}

// Where a shard lives: its number when there are several, the node that leads it when nodes
// share a database, and the database keeping its log.
function whereKept(shard, cluster) {
  const parts = [];
  if (cluster.shards > 1) parts.push(`in shard ${shard} of ${cluster.shards}`);
  if (cluster.role !== "single") {
    const leader = cluster.leaders?.[shard];
    const here = cluster.led?.includes(shard) ? " (this node)" : "";
    parts.push(leader ? `led by ${leader}${here}` : "no leader known yet");
  }
  const database = cluster.databases?.[shard];
  if (database) parts.push(`kept in ${database}`);
  return parts.join(", ");
}

async function renderQueue() {
  const queue = state.queues.find((q) => q.name === state.selected);
  const section = $("queue");
  if (!queue) {
    section.hidden = true;
    return;
  }
  section.hidden = false;
  section.classList.toggle("standard", !queue.fifo);
  $("queue-name").textContent = queue.name;
  $("queue-shard").textContent = whereKept(queue.shard, state.cluster);
  $("redrive").hidden = !state.queues.some((q) => q.deadLetterQueue === queue.name);
  const name = encodeURIComponent(queue.name);
  const [messages, groups] = await Promise.all([
    read(`/_orderly/queues/${name}/messages?state=${state.filter}&limit=100`),
    queue.fifo ? read(`/_orderly/queues/${name}/groups?limit=100`) : { groups: [] },
  ]);
  fill(
    "groups",
    groups.groups.map((g) => {
      const tr = document.createElement("tr");
      tr.dataset.group = g.group;
      const status = g.locked ? `locked, ${g.blocked} waiting behind` : "ready";
      tr.append(cell(g.group), cell(g.messages, "number"), cell(g.inFlight, "number"), cell(status, g.locked ? "locked" : ""));
      return tr;
    }),
  );
  $("messages-truncated").hidden = !messages.truncated;
  fill(
    "messages",
    messages.messages.map((m) => {
      const tr = document.createElement("tr");
      tr.dataset.messageId = m.messageId;
      const attributes = Object.entries(m.messageAttributes || {})
        .map(([k, v]) => `${k}=${v.StringValue ?? v.BinaryValue ?? ""}`)
        .join(", ");
      tr.append(
        cell(m.sequenceNumber ?? "", "number"),
        cell(m.state, `state-${m.state}`),
        cell(m.groupId),
        cell(m.deduplicationId),
        cell(m.receiveCount, "number"),
        cell(m.sentAt),
        cell(m.body, "body"),
        cell(attributes),
      );
      return tr;
    }),
  );
}

async function renderSubscriptions() {
  const [activity, webhooks] = await Promise.all([read("/_orderly/subscriptions"), read("/_orderly/webhooks")]);
  const lanes = new Map(webhooks.Subscriptions.map((s) => [s.SubscriptionArn, s]));
  fill(
    "subscriptions",
    activity.subscriptions.map((s) => {
      const tr = document.createElement("tr");
      tr.dataset.subscription = s.subscriptionArn;
      const lane = lanes.get(s.subscriptionArn);
      let webhook = lane ? `${lane.Pending} / ${lane.Retries} / ${lane.DeadLettered}` : "";
      if (s.lastError) webhook += ` — last error: ${s.lastError.error} (${s.lastError.at})`;
      const recent = s.lastDeliveries
        .slice(-5)
        .map((d) => d.fate)
        .join(", ");
      const filter = s.filterPolicy ? `${s.filterPolicy} (${s.filterPolicyScope})` : "";
      tr.append(
        cell(s.topicArn.split(":").pop()),
        cell(s.pendingConfirmation ? `${s.protocol} (pending)` : s.protocol),
        cell(
          s.awsWouldRefuse ? `${s.endpoint.split(":").pop()} — ${s.awsWouldRefuse}` : s.endpoint.split(":").pop(),
          s.awsWouldRefuse ? "warning" : undefined,
        ),
        cell(filter, "body"),
        cell(webhook),
        cell(recent, "deliveries"),
      );
      return tr;
    }),
  );
}

async function refresh() {
  try {
    const [queues, cluster] = await Promise.all([read("/_orderly/queues"), read("/_orderly/cluster")]);
    state.queues = queues.queues;
    state.cluster = cluster;
    renderQueues();
    await Promise.all([renderQueue(), renderSubscriptions()]);
    $("refreshed").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    $("refreshed").textContent = `cannot read: ${error.message}`;
  }
}

function select(name) {
  state.selected = name;
  location.hash = encodeURIComponent(name);
  refresh();
}

function selectedQueue() {
  return state.queues.find((q) => q.name === state.selected);
}

function newId() {
  return globalThis.crypto?.randomUUID?.() ?? `${Date.now()}-${Math.random().toString(36).slice(2)}`;
}

function report(text) {
  $("action-result").textContent = text;
}

async function send(event) {
  event.preventDefault();
  const queue = selectedQueue();
  if (!queue) return;
  const input = { QueueUrl: queue.url, MessageBody: $("send-body").value };
  if (queue.fifo) {
    input.MessageGroupId = $("send-group").value || "console";
    // A fresh id unless one is given: each send from the form is a new message.
    input.MessageDeduplicationId = $("send-dedup").value || newId();
  }
  try {
    const answer = await sqs("SendMessage", input);
    report(`sent ${answer.MessageId}`);
    $("send-body").value = "";
  } catch (error) {
    report(`not sent: ${error.message}`);
  }
  refresh();
}

async function purge() {
  const queue = selectedQueue();
  if (!queue || !confirm(`Drop every message in ${queue.name}?`)) return;
  try {
    await sqs("PurgeQueue", { QueueUrl: queue.url });
    report("purged");
  } catch (error) {
    report(`not purged: ${error.message}`);
  }
  refresh();
}

async function redrive() {
  const queue = selectedQueue();
  if (!queue) return;
  try {
    const answer = await sqs("StartMessageMoveTask", { SourceArn: queue.arn });
    report(`moving messages back (task ${answer.TaskHandle})`);
  } catch (error) {
    report(`no redrive: ${error.message}`);
  }
  refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  $("send").addEventListener("submit", send);
  $("purge").addEventListener("click", purge);
  $("redrive").addEventListener("click", redrive);
  $("state-filter").addEventListener("change", (e) => {
    state.filter = e.target.value;
    refresh();
  });
  if (location.hash) state.selected = decodeURIComponent(location.hash.slice(1));
  refresh();
  setInterval(refresh, REFRESH_MS);
});
