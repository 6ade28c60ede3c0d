//! Waking long polls: a node's own sends wake its polls directly; sends on other nodes reach it
//! through PostgreSQL's notifications (`NOTIFY orderly_queue, '<queue uid>'`, sent inside the
//! sending transaction, so delivered only once it commits). One connection per node listens,
//! and reconnects by itself after the database restarts; meanwhile polls still look again at
//! their own interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, NoTls};

/// The notification channel sends signal on.
pub const CHANNEL: &str = "orderly_queue";

/// Longest one connection attempt of the listener may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Wait before connecting the listener again (real time: a database restart is real).
const RECONNECT: Duration = Duration::from_millis(500);

/// Per queue (by uid), what wakes this node's long polls on it.
#[derive(Default)]
pub struct Wakers(Mutex<HashMap<i64, Arc<Notify>>>);

impl Wakers {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Arc<Notify>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What a long poll on the queue waits for.
    pub fn waker(&self, uid: i64) -> Arc<Notify> {
        self.map().entry(uid).or_default().clone()
    }

    /// Wakes one long poll on the queue (it wakes the next if it leaves messages behind).
    pub fn wake(&self, uid: i64) {
        if let Some(waker) = self.map().get(&uid) {
            waker.notify_one();
        }
    }

    /// Forgets a deleted queue, waking every poll on it.
    pub fn forget(&self, uid: i64) {
        if let Some(waker) = self.map().remove(&uid) {
            waker.notify_waiters();
        }
    }

    /// Wakes one poll on every queue: after the listener (re)connects, a send may have come
    /// while nobody listened.
    fn wake_all(&self) {
        for waker in self.map().values() {
            waker.notify_one();
        }
    }
}

/// Listens for other nodes' sends for as long as it runs (the backend aborts it when dropped).
pub async fn listen(mut config: tokio_postgres::Config, wakers: Arc<Wakers>) {
    // A connection attempt to an unreachable server gives up, then the loop tries again.
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    loop {
        if let Ok((client, mut connection)) = config.connect(NoTls).await {
            let forwarding = wakers.clone();
            let driver = tokio::spawn(async move {
                while let Some(message) =
                    std::future::poll_fn(|cx| connection.poll_message(cx)).await
                {
                    match message {
                        Ok(AsyncMessage::Notification(note)) => {
                            if let Ok(uid) = note.payload().parse() {
                                forwarding.wake(uid);
                            }
                        }
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
            });
            match client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
                Ok(()) => {
                    wakers.wake_all();
                    // Until the connection ends (the database went away).
                    let _ = driver.await;
                }
                Err(_) => driver.abort(),
            }
            tracing::warn!("PostgreSQL notifications lost; listening again");
        }
        tokio::time::sleep(RECONNECT).await;
    }
}
