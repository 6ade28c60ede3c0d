//! The write-ahead log's figures (records, bytes, sync time, snapshots), kept by its writer
//! thread and the snapshotter; `GET /metrics` exports them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SnapshotFailureLabels {
    reason: &'static str,
}

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
}

impl LogMetrics {
    /// Counts a snapshot due and not written.
    pub fn snapshot_failed(&self, no_room: bool) {
        let reason = if no_room { "no_room" } else { "error" };
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
        registry.register(
            "log_records",
            "Records appended to the write-ahead log",
            self.records.clone(),
        );
        registry.register(
            "log_bytes",
            "Bytes appended to the write-ahead log",
            self.bytes.clone(),
        );
        registry.register(
            "log_sync_seconds",
            "Time each fdatasync of the write-ahead log took",
            self.sync_seconds.clone(),
        );
        registry.register("snapshots", "Snapshots written", self.snapshots.clone());
        registry.register(
            "snapshot_duration_seconds",
            "Time each snapshot took to write",
            self.snapshot_seconds.clone(),
        );
        registry.register(
            "snapshot_failures",
            "Snapshots due and not written: no_room (not tried) or error",
            self.snapshot_failures.clone(),
        );
    }
}
