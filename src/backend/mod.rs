//! The storage seam: what the service asks of storage, one async method per operation, typed in
//! and out. The embedded engine with its write-ahead log (`embedded.rs`) is the first
//! implementation; a PostgreSQL backend serving several nodes is to be the second (issue 30).
//!
//! Above the seam stay the rules that do not depend on storage (request shapes, names and
//! sizes the protocol checks, URLs, pagination, policy documents); below it, everything that
//! reads or changes stored state. A method answers once its change is durable, so the service
//! never waits on a particular log.
//!
//! So far queue administration (`QueueAdmin`) and messages (`Messages`) go through here;
//! topics, subscriptions and move tasks still call the engine directly (issue 29 is not done).

pub mod embedded;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use thiserror::Error;

use crate::engine::queue::{Counts, ReceiveRequest, Received, SendReceipt, SendRequest};
use crate::engine::{EngineError, EngineResult, QueueConfig, Timestamp};

#[derive(Debug, Error)]
pub enum BackendError {
    /// The request broke a rule of the stored state (no such queue, tag limits, ...).
    #[error(transparent)]
    Rejected(#[from] EngineError),
    /// Storage could not make the change durable; nothing unacknowledged is reported done.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

pub type BackendResult<T> = Result<T, BackendError>;

/// A backend's answer, to be awaited.
pub type Answer<'a, T> = Pin<Box<dyn Future<Output = BackendResult<T>> + Send + 'a>>;

/// What CreateQueue asks for: attributes and tags as given (the backend checks them against an
/// existing queue of the name, which is no error if they agree).
pub struct CreateQueue {
    pub name: String,
    pub attributes: Vec<(String, String)>,
    pub tags: Vec<(String, String)>,
    pub now: Timestamp,
}

/// A queue as GetQueueAttributes reports it.
pub struct QueueView {
    pub arn: Arc<str>,
    pub config: QueueConfig,
    pub counts: Counts,
}

/// Turns a queue's policy (and its ARN) into its new policy: AddPermission, RemovePermission.
pub type PolicyEdit = Box<dyn FnOnce(Option<&str>, &str) -> EngineResult<Option<String>> + Send>;

/// Creating, finding, describing and changing queues.
pub trait QueueAdmin: Send + Sync {
    /// The queue's name, created if it does not exist.
    fn create_queue(&self, request: CreateQueue) -> Answer<'_, Arc<str>>;
    /// The queue's name if it exists (GetQueueUrl).
    fn find_queue<'a>(&'a self, name: &'a str) -> Answer<'a, Arc<str>>;
    /// Names starting with `prefix`, sorted.
    fn list_queues<'a>(&'a self, prefix: &'a str) -> Answer<'a, Vec<Arc<str>>>;
    fn delete_queue<'a>(&'a self, name: &'a str, now: Timestamp) -> Answer<'a, ()>;
    fn describe_queue<'a>(&'a self, name: &'a str, now: Timestamp) -> Answer<'a, QueueView>;
    fn set_queue_attributes<'a>(
        &'a self,
        name: &'a str,
        attributes: Vec<(String, String)>,
        now: Timestamp,
    ) -> Answer<'a, ()>;
    fn purge_queue<'a>(&'a self, name: &'a str, now: Timestamp) -> Answer<'a, ()>;
    fn tag_queue<'a>(&'a self, name: &'a str, tags: BTreeMap<String, String>) -> Answer<'a, ()>;
    fn untag_queue<'a>(&'a self, name: &'a str, keys: Vec<String>) -> Answer<'a, ()>;
    fn queue_tags<'a>(&'a self, name: &'a str) -> Answer<'a, BTreeMap<String, String>>;
    fn edit_queue_policy<'a>(&'a self, name: &'a str, edit: PolicyEdit) -> Answer<'a, ()>;
    /// Queues whose redrive policy names this one as their dead-letter queue, sorted.
    fn dead_letter_sources<'a>(&'a self, name: &'a str) -> Answer<'a, Vec<Arc<str>>>;
}

/// Sending, receiving, deleting and changing the visibility of messages. Each reads the time
/// once it holds the queue, so a queue's timestamps never run backwards.
pub trait Messages: Send + Sync {
    fn send<'a>(&'a self, queue: &'a str, request: SendRequest) -> Answer<'a, SendReceipt>;
    /// SendMessageBatch: the FIFO rules every entry must meet fail the whole batch; anything
    /// else fails only its entry.
    fn send_batch<'a>(
        &'a self,
        queue: &'a str,
        requests: Vec<SendRequest>,
    ) -> Answer<'a, Vec<EngineResult<SendReceipt>>>;
    /// Up to the request's maximum of messages, waiting up to `wait_seconds` (the queue's
    /// ReceiveMessageWaitTimeSeconds when `None`) for the first to become receivable.
    fn receive<'a>(
        &'a self,
        queue: &'a str,
        request: ReceiveRequest,
        wait_seconds: Option<u64>,
    ) -> Answer<'a, Vec<Received>>;
    /// DeleteMessage for each handle, each answered on its own.
    fn delete<'a>(
        &'a self,
        queue: &'a str,
        handles: Vec<&'a str>,
    ) -> Answer<'a, Vec<EngineResult<()>>>;
    /// ChangeMessageVisibility for each (handle, timeout in seconds), each answered on its own.
    fn change_visibility<'a>(
        &'a self,
        queue: &'a str,
        changes: Vec<(&'a str, i64)>,
    ) -> Answer<'a, Vec<EngineResult<()>>>;
}

/// Everything the service asks of storage.
pub trait Backend: QueueAdmin + Messages {}

impl<T: QueueAdmin + Messages> Backend for T {}
