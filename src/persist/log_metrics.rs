//! The write-ahead log's figures (records, bytes, sync time, snapshots), kept by its writer
//! thread and the snapshotter; `GET /metrics` exports them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SnapshotFailureLabels {
    reason: &'static str,
}

/// One shard's log, among several.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    shard: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardFailureLabels {
    shard: u32,
    reason: &'static str,
}

/// Why a snapshot was not written, as `snapshot_failed` counts it.
const FAILURE_REASONS: [&str; 2] = ["no_room", "error"];

/// The write-ahead log's figures, kept by its writer thread and the snapshotter.
pub struct LogMetrics {
    pub records: Counter,
    pub bytes: Counter,
    pub sync_seconds: Histogram,
    pub snapshots: Counter,
    pub snapshot_seconds: Histogram,
    /// Snapshots due and not written, by reason: `no_room` (not tried: the disk has less room
    /// than the messages' bodies take) or `error` (the write failed).
    pub snapshot_failures: Family<SnapshotFailureLabels, Counter>,
    /// Log bytes from before this process started that no kept snapshot covers yet.
    replayed: AtomicU64,
    /// The value of `bytes` when the last kept snapshot began: what it covers.
    covered: AtomicU64,
}

impl LogMetrics {
    /// Log bytes written before this process started and replayed by it.
    pub fn replayed(&self, bytes: u64) {
        self.replayed.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A snapshot that began when `bytes` read `began_at` was kept: it covers that much.
    pub fn snapshot_kept(&self, began_at: u64) {
        self.replayed.store(0, Ordering::Relaxed);
        self.covered.fetch_max(began_at, Ordering::Relaxed);
    }

    /// Log bytes no kept snapshot covers (at most: records written while the last one was
    /// cut count as not covered): what the next recovery replays, and what grows while
    /// snapshots fail.
    pub fn since_snapshot(&self) -> u64 {
        let written = self.bytes.get();
        self.replayed.load(Ordering::Relaxed)
            + written.saturating_sub(self.covered.load(Ordering::Relaxed))
    }

    /// Counts a snapshot due and not written.
    pub fn snapshot_failed(&self, no_room: bool) {
        let reason = FAILURE_REASONS[usize::from(!no_room)];
        self.snapshot_failures
            .get_or_create(&SnapshotFailureLabels { reason })
            .inc();
    }
}

impl Default for LogMetrics {
    fn default() -> Self {
        LogMetrics {
            records: Counter::default(),
            bytes: Counter::default(),
            // 50 µs to about 1.6 s: a page-cache write through a slow disk's fdatasync.
            sync_seconds: Histogram::new(exponential_buckets(0.00005, 2.0, 16)),
            snapshots: Counter::default(),
            // 1 ms to about 65 s.
            snapshot_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            replayed: AtomicU64::new(0),
            covered: AtomicU64::new(0),
            snapshot_failures: {
                // Both reasons exported from the start, at zero, so an increase shows.
                let family: Family<SnapshotFailureLabels, Counter> = Family::default();
                for reason in ["no_room", "error"] {
                    let _ = family.get_or_create(&SnapshotFailureLabels { reason });
                }
                family
            },
        }
    }
}

impl LogMetrics {
    /// Adds these figures to `registry` (`GET /metrics`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register("log_records", RECORDS, self.records.clone());
        registry.register("log_bytes", BYTES, self.bytes.clone());
        registry.register(
            "log_sync_seconds",
            "Time each write of the write-ahead log took to become durable: its fdatasync, or in a database its insert and commit",
            self.sync_seconds.clone(),
        );
        registry.register("snapshots", SNAPSHOTS, self.snapshots.clone());
        registry.register(
            "snapshot_duration_seconds",
            "Time each snapshot took to write",
            self.snapshot_seconds.clone(),
        );
        let since = Gauge::<i64>::default();
        since.set(i64::try_from(self.since_snapshot()).unwrap_or(i64::MAX));
        registry.register("log_bytes_since_snapshot", SINCE_SNAPSHOT, since);
        registry.register(
            "snapshot_failures",
            FAILURES,
            self.snapshot_failures.clone(),
        );
    }
}

/// Registers the figures of several shards' logs (each with its shard's number), each figure
/// one family with a `shard` label, read as they are now. The time histograms are one log's
/// only.
pub fn register_shards(logs: &[(u32, std::sync::Arc<LogMetrics>)], registry: &mut Registry) {
    let (records, bytes, snapshots) = (
        Family::<ShardLabels, Counter>::default(),
        Family::<ShardLabels, Counter>::default(),
        Family::<ShardLabels, Counter>::default(),
    );
    let since = Family::<ShardLabels, Gauge<i64>>::default();
    let failures = Family::<ShardFailureLabels, Counter>::default();
    for &(shard, ref log) in logs {
        let labels = ShardLabels { shard };
        records.get_or_create(&labels).inc_by(log.records.get());
        bytes.get_or_create(&labels).inc_by(log.bytes.get());
        snapshots.get_or_create(&labels).inc_by(log.snapshots.get());
        let uncovered = i64::try_from(log.since_snapshot()).unwrap_or(i64::MAX);
        since.get_or_create(&labels).set(uncovered);
        for reason in FAILURE_REASONS {
            let failed = log
                .snapshot_failures
                .get_or_create(&SnapshotFailureLabels { reason });
            if failed.get() > 0 {
                let labels = ShardFailureLabels { shard, reason };
                failures.get_or_create(&labels).inc_by(failed.get());
            }
        }
    }
    registry.register("log_records", RECORDS, records);
    registry.register("log_bytes", BYTES, bytes);
    registry.register("snapshots", SNAPSHOTS, snapshots);
    registry.register("log_bytes_since_snapshot", SINCE_SNAPSHOT, since);
    registry.register("snapshot_failures", FAILURES, failures);
}

const RECORDS: &str = "Records appended to the write-ahead log";
const BYTES: &str = "Bytes appended to the write-ahead log";
const SNAPSHOTS: &str = "Snapshots written";
const SINCE_SNAPSHOT: &str =
    "Log bytes no kept snapshot covers: what a recovery replays; grows while snapshots fail";
const FAILURES: &str = "Snapshots due and not written: no_room (not tried) or error";

#[cfg(test)]
mod tests {
    use super::LogMetrics;

    #[test]
    fn what_no_kept_snapshot_covers_grows_with_the_log_and_shrinks_when_one_is_kept() {
        let metrics = LogMetrics::default();
        metrics.replayed(100);
        metrics.bytes.inc_by(50);
        assert_eq!(metrics.since_snapshot(), 150);
        // A failed snapshot changes nothing; a kept one covers the log up to where it began.
        metrics.snapshot_failed(false);
        assert_eq!(metrics.since_snapshot(), 150);
        metrics.snapshot_kept(30);
        assert_eq!(metrics.since_snapshot(), 20);
        metrics.bytes.inc_by(10);
        assert_eq!(metrics.since_snapshot(), 30);
    }
}
