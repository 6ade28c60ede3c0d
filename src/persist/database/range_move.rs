//! Moving a range of shards between databases (`--move-shards FIRST-LAST=URL`), with every
//! node stopped, so that a cluster begun on one database can spread over more (or come back).
//!
//! 1. With a lock in the home (one move at a time) and no node announced there within a
//!    lease, the range's leases are taken in the database that keeps the range now (the home,
//!    or the database a range was placed in before), each with a new epoch and for a century:
//!    a node still leading one is fenced off (its inserts and snapshots name the old epoch),
//!    and no node takes them again there. A log with a gap is refused first.
//! 2. The range's rows (leases, batches, epochs, snapshots and their chunks) are copied into
//!    the new database in one transaction, which first makes its tables as a node would for
//!    a placed range.
//! 3. The home records the new database as the range's keeper; where the home kept the range
//!    itself, the same transaction drops its leases of it. The range's other rows are dropped
//!    after, where it was kept; a database a range was placed in before keeps its leases,
//!    held. A range moved back into the home is copied there and its record dropped in one
//!    transaction of the home's.
//! 4. A part that begins or ends a range kept in a database of its own moves the same way (a
//!    split), and a range may move into the database of the range beside it (a join): see
//!    `range_in_place`.
//!
//! Nothing is committed in two databases at once, nor needs to be: the range's leases, held
//! by the move, keep every node off it until the home's record says where it is, so a move
//! cut short anywhere is finished by running it again (a new database holding a copy the home
//! does not record yet is copied into again).

use super::connection::{config, Blocking, Session};
use super::range_copy::{copy, Copied, Destination};
use super::range_held::{abandon, Lease, Source, MOVER};
use super::range_in_place::{beside_of, trim, trim_beside, Split};
use super::range_lock::{lock_moves, still_alone, HELD};
use super::range_record::{record, Target};
use super::range_rows::{connected, drop_rows, within};
use super::schema::{self, Role};
use super::shard_map::{shown, Placed};
use super::{OpenError, Settings};

/// What was moved, for the operator.
#[derive(Debug, PartialEq, Eq)]
pub struct Moved {
    pub batches: u64,
    pub snapshots: u64,
    /// The bytes of the batches' records and of the snapshots' chunks.
    pub bytes: u64,
    /// Where the range was kept, as `GET /_orderly/cluster` names databases.
    pub from: String,
    /// The range went back into the home: nodes are started without it.
    pub home: bool,
    /// Nothing moved: the leases a move cut short held were given back, this many.
    pub abandoned: u64,
    /// Why the range's rows were left in the database it moved from, if they were; for a move
    /// abandoned (`abandoned`), why any rows an earlier move left in the home were not dropped.
    pub left: Option<String>,
    /// The range stays in a database of its own, which the nodes are to be given with
    /// `--shard-database` (said of a move abandoned or of leftovers dropped).
    pub placed: bool,
    /// Rows of the range an earlier move out of the home left there, dropped by running the
    /// move again.
    pub forgotten: u64,
    /// The range was part of one kept in a database of its own, which keeps the rest.
    pub split: Option<Split>,
    /// Rows a move that did not finish left in the database of a range beside this one (a
    /// split's part, or a copy of this range joined to it), their leases included: of the
    /// shards that database keeps past what the home records for it, dropped by running the
    /// move again or abandoning it, that database then recording its own range only.
    pub trimmed: u64,
    /// The range joined the one beside it in that range's database, which keeps this range
    /// (first, last) now.
    pub joined: Option<(i32, i32)>,
}

impl Moved {
    fn from(from: String) -> Moved {
        Moved::copied(Copied::default(), from)
    }

    /// What a copy carried out of the database named `from`.
    fn copied(copied: Copied, from: String) -> Moved {
        Moved {
            batches: copied.batches,
            snapshots: copied.snapshots,
            bytes: copied.bytes,
            from,
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
}

/// What the home's row and records say.
struct Home {
    version: i32,
    region: String,
    account: String,
    shards: i32,
    name: String,
    /// It keeps shards for another home.
    placed_for: bool,
    placed: Vec<(i32, i32, Option<String>)>,
    /// The URLs of the nodes that announced themselves within a lease's length.
    live: Vec<String>,
}

/// Moves the shards `to` names from where the home `settings.url` says they are kept into the
/// database at `to.url`; a range kept in another database before is found there through the
/// `settings.placed` entry for the same range. Blocking.
pub fn move_range(settings: &Settings, to: &Placed) -> Result<Moved, OpenError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (Ok(first), Ok(last)) = (i32::try_from(to.first), i32::try_from(to.last)) else {
        return Err(refused(to, "no database has that many shards"));
    };
    let home_config = config(&settings.url).map_err(OpenError::Url)?;
    let mut home = Session::pinned(home_config, HELD);
    // One move at a time: held by the home's connection until the move ends (or the
    // connection does).
    if !runtime.block_on(lock_moves(&mut home, true))? {
        return Err(refused(to, "another move of shards runs on this home"));
    }
    let moved = move_alone(&runtime, (settings, to), &mut home, (first, last))
        .map_err(|error| stopped(error, &home));
    if let Err(error) = runtime.block_on(lock_moves(&mut home, false)) {
        tracing::debug!(%error, "the move's lock is left to its connection's end");
    }
    moved
}

/// `move_range`, with the home's lock on moves held through `home`.
fn move_alone(
    runtime: &tokio::runtime::Runtime,
    (settings, to): (&Settings, &Placed),
    home: &mut Session,
    range: (i32, i32),
) -> Result<Moved, OpenError> {
    let found = runtime.block_on(read_home(home))?;
    let source = source_of(&found, range, to, &settings.placed)?;
    if let Some(url) = found.live.first() {
        return Err(refused(
            to,
            &format!(
                "the node at {url} announced itself within the last 5 s: stop every node \
                 before moving shards (a node killed rather than stopped is forgotten 5 s after)"
            ),
        ));
    }
    let target_config = config(&to.url).map_err(OpenError::Url)?;
    let mut target = Blocking::new(target_config.clone())?;
    let target_name = schema::name_of(&mut target)?;
    let source_name = match &source {
        Source::Home => found.name.as_str(),
        Source::Placed { name, .. } => name.as_str(),
    };
    if target_name.as_deref() == Some(source_name) {
        // Where the range is kept: a move of it cut short is abandoned, its leases given back
        // in the database just found by name to be the one the home records.
        // A move that did not finish may have left rows in the database of a range beside:
        // a split's part, after the home recorded the split, or a copy of this range joined
        // to it, before the home recorded the join. The home's record stands: dropped.
        runtime.block_on(still_alone(home))?;
        let trimmed = runtime.block_on(trim_beside(&found.placed, range, &settings.placed))?;
        let mut kept = Session::new(target_config);
        runtime.block_on(still_alone(home))?;
        let given = runtime.block_on(abandon(&mut kept, range))?;
        // A range kept in a database of its own has no rows in the home but those a finished
        // move out of the home could not drop: dropped now.
        let (forgotten, left) = match &source {
            Source::Placed { .. } => match runtime.block_on(drop_rows(home, range)) {
                Ok(dropped) => (dropped, None),
                // The leases given back are said all the same: the nodes lead the range again.
                Err(error) if given > 0 => (0, Some(error.to_string())),
                Err(error) => return Err(error),
            },
            Source::Home => (0, None),
        };
        if given == 0 && forgotten == 0 && trimmed == 0 {
            return Err(refused(to, "that database keeps them already"));
        }
        return Ok(Moved {
            abandoned: given,
            forgotten,
            trimmed,
            left,
            placed: matches!(source, Source::Placed { .. }),
            ..Moved::from(shown(&to.url))
        });
    }
    let split = match &source {
        Source::Placed { kept, .. } => source.rest(range).map(|rest| Split { kept: *kept, rest }),
        Source::Home => None,
    };
    if let (Source::Placed { url, name, kept }, true) =
        (&source, target_name.as_deref() == Some(found.name.as_str()))
    {
        // Back into the home: copied and recorded in one transaction of the home's.
        let mut from = Session::new(config(url).map_err(OpenError::Url)?);
        runtime.block_on(still_alone(home))?;
        let leases = runtime.block_on(fence(&mut from, range, &source))?;
        let into = Destination::Home {
            placed: name,
            kept: *kept,
            rest: source.rest(range),
        };
        let copied = runtime.block_on(copy(&mut from, home, range, &leases, into))?;
        return Ok(Moved {
            home: true,
            left: forget(runtime, (home, &mut from), range, (name, split)),
            split,
            ..Moved::copied(copied, shown(url))
        });
    }
    let from_url = match &source {
        Source::Home => settings.url.as_str(),
        Source::Placed { url, .. } => url.as_str(),
    };
    let from_name = match &source {
        Source::Home => found.name.as_str(),
        Source::Placed { name, .. } => name.as_str(),
    };
    if let Some(join) = beside_of(&found.placed, range, target_name.as_deref()) {
        // Into the database of the range beside, which keeps the two as one from then on.
        let mut from = match &source {
            Source::Home => home.sibling(),
            Source::Placed { url, .. } => Session::new(config(url).map_err(OpenError::Url)?),
        };
        runtime.block_on(still_alone(home))?;
        let leases = runtime.block_on(fence(&mut from, range, &source))?;
        let mut into = target.into_session();
        let into_beside = Destination::Beside(join);
        runtime.block_on(still_alone(home))?;
        let copied = runtime.block_on(copy(&mut from, &mut into, range, &leases, into_beside))?;
        let target = Target::Beside(join);
        runtime.block_on(record(home, range, (&source, &leases), target))?;
        return Ok(Moved {
            left: forget(runtime, (home, &mut from), range, (from_name, split)),
            split,
            joined: Some(join.joined),
            ..Moved::copied(copied, shown(from_url))
        });
    }
    // Made as a node makes a range's database, or found to be a copy this move began.
    let role = Role::Placed {
        home: found.name.clone(),
        range,
    };
    let made = schema::prepare_as(
        &mut target,
        &found.region,
        &found.account,
        (found.shards, role),
    )
    .map_err(|error| match error {
        OpenError::Database(cause) => OpenError::Database(cause),
        other => refused(to, &format!("give an empty database: {other}")),
    })?;
    if made.placed_for != Some((found.name.clone(), range)) || made.shards != found.shards {
        return Err(refused(
            to,
            "the database holds another log: give an empty database",
        ));
    }
    let mut target = target.into_session();
    let mut from = match &source {
        Source::Home => home.sibling(),
        Source::Placed { url, .. } => Session::new(config(url).map_err(OpenError::Url)?),
    };
    runtime.block_on(still_alone(home))?;
    let leases = runtime.block_on(fence(&mut from, range, &source))?;
    let into = Destination::Placed;
    runtime.block_on(still_alone(home))?;
    let copied = runtime.block_on(copy(&mut from, &mut target, range, &leases, into))?;
    let target = Target::Own(&made.database);
    runtime.block_on(record(home, range, (&source, &leases), target))?;
    Ok(Moved {
        left: forget(runtime, (home, &mut from), range, (from_name, split)),
        split,
        ..Moved::copied(copied, shown(from_url))
    })
}

/// Drops the range's rows but its leases from the database it moved out of (named `name`),
/// which is never read for them again: the home drops its leases of the range as it records
/// the move, a range's database keeps them held, so that no node leads the range there. A
/// database split keeps the rest only: the range's leases go too, and it records the rest as
/// its range. Says why if they were left, as they are once the `home` connection holding the
/// lock on moves is gone (another move may have begun).
fn forget(
    runtime: &tokio::runtime::Runtime,
    (home, from): (&mut Session, &mut Session),
    range: (i32, i32),
    (name, split): (&str, Option<Split>),
) -> Option<String> {
    let dropped = runtime
        .block_on(still_alone(home))
        .and_then(|()| match split {
            Some(split) => runtime.block_on(trim(from, name, split.rest)),
            None => runtime.block_on(drop_rows(from, range)),
        });
    dropped.err().map(|error| error.to_string())
}

/// A move's failure, saying that it stopped there when the connection holding the lock on
/// moves is gone: it sent no step after it found that.
fn stopped(error: OpenError, home: &Session) -> OpenError {
    match error {
        OpenError::Database(cause) if home.unpinned() => OpenError::Database(format!(
            "{cause}: the move stopped there, what it did so far kept; run it again to finish it"
        )),
        other => other,
    }
}

fn refused(to: &Placed, why: &str) -> OpenError {
    OpenError::ShardMap(format!("--move-shards {}: {why}", to.range()))
}

/// Where the home says the range is kept, refusing a range it cannot move.
fn source_of(
    home: &Home,
    (first, last): (i32, i32),
    to: &Placed,
    given: &[Placed],
) -> Result<Source, OpenError> {
    if home.placed_for {
        return Err(refused(
            to,
            "the --storage database keeps shards for another home: give that one",
        ));
    }
    if home.version != schema::VERSION {
        return Err(refused(
            to,
            &format!(
                "the --storage database's tables are version {}: start a node of this build \
                 on it first, which upgrades them to version {}",
                home.version,
                schema::VERSION
            ),
        ));
    }
    if first == 0 || last >= home.shards {
        return Err(refused(
            to,
            &format!(
                "shard 0 stays in the --storage database, and the database has {} shards \
                 (0-{})",
                home.shards,
                home.shards - 1
            ),
        ));
    }
    let overlapping = (home.placed.iter()).find(|(f, l, _)| *f <= last && first <= *l);
    let Some((f, l, name)) = overlapping else {
        return Ok(Source::Home);
    };
    if *f < first && last < *l {
        return Err(refused(
            to,
            &format!(
                "shards {f}-{l} are kept in a database of their own, and only a range that \
                 begins or ends them moves out of it: move {first}-{l} out, then {}-{l} on into \
                 another database",
                last + 1
            ),
        ));
    }
    if first < *f || *l < last {
        return Err(refused(
            to,
            &format!(
                "a move takes shards from one place only, and shards {f}-{l} are kept in a \
                 database of their own: to join ranges, move one into the database of the \
                 other (or each back into the home, the --storage URL, then the whole range \
                 out)"
            ),
        ));
    }
    let Some(name) = name else {
        return Err(refused(
            to,
            "no database was made for these shards yet, so nothing is kept to move: start \
             every node with the new one as --shard-database",
        ));
    };
    let url = Placed::given_for(given, (*f, *l))
        .map(|p| p.url.clone())
        .ok_or_else(|| {
            refused(
                to,
                &format!(
                    "shards {f}-{l} are kept in a database of their own: name it with \
                     --shard-database {f}-{l}=URL as the nodes were started"
                ),
            )
        })?;
    Ok(Source::Placed {
        url,
        name: name.clone(),
        kept: (*f, *l),
    })
}

async fn read_home(home: &mut Session) -> Result<Home, OpenError> {
    let client = connected(home).await?;
    let exists = within(
        "reading the home",
        client.query_one("SELECT to_regclass('log_home') IS NOT NULL", &[]),
    )
    .await?
    .get::<_, bool>(0);
    if !exists {
        return Err(OpenError::ShardMap(
            "the --storage database holds no log: nothing to move".into(),
        ));
    }
    let version: i32 = within(
        "reading the home",
        client.query_one("SELECT version FROM log_home", &[]),
    )
    .await?
    .get(0);
    if version != schema::VERSION {
        return Ok(Home {
            version,
            region: String::new(),
            account: String::new(),
            shards: 0,
            name: String::new(),
            placed_for: false,
            placed: Vec::new(),
            live: Vec::new(),
        });
    }
    let row = within(
        "reading the home",
        client.query_one(
            "SELECT region, account, shards, database, home IS NOT NULL FROM log_home",
            &[],
        ),
    )
    .await?;
    let placed = within(
        "reading the home",
        client.query(
            "SELECT first_shard, last_shard, database FROM log_placed ORDER BY first_shard",
            &[],
        ),
    )
    .await?;
    let lease_ms = super::lease::LEASE.as_millis() as f64;
    let live = within(
        "reading the live nodes",
        client.query(
            "SELECT url FROM log_nodes WHERE seen > now() - $1 * interval '1 millisecond' \
             ORDER BY url",
            &[&lease_ms],
        ),
    )
    .await?;
    Ok(Home {
        version,
        region: row.get(0),
        account: row.get(1),
        shards: row.get(2),
        name: row.get(3),
        placed_for: row.get(4),
        placed: (placed.iter())
            .map(|p| (p.get(0), p.get(1), p.get(2)))
            .collect(),
        live: live.iter().map(|row| row.get(0)).collect(),
    })
}

/// Takes every lease of the range where it is kept now, with a new epoch and for good (one
/// this move took before keeps its epoch); refused while a node's lease on one is current.
async fn fence(
    from: &mut Session,
    (first, last): (i32, i32),
    source: &Source,
) -> Result<Vec<Lease>, OpenError> {
    let client = connected(from).await?;
    let tx = within("taking the leases", client.transaction()).await?;
    if let Source::Placed { name, kept, .. } = source {
        let row = within(
            "reading the range's database",
            tx.query_opt(
                "SELECT database, first_shard, last_shard FROM log_home \
                 WHERE to_regclass('log_home') IS NOT NULL",
                &[],
            ),
        )
        .await;
        let recorded = match row {
            Ok(Some(row)) => {
                let (database, f, l): (String, Option<i32>, Option<i32>) =
                    (row.get(0), row.get(1), row.get(2));
                database == *name && (f, l) == (Some(kept.0), Some(kept.1))
            }
            Ok(None) => false,
            // No such table (or column) is another database than the home records.
            Err(OpenError::Database(cause)) if cause.contains("does not exist") => false,
            Err(error) => return Err(error),
        };
        if !recorded {
            return Err(OpenError::ShardMap(format!(
                "--shard-database {}-{}: not the database the home records for these shards",
                kept.0, kept.1
            )));
        }
    }
    let rows = within(
        "taking the leases",
        tx.query(
            "SELECT shard, node, expires > now() FROM log_shards \
             WHERE shard BETWEEN $1 AND $2 ORDER BY shard FOR UPDATE",
            &[&first, &last],
        ),
    )
    .await?;
    if rows.len() != (last - first + 1) as usize {
        return Err(OpenError::ShardMap(format!(
            "the database that keeps shards {first}-{last} has a lease for {} of them",
            rows.len()
        )));
    }
    for row in &rows {
        let (shard, node, current): (i32, String, bool) = (row.get(0), row.get(1), row.get(2));
        if current && node != MOVER {
            return Err(OpenError::ShardMap(format!(
                "a node leads shard {shard} (its lease is current): stop every node before \
                 moving shards (one that stopped without giving its leases up holds them 5 s \
                 more)"
            )));
        }
    }
    // With the lease rows locked, no insert commits meanwhile. A gap (between batches, or
    // between the snapshot the log starts from and its first batch) would be read in the
    // copy, whose rows share one transaction, as a torn tail and cut rather than refused.
    let gap = within(
        "reading the log",
        tx.query_opt(
            "SELECT b.shard, b.first_lsn FROM (SELECT shard, first_lsn, \
             lag(last_lsn) OVER w AS before, row_number() OVER w AS n \
             FROM log_batches WHERE shard BETWEEN $1 AND $2 \
             WINDOW w AS (PARTITION BY shard ORDER BY first_lsn)) AS b \
             JOIN log_shards l ON l.shard = b.shard \
             LEFT JOIN log_snapshots s ON s.id = l.snapshot \
             WHERE (b.n = 1 AND b.first_lsn > coalesce(s.first_lsn, 0)) \
             OR (b.n > 1 AND b.first_lsn <> b.before + 1) \
             ORDER BY b.shard, b.first_lsn LIMIT 1",
            &[&first, &last],
        ),
    )
    .await?;
    if let Some(gap) = gap {
        let (shard, record): (i32, i64) = (gap.get(0), gap.get(1));
        return Err(OpenError::ShardMap(format!(
            "shard {shard}'s log has a gap before record {record} (a leader that stopped with \
             two inserts under way leaves one): start a node on it once, which cuts a torn \
             tail or refuses damage, stop it, then move the shards"
        )));
    }
    within(
        "taking the leases",
        tx.execute(
            "UPDATE log_shards SET epoch = epoch + 1, node = $3, url = '', \
             expires = now() + interval '100 years' \
             WHERE shard BETWEEN $1 AND $2 AND node <> $3",
            &[&first, &last, &MOVER],
        ),
    )
    .await?;
    let taken = within(
        "taking the leases",
        tx.query(
            "SELECT shard, epoch, clock_ms, snapshot FROM log_shards \
             WHERE shard BETWEEN $1 AND $2 ORDER BY shard",
            &[&first, &last],
        ),
    )
    .await?;
    within("taking the leases", tx.commit()).await?;
    Ok(taken
        .iter()
        .map(|row| Lease {
            shard: row.get(0),
            epoch: row.get(1),
            clock_ms: row.get(2),
            snapshot: row.get(3),
        })
        .collect())
}
