//! What every service's routes are built with, whichever generation of a node serves.

use std::sync::Arc;

use crate::clock::ManualClock;
use crate::http::body::BodyLimits;
use crate::http::browser::BrowserRules;
use crate::service::Service;

/// What every service's routes are built with, whichever generation serves.
#[derive(Clone)]
pub(super) struct Routes {
    pub(super) scheme: &'static str,
    pub(super) body: BodyLimits,
    pub(super) browser: BrowserRules,
    pub(super) clock_control: Option<Arc<ManualClock>>,
    pub(super) auth: Option<Arc<crate::http::auth::Auth>>,
    /// STS's temporary credentials: one set for every generation, as a generation starting
    /// over keeps its process's.
    pub(super) sessions: Arc<crate::http::sessions::Sessions>,
}

impl Routes {
    /// The service's routes, each request passed on to the leader first while `forwarding` says
    /// this node does not lead; with `by_shard`, one for a shard another node leads is passed
    /// to that shard's leader (`http::shard_routing`).
    pub(super) fn router(
        &self,
        service: Arc<Service>,
        forwarding: Option<crate::http::standby::Forwarding>,
        by_shard: Option<crate::http::standby::Forwarding>,
    ) -> axum::Router {
        let routes = crate::http::routes(
            service,
            self.body,
            (self.scheme, self.clock_control.clone()),
            (self.auth.clone(), self.sessions.clone()),
        );
        let routes = match by_shard {
            Some(forwarding) => routes.layer(axum::middleware::from_fn_with_state(
                forwarding,
                crate::http::shard_routing::pass_to_shard_leader,
            )),
            None => routes,
        };
        let routes = match forwarding {
            Some(forwarding) => routes.layer(axum::middleware::from_fn_with_state(
                forwarding,
                crate::http::standby::forward_unless_leading,
            )),
            None => routes,
        };
        crate::http::guarded(routes, self.browser.clone())
    }
}
