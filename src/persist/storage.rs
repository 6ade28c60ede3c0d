//! File I/O behind a small trait, so tests can inject write, sync and truncate failures (as
//! raft-engine's `env` does). `DirStorage` is the real one: segment files in one directory.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub trait Storage: Send {
    /// Segment file names, sorted.
    fn list(&self) -> io::Result<Vec<String>>;
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// Appends to the named file, creating it if needed.
    fn append(&mut self, name: &str, bytes: &[u8]) -> io::Result<()>;
    /// Makes the named file's contents durable.
    fn sync(&mut self, name: &str) -> io::Result<()>;
    /// Cuts the named file back to `len` bytes (undoing a partial append).
    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()>;
    fn remove(&mut self, name: &str) -> io::Result<()>;
}

/// Segments as files of one directory; the file being appended to stays open.
pub struct DirStorage {
    dir: PathBuf,
    open: Option<(String, File)>,
}

impl DirStorage {
    pub fn new(dir: &Path) -> io::Result<DirStorage> {
        std::fs::create_dir_all(dir)?;
        Ok(DirStorage {
            dir: dir.to_path_buf(),
            open: None,
        })
    }

    fn file(&mut self, name: &str) -> io::Result<&mut File> {
        if self.open.as_ref().is_none_or(|(open, _)| open != name) {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.join(name))?;
            // A new file's directory entry must be durable too.
            File::open(&self.dir)?.sync_all()?;
            self.open = Some((name.to_string(), file));
        }
        Ok(&mut self.open.as_mut().expect("just opened").1)
    }
}

impl Storage for DirStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name.ends_with(".wal") {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.dir.join(name))
    }

    fn append(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.file(name)?.write_all(bytes)
    }

    fn sync(&mut self, name: &str) -> io::Result<()> {
        self.file(name)?.sync_data()
    }

    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        self.file(name)?.set_len(len)
    }

    fn remove(&mut self, name: &str) -> io::Result<()> {
        if self.open.as_ref().is_some_and(|(open, _)| open == name) {
            self.open = None;
        }
        std::fs::remove_file(self.dir.join(name))
    }
}

/// In-memory files with switchable failures, for tests.
#[derive(Default)]
pub struct MemStorage {
    pub files: BTreeMap<String, Vec<u8>>,
    /// The next append writes only this many bytes, then fails.
    pub fail_append_after: Option<usize>,
    pub fail_sync: bool,
    pub fail_truncate: bool,
}

impl Storage for MemStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.files.keys().cloned().collect())
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        self.files
            .get(name)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn append(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let file = self.files.entry(name.to_string()).or_default();
        if let Some(partial) = self.fail_append_after.take() {
            file.extend_from_slice(&bytes[..partial.min(bytes.len())]);
            return Err(io::Error::other("injected write failure"));
        }
        file.extend_from_slice(bytes);
        Ok(())
    }

    fn sync(&mut self, _name: &str) -> io::Result<()> {
        if self.fail_sync {
            return Err(io::Error::other("injected fsync failure"));
        }
        Ok(())
    }

    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        if self.fail_truncate {
            return Err(io::Error::other("injected truncate failure"));
        }
        if let Some(file) = self.files.get_mut(name) {
            file.truncate(len as usize);
        }
        Ok(())
    }

    fn remove(&mut self, name: &str) -> io::Result<()> {
        self.files.remove(name);
        Ok(())
    }
}
