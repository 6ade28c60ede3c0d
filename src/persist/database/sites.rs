//! Every database of the shard map made ready when a node starts, each checked to be what the
//! map says: the home with the ranges it placed when it was made, each placed database with
//! that home and its range, and each range's database the one the home recorded first. So two
//! databases never both keep a shard's lease, whatever nodes started with other settings were
//! told.

use std::sync::{Arc, Mutex, MutexGuard};

use super::connection::{self, Blocking};
use super::schema::{self, Role};
use super::settings::Settings;
use super::shard_map::{Placed, ShardMap};
use super::shared_commit::SharedCommit;
use super::OpenError;

/// One database of the shard map, as this node uses it.
pub struct Site {
    pub config: tokio_postgres::Config,
    /// The node's commit of the writes of every shard it leads in this database, with more
    /// than one shard; with one, the log's own connections insert.
    pub shared_commit: Option<Arc<SharedCommit>>,
}

/// The databases the shards' logs are kept in, the home's first.
pub struct Sites {
    pub map: ShardMap,
    pub sites: Vec<Site>,
    /// Where each database stands with this process's check against the home (the home's
    /// first, always checked).
    checks: Mutex<Vec<Check>>,
    /// What a check put off until a database answers needs.
    later: Later,
}

/// Whether a database of the shard map was checked to be what the map says.
#[derive(Clone, Debug)]
enum Check {
    Done,
    /// It did not answer when the process started, with shards led apart (`--spread-shards`):
    /// checked before its first lease is asked for, its shards led by none of this process's
    /// generations until then.
    PutOff,
    /// Checked and found to be another than the map says: its shards are not led here.
    Refused(String),
}

/// What a check put off needs: the settings it checks against, the home's name, the database
/// names the home recorded for each range when the process started, and where this process
/// keeps the names it checked.
struct Later {
    asked: Asked,
    home_name: String,
    recorded: Vec<Option<String>>,
    checked: Arc<Mutex<Option<Vec<Option<String>>>>>,
}

/// The region, account and shard count a database must agree with.
#[derive(Clone)]
struct Asked {
    region: String,
    account: String,
    shards: u32,
}

impl Sites {
    /// Checks `site`'s database (connected as `db`) against the home, if its check was put
    /// off; refused while it does not answer (asked again next time) or once it was found to
    /// be another than the map says. Blocking.
    pub fn checked(&self, site: usize, db: &mut Blocking) -> Result<(), String> {
        // Held through the check: another shard of the same database waits for its outcome.
        let mut checks = lock(&self.checks);
        match checks.get(site) {
            None | Some(Check::Done) => return Ok(()),
            Some(Check::Refused(why)) => return Err(why.clone()),
            Some(Check::PutOff) => {}
        }
        let name = self.map.site_name(site);
        if let Err(failed) = answers(db) {
            return Err(format!("{name} does not answer: {failed}"));
        }
        let (Some(placed), Some(recorded)) = (
            self.map.placed().get(site - 1),
            self.later.recorded.get(site - 1),
        ) else {
            return Err(format!("{name} is not in the shard map"));
        };
        let mut home = Blocking::new(self.sites[0].config.clone()).map_err(|e| e.to_string())?;
        let later = &self.later;
        let named = (later.home_name.as_str(), recorded.as_deref());
        match check_placed(db, &later.asked, (named, placed), &mut home) {
            Ok(database) => {
                tracing::info!(database = %name, "checked against the shard map once it answered: leading its shards from now on");
                checks[site] = Check::Done;
                let mut checked = lock(&later.checked);
                let names = checked.get_or_insert_with(|| vec![None; later.recorded.len()]);
                if let Some(slot) = names.get_mut(site - 1) {
                    *slot = Some(database);
                }
                Ok(())
            }
            // What the map says refused: not asked again by this generation. Anything else
            // (either database gone again part way, a statement timed out) is asked again.
            Err(error @ OpenError::ShardMap(_)) => {
                tracing::error!(database = %name, %error, "not what the shard map says: its shards are not led by this process");
                let why = format!("{name}: {error}");
                checks[site] = Check::Refused(why.clone());
                Err(why)
            }
            Err(error) => Err(format!("{name}: {error}")),
        }
    }

    /// Whether `site`'s database, checked late, was found to be another than the map says
    /// (its shards are not led by this generation).
    pub fn refused(&self, site: usize) -> bool {
        matches!(lock(&self.checks).get(site), Some(Check::Refused(_)))
    }

    /// What a lease keeper reads each database's promise with: its URL's hosts, whether it
    /// asks for a read-write one, and its name.
    pub fn replication_reads(&self) -> Vec<super::replication::Reading> {
        (self.sites.iter().enumerate())
            .map(|(at, site)| {
                (
                    super::replication::of_url(&site.config),
                    self.map.site_name(at),
                )
            })
            .collect()
    }
}

/// Makes ready the home database (`settings.url`, connected as `home`) and every database
/// the shard map places a range in, and checks that they agree.
pub fn prepare(
    settings: &Settings,
    (home, config): (&mut Blocking, tokio_postgres::Config),
) -> Result<Sites, OpenError> {
    let asked = settings.shards as i32;
    let ranges: Vec<(i32, i32)> = (settings.placed.iter())
        .map(|p| (p.first as i32, p.last as i32))
        .collect();
    // Checked before anything is written: the home records the ranges it is first made with.
    let map = ShardMap::new(&settings.url, &settings.placed, settings.shards)
        .map_err(OpenError::ShardMap)?;
    let (region, account) = (&settings.region, &settings.account_id);
    let made = schema::prepare_as(home, region, account, (asked, Role::Home(ranges.clone())))?;
    if let Some((_, (first, last))) = &made.placed_for {
        return Err(OpenError::ShardMap(format!(
            "the --storage database keeps shards {first}-{last} for another database: give \
             that one as --storage"
        )));
    }
    if made.shards != asked {
        return Err(OpenError::ShardCount {
            found: made.shards,
            asked,
        });
    }
    let recorded: Vec<(i32, i32)> = made.placed.iter().map(|p| (p.0, p.1)).collect();
    let mut given = ranges;
    given.sort();
    if recorded != given {
        return Err(OpenError::ShardMap(format!(
            "the --storage database was first used with {} in other databases, and this node \
             was given {}: start every node with the --shard-database ranges the database was \
             first used with (fixed from then on)",
            named(&recorded),
            named(&given)
        )));
    }
    let shared = |config: &tokio_postgres::Config| -> Result<_, OpenError> {
        match settings.shards > 1 {
            true => Ok(Some(SharedCommit::start(
                connection::Session::new(config.clone()),
                settings.inserts,
                settings.commit_wait,
            )?)),
            false => Ok(None),
        }
    };
    let mut sites = vec![Site {
        shared_commit: shared(&config)?,
        config,
    }];
    let asked = Asked {
        region: settings.region.clone(),
        account: settings.account_id.clone(),
        shards: settings.shards,
    };
    let recorded: Vec<Option<String>> = made.placed.iter().map(|p| p.2.clone()).collect();
    // What this process checked before (none at its first start), per range.
    let before = lock(&settings.placed_checked).clone();
    let first_start = before.is_none();
    let mut names = before.unwrap_or_else(|| vec![None; recorded.len()]);
    names.resize(recorded.len(), None);
    let mut checks = vec![Check::Done];
    for ((placed, recorded), name) in map.placed().iter().zip(&recorded).zip(&mut names) {
        let config = connection::config(&placed.url).map_err(OpenError::Url)?;
        // Checked by this process already, and still the database the home records: not
        // asked. With shards led apart, one that does not answer at the first start, or was
        // not checked by then, is checked once it answers: it costs its own shards only.
        let check = if name.is_some() && name == recorded {
            Check::Done
        } else if settings.shards_alone && !first_start {
            Check::PutOff
        } else {
            let mut db = Blocking::new(config.clone())?;
            let database = map.site_name(checks.len());
            match answers(&mut db) {
                Err(failed) if settings.shards_alone && unreachable(&failed) => {
                    tracing::warn!(%database, cause = %failed, "does not answer: its shards wait until it does, the others are led meanwhile");
                    Check::PutOff
                }
                // A node leading every shard or none cannot lead without it; a database that
                // answers with an error (a password refused, no such database) is refused.
                Err(failed) if unreachable(&failed) => {
                    return Err(OpenError::Database(format!(
                        "{database} does not answer: {failed}"
                    )))
                }
                Err(failed) => return Err(OpenError::Database(format!("{database}: {failed}"))),
                Ok(()) => {
                    let named = (made.database.as_str(), recorded.as_deref());
                    *name = Some(check_placed(&mut db, &asked, (named, placed), home)?);
                    Check::Done
                }
            }
        };
        checks.push(check);
        sites.push(Site {
            shared_commit: shared(&config)?,
            config,
        });
    }
    *lock(&settings.placed_checked) = Some(names);
    let later = Later {
        asked,
        home_name: made.database.clone(),
        recorded,
        checked: settings.placed_checked.clone(),
    };
    Ok(Sites {
        map,
        sites,
        checks: Mutex::new(checks),
        later,
    })
}

/// Longest a database is waited for to say it answers.
const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether the database `db` is connected to answers a statement.
fn answers(db: &mut Blocking) -> Result<(), connection::Failed> {
    db.run(
        ANSWER_WAIT,
        |client: &mut tokio_postgres::Client| -> connection::Work<'_, _> {
            Box::pin(async move { client.simple_query("SELECT 1").await.map(|_| ()) })
        },
    )
}

/// Whether `failed` says the database could not be reached (no answer, a connection
/// refused or lost, a server starting up or shutting down), not that it answered with a
/// refusal that waiting does not mend.
fn unreachable(failed: &connection::Failed) -> bool {
    match (failed.code.as_deref()).or(failed.refused_at_connect.as_deref()) {
        None => true,
        // Connection exceptions; the server starting, shutting down or in crash recovery, or
        // out of connections for now.
        Some(code) => {
            code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300")
        }
    }
}

/// Makes ready the database `placed` names (connected as `db`) for the home named `home_name`
/// (connected as `home`), and records it in the home as the range's; `recorded`: the name of
/// the database the home recorded for the range, if one was made for it before (any other is
/// refused before anything is written to it). Answers the database's name.
fn check_placed(
    db: &mut Blocking,
    settings: &Asked,
    ((home_name, recorded), placed): ((&str, Option<&str>), &Placed),
    home: &mut Blocking,
) -> Result<String, OpenError> {
    let range = (placed.first as i32, placed.last as i32);
    let role = Role::Placed {
        home: home_name.to_string(),
        range,
    };
    let asked = settings.shards as i32;
    let refuse = |why: String| {
        Err(OpenError::ShardMap(format!(
            "--shard-database {}: {why}",
            placed.range()
        )))
    };
    let another = "the --storage database records another database for these shards, made \
                   first";
    if let Some(recorded) = recorded {
        if schema::name_of(db)?.as_deref() != Some(recorded) {
            return refuse(another.into());
        }
    }
    let made = match schema::prepare_as(db, &settings.region, &settings.account, (asked, role)) {
        Ok(made) => made,
        // Said of the range's database: the advice meant for a --storage database (another
        // --region, moving a state in) would mislead.
        Err(OpenError::OtherHome { region, account }) => {
            return refuse(format!(
                "the database belongs to region {region} and account {account}, not this one's"
            ))
        }
        Err(OpenError::RowStorage) => {
            return refuse(
                "the database holds the tables of Orderly's earlier row-per-message storage: \
                 give an empty database"
                    .into(),
            )
        }
        // Not an answer about the database: said as it came, so a late check asks again.
        Err(OpenError::Database(error)) => {
            return Err(OpenError::Database(format!(
                "--shard-database {}: {error}",
                placed.range()
            )))
        }
        Err(error) => return refuse(error.to_string()),
    };
    match &made.placed_for {
        None => return refuse("the database is a home database of its own".into()),
        Some((home, _)) if home != home_name => {
            return refuse("the database keeps shards for another home database".into())
        }
        Some((_, kept)) if kept.0 <= range.0 && range.1 <= kept.1 && *kept != range => {
            return refuse(format!(
                "the database keeps shards {}-{}, more than the home records it for: a move \
                 of shards out of it or into it did not finish; run that move again with each \
                 range the home records as its --shard-database, which finishes it (or, for a \
                 move into it, abandon it by moving the range where the home keeps it)",
                kept.0, kept.1
            ))
        }
        Some((_, kept)) if *kept != range => {
            return refuse(format!("the database keeps shards {}-{}", kept.0, kept.1))
        }
        Some(_) if made.shards != asked => {
            return refuse(format!("the database counts {} shards", made.shards))
        }
        Some(_) => {}
    }
    let recorded = schema::record_placed(home, range.0, &made.database)?;
    if recorded != made.database {
        return refuse(another.into());
    }
    Ok(made.database)
}

/// How ranges are named in messages.
fn named(ranges: &[(i32, i32)]) -> String {
    match ranges.is_empty() {
        true => "no shards".into(),
        false => {
            let named: Vec<String> = ranges.iter().map(|(f, l)| format!("{f}-{l}")).collect();
            format!("shards {}", named.join(", "))
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
