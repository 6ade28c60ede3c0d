//! Parcels pulled from the other nodes: one pull at a time from each node leading shards led
//! elsewhere, for every pair of shards between it and this node (one it leads, one led here)
//! at once, so a node holds one connection to each other node for them, whatever the count of
//! shards. Each pull names, for each pair, the last parcel the destination's log holds as
//! applied (so the source forgets up to it); the source answers as soon as any pair has
//! parcels or is refused (no longer led there), or after a while with none
//! (`Sharded::parcels_for_pairs`). Each pair of shards keeps its order and applies each parcel
//! once, as between shards of one node. A pair that failed rests a while, left out of the
//! pulls meanwhile; it is asked again with the next pull from its node, which may be up to a
//! pull's wait later. A node of an earlier build answers no such pull (it pulls each pair on
//! its own, and is answered): parcels from its shards wait until it is upgraded too.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::notes::Notes;
use crate::backend::embedded::Embedded;
use crate::backend::{BackendError, BackendResult, OtherNodes};
use crate::engine::relay::Settled;
use crate::persist::format::between_nodes::{decode_parcels, decode_pulled, PairPull, Pulled};
use crate::worker::Backoff;

/// Parcels one pull from another node carries, in all its pairs (as many as a node answers,
/// and within `parcel::MOST_BYTES_AT_ONCE`). One pull is under way a node, and its round waits
/// for the other node's answer and this node's commit of what it took, each a longer wait on
/// nodes held to part of a core: what crosses is bounded by the round's length more than by
/// its work, so each round carries as much as it may.
const PULLED_AT_ONCE: usize = 1024;

/// How often the shards' leaders are looked at again while pulls are under way (a leader
/// just known, or one that came back, is pulled from without waiting for the others).
const REGROUP: Duration = Duration::from_millis(250);

/// Failures to pull are said once per cause per interval, not once a pull.
static WARNINGS: std::sync::LazyLock<crate::quiet_log::QuietLog> =
    std::sync::LazyLock::new(Default::default);

/// A pair of shards: from one another node leads, into one led here.
type Pair = (u32, u32);

/// Carries into the shards led here (`destinations`) the parcels the shards `elsewhere` (led
/// by other nodes) hold for them, pull after pull, one pull under way per node. The parcels
/// of an answer are applied in this task, each destination shard's at once, so nothing is
/// applied once the carrier stops; a pull under way is only a request, dropped with it.
pub(super) async fn carry_from_nodes(
    (remote, fates): (Arc<dyn OtherNodes>, Arc<Fates>),
    destinations: Vec<Arc<Embedded>>,
    elsewhere: Vec<u32>,
    rounds: Arc<Notify>,
) {
    let destinations: HashMap<u32, Arc<Embedded>> =
        (destinations.into_iter()).map(|d| (d.shard(), d)).collect();
    let mut pairs: Vec<Pair> = (elsewhere.iter())
        .flat_map(|&from| destinations.keys().map(move |&to| (from, to)))
        .collect();
    pairs.sort_unstable();
    let mut applied: HashMap<Pair, u64> = HashMap::new();
    let (mut nodes_resting, mut pairs_resting) = (Resting::default(), Resting::default());
    let mut pulling: JoinSet<BackendResult<bytes::Bytes>> = JoinSet::new();
    // The pull under way from each node, and the node each pull's task asks.
    let mut under_way: HashMap<String, UnderWay> = HashMap::new();
    let mut asking: HashMap<tokio::task::Id, String> = HashMap::new();
    // Where each node's next pull starts its pairs.
    let mut turns: HashMap<String, usize> = HashMap::new();
    loop {
        let leaders = remote.leaders();
        let now = Instant::now();
        let mut asks: BTreeMap<String, Vec<PairPull>> = BTreeMap::new();
        for &(from, to) in &pairs {
            let Some(leader) = (leaders.get(from as usize)).filter(|l| !l.is_empty()) else {
                continue;
            };
            if nodes_resting.resting(leader, now) || pairs_resting.resting(&(from, to), now) {
                continue;
            }
            let after = match applied.get(&(from, to)) {
                Some(&after) => after,
                None => match destinations[&to].applied_from(from).await {
                    Ok(after) => *applied.entry((from, to)).or_insert(after),
                    Err(error) => {
                        said(&error, &format!("shard {to} cannot read what it applied"));
                        pairs_resting.rest((from, to), now);
                        continue;
                    }
                },
            };
            (asks.entry(leader.clone()).or_default()).push(PairPull { from, to, after });
        }
        for (leader, mut asked) in asks {
            // A pull under way that asks for every pair its node could be asked for now is
            // left to run; one that leaves a pair out (done resting, or just led there) is
            // dropped for one that asks for all: nothing past what was applied is forgotten
            // there, so its answer is asked for again.
            if let Some(pull) = under_way.get(&leader) {
                if (asked.iter()).all(|p| pull.pairs.contains(&(p.from, p.to))) {
                    continue;
                }
                pull.task.abort();
                asking.remove(&pull.task.id());
            }
            // Each pair first in its turn: an answer holds so many parcels in all.
            let turn = turns.entry(leader.clone()).or_default();
            *turn = turn.wrapping_add(1);
            let first = *turn % asked.len();
            asked.rotate_left(first);
            let pairs = asked.iter().map(|p| (p.from, p.to)).collect();
            let (remote, node) = (remote.clone(), leader.clone());
            let task =
                pulling.spawn(async move { remote.pull(&node, &asked, PULLED_AT_ONCE).await });
            asking.insert(task.id(), leader.clone());
            under_way.insert(leader, UnderWay { task, pairs });
        }
        let ended = if pulling.is_empty() {
            tokio::time::sleep(REGROUP).await;
            None
        } else {
            tokio::select! {
                ended = pulling.join_next_with_id() => ended,
                () = tokio::time::sleep(REGROUP) => None,
            }
        };
        let (task, answer) = match ended {
            Some(Ok((task, answer))) => (task, answer),
            Some(Err(failed)) => (
                failed.id(),
                Err(BackendError::Unavailable(failed.to_string())),
            ),
            None => continue,
        };
        // Dropped for another pull meanwhile, its answer is not wanted.
        let Some(leader) = asking.remove(&task) else {
            continue;
        };
        under_way.remove(&leader);
        let now = Instant::now();
        let pulled = answer.and_then(|bytes| {
            decode_pulled(&bytes)
                .map_err(|error| BackendError::Unavailable(format!("{leader} answered: {error}")))
        });
        let pulled = match pulled {
            Ok(pulled) => {
                nodes_resting.clear(&leader);
                pulled
            }
            Err(error) => {
                said(&error, "parcels from another node not carried");
                nodes_resting.rest(leader, now);
                continue;
            }
        };
        // Each pair's parcels taken at once, as each shard's log commits on its own.
        let mut taking = Vec::new();
        for Pulled { from, to, parcels } in pulled {
            let (Some(destination), Some(&after)) =
                (destinations.get(&to), applied.get(&(from, to)))
            else {
                continue;
            };
            let parcels = parcels
                .map_err(BackendError::Unavailable)
                .and_then(|bytes| {
                    decode_parcels(to, &bytes)
                        .map_err(|error| BackendError::Unavailable(error.to_string()))
                });
            let fates = &fates;
            taking.push(Box::pin(async move {
                let settle = |settled: &[Settled]| fates.add(settled);
                let carried = match parcels {
                    // Applied already (an answer to a pull asked before the last was taken).
                    Ok(parcels) if parcels.iter().all(|parcel| parcel.seq <= after) => Ok(after),
                    Ok(parcels) if parcels.iter().any(|parcel| parcel.seq == after + 1) => {
                        destination.take_parcels(from, &parcels, &settle).await
                    }
                    // None of them next in line (one missing before them): said, and pulled
                    // again after a pause rather than at once.
                    Ok(_) => Err(BackendError::Unavailable(format!(
                        "parcel {} from shard {from} is missing",
                        after + 1
                    ))),
                    Err(error) => Err(error),
                };
                ((from, to), carried)
            }));
        }
        for ((from, to), carried) in all(taking).await {
            match carried {
                Ok(through) => {
                    applied.insert((from, to), through);
                    pairs_resting.clear(&(from, to));
                }
                Err(error) => {
                    said(
                        &error,
                        &format!("parcels from shard {from} into {to} not carried"),
                    );
                    pairs_resting.rest((from, to), now);
                }
            }
        }
        fates.signal.notify_one();
        rounds.notify_waiters();
    }
}

/// What became of the copies the carrier took, until told to their topics' shards.
#[derive(Default)]
pub(super) struct Fates {
    waiting: Mutex<Vec<Settled>>,
    /// Given when some wait.
    signal: Notify,
    /// Being told now.
    telling: AtomicUsize,
}

impl Fates {
    /// How many wait or are being told.
    pub(super) fn untold(&self) -> usize {
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner()).len();
        waiting + self.telling.load(Ordering::Acquire)
    }

    fn add(&self, fates: &[Settled]) {
        (self.waiting.lock().unwrap_or_else(|p| p.into_inner())).extend_from_slice(fates);
    }
}

/// Tells each topic's shard what became of the copies the carrier took (`Notes::settle`),
/// whenever some wait: in a task of its own, so a node slow to take them holds no pull back.
pub(super) async fn tell_fates(notes: Notes, fates: Arc<Fates>) {
    loop {
        fates.signal.notified().await;
        let batch = {
            let mut waiting = fates.waiting.lock().unwrap_or_else(|p| p.into_inner());
            let batch = std::mem::take(&mut *waiting);
            // Counted while told, so none is untold and uncounted at once.
            fates.telling.store(batch.len(), Ordering::Release);
            batch
        };
        notes.settle(&Mutex::new(batch)).await;
        fates.telling.store(0, Ordering::Release);
    }
}

/// A pull under way from one node: its task, and the pairs it asks for.
struct UnderWay {
    task: tokio::task::AbortHandle,
    pairs: std::collections::HashSet<Pair>,
}

/// Runs `futures` at once in the calling task; their outputs, in their order.
async fn all<F: std::future::Future + Unpin>(mut futures: Vec<F>) -> Vec<F::Output> {
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match std::pin::Pin::new(future).poll(cx) {
                    std::task::Poll::Ready(done) => *output = Some(done),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// Says a failure once per cause a while, not once a pull.
fn said(error: &BackendError, what: &str) {
    let cause = error.to_string();
    if let Some(held_back) = WARNINGS.admit(&cause, std::time::Instant::now()) {
        tracing::warn!(%cause, held_back, "{what}; trying again");
    }
}

/// What is not asked again for a while after it failed, each with a backoff of its own.
struct Resting<K> {
    until: HashMap<K, (Instant, Backoff)>,
}

impl<K> Default for Resting<K> {
    fn default() -> Self {
        Resting {
            until: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq> Resting<K> {
    fn resting(&self, key: &K, now: Instant) -> bool {
        self.until.get(key).is_some_and(|(until, _)| *until > now)
    }

    fn rest(&mut self, key: K, now: Instant) {
        let (until, backoff) = self.until.entry(key).or_insert_with(|| {
            let backoff =
                Backoff::new("carrier", Duration::from_millis(50), Duration::from_secs(2));
            (now, backoff)
        });
        *until = now + backoff.failed();
    }

    fn clear(&mut self, key: &K) {
        self.until.remove(key);
    }
}
