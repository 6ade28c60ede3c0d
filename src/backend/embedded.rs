//! The embedded backend: the in-process engine, durable through its write-ahead log. Each
//! change is made under the engine's locks (which record it, see `engine::changes`) and
//! answered once the log holds it.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::Notify;

use super::{Answer, BackendError, BackendResult, CreateQueue, PolicyEdit, QueueAdmin, QueueView};
use crate::engine::{Engine, Journal, Timestamp};
use crate::persist::writer::FileJournal;

pub struct Embedded {
    engine: Arc<Engine<Notify>>,
    /// `None` when ephemeral: changes are done once made.
    journal: Option<Arc<FileJournal>>,
}

impl Embedded {
    pub fn new(engine: Arc<Engine<Notify>>, journal: Option<Arc<FileJournal>>) -> Self {
        Embedded { engine, journal }
    }

    /// Waits until everything changed so far is in the log.
    async fn durable(&self) -> BackendResult<()> {
        let Some(journal) = &self.journal else {
            return Ok(());
        };
        journal
            .wait(journal.next_lsn())
            .await
            .map_err(|_| BackendError::Unavailable("the write-ahead log cannot be written".into()))
    }

    /// Runs `change` on the engine, then waits for the log.
    fn changing<'a, T: Send + 'a>(
        &'a self,
        change: impl FnOnce(&Engine<Notify>) -> BackendResult<T> + Send + 'a,
    ) -> Answer<'a, T> {
        Box::pin(async move {
            let answer = change(&self.engine)?;
            self.durable().await?;
            Ok(answer)
        })
    }

    /// Runs `read` on the engine.
    fn reading<'a, T: Send + 'a>(
        &'a self,
        read: impl FnOnce(&Engine<Notify>) -> BackendResult<T> + Send + 'a,
    ) -> Answer<'a, T> {
        Box::pin(async move { read(&self.engine) })
    }
}

impl QueueAdmin for Embedded {
    fn create_queue(&self, request: CreateQueue) -> Answer<'_, Arc<str>> {
        self.changing(move |engine| {
            let entry = engine.create_queue(
                &request.name,
                &request.attributes,
                &request.tags,
                request.now,
            )?;
            Ok(entry.name.clone())
        })
    }

    fn find_queue<'a>(&'a self, name: &'a str) -> Answer<'a, Arc<str>> {
        self.reading(move |engine| Ok(engine.queue(name)?.name.clone()))
    }

    fn list_queues<'a>(&'a self, prefix: &'a str) -> Answer<'a, Vec<Arc<str>>> {
        self.reading(move |engine| Ok(engine.list_queues(prefix)))
    }

    fn delete_queue<'a>(&'a self, name: &'a str, now: Timestamp) -> Answer<'a, ()> {
        self.changing(move |engine| {
            let entry = engine.delete_queue(name, now)?;
            // Parked long polls notice the queue is gone and return empty.
            entry.waiters.notify_waiters();
            Ok(())
        })
    }

    fn describe_queue<'a>(&'a self, name: &'a str, now: Timestamp) -> Answer<'a, QueueView> {
        self.reading(move |engine| {
            let entry = engine.queue(name)?;
            let mut queue = entry.lock();
            queue.tick(now);
            Ok(QueueView {
                arn: queue.arn.clone(),
                config: queue.config().clone(),
                counts: queue.counts(),
            })
        })
    }

    fn set_queue_attributes<'a>(
        &'a self,
        name: &'a str,
        attributes: Vec<(String, String)>,
        now: Timestamp,
    ) -> Answer<'a, ()> {
        self.changing(move |engine| {
            engine.set_attributes(name, &attributes, now)?;
            // A shorter delay or visibility default may make messages receivable sooner.
            engine.queue(name)?.waiters.notify_one();
            Ok(())
        })
    }

    fn purge_queue<'a>(&'a self, name: &'a str, now: Timestamp) -> Answer<'a, ()> {
        self.changing(move |engine| Ok(engine.queue(name)?.lock().purge(now)?))
    }

    fn tag_queue<'a>(&'a self, name: &'a str, tags: BTreeMap<String, String>) -> Answer<'a, ()> {
        self.changing(move |engine| Ok(engine.queue(name)?.lock().tag(tags)?))
    }

    fn untag_queue<'a>(&'a self, name: &'a str, keys: Vec<String>) -> Answer<'a, ()> {
        self.changing(move |engine| {
            engine.queue(name)?.lock().untag(&keys);
            Ok(())
        })
    }

    fn queue_tags<'a>(&'a self, name: &'a str) -> Answer<'a, BTreeMap<String, String>> {
        self.reading(move |engine| Ok(engine.queue(name)?.lock().tags().clone()))
    }

    fn edit_queue_policy<'a>(&'a self, name: &'a str, edit: PolicyEdit) -> Answer<'a, ()> {
        self.changing(move |engine| Ok(engine.queue(name)?.lock().edit_policy(edit)?))
    }

    fn dead_letter_sources<'a>(&'a self, name: &'a str) -> Answer<'a, Vec<Arc<str>>> {
        self.reading(move |engine| Ok(engine.dead_letter_sources(name)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendError;
    use crate::persist::log::SegmentLog;
    use crate::persist::storage::MemStorage;
    use crate::persist::writer::FsyncMode;

    /// The embedded backend over a journal whose storage is `storage`.
    fn backend(storage: MemStorage) -> (Embedded, Arc<FileJournal>) {
        let (log, _) = SegmentLog::open(storage, 1 << 20).unwrap();
        let journal = FileJournal::new();
        journal.start(log, 1, FsyncMode::Always);
        let mut engine = Engine::new("000000000000", "us-east-1");
        engine.set_journal(journal.clone());
        let backend = Embedded::new(Arc::new(engine), Some(journal.clone()));
        (backend, journal)
    }

    fn create(name: &str) -> CreateQueue {
        CreateQueue {
            name: name.into(),
            attributes: Vec::new(),
            tags: vec![("team".into(), "prices".into())],
            now: Timestamp(1),
        }
    }

    #[tokio::test]
    async fn a_change_is_answered_once_the_log_holds_it() {
        let (backend, journal) = backend(MemStorage::default());
        let name = backend.create_queue(create("q")).await.unwrap();
        assert_eq!(&*name, "q");
        // Answered means durable: the record is already synced.
        assert_eq!(journal.durable().lsn, journal.next_lsn());
        assert_eq!(backend.queue_tags("q").await.unwrap()["team"], "prices");
        let error = backend.find_queue("missing").await.unwrap_err();
        assert!(matches!(error, BackendError::Rejected(_)), "{error}");
        journal.close();
    }

    #[tokio::test]
    async fn a_change_the_log_cannot_take_is_answered_unavailable() {
        let (backend, journal) = backend(MemStorage {
            fail_append_after: Some(3),
            fail_truncate: true,
            ..MemStorage::default()
        });
        let error = backend.create_queue(create("q")).await.unwrap_err();
        assert!(matches!(error, BackendError::Unavailable(_)), "{error}");
        journal.close();
    }
}
