//! A node on a database serves one generation after another on the same listener. A generation
//! leads, or stands by and may come to lead. When a leading generation loses the lease (another
//! node took it while this one was cut off or stopped), its engine can no longer log a change:
//! the generation stops the work a leader runs, and the node starts over as a standby of the
//! new leader, with a fresh engine the next promotion recovers into. Requests go to whichever
//! generation is current.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;

use super::engine_service::Built;
use super::log_database::{self, Node, Waiting};
use super::routes::Routes;
use super::spread::Spread;
use super::started::Started;
use crate::http::server::ServerLimits;
use crate::http::standby::Forwarding;
use crate::persist::database::lease::{Announcement, LEASE};
use crate::persist::database::Keeper;
use crate::persist::snapshot::Snapshotter;
use crate::service::Service;
use crate::worker::{self, Backoff};

/// How long a generation leading its share of the shards must have run for its share moving
/// to start the next one at once.
const SETTLED: Duration = Duration::from_secs(30);

/// How many times in a row a share may move before `SETTLED` and start the next generation at
/// once: a node joining or leaving moves each share once or twice.
const QUICK_MOVES: u32 = 3;

/// Failures to start over are said once per cause per interval, not once a second.
static RETRIES: std::sync::LazyLock<crate::quiet_log::QuietLog> =
    std::sync::LazyLock::new(Default::default);

/// A generation's parts, as `App::bind` or a start over built them.
pub struct Generation {
    pub service: Arc<Service>,
    pub snapshots: Vec<Arc<Snapshotter>>,
    pub lease: Vec<Arc<Keeper>>,
    pub standby: Option<Forwarding>,
    /// Where requests for shards another node leads go, when some are.
    pub by_shard: Option<Forwarding>,
    /// A node leading its share of its database's shards: what tells it to start over.
    pub spread: Option<Spread>,
    pub waiting: Option<Waiting>,
    pub announcement: Option<Announcement>,
}

/// A node's next generation on its database: leading every shard or standing by
/// (`log_database`), or, with `--spread-shards`, leading its share (`spread`).
pub async fn build(
    node: &Node,
    metrics: crate::metrics::Metrics,
) -> std::io::Result<(Built, Option<Waiting>, Option<Spread>)> {
    if node.config.spread_shards && node.config.shards > 1 {
        let (built, spread) = super::spread::build(node, metrics).await?;
        return Ok((built, None, Some(spread)));
    }
    let (built, waiting) = log_database::build(node, metrics).await?;
    Ok((built, waiting, None))
}

impl Generation {
    fn of(built: Built, waiting: Option<Waiting>, spread: Option<Spread>) -> Generation {
        if let Some(status) = built.cluster {
            built.service.set_cluster_status(status);
        }
        Generation {
            service: built.service,
            snapshots: built.snapshots,
            lease: built.lease,
            standby: built.standby,
            by_shard: built.by_shard,
            spread,
            waiting,
            announcement: built.announcement,
        }
    }
}

/// A generation serving: its service, the work it runs beside requests, and a standby's way to
/// leadership.
struct Running {
    service: Arc<Service>,
    started: Arc<Started>,
    promotion: Option<tokio::task::JoinHandle<bool>>,
    /// A standby's, one per shard: turns true when the log it followed into its engine cannot
    /// be followed on.
    spoiled: Vec<tokio::sync::watch::Receiver<bool>>,
    standby: Option<Forwarding>,
    spread: Option<Spread>,
    /// Taken back once the generation has stopped.
    announcement: Option<Announcement>,
    /// A standby's: held while its promotion works on a blocking thread (`Waiting::asking`).
    asking: Option<Arc<tokio::sync::Mutex<()>>>,
    began: std::time::Instant,
}

impl Running {
    /// Starts the generation's work (or its wait for the lease) and sends requests to it.
    fn start(generation: Generation, routes: &Routes, current: &RwLock<Router>) -> Running {
        let service = generation.service;
        service.metrics.generations.inc();
        let started = Arc::new(Started::default());
        let standby = generation.standby;
        let asking = generation.waiting.as_ref().map(|w| w.asking.clone());
        let spoiled = (generation.waiting.iter())
            .flat_map(|w| w.following.iter().map(|f| f.spoiled.subscribe()))
            .collect();
        let promotion = match generation.waiting {
            Some(waiting) => Some(worker::spawn(
                "promotion",
                log_database::promote(waiting, service.clone(), started.clone()),
            )),
            None => {
                started.begin(&service, generation.snapshots, generation.lease);
                None
            }
        };
        // A leader's requests skip the passing-on layer; it is put in front when it steps down.
        let layered = promotion.as_ref().and(standby.clone());
        let router = routes.router(service.clone(), layered, generation.by_shard);
        *current.write().unwrap_or_else(|p| p.into_inner()) = router;
        let mut spread = generation.spread;
        if let Some(spread) = &mut spread {
            spread.started = Some(started.clone());
        }
        Running {
            service,
            started,
            promotion,
            spoiled,
            standby,
            spread,
            announcement: generation.announcement,
            asking,
            began: std::time::Instant::now(),
        }
    }

    async fn stop(self) {
        // What the promotion began on a blocking thread (an ask for the lease, or leading once
        // it was answered) outlives its abort: waited for, up to a lease, so that a keeper it
        // started is given up below and announces the node no more once it is taken back.
        let mut _settled = None;
        if let Some(promotion) = self.promotion {
            promotion.abort();
            let _ = promotion.await;
            if let Some(asking) = &self.asking {
                _settled = tokio::time::timeout(LEASE, asking.lock()).await.ok();
            }
        }
        self.started.stop(&self.service).await;
        // Once its leases are given up, so the others list it no more than they must.
        if let Some(announcement) = self.announcement {
            announcement.take_back().await;
        }
    }
}

/// Serves generation after generation until `shutdown` completes; then lets in-flight requests
/// finish and stops the current generation.
pub async fn serve(
    node: Node,
    first: Generation,
    routes: Routes,
    (listener, limits, tls): (TcpListener, ServerLimits, Option<tokio_rustls::TlsAcceptor>),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let current = Arc::new(RwLock::new(Router::new()));
    let running = Running::start(first, &routes, &current);
    let (finish, finished) = tokio::sync::watch::channel(false);
    let survey = node.survey.clone();
    // Its own task, not in a set: dropped early, the server still stops its generation.
    let steward = worker::spawn(
        "steward",
        self::steward(node, running, routes, current.clone(), finished),
    );
    let switch = crate::http::server::Served::Current(current);
    let served = crate::http::server::serve(listener, switch, limits, tls, shutdown).await;
    let _ = finish.send(true);
    let stewarded = steward.await;
    if let Err(error) = &stewarded {
        tracing::error!(%error, "the generations' steward failed: the lease lapses by itself");
    }
    // Gone from the others' readings once the server has stopped, whichever generation (or
    // none, between two) it stopped in.
    if let Some(survey) = survey {
        let _ = tokio::task::spawn_blocking(move || survey.stop()).await;
    }
    // A stop that did not go as designed is not a clean one: the process says so as it ends.
    served?;
    stewarded
        .map_err(|error| std::io::Error::other(format!("the generations' steward failed: {error}")))
}

/// Watches the current generation: once it is deposed (or, standing by, can no longer lead
/// from its engine), stops it and starts the next.
async fn steward(
    node: Node,
    mut running: Running,
    routes: Routes,
    current: Arc<RwLock<Router>>,
    mut finished: tokio::sync::watch::Receiver<bool>,
) {
    // Generations in a row that failed by themselves: each waits twice as long (up to 32 s)
    // before the next, so a failure that repeats (damage, say) does not spin.
    let mut backoff = Backoff::new("steward", Duration::from_secs(1), Duration::from_secs(32));
    // Building the next generation when the database does not answer: sooner, as the node
    // serves nothing meanwhile.
    let mut rebuild = Backoff::new("steward", Duration::from_secs(1), Duration::from_secs(4));
    let mut quick_moves = 0;
    loop {
        let pause = tokio::select! {
            _ = until(&mut finished) => {
                running.stop().await;
                return;
            }
            _ = spread_moved(&mut running.spread) => {
                // As when deposed: requests wait for the next generation meanwhile.
                if let Some(standby) = &running.standby {
                    standby.standby.step_down();
                    let passing_on = routes.router(running.service.clone(), Some(standby.clone()), None);
                    *current.write().unwrap_or_else(|p| p.into_inner()) = passing_on;
                }
                // A share that keeps moving soon after each start (a lease that cannot be
                // taken, say) waits longer each time rather than start over and over; a join
                // or a loss moves it once or twice (given way, then leases come free), which
                // start over without a pause.
                if running.began.elapsed() >= SETTLED {
                    quick_moves = 0;
                    backoff.succeeded();
                }
                quick_moves += 1;
                quick_moves > QUICK_MOVES
            }
            _ = running.started.deposed() => {
                tracing::warn!("lost the lease: stepping down to serve as a standby of the new leader");
                quick_moves = 0;
                // At once, before its work stops: requests are passed on (none leads that
                // this node knows of yet: 503), and it says it no longer leads.
                if let Some(standby) = &running.standby {
                    standby.standby.step_down();
                    let passing_on = routes.router(running.service.clone(), Some(standby.clone()), None);
                    *current.write().unwrap_or_else(|p| p.into_inner()) = passing_on;
                }
                backoff.succeeded();
                false
            }
            _ = spoiled(&mut running.spoiled) => {
                tracing::info!("starting over as a standby, with a fresh engine to follow the log into");
                true
            }
            _ = failed_to_lead(&mut running.promotion) => {
                tracing::warn!("starting over as a standby, with a fresh engine");
                true
            }
        };
        if pause {
            let wait = backoff.failed();
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = until(&mut finished) => {
                    running.stop().await;
                    return;
                }
            }
        }
        let previous = running.service.clone();
        running.stop().await;
        let next = loop {
            let metrics = crate::metrics::Metrics::continuing(&previous.metrics);
            let built = tokio::select! {
                built = build(&node, metrics) => built,
                _ = until(&mut finished) => return,
            };
            match built {
                Ok((built, waiting, spread)) => {
                    rebuild.succeeded();
                    break Generation::of(built, waiting, spread);
                }
                Err(error) => {
                    let cause = error.to_string();
                    if let Some(held_back) = RETRIES.admit(&cause, std::time::Instant::now()) {
                        tracing::warn!(%cause, held_back, "could not start over on the database; trying again");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(rebuild.failed()) => {}
                        _ = until(&mut finished) => return,
                    }
                }
            }
        };
        drop(previous);
        running = Running::start(next, &routes, &current);
    }
}

/// Completes once a node leading its share of the shards should start over to lead its share
/// as it now is (`spread::moved`); never for a node that leads every shard or none.
async fn spread_moved(spread: &mut Option<Spread>) {
    match spread {
        Some(spread) => super::spread::moved(spread).await,
        None => std::future::pending().await,
    }
}

/// Completes once the server has stopped serving.
async fn until(finished: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = finished.wait_for(|finished| *finished).await;
}

/// Completes once a standby's promotion ends without this node leading.
async fn failed_to_lead(promotion: &mut Option<tokio::task::JoinHandle<bool>>) {
    if let Some(handle) = promotion {
        let led = handle.await;
        // Done with: stopping the generation must not wait on it again.
        *promotion = None;
        if !matches!(led, Ok(true)) {
            return;
        }
    }
    std::future::pending().await
}

/// Completes once one of a standby's engines can no longer follow its shard's log.
async fn spoiled(spoiled: &mut [tokio::sync::watch::Receiver<bool>]) {
    let mut waits: Vec<_> = (spoiled.iter_mut())
        .map(|spoiled| {
            Box::pin(async move {
                if spoiled.wait_for(|spoiled| *spoiled).await.is_err() {
                    std::future::pending::<()>().await;
                }
            })
        })
        .collect();
    std::future::poll_fn(
        |cx| match waits.iter_mut().any(|w| w.as_mut().poll(cx).is_ready()) {
            true => std::task::Poll::Ready(()),
            false => std::task::Poll::Pending,
        },
    )
    .await
}
