//! Nodes on a database stopped cleanly leave nothing of theirs behind: no lease held, no
//! announcement among the live nodes, even when stopped halfway through coming to lead.

use std::time::{Duration, Instant};

use crate::binary::start;
use crate::common;
use crate::log_in_database::{database, process_server, signal, until_it_leads, until_standby_of};
use crate::snapshot_cut::until_reached;

/// Whether shard 0's lease is given up (and whose epoch it was), and how many nodes the home
/// lists.
async fn left_behind(url: &str) -> (bool, i64, i64) {
    let client = database(url).await;
    let lease = (client.query_one(
        "SELECT expires = '-infinity', epoch FROM log_shards WHERE shard = 0",
        &[],
    ))
    .await
    .expect("the lease row");
    let nodes = (client
        .query_one("SELECT count(*) FROM log_nodes", &[])
        .await)
        .expect("counted");
    (lease.get(0), lease.get(1), nodes.get(0))
}

/// A standby that took the lease as the leader stopped, held (a test hook) once it leads its
/// first shard, is stopped there: within the lease's wait for that work, it gives up the
/// lease its promotion took and takes its announcement back, so the next node need not wait
/// out either; once let go on, the process ends cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_node_a_standby_stopped_while_it_comes_to_lead_leaves_no_lease_nor_announcement() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let (dir, hooks) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let hooks_dir = hooks.path().to_str().expect("a UTF-8 path");
    let mut leader = start(dir.path(), &["--storage", &url], "warn");
    let on_leader = process_server(leader.addr);
    until_it_leads(&on_leader).await;
    let with_hooks = ["--storage", &url, "--test-hooks", hooks_dir];
    let mut standby = start(dir.path(), &with_hooks, "warn");
    until_standby_of(&process_server(standby.addr), &on_leader).await;

    std::fs::write(hooks.path().join("pause-promotion"), b"").expect("asked");
    signal(&leader, "-TERM");
    assert!(leader.child.wait().expect("ended").success());
    until_reached(hooks.path(), "promotion-paused").await;
    let (given_up, epoch, _) = left_behind(&url).await;
    assert!(
        !given_up && epoch == 2,
        "the standby holds the lease it took"
    );

    signal(&standby, "-TERM");
    let stopped = Instant::now();
    let deadline = stopped + Duration::from_secs(20);
    loop {
        let left = left_behind(&url).await;
        if left == (true, 2, 0) {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "a standby stopped while coming to lead left nothing behind {} ms later",
        stopped.elapsed().as_millis()
    );
    std::fs::remove_file(hooks.path().join("pause-promotion")).expect("let go on");
    let ended = Instant::now();
    while standby.child.try_wait().expect("waited").is_none() {
        assert!(
            ended.elapsed() < Duration::from_secs(20),
            "the standby never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(left_behind(&url).await, (true, 2, 0), "nothing taken again");
}
