//! A stored message and where it stands: what a queue holds, its log records carry and its
//! snapshots write.

use crate::engine::message::Message;
use crate::engine::time::Timestamp;

/// Where a message stands; deadlines are absolute, so a restored state needs no adjusting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Delayed(Timestamp),
    Visible,
    InFlight(Timestamp),
}

#[derive(Clone, Debug)]
pub struct Stored {
    pub(crate) message: Message,
    pub(crate) state: State,
    /// Counts receives across the queue, so each receive issues a distinct handle.
    pub(crate) receive_no: u64,
    /// Bumped on every visibility change; a cached receive attempt is valid only while it holds.
    pub(crate) visibility_changes: u32,
    pub(crate) received_at: Timestamp,
    /// Retention counts from here (a FIFO DLQ restarts it; a standard DLQ keeps the original).
    pub(crate) enqueued_at: Timestamp,
}

/// What a stored message takes in a log record or snapshot besides its body and attributes
/// (id, MD5, sender, group and deduplication ids, sequence number, times, framing), about.
pub const LOGGED_BYTES: u64 = 200;

pub(super) fn logged_bytes(stored: &Stored) -> u64 {
    stored.message.size() as u64 + LOGGED_BYTES
}

/// What a receive attempt returned, per message: (sequence, receive number, visibility changes).
pub type AttemptEntries = Vec<(u64, u64, u32)>;

impl Stored {
    /// Bytes of body and attributes, to size snapshot chunks.
    pub fn size(&self) -> usize {
        self.message.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each stored message is one allocation; past 224 bytes jemalloc's next class is 256, which
    /// a million queued messages would pay 32 MB for.
    #[test]
    fn a_stored_message_fits_the_allocators_224_byte_class() {
        assert!(
            std::mem::size_of::<Stored>() <= 224,
            "{} bytes",
            std::mem::size_of::<Stored>()
        );
    }
}
