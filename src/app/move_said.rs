//! What `--move-shards` tells the operator it did, for each way a move ends, and how to
//! start the nodes after.

use crate::persist::database::range_move::Moved;

/// What a move of the shards `range` into the database shown as `to` says it did.
pub(super) fn said_of_move(range: &str, moved: &Moved, to: &str) -> String {
    let forgotten = match moved.forgotten {
        0 => String::new(),
        rows => format!(
            "dropped the {rows} rows of shards {range} an earlier move left in the home, \
             never read again; "
        ),
    };
    let trimmed = match moved.trimmed {
        0 => String::new(),
        rows => format!(
            "dropped {rows} rows, leases included, that a move which did not finish left \
             beside shards {range}, in the database of a range beside them: rows of shards the \
             home does not record that database as keeping (never read again); it now names \
             its own range only; "
        ),
    };
    // A range kept in a database of its own may have had its home's record committed with the
    // answer lost, so "as before" may have been without that database: it is named.
    let start_placed = format!(
        "start every node with --shard-database {range}=URL for it, beside the other ranges \
         the nodes were given"
    );
    if moved.abandoned > 0 {
        let left = match &moved.left {
            Some(why) => format!(
                "; any rows of shards {range} an earlier move left in the home could not be \
                 checked or dropped (never read again): before starting the nodes, run the same \
                 command again to drop them, which answers that {to} keeps them already once \
                 none are left ({why})"
            ),
            None => String::new(),
        };
        let start = match moved.placed {
            true => start_placed,
            false => "start the nodes as before".into(),
        };
        return format!(
            "{trimmed}{forgotten}abandoned a move of shards {range} cut short: gave back the {} \
             leases it held in {to}{left}; {start}",
            moved.abandoned
        );
    }
    if moved.forgotten > 0 {
        return format!("{trimmed}{forgotten}{to} keeps them: {start_placed}");
    }
    if moved.trimmed > 0 {
        return format!(
            "{trimmed}{to} keeps shards {range}: start every node with the ranges the home \
             records, each with its --shard-database"
        );
    }
    let start = match (moved.joined, moved.home) {
        (Some((first, last)), _) => format!(
            "start every node with --shard-database {first}-{last}=URL for it, in place of \
             the range the nodes were given it for (and of --shard-database {range}, if they \
             were given that), beside the other ranges"
        ),
        (None, true) => format!("start every node without --shard-database {range}"),
        (None, false) => start_placed,
    };
    let (start, left) = match (&moved.split, &moved.left) {
        (Some(split), left) => {
            let (kept, rest) = (split.kept, split.rest);
            let start = format!(
                "{start}, and with --shard-database {}-{}=URL for the database it gave for \
                 {}-{}, which keeps those shards on",
                rest.0, rest.1, kept.0, kept.1
            );
            let left = match left {
                // That database still names the whole range: nodes given the rest are refused.
                Some(why) => format!(
                    " (its rows were left in the database it moved from, which may so name \
                     shards {}-{} still and be refused to the nodes: before starting them, run \
                     the same command again with the --shard-database ranges they are to be \
                     given, which drops those rows: {why})",
                    kept.0, kept.1
                ),
                None => String::new(),
            };
            (start, left)
        }
        (None, Some(why)) => (
            start,
            format!(" (its rows were left in the database it moved from, never read again: {why})"),
        ),
        (None, None) => (start, String::new()),
    };
    format!(
        "moved shards {range} ({} batches of the log and {} snapshots, {} bytes) from {} to \
         {to}{left}: {start}",
        moved.batches, moved.snapshots, moved.bytes, moved.from
    )
}
