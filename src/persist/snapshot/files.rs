//! How snapshots lie in a data directory: `<first_lsn, 20 digits>.snap`, in chunked records.

use std::path::Path;

/// Messages and history entries are written in chunks of about this many bytes, well under
/// the record size limit.
pub(super) const CHUNK_BYTES: usize = 4 << 20;

pub(super) fn snapshot_name(first_lsn: u64) -> String {
    format!("{first_lsn:020}.snap")
}

pub(super) fn snapshots(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".snap"))
        .collect();
    names.sort();
    Ok(names)
}
