//! orderly-bench: drives a server over HTTP with the SQS JSON protocol and reports throughput,
//! latency percentiles and the server's CPU time per message (read from /proc).
//!
//! Each scenario starts a fresh server process (Orderly, or the null handler: a server on the
//! same HTTP stack that parses each request and stores nothing), so figures do not leak between
//! scenarios. Usage: `cargo run --release -p orderly-bench -- --orderly target/release/orderly`.

mod balance;
mod burst_memory;
mod dedup_memory;
mod delay;
mod load;
mod nodes;
mod nodes_layout;
mod nodes_load;
mod nodes_ratio;
mod null_server;
mod report;
mod scenarios;
mod server;
mod share;

use clap::Parser;

#[derive(Parser, Debug, Clone)]
#[command(about = "Benchmark Orderly against a null handler")]
pub struct Args {
    /// Path to the orderly binary (a release build).
    #[arg(long, default_value = "target/release/orderly")]
    pub orderly: String,
    /// Comma-separated scenarios: send, single, pipeline, paced, fanout, fanout-paced (publish
    /// to receive at --rate publishes a second), backlog, durable
    /// (send, single and pipeline with fsync), durable-share (send, single and pipeline, in
    /// memory, durable and on every peer, at each count of --share-connections: durable
    /// against in memory and each peer against durable, compared at their peaks),
    /// restart (restart time with the backlog), memory (resident memory per queued 1 KiB
    /// message), dedup-memory (resident memory per deduplication id remembered, after a
    /// million unique ids sent and consumed), burst-memory (resident memory after a drained
    /// pipeline, and once the deduplication window has passed on a manual clock), nodes
    /// (each of --node-loads over 32 FIFO queues through 1, 2, 3… nodes on one database, each
    /// held to --node-cpu by a cgroup; needs root and --postgres).
    #[arg(
        long,
        default_value = "send,single,pipeline,paced,fanout,backlog,durable,durable-share,restart,memory"
    )]
    pub scenarios: String,
    /// Seconds each measured phase runs.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Runs the scenario list this many times in turn and reports, per row, the round with the
    /// median throughput (the median p99 for paced runs): on a shared machine one slow moment
    /// would otherwise decide a comparison between systems measured a minute apart.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Producer connections.
    #[arg(long, default_value_t = 8)]
    pub producers: usize,
    /// Consumer connections.
    #[arg(long, default_value_t = 8)]
    pub consumers: usize,
    /// Producer connection counts (as many consumers) the durable-share scenario runs at.
    #[arg(long, value_delimiter = ',', default_value = "8,16,32,64")]
    pub share_connections: Vec<usize>,
    /// FIFO queues the sends of durable-share (and the send scenarios) go to, producer p
    /// sending to queue p mod this: several hot queues in place of one.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub share_queues: u64,
    /// Message groups.
    #[arg(long, default_value_t = 64)]
    pub groups: usize,
    /// Body size in bytes.
    #[arg(long, default_value_t = 256)]
    pub body_size: usize,
    /// Total rate for the paced scenarios (messages, or publishes, per second).
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Messages preloaded for the backlog scenario.
    #[arg(long, default_value_t = 1_000_000)]
    pub backlog_messages: usize,
    /// Groups the backlog is spread over.
    #[arg(long, default_value_t = 100_000)]
    pub backlog_groups: usize,
    /// Another emulator to measure beside Orderly, as NAME=COMMAND (repeatable). COMMAND runs
    /// under `sh -c` with `{port}` replaced by a free port; it must serve the SQS JSON protocol
    /// on 127.0.0.1:{port}. Peers run every scenario but durable and restart.
    #[arg(long = "peer", value_name = "NAME=COMMAND")]
    pub peers: Vec<String>,
    /// The postmaster PID (first line of `postmaster.pid`) of a PostgreSQL server the peers
    /// keep their state in: its CPU, its processes' and theirs that ended, is reported per
    /// message as database CPU in the peers' notes for send (batched and single), pipeline
    /// and fan-out (measure one peer on it at a time).
    #[arg(long)]
    pub database_pid: Option<u32>,
    /// A PostgreSQL URL for the nodes scenario: each node count gets a fresh database on
    /// that server.
    #[arg(long)]
    pub postgres: Option<String>,
    /// The share of one core each node of the nodes scenario may use, in percent.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub node_cpu: u32,
    /// The node counts the nodes scenario runs at.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub node_counts: Vec<usize>,
    /// Producer connections of the nodes scenario (`--producers` when not given): enough to
    /// keep every node busy, so that it measures what the nodes can take rather than how
    /// quickly a few clients' requests come back. Several, comma-separated: each node count
    /// runs at each, on nodes and a database started afresh, and its row is its best (what
    /// those nodes can take), the others' rates in its note; a paced load runs at the first.
    #[arg(long, value_delimiter = ',')]
    pub node_producers: Vec<usize>,
    /// Consumers of each of the nodes scenario's 32 queues in its pipeline and fan-out loads,
    /// each receiving and deleting in a closed loop.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub node_consumers: u64,
    /// Comma-separated loads the nodes scenario runs at each node count: send (batched sends
    /// to 32 FIFO queues), pipeline (the same sends, --node-consumers per queue receiving and
    /// deleting), fanout (PublishBatch to up to 8 FIFO topics, each copied to its share of the
    /// 32 queues, raw delivery, --node-consumers per queue), fanout-paced (the same at --rate
    /// publishes a second: publish-to-receive latency).
    #[arg(long, default_value = "send")]
    pub node_loads: String,
    /// How the nodes scenario names its queues and topics: even (each queue in a shard of its
    /// own, topics taking turns over the nodes) or hashed (plain names, wherever they fall).
    #[arg(long, value_enum, default_value = "even")]
    pub node_layout: nodes_layout::Layout,
    /// Where the nodes scenario's clients send: balancer (one endpoint before every node, each
    /// node passing on what another leads) or leader (each queue's and topic's requests
    /// straight to the node leading its shard).
    #[arg(long, value_enum, default_value = "balancer")]
    pub node_route: nodes_layout::Route,
    /// The shards the nodes scenario's database is cut into (`--shards`).
    #[arg(long, default_value_t = 1)]
    pub node_shards: u32,
    /// The nodes scenario's nodes each lead their share of the shards (`--spread-shards`)
    /// instead of one leading them all.
    #[arg(long)]
    pub spread_shards: bool,
    /// A second PostgreSQL server for the nodes scenario: the upper half of its shards is
    /// kept in a fresh database there (`--shard-database`), the rest on `--postgres`'s.
    #[arg(long, requires = "postgres")]
    pub postgres_second: Option<String>,
    /// The postmaster PID of `--postgres-second`'s server: its CPU is added to the
    /// database's, and `--database-cpu` holds it too.
    #[arg(long, requires = "postgres_second")]
    pub second_database_pid: Option<u32>,
    /// The share of one core each PostgreSQL server of the nodes scenario may use, in
    /// percent, held by a cgroup while a node count runs (as a database machine of that
    /// size would be): the servers named by `--database-pid` and `--second-database-pid`.
    #[arg(long, requires = "database_pid", value_parser = clap::value_parser!(u32).range(1..=200))]
    pub database_cpu: Option<u32>,
    /// Run as a round-robin TCP balancer: LISTEN=UPSTREAM[,UPSTREAM...] (to put several
    /// nodes behind one endpoint).
    #[arg(long, hide = true)]
    pub balance: Option<String>,
    /// Run as a forwarder that holds every byte this many microseconds each way:
    /// LISTEN=UPSTREAM (a database "a network round trip away" on one machine, where the
    /// kernel has no `netem`).
    #[arg(long, hide = true)]
    pub delay: Option<String>,
    /// The delay of `--delay`, in microseconds.
    #[arg(long, hide = true, default_value_t = 1000)]
    pub delay_us: u64,
    /// Run as the null handler on this address (used by the benchmark itself).
    #[arg(long, hide = true)]
    pub null_server: Option<String>,
}

fn main() {
    let args = Args::parse();
    if let Err(error) = load::check_peer_names(&args) {
        eprintln!("orderly-bench: {error}");
        std::process::exit(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Some(spec) = &args.balance {
        let (listen, upstreams) = spec
            .split_once('=')
            .expect("--balance LISTEN=UPSTREAM[,UPSTREAM...]");
        let upstreams = upstreams
            .split(',')
            .map(|u| u.parse().expect("an upstream is HOST:PORT"))
            .collect();
        if let Err(error) = runtime.block_on(balance::run(listen, upstreams)) {
            eprintln!("balancer: {error}");
            std::process::exit(1);
        }
        return;
    }
    if let Some(spec) = &args.delay {
        let (listen, upstream) = spec.split_once('=').expect("--delay LISTEN=UPSTREAM");
        let delay = std::time::Duration::from_micros(args.delay_us);
        if let Err(error) = delay::run(listen, upstream, delay) {
            eprintln!("delay: {error}");
            std::process::exit(1);
        }
        return;
    }
    if let Some(bind) = &args.null_server {
        runtime.block_on(null_server::run(bind));
        return;
    }
    let rows = runtime.block_on(scenarios::run_all(&args));
    report::print(&args, &rows);
    share::print(&args, &rows);
}
