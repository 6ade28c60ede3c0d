"use strict";
// Starting and stopping one `orderly` process, and the developer endpoints tests use
// (startOrderly). CommonJS so that both `import` (index.js) and `require` (index.cjs) share
// this one implementation. No dependencies: child_process, and Node's global fetch.

const { spawn } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");

// The server's first stdout line (README, "Settings": --bind).
const LISTENING = /orderly listening on (\S+)/;
// The binary's own defaults, for the helpers that must know the home namespace.
const DEFAULT_REGION = "us-east-1";
const DEFAULT_ACCOUNT = "000000000000";
// How much of the server's log is kept in memory (the newest part).
const LOG_KEPT = 1024 * 1024;

/** The `orderly` executable: $ORDERLY_BINARY, else the per-platform package's
 * (@orderly-server/<platform>-<arch>, when published that way), else the one `npm pack`
 * bundled in vendor/. */
function binaryPath() {
  if (process.env.ORDERLY_BINARY) return process.env.ORDERLY_BINARY;
  const exe = process.platform === "win32" ? "orderly.exe" : "orderly";
  try {
    return require.resolve(`@orderly-server/${process.platform}-${process.arch}/bin/${exe}`);
  } catch {
    // Not installed: this package carries its own.
  }
  const bundled = path.join(__dirname, "..", "vendor", exe);
  if (fs.existsSync(bundled)) return bundled;
  throw new Error(
    `orderly-server has no binary for ${process.platform}-${process.arch}: ` +
      "set ORDERLY_BINARY to an orderly executable",
  );
}

function flagName(setting) {
  return "--" + setting.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase()).replace(/_/g, "-");
}

/** `{clock: "manual"}` -> `--clock manual`; `true` -> the bare flag; `false`/`null`/`undefined`
 * -> nothing; an array -> its items joined by commas. */
function settingsToArgs(settings) {
  const args = [];
  for (const [name, value] of Object.entries(settings)) {
    if (value === undefined || value === null || value === false) continue;
    if (value === true) args.push(flagName(name));
    else args.push(flagName(name), Array.isArray(value) ? value.join(",") : String(value));
  }
  return args;
}

function flagsIn(args) {
  return new Set(args.filter((a) => a.startsWith("--")).map((a) => a.split("=")[0]));
}

function flagValue(args, flag) {
  let value;
  args.forEach((arg, i) => {
    if (arg === flag && i + 1 < args.length) value = args[i + 1];
    else if (arg.startsWith(flag + "=")) value = arg.slice(flag.length + 1);
  });
  return value;
}

/** A duration as /_orderly/clock reads it: text as given ("5m", "500ms"), numbers as seconds. */
function durationText(duration) {
  if (typeof duration === "string") return duration;
  if (typeof duration !== "number" || !Number.isFinite(duration)) {
    throw new TypeError(`a duration is text ("5m") or seconds, not ${duration}`);
  }
  if (duration < 0) throw new RangeError("the clock never moves backwards");
  return `${Math.round(duration * 1000)}ms`;
}

/** The name the inspection endpoints know a queue by, from its URL (or a bare name). */
function queueName(queue, home) {
  if (!queue.includes("/")) return queue;
  const url = new URL(queue);
  const parts = url.pathname.split("/").filter(Boolean);
  const name = parts[parts.length - 1];
  if (home.singleNamespace || parts.length < 2) return name;
  const account = parts[parts.length - 2];
  const regional = /^sqs\.([a-z0-9-]+)\./.exec(url.hostname) || /^([a-z0-9-]+)\.queue\./.exec(url.hostname);
  let region = home.region;
  if (parts.length >= 4 && parts[parts.length - 4] === "queue") region = parts[parts.length - 3];
  else if (regional) region = regional[1];
  return region === home.region && account === home.accountId ? name : `${region}:${account}:${name}`;
}

/**
 * Start an Orderly server; resolves once it listens. Settings are the binary's flags in camel
 * case (`clock: "manual"`, `region: "eu-west-1"`, `deletedQueueCooldown: 60`). Unless given
 * otherwise it listens on a free port of 127.0.0.1 and keeps everything in memory.
 */
async function startOrderly(options = {}) {
  const { binary, args = [], env, startTimeoutMs = 30_000, stopTimeoutMs = 10_000, ...settings } = options;
  const extra = [...args];
  const given = new Set([...flagsIn(extra), ...Object.keys(settings).map(flagName)]);
  const defaults = {};
  if (!given.has("--bind")) defaults.bind = "127.0.0.1:0";
  if (!["--data-dir", "--storage", "--ephemeral"].some((f) => given.has(f))) defaults.ephemeral = true;
  const argv = [...settingsToArgs({ ...defaults, ...settings }), ...extra];
  const childEnv = { NO_COLOR: "1", ...process.env, ...env };
  const home = {
    region: flagValue(argv, "--region") || childEnv.ORDERLY_REGION || DEFAULT_REGION,
    accountId: flagValue(argv, "--account-id") || childEnv.ORDERLY_ACCOUNT_ID || DEFAULT_ACCOUNT,
    singleNamespace: argv.includes("--single-namespace"),
  };
  const executable = binary || binaryPath();

  const child = spawn(executable, argv, { stdio: ["ignore", "pipe", "pipe"], env: childEnv });
  let log = "";
  const keep = (text) => {
    log += text;
    if (log.length > LOG_KEPT) log = log.slice(-LOG_KEPT);
  };
  const exited = new Promise((resolve) => child.once("close", (code, signal) => resolve({ code, signal })));
  let running = true;
  exited.then(() => (running = false));

  const endpoint = await new Promise((resolve, reject) => {
    let pending = "";
    let found = false;
    const fail = (why) => {
      clearTimeout(timer);
      reject(new Error(`${why} (${executable} ${argv.join(" ")})\n--- orderly log ---\n${log}`));
    };
    const timer = setTimeout(() => {
      fail(`orderly printed no listening line within ${startTimeoutMs} ms`);
      child.kill("SIGKILL");
    }, startTimeoutMs);
    child.stdout.setEncoding("utf8").on("data", (chunk) => {
      keep(chunk);
      if (found) return;
      pending += chunk;
      const match = LISTENING.exec(pending);
      if (match && pending.slice(match.index).includes("\n")) {
        found = true;
        clearTimeout(timer);
        resolve(match[1].replace(/\/$/, ""));
      }
    });
    child.stderr.setEncoding("utf8").on("data", keep);
    child.once("error", (error) => fail(`could not run orderly: ${error.message}`));
    exited.then(({ code, signal }) => {
      if (!found) fail(`orderly exited (${signal || `code ${code}`}) before listening`);
    });
  });

  // Stop the server with this process if the caller never does.
  const onExit = () => child.kill("SIGKILL");
  process.once("exit", onExit);

  async function call(method, path, body) {
    const response = await fetch(endpoint + path, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    if (!response.ok) {
      let detail = text;
      try {
        detail = JSON.parse(text).message ?? text;
      } catch {
        // Not JSON: the text as it came.
      }
      throw new Error(`${method} ${path}: ${response.status}: ${detail}`);
    }
    return JSON.parse(text);
  }
  const time = (answer) => new Date(answer.epochMillis);

  const server = {
    endpoint,
    region: home.region,
    accountId: home.accountId,
    pid: child.pid,
    advance: async (duration) => time(await call("POST", "/_orderly/clock", { advance: durationText(duration) })),
    setTime: async (when) =>
      time(await call("POST", "/_orderly/clock", { set: when instanceof Date ? when.toISOString() : when })),
    now: async () => time(await call("GET", "/_orderly/clock")),
    reset: async ({ messagesOnly = false } = {}) => {
      await call("POST", messagesOnly ? "/_orderly/reset" : "/_orderly/reset?all=true");
    },
    messages: async (queue, { state, limit } = {}) => {
      const params = new URLSearchParams();
      if (state !== undefined) params.set("state", Array.isArray(state) ? state.join(",") : state);
      if (limit !== undefined) params.set("limit", String(limit));
      const query = params.toString() ? `?${params}` : "";
      const name = encodeURIComponent(queueName(queue, home));
      const peek = await call("GET", `/_orderly/queues/${name}/messages${query}`);
      // Not enumerable, so the array still compares equal to a plain one of the same messages.
      Object.defineProperty(peek.messages, "truncated", { value: peek.truncated === true });
      return peek.messages;
    },
    queueName: (queue) => queueName(queue, home),
    logs: () => log,
    get running() {
      return running;
    },
    stop: async () => {
      process.removeListener("exit", onExit);
      if (!running) return;
      child.kill("SIGTERM");
      let timer;
      const late = new Promise((resolve) => (timer = setTimeout(() => resolve("late"), stopTimeoutMs)));
      if ((await Promise.race([exited, late])) === "late") child.kill("SIGKILL");
      clearTimeout(timer);
      await exited;
    },
  };
  if (Symbol.asyncDispose) server[Symbol.asyncDispose] = server.stop;
  return server;
}

module.exports = { startOrderly, binaryPath, settingsToArgs };
