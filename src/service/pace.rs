//! Senders take their turn behind a queue's consumers while those fall behind.
//!
//! The runtime shares its threads among connections a request at a time. A consumer moves ten
//! messages in two requests (a receive, a delete) where a producer sends ten in one, so with as
//! many of each, the consumers deliver about half of what is sent, and the backlog, and the
//! time a message waits in it, grow for as long as the load lasts. A queue's consumers are
//! behind while its receives come back full (as many messages as were asked for: more were
//! waiting) and more than `LEAD` messages were sent to it than received for the first time
//! since a receive last came back short. Then a send to it, once done, lets the runtime run
//! whatever else is ready a few times before it is answered, so the consumers' requests that
//! came meanwhile go first.
//! Nothing is refused, delayed on a timer or reordered: a send's answer only comes a few turns
//! later. A queue with no consumer, or with consumers that keep up, never paces its senders.
//! Brokers hold publishers back for the same reason (RabbitMQ's flow control).
//!
//! The rule is about the server's own turns, not the queue's time, so it reads the monotonic
//! clock rather than the service's (which a test may hold still). What it counts is this
//! node's: the requests on a queue are served where its shard is led.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

/// How long after a full receive the queue's consumers may count as behind.
const BEHIND_FOR: Duration = Duration::from_secs(1);

/// How many more messages than received may be sent to a queue whose receives come back full
/// before its senders are paced: a burst that its consumers work through is not held back.
const LEAD: u64 = 1_000;

/// The turns a paced send lets other tasks take. One lets about two thirds of what is sent be
/// delivered while both run, two nine tenths, four all of it (measured in
/// `doc/performance.md`, "Senders paced behind consumers").
const TURNS: u32 = 4;

/// Queues remembered at most: past it, those without a full receive for `BEHIND_FOR` are
/// forgotten, and while every one has had one, a queue not remembered is not taken in (its
/// senders are not paced) rather than another one forgotten.
const MOST: usize = 4096;

/// What is known of a queue's consumers.
#[derive(Default)]
struct Consumers {
    /// Milliseconds from `Pace::started` to the last full receive, plus one (0: none since the
    /// last short one).
    full_at: AtomicU64,
    /// Messages sent less messages received for the first time since a receive last came
    /// back short.
    lead: AtomicU64,
}

/// Which queues' consumers are behind.
pub(super) struct Pace {
    on: bool,
    started: Instant,
    /// Set once any queue is remembered, so that sends to a server nobody receives from skip
    /// the map.
    any: AtomicBool,
    /// The queues received from, by key.
    queues: RwLock<HashMap<Box<str>, Consumers>>,
    /// When the full table was last swept of queues not received from in full lately (a
    /// stamp, 0: never), so that more busy queues than it holds cost a sweep a `BEHIND_FOR`,
    /// not one a receive.
    swept: AtomicU64,
    /// Sends answered after their turns (`orderly_sends_paced_total`).
    paced: Counter,
}

impl Pace {
    /// `on` false never paces a send (`--pace-senders false`).
    pub(super) fn new(on: bool, paced: Counter) -> Pace {
        Pace {
            on,
            started: Instant::now(),
            any: AtomicBool::new(false),
            queues: RwLock::new(HashMap::new()),
            swept: AtomicU64::new(0),
            paced,
        }
    }

    fn stamp(&self, now: Instant) -> u64 {
        let ms = now.saturating_duration_since(self.started).as_millis();
        u64::try_from(ms).unwrap_or(u64::MAX - 1) + 1
    }

    /// A receive on `queue` asked for `asked` messages (at least one) and got `got`, `firsts`
    /// of them received for the first time. Only those come off the lead: a message received
    /// again (its visibility timeout passed) was counted once, when sent.
    pub(super) fn received(&self, queue: &str, asked: usize, got: usize, firsts: usize) {
        self.received_when(queue, (asked, got, firsts), Instant::now);
    }

    /// `received`, the clock read only if the receive counts.
    fn received_when(
        &self,
        queue: &str,
        (asked, got, firsts): (usize, usize, usize),
        now: impl FnOnce() -> Instant,
    ) {
        let full = got >= asked.max(1);
        if self.on && (full || self.any.load(Ordering::Relaxed)) {
            self.received_at(queue, full, firsts, now());
        }
    }

    fn received_at(&self, queue: &str, full: bool, firsts: usize, now: Instant) {
        let mark = |consumers: &Consumers| {
            if full {
                consumers.full_at.store(self.stamp(now), Ordering::Relaxed);
                let firsts = firsts as u64;
                let _ = (consumers.lead).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
                    Some(l.saturating_sub(firsts))
                });
            } else {
                consumers.full_at.store(0, Ordering::Relaxed);
                consumers.lead.store(0, Ordering::Relaxed);
            }
        };
        let queues = self.queues.read().unwrap_or_else(|p| p.into_inner());
        if let Some(consumers) = queues.get(queue) {
            return mark(consumers);
        }
        drop(queues);
        if !full {
            return;
        }
        let mut queues = self.queues.write().unwrap_or_else(|p| p.into_inner());
        if queues.len() >= MOST && !queues.contains_key(queue) {
            let since = self.stamp(now.checked_sub(BEHIND_FOR).unwrap_or(self.started));
            let swept = self.swept.load(Ordering::Relaxed);
            if swept != 0 && swept >= since {
                return;
            }
            self.swept.store(self.stamp(now), Ordering::Relaxed);
            queues.retain(|_, c| c.full_at.load(Ordering::Relaxed) >= since);
            if queues.len() >= MOST {
                return;
            }
        }
        let consumers = queues.entry(queue.into()).or_default();
        mark(consumers);
        self.any.store(true, Ordering::Relaxed);
    }

    /// Whether any send could be paced (so that a server nobody receives from in full never
    /// reads the clock or the map for a send).
    fn tracking(&self) -> bool {
        self.on && self.any.load(Ordering::Relaxed)
    }

    /// The queue was deleted or purged: what was counted of it no longer holds (a queue made
    /// again under its name starts afresh).
    pub(super) fn forget(&self, queue: &str) {
        if self.tracking() {
            (self.queues.write().unwrap_or_else(|p| p.into_inner())).remove(queue);
        }
    }

    /// `sent` messages were sent to `queue`; whether its consumers are now behind.
    fn sent(&self, queue: &str, sent: usize, now: Instant) -> bool {
        if !self.tracking() || sent == 0 {
            return false;
        }
        let queues = self.queues.read().unwrap_or_else(|p| p.into_inner());
        let Some(consumers) = queues.get(queue) else {
            return false;
        };
        let sent = sent as u64;
        let lead = (consumers.lead.fetch_add(sent, Ordering::Relaxed)).saturating_add(sent);
        let full_at = consumers.full_at.load(Ordering::Relaxed);
        full_at != 0
            && lead > LEAD
            && self.stamp(now).saturating_sub(full_at) <= BEHIND_FOR.as_millis() as u64
    }

    /// After `sent` messages were sent to `queue`: its turns, if its consumers are behind.
    pub(super) async fn take_turns(&self, queue: &str, sent: usize) {
        if !self.tracking() || !self.sent(queue, sent, Instant::now()) {
            return;
        }
        self.paced.inc();
        for _ in 0..TURNS {
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_behind_while_its_receives_come_back_full_and_it_grows() {
        let pace = Pace::new(true, Counter::default());
        let t0 = pace.started + Duration::from_secs(5);
        assert!(!pace.sent("q", 5_000, t0), "never received from");
        pace.received_when("q", (10, 10, 10), || t0);
        assert!(!pace.sent("q", 1_000, t0), "within the lead");
        assert!(pace.sent("q", 1, t0), "past it");
        assert!(pace.sent("q", 1, t0 + BEHIND_FOR), "still within the while");
        let later = t0 + BEHIND_FOR + Duration::from_millis(2);
        assert!(!pace.sent("q", 1, later), "no full receive for a while");

        pace.received_when("q", (10, 10, 10), || later);
        assert!(
            !pace.sent("q", 1, later),
            "the receive took ten of the lead back"
        );
        assert!(
            pace.sent("q", 20, later),
            "then more were sent: behind again"
        );

        pace.received_when("q", (10, 9, 9), || later);
        assert!(!pace.sent("q", 1_500, later), "a short receive: not behind");
        pace.received_when("q", (10, 9, 9), || later);
        pace.received_when("q", (10, 10, 10), || later);
        assert!(
            !pace.sent("q", 1_000, later),
            "the short receive ended the lead"
        );
        assert!(pace.sent("q", 1, later));

        pace.received_when("one", (0, 1, 1), || later);
        assert!(
            pace.sent("one", 1_001, later),
            "asking for none is asking for one"
        );
        pace.received_when("empty", (1, 0, 0), || later);
        assert!(
            !pace.sent("empty", 5_000, later),
            "a short first receive remembers nothing"
        );
        assert!(!pace.queues.read().unwrap().contains_key("empty"));
    }

    #[test]
    fn turned_off_it_marks_nothing() {
        let pace = Pace::new(false, Counter::default());
        let now = Instant::now();
        pace.received_when("q", (10, 10, 10), || now);
        assert!(!pace.sent("q", 5_000, now));
        assert!(pace.queues.read().unwrap().is_empty());
    }

    #[test]
    fn it_remembers_a_bounded_number_of_queues_keeping_those_behind() {
        let pace = Pace::new(true, Counter::default());
        let t0 = pace.started + Duration::from_secs(10);
        pace.received_when("old", (1, 1, 1), || t0);
        let t1 = t0 + Duration::from_secs(5);
        for i in 0..MOST - 1 {
            pace.received_when(&format!("q{i}"), (1, 1, 1), || t1);
        }
        pace.received_when("new", (1, 1, 1), || t1);
        let held = pace.queues.read().unwrap().len();
        assert!(held <= MOST, "{held} remembered");
        assert!(!pace.queues.read().unwrap().contains_key("old"));
        assert!(pace.sent("new", 1_001, t1));
        assert!(
            pace.sent("q7", 1_001, t1),
            "queues received from lately are kept"
        );

        // Every queue remembered had a full receive lately: a new one is not taken in, and
        // none is forgotten for it.
        pace.received_when("newer", (1, 1, 1), || t1);
        assert!(!pace.queues.read().unwrap().contains_key("newer"));
        assert!(!pace.sent("newer", 5_000, t1));
        assert!(pace.sent("q7", 1, t1), "kept with its lead");
        assert_eq!(pace.queues.read().unwrap().len(), MOST);

        // Swept at most once a while: later, with every queue but one gone quiet, the next
        // newcomer finds room.
        let t2 = t1 + BEHIND_FOR + Duration::from_millis(2);
        pace.received_when("q7", (1, 1, 1), || t2);
        pace.received_when("latest", (1, 1, 1), || t2);
        assert_eq!(pace.queues.read().unwrap().len(), 2, "q7 and latest");
        assert!(pace.sent("latest", 1_001, t2));
    }

    #[test]
    fn only_messages_received_for_the_first_time_come_off_the_lead() {
        let pace = Pace::new(true, Counter::default());
        let now = pace.started + Duration::from_secs(1);
        pace.received_when("q", (10, 10, 10), || now);
        assert!(!pace.sent("q", 1_000, now), "within the lead");
        pace.received_when("q", (10, 10, 0), || now);
        assert!(
            pace.sent("q", 1, now),
            "ten received again took nothing off: 1,001 ahead"
        );
        pace.received_when("q", (10, 10, 4), || now);
        assert!(!pace.sent("q", 1, now), "four first receives did: 998");
    }

    #[test]
    fn a_deleted_or_purged_queue_starts_afresh() {
        let pace = Pace::new(true, Counter::default());
        let now = pace.started + Duration::from_secs(1);
        pace.received_when("q", (1, 1, 1), || now);
        assert!(pace.sent("q", 1_001, now));
        pace.forget("q");
        assert!(!pace.sent("q", 1, now), "forgotten");
        pace.received_when("q", (1, 1, 1), || now);
        assert!(!pace.sent("q", 1_000, now), "its lead counted anew");
        assert!(
            !pace.sent("q", 0, now),
            "a batch that kept nothing is not paced"
        );
    }

    #[tokio::test]
    async fn a_send_to_a_queue_behind_is_counted_as_paced() {
        let paced = Counter::default();
        let pace = Pace::new(true, paced.clone());
        pace.take_turns("q", 2_000).await;
        assert_eq!(paced.get(), 0);
        pace.received_when("q", (10, 10, 10), Instant::now);
        pace.take_turns("q", 2_000).await;
        pace.take_turns("other", 2_000).await;
        assert_eq!(paced.get(), 1);
    }
}
