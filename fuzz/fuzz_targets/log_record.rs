//! Recovery reading a damaged log: the input is a segment file's bytes, replayed through the
//! batch and record framing, and every record found decoded as a change. Damage must be
//! reported as an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orderly::persist::format::decode_record;
use orderly::persist::log_error::LogError;
use orderly::persist::segment_log::SegmentLog;
use orderly::persist::storage::MemStorage;

fuzz_target!(|data: &[u8]| {
    // The key the framing is sealed with comes from the input too, so sealed batches can be
    // found; the rest is the segment.
    if data.len() < 8 {
        let _ = decode_record(data);
        return;
    }
    let key = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
    let mut storage = MemStorage::default();
    storage
        .files
        .insert("00000000000000000001.wal".into(), data[8..].to_vec());
    let _ = SegmentLog::replay(storage, 1 << 20, key, false, |_file, _offset, record| {
        let _ = decode_record(record);
        Ok::<(), LogError>(())
    });
    let _ = decode_record(&data[8..]);
});
