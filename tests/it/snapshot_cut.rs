//! Snapshots against what is durable, with the real binary held at the exact moment from
//! outside (`--test-hooks`): a snapshot cut while the log holds records back is never kept
//! before they are written, so a crash or a takeover right then loses nothing that comes after;
//! a leader frozen inside a snapshot's keep, the lease's row locked, is replaced within the
//! lease; and a keep whose commit's answer is lost leaves a snapshot the next leader recovers
//! from.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::binary::{start, Process};
use crate::common::{self, Server};
use crate::log_in_database::{database, process_server, signal, until_it_leads, until_standby_of};

/// Waits (a bound of 20 s, polling: the server answers a hook by making a file) until the
/// server says it got to `point`.
pub(crate) async fn until_reached(hooks: &Path, point: &str) {
    let started = Instant::now();
    while !hooks.join(point).exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never got to {point}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn ask(hooks: &Path, point: &str) {
    std::fs::write(hooks.join(point), b"").expect("a hook asked for");
}

/// A FIFO queue deduplicating by content.
async fn fifo(server: &Server) -> String {
    common::fifo_queue(server, "cut.fifo", &[("ContentBasedDeduplication", "true")]).await
}

async fn send(server: &Server, queue: &str, body: &str) {
    (server.sqs.send_message())
        .queue_url(queue)
        .message_group_id("g")
        .message_body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("send {body}: {e:?}"));
}

/// The queue's bodies, looked at without receiving them.
async fn peek(server: &Server) -> Vec<String> {
    let listed = common::get_json(server, "/_orderly/queues/cut.fifo/messages").await;
    let messages = listed["messages"].as_array();
    let messages = messages.unwrap_or_else(|| panic!("no messages: {listed}"));
    messages
        .iter()
        .map(|m| m["body"].as_str().expect("a body").to_string())
        .collect()
}

/// Holds the leader's log, sends a message it never writes (so never acknowledges), and has a
/// snapshot cut over it; returns once every part is cut, the unanswered send still running.
async fn cut_over_a_held_record(
    hooks: &Path,
    server: &Server,
    queue: &str,
) -> tokio::task::JoinHandle<()> {
    ask(hooks, "hold-log");
    until_reached(hooks, "log-held").await;
    let unanswered = {
        let (sqs, queue) = (server.sqs.clone(), queue.to_string());
        tokio::spawn(async move {
            let once = aws_sdk_sqs::config::Config::builder()
                .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled());
            let sent = sqs.send_message().queue_url(queue).message_group_id("g");
            let sent = sent.message_body("never written");
            let answer = sent.customize().config_override(once).send().await;
            assert!(answer.is_err(), "a send acknowledged though never written");
        })
    };
    // In the engine, so in the log's queue, before the snapshot is asked for.
    let started = Instant::now();
    while !peek(server)
        .await
        .iter()
        .any(|body| body == "never written")
    {
        assert!(started.elapsed() < Duration::from_secs(20), "never sent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ask(hooks, "take-snapshot");
    until_reached(hooks, "snapshot-cut").await;
    unanswered
}

/// Asserts, over half a second (long enough for a snapshot to be renamed or committed, had it
/// not waited for the log), that `kept` does not change.
async fn assert_not_kept<F: std::future::Future<Output = u64>>(kept: impl Fn() -> F) {
    let before = kept().await;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(500) {
        assert_eq!(
            kept().await,
            before,
            "a snapshot kept past what the log wrote"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Snapshot files in a data directory.
fn snapshot_files(dir: &Path) -> u64 {
    let entries = std::fs::read_dir(dir).expect("the data directory");
    let names = entries.map(|e| e.expect("an entry").file_name());
    names
        .filter(|name| name.to_string_lossy().ends_with(".snap"))
        .count() as u64
}

/// SIGKILL, and wait for the process to be gone.
fn kill(mut process: Process) {
    process.child.kill().expect("SIGKILL");
    process.child.wait().expect("gone");
}

/// SIGTERM (the lease given up, so the next node leads at once), and wait for the exit.
fn stop(mut process: Process) {
    signal(&process, "-TERM");
    process.child.wait().expect("stopped");
}

/// On a data directory: SIGKILL while a snapshot waits for held records. Neither the held
/// record nor the snapshot is there after the restart, and what the restarted server writes
/// next (numbered from where the log, not the snapshot, ended) comes back at every start after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_cut_past_what_the_log_wrote_is_not_kept_across_sigkill() {
    let (dir, hooks) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let hooks_dir = hooks.path().to_str().expect("a UTF-8 path");
    let first = start(dir.path(), &["--test-hooks", hooks_dir], "warn");
    let server = process_server(first.addr);
    let queue = fifo(&server).await;
    send(&server, &queue, "durable").await;
    let unanswered = cut_over_a_held_record(hooks.path(), &server, &queue).await;
    assert_not_kept(|| async { snapshot_files(dir.path()) }).await;
    kill(first);
    unanswered.await.expect("no panic");

    let restarted = start(dir.path(), &[], "warn");
    let server = process_server(restarted.addr);
    assert_eq!(peek(&server).await, ["durable"]);
    send(&server, &queue, "after the restart").await;
    kill(restarted);
    for restart in 0..2 {
        let again = start(dir.path(), &[], "warn");
        let server = process_server(again.addr);
        assert_eq!(
            peek(&server).await,
            ["durable", "after the restart"],
            "restart {restart} after"
        );
        kill(again);
    }
}

/// A leader on a database, held from outside through `hooks`, and a standby.
struct TwoNodes {
    dir: tempfile::TempDir,
    hooks: tempfile::TempDir,
    leader: Process,
    on_leader: Server,
    standby: Process,
    on_standby: Server,
}

impl TwoNodes {
    async fn start(url: &str) -> TwoNodes {
        let (dir, hooks) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let hooks_dir = hooks.path().to_str().expect("a UTF-8 path");
        let on_log = ["--storage", url];
        let with_hooks = [&on_log[..], &["--test-hooks", hooks_dir]].concat();
        let leader = start(dir.path(), &with_hooks, "warn");
        let on_leader = process_server(leader.addr);
        until_it_leads(&on_leader).await;
        let standby = start(dir.path(), &on_log, "warn");
        let on_standby = process_server(standby.addr);
        TwoNodes {
            dir,
            hooks,
            leader,
            on_leader,
            standby,
            on_standby,
        }
    }
}

/// Snapshots kept in the database at `url`.
async fn kept_in_database(url: &str) -> u64 {
    let client = database(url).await;
    let row = client
        .query_one("SELECT count(*) FROM log_snapshots", &[])
        .await
        .expect("counted");
    row.get::<_, i64>(0) as u64
}

/// The next node leads with `before` in the queue; what it sends then comes back after two
/// more takeovers (each node stopped cleanly, so the next leads at once).
async fn leads_and_keeps_what_it_writes(
    (node, server): (Process, Server),
    url: &str,
    dir: &Path,
    queue: &str,
    before: &[&str],
) {
    until_it_leads(&server).await;
    assert_eq!(peek(&server).await, before);
    send(&server, queue, "after the takeover").await;
    stop(node);
    let after = [before, &["after the takeover"]].concat();
    for takeover in 0..2 {
        let next = start(dir, &["--storage", url], "warn");
        let server = process_server(next.addr);
        until_it_leads(&server).await;
        assert_eq!(peek(&server).await, after, "takeover {takeover} after");
        stop(next);
    }
}

/// On a database: the leader SIGKILLed while a snapshot waits for held records. The next
/// leader's writes come back after two more takeovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_node_a_snapshot_cut_past_what_the_log_wrote_is_not_kept_across_a_takeover() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let TwoNodes {
        dir,
        hooks,
        leader,
        on_leader,
        standby,
        on_standby,
    } = TwoNodes::start(&url).await;
    let queue = fifo(&on_leader).await;
    send(&on_leader, &queue, "durable").await;
    let unanswered = cut_over_a_held_record(hooks.path(), &on_leader, &queue).await;
    assert_not_kept(|| kept_in_database(&url)).await;
    kill(leader);
    unanswered.await.expect("no panic");

    let next = (standby, on_standby);
    leads_and_keeps_what_it_writes(next, &url, dir.path(), &queue, &["durable"]).await;
}

/// A leader frozen (SIGSTOP) inside a snapshot's keep, its transaction holding the lease's row:
/// the standby takes over within the lease and a few seconds (the database ends the frozen
/// transaction), and the leader, woken, steps down without keeping its snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_node_a_leader_frozen_inside_a_snapshot_keep_is_replaced_within_the_lease() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let TwoNodes {
        dir: _dir,
        hooks,
        leader,
        on_leader,
        standby,
        on_standby,
    } = TwoNodes::start(&url).await;
    let queue = fifo(&on_leader).await;
    send(&on_leader, &queue, "before").await;
    let kept_before = kept_in_database(&url).await;

    ask(hooks.path(), "pause-snapshot-keep");
    ask(hooks.path(), "take-snapshot");
    until_reached(hooks.path(), "snapshot-keep-paused").await;
    signal(&leader, "-STOP");
    let took = until_it_leads(&on_standby).await;
    eprintln!(
        "a leader frozen inside a snapshot keep was replaced in {} ms",
        took.as_millis()
    );
    let lease = orderly::persist::database::lease::LEASE;
    assert!(took < lease + Duration::from_secs(5), "{took:?}");
    send(&on_standby, &queue, "after the takeover").await;

    std::fs::remove_file(hooks.path().join("pause-snapshot-keep")).expect("the pause ended");
    signal(&leader, "-CONT");
    until_standby_of(&on_leader, &on_standby).await;
    assert_eq!(
        kept_in_database(&url).await,
        kept_before,
        "a deposed leader's snapshot kept"
    );
    assert_eq!(peek(&on_leader).await, ["before", "after the takeover"]);
    drop((leader, standby));
}

/// A standby that missed batches a snapshot then dropped (frozen while the leader wrote and
/// kept it), with no batch written after: the gap shows only in the snapshot. Coming to lead
/// once the leader is killed, it starts over from that snapshot rather than lead without what
/// was dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_node_a_standby_that_missed_what_a_snapshot_dropped_leads_with_all_of_it() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let TwoNodes {
        dir,
        hooks,
        leader,
        on_leader,
        standby,
        on_standby,
    } = TwoNodes::start(&url).await;
    signal(&standby, "-STOP");
    let queue = fifo(&on_leader).await;
    send(&on_leader, &queue, "one").await;
    send(&on_leader, &queue, "two").await;
    ask(hooks.path(), "take-snapshot");
    let started = Instant::now();
    while kept_in_database(&url).await == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no snapshot kept"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    kill(leader);
    signal(&standby, "-CONT");

    let next = (standby, on_standby);
    leads_and_keeps_what_it_writes(next, &url, dir.path(), &queue, &["one", "two"]).await;
}

/// A snapshot's keep that committed in the database but whose answer the leader never got
/// (the relay between them passes the `COMMIT` on and loses its answer): the leader, unsure,
/// must not remove the snapshot's chunks, since the log may now start from it (its older
/// batches are gone). The leader is then killed; a new node recovers from that snapshot with
/// every message, and what it writes next comes back after two more takeovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_node_a_snapshot_keep_whose_commit_answer_was_lost_is_recovered_from() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let relay = crate::answer_losing_relay::Relay::start(&url);
    let (dir, hooks) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let hooks_dir = hooks.path().to_str().expect("a UTF-8 path");
    let through_relay = ["--storage", &relay.url, "--test-hooks", hooks_dir];
    let leader = start(dir.path(), &through_relay, "warn");
    let on_leader = process_server(leader.addr);
    until_it_leads(&on_leader).await;
    let queue = fifo(&on_leader).await;
    send(&on_leader, &queue, "one").await;
    send(&on_leader, &queue, "two").await;

    relay.lose_the_commit_answer_after("INSERT INTO log_snapshots (");
    ask(hooks.path(), "take-snapshot");
    until_reached(hooks.path(), "snapshot-keep-failed").await;
    assert!(relay.lost(), "the keep failed before its commit was sent");
    assert_eq!(kept_in_database(&url).await, 1, "the keep did not commit");
    let client = database(&url).await;
    let chunks = client
        .query_one(
            "SELECT count(*) FROM log_snapshot_chunks c \
             JOIN log_shards l ON l.snapshot = c.snapshot",
            &[],
        )
        .await
        .expect("counted");
    assert!(
        chunks.get::<_, i64>(0) > 0,
        "the chunks of a snapshot the log starts from were removed"
    );
    kill(leader);

    let next = start(dir.path(), &["--storage", &url], "warn");
    let on_next = process_server(next.addr);
    leads_and_keeps_what_it_writes((next, on_next), &url, dir.path(), &queue, &["one", "two"])
        .await;
}
