//! A shard map over two databases, against the test clusters (the second on another server
//! where `ORDERLY_TEST_POSTGRES_SECOND` names one): each keeps the leases of its own shards,
//! every start checks that they agree with what the home recorded, and one keeper renews and
//! gives up leases in both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::keeper::{Held, HeldShard, Keeper, Leads};
use super::lease::{self, Fence};
use super::shard_map::Placed;
use super::tests::{connect, database, leader_settings, number};
use super::{sites, OpenError, Settings};

fn elsewhere() -> Option<String> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(super::test_database::fresh_database_elsewhere())
}

/// Four shards, `placed` kept elsewhere.
fn settings(home: &str, placed: &[(u32, u32, &str)]) -> Settings {
    Settings {
        shards: 4,
        placed: (placed.iter())
            .map(|&(first, last, url)| Placed {
                first,
                last,
                url: url.to_string(),
            })
            .collect(),
        ..leader_settings(home)
    }
}

fn prepare(settings: &Settings) -> Result<sites::Sites, OpenError> {
    let config = super::connection::config(&settings.url).expect("a URL");
    sites::prepare(settings, (&mut connect(&settings.url), config))
}

fn refused(settings: &Settings, why: &str) {
    match prepare(settings) {
        Err(OpenError::ShardMap(message)) => assert!(message.contains(why), "{message}"),
        Err(other) => panic!("refused otherwise: {other}"),
        Ok(_) => panic!("not refused: {why}"),
    }
}

fn shards_in(url: &str) -> Vec<i64> {
    let mut db = connect(url);
    let listed = number(
        &mut db,
        "SELECT coalesce(sum(1::bigint << shard), 0)::bigint FROM log_shards".into(),
    );
    (0..4).filter(|shard| listed & (1 << shard) != 0).collect()
}

#[test]
fn a_range_of_shards_is_kept_in_its_database_and_every_start_must_agree() {
    let (Some(home), Some(other)) = (database(), elsewhere()) else {
        return;
    };
    let split = settings(&home, &[(2, 3, &other)]);
    let sites = prepare(&split).expect("made");
    assert_eq!(sites.sites.len(), 2);
    assert_eq!(shards_in(&home), [0, 1], "the home keeps the rest");
    assert_eq!(shards_in(&other), [2, 3], "the other its range alone");
    prepare(&split).expect("the same map again");
    // The map is the one the home was first used with.
    refused(&settings(&home, &[]), "first used with shards 2-3");
    refused(
        &settings(&home, &[(3, 3, &other)]),
        "first used with shards 2-3",
    );
    // The range's database is the one made for it first.
    let Some(third) = elsewhere() else { return };
    refused(
        &settings(&home, &[(2, 3, &third)]),
        "records another database",
    );
    // A placed database is no home, nor another home's.
    refused(
        &settings(&other, &[]),
        "keeps shards 2-3 for another database",
    );
    let Some(second_home) = database() else {
        return;
    };
    refused(
        &settings(&second_home, &[(2, 3, &other)]),
        "keeps shards for another home database",
    );
    // A home given as a range's database.
    refused(
        &settings(&second_home, &[(2, 3, &home)]),
        "a home database of its own",
    );
    // The placed database was left as it was.
    assert_eq!(shards_in(&other), [2, 3]);
}

#[test]
fn a_database_used_before_shard_maps_is_upgraded_in_place_and_keeps_its_leases() {
    let Some(home) = database() else { return };
    let made = settings(&home, &[]);
    prepare(&made).expect("made");
    let mut db = connect(&home);
    let taken = lease::acquire(&mut db, 1, "node", "http://node", true).expect("taken");
    // As version 3 left its tables: no names, no ranges.
    for statement in [
        "ALTER TABLE log_home DROP COLUMN database, DROP COLUMN home, DROP COLUMN first_shard, \
         DROP COLUMN last_shard",
        "DROP TABLE log_placed",
        "UPDATE log_home SET version = 3",
    ] {
        super::tests::sql(&mut db, statement);
    }
    // Given as the range of another home, it is refused and left as it was.
    let Some(other_home) = database() else { return };
    let placed_here = settings(&other_home, &[(2, 3, &home)]);
    refused(&placed_here, "a home database of its own");
    let version = "SELECT version::bigint FROM log_home";
    assert_eq!(number(&mut db, version.into()), 3, "not upgraded");
    prepare(&made).expect("upgraded");
    assert_eq!(number(&mut db, version.into()), 4);
    let named = "SELECT length(database)::bigint FROM log_home WHERE home IS NULL";
    assert_eq!(number(&mut db, named.into()), 32, "named at random");
    let epoch = "SELECT epoch FROM log_shards WHERE shard = 1 AND expires > now()";
    assert_eq!(
        number(&mut db, epoch.into()),
        taken.0.epoch,
        "the lease held"
    );
    assert_eq!(shards_in(&home), [0, 1, 2, 3]);
}

/// Waits until `query` (a count) answers 1 in the database at `url`, for at most `bound`.
fn until_one(url: &str, query: &str, bound: Duration) {
    let mut db = connect(url);
    let started = Instant::now();
    while number(&mut db, query.into()) != 1 {
        assert!(started.elapsed() < bound, "never: {query}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn one_keeper_renews_and_gives_up_leases_in_each_database() {
    let (Some(home), Some(other)) = (database(), elsewhere()) else {
        return;
    };
    let split = settings(&home, &[(2, 3, &other)]);
    let sites = prepare(&split).expect("made");
    let take = |url: &str, shard: i32| {
        let mut db = connect(url);
        let epoch = (lease::acquire(&mut db, shard, "node", "http://node", true))
            .expect("taken")
            .0
            .epoch;
        // Near its end: only a renewal keeps it.
        let near = format!(
            "UPDATE log_shards SET expires = now() + interval '2 seconds' WHERE shard = {shard}"
        );
        number(
            &mut db,
            format!("WITH u AS ({near} RETURNING 1) SELECT count(*) FROM u"),
        );
        HeldShard {
            site: sites.map.site_of(shard as u32),
            fence: Fence { shard, epoch },
            log_writer: crate::persist::writer::LogWriter::new(),
            tenure: Arc::new(crate::persist::tenure::Tenure::not_begun()),
        }
    };
    let (first, second) = (take(&home, 0), take(&other, 2));
    assert_eq!((first.site, second.site), (0, 1));
    let held = Held {
        announced: None,
        leads: Leads::Each,
        clock: Arc::new(crate::clock::ManualClock::new(crate::engine::Timestamp(77))),
        replication: (Default::default(), sites.replication_reads()),
    };
    let dbs = vec![connect(&home), connect(&other)];
    let keeper = Keeper::start(dbs, (first, Instant::now()), held).expect("started");
    keeper.add(second, Instant::now()).expect("added");
    let renewed = |shard: i32| {
        format!(
            "SELECT count(*) FROM log_shards WHERE shard = {shard} \
             AND expires > now() + interval '3 seconds' AND clock_ms = 77"
        )
    };
    until_one(&home, &renewed(0), Duration::from_secs(10));
    until_one(&other, &renewed(2), Duration::from_secs(10));
    assert!(keeper.hand_off(2, crate::engine::Timestamp(78)));
    let given_up = |shard: i32| {
        format!("SELECT count(*) FROM log_shards WHERE shard = {shard} AND expires = '-infinity'")
    };
    until_one(&other, &given_up(2), Duration::from_secs(1));
    keeper.release();
    until_one(&home, &given_up(0), Duration::from_secs(1));
}

/// Two listeners that accept connections and never answer, and the URL of a database on both
/// hosts (each attempt to connect costs two timeouts). Keep the listeners while it is used.
fn never_answers() -> ([std::net::TcpListener; 2], String) {
    let hung = [(); 2].map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a port"));
    let ports: Vec<String> = (hung.iter())
        .map(|l| format!("127.0.0.1:{}", l.local_addr().expect("bound").port()))
        .collect();
    let never = format!("postgres://orderly@{}/never", ports.join(","));
    (hung, never)
}

/// A shard's lease as a keeper holds it, in database `site` of the shard map.
fn shard(site: usize, shard: i32, epoch: i64) -> HeldShard {
    HeldShard {
        site,
        fence: Fence { shard, epoch },
        log_writer: crate::persist::writer::LogWriter::new(),
        tenure: Arc::new(crate::persist::tenure::Tenure::not_begun()),
    }
}

/// What a keeper of shards in the home database and in `never` starts from (a clock at 5,
/// each database read as its URL says), and a connection to each.
fn held_over(home: &str, never: &str) -> (Held, Vec<super::connection::Blocking>) {
    let readings = |url: &str| {
        let config = super::connection::config(url).expect("a URL");
        (super::replication::of_url(&config), url.to_string())
    };
    let held = Held {
        announced: None,
        leads: Leads::Each,
        clock: Arc::new(crate::clock::ManualClock::new(crate::engine::Timestamp(5))),
        replication: (Default::default(), vec![readings(home), readings(never)]),
    };
    (held, vec![connect(home), connect(never)])
}

/// A database that accepts connections and never answers (two such hosts, so each attempt
/// to connect costs two timeouts): the keeper goes on renewing the home's lease on time all
/// along, and ends the shard kept in the other once its lease has gone unrenewed for its
/// length, alone.
#[test]
fn a_database_that_never_answers_ends_its_own_shards_alone_and_holds_up_no_other() {
    let Some(home) = database() else { return };
    let mut db = connect(&home);
    crate::persist::database::schema::prepare(&mut db, "us-east-1", "000000000000", 4)
        .expect("tables");
    let (hung, never) = never_answers();
    let epoch = (lease::acquire(&mut db, 0, "node", "http://node", true))
        .expect("taken")
        .0
        .epoch;
    let (at_home, elsewhere) = (shard(0, 0, epoch), shard(1, 2, 1));
    let home_tenure = at_home.tenure.clone();
    let (held, dbs) = held_over(&home, &never);
    let started = Instant::now();
    let keeper = Keeper::start(dbs, (at_home, started), held).expect("started");
    keeper.add(elsewhere, started).expect("added");
    let taken_away = keeper.taken_away();
    while taken_away.borrow().is_empty() {
        assert!(
            home_tenure.holds(),
            "the home's shard lapsed after {:?}",
            started.elapsed()
        );
        assert!(started.elapsed() < Duration::from_secs(15), "never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        *taken_away.borrow(),
        [2],
        "the unanswered database's shard alone"
    );
    let ended = started.elapsed();
    assert!(
        ended >= lease::LEASE,
        "ended after {ended:?}, before its lease ran out"
    );
    assert!(home_tenure.holds());
    assert_eq!(keeper.held(), [0]);
    let renewed = "SELECT count(*) FROM log_shards WHERE shard = 0 \
                   AND expires > now() + interval '3 seconds' AND clock_ms = 5";
    until_one(&home, renewed, Duration::from_secs(5));
    keeper.release();
    drop(hung);
}

/// Handing off several shards, two of them kept in a database that never answers, gives them
/// all up at once: the wait for that database is paid once (not once a shard), and the home's
/// lease handed off with them is given up at once.
#[test]
fn handing_off_shards_of_a_database_that_never_answers_waits_for_it_once() {
    let Some(home) = database() else { return };
    let mut db = connect(&home);
    crate::persist::database::schema::prepare(&mut db, "us-east-1", "000000000000", 4)
        .expect("tables");
    let (hung, never) = never_answers();
    let (home_0, home_1) = [0, 1]
        .map(|shard| {
            (lease::acquire(&mut db, shard, "node", "http://node", true))
                .expect("taken")
                .0
                .epoch
        })
        .into();
    let (held, dbs) = held_over(&home, &never);
    let started = Instant::now();
    let keeper = Keeper::start(dbs, (shard(0, 0, home_0), started), held).expect("started");
    for added in [shard(0, 1, home_1), shard(1, 2, 1), shard(1, 3, 1)] {
        keeper.add(added, started).expect("added");
    }
    let asked = Instant::now();
    let handed = keeper.hand_off_each(&[2, 3, 1], crate::engine::Timestamp(6));
    let took = asked.elapsed();
    assert_eq!(handed, [2, 3, 1]);
    assert_eq!(keeper.held(), [0]);
    // One wait for the database that never answers, however many of its shards.
    let once = super::keeper::GIVE_UP_WAIT + Duration::from_millis(1500);
    assert!(took < once, "took {took:?}");
    let given_up = "SELECT count(*) FROM log_shards WHERE shard = 1 AND expires = '-infinity'";
    until_one(&home, given_up, Duration::from_secs(1));
    keeper.release();
    drop(hung);
}

/// A port that closes every connection at once until it is opened, then passes each new one
/// on to `to` (a database server's host:port): a database that comes to answer.
struct Gate {
    port: u16,
    open: Arc<std::sync::atomic::AtomicBool>,
}

impl Gate {
    fn start(to: String) -> Gate {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("bound").port();
        let open = Arc::new(AtomicBool::new(false));
        let opened = open.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if !opened.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(&to) else {
                    continue;
                };
                let pipe = |mut from: std::net::TcpStream, mut to: std::net::TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                };
                let (client_too, server_too) = (client.try_clone(), server.try_clone());
                if let (Ok(client_too), Ok(server_too)) = (client_too, server_too) {
                    pipe(client, server);
                    pipe(server_too, client_too);
                }
            }
        });
        Gate { port, open }
    }

    fn open(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// `url` (a database on the server the gate passes on to, `postgres://…@HOST:PORT/…`)
    /// reached through the gate, its credentials and parameters kept.
    fn through(&self, url: &str) -> String {
        let (before, after) = url
            .rsplit_once('@')
            .expect("postgres://USER@HOST:PORT/NAME");
        let (_, rest) = after.split_once('/').expect("a database name");
        format!("{before}@127.0.0.1:{}/{rest}", self.port)
    }
}

/// The host and port of the server `url` names.
fn server_of(url: &str) -> String {
    let config = super::connection::config(url).expect("a URL");
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("not a TCP host: {other:?}"),
    };
    format!("{host}:{}", config.get_ports()[0])
}

/// With shards led apart, a range's database that does not answer at the start is put off,
/// not refused: the start goes on, and the database is checked when one of its leases is
/// about to be taken, once it answers. Checked then and found to be what the map says, it is
/// made ready and recorded in the home; found to be another (here a home of its own), its
/// shards are refused for good. Without shards led apart, the start is refused as before.
#[test]
fn a_database_that_does_not_answer_at_the_start_is_checked_once_it_answers() {
    let (Some(home), Some(other), Some(wrong)) = (database(), elsewhere(), elsewhere()) else {
        return;
    };
    // `wrong` made a home database of its own: no range may be kept in it.
    prepare(&settings(&wrong, &[])).expect("a home of its own");
    for (target, right) in [(&other, true), (&wrong, false)] {
        let gate = Gate::start(server_of(target));
        let through = gate.through(target);
        let home = if right {
            home.clone()
        } else {
            database().expect("a database")
        };
        let mut together = settings(&home, &[(2, 3, &through)]);
        together.placed_checked = Default::default();
        match prepare(&together) {
            Err(OpenError::Database(why)) => assert!(why.contains("does not answer"), "{why}"),
            Err(other) => panic!("refused otherwise: {other}"),
            Ok(_) => panic!("a start leading every shard went on without the database"),
        }
        let apart = Settings {
            shards_alone: true,
            placed_checked: Default::default(),
            ..settings(&home, &[(2, 3, &through)])
        };
        let sites = prepare(&apart).expect("started without it");
        let mut db = connect(&through);
        let unanswered = sites.checked(1, &mut db).expect_err("not answering yet");
        assert!(unanswered.contains("does not answer"), "{unanswered}");
        assert_eq!(*apart.placed_checked.lock().unwrap(), Some(vec![None]));
        gate.open();
        let mut db = connect(&through);
        match right {
            true => {
                sites.checked(1, &mut db).expect("checked once it answers");
                assert_eq!(shards_in(target), [2, 3]);
                let names = apart.placed_checked.lock().unwrap().clone();
                assert!(matches!(names.as_deref(), Some([Some(_)])), "{names:?}");
                // Checked once: asked again, nothing is asked of the database.
                sites
                    .checked(1, &mut connect("postgres://orderly@127.0.0.1:1/none"))
                    .expect("checked before");
            }
            false => {
                let refused = sites.checked(1, &mut db).expect_err("another database");
                assert!(refused.contains("a home database of its own"), "{refused}");
                let again = sites.checked(1, &mut db).expect_err("refused for good");
                assert_eq!(again, refused);
                assert_eq!(*apart.placed_checked.lock().unwrap(), Some(vec![None]));
            }
        }
    }
}

/// The survey reading a range's database that is another than the map names (a home of its
/// own, keeping every shard's lease): that range is read as unknown, the home's shards as
/// they are, and the reading goes on (it used to fail whole, every node's, every second).
#[test]
fn the_survey_leaves_unread_a_range_whose_database_disagrees_with_the_map() {
    let (Some(home), Some(right), Some(wrong)) = (database(), elsewhere(), elsewhere()) else {
        return;
    };
    prepare(&settings(&home, &[(2, 3, &right)])).expect("the home and its range");
    prepare(&settings(&wrong, &[])).expect("a home of its own");
    // Another home's database for shard 2 alone: it lacks shard 3's lease.
    let (Some(other_home), Some(part)) = (database(), elsewhere()) else {
        return;
    };
    prepare(&settings(&other_home, &[(2, 2, &part)])).expect("a range of one shard");
    for placed_in in [&wrong, &part] {
        let placed = [Placed {
            first: 2,
            last: 3,
            url: placed_in.clone(),
        }];
        let map = super::shard_map::ShardMap::new(&home, &placed, 4).expect("a map");
        let survey = super::survey::Survey::start(map, "http://surveyor".into()).expect("started");
        // The first reading, as the survey tells it.
        let mut seen = survey.seen();
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let first = runtime.block_on(async {
            let read = seen.wait_for(Option::is_some);
            let read = tokio::time::timeout(Duration::from_secs(10), read).await;
            read.expect("never read").expect("the survey ended").clone()
        });
        let reading = first.expect("a reading");
        assert_eq!(reading.unread, [2, 3], "{reading:?}");
        assert!(reading.free(0) && reading.free(1), "{reading:?}");
        assert!(!reading.free(2) && !reading.free(3), "{reading:?}");
    }
}

/// A range's database that answers a connection with a refusal (here: no such database) is
/// not put off, even with shards led apart: waiting does not mend it, and the start says why.
#[test]
fn a_database_that_refuses_the_connection_is_refused_at_the_start_not_put_off() {
    let (Some(home), Some(other)) = (database(), elsewhere()) else {
        return;
    };
    let (stem, _) = other.rsplit_once('/').expect("postgres://…/NAME");
    let missing = format!("{stem}/orderly_no_such_database");
    let apart = Settings {
        shards_alone: true,
        placed_checked: Default::default(),
        ..settings(&home, &[(2, 3, &missing)])
    };
    match prepare(&apart) {
        Err(OpenError::Database(why)) => {
            assert!(why.contains("orderly_no_such_database"), "{why}");
            assert!(!why.contains("does not answer"), "{why}");
        }
        Err(other) => panic!("refused otherwise: {other}"),
        Ok(_) => panic!("put off: a database that does not exist"),
    }
}
