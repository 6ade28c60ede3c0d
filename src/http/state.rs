//! What every request handler of the HTTP endpoints shares.

use std::sync::Arc;

use super::auth::Auth;
use super::body::BodyLimits;
use super::sessions::Sessions;
use crate::service::Service;

/// What every request handler needs: the service, the bounds on a request body, and the
/// scheme clients reach this server by (for the URLs it hands out).
#[derive(Clone)]
pub(super) struct HttpState {
    pub(super) service: Arc<Service>,
    pub(super) body: BodyLimits,
    pub(super) scheme: &'static str,
    /// `--auth`: signatures are checked.
    pub(super) auth: Option<Arc<Auth>>,
    /// `--clock manual`: the clock `/_orderly/clock` moves.
    pub(super) clock_control: Option<Arc<crate::clock::ManualClock>>,
    /// Temporary credentials STS handed out.
    pub(super) sessions: Arc<Sessions>,
}
