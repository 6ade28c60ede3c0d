//! A data directory cut into shards keeps each shard's state in a data directory of its own,
//! `shard-N` inside it, and the number of shards in `SHARDS` (a number file), written at its
//! first start. A key's shard depends on the count, so a directory opens only with the count
//! it was cut into, and one holding a single engine's state is never cut.

use std::path::{Path, PathBuf};

use super::{number_file, RecoveryError};

const FILE: &str = "SHARDS";
const MAGIC: [u8; 8] = *b"ORDSHARD";

/// The data directories of `count` shards of `dir`: `dir` itself for one shard; made and
/// recorded at the first start of several.
pub fn shard_dirs(dir: &Path, count: u32) -> Result<Vec<PathBuf>, RecoveryError> {
    let recorded = match number_file::read(dir, FILE, MAGIC, "a number of shards") {
        Ok(recorded) => recorded,
        Err(number_file::Unreadable::Io(error)) => return Err(error.into()),
        Err(number_file::Unreadable::Damaged(reason)) => {
            return Err(RecoveryError::Corruption {
                file: dir.join(FILE).display().to_string(),
                offset: 0,
                reason,
            })
        }
    };
    let refused = |why: String| Err(RecoveryError::ShardCount(why));
    match recorded {
        Some(recorded) if recorded != u64::from(count) => refused(format!(
            "data directory {} is cut into {recorded} shards: start it with --shards {recorded}",
            dir.display()
        )),
        None if count == 1 => Ok(vec![dir.to_path_buf()]),
        None if dir.join("KEY").exists() => refused(format!(
            "data directory {} holds the state of one engine, which is not cut into shards: \
             start it without --shards, or with a new directory",
            dir.display()
        )),
        _ => {
            super::storage::create_private_dir(dir)?;
            if recorded.is_none() {
                number_file::write(dir, FILE, MAGIC, u64::from(count))?;
            }
            Ok((0..count).map(|n| dir.join(format!("shard-{n}"))).collect())
        }
    }
}

/// Whether `dir` is cut into shards, or is one shard of a directory that is.
pub fn is_sharded(dir: &Path) -> bool {
    let one_of = dir.parent().filter(|_| {
        dir.file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("shard-"))
    });
    dir.join(FILE).exists() || one_of.is_some_and(|parent| parent.join(FILE).exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_opens_with_the_count_it_was_cut_into() {
        let dir = tempfile::tempdir().unwrap();
        let single = dir.path().join("single");
        assert_eq!(
            shard_dirs(&single, 1).unwrap(),
            std::slice::from_ref(&single)
        );
        let cut = dir.path().join("cut");
        let dirs = shard_dirs(&cut, 3).unwrap();
        assert_eq!(
            dirs,
            [
                cut.join("shard-0"),
                cut.join("shard-1"),
                cut.join("shard-2")
            ]
        );
        assert_eq!(shard_dirs(&cut, 3).unwrap(), dirs);
        assert!(is_sharded(&cut) && is_sharded(&dirs[1]) && !is_sharded(&single));
        for other in [1, 4] {
            let refused = shard_dirs(&cut, other).unwrap_err().to_string();
            assert!(refused.contains("--shards 3"), "{refused}");
        }
        // A single engine's state is not cut.
        std::fs::create_dir_all(&single).unwrap();
        std::fs::write(single.join("KEY"), b"key").unwrap();
        let refused = shard_dirs(&single, 2).unwrap_err().to_string();
        assert!(refused.contains("one engine"), "{refused}");
        // Damage to the count is refused with the file.
        std::fs::write(cut.join(FILE), b"garbage").unwrap();
        let refused = shard_dirs(&cut, 3).unwrap_err().to_string();
        assert!(refused.contains("SHARDS"), "{refused}");
    }
}
