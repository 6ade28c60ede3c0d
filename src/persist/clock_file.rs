//! `CLOCK`: where a manual clock (`--clock manual`) was last moved to, written before the move
//! is answered, so a restart on the same data directory starts the clock there rather than at
//! the machine's time (deadlines and deduplication windows never see time go back). A clock
//! kept on the machine's time writes none. (On a database the lease row carries the time.)

use std::path::Path;

use super::{number_file, RecoveryError};
use crate::engine::Timestamp;

const NAME: &str = "CLOCK";
const MAGIC: [u8; 8] = *b"ORDLYCLK";

/// Where the manual clock was last moved to, if it ever was.
pub fn read(dir: &Path) -> Result<Option<Timestamp>, RecoveryError> {
    let read = number_file::read(dir, NAME, MAGIC, "a manual clock's time");
    let read = read.map_err(|unreadable| RecoveryError::of_number_file(NAME, unreadable))?;
    Ok(read.map(Timestamp))
}

/// Records that the manual clock reached `at`.
pub fn write(dir: &Path, at: Timestamp) -> std::io::Result<()> {
    number_file::write(dir, NAME, MAGIC, at.0)
}
