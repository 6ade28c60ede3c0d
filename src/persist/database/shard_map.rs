//! Which database keeps each shard's log: the home database (`--storage`), unless a range of
//! shards is placed in another (`--shard-database FIRST-LAST=URL`), so that one database is
//! not the ceiling of a cluster. Each database fences its own shards' logs, snapshots and
//! leases; nothing is ever written to two databases in one commit, as nothing needs to be:
//! what crosses shards is carried between their engines, each side keeping it in its own log.
//! The home database also keeps what is the cluster's (the shard count, the live nodes, the
//! temporary credentials) and shard 0, whose lease decides which node leads every shard when
//! the shards are not spread.

/// A range of shards kept in a database of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub first: u32,
    pub last: u32,
    pub url: String,
}

impl Placed {
    /// How the range is named in messages: `16-31`.
    pub fn range(&self) -> String {
        format!("{}-{}", self.first, self.last)
    }

    /// The entry of `placed` for exactly the shards `first` to `last`, if one was given.
    pub(super) fn given_for(placed: &[Placed], (first, last): (i32, i32)) -> Option<&Placed> {
        (placed.iter()).find(|p| (p.first as i32, p.last as i32) == (first, last))
    }
}

/// A database as `GET /_orderly/cluster` shows it, `postgres://USER@HOST:PORT/DBNAME`, read
/// from its URL or connection string: only those parts, never a password or another
/// parameter, whatever form it was written in.
pub fn shown(url: &str) -> String {
    let Ok(config) = url.parse::<tokio_postgres::Config>() else {
        return "(not a PostgreSQL URL)".into();
    };
    let ports = config.get_ports();
    let hosts: Vec<String> = (config.get_hosts().iter().enumerate())
        .map(|(at, host)| {
            // One port for every host, or one each.
            let port = ports.get(at).or(ports.first()).copied().unwrap_or(5432);
            match host {
                tokio_postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
                tokio_postgres::config::Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let database = config.get_dbname().unwrap_or_default();
    format!("postgres://{user}{}/{database}", hosts.join(","))
}

/// Reads `FIRST-LAST=URL` (a `postgres://` URL: a key-value connection string has spaces,
/// which separate the ranges in `ORDERLY_SHARD_DATABASES`).
pub fn parse_placed(value: &str) -> Result<Placed, String> {
    let usage = "give FIRST-LAST=postgres://USER@HOST:PORT/DB (the shards FIRST to LAST)";
    let (range, url) = value.split_once('=').ok_or(usage)?;
    let (first, last) = range.split_once('-').ok_or(usage)?;
    let number = |n: &str| n.trim().parse::<u32>().map_err(|_| usage.to_string());
    let (first, last) = (number(first)?, number(last)?);
    if first > last {
        return Err(format!("the range {first}-{last} ends before it begins"));
    }
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(usage.into());
    }
    url.parse::<tokio_postgres::Config>()
        .map_err(|e| format!("not a PostgreSQL URL: {e}"))?;
    Ok(Placed {
        first,
        last,
        url: url.to_string(),
    })
}

/// The databases the shards' logs are kept in: each a site, the home's first (site 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardMap {
    home: String,
    /// In the order of their first shard.
    placed: Vec<Placed>,
    shards: u32,
}

impl ShardMap {
    /// Every shard in the database at `home`: one site.
    pub fn home_only(home: &str, shards: u32) -> ShardMap {
        ShardMap {
            home: home.to_string(),
            placed: Vec::new(),
            shards,
        }
    }

    /// The shards `placed` names kept in their databases, the rest in `home`'s. Refused when
    /// a range passes the last of `shards`, takes shard 0 (the home's), or overlaps another.
    pub fn new(home: &str, placed: &[Placed], shards: u32) -> Result<ShardMap, String> {
        let mut placed = placed.to_vec();
        placed.sort_by_key(|p| p.first);
        for (at, range) in placed.iter().enumerate() {
            if range.last >= shards {
                return Err(format!(
                    "--shard-database {} names shards past the last of --shards {shards}",
                    range.range()
                ));
            }
            if range.first == 0 {
                return Err(format!(
                    "--shard-database {}: shard 0 stays in the --storage database",
                    range.range()
                ));
            }
            if let Some(before) = at.checked_sub(1).map(|b| &placed[b]) {
                if before.last >= range.first {
                    return Err(format!(
                        "--shard-database {} overlaps {}",
                        range.range(),
                        before.range()
                    ));
                }
            }
        }
        Ok(ShardMap {
            home: home.to_string(),
            placed,
            shards,
        })
    }

    /// The site whose database keeps `shard`'s log: 0 for the home's.
    pub fn site_of(&self, shard: u32) -> usize {
        (self.placed.iter())
            .position(|p| (p.first..=p.last).contains(&shard))
            .map_or(0, |at| at + 1)
    }

    /// Each site's URL, the home's first.
    pub fn urls(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.home.as_str()).chain(self.placed.iter().map(|p| p.url.as_str()))
    }

    /// The ranges kept outside the home database, in order.
    pub fn placed(&self) -> &[Placed] {
        &self.placed
    }

    /// How many shards the key space is cut into.
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// How `site`'s database is named in messages.
    pub fn site_name(&self, site: usize) -> String {
        match site.checked_sub(1).and_then(|at| self.placed.get(at)) {
            Some(placed) => format!("the database of shards {}", placed.range()),
            None => "the --storage database".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(value: &str) -> Placed {
        parse_placed(value).unwrap()
    }

    #[test]
    fn a_database_is_shown_without_its_password_whatever_its_form() {
        for (given, seen) in [
            (
                "postgres://u:s3cret@db:5433/orderly",
                "postgres://u@db:5433/orderly",
            ),
            // A password with '/' and '+' (base64), read up to the '@' as PostgreSQL does.
            (
                "postgres://u:ab/s3cret+x@db/orderly",
                "postgres://u@db:5432/orderly",
            ),
            (
                "postgres://u@a:1,b:2/x?password=s3cret&sslmode=require",
                "postgres://u@a:1,b:2/x",
            ),
            (
                "postgres://u@db/x?pass%77ord=s3cret",
                "postgres://u@db:5432/x",
            ),
            (
                "host=db user=u password='s3 cret' dbname=x",
                "postgres://u@db:5432/x",
            ),
            ("host=db password = s3cret dbname=x", "postgres://db:5432/x"),
        ] {
            assert_eq!(shown(given), seen, "{given}");
        }
        assert!(!shown("postgres://u:s3cret@").contains("s3cret"));
    }

    #[test]
    fn a_range_names_its_shards_and_a_postgres_url() {
        let p = placed("16-31=postgres://u@h:5433/b");
        assert_eq!(
            (p.first, p.last, p.url.as_str()),
            (16, 31, "postgres://u@h:5433/b")
        );
        for bad in [
            "16-31",
            "16=postgres://u@h/b",
            "x-31=postgres://u@h/b",
            "31-16=postgres://u@h/b",
            "16-31=host=h dbname=b",
            "16-31=http://h/b",
        ] {
            assert!(parse_placed(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_shard_is_kept_in_the_database_its_range_names_and_the_rest_at_home() {
        let map = ShardMap::new(
            "postgres://u@h/home",
            &[
                placed("24-31=postgres://u@h/d"),
                placed("8-15=postgres://u@h/c"),
            ],
            32,
        )
        .unwrap();
        let sites: Vec<usize> = (0..32).map(|s| map.site_of(s)).collect();
        assert_eq!(&sites[..8], &[0; 8]);
        assert_eq!(&sites[8..16], &[1; 8]);
        assert_eq!(&sites[16..24], &[0; 8]);
        assert_eq!(&sites[24..], &[2; 8]);
        let urls: Vec<&str> = map.urls().collect();
        assert_eq!(
            urls,
            [
                "postgres://u@h/home",
                "postgres://u@h/c",
                "postgres://u@h/d"
            ]
        );
        assert_eq!(map.site_name(2), "the database of shards 24-31");
    }

    #[test]
    fn ranges_past_the_shards_on_shard_zero_or_overlapping_are_refused() {
        let new = |ranges: &[&str]| {
            let ranges: Vec<Placed> = ranges.iter().map(|r| placed(r)).collect();
            ShardMap::new("postgres://u@h/home", &ranges, 32)
        };
        assert!(new(&["16-32=postgres://u@h/b"]).is_err());
        assert!(new(&["0-15=postgres://u@h/b"]).is_err());
        let overlap = new(&["20-31=postgres://u@h/c", "16-20=postgres://u@h/b"]);
        assert!(overlap.unwrap_err().contains("overlaps 16-20"));
        assert!(new(&["16-23=postgres://u@h/b", "24-31=postgres://u@h/c"]).is_ok());
    }
}
