//! A real network partition: each node in a network namespace of its own, reaching the others
//! over a bridge and PostgreSQL over a link of its own. The leader's link to the database is
//! cut (its packets dropped in silence: no reset, no error) under a FIFO load and FIFO topic
//! publishes delivered to a real webhook receiver, then restored; and a leader's link to the
//! bridge is cut while a standby's request waits on it, as if its machine had vanished.
//! Needs root (namespaces, links); elsewhere it says it did not run, and in CI it fails.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::binary::{start_in_namespace, Process};
use crate::common::{self, Server};
use crate::database_failover::{keep_consuming, keep_sending, Ledger};
use crate::log_in_database::{cluster, process_server};
use crate::multi_node_shards::until_role;
use crate::webhook_failover::{self as webhooks, Seen};

const GROUPS: usize = 3;

/// Runs `ip ARGS`; whether it succeeded (what it says goes nowhere: removing what a removed
/// namespace took with it fails, and that is fine).
fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn must(args: &[&str]) {
    assert!(ip(args), "ip {}", args.join(" "));
}

/// The namespaces, links and bridge of one test, removed when dropped.
struct Network {
    tag: String,
    nodes: usize,
    /// Held while they exist: every test's network has the same names and addresses.
    _alone: std::sync::MutexGuard<'static, ()>,
}

static ONE_NETWORK_AT_A_TIME: Mutex<()> = Mutex::new(());

impl Network {
    /// `nodes` namespaces: node `n` has 10.78.0.(n+2) on the bridge (the host 10.78.0.1) and
    /// reaches the database at 10.77.n.1 over its own link (itself 10.77.n.2). None when the
    /// namespaces cannot be made.
    fn make(nodes: usize) -> Option<Network> {
        let alone = ONE_NETWORK_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let tag = format!("op{}", std::process::id() % 100_000);
        let network = Network {
            tag,
            nodes,
            _alone: alone,
        };
        let bridge = network.bridge();
        if !ip(&["link", "add", &bridge, "type", "bridge"]) {
            return None;
        }
        must(&["addr", "add", "10.78.0.1/24", "dev", &bridge]);
        must(&["link", "set", &bridge, "up"]);
        for n in 0..nodes {
            let ns = network.namespace(n);
            must(&["netns", "add", &ns]);
            must(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
            // Its link to the bridge.
            let (host, inside) = (
                format!("{}b{n}", network.tag),
                format!("{}c{n}", network.tag),
            );
            must(&[
                "link", "add", &host, "type", "veth", "peer", "name", &inside,
            ]);
            must(&["link", "set", &inside, "netns", &ns]);
            must(&["link", "set", &host, "master", &bridge]);
            must(&["link", "set", &host, "up"]);
            let address = format!("{}/24", network.address(n));
            must(&[
                "netns", "exec", &ns, "ip", "addr", "add", &address, "dev", &inside,
            ]);
            must(&["netns", "exec", &ns, "ip", "link", "set", &inside, "up"]);
            // Its link to the database.
            let (host, inside) = (network.database_link(n), format!("{}e{n}", network.tag));
            must(&[
                "link", "add", &host, "type", "veth", "peer", "name", &inside,
            ]);
            must(&["link", "set", &inside, "netns", &ns]);
            must(&["addr", "add", &format!("10.77.{n}.1/24"), "dev", &host]);
            must(&["link", "set", &host, "up"]);
            let address = format!("10.77.{n}.2/24");
            must(&[
                "netns", "exec", &ns, "ip", "addr", "add", &address, "dev", &inside,
            ]);
            must(&["netns", "exec", &ns, "ip", "link", "set", &inside, "up"]);
        }
        Some(network)
    }

    fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }

    fn namespace(&self, n: usize) -> String {
        format!("{}n{n}", self.tag)
    }

    fn address(&self, n: usize) -> String {
        format!("10.78.0.{}", n + 2)
    }

    fn database_link(&self, n: usize) -> String {
        format!("{}d{n}", self.tag)
    }

    /// Cuts node `n`'s link to the bridge, so to every other node: its packets go nowhere,
    /// unanswered, as when its machine vanishes.
    fn cut_from_the_others(&self, n: usize) {
        must(&["link", "set", &format!("{}b{n}", self.tag), "down"]);
    }

    /// Waits (up to 5 s) until nothing node `n` sent to node `to` waits to be acknowledged:
    /// `ss` lists its connections to it, none with an `unacked` count.
    fn until_acknowledged(&self, n: usize, to: usize) {
        let began = Instant::now();
        loop {
            let listed = Command::new("ip")
                .args(["netns", "exec", &self.namespace(n), "ss", "-tni", "dst"])
                .arg(self.address(to))
                .output()
                .expect("ip runs");
            assert!(listed.status.success(), "ss failed: {listed:?}");
            let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
            let connected = listed.contains(&format!("{}:", self.address(to)));
            if connected && !listed.contains("unacked:") {
                return;
            }
            assert!(
                began.elapsed() < Duration::from_secs(5),
                "still unacknowledged after 5 s: {listed}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Cuts (or restores) node `n`'s link to the database: its packets go nowhere, unanswered.
    fn database_reachable(&self, n: usize, up: bool) {
        let state = if up { "up" } else { "down" };
        must(&["link", "set", &self.database_link(n), state]);
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for n in 0..self.nodes {
            ip(&["netns", "del", &self.namespace(n)]);
            ip(&["link", "del", &self.database_link(n)]);
            ip(&["link", "del", &format!("{}b{n}", self.tag)]);
        }
        ip(&["link", "del", &self.bridge()]);
    }
}

/// Passes connections to `database` (host:port) on from `address` (a port of its own), so a
/// node in a namespace reaches the test's PostgreSQL over its own link. Answers the port.
async fn relay(address: &str, database: String) -> u16 {
    let listener = tokio::net::TcpListener::bind(format!("{address}:0"))
        .await
        .expect("the relay binds");
    let port = listener.local_addr().expect("bound").port();
    tokio::spawn(async move {
        while let Ok((mut incoming, _)) = listener.accept().await {
            let database = database.clone();
            tokio::spawn(async move {
                if let Ok(mut outgoing) = tokio::net::TcpStream::connect(&database).await {
                    let _ = tokio::io::copy_bidirectional(&mut incoming, &mut outgoing).await;
                }
            });
        }
    });
    port
}

#[test]
fn multi_node_a_leader_cut_off_from_the_database_is_replaced_and_rejoins() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(setting) = Setting::make(&runtime, 3, "multi_node_a_leader_cut_off_from_the_database")
    else {
        return;
    };
    let network = &setting.network;
    let mut nodes = Vec::new();
    for n in 0..3 {
        // A manual clock, so what was in flight at the cut can be let go at once.
        let args = ["--clock", "manual", "--fifo-http-subscriptions"];
        nodes.push(setting.start(&runtime, n, &args));
    }
    let servers: Vec<Arc<Server>> = nodes
        .iter()
        .map(|node| Arc::new(process_server(node.addr)))
        .collect();
    assert_eq!(runtime.block_on(cluster(&servers[0]))["role"], "leader");
    let queue = runtime.block_on(common::fifo_queue(&servers[1], "cut.fifo", &[]));
    // Ordered webhooks beside the queue: a receiver on the host's end of the bridge.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let topic = runtime.block_on(async {
        let endpoint = webhooks::start_endpoint("10.78.0.1", seen.clone()).await;
        let topic = common::fifo_topic(&servers[1], "cut-prices.fifo").await;
        webhooks::subscribe(&servers[1], &topic, &endpoint, &seen).await;
        topic
    });
    let published = Arc::new(Mutex::new(Vec::new()));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut work = Vec::new();
    for group in 0..GROUPS {
        work.push(runtime.spawn(webhooks::publish(
            servers[group % 3].clone(),
            topic.clone(),
            group,
            published.clone(),
            stop.clone(),
        )));
    }
    for group in 0..GROUPS {
        let server = servers[group % 3].clone();
        work.push(runtime.spawn(keep_sending(
            server,
            queue.clone(),
            group,
            ledger.clone(),
            stop.clone(),
        )));
    }
    for server in &servers[1..] {
        work.push(runtime.spawn(keep_consuming(
            server.clone(),
            queue.clone(),
            ledger.clone(),
            stop.clone(),
        )));
    }
    let loaded = Instant::now();
    while ledger.lock().expect("ledger").deleted.len() < 50 || seen.lock().unwrap().arrived() < 20 {
        assert!(loaded.elapsed() < Duration::from_secs(60), "no load");
        std::thread::sleep(Duration::from_millis(10));
    }

    network.database_reachable(0, false);
    let cut = Instant::now();
    let sent_at_cut = ledger.lock().expect("ledger").sent.len();
    let new_leader = runtime.block_on(async {
        loop {
            for (at, server) in servers.iter().enumerate().skip(1) {
                if cluster(server).await["role"] == "leader" {
                    return at;
                }
            }
            assert!(cut.elapsed() < Duration::from_secs(30), "nobody leads");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let took = cut.elapsed();
    let takeover = Instant::now();
    let arrived_at_takeover = seen.lock().unwrap().arrived();
    // Group 0 is sent through the node cut off. A send committed just before the cut may be
    // answered just after it; none may be once another node leads (its tenure ended a second
    // before its lease could lapse).
    let through_cut = |ledger: &Ledger| {
        let sent = ledger.sent.iter();
        sent.filter(|body| body.starts_with("g0-")).count()
    };
    let through_cut_at_takeover = through_cut(&ledger.lock().expect("ledger"));
    eprintln!(
        "a leader cut off from the database was replaced in {} ms",
        took.as_millis()
    );
    let lease = orderly::persist::database::lease::LEASE;
    assert!(took < lease + Duration::from_secs(10), "{took:?}");
    // The load goes on through the others.
    let resumed = Instant::now();
    while ledger.lock().expect("ledger").sent.len() < sent_at_cut + 30 {
        assert!(
            resumed.elapsed() < Duration::from_secs(30),
            "no sends after the takeover"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // Notifications go on, from the new leader.
    while seen.lock().unwrap().arrived() < arrived_at_takeover + 20 {
        assert!(
            resumed.elapsed() < Duration::from_secs(30),
            "no notifications after the takeover"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // Cut off and replaced, the old leader acknowledged nothing more.
    let acknowledged = through_cut(&ledger.lock().expect("ledger")) - through_cut_at_takeover;
    assert_eq!(acknowledged, 0, "sends acknowledged by the node cut off");
    // Healed: the old leader follows the new one.
    network.database_reachable(0, true);
    let healed = Instant::now();
    runtime.block_on(async {
        loop {
            let state = cluster(&servers[0]).await;
            if state["role"] == "standby" && state["leader"] == servers[new_leader].url() {
                break;
            }
            assert!(
                healed.elapsed() < Duration::from_secs(30),
                "not a standby: {state}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    runtime.block_on(async {
        for task in work {
            task.await.expect("no task panicked");
        }
    });
    // It stopped sending before its lease could lapse, so before anyone else led.
    let cut_off: std::net::IpAddr = network.address(0).parse().expect("an address");
    let late: Vec<Duration> = (seen.lock().unwrap().senders.iter())
        .filter(|(from, at)| *from == cut_off && *at > takeover)
        .map(|(_, at)| at.duration_since(takeover))
        .collect();
    assert!(
        late.is_empty(),
        "the node cut off sent webhooks after the takeover: {late:?}"
    );
    webhooks::assert_in_order_and_all_arrived(&published.lock().unwrap(), &seen);
    // What was in flight at the cut is let go, then everything left is read back.
    runtime.block_on(common::advance_an_hour(&servers[new_leader]));
    let left: Vec<String> = runtime
        .block_on(common::drain(&servers[new_leader], &queue))
        .into_iter()
        .map(|(body, _)| body)
        .collect();
    let ledger = ledger.lock().expect("ledger");
    ledger.assert_nothing_lost(&left, GROUPS);
    eprintln!(
        "{} sends acknowledged, {} deleted, {} left, none lost",
        ledger.sent.len(),
        ledger.deleted.len(),
        left.len()
    );
}

/// A test's network with the database as its nodes reach it, each through its own link.
struct Setting {
    network: Network,
    /// The test cluster's `host:port`, and the rest of its URL after it.
    database: String,
    rest: String,
}

impl Setting {
    /// A fresh database and `nodes` namespaces; none when there is no test cluster, or when
    /// the namespaces cannot be made (which fails in CI, run as root).
    fn make(runtime: &tokio::runtime::Runtime, nodes: usize, test: &str) -> Option<Setting> {
        let url = runtime.block_on(common::fresh_database())?;
        let Some(network) = Network::make(nodes) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root: the namespaces must be made there"
            );
            eprintln!("{test}: NOT RUN, network namespaces need root");
            return None;
        };
        let (database, rest) = url
            .strip_prefix("postgres://orderly@")
            .and_then(|rest| rest.split_once('/'))
            .expect("a URL of the test cluster");
        Some(Setting {
            network,
            database: database.to_string(),
            rest: rest.to_string(),
        })
    }

    /// Starts node `n` in its namespace with `args`, on the database through its own link.
    fn start(&self, runtime: &tokio::runtime::Runtime, n: usize, args: &[&str]) -> Process {
        let port = runtime.block_on(relay(&format!("10.77.{n}.1"), self.database.clone()));
        let storage = format!("postgres://orderly@10.77.{n}.1:{port}/{}", self.rest);
        let bind = format!("{}:0", self.network.address(n));
        let mut all = vec!["--storage", storage.as_str()];
        all.extend_from_slice(args);
        start_in_namespace(&self.network.namespace(n), &bind, &all, "warn")
    }
}

/// A standby passes a long poll to the leader on their link, then the leader's machine is cut
/// off from it without a word. The kernel's probes on the link notice within seconds, and the
/// client is answered that the outcome is unknown, rather than after the request's whole time
/// (60 s) on a link that will never answer.
#[test]
fn multi_node_a_request_on_a_link_to_a_vanished_machine_is_answered_within_seconds() {
    request_to_a_vanished_machine(&[], "multi_node_a_request_on_a_link_to_a_vanished_machine");
}

/// The same with the standby passing requests as HTTP requests (`--node-link false`): its
/// HTTP client's connections probe as links do.
#[test]
fn multi_node_a_request_over_http_to_a_vanished_machine_is_answered_within_seconds() {
    request_to_a_vanished_machine(
        &["--node-link", "false"],
        "multi_node_a_request_over_http_to_a_vanished_machine",
    );
}

/// A long poll passed from a standby started with `standby_args` to the leader, whose machine
/// then vanishes: answered as of unknown outcome within seconds.
fn request_to_a_vanished_machine(standby_args: &[&str], test: &str) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(setting) = Setting::make(&runtime, 2, test) else {
        return;
    };
    let network = &setting.network;
    let mut nodes = Vec::new();
    let mut servers = Vec::new();
    for n in 0..2 {
        let node = setting.start(&runtime, n, if n == 0 { &[] } else { standby_args });
        let server = process_server(node.addr);
        // The first leads; the second finds the lease held.
        let role = if n == 0 { "leader" } else { "standby" };
        runtime.block_on(until_role(&server, role, Duration::from_secs(30)));
        nodes.push(node);
        servers.push(server);
    }
    let queue = runtime.block_on(common::create_queue(&servers[0], "vanish", &[]));
    let waiting = runtime.spawn({
        let standby = process_server(nodes[1].addr);
        async move {
            let params = [
                ("Action", "ReceiveMessage"),
                ("QueueUrl", queue.as_str()),
                ("WaitTimeSeconds", "20"),
            ];
            common::query(&standby, "/", &params).await
        }
    });
    // Parked at the leader, passed on by the standby, and acknowledged: the connection is
    // idle at the cut, the long poll waiting for its answer. (A request still unacknowledged
    // at a cut is bounded on a link by its own time instead.)
    runtime.block_on(common::long_polls_parked(&servers[1], 1));
    network.until_acknowledged(1, 0);
    network.cut_from_the_others(0);
    let cut = Instant::now();
    let (status, body) = runtime.block_on(waiting).expect("the request task");
    let took = cut.elapsed();
    eprintln!(
        "{test}: answered {} ms after the cut: {status} {body}",
        took.as_millis()
    );
    assert_ne!(
        status, 200,
        "no answer could have come from the leader: {body}"
    );
    assert!(
        body.contains("may or may not have taken effect"),
        "the outcome is not known, and the answer says so: {body}"
    );
    // The probes begin after 5 s idle, three a second apart: well before the long poll's
    // 20 s, let alone the request's 60.
    assert!(
        took < Duration::from_secs(15),
        "answered {took:?} after the cut"
    );
}
