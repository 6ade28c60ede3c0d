//! A blocking connection to the database for the threads that write the log (the log writer,
//! the snapshot's thread, the lease keeper): tokio-postgres driven by a small runtime of the
//! thread's own, with every wait bounded. A connection whose request timed out or failed is
//! dropped and made again at the next use, so a hung or restarted host is left behind.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

/// Longest a start-up request (the schema, the lease, a page of recovery) may take.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest a connection attempt to one host waits (each host of a multi-host URL in turn).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a connection may go without an answer from its host's kernel before it counts as
/// dead (TCP user timeout and keepalive idle time).
const DEAD_CONNECTION: Duration = Duration::from_secs(5);

/// Every session's bounds on locks, sent with the connection (the URL's own options come
/// after, so an operator's setting wins). A node frozen or cut off inside a transaction (a
/// snapshot being kept holds the lease's row) is ended by the server after 2 s idle, so the
/// lock goes with it rather than after TCP gives up on the connection; and no statement
/// waits for a lock longer than 5 s, so one waiting behind such a node fails and is tried
/// again instead of queueing others behind it.
const SESSION_OPTIONS: &str = "-c idle_in_transaction_session_timeout=2000 -c lock_timeout=5000";

/// The URL's settings, with the timeouts above where the URL sets none.
pub fn config(url: &str) -> Result<Config, String> {
    let mut config: Config = url
        .parse()
        .map_err(|e: tokio_postgres::Error| format!("invalid PostgreSQL URL: {e}"))?;
    let options = match config.get_options() {
        Some(own) => format!("{SESSION_OPTIONS} {own}"),
        None => SESSION_OPTIONS.to_string(),
    };
    config.options(&options);
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

/// One configuration per host of `config`, in order, each with every other setting of it: a
/// connection is tried host by host, each bounded by its own timeout, so a host that accepts
/// and then never answers costs its own timeout, not the whole attempt. tokio-postgres bounds
/// only the socket's connect per host, and one overall timeout would fire before the second
/// host of a multi-host URL is tried.
fn per_host(config: &Config) -> Vec<Config> {
    let hosts = config.get_hosts();
    let ports = config.get_ports();
    let addrs = config.get_hostaddrs();
    (0..hosts.len().max(1))
        .map(|at| {
            let mut one = Config::new();
            if let Some(user) = config.get_user() {
                one.user(user);
            }
            if let Some(password) = config.get_password() {
                one.password(password);
            }
            if let Some(dbname) = config.get_dbname() {
                one.dbname(dbname);
            }
            if let Some(options) = config.get_options() {
                one.options(options);
            }
            if let Some(name) = config.get_application_name() {
                one.application_name(name);
            }
            one.ssl_mode(config.get_ssl_mode())
                .ssl_negotiation(config.get_ssl_negotiation())
                .target_session_attrs(config.get_target_session_attrs())
                .channel_binding(config.get_channel_binding())
                .keepalives(config.get_keepalives())
                .keepalives_idle(config.get_keepalives_idle());
            match hosts.get(at) {
                Some(tokio_postgres::config::Host::Tcp(host)) => {
                    one.host(host);
                }
                Some(tokio_postgres::config::Host::Unix(path)) => {
                    one.host_path(path);
                }
                None => {}
            }
            if let Some(addr) = addrs.get(at) {
                one.hostaddr(*addr);
            }
            // One port for every host, or one each.
            if let Some(port) = ports.get(at).or(ports.first().filter(|_| ports.len() == 1)) {
                one.port(*port);
            }
            if let Some(timeout) = config.get_connect_timeout() {
                one.connect_timeout(*timeout);
            }
            if let Some(timeout) = config.get_tcp_user_timeout() {
                one.tcp_user_timeout(*timeout);
            }
            if let Some(interval) = config.get_keepalives_interval() {
                one.keepalives_interval(interval);
            }
            if let Some(retries) = config.get_keepalives_retries() {
                one.keepalives_retries(retries);
            }
            one
        })
        .collect()
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
#[derive(Debug, Clone)]
pub struct Failed {
    pub cause: String,
    pub unknown_outcome: bool,
    /// The database's SQLSTATE, when it answered a request with an error.
    pub code: Option<String>,
    /// The SQLSTATE a server answered a connection attempt with (a password refused, no such
    /// database, too many connections): it is there, and refused.
    pub refused_at_connect: Option<String>,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.cause)
    }
}

/// A request's work on the connection, as `Blocking::run` takes it.
pub type Work<'c, T> = Pin<Box<dyn Future<Output = Result<T, tokio_postgres::Error>> + 'c>>;

/// A host as an operator wrote it, for messages.
fn host_name(config: &Config) -> String {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => format!("{host}:{port}"),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "the default host".into(),
    }
}

/// One connection to the database, made (host by host) at its first use and again after a
/// failure dropped it; its requests run inside whatever runtime drives them.
pub struct Session {
    config: Config,
    client: Option<Client>,
    /// One more for each connection made: statements prepared on an earlier one are gone.
    generation: u64,
    /// The host the last connection was made to, tried first next time.
    preferred: usize,
    /// What its first connection holds that a new one would not (a session's advisory lock),
    /// if anything: once that connection is lost, no other is made.
    pinned: Option<&'static str>,
}

impl Session {
    pub fn new(config: Config) -> Session {
        Session {
            config,
            client: None,
            generation: 0,
            preferred: 0,
            pinned: None,
        }
    }

    /// A session whose first connection is its only one (`connected` fails once that one is
    /// lost), since it holds `held`, which only that connection holds.
    pub fn pinned(config: Config, held: &'static str) -> Session {
        Session {
            pinned: Some(held),
            ..Session::new(config)
        }
    }

    /// A pinned session's one connection is gone, and with it what only it held.
    pub fn unpinned(&self) -> bool {
        let gone = self.client.as_ref().is_none_or(Client::is_closed);
        self.pinned.is_some() && self.generation > 0 && gone
    }

    /// Which connection is (or was last) in use: a statement prepared on another is gone.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Another session to the same database, not connected yet.
    pub fn sibling(&self) -> Session {
        Session::new(self.config.clone())
    }

    /// The connection, made first if there is none (its driving task is spawned on the
    /// current runtime).
    pub async fn connected(&mut self) -> Result<&mut Client, Failed> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        if let Some(held) = self.pinned.filter(|_| self.unpinned()) {
            return Err(Failed {
                cause: format!(
                    "the connection holding {held} was lost or dropped, and a new one would \
                     not hold it"
                ),
                unknown_outcome: false,
                code: None,
                refused_at_connect: None,
            });
        }
        if self.client.is_none() {
            let mut causes = Vec::new();
            let mut refused = None;
            let hosts = per_host(&self.config);
            let order = (0..hosts.len()).map(|at| (at + self.preferred) % hosts.len());
            for (at, host) in order.map(|at| (at, &hosts[at])) {
                // The start-up exchange too: a host that accepts and never answers.
                match tokio::time::timeout(CONNECT_TIMEOUT, host.connect(NoTls)).await {
                    Ok(Ok((client, connection))) => {
                        tokio::spawn(connection);
                        self.client = Some(client);
                        self.generation += 1;
                        self.preferred = at;
                        break;
                    }
                    Ok(Err(error)) => {
                        if let Some(db) = error.as_db_error() {
                            refused = Some(db.code().code().to_string());
                        }
                        causes.push(describe(&error));
                    }
                    Err(_) => causes.push(format!(
                        "PostgreSQL: no answer from {} within {} ms",
                        host_name(host),
                        CONNECT_TIMEOUT.as_millis()
                    )),
                }
            }
            if self.client.is_none() {
                return Err(Failed {
                    cause: causes.join("; "),
                    unknown_outcome: false,
                    code: None,
                    refused_at_connect: refused,
                });
            }
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// What a request's error says, dropping the connection unless the database answered it
    /// plainly. A plain error the database answered says the request was not carried out and
    /// leaves the connection usable. A fatal one (the server shutting down, a connection or
    /// internal failure: classes 57, 08, XX) may come after a commit, and so may a cut
    /// connection: their outcome is unknown.
    pub fn failed(&mut self, error: &tokio_postgres::Error) -> Failed {
        let code = error.as_db_error().map(|db| db.code().code().to_string());
        let answered = error.as_db_error().is_some_and(|db| {
            let class = &db.code().code()[..2];
            db.severity() == "ERROR" && !matches!(class, "57" | "08" | "XX")
        });
        if !answered {
            self.client = None;
        }
        Failed {
            cause: describe(error),
            unknown_outcome: !answered,
            code,
            refused_at_connect: None,
        }
    }

    /// A request that took longer than `limit`: the connection is dropped, as the request
    /// may still be running.
    pub fn timed_out(&mut self, limit: Duration) -> Failed {
        self.client = None;
        Failed {
            cause: format!("PostgreSQL: no answer within {} ms", limit.as_millis()),
            unknown_outcome: true,
            code: None,
            refused_at_connect: None,
        }
    }
}

/// A session driven by a small runtime of the calling thread's own: every request blocks
/// that thread until answered or timed out.
pub struct Blocking {
    runtime: tokio::runtime::Runtime,
    session: Session,
}

impl Blocking {
    pub fn new(config: Config) -> std::io::Result<Blocking> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Blocking {
            runtime,
            session: Session::new(config),
        })
    }

    /// Which connection is (or was last) in use: a statement prepared on another is gone.
    pub fn generation(&self) -> u64 {
        self.session.generation
    }

    /// The session, to be driven by another runtime.
    pub fn into_session(self) -> Session {
        self.session
    }

    /// Runs `work` on the connection (made first if there is none), waiting at most `limit`.
    /// On any failure the connection is dropped: its request may still be running.
    pub fn run<T>(
        &mut self,
        limit: Duration,
        work: impl for<'c> FnOnce(&'c mut Client) -> Work<'c, T>,
    ) -> Result<T, Failed> {
        let session = &mut self.session;
        self.runtime.block_on(async {
            let client = session.connected().await?;
            match tokio::time::timeout(limit, work(client)).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(error)) => Err(session.failed(&error)),
                Err(_) => Err(session.timed_out(limit)),
            }
        })
    }
}
