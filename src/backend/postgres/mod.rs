//! The PostgreSQL backend: every node keeps its state in one shared database, so several
//! stateless Orderly nodes serve one set of queues and topics (issue 30).
//!
//! Selected with `--storage postgres://…`. Under construction: queue administration, messages
//! (FIFO groups and their lock, deduplication, visibility, dead-letter queues, long polls woken
//! across nodes, receive attempt ids, retention, the in-flight limit), move tasks, topics
//! fanning out into queues and HTTP/S endpoints (the webhook outbox, shared by all nodes),
//! archives and replay, and inspection are implemented and tested against a real PostgreSQL.
//!
//! Each operation runs in one transaction at READ COMMITTED, taking row locks (`FOR UPDATE`)
//! on what it changes, so nodes changing the same queue take turns. The rules that need no
//! stored state are the service's; those that do are the engine's own pure functions
//! (`QueueConfig::apply`, `check_dead_letter_target`, `check_tags`), so both backends apply
//! the same ones.

mod activity;
mod archive;
mod attempts;
mod deliveries;
mod in_flight;
mod inspection;
mod message_store;
mod messages;
mod move_tasks;
mod publish;
mod queues;
mod recorded;
mod retention;
pub mod schema;
mod statements;
#[doc(hidden)]
pub mod test_database;
mod topics;
mod wakeup;
mod webhooks;

use std::sync::{Arc, Weak};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use thiserror::Error;
use tokio_postgres::NoTls;

use super::{BackendError, BackendResult};
use crate::clock::Clock;

#[derive(Debug, Error)]
pub enum PostgresError {
    #[error("invalid PostgreSQL URL: {0}")]
    Url(String),
    #[error("cannot reach PostgreSQL: {0}")]
    Connect(String),
    #[error(
        "the database's schema is version {found}, newer than this build of Orderly knows \
         ({known}): a newer Orderly has upgraded it; run that version"
    )]
    NewerSchema { found: i32, known: i32 },
    #[error(
        "the database belongs to region {region} and account {account}: start every node with \
         --region {region} --account-id {account}"
    )]
    OtherHome { region: String, account: String },
    #[error("PostgreSQL: {0}")]
    Database(#[from] tokio_postgres::Error),
}

/// Longest a request waits for a database connection (free, new, or checked for reuse).
const POOL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a connection may go without an answer from the database's host before it counts
/// as dead (TCP user timeout and keepalive idle time).
const DEAD_CONNECTION: Duration = Duration::from_secs(10);

/// What the backend needs besides the database.
pub struct Settings {
    /// `postgres://USER@HOST:PORT/DB` (any libpq-style URL tokio-postgres accepts).
    pub url: String,
    pub account_id: String,
    pub region: String,
    /// `--deleted-queue-cooldown`, in milliseconds (0: off).
    pub delete_cooldown_ms: u64,
    /// Connections this node keeps at most.
    pub pool_size: usize,
    /// Kept at the number of receives waiting for a message (`GET /metrics`).
    pub long_polls: prometheus_client::metrics::gauge::Gauge,
    /// Messages a queue may have in flight (AWS's 120,000, `INFLIGHT_LIMIT`).
    pub in_flight_limit: usize,
    /// `--webhook-max-pending`: notifications an HTTP/S subscription holds before new ones
    /// go to its dead-letter queue.
    pub webhook_max_pending: usize,
    /// How long a node holds a webhook delivery it is sending before another node may take
    /// it (longer than an attempt can last).
    pub webhook_lease_ms: u64,
    /// `--fifo-http-subscriptions`: FIFO topics take HTTP/S subscriptions (ordered webhooks).
    pub fifo_http_subscriptions: bool,
    /// Signalled once webhook deliveries were queued (this node's delivery worker).
    pub deliveries: Arc<tokio::sync::Notify>,
}

pub struct Postgres {
    pool: Pool,
    /// Keys of queues and topics (`engine::namespace`): table rows are named by key.
    namespaces: crate::engine::namespace::Namespaces,
    delete_cooldown_ms: u64,
    clock: Arc<dyn Clock>,
    wakers: Arc<wakeup::Wakers>,
    sweeps: retention::Sweeps,
    /// Listens for other nodes' sends (`wakeup::listen`).
    listener: tokio::task::JoinHandle<()>,
    /// This node's name in the database (the runner of the move tasks it paces).
    node: String,
    /// The backend itself, for the tasks it spawns (which stop once it is dropped).
    me: Weak<Postgres>,
    /// The tasks pacing move tasks, and the one taking over other nodes' lapsed ones.
    move_runners: super::pacing::Runners,
    /// What this node did (`/metrics`, the inspection API).
    activity: activity::NodeActivity,
    long_polls: prometheus_client::metrics::gauge::Gauge,
    in_flight: in_flight::InFlight,
    in_flight_limit: usize,
    webhook_max_pending: usize,
    webhook_lease_ms: u64,
    fifo_http_subscriptions: bool,
    deliveries: Arc<tokio::sync::Notify>,
    /// The SNS signing key once read or made (`publish::signer`).
    signer: tokio::sync::OnceCell<Arc<crate::engine::topic::signing::MessageSigner>>,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// A database failure, as the service reports it (nothing is acknowledged that did not commit).
/// A transaction PostgreSQL aborted to settle a conflict (deadlock, serialization failure) is
/// a `Conflict`, which `retrying` runs again.
fn unavailable(error: impl std::fmt::Display + 'static) -> BackendError {
    use tokio_postgres::error::SqlState;
    let any: &dyn std::any::Any = &error;
    let conflict = any
        .downcast_ref::<tokio_postgres::Error>()
        .and_then(tokio_postgres::Error::code)
        .is_some_and(|code| {
            *code == SqlState::T_R_DEADLOCK_DETECTED || *code == SqlState::T_R_SERIALIZATION_FAILURE
        });
    // tokio-postgres shows a server error only as "db error"; the log needs what it was.
    let cause = match any
        .downcast_ref::<tokio_postgres::Error>()
        .and_then(tokio_postgres::Error::as_db_error)
    {
        Some(db) => format!(
            "PostgreSQL: {}: {} ({})",
            db.severity(),
            db.message(),
            db.code().code()
        ),
        None => format!("PostgreSQL: {error}"),
    };
    // A connection lost mid-way (no error from the server itself) may have lost the answer to
    // a COMMIT that took effect: its outcome is unknown, not "nothing kept".
    let cut_off = any
        .downcast_ref::<tokio_postgres::Error>()
        .is_some_and(|e| e.as_db_error().is_none());
    if conflict {
        BackendError::Conflict(cause)
    } else if cut_off {
        BackendError::Unconfirmed(cause)
    } else {
        BackendError::Unavailable(cause)
    }
}

/// Times a transaction aborted by a conflict is run in all before the conflict is answered.
const ATTEMPTS: u32 = 5;

/// Runs `attempt` (a whole transaction) again while PostgreSQL aborts it to settle a conflict
/// with another, after a short random pause, up to `ATTEMPTS` times in all.
async fn retrying<T, F, Fut>(mut attempt: F) -> BackendResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = BackendResult<T>>,
{
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(BackendError::Conflict(cause)) if tries < ATTEMPTS => {
                tracing::debug!(%cause, tries, "transaction aborted by a conflict; running it again");
                // Real time: the other transaction is real. Random, so the two do not meet again.
                let pause = 1 + u64::from(uuid::Uuid::new_v4().as_bytes()[0] % 20);
                tokio::time::sleep(std::time::Duration::from_millis(pause * u64::from(tries)))
                    .await;
                tries += 1;
            }
            other => return other,
        }
    }
}

impl Postgres {
    /// Connects and brings the schema up to date (refusing a newer one).
    pub async fn connect(
        settings: Settings,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Self>, PostgresError> {
        let mut config: tokio_postgres::Config = settings
            .url
            .parse()
            .map_err(|e: tokio_postgres::Error| PostgresError::Url(e.to_string()))?;
        // A query on a connection whose peer vanished without closing it (a network cut, a
        // host gone) fails once its data goes unacknowledged this long, and an idle one is
        // probed: no request waits on a dead connection for the kernel's quarter of an hour.
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(DEAD_CONNECTION);
        }
        config.keepalives(true);
        // tokio-postgres's default idle time (two hours) means the URL set none.
        if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            config.keepalives_idle(DEAD_CONNECTION);
        }
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                // Reused as long as its connection is open: one a database restart closed is
                // replaced rather than handed out. Checking each with a query before reuse
                // (`Verified`) cost a round trip per request (a single send made four where
                // two do; stop 41).
                recycling_method: RecyclingMethod::Fast,
            },
        );
        // Every wait is bounded: for a free connection, for a new one, and for the check
        // before reuse (a database that drops packets must not hang requests).
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(POOL_TIMEOUT))
            .create_timeout(Some(POOL_TIMEOUT))
            .recycle_timeout(Some(POOL_TIMEOUT))
            .build()
            .map_err(|e| PostgresError::Connect(e.to_string()))?;
        let mut client = pool
            .get()
            .await
            .map_err(|e| PostgresError::Connect(e.to_string()))?;
        schema::migrate(&mut client).await?;
        check_home(&client, &settings.region, &settings.account_id).await?;
        drop(client);
        let wakers = Arc::new(wakeup::Wakers::default());
        let listener = tokio::spawn(wakeup::listen(config, wakers.clone()));
        Ok(Arc::new_cyclic(|me| Postgres {
            pool,
            namespaces: crate::engine::namespace::Namespaces::new(
                crate::engine::namespace::Namespace::new(&settings.region, &settings.account_id),
            ),
            delete_cooldown_ms: settings.delete_cooldown_ms,
            clock,
            wakers,
            sweeps: retention::Sweeps::default(),
            listener,
            node: uuid::Uuid::new_v4().to_string(),
            me: me.clone(),
            move_runners: Default::default(),
            signer: Default::default(),
            activity: Default::default(),
            long_polls: settings.long_polls,
            in_flight: Default::default(),
            in_flight_limit: settings.in_flight_limit,
            webhook_max_pending: settings.webhook_max_pending,
            webhook_lease_ms: settings.webhook_lease_ms,
            fifo_http_subscriptions: settings.fifo_http_subscriptions,
            deliveries: settings.deliveries,
        }))
    }

    /// A pooled connection.
    async fn client(&self) -> BackendResult<deadpool_postgres::Object> {
        self.pool.get().await.map_err(unavailable)
    }

    /// Wakes this node's long polls on the queue at once (other nodes by notification).
    fn wake(&self, uid: i64) {
        self.wakers.wake(uid);
    }

    fn queue_arn(&self, name: &str) -> String {
        self.namespaces.arn("sqs", name)
    }
}

/// Refuses a database whose home region and account (`orderly_home`) are not these,
/// recording these if it has none yet.
async fn check_home(
    client: &tokio_postgres::Client,
    region: &str,
    account: &str,
) -> Result<(), PostgresError> {
    client
        .execute(
            "INSERT INTO orderly_home (id, region, account) VALUES (1, $1, $2) \
             ON CONFLICT (id) DO NOTHING",
            &[&region, &account],
        )
        .await?;
    let row = client
        .query_one("SELECT region, account FROM orderly_home", &[])
        .await?;
    let (found_region, found_account): (String, String) = (row.get(0), row.get(1));
    if found_region != region || found_account != account {
        return Err(PostgresError::OtherHome {
            region: found_region,
            account: found_account,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
