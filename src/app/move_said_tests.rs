//! What `--move-shards` tells the operator, for each way a move ends.

use super::move_said::said_of_move;
use crate::persist::database::range_in_place::Split;
use crate::persist::database::range_move::Moved;

fn moved() -> Moved {
    Moved {
        batches: 7,
        snapshots: 1,
        bytes: 4096,
        from: "postgres://u@a/home".into(),
        home: false,
        abandoned: 0,
        left: None,
        placed: false,
        forgotten: 0,
        split: None,
        trimmed: 0,
        joined: None,
    }
}

#[test]
fn a_move_abandoned_says_the_leases_it_gave_back_and_where_the_range_is_kept() {
    let to = "postgres://u@b/b";
    let at_home = Moved {
        abandoned: 3,
        ..moved()
    };
    let said = said_of_move("16-18", &at_home, to);
    assert!(
        said.contains("gave back the 3 leases it held in postgres://u@b/b"),
        "{said}"
    );
    assert!(said.ends_with("start the nodes as before"), "{said}");
    assert!(!said.contains("could not be"), "{said}");

    // Kept in a database of its own: the nodes are told to name it, whatever else happened.
    let placed = || Moved {
        abandoned: 3,
        placed: true,
        ..moved()
    };
    let said = said_of_move("16-18", &placed(), to);
    assert!(said.contains("gave back the 3 leases"), "{said}");
    assert!(said.contains("with --shard-database 16-18=URL"), "{said}");
    assert!(!said.contains("as before"), "{said}");

    let with_leftovers = Moved {
        forgotten: 4,
        ..placed()
    };
    let said = said_of_move("16-18", &with_leftovers, to);
    assert!(
        said.starts_with("dropped the 4 rows of shards 16-18"),
        "{said}"
    );
    assert!(said.contains("gave back the 3 leases"), "{said}");
    assert!(said.contains("with --shard-database 16-18=URL"), "{said}");
    assert!(!said.contains("as before"), "{said}");

    let undropped = Moved {
        left: Some("connection refused".into()),
        ..placed()
    };
    let said = said_of_move("16-18", &undropped, to);
    assert!(said.contains("gave back the 3 leases"), "{said}");
    assert!(said.contains("could not be checked or dropped"), "{said}");
    assert!(
        said.contains("before starting the nodes, run the same command"),
        "{said}"
    );
    assert!(said.contains("connection refused"), "{said}");
    assert!(said.contains("with --shard-database 16-18=URL"), "{said}");
}

#[test]
fn a_move_that_only_drops_leftovers_names_the_database_to_start_with() {
    let said = said_of_move(
        "16-18",
        &Moved {
            forgotten: 4,
            ..moved()
        },
        "postgres://u@b/b",
    );
    assert!(
        said.starts_with("dropped the 4 rows of shards 16-18"),
        "{said}"
    );
    assert!(said.contains("--shard-database 16-18=URL"), "{said}");
    assert!(!said.contains("moved shards"), "{said}");
}

#[test]
fn a_finished_move_says_what_it_moved_and_how_to_start() {
    let said = said_of_move("16-18", &moved(), "postgres://u@b/b");
    assert!(
        said.contains("7 batches of the log and 1 snapshots, 4096 bytes"),
        "{said}"
    );
    assert!(
        said.contains("from postgres://u@a/home to postgres://u@b/b"),
        "{said}"
    );
    assert!(said.contains("with --shard-database 16-18=URL"), "{said}");
    let home = said_of_move(
        "16-18",
        &Moved {
            home: true,
            ..moved()
        },
        "postgres://u@a/home",
    );
    assert!(home.contains("without --shard-database 16-18"), "{home}");
}

#[test]
fn a_split_names_the_rest_for_the_nodes_and_whether_it_must_run_again() {
    let split = || Moved {
        split: Some(Split {
            kept: (16, 31),
            rest: (16, 23),
        }),
        ..moved()
    };
    let said = said_of_move("24-31", &split(), "postgres://u@c/c");
    assert!(said.contains("with --shard-database 24-31=URL"), "{said}");
    assert!(
        said.contains("with --shard-database 16-23=URL for the database it gave for 16-31"),
        "{said}"
    );
    assert!(!said.contains("run the same command again"), "{said}");
    let home = said_of_move(
        "24-31",
        &Moved {
            home: true,
            ..split()
        },
        "postgres://u@a/home",
    );
    assert!(home.contains("without --shard-database 24-31"), "{home}");
    assert!(home.contains("--shard-database 16-23=URL"), "{home}");
    // Its last step failed: the nodes may be refused that database until it is run again.
    let unfinished = said_of_move(
        "24-31",
        &Moved {
            left: Some("connection refused".into()),
            ..split()
        },
        "postgres://u@c/c",
    );
    assert!(
        unfinished.contains("may so name shards 16-31 still and be refused to the nodes"),
        "{unfinished}"
    );
    assert!(
        unfinished.contains("run the same command again"),
        "{unfinished}"
    );
    assert!(unfinished.contains("connection refused"), "{unfinished}");
    let finished = said_of_move(
        "24-31",
        &Moved {
            trimmed: 5,
            ..moved()
        },
        "postgres://u@c/c",
    );
    assert!(
        finished.starts_with(
            "dropped 5 rows, leases included, that a move which did not finish left beside \
             shards 24-31"
        ),
        "{finished}"
    );
    assert!(!finished.contains("moved shards"), "{finished}");
}

#[test]
fn a_join_names_the_joined_range_for_the_nodes() {
    let said = said_of_move(
        "24-31",
        &Moved {
            joined: Some((16, 31)),
            ..moved()
        },
        "postgres://u@b/b",
    );
    assert!(
        said.contains("with --shard-database 16-31=URL for it, in place of"),
        "{said}"
    );
    assert!(said.contains("--shard-database 24-31, if"), "{said}");
    assert!(!said.contains("with --shard-database 24-31=URL"), "{said}");
}
