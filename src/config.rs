//! Server settings: every flag has an `ORDERLY_*` environment twin. `orderly --help` prints
//! these doc comments; doc/configuration.md has the same settings with more to say, and the two
//! are kept in step.

use std::net::SocketAddr;

use clap::builder::BoolishValueParser;
use clap::Parser;

#[derive(Parser, Clone, Debug)]
#[command(
    name = "orderly",
    version,
    about = "Amazon SQS and SNS (FIFO and standard) over the real AWS wire protocols",
    long_about = "Amazon SQS and SNS over the real AWS wire protocols, for unmodified AWS SDKs \
and the AWS CLI: FIFO and standard queues, dead-letter queues and move tasks; FIFO and standard \
topics fanning out into queues and to HTTP/HTTPS webhooks, with filter policies. Every region \
and account in one process. State is kept in a data directory (durable by default), in memory \
(--ephemeral) or in PostgreSQL (--storage).",
    after_long_help = "Every flag has the environment twin shown under it (a switch's takes \
true or false); a flag given on the command line wins. Logs go to stderr (filter with RUST_LOG, default info); the first line \
on stdout is `orderly listening on URL`. More in doc/configuration.md of the source tree."
)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port (the first line on stdout names it).
    #[arg(long, env = "ORDERLY_BIND", default_value = "127.0.0.1:4566")]
    pub bind: SocketAddr,
    /// The home region: where unsigned requests act, and the one whose queue URLs name no
    /// region (`http://HOST/ACCOUNT/NAME`; elsewhere `http://HOST/queue/REGION/ACCOUNT/NAME`). A
    /// signed request acts in its credential scope's region, whatever this says.
    #[arg(long, env = "ORDERLY_REGION", default_value = "us-east-1")]
    pub region: String,
    /// The home account (12 digits): where unsigned requests act, and signed ones whose access
    /// key id is not 12 digits (a 12-digit key id is its own account; with --auth, a key acts
    /// in the key file's Account, which defaults to this).
    #[arg(long = "account-id", env = "ORDERLY_ACCOUNT_ID", default_value = "000000000000", value_parser = parse_account)]
    pub account_id: String,
    /// Serve one region and account: every request acts in --region and --account-id, whatever
    /// its credentials say, and a queue URL's region and account are ignored. With --auth, keys
    /// of other accounts are then refused.
    #[arg(long, env = "ORDERLY_SINGLE_NAMESPACE", value_parser = BoolishValueParser::new())]
    pub single_namespace: bool,
    /// While a queue's consumers are behind (its receives came back full within the last
    /// second, and over 1,000 more messages were sent to it than received since one came back
    /// short), a send to it is answered after the requests that became ready meanwhile, so
    /// consumers keep up under load; `false` answers every send as soon as it is done.
    #[arg(long, env = "ORDERLY_PACE_SENDERS", default_value_t = true,
          action = clap::ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub pace_senders: bool,
    /// Host (and port) to put in queue URLs; default: the request's Host header.
    #[arg(long, env = "ORDERLY_HOSTNAME")]
    pub hostname: Option<String>,
    /// Seconds a deleted queue's name stays unavailable (AWS: 60); 0 turns the rule off.
    #[arg(long, env = "ORDERLY_DELETED_QUEUE_COOLDOWN", default_value_t = 0)]
    pub deleted_queue_cooldown: u64,
    /// Orderly extension: accept http/https subscriptions on FIFO topics, delivered in order
    /// per message group (AWS refuses them, and so does Orderly by default).
    #[arg(long, env = "ORDERLY_FIFO_HTTP_SUBSCRIPTIONS", value_parser = BoolishValueParser::new())]
    pub fifo_http_subscriptions: bool,
    /// A topic's copy goes into a queue (or a subscription's dead-letter queue) only if the
    /// queue's policy lets sns.amazonaws.com send from that topic, as on AWS; without it such
    /// copies are delivered and the subscription says AWS would refuse them.
    #[arg(long, env = "ORDERLY_ENFORCE_QUEUE_POLICIES", value_parser = BoolishValueParser::new())]
    pub enforce_queue_policies: bool,
    /// Webhook destinations allowed, comma-separated CIDRs, addresses, host names or
    /// `*.suffix`es; empty (the default) allows every destination, private ones included.
    #[arg(long, env = "ORDERLY_WEBHOOK_ALLOW", default_value = "", value_parser = parse_allow_list)]
    pub webhook_allow: crate::delivery::AllowList,
    /// Webhook requests in flight at once, across all subscriptions.
    #[arg(long, env = "ORDERLY_WEBHOOK_CONCURRENCY", default_value_t = 64)]
    pub webhook_concurrency: usize,
    /// Seconds before a webhook request times out (and is retried), as AWS's 15.
    #[arg(long, env = "ORDERLY_WEBHOOK_TIMEOUT", default_value_t = 15)]
    pub webhook_timeout: u64,
    /// Notifications waiting per webhook subscription; beyond it new ones go to the
    /// subscription's dead-letter queue, or are dropped and counted (never silently).
    #[arg(long, env = "ORDERLY_WEBHOOK_MAX_PENDING", default_value_t = 100_000)]
    pub webhook_max_pending: usize,
    /// Proxy for webhook requests (`http://host:port`); proxy variables in the environment are
    /// ignored. The allow-list still applies to each destination, resolved here first.
    #[arg(long, env = "ORDERLY_WEBHOOK_PROXY")]
    pub webhook_proxy: Option<String>,
    /// Accept self-signed or otherwise invalid certificates from https endpoints.
    #[arg(long, env = "ORDERLY_WEBHOOK_ACCEPT_INVALID_CERTS", value_parser = BoolishValueParser::new())]
    pub webhook_accept_invalid_certs: bool,
    /// Where state is kept (created if missing, private to its owner; one server per
    /// directory at a time). Not used with --ephemeral or --storage.
    #[arg(long, env = "ORDERLY_DATA_DIR", default_value = "./orderly-data")]
    pub data_dir: std::path::PathBuf,
    /// `postgres://USER@HOST:PORT/DB` (several hosts as `HOST:PORT,HOST:PORT`, or the
    /// key-value form `host=… port=… user=… dbname=…`): keep the engine's log and snapshots in
    /// that PostgreSQL database instead of the data directory. One node leads, holding a lease
    /// in the database; every other node on it passes requests on and takes over when the
    /// lease lapses. The tables are created (or upgraded) at start.
    #[arg(long, env = "ORDERLY_STORAGE", conflicts_with = "ephemeral", value_parser = parse_storage)]
    pub storage: Option<String>,
    /// Copy the whole state of this data directory into the database --storage names (it must
    /// hold nothing yet and no node may lead it), then exit.
    #[arg(
        long,
        env = "ORDERLY_IMPORT_FROM",
        requires = "storage",
        conflicts_with = "export_to"
    )]
    pub import_from: Option<std::path::PathBuf>,
    /// Copy the whole state kept in the database --storage names (no node may lead it) into
    /// this new data directory, then exit.
    #[arg(long, env = "ORDERLY_EXPORT_TO", requires = "storage")]
    pub export_to: Option<std::path::PathBuf>,
    /// With --storage: move the logs, snapshots and leases of shards FIRST to LAST into the
    /// empty PostgreSQL database of `FIRST-LAST=postgres://…` (or back into the --storage
    /// one), then exit. Stop every node first, and start each after with the range as
    /// --shard-database (without it, once back home). A range kept in a database of its own
    /// moves whole, or a part that begins or ends it moves and that database keeps the rest;
    /// that database is named by --shard-database as the nodes were started. A range moved
    /// into the database of the range beside joins it. A move cut short is finished by
    /// running it again, or abandoned by moving the range where it is kept.
    #[arg(
        long,
        env = "ORDERLY_MOVE_SHARDS",
        requires = "storage",
        conflicts_with_all = ["import_from", "export_to"],
        value_parser = crate::persist::database::shard_map::parse_placed
    )]
    pub move_shards: Option<crate::persist::database::shard_map::Placed>,
    /// The URL other nodes and operators reach this node at, kept in the database while it
    /// leads (with --storage). Default: the address it listens on.
    #[arg(long, env = "ORDERLY_ADVERTISE_URL")]
    pub advertise_url: Option<String>,
    /// Seconds a request that finds no leader to pass it to (with --storage, during a
    /// failover) waits for the next one before it is answered 503. A switch takes about the
    /// lease (5 s); the SDKs' own timeouts are far longer.
    #[arg(long, env = "ORDERLY_LEADER_WAIT", default_value_t = 10)]
    pub leader_wait: u64,
    /// With --storage: lead only while an acknowledged write survives a failover of the
    /// database (synchronous_commit waits for a standby and synchronous_standby_names names
    /// one; with several hosts, the URL asks for target_session_attrs=read-write). Without
    /// it, a node leads anyway and says what could be lost.
    #[arg(
        long,
        env = "ORDERLY_REQUIRE_SYNCHRONOUS_REPLICATION",
        requires = "storage",
        value_parser = BoolishValueParser::new()
    )]
    pub require_synchronous_replication: bool,
    /// `system`, or `manual`: the server's clock starts at the machine's time and then moves
    /// only when told (`POST /_orderly/clock`), so tests pass long timeouts at once. Without
    /// `manual`, that endpoint answers 403.
    #[arg(long, env = "ORDERLY_CLOCK", value_enum, default_value = "system")]
    pub clock: crate::clock::ClockMode,
    /// Tests of clock skew only: this node's clock reads this many milliseconds off the
    /// machine's (negative: behind), as a machine whose clock is wrong would.
    #[arg(
        long,
        env = "ORDERLY_TEST_CLOCK_OFFSET",
        default_value_t = 0,
        allow_hyphen_values = true,
        hide = true
    )]
    pub test_clock_offset: i64,
    /// Tests of the binary only: a directory of files through which a test holds the server
    /// at points of its choosing (`test_hooks`).
    #[arg(long, env = "ORDERLY_TEST_HOOKS", hide = true)]
    pub test_hooks: Option<std::path::PathBuf>,
    /// Tests of passing requests between nodes only (no flag): shards another node leads, each
    /// with that node's URL. This node runs no engine for them and passes their requests there.
    #[arg(skip)]
    pub test_shards_led_elsewhere: Vec<(u32, String)>,
    /// `text` (the default), or `json`: one JSON object a line, for log collectors.
    #[arg(
        long = "log-format",
        env = "ORDERLY_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// A TOML file of queues, topics and subscriptions to create in the home region and account
    /// at start, before listening: what exists already is kept, and differences from the file
    /// are logged. A standby on --storage applies none.
    #[arg(long, env = "ORDERLY_INIT")]
    pub init: Option<std::path::PathBuf>,
    /// Keep everything in memory only (nothing survives a restart); for tests and CI.
    #[arg(long, env = "ORDERLY_EPHEMERAL", value_parser = BoolishValueParser::new())]
    pub ephemeral: bool,
    /// Cut the queues and topics into this many shards, each with an engine of its own; what
    /// crosses shards (a publish's copies, dead letters, moved messages) is carried between
    /// them, a moment later. In a data directory, each shard keeps its own log and snapshots
    /// (`shard-N`), and the directory opens only with the count it was first started with;
    /// with --storage, each shard has its own log, snapshots and lease in the database, which
    /// likewise records its count when first used. 1 is one engine for everything.
    #[arg(long, env = "ORDERLY_SHARDS", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub shards: u32,
    /// With --storage and more than one shard: each node leads its share of the shards among
    /// the live nodes and passes requests for the others to their leaders, instead of one node
    /// leading them all; what crosses shards led by different nodes is pulled by the
    /// destination's leader, and listings, the inspection endpoints and a reset ask each
    /// shard's leader. Unfinished: a node whose share moves starts over rather than hand one
    /// shard off.
    #[arg(long, env = "ORDERLY_SPREAD_SHARDS", value_parser = BoolishValueParser::new())]
    pub spread_shards: bool,
    /// With --storage and more than one shard: keep the logs, snapshots and leases of shards
    /// FIRST to LAST in another PostgreSQL database, as `FIRST-LAST=postgres://…`
    /// (repeatable; in the environment, separated by spaces). The other shards, shard 0
    /// among them, stay in the --storage database, which records the ranges when it is first
    /// used: every node must be given the same ranges from then on.
    #[arg(long = "shard-database", env = "ORDERLY_SHARD_DATABASES", value_delimiter = ' ',
          requires = "storage", value_parser = crate::persist::database::shard_map::parse_placed)]
    pub shard_databases: Vec<crate::persist::database::shard_map::Placed>,
    /// When the log is synced to disk: `always` (before answering; survives power loss),
    /// `interval:MS` (at most MS later; a power loss can lose that window), or `never`
    /// (survives a crash of the process, not of the machine).
    #[arg(long, env = "ORDERLY_FSYNC", default_value = "always")]
    pub fsync: crate::persist::writer::FsyncMode,
    /// Bytes of history in the log since the last snapshot that make the next one due (or the
    /// last snapshot's size, if larger). History is what the log holds beyond the growth of
    /// live messages, so a queue that only fills is not snapshotted over and over.
    #[arg(long, env = "ORDERLY_SNAPSHOT_AFTER", default_value_t = 64 << 20)]
    pub snapshot_after: u64,
    /// With the log in a database: while requests come often (three or more within this many
    /// microseconds), the leader lets each insert wait until this long after the last one, or
    /// until as many requests have come as the last insert carried (with
    /// `--database-inserts 2`, half as many as it and the insert beside it, so that two
    /// inserts take turns), or (with one shard) until the requests come hold 16 KiB of
    /// records, so that more requests share a commit. Requests wait at most this much
    /// longer; the database does much less work per message. 0 inserts at once. In a
    /// database cut into shards, a shard whose requests come three or more within twice
    /// this inserts on its own connection rather than through the node's shared commit.
    #[arg(long, env = "ORDERLY_DATABASE_BATCH_WAIT", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub database_batch_wait: u64,
    /// With the log in a database cut into shards: while writes come steadily (handed over
    /// before the statement under way ended), the node's one commit of its shards' writes
    /// lets the next statement wait until this many microseconds after that one ended, so
    /// that the database commits less often a message; the shards' own writers then wait for
    /// nothing. 0 (the default) inserts at once.
    #[arg(long, env = "ORDERLY_DATABASE_COMMIT_WAIT", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub database_commit_wait: u64,
    /// A node passes requests to another node on a link of its own (one connection carrying
    /// many requests as frames, answered in any order) rather than as HTTP requests, where the
    /// other node's URL is plain HTTP; `false` passes each as an HTTP request.
    #[arg(long, env = "ORDERLY_NODE_LINK", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub node_link: bool,
    /// With the log in a database: how many inserts of the log the leader may have under way
    /// at once, each on a connection of its own. With 2, the next insert is sent while one
    /// commits, which pays where the database is a network round trip away and has CPU to
    /// spare; where it shares the node's cores, each commit then carries fewer requests.
    #[arg(long, env = "ORDERLY_DATABASE_INSERTS", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=2))]
    pub database_inserts: u64,
    /// Origins (`scheme://host[:port]`, comma-separated, or `*`) whose browser pages may call
    /// this server; requests from any other origin are refused.
    #[arg(long, env = "ORDERLY_CORS_ALLOW", default_value = "")]
    pub cors_allow: String,
    /// Host names requests may name besides loopback ones and --hostname (comma-separated,
    /// `*.suffix` allowed). Listening on loopback, other names are always refused (DNS
    /// rebinding); elsewhere they are refused only when this is given.
    #[arg(long, env = "ORDERLY_ALLOW_HOST", default_value = "")]
    pub allow_host: String,
    /// JSON file of access keys (`{"Keys":[{"AccessKeyId","SecretAccessKey","Account",
    /// "UserName","UserId"}]}`; Account defaults to --account-id): every request must then carry
    /// a valid SigV4 signature (SNS's SubscribeURL and UnsubscribeURL links excepted), and
    /// Orderly's own endpoints ask for HTTP Basic credentials of a key.
    #[arg(long, env = "ORDERLY_AUTH")]
    pub auth: Option<std::path::PathBuf>,
    /// PEM certificate chain to serve HTTPS with on the listening port (with --tls-key);
    /// queue URLs and SubscribeURLs then use https.
    #[arg(long, env = "ORDERLY_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "ORDERLY_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Seconds a client has to send a request's headers, from its first byte.
    #[arg(long, env = "ORDERLY_HEADER_TIMEOUT", default_value_t = 10)]
    pub header_timeout: u64,
    /// Seconds a client has to send a request's body, once its headers are in.
    #[arg(long, env = "ORDERLY_BODY_TIMEOUT", default_value_t = 30)]
    pub body_timeout: u64,
    /// Seconds a kept-alive connection may wait for its next request before it is closed.
    #[arg(long, env = "ORDERLY_IDLE_TIMEOUT", default_value_t = 60)]
    pub idle_timeout: u64,
    /// Clients' connections open at once; beyond it a new one is answered 503 (over TLS, after
    /// its handshake) and the open ones keep working. Other nodes' links and pulls are held
    /// apart, in 64 slots of their own. Default: the open-file limit (raised to its hard limit
    /// at start) less 320, kept for those, the log, webhooks and the rest.
    #[arg(long, env = "ORDERLY_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Largest request body accepted (413 `RequestEntityTooLarge` beyond it), judged from
    /// Content-Length or while it streams. The default holds a 1 MiB message (SQS's largest)
    /// escaped threefold, as form encoding or ASCII-only JSON may, plus parameter names.
    #[arg(long, env = "ORDERLY_MAX_REQUEST_BYTES", default_value_t = 3 * 1024 * 1024 + 256 * 1024)]
    pub max_request_bytes: usize,
}

fn parse_allow_list(value: &str) -> Result<crate::delivery::AllowList, String> {
    crate::delivery::AllowList::parse(value)
}

/// A PostgreSQL URL (`postgres://USER@HOST:PORT[,HOST:PORT…]/DB?…`) or key-value connection
/// string (`host=A,B port=5432 user=… dbname=…`), as libpq takes them.
fn parse_storage(value: &str) -> Result<String, String> {
    let url = value.starts_with("postgres://") || value.starts_with("postgresql://");
    let key_value = !url && value.contains('=');
    if !url && !key_value {
        return Err(
            "give a PostgreSQL URL (postgres://USER@HOST:PORT/DB) or connection string \
             (host=HOST port=PORT user=USER dbname=DB)"
                .into(),
        );
    }
    value
        .parse::<tokio_postgres::Config>()
        .map(|_| value.to_string())
        .map_err(|e| format!("not a PostgreSQL connection string: {e}"))
}

impl Config {
    /// The settings from the command line and the environment, exiting as clap does on an
    /// error or `--help`; a value quoted in an error has any password in it blanked (clap
    /// quotes an invalid value whole, and `ORDERLY_STORAGE` is meant to keep it out of sight).
    pub fn from_args() -> Config {
        use clap::Parser;
        match Config::try_parse() {
            Ok(config) => config,
            Err(error) if !error.use_stderr() => error.exit(),
            Err(error) => {
                eprint!(
                    "{}",
                    crate::password_blanking::without_passwords(&error.render().to_string())
                );
                std::process::exit(error.exit_code());
            }
        }
    }
}

fn parse_account(value: &str) -> Result<String, String> {
    if value.len() == 12 && value.chars().all(|c| c.is_ascii_digit()) {
        Ok(value.to_string())
    } else {
        Err("the account id must be 12 digits".into())
    }
}

/// How log lines are written (to stderr).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl Config {
    /// Defaults, bound to a free loopback port (for tests and embedding).
    pub fn ephemeral() -> Self {
        Config::parse_from(["orderly", "--bind", "127.0.0.1:0", "--ephemeral"])
    }
}
