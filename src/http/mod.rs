//! HTTP: the routes. Every AWS action arrives at one endpoint (`aws.rs`); Orderly's own
//! endpoints (inspection, console, clock, LocalStack's) sit beside it. Every request is bounded:
//! its head by the server (`server.rs`), its body by `body.rs`. The handlers share `state.rs`
//! and `reply.rs`; this file only routes.

pub mod auth;
pub(crate) mod aws;
pub mod between_nodes;
#[cfg(test)]
mod between_nodes_tests;
pub mod body;
pub mod browser;
mod captured;
pub mod clock_control;
pub mod connection;
mod console;
pub mod identity;
mod inspect;
mod learned_routes;
mod link_client;
mod link_frame;
pub mod link_server;
#[cfg(test)]
mod link_tests;
mod localstack;
mod node_headers;
mod plain_errors;
mod read_ahead;
mod reply;
pub mod server;
pub mod sessions;
pub mod shard_routing;
pub mod sigv4;
pub mod slots;
pub mod standby;
mod state;
mod sts;
pub mod tls;
mod unsigned;

use std::sync::Arc;

use axum::routing::{any, get, post};
use axum::Router;

use crate::service::Service;
use auth::Auth;
use body::BodyLimits;
use browser::BrowserRules;
use state::HttpState;

/// `clock`: the scheme URLs are handed out with, and with `--clock manual` the clock
/// `/_orderly/clock` moves.
pub fn router(
    service: Arc<Service>,
    body: BodyLimits,
    browser: BrowserRules,
    clock: (&'static str, Option<Arc<crate::clock::ManualClock>>),
    auth: Option<Arc<Auth>>,
) -> Router {
    let sessions = Arc::default();
    guarded(routes(service, body, clock, (auth, sessions)), browser)
}

/// `routes` behind the browser rules: every request, served here or passed on, is judged by
/// this node's own `--allow-host` and `--cors-allow` first.
pub fn guarded(routes: Router, browser: BrowserRules) -> Router {
    routes.layer(axum::middleware::from_fn_with_state(
        Arc::new(browser),
        browser::guard,
    ))
}

/// Every endpoint, without the browser rules.
pub fn routes(
    service: Arc<Service>,
    body: BodyLimits,
    (scheme, clock_control): (&'static str, Option<Arc<crate::clock::ManualClock>>),
    (auth, sessions): (Option<Arc<Auth>>, Arc<sessions::Sessions>),
) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok" }))
        // A node on its own, or leading, serves: a standby's readiness is its own
        // (`standby.rs`).
        .route("/health/ready", get(|| async { "ok" }))
        .route("/_orderly/webhooks", get(inspect::webhook_stats))
        .route("/_orderly/cluster", get(inspect::cluster_state))
        .route(
            between_nodes::PARCELS,
            get(between_nodes::parcels).post(between_nodes::pairs),
        )
        .route(between_nodes::READS, get(between_nodes::read))
        .route(between_nodes::SETTLED, post(between_nodes::settled))
        .route(between_nodes::RESET, post(between_nodes::reset))
        .route(
            "/_orderly/clock",
            get(clock_control::read).post(clock_control::move_clock),
        )
        .route("/_orderly/queues", get(inspect::queues))
        .route("/_orderly/queues/{name}/messages", get(inspect::messages))
        .route("/_orderly/queues/{name}/groups", get(inspect::groups))
        .route("/_orderly/console", get(console::page))
        .route("/_orderly/console/{asset}", get(console::asset))
        .route(reply::CONSOLE_ACTIONS, post(console::action))
        .route("/_orderly/subscriptions", get(inspect::subscriptions))
        .route(
            "/_orderly/sns/deliveries",
            get(captured::deliveries).delete(captured::forget_deliveries),
        )
        .route("/_orderly/sns/opted-out", post(captured::opt_out))
        .route(
            "/_aws/sns/sms-messages",
            captured::localstack_listing(&crate::service::captured::SMS_MESSAGES),
        )
        .route(
            "/_aws/sns/platform-endpoint-messages",
            captured::localstack_listing(&crate::service::captured::PLATFORM_ENDPOINT_MESSAGES),
        )
        .route(
            "/_aws/sns/subscription-tokens/{*arn}",
            get(captured::subscription_token),
        )
        .route("/metrics", get(inspect::metrics))
        .route("/_orderly/reset", post(inspect::reset))
        // A mistyped endpoint of Orderly's own is said so, not read as an SQS request.
        .route("/_orderly/{*rest}", any(inspect::no_such_endpoint))
        .route(
            "/_aws/sqs/messages",
            get(localstack::messages).post(localstack::messages),
        )
        // An SDK given the endpoint as its endpoint URL may add a slash.
        .route(
            "/_aws/sqs/messages/",
            get(localstack::messages).post(localstack::messages),
        )
        .route(
            "/_aws/sqs/messages/{region}/{account}/{queue}",
            get(localstack::messages_at).post(localstack::messages_at),
        )
        .route(
            "/_localstack/health",
            get(localstack::health).head(localstack::health_head),
        )
        .fallback(aws::handle)
        .with_state(HttpState {
            service,
            body,
            scheme,
            auth,
            clock_control,
            sessions,
        })
        // On the routes only: the API's requests, all answered by the fallback, never pass it.
        .route_layer(axum::middleware::from_fn(plain_errors::as_json))
}
