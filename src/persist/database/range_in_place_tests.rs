//! A range kept in a database of its own split in place, against the test clusters: a part
//! that begins or ends it moves out (or home) and the database keeps the rest, holding and
//! naming the rest only, so that nodes given the new map start; a split whose last step
//! fails is refused to the nodes until the same move, run again, finishes it.

use super::range_in_place::Split;
use super::range_move::move_range;
use super::range_move_tests::{
    cut_short, elsewhere, home_with, placed_on, recorded, refuse_drops, shard, BATCHES,
};
use super::shard_map::Placed;
use super::tests::{connect, database, number, sql, triples};
use super::{schema, sites, OpenError, Settings};

fn shards_1_3(url: &str) -> Placed {
    Placed {
        first: 1,
        last: 3,
        url: url.to_string(),
    }
}

fn shards_1_2(url: &str) -> Placed {
    Placed {
        first: 1,
        last: 2,
        url: url.to_string(),
    }
}

/// What the database at `url` keeps: the shards of its batches (each batch once), the shards
/// of its leases, and the range its record names (none for a home).
fn kept(url: &str) -> (Vec<i32>, Vec<i32>, Option<(i32, i32)>) {
    let mut db = connect(url);
    let batches: Vec<(i32, i64, i64)> = triples(
        &mut db,
        "SELECT shard, first_lsn, epoch FROM log_batches ORDER BY shard, first_lsn",
    );
    let leases: Vec<(i32, i64, i64)> = triples(
        &mut db,
        "SELECT shard, epoch, clock_ms FROM log_shards ORDER BY shard",
    );
    let range: Vec<(Option<i32>, Option<i32>, String)> = triples(
        &mut db,
        "SELECT first_shard, last_shard, database FROM log_home",
    );
    let range = range.first().and_then(|r| r.0.zip(r.1));
    (
        batches.iter().map(|b| b.0).collect(),
        leases.iter().map(|l| l.0).collect(),
        range,
    )
}

fn name(url: &str) -> String {
    schema::name_of(&mut connect(url))
        .expect("named")
        .expect("a name")
}

/// A node's start on `settings`: its check that the databases agree with the home.
fn start(settings: &Settings) -> Result<sites::Sites, OpenError> {
    let config = super::connection::config(&settings.url).expect("a URL");
    sites::prepare(settings, (&mut connect(&settings.url), config))
}

#[test]
fn a_range_kept_in_its_own_database_is_split_and_joined_again_in_place() {
    let (Some(home), Some(x), Some(y)) = (database(), elsewhere(), elsewhere()) else {
        return;
    };
    let settings = home_with(&home, BATCHES);
    move_range(&settings, &shards_1_3(&x)).expect("out of the home");
    assert_eq!(kept(&x), (vec![1, 2, 2, 3], vec![1, 2, 3], Some((1, 3))));
    let on_x = placed_on(&home, vec![shards_1_3(&x)]);
    // A part within the range, ending neither side, is refused, saying how.
    match move_range(&on_x, &shard(2, &y)) {
        Err(OpenError::ShardMap(why)) => {
            assert!(why.contains("begins or ends them"), "{why}");
            assert!(why.contains("move 2-3 out, then 3-3 on"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    let made = schema::name_of(&mut connect(&y)).expect("read");
    assert_eq!(made, None, "nothing made by the refusal");

    // Its end out into a database of its own: the database keeps the rest, and only it.
    let moved = move_range(&on_x, &shard(3, &y)).expect("split");
    assert_eq!(
        moved.split,
        Some(Split {
            kept: (1, 3),
            rest: (1, 2)
        })
    );
    assert_eq!((moved.batches, moved.left.as_deref()), (1, None));
    let (x_name, y_name) = (name(&x), name(&y));
    assert_eq!(
        recorded(&home),
        vec![(1, 2, Some(x_name.clone())), (3, 3, Some(y_name.clone()))]
    );
    assert_eq!(kept(&x), (vec![1, 2, 2], vec![1, 2], Some((1, 2))));
    assert_eq!(kept(&y), (vec![3], vec![3], Some((3, 3))));
    let split = placed_on(&home, vec![shards_1_2(&x), shard(3, &y)]);
    start(&split).expect("nodes given the new map start");
    // A move takes shards from one place only.
    match move_range(&split, &shards_1_3(&y)) {
        Err(OpenError::ShardMap(why)) => assert!(why.contains("from one place only"), "{why}"),
        other => panic!("{other:?}"),
    }
    match start(&on_x) {
        Err(OpenError::ShardMap(why)) => assert!(why.contains("first used with"), "{why}"),
        other => panic!("the old map started: {:?}", other.err()),
    }

    // Its beginning back into the home: the home keeps shard 1 again, free to lead.
    let home_again = move_range(&split, &shard(1, &home)).expect("part home");
    assert!(home_again.home);
    assert_eq!(
        home_again.split,
        Some(Split {
            kept: (1, 2),
            rest: (2, 2)
        })
    );
    assert_eq!(
        recorded(&home),
        vec![(2, 2, Some(x_name.clone())), (3, 3, Some(y_name))]
    );
    assert_eq!(kept(&x), (vec![2, 2], vec![2], Some((2, 2))));
    let (home_batches, home_leases, _) = kept(&home);
    assert_eq!((home_batches, home_leases), (vec![1], vec![0, 1]));
    let free = "SELECT count(*) FROM log_shards WHERE shard = 1 AND node = '' AND expires < now()";
    assert_eq!(number(&mut connect(&home), free.into()), 1);
    let parts = placed_on(&home, vec![shard(2, &x), shard(3, &y)]);
    start(&parts).expect("started");

    // Joined again: shard 3 from its database into the one beside, then shard 1 from home.
    let joined = move_range(&parts, &shard(3, &x)).expect("3 joins 2");
    assert_eq!((joined.joined, joined.batches), (Some((2, 3)), 1));
    assert_eq!(recorded(&home), vec![(2, 3, Some(x_name.clone()))]);
    assert_eq!(kept(&x), (vec![2, 2, 3], vec![2, 3], Some((2, 3))));
    let (y_batches, y_leases, _) = kept(&y);
    assert_eq!(
        (y_batches, y_leases),
        (vec![], vec![3]),
        "its lease held for good"
    );
    let two_three = placed_on(
        &home,
        vec![Placed {
            first: 2,
            last: 3,
            url: x.clone(),
        }],
    );
    start(&two_three).expect("nodes given the joined range start");
    let joined = move_range(&two_three, &shard(1, &x)).expect("1 joins 2-3");
    assert_eq!(joined.joined, Some((1, 3)));
    assert_eq!(recorded(&home), vec![(1, 3, Some(x_name))]);
    assert_eq!(kept(&x), (vec![1, 2, 2, 3], vec![1, 2, 3], Some((1, 3))));
    let (home_batches, home_leases, _) = kept(&home);
    assert_eq!((home_batches, home_leases), (vec![], vec![0]));
    start(&placed_on(&home, vec![shards_1_3(&x)])).expect("started on the whole range");
}

#[test]
fn a_join_cut_short_is_refused_to_the_nodes_until_abandoned() {
    let (Some(home), Some(x), Some(y)) = (database(), elsewhere(), elsewhere()) else {
        return;
    };
    let settings = home_with(&home, BATCHES);
    move_range(&settings, &shards_1_2(&x)).expect("1-2 out of the home");
    let on_x = placed_on(&home, vec![shards_1_2(&x)]);
    move_range(&on_x, &shard(3, &y)).expect("3 out of the home");
    let map = placed_on(&home, vec![shards_1_2(&x), shard(3, &y)]);
    cut_short(&home, &map, &shard(3, &x));
    assert_eq!(recorded(&home).len(), 2, "the join not recorded");
    assert_eq!(kept(&x), (vec![1, 2, 2, 3], vec![1, 2, 3], Some((1, 3))));
    match start(&map) {
        Err(OpenError::ShardMap(why)) => {
            assert!(why.contains("keeps shards 1-3, more than"), "{why}");
        }
        other => panic!("started beside a join's copy: {:?}", other.err()),
    }
    // Not without the database beside, which holds the copy: refused, leases still held.
    let without_x = placed_on(&home, vec![shard(3, &y)]);
    match move_range(&without_x, &shard(3, &y)) {
        Err(OpenError::ShardMap(why)) => {
            assert!(why.contains("--shard-database 1-2=URL"), "{why}");
        }
        other => panic!("abandoned without the database beside: {other:?}"),
    }
    assert_eq!(kept(&x), (vec![1, 2, 2, 3], vec![1, 2, 3], Some((1, 3))));
    // Abandoned where the home keeps it: the database beside drops the copy.
    let abandoned = move_range(&map, &shard(3, &y)).expect("abandoned");
    assert_eq!((abandoned.abandoned, abandoned.trimmed), (1, 2));
    assert_eq!(kept(&x), (vec![1, 2, 2], vec![1, 2], Some((1, 2))));
    assert_eq!(kept(&y), (vec![3], vec![3], Some((3, 3))));
    start(&map).expect("started as before");
}

#[test]
fn a_split_whose_last_step_fails_is_refused_to_the_nodes_until_run_again() {
    let (Some(home), Some(x), Some(y)) = (database(), elsewhere(), elsewhere()) else {
        return;
    };
    let settings = home_with(&home, BATCHES);
    move_range(&settings, &shards_1_3(&x)).expect("out of the home");
    let mut db = connect(&x);
    refuse_drops(&mut db);
    let on_x = placed_on(&home, vec![shards_1_3(&x)]);
    let moved = move_range(&on_x, &shard(3, &y)).expect("recorded all the same");
    let why = moved.left.expect("why the rows stayed");
    assert!(why.contains("drops refused for the test"), "{why}");
    assert_eq!(recorded(&home).len(), 2, "the split recorded");
    assert_eq!(kept(&x), (vec![1, 2, 2, 3], vec![1, 2, 3], Some((1, 3))));
    let split = placed_on(&home, vec![shards_1_2(&x), shard(3, &y)]);
    match start(&split) {
        Err(OpenError::ShardMap(why)) => {
            assert!(why.contains("keeps shards 1-3, more than"), "{why}");
            assert!(why.contains("run that move again"), "{why}");
        }
        other => panic!("started beside the rows of a split: {:?}", other.err()),
    }
    sql(&mut db, "DROP TRIGGER refuse_drops ON log_batches");

    // Run again as the nodes are to be started: the database beside is trimmed.
    let again = move_range(&split, &shard(3, &y)).expect("finished");
    assert_eq!((again.trimmed, again.abandoned, again.forgotten), (2, 0, 0));
    assert_eq!(kept(&x), (vec![1, 2, 2], vec![1, 2], Some((1, 2))));
    assert_eq!(kept(&y), (vec![3], vec![3], Some((3, 3))));
    start(&split).expect("nodes given the new map start");
    match move_range(&split, &shard(3, &y)) {
        Err(OpenError::ShardMap(why)) => assert!(why.contains("keeps them already"), "{why}"),
        other => panic!("{other:?}"),
    }
}
