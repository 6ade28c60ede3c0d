//! Queue administration on the embedded engine.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Embedded;
use crate::backend::{Answer, CreateQueue, PolicyEdit, QueueAdmin, QueueView};
use crate::engine::Timestamp;

impl QueueAdmin for Embedded {
    fn create_queue(&self, request: CreateQueue) -> Answer<'_, Arc<str>> {
        self.changing(move |engine| {
            let entry = engine.queues.create(
                &request.name,
                request.config,
                &request.attributes,
                &request.tags,
                request.now,
            )?;
            Ok(entry.name.clone())
        })
    }

    fn find_queue<'a>(&'a self, name: &'a str) -> Answer<'a, Arc<str>> {
        self.reading(move |engine| Ok(engine.queues.get(name)?.name.clone()))
    }

    fn list_queues<'a>(&'a self, prefix: &'a str) -> Answer<'a, Vec<Arc<str>>> {
        self.reading(move |engine| Ok(engine.queues.list(prefix)))
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
            let entry = engine.queues.get(name)?;
            let view = {
                let mut queue = entry.lock();
                queue.tick(now);
                QueueView {
                    arn: queue.arn.clone(),
                    config: queue.config().clone(),
                    counts: queue.counts(),
                }
            };
            self.log_expired(&entry);
            Ok(view)
        })
    }

    fn set_queue_attributes<'a>(
        &'a self,
        name: &'a str,
        attributes: Vec<(String, String)>,
        now: Timestamp,
    ) -> Answer<'a, ()> {
        self.changing(move |engine| {
            engine.queues.set_attributes(name, &attributes, now)?;
            // A shorter delay or visibility default may make messages receivable sooner.
            engine.queues.get(name)?.waiters.notify_one();
            Ok(())
        })
    }

    fn purge_queue<'a>(&'a self, name: &'a str, now: Timestamp) -> Answer<'a, ()> {
        self.changing(move |engine| Ok(engine.queues.get(name)?.lock().purge(now)?))
    }

    fn tag_queue<'a>(&'a self, name: &'a str, tags: BTreeMap<String, String>) -> Answer<'a, ()> {
        self.changing(move |engine| Ok(engine.queues.get(name)?.lock().tag(tags)?))
    }

    fn untag_queue<'a>(&'a self, name: &'a str, keys: Vec<String>) -> Answer<'a, ()> {
        self.changing(move |engine| {
            engine.queues.get(name)?.lock().untag(&keys);
            Ok(())
        })
    }

    fn queue_tags<'a>(&'a self, name: &'a str) -> Answer<'a, BTreeMap<String, String>> {
        self.reading(move |engine| Ok(engine.queues.get(name)?.lock().tags().clone()))
    }

    fn edit_queue_policy<'a>(&'a self, name: &'a str, edit: PolicyEdit) -> Answer<'a, ()> {
        self.changing(move |engine| Ok(engine.queues.get(name)?.lock().edit_policy(edit)?))
    }

    fn dead_letter_sources<'a>(&'a self, name: &'a str) -> Answer<'a, Vec<Arc<str>>> {
        self.reading(move |engine| Ok(engine.queues.dead_letter_sources(name)?))
    }
}
