//! The SQS actions: decode a request, apply it to the engine, encode the answer. Reads the
//! clock once per step and hands `now` to the engine; long polls wait here, never in the engine.

mod batch;
mod messages;
mod move_tasks;
mod queues;
mod render;
mod sns;

use std::sync::Arc;

use tokio::sync::Notify;

use crate::clock::Clock;
use crate::config::Config;
use crate::delivery::{SenderConfig, Webhooks};
use crate::engine::{Engine, QueueEntry};
use crate::protocol::{encode_error, encode_ok, ApiError, Encoded, ErrorCode, Payload, Protocol};

pub type Entry = Arc<QueueEntry<Notify>>;

/// Who asked, and where they reached us: queue URLs are built from the Host they used.
#[derive(Clone, Debug)]
pub struct RequestContext {
    pub host: String,
    /// Shared by every message of the request.
    pub sender_id: Arc<str>,
    pub request_id: String,
    /// The request was signed (SigV4). SubscribeURL and UnsubscribeURL GETs are not.
    pub authenticated: bool,
}

pub struct Service {
    pub engine: Engine<Notify>,
    pub clock: Arc<dyn Clock>,
    pub webhooks: Webhooks,
    hostname: Option<String>,
}

impl Service {
    /// Fails only if the HTTP client for webhooks cannot be built (TLS setup).
    pub fn new(config: &Config, clock: Arc<dyn Clock>) -> std::io::Result<Arc<Self>> {
        let mut engine = Engine::new(&config.account_id, &config.region);
        engine.delete_cooldown_ms = config.deleted_queue_cooldown * 1000;
        engine.fifo_http_subscriptions = config.fifo_http_subscriptions;
        engine.set_webhook_max_pending(config.webhook_max_pending);
        let webhooks = Webhooks::new(
            config.webhook_allow.clone(),
            &SenderConfig {
                timeout: std::time::Duration::from_secs(config.webhook_timeout.max(1)),
                accept_invalid_certs: config.webhook_accept_invalid_certs,
            },
            config.webhook_concurrency,
        )
        .map_err(std::io::Error::other)?;
        Ok(Arc::new(Service {
            engine,
            clock,
            webhooks,
            hostname: config.hostname.clone(),
        }))
    }

    pub fn queue_url(&self, ctx: &RequestContext, name: &str) -> String {
        let host = self.hostname.as_deref().unwrap_or(&ctx.host);
        format!("http://{host}/{}/{name}", self.engine.account_id)
    }

    /// Resolves a QueueUrl by its last path segment (scheme, host and port are ignored, as
    /// clients reach one server under many names).
    fn queue_from_url(&self, url: Option<&str>) -> Result<Entry, ApiError> {
        let url = url.ok_or_else(|| ApiError::missing("QueueUrl"))?;
        let path = url
            .split(['?', '#'])
            .next()
            .unwrap_or("")
            .trim_end_matches('/');
        let name = path.rsplit('/').next().unwrap_or(path);
        Ok(self.engine.queue(name)?)
    }

    /// Wakes the longest-waiting long poll on a queue after something became receivable. One is
    /// enough: a poll that leaves receivable messages behind wakes the next (see
    /// `receive_message`), so waiters are served in arrival order without a thundering herd.
    fn wake(entry: &Entry) {
        entry.waiters.notify_one();
    }

    /// Wakes every long poll (the queue is gone).
    fn wake_all(entry: &Entry) {
        entry.waiters.notify_waiters();
    }

    pub async fn dispatch(
        self: &Arc<Self>,
        protocol: Protocol,
        action: &str,
        payload: &Payload,
        ctx: &RequestContext,
    ) -> Encoded {
        let result = if protocol == Protocol::SnsQuery {
            self.route_sns(action, payload, ctx)
        } else {
            self.route(protocol, action, payload, ctx).await
        };
        match result {
            Ok(encoded) => encoded,
            Err(error) => encode_error(protocol, &error, &ctx.request_id),
        }
    }

    async fn route(
        self: &Arc<Self>,
        protocol: Protocol,
        action: &str,
        payload: &Payload,
        ctx: &RequestContext,
    ) -> Result<Encoded, ApiError> {
        macro_rules! call {
            ($handler:ident) => {
                Ok(encode_ok(
                    protocol,
                    action,
                    &self.$handler(payload.decode(protocol)?, ctx)?,
                    &ctx.request_id,
                ))
            };
        }
        match action {
            "CreateQueue" => call!(create_queue),
            "GetQueueUrl" => call!(get_queue_url),
            "ListQueues" => call!(list_queues),
            "DeleteQueue" => call!(delete_queue),
            "GetQueueAttributes" => call!(get_queue_attributes),
            "SetQueueAttributes" => call!(set_queue_attributes),
            "PurgeQueue" => call!(purge_queue),
            "TagQueue" => call!(tag_queue),
            "UntagQueue" => call!(untag_queue),
            "ListQueueTags" => call!(list_queue_tags),
            "AddPermission" => call!(add_permission),
            "RemovePermission" => call!(remove_permission),
            "ListDeadLetterSourceQueues" => call!(list_dead_letter_source_queues),
            "SendMessage" => call!(send_message),
            "SendMessageBatch" => call!(send_message_batch),
            "ReceiveMessage" => {
                let output = self.receive_message(payload.decode(protocol)?).await?;
                Ok(encode_ok(protocol, action, &output, &ctx.request_id))
            }
            "DeleteMessage" => call!(delete_message),
            "DeleteMessageBatch" => call!(delete_message_batch),
            "ChangeMessageVisibility" => call!(change_message_visibility),
            "ChangeMessageVisibilityBatch" => call!(change_message_visibility_batch),
            "StartMessageMoveTask" => call!(start_message_move_task),
            "ListMessageMoveTasks" => call!(list_message_move_tasks),
            "CancelMessageMoveTask" => call!(cancel_message_move_task),
            _ => Err(ApiError::new(
                ErrorCode::InvalidAction,
                format!("The action {action} is not valid for this endpoint."),
            )),
        }
    }
}
