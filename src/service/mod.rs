//! The SQS and SNS actions: decode a request, check what needs no storage, apply it through the
//! backend, encode the answer. Long polls wait in the backend, never in the engine.

#[macro_use]
mod sns_call;

pub mod access;
mod batch;
pub mod captured;
pub mod cluster;
pub mod init;
pub mod inspect;
mod messages;
mod move_tasks;
mod pace;
mod permissions;
mod queues;
mod render;
mod sns;
mod sns_mobile;
mod sns_params;
mod storage_error;

use std::sync::Arc;

use crate::backend::Backend;
use crate::clock::Clock;
use crate::delivery::Webhooks;
use crate::protocol::{
    encode_answer, encode_error, encode_ok, Action, ApiError, Encoded, ErrorCode, Payload,
    Protocol, Shape, SnsAction, SqsAction,
};

/// Who asked, and where they reached us: queue URLs are built from the Host they used.
#[derive(Clone, Debug)]
pub struct RequestContext {
    /// `http`, or `https` when Orderly serves TLS: the scheme of the URLs it hands out.
    pub scheme: &'static str,
    pub host: String,
    /// The caller's IAM user id (`SenderId`), shared by every message of the request.
    pub sender_id: Arc<str>,
    /// The caller's principal ARN (a subscription's `SubscriptionPrincipal`).
    pub principal: Arc<str>,
    pub request_id: String,
    /// The region and account the request acts in: its credential scope's region and its
    /// key's account (`http::identity`); the home namespace when unsigned.
    pub namespace: crate::engine::namespace::Namespace,
    /// Orderly's own console and set-up file: they act as every resource's owner, whatever
    /// account it is in (`access`).
    pub operator: bool,
    /// The request was signed (SigV4). SubscribeURL and UnsubscribeURL GETs are not.
    pub authenticated: bool,
    /// The `X-Amzn-Trace-Id` header: stored as a message's `AWSTraceHeader` when the request
    /// gives none itself, and passed to an SNS publish's SQS copies.
    pub trace_header: Option<Arc<str>>,
}

/// One line per request: every error answer at info (once, with its code and message), every
/// other at debug. The resource is read from the payload only when the line is written.
fn log_request(
    action: Action,
    payload: &Payload,
    ctx: &RequestContext,
    result: &Result<Encoded, ApiError>,
    took: std::time::Duration,
) {
    let name = match action {
        Action::Sqs(a) => a.name(),
        Action::Sns(a) => a.name(),
    };
    let duration_ms = took.as_secs_f64() * 1000.0;
    match result {
        Err(error) => tracing::info!(
            request_id = %ctx.request_id,
            action = name,
            resource = payload.resource().as_deref().unwrap_or(""),
            status = error.code.status(),
            code = error.code.query_code(),
            duration_ms,
            reason = %error.message,
            "error answer"
        ),
        Ok(encoded) if tracing::enabled!(tracing::Level::DEBUG) => tracing::debug!(
            request_id = %ctx.request_id,
            action = name,
            resource = payload.resource().as_deref().unwrap_or(""),
            status = encoded.status,
            duration_ms,
            "request"
        ),
        Ok(_) => {}
    }
}

pub struct Service {
    /// Storage: every action goes through it (see `backend`).
    pub backend: Arc<dyn Backend>,
    /// Requests, errors and durations per action (`GET /metrics`).
    pub metrics: crate::metrics::Metrics,
    pub clock: Arc<dyn Clock>,
    pub webhooks: Arc<Webhooks>,
    hostname: Option<String>,
    /// Keys of queues and topics, relative to `--region` and `--account-id`.
    namespaces: crate::engine::namespace::Namespaces,
    /// `--single-namespace`: every request acts at home.
    single_namespace: bool,
    /// This node's place among nodes (`GET /_orderly/cluster`).
    cluster: std::sync::OnceLock<cluster::ClusterStatus>,
    /// Whose consumers are behind, so that their senders take their turn after them.
    pace: pace::Pace,
}

/// The service's own settings (the rest of the configuration goes to the parts `app` builds).
pub struct ServiceSettings {
    /// `--hostname`: the host queue URLs name instead of the request's.
    pub hostname: Option<String>,
    /// `--account-id`: the account in queue URLs.
    pub account_id: String,
    /// `--region`: the region in ARNs.
    pub region: String,
    /// `--single-namespace`.
    pub single_namespace: bool,
    /// `--pace-senders`.
    pub pace_senders: bool,
}

impl Service {
    /// The actions over a backend already opened (`app` opens storage and builds the webhook
    /// sender); does no I/O.
    pub fn new(
        backend: Arc<dyn Backend>,
        webhooks: Arc<Webhooks>,
        clock: Arc<dyn Clock>,
        settings: ServiceSettings,
        metrics: crate::metrics::Metrics,
    ) -> Arc<Self> {
        let pace = pace::Pace::new(settings.pace_senders, metrics.sends_paced.clone());
        Arc::new(Service {
            pace,
            backend,
            metrics,
            clock,
            webhooks,
            hostname: settings.hostname,
            namespaces: crate::engine::namespace::Namespaces::new(
                crate::engine::namespace::Namespace::new(&settings.region, &settings.account_id),
            ),
            single_namespace: settings.single_namespace,
            cluster: std::sync::OnceLock::new(),
        })
    }

    /// Says how `GET /_orderly/cluster` reads this node's state (`app`, once at start).
    pub fn set_cluster_status(&self, status: cluster::ClusterStatus) {
        let _ = self.cluster.set(status);
    }

    /// This node's place among nodes; a node never told is single, with no log.
    pub fn cluster_state(&self) -> cluster::ClusterState {
        match self.cluster.get() {
            Some(status) => status(),
            None => cluster::ClusterState {
                role: "single",
                epoch: 0,
                leader: String::new(),
                applied: 0,
                lag: 0,
                shards: 1,
                led: vec![0],
                nodes: Vec::new(),
                leaders: Vec::new(),
                databases: Vec::new(),
                replication: None,
                logs: Vec::new(),
            },
        }
    }

    /// `--account-id`: the home namespace's account, where unsigned requests act.
    pub fn account_id(&self) -> &str {
        &self.namespaces.home().account
    }

    /// `--region`: the home namespace's region.
    pub fn region(&self) -> &str {
        &self.namespaces.home().region
    }

    pub fn namespaces(&self) -> &crate::engine::namespace::Namespaces {
        &self.namespaces
    }

    /// `--single-namespace`.
    pub fn single_namespace(&self) -> bool {
        self.single_namespace
    }

    /// Where a request acts: its credential scope's region (`--region` if unsigned) and its
    /// caller's account; always at home with `--single-namespace`.
    pub fn namespace_of(
        &self,
        region: Option<&str>,
        account: &Arc<str>,
    ) -> crate::engine::namespace::Namespace {
        let home = self.namespaces.home();
        if self.single_namespace {
            return home.clone();
        }
        let region = match region {
            Some(region) if region != &*home.region && !region.is_empty() => region.into(),
            _ => home.region.clone(),
        };
        crate::engine::namespace::Namespace {
            region,
            account: account.clone(),
        }
    }

    pub fn queue_url(&self, ctx: &RequestContext, name: &str) -> String {
        self.url_of_queue(ctx.scheme, &ctx.host, name)
    }

    /// A queue's URL (by key) for a client that reached the server at `scheme://host`.
    pub fn url_of_queue(&self, scheme: &str, host: &str, key: &str) -> String {
        let host = self.hostname.as_deref().unwrap_or(host);
        let place = self.namespaces.place(key);
        if place.region == &*self.namespaces.home().region {
            format!("{scheme}://{host}/{}/{}", place.account, place.name)
        } else {
            // One endpoint serves every region: the path says which (`access::url_place`).
            format!(
                "{scheme}://{host}/queue/{}/{}/{}",
                place.region, place.account, place.name
            )
        }
    }

    pub async fn dispatch(
        self: &Arc<Self>,
        protocol: Protocol,
        action: &str,
        payload: &Payload,
        ctx: &RequestContext,
    ) -> Encoded {
        let parsed = match protocol {
            Protocol::SnsQuery => SnsAction::parse(action).map(Action::Sns),
            Protocol::Json | Protocol::Query | Protocol::QueryJson => {
                SqsAction::parse(action).map(Action::Sqs)
            }
        };
        let Some(action) = parsed else {
            let error = ApiError::new(
                ErrorCode::InvalidAction,
                format!("The action {action} is not valid for this endpoint."),
            );
            return encode_error(protocol, &error, &ctx.request_id);
        };
        let started = std::time::Instant::now();
        let result = match action {
            Action::Sns(action) => self.route_sns(action, payload, ctx).await,
            Action::Sqs(action) => match self.route(protocol, action, payload, ctx).await {
                // Refused before anything was done; read again as AWS would have read it.
                Err(error)
                    if error.code == ErrorCode::SerializationException
                        && matches!(
                            action,
                            SqsAction::SendMessage | SqsAction::SendMessageBatch
                        ) =>
                {
                    match payload.lone_surrogates_replaced() {
                        Some(read) => self.route(protocol, action, &read, ctx).await,
                        None => Err(error),
                    }
                }
                routed => routed,
            },
        };
        let took = started.elapsed();
        // Passed on to the shard's leader, which counts and logs it: not once more here.
        if crate::backend::led_elsewhere::passing_on() {
            return match result {
                Ok(encoded) => encoded,
                Err(error) => encode_error(protocol, &error, &ctx.request_id),
            };
        }
        let error = result.as_ref().err().map(|e| {
            let code = e.code.query_code();
            code.strip_prefix("AWS.SimpleQueueService.").unwrap_or(code)
        });
        self.metrics.record(action, took, error);
        log_request(action, payload, ctx, &result, took);
        match result {
            Ok(encoded) => encoded,
            Err(error) => encode_error(protocol, &error, &ctx.request_id),
        }
    }

    async fn route(
        self: &Arc<Self>,
        protocol: Protocol,
        action: SqsAction,
        payload: &Payload,
        ctx: &RequestContext,
    ) -> Result<Encoded, ApiError> {
        use crate::protocol::actions::sqs_shape;
        // Each handler must take and answer what its action declares (`protocol::actions`).
        // The hot path's answers write their JSON by hand (`encode_answer`). Handlers go through
        // the backend, which answers once durable.
        macro_rules! call {
            ($action:ident, $handler:ident) => {
                call!($action, $handler, encode_ok)
            };
            ($action:ident, $handler:ident, $encode:ident) => {{
                let input: <sqs_shape::$action as Shape>::Input<'_> = payload.decode(protocol)?;
                let output: <sqs_shape::$action as Shape>::Output<'_> =
                    self.$handler(input, ctx).await?;
                Ok($encode(
                    protocol,
                    Action::Sqs(action),
                    &output,
                    &ctx.request_id,
                ))
            }};
        }
        use SqsAction as A;
        match action {
            A::CreateQueue => call!(CreateQueue, create_queue),
            A::GetQueueUrl => call!(GetQueueUrl, get_queue_url),
            A::ListQueues => call!(ListQueues, list_queues),
            A::DeleteQueue => call!(DeleteQueue, delete_queue),
            A::GetQueueAttributes => call!(GetQueueAttributes, get_queue_attributes),
            A::SetQueueAttributes => call!(SetQueueAttributes, set_queue_attributes),
            A::PurgeQueue => call!(PurgeQueue, purge_queue),
            A::TagQueue => call!(TagQueue, tag_queue),
            A::UntagQueue => call!(UntagQueue, untag_queue),
            A::ListQueueTags => call!(ListQueueTags, list_queue_tags),
            A::AddPermission => call!(AddPermission, add_permission),
            A::RemovePermission => call!(RemovePermission, remove_permission),
            A::ListDeadLetterSourceQueues => {
                call!(ListDeadLetterSourceQueues, list_dead_letter_source_queues)
            }
            A::SendMessage => call!(SendMessage, send_message, encode_answer),
            A::SendMessageBatch => {
                call!(SendMessageBatch, send_message_batch, encode_answer)
            }
            A::ReceiveMessage => call!(ReceiveMessage, receive_message, encode_answer),
            A::DeleteMessage => call!(DeleteMessage, delete_message),
            A::DeleteMessageBatch => {
                call!(DeleteMessageBatch, delete_message_batch, encode_answer)
            }
            A::ChangeMessageVisibility => {
                call!(ChangeMessageVisibility, change_message_visibility)
            }
            A::ChangeMessageVisibilityBatch => call!(
                ChangeMessageVisibilityBatch,
                change_message_visibility_batch,
                encode_answer
            ),
            A::StartMessageMoveTask => call!(StartMessageMoveTask, start_message_move_task),
            A::ListMessageMoveTasks => call!(ListMessageMoveTasks, list_message_move_tasks),
            A::CancelMessageMoveTask => call!(CancelMessageMoveTask, cancel_message_move_task),
        }
    }
}
