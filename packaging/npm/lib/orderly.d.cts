// Types of lib/orderly.cjs, shared by the ESM (index.d.ts) and CommonJS (index.d.cts) entries.

/** A duration for the manual clock: text ("5m", "12h", "500ms", "1h 30m") or seconds. */
export type Duration = string | number;

/**
 * Settings: the binary's flags in camel case (`clock: "manual"` is `--clock manual`,
 * `deletedQueueCooldown: 60` is `--deleted-queue-cooldown 60`, `fifoHttpSubscriptions: true`
 * the bare flag, an array is joined by commas), plus the options of the launcher itself.
 */
export interface OrderlyOptions {
  /** `manual`: time moves only through `advance()` / `setTime()`. Default: `system`. */
  clock?: "system" | "manual";
  /** The home region (default `us-east-1`). */
  region?: string;
  /** The home account (default `000000000000`). */
  accountId?: string;
  /** Default `127.0.0.1:0`: a free port. */
  bind?: string;
  /** Default `true`, unless `dataDir` or `storage` is given. */
  ephemeral?: boolean;
  dataDir?: string;
  /** Raw flags, added after the settings. */
  args?: string[];
  /** The executable (default: $ORDERLY_BINARY, the platform package's, or the bundled one). */
  binary?: string;
  /** Environment variables added for the server (`RUST_LOG`). */
  env?: Record<string, string>;
  /** How long to wait for the listening line (default 30 000). */
  startTimeoutMs?: number;
  /** How long `stop()` waits after SIGTERM before SIGKILL (default 10 000). */
  stopTimeoutMs?: number;
  [setting: string]: string | number | boolean | string[] | Record<string, string> | undefined;
}

/** A message attribute as a peek shows it. */
export interface PeekedAttribute {
  DataType: string;
  StringValue?: string;
  BinaryValue?: string;
}

/** A queue's messages as a peek returns them; `truncated` (not enumerable) is true when the
 * peek's 8 MiB bound left later messages out (`limit` alone never sets it). */
export type Peek = PeekedMessage[] & { readonly truncated: boolean };

/** One message as `GET /_orderly/queues/NAME/messages` shows it. */
export interface PeekedMessage {
  messageId: string;
  body: string;
  messageAttributes: Record<string, PeekedAttribute>;
  groupId: string | null;
  deduplicationId: string | null;
  sequenceNumber: string | null;
  receiveCount: number;
  state: "visible" | "inFlight" | "delayed";
  /** When a visibility timeout or a delay ends (RFC 3339). */
  invisibleUntil: string | null;
  sentAt: string;
  firstReceivedAt: string | null;
  senderId: string;
  traceHeader: string | null;
  deadLetterSourceArn: string | null;
}

export type MessageState = "visible" | "inFlight" | "delayed" | "all";

export interface RunningOrderly {
  /** `http://127.0.0.1:PORT`: the endpoint for AWS SDK clients. */
  readonly endpoint: string;
  readonly region: string;
  readonly accountId: string;
  readonly pid: number | undefined;
  /** False once the server has exited. */
  readonly running: boolean;
  /** Move the manual clock forward; resolves to the new time. */
  advance(duration: Duration): Promise<Date>;
  /** Move the manual clock to a later time. */
  setTime(when: Date | string | number): Promise<Date>;
  /** The server's time (needs `clock: "manual"`). */
  now(): Promise<Date>;
  /** Delete every queue and topic; with `messagesOnly`, only every message and the
   * deduplication histories, keeping queues, topics and subscriptions. */
  reset(options?: { messagesOnly?: boolean }): Promise<void>;
  /** A queue's messages (by URL or name), oldest first, without receiving them; at most
   * 8 MiB of them, `truncated` true when that bound left later ones out. */
  messages(queue: string, options?: { state?: MessageState | MessageState[]; limit?: number }): Promise<Peek>;
  /** The name the inspection endpoints know a queue by. */
  queueName(queue: string): string;
  /** What the server wrote to stdout and stderr (the last MiB). */
  logs(): string;
  /** SIGTERM, then SIGKILL after `stopTimeoutMs`; resolves once the process has exited. */
  stop(): Promise<void>;
  // At run time `Symbol.asyncDispose` is `stop` too, where Node has it (`await using`); it is
  // left out here so projects whose `lib` predates it still compile.
}

/** Start an Orderly server; resolves once it listens. */
export declare function startOrderly(options?: OrderlyOptions): Promise<RunningOrderly>;

/** The `orderly` executable this package runs. */
export declare function binaryPath(): string;

/** Settings as command-line flags. */
export declare function settingsToArgs(settings: Record<string, unknown>): string[];
