//! The log in a highly available PostgreSQL, failed over under load: pg_auto_failover with a
//! monitor, a primary and a synchronous secondary (`scripts/postgres-ha`), two Orderly nodes
//! given both hosts with `target_session_attrs=read-write`. The primary is killed with SIGKILL,
//! or frozen with SIGSTOP and woken once the secondary took over, while FIFO sends, receives and
//! deletes run through both nodes; no node is restarted.
//! Checked: nothing acknowledged is lost, nothing whose delete was acknowledged comes back,
//! every group stays in order, and the service comes back by itself.

use std::collections::HashSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;

const GROUPS: usize = 4;

/// A pg_auto_failover cluster of this test's own; stopped and removed when dropped.
struct HaCluster {
    url: String,
    dir: String,
}

impl HaCluster {
    /// None (the test passes vacuously, saying so) where pg_auto_failover is not installed,
    /// outside CI; CI installs it, so there a missing one fails the test.
    fn start() -> Option<HaCluster> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/postgres-ha");
        let output = Command::new(script)
            .arg("start")
            .output()
            .expect("scripts/postgres-ha runs");
        if output.status.code() == Some(3) {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must have pg_auto_failover: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            eprintln!("skipped: no pg_auto_failover (apt-get install pg-auto-failover-cli)");
            return None;
        }
        assert!(
            output.status.success(),
            "the HA cluster did not start: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let printed = String::from_utf8(output.stdout).expect("UTF-8");
        let (url, dir) = printed.trim().split_once(' ').expect("URL DIR");
        Some(HaCluster {
            url: url.into(),
            dir: dir.into(),
        })
    }

    fn run(&self, args: &[&str]) -> String {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/postgres-ha");
        let output = Command::new(script)
            .args(args)
            .output()
            .expect("scripts/postgres-ha runs");
        assert!(
            output.status.success(),
            "postgres-ha {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout)
            .expect("UTF-8")
            .trim()
            .into()
    }

    fn primary(&self) -> String {
        self.run(&["primary", &self.dir])
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/postgres-ha");
        let _ = Command::new(script).args(["stop", &self.dir]).status();
    }
}

/// What the clients were told.
#[derive(Default)]
pub(crate) struct Ledger {
    /// Sends acknowledged.
    pub(crate) sent: Vec<String>,
    /// Sends not acknowledged (the SDK's tries may have stored one).
    pub(crate) maybe_sent: HashSet<String>,
    /// Deletes acknowledged: never to come back.
    pub(crate) deleted: HashSet<String>,
    /// Deletes not acknowledged: may or may not have taken effect.
    pub(crate) maybe_deleted: HashSet<String>,
    /// When a send was last acknowledged.
    pub(crate) last_ack: Option<Instant>,
}

impl Ledger {
    /// Every acknowledged send is in `left` or was deleted, none deleted came back, and each
    /// of `groups` is in order.
    pub(crate) fn assert_nothing_lost(&self, left: &[String], groups: usize) {
        common::assert_nothing_lost(left, &self.sent, &self.deleted, &self.maybe_deleted, groups);
    }
}

/// Sends to `group` until told to stop, going on after failures.
pub(crate) async fn keep_sending(
    server: Arc<common::Server>,
    queue: String,
    group: usize,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) {
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let body = format!("g{group}-{i:05}");
        let sent = server
            .sqs
            .send_message()
            .queue_url(&queue)
            .message_group_id(format!("g{group}"))
            .message_body(&body)
            .message_deduplication_id(&body)
            .send()
            .await;
        let failed = {
            let mut ledger = ledger.lock().expect("ledger");
            match sent {
                Ok(_) => {
                    ledger.sent.push(body);
                    ledger.last_ack = Some(Instant::now());
                    false
                }
                // Whatever the last try said, an earlier one may have been stored.
                Err(_) => {
                    ledger.maybe_sent.insert(body);
                    true
                }
            }
        };
        if failed {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        i += 1;
    }
}

/// Receives and deletes until told to stop, going on after failures.
pub(crate) async fn keep_consuming(
    server: Arc<common::Server>,
    queue: String,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::Relaxed) {
        let got = server
            .sqs
            .receive_message()
            .queue_url(&queue)
            .max_number_of_messages(5)
            .send()
            .await;
        let Ok(got) = got else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        for message in got.messages.unwrap_or_default() {
            let deleted = server
                .sqs
                .delete_message()
                .queue_url(&queue)
                .receipt_handle(message.receipt_handle().unwrap_or_default())
                .send()
                .await;
            let body = message.body().unwrap_or_default().to_string();
            let mut ledger = ledger.lock().expect("ledger");
            if deleted.is_ok() {
                ledger.deleted.insert(body);
            } else {
                ledger.maybe_deleted.insert(body);
            }
        }
    }
}

/// The node that leads, with its epoch, if one does.
async fn leader(servers: &[Arc<common::Server>]) -> Option<(Arc<common::Server>, u64)> {
    for server in servers {
        let Ok(answer) = reqwest::get(format!("{}/_orderly/cluster", server.url())).await else {
            continue;
        };
        let Ok(text) = answer.text().await else {
            continue;
        };
        let state: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        if state["role"] == "leader" {
            return Some((server.clone(), state["epoch"].as_u64().unwrap_or(0)));
        }
    }
    None
}

/// Every message left, received and deleted through `server` (trying again while it fails).
async fn drain(server: &common::Server, queue: &str) -> Vec<String> {
    let mut left = Vec::new();
    let started = Instant::now();
    loop {
        assert!(started.elapsed() < Duration::from_secs(60), "never drained");
        let got = server
            .sqs
            .receive_message()
            .queue_url(queue)
            .max_number_of_messages(10)
            .send()
            .await;
        let Ok(got) = got else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            return left;
        }
        for message in messages {
            left.push(message.body().unwrap_or_default().to_string());
            let handle = message.receipt_handle().unwrap_or_default();
            // Tried again while it fails: the handle holds for the visibility timeout.
            let mut tries = 0;
            while let Err(error) = server
                .sqs
                .delete_message()
                .queue_url(queue)
                .receipt_handle(handle)
                .send()
                .await
            {
                tries += 1;
                assert!(tries < 50, "a delete kept failing: {error:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// How the primary fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// SIGKILL of its keeper and its postgres: the machine gone.
    Killed,
    /// SIGSTOP of both until the secondary was promoted, then SIGCONT while the load runs: a
    /// machine that hung and came back.
    Frozen,
}

#[test]
fn a_primary_killed_under_load_loses_nothing_and_needs_no_restart() {
    fail_over_under_load(Failure::Killed);
}

#[test]
fn a_primary_frozen_under_load_loses_nothing_and_needs_no_restart() {
    fail_over_under_load(Failure::Frozen);
}

fn fail_over_under_load(failure: Failure) {
    let Some(ha) = HaCluster::start() else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    // A manual clock, so what was in flight when the database failed can be let go at once.
    let args = ["--storage", ha.url.as_str(), "--clock", "manual"];
    let nodes = [
        crate::binary::start(dir.path(), &args, "warn"),
        crate::binary::start(dir.path(), &args, "warn"),
    ];
    let servers: Vec<Arc<common::Server>> = nodes
        .iter()
        .map(|node| {
            Arc::new(common::Server {
                addr: node.addr,
                sqs: common::client(node.addr),
                sns: common::sns_client(node.addr),
                others: Vec::new(),
            })
        })
        .collect();
    let queue = runtime.block_on(common::fifo_queue(&servers[1], "failover.fifo", &[]));
    // pg_auto_failover's secondary is synchronous and the URL asks for a read-write host: the
    // leader says an acknowledged write survives the failover to come.
    let states = runtime.block_on(async {
        let mut states = Vec::new();
        for server in &servers {
            states.push(crate::log_in_database::cluster(server).await);
        }
        states
    });
    let leading = states.iter().find(|s| s["role"] == "leader");
    let leading = leading.unwrap_or_else(|| panic!("no leader: {states:?}"));
    assert_eq!(leading["replication"]["synchronous"], true, "{leading}");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut work = Vec::new();
    for group in 0..GROUPS {
        let (server, queue) = (servers[group % 2].clone(), queue.clone());
        let (ledger, stop) = (ledger.clone(), stop.clone());
        work.push(runtime.spawn(keep_sending(server, queue, group, ledger, stop)));
    }
    for server in &servers {
        let (server, queue) = (server.clone(), queue.clone());
        let (ledger, stop) = (ledger.clone(), stop.clone());
        work.push(runtime.spawn(keep_consuming(server, queue, ledger, stop)));
    }
    let until = |what: &str, done: &dyn Fn(&Ledger) -> bool| {
        let started = Instant::now();
        while !done(&ledger.lock().expect("ledger")) {
            assert!(started.elapsed() < Duration::from_secs(90), "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    until("no load", &|l| l.sent.len() >= 100 && l.deleted.len() >= 30);

    let primary = ha.primary();
    let signal = match failure {
        Failure::Killed => "kill",
        Failure::Frozen => "freeze",
    };
    ha.run(&[signal, &ha.dir, &primary]);
    let failed = Instant::now();
    until("the service never came back", &|l| {
        l.last_ack
            .is_some_and(|at| at > failed + Duration::from_millis(500))
    });
    let back = failed.elapsed();
    eprintln!(
        "the database's primary {failure:?}; sends acknowledged again after {} ms",
        back.as_millis()
    );
    let new_primary = ha.primary();
    assert_ne!(
        new_primary, primary,
        "pg_auto_failover promoted the secondary"
    );
    if failure == Failure::Frozen {
        // The old primary wakes under load, believing for a moment it still is one.
        ha.run(&["thaw", &ha.dir, &primary]);
    }
    // Some more load on the new primary.
    let acknowledged = ledger.lock().expect("ledger").sent.len();
    until("no load after", &|l| l.sent.len() >= acknowledged + 50);
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(async {
        for task in work {
            task.await.expect("no task panicked");
        }
    });

    // Through whichever node leads now: what was in flight is let go (its clock moved), then
    // all is taken. Again if leadership moved meanwhile: a node that reached the woken old
    // primary before it demoted itself found the lease there stale and gave up leading, as it
    // must, and the next leader's clock has not moved.
    let left = runtime.block_on(async {
        let mut left = Vec::new();
        let started = Instant::now();
        loop {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "no steady leader"
            );
            let Some((leading, epoch)) = leader(&servers).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let moved = reqwest::Client::new()
                .post(format!("{}/_orderly/clock", leading.url()))
                .body(r#"{"advance": "1h"}"#)
                .send()
                .await;
            if !moved.is_ok_and(|answer| answer.status().is_success()) {
                continue;
            }
            left.extend(drain(&leading, &queue).await);
            if leader(&servers).await.is_some_and(|(_, now)| now == epoch) {
                return left;
            }
        }
    });
    let ledger = ledger.lock().expect("ledger");
    ledger.assert_nothing_lost(&left, GROUPS);
    assert!(
        back < Duration::from_secs(60),
        "the service took {back:?} to come back"
    );
}
