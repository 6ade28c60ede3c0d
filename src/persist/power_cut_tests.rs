//! Property tests of recovery: a log written over zeros, cut by a power failure that kept any
//! subset of the sectors written since the last sync, or damaged in one byte afterwards.

use proptest::prelude::*;

use super::batch::ALIGN;
use super::log_error::LogError;
use super::segment_log::{Recovered, SegmentLog};
use super::storage::MemStorage;

/// Large enough that every case stays in one segment.
const SEGMENT_BYTES: u64 = 1 << 30;
const NAME: &str = "00000000000000000001.wal";

/// What a run of appends left: the file after the last write and after the last sync, every
/// record, how many were synced, and where each batch lies.
struct Written {
    last: Vec<u8>,
    durable: Vec<u8>,
    records: Vec<Vec<u8>>,
    synced_records: usize,
    batches: Vec<std::ops::Range<usize>>,
}

/// Appends one batch per entry (record sizes, and whether a sync follows).
fn write(batches: &[(Vec<usize>, bool)]) -> Written {
    let (mut log, _) = SegmentLog::open(MemStorage::default(), SEGMENT_BYTES).unwrap();
    let file = |log: &SegmentLog<MemStorage>| log.storage().files.get(NAME).cloned();
    let mut written = Written {
        last: Vec::new(),
        durable: Vec::new(),
        records: Vec::new(),
        synced_records: 0,
        batches: Vec::new(),
    };
    for (sizes, sync) in batches {
        let first = written.records.len();
        let payloads: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, size)| vec![(first + i) as u8 | 1; *size])
            .collect();
        let before = file(&log).map_or(0, |f| f.len());
        let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        log.append(&slices).unwrap();
        let after = file(&log).unwrap().len();
        written.batches.push(before.next_multiple_of(ALIGN)..after);
        written.records.extend(payloads);
        if *sync {
            log.sync().unwrap();
            written.synced_records = written.records.len();
            written.durable = file(&log).unwrap();
        }
    }
    written.last = file(&log).unwrap_or_default();
    written
}

fn recover(image: Vec<u8>) -> Result<Recovered, LogError> {
    let mut storage = MemStorage::default();
    storage.files.insert(NAME.into(), image);
    SegmentLog::open(storage, SEGMENT_BYTES).map(|(_, recovered)| recovered)
}

/// Both images as the zero-filled file holds them, a sector of zeros past the end.
fn on_disk(bytes: &[u8], len: usize) -> Vec<u8> {
    let mut image = bytes.to_vec();
    image.resize(len, 0);
    image
}

fn batches() -> impl Strategy<Value = Vec<(Vec<usize>, bool)>> {
    // Records from a few bytes to several sectors, so that writes start and end anywhere in
    // a sector and span several.
    let sizes = prop::collection::vec(1usize..1400, 1..4);
    prop::collection::vec((sizes, any::<bool>()), 1..10)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever subset of the unsynced sectors reached the disk, recovery starts, keeps every
    /// synced record, and returns records in order with nothing after a gap.
    #[test]
    fn a_power_cut_never_stops_recovery_nor_loses_synced_records(
        batches in batches(),
        kept in prop::collection::vec(any::<bool>(), 1..64),
    ) {
        let written = write(&batches);
        let len = written.last.len().next_multiple_of(ALIGN) + ALIGN;
        let last = on_disk(&written.last, len);
        let durable = on_disk(&written.durable, len);
        let mut image = durable.clone();
        for (i, sector) in (0..len).step_by(ALIGN).enumerate() {
            if kept[i % kept.len()] {
                image[sector..sector + ALIGN].copy_from_slice(&last[sector..sector + ALIGN]);
            }
        }
        let everything = image == last;
        let recovered = recover(image).expect("a power cut is never damage");
        let n = recovered.records.len();
        prop_assert!(n >= written.synced_records, "{n} of {} synced", written.synced_records);
        prop_assert_eq!(&recovered.records[..], &written.records[..n]);
        if everything {
            prop_assert_eq!(n, written.records.len());
            prop_assert!(recovered.dropped_tail.is_none());
        }
    }

    /// One damaged byte in a log synced after every write: recovery stops if the byte was in
    /// any batch but the last; otherwise it reports what it dropped or lost nothing.
    #[test]
    fn damage_stops_recovery_or_is_reported_never_silently_lost(
        sizes in prop::collection::vec(prop::collection::vec(1usize..1400, 1..4), 1..8),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let batches: Vec<(Vec<usize>, bool)> = sizes.into_iter().map(|s| (s, true)).collect();
        let written = write(&batches);
        let mut image = on_disk(&written.last, written.last.len().next_multiple_of(ALIGN));
        let at = at.index(image.len());
        image[at] ^= flip;
        let in_earlier_batch = written.batches[..written.batches.len() - 1]
            .iter()
            .any(|batch| batch.contains(&at));
        match recover(image) {
            Err(LogError::Corruption { offset, .. }) => {
                prop_assert!(offset <= at, "named offset {offset} after the damage at {at}");
            }
            Err(other) => prop_assert!(false, "{other}"),
            Ok(recovered) => {
                prop_assert!(!in_earlier_batch, "damage at {at} before the last batch passed");
                let n = recovered.records.len();
                prop_assert_eq!(&recovered.records[..], &written.records[..n]);
                prop_assert!(n == written.records.len() || recovered.dropped_tail.is_some());
            }
        }
    }
}
