//! File I/O behind a small trait, so tests can inject write, sync and truncate failures (as
//! raft-engine's `env` does). `DirStorage` is the real one: segment files in one directory.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::worker::Thread;

pub trait Storage: Send {
    /// Segment file names, sorted.
    fn list(&self) -> io::Result<Vec<String>>;
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// Reads the named file into `buffer`, replacing what it held; a buffer reused from file
    /// to file spares the kernel mapping and zeroing fresh pages for each 64 MiB segment.
    fn read_into(&self, name: &str, buffer: &mut Vec<u8>) -> io::Result<()> {
        *buffer = self.read(name)?;
        Ok(())
    }
    /// Appends to the named file, creating it if needed.
    fn append(&mut self, name: &str, bytes: &[u8]) -> io::Result<()>;
    /// Makes the named file's contents durable.
    fn sync(&mut self, name: &str) -> io::Result<()>;
    /// Cuts the named file back to `len` bytes (undoing a partial append).
    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()>;
    fn remove(&mut self, name: &str) -> io::Result<()>;
    /// A hint that `name`, which does not exist yet, will be appended to next, about `bytes`
    /// of it; storage may get it ready meanwhile.
    fn prepare(&mut self, _name: &str, _bytes: u64) {}
    /// Opens `name`, which does not exist yet, so that turning to it later needs no new
    /// descriptor: out of descriptors, the one a turn frees could be taken by another thread
    /// before the turn opens its new segment.
    fn reserve(&mut self, _name: &str) {}
    /// Makes `name` the file appends go to now rather than at the first append, closing the
    /// one before; a failure is left for that append to meet.
    fn turn_to(&mut self, _name: &str) {}
}

/// Space past the end of the records is filled with zeros and synced this much at a time
/// when no prepared file is there. Overwriting blocks that are already on disk lets
/// `fdatasync` skip the file's metadata (size, block map): on this ext4 disk its median fell
/// from about 290 to 180 µs. Readers take zeros after the last batch as the end; `batch`
/// says how they tell the holes a power cut can leave in such a file from damage.
pub const ZERO_CHUNK_BYTES: u64 = 1024 * 1024;

/// Zeros to write from, 64 KiB at a time, aligned for direct I/O.
#[repr(C, align(4096))]
struct Zeros([u8; 64 * 1024]);
static ZEROS: Zeros = Zeros([0; 64 * 1024]);

/// The page size writes are padded to: the kernel reads a cached page in from disk before a
/// write that covers only part of it, unless it is in memory already.
const PAGE_BYTES: u64 = 4096;

/// Segments as files of one directory; the file being appended to stays open.
pub struct DirStorage {
    dir: PathBuf,
    /// Opened once, to sync the directory after a segment is named: a sync must not need a
    /// new descriptor when the process has run out of them.
    dir_handle: Arc<File>,
    open: Option<OpenSegment>,
    /// The segment the last append failed to open (so it wrote nothing to it).
    unopened: Option<String>,
    /// The next segment: opened ahead, or being zero-filled by a helper thread while the
    /// current one fills.
    prepared: Option<(String, NextSegment)>,
    /// Helpers that were not done when their segment was needed, and their files, to delete
    /// once they are.
    abandoned: Vec<(PathBuf, ZeroFiller)>,
    /// The next helper waits for a message here before it starts (tests).
    #[cfg(test)]
    pub hold_helper: Option<std::sync::mpsc::Receiver<()>>,
}

/// A helper fills a segment under this suffix and it gets its `.wal` name only when used, so
/// a segment needed before its helper is done can be started afresh, without waiting.
const FILLING_SUFFIX: &str = ".filling";

/// A helper thread's result: the zero-filled file and its length.
type ZeroFiller = Thread<io::Result<(File, u64)>>;

enum NextSegment {
    /// Created empty under its filling name and held open (`Storage::reserve`).
    Reserved(File),
    Filling(ZeroFiller),
}

struct OpenSegment {
    name: String,
    file: File,
    /// What is written, padded with zeros to a whole page (see `PAGE_BYTES`).
    padded: Vec<u8>,
    /// Where the next append goes.
    written: u64,
    /// Bytes from `written` up to here are zeros that are already on disk.
    zeroed: u64,
}

/// Writes zeros over `[from, to)` of `file` and syncs them.
fn write_zeros(file: &File, from: u64, to: u64) -> io::Result<()> {
    write_zeros_unsynced(file, from, to)?;
    file.sync_data()
}

fn write_zeros_unsynced(file: &File, from: u64, to: u64) -> io::Result<()> {
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZEROS.0.len() as u64);
        file.write_all_at(&ZEROS.0[..n as usize], at)?;
        at += n;
    }
    Ok(())
}

/// The filesystem (or the user's quota on it) has no room for the write.
fn out_of_room(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Creates the next segment's file under its filling name. A crash leaves a file that the
/// next start deletes (`DirStorage::new`).
fn create_filling(path: &Path) -> io::Result<File> {
    private_file()
        .create_new(true)
        .read(true)
        .write(true)
        .open(path)
}

/// Fills `file`, found at `path`, with `bytes` of synced zeros; answers the file and how much
/// of it is zeroed. A fill that fails gives back what it wrote: left holding the space, a
/// file nobody may write to would keep a full disk full, and the log refusing changes until
/// it turned to that file, which it cannot while refusing them. Out of room, the file is
/// then used empty, to grow chunk by chunk; on another error it is not used at all.
fn zero_filled(dir: &File, file: File, path: &Path, bytes: u64) -> io::Result<(File, u64)> {
    match fill_with_zeros(dir, &file, path, bytes) {
        Ok(()) => Ok((file, bytes)),
        Err(error) => {
            file.set_len(0)?;
            if out_of_room(&error) {
                Ok((file, 0))
            } else {
                Err(error)
            }
        }
    }
}

fn fill_with_zeros(dir: &File, file: &File, path: &Path, bytes: u64) -> io::Result<()> {
    dir.sync_all()?;
    // Direct I/O skips copying 64 MiB of zeros into the page cache, which cost the server
    // more CPU than anything but request handling. Filesystems without it take the copy.
    let direct = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path);
    match direct {
        Ok(direct) => match write_zeros(&direct, 0, bytes) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => write_zeros(file, 0, bytes),
            other => other,
        },
        // No direct I/O here, or no descriptor to spare for a second handle: write through
        // the one already open.
        Err(_) => write_zeros(file, 0, bytes),
    }
}

impl OpenSegment {
    /// Makes sure `bytes` more fit in synced zero-filled space: a whole chunk ahead, or on a
    /// disk without room for one, just the pages they take, so that what still fits is taken.
    /// Only a write out of room falls back; any other error, and any failed sync, is the
    /// caller's (a failed sync may have lost records written before).
    fn reserve(&mut self, bytes: u64) -> io::Result<()> {
        let end = self.written + bytes;
        if end > self.zeroed {
            let from = self.zeroed.max(self.written);
            let chunk = end.next_multiple_of(ZERO_CHUNK_BYTES);
            let target = match write_zeros_unsynced(&self.file, from, chunk) {
                Ok(()) => chunk,
                Err(error) if out_of_room(&error) => {
                    // Gives back the part of the chunk that was written.
                    self.file.set_len(from)?;
                    let pages = end.next_multiple_of(PAGE_BYTES);
                    write_zeros_unsynced(&self.file, from, pages)?;
                    pages
                }
                Err(error) => return Err(error),
            };
            self.file.sync_data()?;
            self.zeroed = target;
        }
        Ok(())
    }
}

/// Writes `name` in `dir` whole or not at all: to the side, synced, renamed into place, and
/// the directory synced.
pub fn write_whole(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let side = dir.join(format!("{name}.new"));
    let mut file = private_file()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&side)?;
    std::io::Write::write_all(&mut file, bytes)?;
    file.sync_all()?;
    std::fs::rename(&side, dir.join(name))?;
    File::open(dir)?.sync_all()
}

/// Options for a file of the data directory: readable by the server's user only (the log holds
/// every message body and the SNS signing key), whatever the umask.
pub fn private_file() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(0o600);
    options
}

/// Creates the data directory (and missing parents) readable by the server's user only.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Warns when others may read or enter `dir` (one made before Orderly made it private, or
/// opened up by hand); the directory is used as it is.
pub fn warn_if_shared(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir)?.permissions().mode();
    if mode & 0o077 != 0 {
        tracing::warn!(
            dir = %dir.display(),
            mode = format!("{:o}", mode & 0o777),
            "the data directory is open to other users; it holds every message and the SNS \
             signing key (chmod 700 it)"
        );
    }
    Ok(())
}

impl DirStorage {
    pub fn new(dir: &Path) -> io::Result<DirStorage> {
        create_private_dir(dir)?;
        // Segments a helper was filling when the last process stopped. One that cannot be
        // deleted does no harm: a helper meant to fill it finds it there and gives up.
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.to_string_lossy().ends_with(FILLING_SUFFIX) {
                let _ = std::fs::remove_file(&path);
            }
        }
        Ok(DirStorage {
            dir: dir.to_path_buf(),
            dir_handle: Arc::new(File::open(dir)?),
            open: None,
            unopened: None,
            prepared: None,
            abandoned: Vec::new(),
            #[cfg(test)]
            hold_helper: None,
        })
    }

    /// Waits for abandoned helpers and deletes their files (tests).
    #[cfg(test)]
    pub fn finish_abandoned(&mut self) {
        for (path, helper) in self.abandoned.drain(..) {
            let _ = helper.join();
            let _ = std::fs::remove_file(path);
        }
    }

    /// True once the helper preparing the next segment is done (tests).
    #[cfg(test)]
    pub fn prepared_done(&self) -> bool {
        self.prepared
            .as_ref()
            .is_some_and(|(_, next)| matches!(next, NextSegment::Filling(h) if h.is_finished()))
    }

    fn filling_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}{FILLING_SUFFIX}"))
    }

    /// Deletes the files of abandoned helpers that are done.
    fn reap_abandoned(&mut self) {
        self.abandoned.retain(|(path, helper)| {
            if !helper.is_finished() {
                return true;
            }
            let _ = std::fs::remove_file(path);
            false
        });
    }

    /// The prepared file if it is `name` and its helper is done, else the file opened or
    /// created as it is on disk. A helper not yet done is left to finish and its file deleted
    /// later: waiting for it would hold up every request waiting on the log (zero-filling
    /// 64 MiB takes ~90 ms here), and a snapshot can turn the log over at any moment.
    fn open_segment(&mut self, name: &str) -> io::Result<OpenSegment> {
        self.reap_abandoned();
        if self.prepared.as_ref().is_some_and(|(n, _)| n == name) {
            let (_, next) = self.prepared.take().expect("checked");
            let filling = self.filling_path(name);
            let ready = match next {
                NextSegment::Reserved(file) => Some(Ok((file, 0))),
                NextSegment::Filling(helper) if !helper.is_finished() => {
                    self.abandoned.push((filling.clone(), helper));
                    None
                }
                NextSegment::Filling(helper) => Some(
                    helper
                        .join()
                        .unwrap_or_else(|| Err(io::Error::other("segment helper panicked"))),
                ),
            };
            if let Some(ready) = ready {
                // A link, not a rename: it never replaces a file already of that name.
                match ready.and_then(|ready| {
                    std::fs::hard_link(&filling, self.dir.join(name))?;
                    // Left behind, it is deleted at the next start.
                    let _ = std::fs::remove_file(&filling);
                    Ok(ready)
                }) {
                    // Named like a segment only now, so the name must be made durable.
                    Ok((file, zeroed)) => {
                        self.dir_handle.sync_all()?;
                        return Ok(OpenSegment {
                            name: name.to_string(),
                            file,
                            padded: Vec::new(),
                            written: 0,
                            zeroed,
                        });
                    }
                    Err(_) => {
                        let _ = std::fs::remove_file(&filling);
                    }
                }
            }
        }
        let file = private_file()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(self.dir.join(name))?;
        // A new file's directory entry must be durable too.
        self.dir_handle.sync_all()?;
        let len = file.metadata()?.len();
        Ok(OpenSegment {
            name: name.to_string(),
            file,
            padded: Vec::new(),
            written: len,
            zeroed: len,
        })
    }

    fn segment(&mut self, name: &str) -> io::Result<&mut OpenSegment> {
        if self.open.as_ref().is_none_or(|open| open.name != name) {
            self.open = None;
            self.open = Some(self.open_segment(name)?);
        }
        Ok(self.open.as_mut().expect("just opened"))
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

    fn read_into(&self, name: &str, buffer: &mut Vec<u8>) -> io::Result<()> {
        buffer.clear();
        File::open(self.dir.join(name))?.read_to_end(buffer)?;
        Ok(())
    }

    fn append(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.unopened = None;
        let segment = match self.segment(name) {
            Ok(segment) => segment,
            Err(error) => {
                self.unopened = Some(name.to_string());
                return Err(error);
            }
        };
        segment.reserve(bytes.len() as u64)?;
        let end = segment.written + bytes.len() as u64;
        let page_end = end.next_multiple_of(PAGE_BYTES);
        if page_end > end && page_end <= segment.zeroed {
            // The zeros past the end are on disk already; writing them too spares the kernel
            // reading the last page in (a file zero-filled with direct I/O has none cached).
            segment.padded.clear();
            segment.padded.extend_from_slice(bytes);
            segment
                .padded
                .resize((page_end - segment.written) as usize, 0);
            segment
                .file
                .write_all_at(&segment.padded, segment.written)?;
        } else {
            segment.file.write_all_at(bytes, segment.written)?;
        }
        segment.written = end;
        Ok(())
    }

    fn sync(&mut self, name: &str) -> io::Result<()> {
        self.segment(name)?.file.sync_data()
    }

    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        // An append that could not even open its segment (out of descriptors, say) wrote
        // nothing: there is nothing to undo, and undoing must not need the descriptor either.
        if self.unopened.as_deref() == Some(name) {
            self.unopened = None;
            return Ok(());
        }
        let segment = self.segment(name)?;
        segment.file.set_len(len)?;
        segment.written = len;
        segment.zeroed = len;
        Ok(())
    }

    fn prepare(&mut self, name: &str, bytes: u64) {
        if self.open.as_ref().is_some_and(|open| open.name == name) {
            return;
        }
        let reserved = match self.prepared.take() {
            None => None,
            Some((n, NextSegment::Reserved(file))) if n == name => Some(file),
            Some(other) => {
                self.prepared = Some(other);
                return;
            }
        };
        self.reap_abandoned();
        let dir = self.dir_handle.clone();
        let path = self.filling_path(name);
        #[cfg(test)]
        let hold = self.hold_helper.take();
        let helper = Thread::start("segment", move |_| {
            #[cfg(test)]
            if let Some(hold) = hold {
                let _ = hold.recv();
            }
            let file = match reserved {
                Some(file) => file,
                None => create_filling(&path)?,
            };
            zero_filled(&dir, file, &path, bytes)
        });
        // Without a helper thread the segment simply grows chunk by chunk.
        if let Ok(helper) = helper {
            self.prepared = Some((name.to_string(), NextSegment::Filling(helper)));
        }
    }

    fn reserve(&mut self, name: &str) {
        if self.prepared.is_some() || self.open.as_ref().is_some_and(|open| open.name == name) {
            return;
        }
        // Out of descriptors this fails, and the turn opens its segment as it comes.
        if let Ok(file) = create_filling(&self.filling_path(name)) {
            self.prepared = Some((name.to_string(), NextSegment::Reserved(file)));
        }
    }

    fn turn_to(&mut self, name: &str) {
        let _ = self.segment(name);
    }

    fn remove(&mut self, name: &str) -> io::Result<()> {
        if self.open.as_ref().is_some_and(|open| open.name == name) {
            self.open = None;
        }
        std::fs::remove_file(self.dir.join(name))
    }
}

/// In-memory files with switchable failures, for tests.
#[derive(Default, Clone)]
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
