//! The storage seam: what the service asks of storage, one async method per operation, typed in
//! and out. Its one implementation is the engine with its log (`embedded/`), kept in a data
//! directory or in PostgreSQL alike: the log store lies below this seam, in `persist`.
//!
//! Above the seam stay the rules that do not depend on storage (request shapes, names and
//! sizes the protocol checks, URLs, pagination, policy documents); below it, everything that
//! reads or changes stored state. A method answers once its change is durable, so the service
//! never waits on a particular log.
//!
//! A queue is named here by its key (`Namespaces::key`: its name within its region and
//! account, as `service::access` makes it from a URL or ARN), whatever the parameter is called
//! (`key`, or `queue` where messages go to it).
//!
//! Over several shards of the key space, `sharded/` routes each request to its shard's
//! embedded backend.
//!
//! Seven families of operations: queue administration (`QueueAdmin`), messages (`Messages`),
//! topics with their subscriptions (`Topics`), message move tasks (`MoveTasks`), the webhook
//! outbox the delivery worker drains (`Deliveries`), looking inside or starting over
//! (`Inspection`), and mobile push and SMS management (`PushAndSms`). A backend also runs its own background
//! work for them (long polls, pacing move tasks).

pub mod captured;
#[cfg(test)]
mod conformance;
pub mod embedded;
pub mod led_elsewhere;
mod pacing;
pub mod sharded;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use thiserror::Error;

use crate::engine::mobile::SandboxStatus;
use crate::engine::move_task::MoveTask;
use crate::engine::namespace::Namespace;
use crate::engine::queue::inspect::{GroupView, Peek, QueueOverview, StateFilter};
use crate::engine::queue::{Counts, ReceiveRequest, Received, SendReceipt, SendRequest};
use crate::engine::topic::captured::CapturedMessage;
use crate::engine::topic::recent::{DeliveryNote, Fate};
use crate::engine::topic::subscription::Subscribed;
use crate::engine::topic::{Publication, PublishRequest, Subscription};
pub use crate::engine::topics::TopicActivity;
use crate::engine::webhook::outbox::{Attempt, LaneStats, Outcome};
use crate::engine::{EngineError, EngineResult, QueueConfig, Timestamp};
use crate::persist::format::between_nodes::PairPull;

#[derive(Debug, Error)]
pub enum BackendError {
    /// The request broke a rule of the stored state (no such queue, tag limits, ...).
    #[error(transparent)]
    Rejected(#[from] EngineError),
    /// Storage could not make the change durable; nothing unacknowledged is reported done.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The change was made, but storage did not confirm it durable: it may yet be kept (a
    /// write tried again, a commit whose answer was lost) or not.
    #[error("storage did not confirm the change: {0}")]
    Unconfirmed(String),
    /// The queue or topic is in a shard another node leads: nothing was done here
    /// (`led_elsewhere` notes which shard for the HTTP layer, which passes the request there).
    #[error("shard {0} is led by another node")]
    LedElsewhere(u32),
    /// The request needs a shard another node leads on behalf of another shard (a read this
    /// node cannot ask of others, or a request another node sent for a shard not led here).
    #[error("shard {0} is led by another node, which this request does not reach")]
    Across(u32),
}

pub type BackendResult<T> = Result<T, BackendError>;

/// Logs a message moved to a dead-letter queue, once, after the move is made.
pub(crate) fn log_dead_lettered(
    queue: &str,
    dead_letter_queue: &str,
    message_id: crate::engine::message::MessageId,
    receive_count: u32,
) {
    tracing::info!(
        queue,
        dead_letter_queue,
        message_id = message_id.text().as_str(),
        receive_count,
        "dead-lettered: received more often than the redrive policy's maxReceiveCount"
    );
}

/// Logs messages retention dropped, each once.
pub(crate) fn log_expired(queue: &str, (ids, more): (Vec<crate::engine::message::MessageId>, u64)) {
    for id in ids {
        tracing::info!(
            queue,
            message_id = id.text().as_str(),
            "expired: past the queue's MessageRetentionPeriod"
        );
    }
    if more > 0 {
        tracing::info!(
            queue,
            count = more,
            "expired: past the queue's MessageRetentionPeriod (not listed one by one)"
        );
    }
}

/// A backend's answer, to be awaited.
pub type Answer<'a, T> = Pin<Box<dyn Future<Output = BackendResult<T>> + Send + 'a>>;

/// What CreateQueue asks for: the configuration its name and attributes make (validated above
/// the seam), the attributes as given (the backend compares them with an existing queue of the
/// name, which is no error if they agree) and the tags.
pub struct CreateQueue {
    /// The queue's key.
    pub name: String,
    pub config: QueueConfig,
    pub attributes: Vec<(String, String)>,
    pub tags: Vec<(String, String)>,
    pub now: Timestamp,
}

/// A queue as GetQueueAttributes reports it.
#[derive(Debug)]
pub struct QueueView {
    pub arn: Arc<str>,
    pub config: QueueConfig,
    pub counts: Counts,
}

/// Turns a queue's policy (and its ARN) into its new policy: AddPermission, RemovePermission.
pub type PolicyEdit = Box<dyn FnOnce(Option<&str>, &str) -> EngineResult<Option<String>> + Send>;

/// Creating, finding, describing and changing queues.
pub trait QueueAdmin: Send + Sync {
    /// The queue's key (its name within its namespace), created if it does not exist.
    fn create_queue(&self, request: CreateQueue) -> Answer<'_, Arc<str>>;
    /// The queue's key if it exists (GetQueueUrl).
    fn find_queue<'a>(&'a self, key: &'a str) -> Answer<'a, Arc<str>>;
    /// Keys starting with `prefix`, sorted.
    fn list_queues<'a>(&'a self, prefix: &'a str) -> Answer<'a, Vec<Arc<str>>>;
    fn delete_queue<'a>(&'a self, key: &'a str, now: Timestamp) -> Answer<'a, ()>;
    fn describe_queue<'a>(&'a self, key: &'a str, now: Timestamp) -> Answer<'a, QueueView>;
    fn set_queue_attributes<'a>(
        &'a self,
        key: &'a str,
        attributes: Vec<(String, String)>,
        now: Timestamp,
    ) -> Answer<'a, ()>;
    fn purge_queue<'a>(&'a self, key: &'a str, now: Timestamp) -> Answer<'a, ()>;
    fn tag_queue<'a>(&'a self, key: &'a str, tags: BTreeMap<String, String>) -> Answer<'a, ()>;
    fn untag_queue<'a>(&'a self, key: &'a str, keys: Vec<String>) -> Answer<'a, ()>;
    fn queue_tags<'a>(&'a self, key: &'a str) -> Answer<'a, BTreeMap<String, String>>;
    fn edit_queue_policy<'a>(&'a self, key: &'a str, edit: PolicyEdit) -> Answer<'a, ()>;
    /// Queues whose redrive policy names this one as their dead-letter queue, sorted.
    fn dead_letter_sources<'a>(&'a self, key: &'a str) -> Answer<'a, Vec<Arc<str>>>;
    /// The queue as another queue's or topic's rules read it, wherever its shard is led
    /// (`None`: it does not exist): read on their behalf, so never a request passed on whole.
    fn queue_target<'a>(&'a self, key: &'a str, now: Timestamp) -> Answer<'a, Option<QueueTarget>> {
        Box::pin(async move {
            match self.describe_queue(key, now).await {
                Ok(view) => Ok(Some(QueueTarget::of(&view.config))),
                Err(BackendError::Rejected(_)) => Ok(None),
                Err(error) => Err(error),
            }
        })
    }
}

/// Sending, receiving, deleting and changing the visibility of messages. Each reads the time
/// once it holds the queue, so a queue's timestamps never run backwards.
pub trait Messages: Send + Sync {
    /// Refuses at once, as the request's first use of its shard would, when another node leads
    /// queue `queue`'s shard: a send to be passed on spends nothing here first (no digest or
    /// copy of its bodies and attributes). One node leads every queue by default.
    fn check_led_here(&self, _queue: &str) -> BackendResult<()> {
        Ok(())
    }
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

/// What CreateTopic asks for (an existing topic of the name is no error if they agree).
pub struct CreateTopic {
    pub name: String,
    pub attributes: Vec<(String, String)>,
    pub tags: Vec<(String, String)>,
}

/// What Subscribe asks for. `base_url` is where clients reach this server (the UnsubscribeURL
/// of an HTTP/S subscription's messages points there).
pub struct Subscribe<'a> {
    pub topic_arn: &'a str,
    pub protocol: &'a str,
    pub endpoint: Option<&'a str>,
    pub attributes: Vec<(String, String)>,
    pub base_url: &'a str,
    /// The subscriber's principal ARN (`SubscriptionPrincipal`).
    pub principal: &'a str,
}

/// What ConfirmSubscription (or a GET of a SubscribeURL) asks for.
pub struct Confirm<'a> {
    pub topic_arn: &'a str,
    pub token: &'a str,
    pub authenticate_on_unsubscribe: bool,
    /// The call was signed.
    pub authenticated: bool,
}

/// Turns a topic's policy (and its ARN) into its new policy: AddPermission, RemovePermission.
pub type TopicPolicyEdit = Box<dyn FnOnce(&str, &str) -> EngineResult<String> + Send>;

/// Topics, subscriptions and publishing. Copies a publish fans into queues and webhook
/// deliveries are stored with it, all or none.
pub trait Topics: Send + Sync {
    /// As `Messages::check_led_here`, for the topic an ARN names: a publish to be passed on
    /// reads nothing of its message here first.
    fn check_topic_led_here(&self, _arn: &str) -> BackendResult<()> {
        Ok(())
    }
    /// The topic's ARN, created if it does not exist.
    fn create_topic(&self, request: CreateTopic) -> Answer<'_, Arc<str>>;
    /// Idempotent; the topic's subscriptions go with it.
    fn delete_topic<'a>(&'a self, arn: &'a str) -> Answer<'a, ()>;
    /// Every topic's ARN, sorted by name.
    fn list_topics(&self) -> Answer<'_, Vec<Arc<str>>>;
    fn topic_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Vec<(String, String)>>;
    fn set_topic_attribute<'a>(
        &'a self,
        arn: &'a str,
        name: &'a str,
        value: &'a str,
    ) -> Answer<'a, ()>;
    fn edit_topic_policy<'a>(&'a self, arn: &'a str, edit: TopicPolicyEdit) -> Answer<'a, ()>;
    /// Subscribes (or finds the subscription of the same topic, protocol and endpoint), then
    /// replays the archive into the subscription if its ReplayPolicy asks.
    fn subscribe<'a>(&'a self, request: Subscribe<'a>) -> Answer<'a, Subscribed>;
    /// The confirmed subscription's ARN.
    fn confirm_subscription<'a>(&'a self, request: Confirm<'a>) -> Answer<'a, Arc<str>>;
    /// Idempotent for an unknown subscription. `authenticated`: the call was signed.
    fn unsubscribe<'a>(
        &'a self,
        arn: &'a str,
        authenticated: bool,
        base_url: &'a str,
    ) -> Answer<'a, ()>;
    /// (topic ARN, subscription) of one topic or of all, topics by name, then subscription order.
    #[allow(clippy::type_complexity)]
    fn list_subscriptions<'a>(
        &'a self,
        topic_arn: Option<&'a str>,
    ) -> Answer<'a, Vec<(Arc<str>, Arc<Subscription>)>>;
    fn subscription_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Vec<(String, String)>>;
    /// Sets one attribute, then replays the archive if a new ReplayPolicy asks.
    fn set_subscription_attribute<'a>(
        &'a self,
        arn: &'a str,
        name: &'a str,
        value: &'a str,
        base_url: &'a str,
    ) -> Answer<'a, ()>;
    fn publish<'a>(
        &'a self,
        topic_arn: &'a str,
        request: PublishRequest,
        base_url: &'a str,
    ) -> Answer<'a, Publication>;
    /// PublishBatch: the rules every entry must meet fail the whole batch before anything is
    /// published; anything else fails only its entry.
    fn publish_batch<'a>(
        &'a self,
        topic_arn: &'a str,
        requests: Vec<PublishRequest>,
        base_url: &'a str,
    ) -> Answer<'a, Vec<EngineResult<Publication>>>;
    /// Tags of a topic (an unknown one is ResourceNotFound, as the tagging APIs answer).
    fn tag_topic<'a>(&'a self, arn: &'a str, tags: Vec<(String, String)>) -> Answer<'a, ()>;
    fn untag_topic<'a>(&'a self, arn: &'a str, keys: Vec<String>) -> Answer<'a, ()>;
    fn topic_tags<'a>(&'a self, arn: &'a str) -> Answer<'a, BTreeMap<String, String>>;
    /// PutDataProtectionPolicy (`Topic::set_data_protection_policy`).
    fn put_data_protection_policy<'a>(&'a self, arn: &'a str, policy: String) -> Answer<'a, ()>;
    /// GetDataProtectionPolicy: empty if the topic has none.
    fn data_protection_policy<'a>(&'a self, arn: &'a str) -> Answer<'a, String>;
}

/// What StartMessageMoveTask asks for.
pub struct StartMove<'a> {
    pub source_arn: &'a str,
    /// `None`: back to each message's source queue.
    pub destination_arn: Option<&'a str>,
    /// Messages per second; `None`: as fast as the backend's default allows.
    pub rate: Option<i64>,
    /// What other shards hold that the start's checks need (`Default` from above the seam: a
    /// backend over several shards fills it in).
    pub elsewhere: crate::engine::redrive::Elsewhere,
}

/// Moving messages out of a dead-letter queue. The backend runs each task it starts until it
/// completes, fails or is cancelled, resuming those that were running when it last stopped.
pub trait MoveTasks: Send + Sync {
    fn start_move_task<'a>(&'a self, request: StartMove<'a>) -> Answer<'a, MoveTask>;
    /// The source's tasks, newest first.
    fn list_move_tasks<'a>(&'a self, source_arn: &'a str) -> Answer<'a, Vec<MoveTask>>;
    /// Cancels the running task the handle names; answers how many it had moved.
    fn cancel_move_task<'a>(&'a self, handle: &'a str) -> Answer<'a, u64>;
}

/// What a backend runs beside requests: the move tasks that were running when the server
/// stopped, and, over several shards, the carrying of parcels between them.
pub trait Work: Send + Sync {
    /// Starts it (move tasks resume where they stood).
    fn start_work(&self);
    /// Stops it between two steps; running move tasks stay running in storage and resume at
    /// the next start.
    fn stop_work(&self) -> Answer<'_, ()>;
    /// Stops leading `shards` here, to hand them to other nodes: from now on their requests
    /// are refused as led elsewhere (`led_elsewhere`), what crosses shards is carried from and
    /// into their next leaders, their changes under way are let finish and none is let in
    /// after (a receive waiting ends empty), and their work stops; completes once every change
    /// their logs were given is durable (an error past a few seconds), so their leases may be
    /// given up. Refused, with nothing done, if a shard is not led here, and by a backend of
    /// one shard.
    fn hand_off<'a>(&'a self, shards: &'a [u32]) -> Answer<'a, ()> {
        let first = shards.first().copied().unwrap_or(0);
        Box::pin(std::future::ready(Err(BackendError::Across(first))))
    }
    /// Leads `engine`'s shard here from now on, its changes kept by `log_writer` while `tenure`
    /// holds (the shard's lease taken, the engine recovered from its log): its requests are
    /// answered here, what crosses shards is carried into and from it, and its work starts.
    /// Refused, with nothing done, while this node leads the shard, and by a backend of one
    /// shard.
    fn take_shard(
        &self,
        engine: Arc<crate::engine::Engine<tokio::sync::Notify>>,
        log_writer: Arc<crate::persist::writer::LogWriter>,
        tenure: Arc<crate::persist::tenure::Tenure>,
    ) -> Answer<'_, ()> {
        let _ = (log_writer, tenure);
        let n = engine.relay.shard().number;
        let refused = format!("shard {n} not taken: one shard is all this backend serves");
        Box::pin(std::future::ready(Err(BackendError::Unavailable(refused))))
    }
    /// Completes once nothing made so far waits to cross shards (at once with one shard): what
    /// a test waits for before it looks for a copy in another shard's queue.
    fn carried(&self) -> Answer<'_, ()>;
    /// For the leader of shard `to`, another node of an earlier build, which pulls each pair
    /// of shards on its own: up to `max` parcels shard `from` (led here) holds for it after
    /// number `after`, once this node's log holds them, waiting up to `wait` for one, encoded
    /// as the log encodes them; those up to `after` (which `to` has applied) are forgotten
    /// here.
    fn parcels_for_node(
        &self,
        from: u32,
        to: u32,
        (after, max): (u64, usize),
        wait: std::time::Duration,
    ) -> Answer<'_, Vec<u8>> {
        let _ = (to, after, max, wait);
        Box::pin(std::future::ready(Err(BackendError::Across(from))))
    }
    /// For another node: for each of `pairs` whose source shard is led here and destination
    /// is not, the parcels after the one the destination applied (those up to it forgotten
    /// here), up to `max` in all, at once when any pair has some, else once one is made or
    /// `wait` passes; encoded as `persist::format::between_nodes::encode_pulled` encodes them.
    fn parcels_for_pairs(
        &self,
        pairs: Vec<PairPull>,
        max: usize,
        wait: std::time::Duration,
    ) -> Answer<'_, Vec<u8>> {
        let _ = (max, wait);
        let from = pairs.first().map_or(0, |pair| pair.from);
        Box::pin(std::future::ready(Err(BackendError::Across(from))))
    }
    /// For another node: `read` of shard `shard`, led here.
    fn read_for_node(&self, shard: u32, read: ShardRead) -> Answer<'_, Vec<Arc<str>>> {
        let _ = read;
        Box::pin(std::future::ready(Err(BackendError::Across(shard))))
    }
    /// For another node: resets shard `shard`, led here, as part of a reset of every shard.
    fn reset_for_node(&self, shard: u32, scope: ResetScope) -> Answer<'_, ()> {
        let _ = scope;
        Box::pin(std::future::ready(Err(BackendError::Across(shard))))
    }
    /// For another node: notes of what became of copies from the topics of shard `shard`
    /// (led here), encoded as `OtherNodes::settled` sends them.
    fn settled_for_node(&self, shard: u32, notes: &[u8]) -> Answer<'_, ()> {
        let _ = notes;
        Box::pin(std::future::ready(Err(BackendError::Across(shard))))
    }
    /// For another node: the queue `key` of shard `shard` (led here) as another shard's rules
    /// read it.
    fn queue_target_for_node<'a>(
        &'a self,
        shard: u32,
        key: &'a str,
    ) -> Answer<'a, Option<QueueTarget>> {
        let _ = key;
        Box::pin(std::future::ready(Err(BackendError::Across(shard))))
    }
}

/// What a shard is asked on another shard's behalf, for an answer gathered over every shard:
/// the names it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardRead {
    /// Its queues' keys that begin with this prefix.
    Queues(String),
    /// Its topics' ARNs.
    Topics,
    /// Its queues whose redrive policy names this queue ARN as their dead-letter queue.
    NamingAsDeadLetterQueue(String),
    /// Its subscriptions, each with its topic's ARN, as one node hands them to another
    /// (`persist::format::between_nodes::encode_listed_subscription`).
    Subscriptions,
    /// The PEM certificate of its SNS signer, if that signer's certificate file is this one.
    SigningCertificate(String),
    /// Its queues at a glance (`persist::format::between_nodes::encode_listed_queue`).
    QueueOverviews,
    /// Its subscriptions with their last deliveries
    /// (`persist::format::between_nodes::encode_listed_activity`).
    SubscriptionActivity,
}

/// What the rules of a queue or topic in another shard read of a queue: a queue naming it as
/// its dead-letter queue or a move task's destination, its type and the sources its redrive
/// allow policy admits (the policy as set, none when unset); a topic subscribing it, whether
/// its access policy lets SNS deliver.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueTarget {
    pub fifo: bool,
    pub redrive_allow_policy: Option<String>,
    /// `None` from a node of an earlier build, which does not say.
    #[serde(default)]
    pub access: Option<QueueAccess>,
}

/// A queue's access policy (`Policy`), `None` when unset.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueAccess {
    pub policy: Option<String>,
}

impl QueueTarget {
    pub fn of(config: &crate::engine::QueueConfig) -> QueueTarget {
        QueueTarget {
            fifo: config.fifo,
            redrive_allow_policy: config.redrive_allow_policy.as_ref().map(|p| p.1.clone()),
            access: Some(QueueAccess {
                policy: config.policy.clone(),
            }),
        }
    }

    /// A configuration the rules read as they read the queue's own.
    pub fn config(&self, now: Timestamp) -> crate::engine::QueueConfig {
        let mut config = crate::engine::QueueConfig::new(self.fifo, now);
        if let Some(policy) = &self.redrive_allow_policy {
            // Set on the queue it came from, so valid; one that is not reads as unset.
            let _ = config.apply(&[("RedriveAllowPolicy".into(), policy.clone())]);
        }
        config
    }
}

/// The nodes leading the shards this node does not, asked over the network
/// (`http::between_nodes`): for the parcels their shards hold for this node's, and for what
/// their shards hold on another shard's behalf.
pub trait OtherNodes: Send + Sync {
    /// `read` of shard `shard`, answered by the node leading it.
    fn read<'a>(&'a self, shard: u32, read: &'a ShardRead) -> Answer<'a, Vec<String>>;
    /// The queue `key` of shard `shard` as another shard's rules read it (`None` when it does
    /// not exist), answered by the node leading it.
    fn queue_target<'a>(&'a self, shard: u32, key: &'a str) -> Answer<'a, Option<QueueTarget>>;
    /// Each shard's leader's URL as last read, shard n's at index n (empty while not known).
    fn leaders(&self) -> Vec<String>;
    /// Asks the node at `leader` for the parcels of each of `pairs` (each source shard led
    /// there, each destination here; those up to the one it names as applied may be
    /// forgotten there), up to `max` in all, waiting a while for one, as
    /// `Work::parcels_for_pairs` encoded them there.
    fn pull<'a>(
        &'a self,
        leader: &'a str,
        pairs: &'a [PairPull],
        max: usize,
    ) -> Answer<'a, bytes::Bytes>;
    /// Resets shard `shard` as `Inspection::reset` resets every shard, at the node leading it.
    fn reset(&self, shard: u32, scope: ResetScope) -> Answer<'_, ()>;
    /// Tells the node leading shard `shard` what became of copies from its topics, as
    /// `persist::format::between_nodes::encode_settled` encoded the notes.
    fn settled(&self, shard: u32, notes: Vec<u8>) -> Answer<'_, ()>;
}

/// What became of one webhook attempt, for the delivery worker's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryResult {
    Delivered,
    /// To be tried again at this time.
    Retrying(Timestamp),
    /// Out of retries or refused for good: the copy went to the subscription's dead-letter queue.
    DeadLettered,
    /// Out of retries or refused for good: the copy went to the shard of the subscription's
    /// dead-letter queue, which takes it or drops it (and counts which, `Webhooks::settle`).
    ToDeadLetterShard,
    /// Out of retries and no dead-letter queue took it; counted in the subscription's `dropped`.
    Dropped,
    /// A confirmation message that could not be delivered (never dead-lettered, as on AWS).
    ConfirmationFailed,
    /// The subscription went away while the attempt ran.
    Gone,
}

/// The webhook outbox: what the delivery worker takes, sends and reports back. Order, retries
/// and dead-lettering are decided here, so every node of a backend agrees on them.
pub trait Deliveries: Send + Sync {
    /// Drops subscriptions whose confirmation expired by `now`, then takes up to `limit`
    /// deliveries due by `now`, marked in flight (no other worker gets them meanwhile).
    /// Only deliveries whose records are durable are taken, and none while this node may not
    /// act as the leader.
    fn take_deliveries(&self, now: Timestamp, limit: usize) -> Answer<'_, Vec<Attempt>>;
    /// Whether an attempt taken may still be made: this node may still act as the leader.
    fn may_deliver(&self) -> bool;
    /// Hands back an attempt taken but not made, due again at `now`.
    fn put_back_delivery(&self, attempt: &Attempt, now: Timestamp);
    /// Records an attempt's outcome: done, retry later, dead-letter or drop.
    fn finish_delivery<'a>(
        &'a self,
        attempt: &'a Attempt,
        outcome: Outcome,
        now: Timestamp,
    ) -> Answer<'a, DeliveryResult>;
    /// Keeps what went wrong with an attempt as its subscription's last error (in memory).
    fn note_delivery_error(&self, attempt: &Attempt, error: &str, now: Timestamp);
    /// When the next delivery or retry falls due, if any is waiting.
    fn next_delivery_due(&self) -> Answer<'_, Option<Timestamp>>;
    /// Counters of every HTTP/S subscription that has had traffic.
    fn delivery_stats(&self) -> Answer<'_, Vec<(Arc<str>, LaneStats)>>;
    /// The PEM certificate SNS messages point at, if `file` is its name.
    fn signing_certificate<'a>(&'a self, file: &'a str) -> Answer<'a, Option<String>>;
}

/// What `POST /_orderly/reset` drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetScope {
    /// Every message and deduplication history; queues, topics and subscriptions stay.
    Messages,
    /// Every queue and topic too.
    Everything,
}

/// A subscription with what became of the last messages published to it.
pub struct SubscriptionActivity {
    pub topic_arn: Arc<str>,
    pub subscription: Arc<Subscription>,
    /// Fan-out's notes and, for HTTP/S, the attempts', by time (not kept across restarts).
    pub recent: Vec<DeliveryNote>,
    /// Fan-out's notes ever made, by fate, since the server started.
    pub counts: Vec<(Fate, u64)>,
    /// HTTP/S: what went wrong with the last failed attempt, and when.
    pub last_error: Option<(Timestamp, Arc<str>)>,
}

/// Looking inside without changing anything (no receive count, visibility or group lock moves),
/// and starting over between tests: the inspection API, LocalStack's developer endpoints and
/// the console all read through here.
pub trait Inspection: Send + Sync {
    /// Every queue at a glance, sorted by name.
    fn queue_overviews(&self) -> Answer<'_, Vec<QueueOverview>>;
    /// Up to `limit` of the queue's messages in the states `filter` admits, oldest enqueued
    /// first, at most `PEEK_BYTES` of them (`Peek::truncated` says when that left some out).
    fn peek_messages<'a>(
        &'a self,
        queue: &'a str,
        filter: StateFilter,
        limit: usize,
    ) -> Answer<'a, Peek>;
    /// Up to `limit` of a FIFO queue's groups, oldest head first (none for a standard queue).
    fn queue_groups<'a>(&'a self, queue: &'a str, limit: usize) -> Answer<'a, Vec<GroupView>>;
    /// Every subscription, topics by name, with its last deliveries.
    fn subscription_activity(&self) -> Answer<'_, Vec<SubscriptionActivity>>;
    /// A live token that confirms the subscription with this ARN, if one was issued (the
    /// newest), for test helpers that confirm without reading the confirmation message.
    fn confirmation_token<'a>(&'a self, subscription_arn: &'a str) -> Answer<'a, Option<String>>;
    /// Every topic, by name, with its publish counts.
    fn topic_activity(&self) -> Answer<'_, Vec<TopicActivity>>;
    /// Durable once answered.
    fn reset(&self, scope: ResetScope) -> Answer<'_, ()>;
    /// What the captured protocols' endpoints would have received (`captured`), oldest first.
    fn captured_messages(&self) -> Answer<'_, captured::Listed>;
    /// Captures what a Publish to a phone number or a platform endpoint would have sent.
    fn capture(&self, messages: Vec<CapturedMessage>) -> Answer<'_, ()>;
    /// Forgets captured messages by the ids `captured_messages` gave them.
    fn forget_captured(&self, ids: Vec<u64>) -> Answer<'_, ()>;
    /// Parcels waiting to cross from one shard to another, by (from, to); none with one shard.
    fn relay_waiting(&self) -> Answer<'_, Vec<RelayWaiting>>;
    /// What became of copies taken here from another node's shards, not yet told to the node
    /// leading their topic's shard: how many.
    fn fates_untold(&self) -> usize {
        0
    }
    /// The queues, topics and subscriptions of the shards this node leads, for the figures a
    /// node gives of its own (`/metrics`, summed over nodes): every one but on a node that
    /// leads part of a database's shards.
    fn led_here(&self) -> Answer<'_, LedHere> {
        Box::pin(async move {
            Ok(LedHere {
                queues: self.queue_overviews().await?,
                topics: self.topic_activity().await?,
                subscriptions: self.subscription_activity().await?,
            })
        })
    }
}

/// What `Inspection::led_here` answers, each in its listing's order.
pub struct LedHere {
    pub queues: Vec<QueueOverview>,
    pub topics: Vec<TopicActivity>,
    pub subscriptions: Vec<SubscriptionActivity>,
}

/// Parcels made by shard `from` that shard `to` has not applied yet (or not said so).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RelayWaiting {
    pub from: u32,
    pub to: u32,
    pub parcels: usize,
}

/// A platform application's or endpoint's attributes.
pub type Attributes = BTreeMap<String, String>;

/// An application or endpoint as the listings show it: its ARN and attributes.
pub type Listed = Vec<(Arc<str>, Attributes)>;

/// Mobile push and SMS management (`engine::mobile`): platform applications and endpoints,
/// and per region and account the SMS settings, opted-out numbers and sandbox numbers.
pub trait PushAndSms: Send + Sync {
    fn create_platform_application<'a>(
        &'a self,
        namespace: &'a Namespace,
        name: &'a str,
        platform: &'a str,
        attributes: Attributes,
    ) -> Answer<'a, Arc<str>>;
    fn set_platform_application_attributes<'a>(
        &'a self,
        arn: &'a str,
        attributes: Attributes,
    ) -> Answer<'a, ()>;
    /// Its attributes as AWS shows them (no credentials).
    fn platform_application_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Attributes>;
    fn platform_applications<'a>(&'a self, namespace: &'a Namespace) -> Answer<'a, Listed>;
    /// Its endpoints go with it; an unknown one is no error.
    fn delete_platform_application<'a>(&'a self, arn: &'a str) -> Answer<'a, ()>;
    fn create_platform_endpoint<'a>(
        &'a self,
        application_arn: &'a str,
        token: &'a str,
        custom_user_data: Option<&'a str>,
        attributes: Attributes,
    ) -> Answer<'a, Arc<str>>;
    fn set_endpoint_attributes<'a>(
        &'a self,
        arn: &'a str,
        attributes: Attributes,
    ) -> Answer<'a, ()>;
    fn endpoint_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Attributes>;
    fn endpoints_of<'a>(&'a self, application_arn: &'a str) -> Answer<'a, Listed>;
    /// An unknown one is no error.
    fn delete_endpoint<'a>(&'a self, arn: &'a str) -> Answer<'a, ()>;
    /// Whether a Publish may go to this TargetArn: an enabled endpoint of an enabled
    /// application.
    fn check_publish_target<'a>(&'a self, arn: &'a str) -> Answer<'a, ()>;

    fn set_sms_attributes<'a>(
        &'a self,
        namespace: &'a Namespace,
        attributes: Attributes,
    ) -> Answer<'a, ()>;
    fn sms_attributes<'a>(
        &'a self,
        namespace: &'a Namespace,
        names: &'a [String],
    ) -> Answer<'a, Attributes>;
    fn is_opted_out<'a>(&'a self, namespace: &'a Namespace, number: &'a str) -> Answer<'a, bool>;
    /// Opts a number out (as a STOP reply does) or back in.
    fn set_opted_out<'a>(
        &'a self,
        namespace: &'a Namespace,
        number: &'a str,
        opted_out: bool,
    ) -> Answer<'a, ()>;
    fn opted_out<'a>(&'a self, namespace: &'a Namespace) -> Answer<'a, Vec<String>>;
    /// Whether `password` is to be sent to the number (not if it is verified already).
    fn add_sandbox_number<'a>(
        &'a self,
        namespace: &'a Namespace,
        number: &'a str,
        language: &'a str,
        password: String,
    ) -> Answer<'a, bool>;
    fn verify_sandbox_number<'a>(
        &'a self,
        namespace: &'a Namespace,
        number: &'a str,
        password: &'a str,
    ) -> Answer<'a, ()>;
    fn delete_sandbox_number<'a>(
        &'a self,
        namespace: &'a Namespace,
        number: &'a str,
    ) -> Answer<'a, ()>;
    fn sandbox_numbers<'a>(
        &'a self,
        namespace: &'a Namespace,
    ) -> Answer<'a, Vec<(String, SandboxStatus)>>;
}

/// Everything the service and its workers ask of storage.
pub trait Backend:
    QueueAdmin + Messages + Topics + MoveTasks + Work + Deliveries + Inspection + PushAndSms
{
}

impl<
        T: QueueAdmin + Messages + Topics + MoveTasks + Work + Deliveries + Inspection + PushAndSms,
    > Backend for T
{
}

/// One waiting receive in the long-poll gauge (`GET /metrics`), for as long as it lives: a
/// client that hangs up drops the receive mid-wait, and the count still goes down.
pub(crate) struct Waiting<'a>(&'a prometheus_client::metrics::gauge::Gauge);

impl<'a> Waiting<'a> {
    pub(crate) fn start(gauge: &'a prometheus_client::metrics::gauge::Gauge) -> Self {
        gauge.inc();
        Waiting(gauge)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}
