//! The rules the storage seam keeps, written against its traits rather than one backend's
//! types (run on the embedded engine in `embedded/tests.rs`, and over shards in
//! `sharded/tests.rs`, where a copy or a dead letter reaches another shard's queue a moment
//! later: the helpers that look at a queue wait for it).

mod inspection;
mod messages;
mod move_tasks;
mod queues;
mod topics;

pub use inspection::{captured_messages, inspection};
pub use messages::messages;
pub use move_tasks::move_tasks;
pub use queues::queue_administration;
pub use topics::topics;

use std::collections::BTreeMap;
use std::sync::Arc;

use md5::Digest;

use super::{BackendError, CreateQueue, Messages, QueueAdmin, Work};
use crate::clock::{Clock, ManualClock};
use crate::engine::body::Body;
use crate::engine::queue::{ReceiveRequest, Received, SendRequest};
use crate::engine::{EngineError, QueueConfig, Timestamp};

const ARN: &str = "arn:aws:sqs:us-east-1:000000000000:";

fn attrs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(super) fn create(name: &str, attributes: &[(&str, &str)], now: Timestamp) -> CreateQueue {
    let attributes = attrs(attributes);
    CreateQueue {
        name: name.into(),
        config: QueueConfig::for_create(name, &attributes, now).expect("valid attributes"),
        attributes,
        tags: vec![("team".into(), "prices".into())],
        now,
    }
}

fn rejected(result: Result<impl std::fmt::Debug, BackendError>) -> EngineError {
    match result {
        Err(BackendError::Rejected(error)) => error,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn names(list: &[std::sync::Arc<str>]) -> Vec<&str> {
    list.iter().map(|n| &**n).collect()
}

fn message(body: &str, group: Option<&str>, dedup: Option<&str>) -> SendRequest {
    SendRequest {
        body: Body::new(body),
        group_id: group.map(Arc::from),
        dedup_id: dedup.map(Arc::from),
        sender_id: "AIDATEST".into(),
        ..SendRequest::default()
    }
}

fn bodies(received: &[Received]) -> Vec<&str> {
    received.iter().map(|r| &*r.message.body).collect()
}

/// What `queue` gives now, once what crosses shards has crossed.
async fn receive<B: Messages + Work + ?Sized>(backend: &B, queue: &str, max: i64) -> Vec<Received> {
    backend.carried().await.unwrap();
    let request = ReceiveRequest {
        max_messages: Some(max),
        ..ReceiveRequest::default()
    };
    backend.receive(queue, request, Some(0)).await.unwrap()
}

/// The queue's (visible, in flight, delayed), once what crosses shards has crossed.
async fn counts<B: QueueAdmin + Work + ?Sized>(
    backend: &B,
    queue: &str,
    clock: &ManualClock,
) -> (usize, usize, usize) {
    backend.carried().await.unwrap();
    let c = backend
        .describe_queue(queue, clock.now())
        .await
        .unwrap()
        .counts;
    (c.visible, c.in_flight, c.delayed)
}
