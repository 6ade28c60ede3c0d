use super::*;
use crate::engine::message::{MessageId, SequenceNumber};

fn digest(n: u64) -> DedupDigest {
    let mut bytes = [0; 16];
    bytes[..8].copy_from_slice(&n.to_le_bytes());
    DedupDigest(bytes)
}

#[test]
fn entries_expire_in_order_and_a_reinsert_outlives_its_older_slot() {
    let mut h = DedupHistory::default();
    h.insert(digest(1), 1, Timestamp(100));
    h.insert(digest(2), 2, Timestamp(200));
    assert_eq!(h.get(&digest(1), Timestamp(99)), Some(&1));
    assert_eq!(
        h.get(&digest(1), Timestamp(100)),
        None,
        "expired at its time"
    );
    assert_eq!(h.get(&digest(3), Timestamp(0)), None);
    h.insert(digest(2), 3, Timestamp(300));
    assert_eq!(h.len(), 2);
    h.expire(Timestamp(250));
    assert_eq!(h.len(), 1, "the first went, the second's newer slot stays");
    assert_eq!(h.get(&digest(2), Timestamp(250)), Some(&3));
    assert_eq!(h.entries(), vec![(digest(2), 3, Timestamp(300))]);
    h.expire(Timestamp(300));
    assert_eq!((h.len(), h.get(&digest(2), Timestamp(0))), (0, None));
}

#[test]
fn entries_rebuild_the_same_history_after_growth_and_partial_expiry() {
    let mut h = DedupHistory::default();
    for i in 0..10_000u64 {
        h.insert(digest(i % 7_000), i, Timestamp(1_000 + i));
    }
    h.expire(Timestamp(1_000 + 4_999));
    // Ids 0..3000 were inserted again at 7000..10000; 3000..5000 expired; 5000..7000 live.
    assert_eq!(h.len(), 5_000);
    assert_eq!(h.get(&digest(4_000), Timestamp(0)), None);
    assert_eq!(h.get(&digest(1), Timestamp(0)), Some(&7_001));
    assert_eq!(h.get(&digest(6_999), Timestamp(0)), Some(&6_999));
    let kept = h.entries();
    assert_eq!(kept.len(), 5_000);
    assert_eq!(kept[0], (digest(5_000), 5_000, Timestamp(6_000)));
    let mut rebuilt = DedupHistory::default();
    for (d, v, at) in kept.iter().copied() {
        rebuilt.insert(d, v, at);
    }
    assert_eq!(rebuilt.entries(), kept);
    h.clear();
    assert_eq!((h.len(), h.get(&digest(6_999), Timestamp(0))), (0, None));
}

#[test]
fn a_digest_is_the_first_half_of_the_keys_sha256() {
    assert_eq!(
        crate::engine::message::hex(&DedupDigest::of("abc").0),
        "ba7816bf8f01cfea414140de5dae2223"
    );
    assert_ne!(
        DedupDigest::of("AAPL\u{0}id-1"),
        DedupDigest::of("AAP\u{0}Lid-1")
    );
}

/// A million live ids in a queue's history, as the memory target counts them: the history's
/// whole heap (slots and index, their unused capacity included) per id.
#[test]
fn a_million_queue_ids_cost_at_most_128_bytes_each() {
    let record = DedupRecord {
        message_id: MessageId::random(),
        sequence_number: Some(SequenceNumber::BASE),
    };
    let mut h = DedupHistory::default();
    for i in 0..1_000_000u64 {
        h.insert(digest(i), record, Timestamp(i));
    }
    let per_id = h.heap_bytes() / 1_000_000;
    assert!(per_id <= 128, "{per_id} bytes an id");
    assert!(h.get(&digest(999_999), Timestamp(0)).is_some());
}

#[test]
fn a_burst_gives_its_memory_back_as_it_expires() {
    let mut h = DedupHistory::default();
    for i in 0..100_000u64 {
        h.insert(digest(i), i, Timestamp(i));
    }
    let burst = h.heap_bytes();
    h.expire(Timestamp(98_999));
    assert_eq!(h.len(), 1_000);
    assert!(h.heap_bytes() * 10 < burst, "{} of {burst}", h.heap_bytes());
    for i in 99_000..100_000u64 {
        assert_eq!(h.get(&digest(i), Timestamp(0)), Some(&i));
    }
    h.expire(Timestamp(100_000));
    assert_eq!((h.len(), h.heap_bytes()), (0, 0));
    h.insert(digest(1), 1, Timestamp(200_000));
    assert_eq!(h.get(&digest(1), Timestamp(100_001)), Some(&1));
}

/// Reads the whole history a chunk at a time, as a snapshot does.
fn read_in_chunks(h: &DedupHistory<u64>, positions: usize) -> Vec<(DedupDigest, u64, Timestamp)> {
    let (mut all, mut cursor) = (Vec::new(), Some(h.cursor()));
    while let Some(at) = cursor {
        let (chunk, next) = h.read(at, positions).unwrap();
        assert!(chunk.len() <= positions);
        all.extend(chunk);
        cursor = next;
    }
    all
}

#[test]
fn a_read_in_chunks_sees_the_history_as_it_began_less_what_expired() {
    let mut h = DedupHistory::default();
    for i in 0..10u64 {
        h.insert(digest(i % 7), i, Timestamp(i));
    }
    for positions in [1, 3, 7, 100] {
        assert_eq!(
            read_in_chunks(&h, positions),
            h.entries(),
            "chunks of {positions}"
        );
    }
    assert_eq!(h.entries().len(), 7);

    // Between chunks: an expiry and an insert. The insert is not read: it belongs to the log
    // after the snapshot.
    let (first, next) = h.read(h.cursor(), 7).unwrap();
    h.expire(Timestamp(7));
    h.insert(digest(50), 50, Timestamp(50));
    let (second, end) = h.read(next.unwrap(), 7).unwrap();
    let seen: Vec<u64> = first.iter().chain(&second).map(|e| e.1).collect();
    assert_eq!(
        seen,
        vec![3, 4, 5, 6, 8, 9],
        "each live one once, as it was"
    );
    assert_eq!(end, None);

    // Between chunks: a clear. What it dropped cannot be read, and the read says so.
    let (_, next) = h.read(h.cursor(), 1).unwrap();
    h.clear();
    h.insert(digest(60), 60, Timestamp(60));
    assert_eq!(h.read(next.unwrap(), 4), Err(Cleared));
    assert_eq!(h.entries(), vec![(digest(60), 60, Timestamp(60))]);
}

#[test]
fn a_read_goes_on_past_an_expiry_that_empties_the_history_and_gives_its_room_back() {
    let mut h = DedupHistory::default();
    for i in 0..200u64 {
        h.insert(digest(i), i, Timestamp(i));
    }
    let (first, next) = h.read(h.cursor(), 50).unwrap();
    assert_eq!(first.len(), 50);
    h.expire(Timestamp(200));
    assert_eq!((h.len(), h.heap_bytes()), (0, 0));
    // Inserted after the read began: the log's, not the snapshot's.
    h.insert(digest(500), 500, Timestamp(500));
    assert_eq!(h.read(next.unwrap(), 50), Ok((Vec::new(), None)));
    assert_eq!(
        read_in_chunks(&h, 1),
        vec![(digest(500), 500, Timestamp(500))]
    );
}
