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
}

impl Sites {
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
            )?)),
            false => Ok(None),
        }
    };
    let mut sites = vec![Site {
        shared_commit: shared(&config)?,
        config,
    }];
    // Checked by this process already, and still the databases the home records: not asked.
    let recorded: Vec<Option<String>> = made.placed.iter().map(|p| p.2.clone()).collect();
    let checked = lock(&settings.placed_checked).clone();
    let checked = checked.is_some_and(|names| {
        let names: Vec<Option<String>> = names.into_iter().map(Some).collect();
        names == recorded
    });
    let mut names = Vec::with_capacity(recorded.len());
    for (placed, recorded) in map.placed().iter().zip(&recorded) {
        let config = connection::config(&placed.url).map_err(OpenError::Url)?;
        if !checked {
            let mut db = Blocking::new(config.clone())?;
            let named = (made.database.as_str(), recorded.as_deref());
            names.push(check_placed(&mut db, settings, (named, placed), home)?);
        }
        sites.push(Site {
            shared_commit: shared(&config)?,
            config,
        });
    }
    if !checked {
        *lock(&settings.placed_checked) = Some(names);
    }
    Ok(Sites { map, sites })
}

/// Makes ready the database `placed` names (connected as `db`) for the home named `home_name`
/// (connected as `home`), and records it in the home as the range's; `recorded`: the name of
/// the database the home recorded for the range, if one was made for it before (any other is
/// refused before anything is written to it). Answers the database's name.
fn check_placed(
    db: &mut Blocking,
    settings: &Settings,
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
    let made = match schema::prepare_as(db, &settings.region, &settings.account_id, (asked, role)) {
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
        Err(error) => return refuse(error.to_string()),
    };
    match &made.placed_for {
        None => return refuse("the database is a home database of its own".into()),
        Some((home, _)) if home != home_name => {
            return refuse("the database keeps shards for another home database".into())
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
