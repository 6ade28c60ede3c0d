//! A node's keeper of leases, against the test cluster: it renews every shard it holds in one
//! statement, loses them together or each on its own, and hands one off while it keeps the
//! others.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection::Blocking;
use super::keeper::{Held, HeldShard, Keeper, Leads};
use super::lease::{self, Fence};
use super::schema;
use super::tests::{connect, database, number, sql};
use crate::clock::{Clock, DatabaseClock};
use crate::engine::Timestamp;
use crate::persist::tenure::Tenure;
use crate::persist::writer::LogWriter;

/// One shard as the test watches it: its log and its tenure.
struct Watched {
    log_writer: Arc<LogWriter>,
    tenure: Arc<Tenure>,
}

impl Watched {
    /// Whether the shard's log may still acknowledge (its tenure holds and it has not failed).
    fn leads(&self) -> bool {
        self.tenure.holds() && !self.log_writer.failed()
    }
}

/// A keeper of the leases of `shards` (taken now, as the node at `http://node`) that `leads`
/// them so, and each shard's log and tenure.
fn keeper_of(url: &str, admin: &mut Blocking, leading: (&[i32], Leads)) -> (Keeper, Vec<Watched>) {
    let clock = Arc::new(crate::clock::ManualClock::new(Timestamp(7)));
    keeper_on(url, admin, leading, clock)
}

/// As `keeper_of`, with the node's clock `clock`.
fn keeper_on(
    url: &str,
    admin: &mut Blocking,
    (shards, leads): (&[i32], Leads),
    clock: Arc<dyn Clock>,
) -> (Keeper, Vec<Watched>) {
    let mut held: Vec<(HeldShard, Instant)> = shards
        .iter()
        .map(|&shard| {
            let (taken, at) =
                lease::acquire(admin, shard, "node", "http://node", true).expect("a free lease");
            let fence = Fence {
                shard,
                epoch: taken.epoch,
            };
            let (log_writer, tenure) = (LogWriter::new(), Arc::new(Tenure::not_begun()));
            let shard = HeldShard {
                site: 0,
                fence,
                log_writer,
                tenure,
            };
            (shard, at)
        })
        .collect();
    let watched = (held.iter())
        .map(|(s, _)| Watched {
            log_writer: s.log_writer.clone(),
            tenure: s.tenure.clone(),
        })
        .collect();
    let first = held.remove(0);
    let node = Held {
        announced: None,
        leads,
        clock,
        replication: (Default::default(), vec![((1, false), "home".into())]),
    };
    let keeper = Keeper::start(vec![connect(url)], first, node).expect("a thread");
    for (shard, at) in held {
        keeper.add(shard, at).expect("a keeper renewing");
    }
    (keeper, watched)
}

/// Whether `keeper` has said it lost a lease, within `wait`.
fn lost_within(keeper: &Keeper, wait: Duration) -> bool {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async { tokio::time::timeout(wait, keeper.lost()).await.is_ok() })
}

/// A node's keeper renews every shard it holds; once another node takes one of them, no log of
/// the node acknowledges anything more (it leads every shard or none), the keeper gives the
/// others up and says it lost, and takes no more shards. A keeper given up gives every lease
/// up at once.
#[test]
fn one_keeper_holds_every_shard_of_a_node_and_loses_them_together() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 3).expect("tables");
    let (first, watched) = keeper_of(&url, &mut admin, (&[0, 1], Leads::Every));
    assert_eq!(watched.len(), 2);
    assert!(watched.iter().all(|tenure| tenure.tenure.holds()));
    // Another node takes shard 1: at the next renewal, every shard's log stops acknowledging.
    sql(
        &mut admin,
        "UPDATE log_shards SET epoch = epoch + 1 WHERE shard = 1",
    );
    assert!(
        lost_within(&first, Duration::from_secs(10)),
        "the keeper never said it lost a lease"
    );
    // A backend acknowledges nothing outside its tenure (`Embedded::within`).
    assert!(
        watched.iter().all(|shard| !shard.tenure.holds()),
        "every shard's tenure ended"
    );
    // The lease another node did not take is given up, for the next leader to take at once.
    let free = "SELECT count(*) FROM log_shards WHERE shard = 0 AND expires = '-infinity'";
    assert_eq!(number(&mut admin, free.into()), 1, "shard 0 given up");
    // A keeper that stopped takes no more shards.
    let late = HeldShard {
        site: 0,
        fence: Fence { shard: 2, epoch: 1 },
        log_writer: LogWriter::new(),
        tenure: Arc::new(Tenure::not_begun()),
    };
    let tenure = late.tenure.clone();
    assert!(first.add(late, Instant::now()).is_err());
    assert!(!tenure.holds(), "a shard refused is never held");
    // Given up, a keeper of all three lets every lease go in one statement.
    sql(&mut admin, "UPDATE log_shards SET expires = '-infinity'");
    let (second, _) = keeper_of(&url, &mut admin, (&[0, 1, 2], Leads::Every));
    let held = "SELECT count(*) FROM log_shards WHERE expires > now()";
    assert_eq!(number(&mut admin, held.into()), 3);
    second.release();
    assert_eq!(number(&mut admin, held.into()), 0, "every lease given up");
    second.release();
}

/// A keeper hands one shard's lease off: that shard's log acknowledges nothing more from that
/// moment and another node takes the lease at once, in the next epoch, while the keeper goes on
/// renewing the other shards and leading them. A shard it does not hold is not handed off.
#[test]
fn a_keeper_hands_one_shard_off_and_keeps_leading_the_others() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 3).expect("tables");
    let (keeper, watched) = keeper_of(&url, &mut admin, (&[0, 1, 2], Leads::Every));
    assert!(watched.iter().all(Watched::leads));
    let epoch_of_1 = "SELECT epoch FROM log_shards WHERE shard = 1";
    let handed_epoch = number(&mut admin, epoch_of_1.into());
    assert!(keeper.hand_off(1, Timestamp(9)));
    assert!(
        !watched[1].leads(),
        "the shard handed off stops acknowledging"
    );
    assert!(watched[0].leads() && watched[2].leads());
    assert_eq!(keeper.held(), [0, 2]);
    // Free at once for the next node, which does not wait the lease out.
    let (taken, _) = lease::acquire(&mut admin, 1, "other", "http://other", false)
        .expect("the lease handed off is free at once");
    assert_eq!(taken.epoch, handed_epoch + 1);
    // Two renewals later the keeper still leads shards 0 and 2 and has lost nothing: it no
    // longer renews the shard the other node leads now.
    let expires = |admin: &mut Blocking| {
        let query = "SELECT (extract(epoch FROM expires) * 1000000)::bigint \
                     FROM log_shards WHERE shard = 0";
        number(admin, query.into())
    };
    let mut renewals = 0;
    let mut last = expires(&mut admin);
    let deadline = Instant::now() + Duration::from_secs(10);
    while renewals < 2 {
        assert!(Instant::now() < deadline, "shard 0's lease was not renewed");
        std::thread::sleep(Duration::from_millis(50));
        let now = expires(&mut admin);
        if now > last {
            renewals += 1;
            last = now;
        }
    }
    assert!(!lost_within(&keeper, Duration::ZERO), "nothing was lost");
    assert!(watched[0].leads() && watched[2].leads());
    let other = "SELECT count(*) FROM log_shards WHERE shard = 1 AND url = 'http://other' \
                 AND expires > now()";
    assert_eq!(
        number(&mut admin, other.into()),
        1,
        "shard 1 stays the other node's"
    );
    assert!(!keeper.hand_off(1, Timestamp(9)), "a shard not held");
    keeper.release();
    let held = "SELECT count(*) FROM log_shards WHERE url = 'http://node' AND expires > now()";
    assert_eq!(number(&mut admin, held.into()), 0, "the rest given up");
    // A keeper that stopped hands nothing off: what it held, it gave up itself, and it
    // renews none.
    assert!(!keeper.hand_off(0, Timestamp(9)));
    assert!(keeper.held().is_empty());
}

/// A keeper whose node leads each shard on its own loses only the shard another node takes:
/// that shard's log acknowledges nothing more and the keeper says which it was, while it goes
/// on renewing and leading the others. Losing the last one is losing them all.
#[test]
fn a_keeper_of_shards_led_each_on_its_own_loses_only_the_one_taken() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 3).expect("tables");
    let (keeper, watched) = keeper_of(&url, &mut admin, (&[0, 1, 2], Leads::Each));
    let mut taken_away = keeper.taken_away();
    sql(
        &mut admin,
        "UPDATE log_shards SET epoch = epoch + 1 WHERE shard = 1",
    );
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let found = runtime.block_on(async {
        let waited = taken_away.wait_for(|away| !away.is_empty());
        tokio::time::timeout(Duration::from_secs(10), waited)
            .await
            .map(|away| away.expect("a keeper").clone())
    });
    assert_eq!(found.expect("found within 10 s"), [1]);
    assert!(!watched[1].leads(), "the shard taken stops acknowledging");
    assert!(
        watched[0].leads() && watched[2].leads(),
        "the others lead on"
    );
    assert_eq!(keeper.held(), [0, 2]);
    assert!(
        !lost_within(&keeper, Duration::ZERO),
        "not every lease is lost"
    );
    // The others are renewed on.
    let expires = "SELECT (extract(epoch FROM expires) * 1000000)::bigint \
                   FROM log_shards WHERE shard = 2";
    let before = number(&mut admin, expires.into());
    let deadline = Instant::now() + Duration::from_secs(10);
    while number(&mut admin, expires.into()) == before {
        assert!(Instant::now() < deadline, "shard 2's lease was not renewed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ours = "SELECT count(*) FROM log_shards WHERE epoch = 1 AND expires > now()";
    assert_eq!(
        number(&mut admin, ours.into()),
        2,
        "shards 0 and 2 held in their epochs"
    );
    assert!(watched[0].leads() && watched[2].leads());
    // Both others taken: nothing is left to lead.
    sql(
        &mut admin,
        "UPDATE log_shards SET epoch = epoch + 1 WHERE shard IN (0, 2)",
    );
    assert!(
        lost_within(&keeper, Duration::from_secs(10)),
        "losing the last lease is losing them all"
    );
    assert!(watched.iter().all(|shard| !shard.leads()));
    assert_eq!(*keeper.taken_away().borrow(), [1, 0, 2]);
}

/// A clock that fails when read, as the keeper's renewal reads it.
struct Failing;

impl Clock for Failing {
    fn now(&self) -> Timestamp {
        panic!("this clock fails when read");
    }

    fn sleep_until(
        &self,
        _: Timestamp,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::pending())
    }

    fn take_up(&self, _: DatabaseClock, _: Timestamp) -> i64 {
        0
    }
}

/// A keeper whose renewal fails (a panic on its thread) renews nothing more: it says it lost
/// every lease, and no log of the node acknowledges anything more, whichever way it leads.
#[test]
fn a_keeper_that_fails_says_so_and_its_logs_stop() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 2).expect("tables");
    let (keeper, watched) = keeper_on(&url, &mut admin, (&[0, 1], Leads::Each), Arc::new(Failing));
    assert!(
        lost_within(&keeper, Duration::from_secs(10)),
        "the keeper never said it lost its leases"
    );
    assert!(watched.iter().all(|shard| !shard.leads()));
    assert!(
        !keeper.hand_off(0, Timestamp(9)),
        "a keeper that failed hands nothing off"
    );
    keeper.release();
}
