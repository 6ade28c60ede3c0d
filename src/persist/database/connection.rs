//! A blocking connection to the database for the threads that write the log (the log writer,
//! the snapshot's thread, the lease keeper): tokio-postgres driven by a small runtime of the
//! thread's own, with every wait bounded. A connection whose request timed out or failed is
//! dropped and made again at the next use, so a hung or restarted host is left behind.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

/// Longest a connection attempt to one host waits (each host of a multi-host URL in turn).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a connection may go without an answer from its host's kernel before it counts as
/// dead (TCP user timeout and keepalive idle time).
const DEAD_CONNECTION: Duration = Duration::from_secs(5);

/// The URL's settings, with the timeouts above where the URL sets none.
pub fn config(url: &str) -> Result<Config, String> {
    let mut config: Config = url
        .parse()
        .map_err(|e: tokio_postgres::Error| format!("invalid PostgreSQL URL: {e}"))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(DEAD_CONNECTION);
    }
    config.keepalives(true);
    // tokio-postgres's default idle time (two hours) means the URL set none.
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(DEAD_CONNECTION);
    }
    Ok(config)
}

/// What went wrong talking to the database, with the database's own words when it said any.
pub fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!(
            "PostgreSQL: {}: {} ({})",
            db.severity(),
            db.message(),
            db.code().code()
        ),
        None => format!("PostgreSQL: {error}"),
    }
}

/// A request that failed: why, and whether the database surely did not carry it out (it
/// answered with an error) or its outcome is unknown (no answer, a connection lost).
#[derive(Debug)]
pub struct Failed {
    pub cause: String,
    pub unknown_outcome: bool,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.cause)
    }
}

/// A request's work on the connection, as `Blocking::run` takes it.
pub type Work<'c, T> = Pin<Box<dyn Future<Output = Result<T, tokio_postgres::Error>> + 'c>>;

pub struct Blocking {
    config: Config,
    runtime: tokio::runtime::Runtime,
    client: Option<Client>,
    /// One more for each connection made: statements prepared on an earlier one are gone.
    generation: u64,
}

impl Blocking {
    pub fn new(config: Config) -> std::io::Result<Blocking> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Blocking {
            config,
            runtime,
            client: None,
            generation: 0,
        })
    }

    /// Which connection is (or was last) in use: a statement prepared on another is gone.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Runs `work` on the connection (made first if there is none), waiting at most `limit`.
    /// On any failure the connection is dropped: its request may still be running.
    pub fn run<T>(
        &mut self,
        limit: Duration,
        work: impl for<'c> FnOnce(&'c mut Client) -> Work<'c, T>,
    ) -> Result<T, Failed> {
        let not_sent = |cause: String| Failed {
            cause,
            unknown_outcome: false,
        };
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        if self.client.is_none() {
            let config = self.config.clone();
            let connected = self.runtime.block_on(async move {
                // The connect timeout bounds each host; this bounds a host that accepts and
                // then never answers the start-up exchange.
                tokio::time::timeout(CONNECT_TIMEOUT * 3, config.connect(NoTls)).await
            });
            let (client, connection) = match connected {
                Ok(Ok(pair)) => pair,
                Ok(Err(error)) => return Err(not_sent(describe(&error))),
                Err(_) => return Err(not_sent("PostgreSQL: no answer while connecting".into())),
            };
            self.runtime.spawn(connection);
            self.client = Some(client);
            self.generation += 1;
        }
        let client = self.client.as_mut().expect("connected above");
        let answer = self
            .runtime
            .block_on(async { tokio::time::timeout(limit, work(client)).await });
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                // An error the database answered leaves the connection usable, and says the
                // request was not carried out; any other may have cut it off mid-way.
                let answered = error.as_db_error().is_some();
                if !answered {
                    self.client = None;
                }
                Err(Failed {
                    cause: describe(&error),
                    unknown_outcome: !answered,
                })
            }
            Err(_) => {
                self.client = None;
                Err(Failed {
                    cause: format!("PostgreSQL: no answer within {} ms", limit.as_millis()),
                    unknown_outcome: true,
                })
            }
        }
    }
}
