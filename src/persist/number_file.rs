//! A number in a file of its own in the data directory: eight bytes naming what it is, the
//! number (u64, little-endian), a CRC-32C of both. Written whole or not at all; anything else
//! found there is damage, refused with the file's name.

use std::path::Path;

use super::storage;

const BYTES: usize = 8 + 8 + 4;

/// Why a number file could not be read.
#[derive(Debug)]
pub enum Unreadable {
    Io(std::io::Error),
    /// Not the number it should hold, and why.
    Damaged(String),
}

/// The number in `dir/name`, if the file is there; `what` says what it should hold.
pub fn read(dir: &Path, name: &str, magic: [u8; 8], what: &str) -> Result<Option<u64>, Unreadable> {
    let bytes = match std::fs::read(dir.join(name)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Unreadable::Io(e)),
    };
    let whole = bytes.len() == BYTES
        && bytes[..8] == magic
        && crc32c::crc32c(&bytes[..16]).to_le_bytes() == bytes[16..];
    if !whole {
        return Err(Unreadable::Damaged(format!("not {what}")));
    }
    Ok(Some(u64::from_le_bytes(
        bytes[8..16].try_into().expect("8 bytes"),
    )))
}

/// Writes `number` to `dir/name`, synced.
pub fn write(dir: &Path, name: &str, magic: [u8; 8], number: u64) -> std::io::Result<()> {
    let mut bytes = magic.to_vec();
    bytes.extend_from_slice(&number.to_le_bytes());
    let checksum = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&checksum.to_le_bytes());
    storage::write_whole(dir, name, &bytes)
}
