//! A shard's write begun by whatever commits it, rather than by the shard's writer.
//!
//! Where a sink's writes are finished elsewhere (the node's shared commit in a database cut
//! into shards, a task on the node's runtime), a request's records would wake the shard's
//! writer, which would hand them on: a thread switched in for each write, paid by most
//! requests at a moderate pace, where each is its shard's only write. Instead, while the
//! writer sleeps with no write of its shard unacknowledged, a submission asks the committer
//! to collect: it takes the records ready and begins their write as the writer would, never
//! blocking (`LogSink::collectable`), and the writer sleeps on. Anything else (a write still
//! under way, a retry, a batch wait, a log busy enough to write on its own, a rotation,
//! closing) is left to the writer, woken as before.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, TryLockError, Weak};

use super::shared::Shared;
use super::sink::{Collect, LogSink};
use super::write_loop::Held;

/// The collect of a log's writer: holds neither, so that a log closed is dropped.
pub(super) fn collect_for<S: LogSink>(held: &Arc<Held<S>>, shared: &Arc<Shared>) -> Collect {
    let (held, shared): (Weak<Held<S>>, Weak<Shared>) =
        (Arc::downgrade(held), Arc::downgrade(shared));
    Arc::new(move || {
        let (Some(held), Some(shared)) = (held.upgrade(), shared.upgrade()) else {
            return;
        };
        // Not to end the committer, which every shard's writes go through: records
        // may have been taken and written nowhere, so the log acknowledges nothing more.
        if catch_unwind(AssertUnwindSafe(|| collect(&held, &shared))).is_err() {
            tracing::error!("collecting a log's records failed; refusing changes");
            shared
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .lost = true;
            shared.durable.send_modify(|d| d.failed = true);
            leave_to_writer(&shared);
        }
    })
}

/// Takes the records ready and begins their write, if the writer sleeps with nothing of its
/// own to do first; otherwise wakes it, so that the records do not wait.
fn collect<S: LogSink>(held: &Held<S>, shared: &Shared) {
    // Held by the writer's thread while it is awake: it looks at the records before it
    // sleeps again. Never waited for: that thread may be waiting for the committer.
    let mut guard = match held.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return leave_to_writer(shared),
    };
    let Some(writer) = guard.as_mut() else {
        return leave_to_writer(shared);
    };
    // A write acknowledged where it finished is settled here, as the writer would on waking;
    // one not acknowledged (still under way, or failed) is the writer's.
    let settled = match writer.under_way.len() {
        0 => true,
        1 => writer.under_way[0].acknowledged(),
        _ => false,
    };
    if settled && !writer.under_way.is_empty() {
        // Never waits: its outcome came before its acknowledgement.
        writer.settle_finished(false);
    }
    let mut pending = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
    pending.collect_asked = false;
    let may = settled
        && writer.under_way.is_empty()
        && pending.collect_ready
        && pending.ready() > 0
        && !pending.lost
        && !pending.closing
        && pending.rotate.is_none()
        && pending.remove_before.is_none()
        && !writer.retrying
        && !writer.lost
        && writer.log.collectable()
        && writer.batch_wait(&pending).is_none()
        // Asked for while the log was quieter: busy now, the writer writes it on its own.
        && !shared.arrivals.busy_within(pending.alone_within);
    if !may {
        drop(pending);
        return leave_to_writer(shared);
    }
    let begun = writer.take_ready(&mut pending);
    pending.collect_ready = false;
    pending.collected += 1;
    drop(pending);
    writer.begin(begun);
    if writer.retrying || writer.lost {
        // It could not begin: the writer tries again.
        leave_to_writer(shared);
    }
}

/// Wakes the writer if it sleeps, for it to take whatever is ready.
fn leave_to_writer(shared: &Shared) {
    let mut pending = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
    pending.collect_asked = false;
    let wake = std::mem::take(&mut pending.writer_asleep);
    drop(pending);
    if wake {
        shared.work.notify_one();
    }
}
