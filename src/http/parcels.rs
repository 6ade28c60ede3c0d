//! Parcels between nodes leading different shards of one database: `GET /_orderly/parcels`
//! answers the parcels a shard led here holds for a shard another node leads (`Puller` is that
//! node's side), as the backend encodes them. Only a node of the database may ask: the
//! request names the node, by the random name it announced itself by in the database
//! (`X-Orderly-Node`), which the passing-on layer checks before the request gets here
//! (`FromPeer`); asking forgets what the asker says it applied.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::Uri;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;

use super::node_headers::{NODE, NOT_SERVED};
use super::standby::Standby;
use super::state::HttpState;
use crate::backend::{Answer, BackendError, ParcelsElsewhere};

pub const PATH: &str = "/_orderly/parcels";

/// Longest a pull waits for a parcel before it answers none.
const PULL_WAIT: Duration = Duration::from_secs(2);

/// Most parcels one pull answers.
const MOST: usize = 1024;

/// Set by the passing-on layer on a request from a node of the database.
#[derive(Clone, Copy)]
pub struct FromPeer;

/// What a pull asks for.
struct Pull {
    from: u32,
    to: u32,
    after: u64,
    max: usize,
}

impl Pull {
    fn of(uri: &Uri) -> Option<Pull> {
        let mut pull = Pull {
            from: u32::MAX,
            to: u32::MAX,
            after: 0,
            max: 0,
        };
        for (name, value) in form_urlencoded::parse(uri.query()?.as_bytes()) {
            match &*name {
                "from" => pull.from = value.parse().ok()?,
                "to" => pull.to = value.parse().ok()?,
                "after" => pull.after = value.parse().ok()?,
                "max" => pull.max = value.parse().ok()?,
                _ => return None,
            }
        }
        (pull.from != u32::MAX && pull.to != u32::MAX).then_some(pull)
    }
}

/// `GET /_orderly/parcels?from=F&to=T&after=A&max=M`.
pub(super) async fn serve(
    State(state): State<HttpState>,
    peer: Option<Extension<FromPeer>>,
    uri: Uri,
) -> Response {
    if peer.is_none() {
        return (StatusCode::FORBIDDEN, "for the nodes of a database only").into_response();
    }
    let Some(pull) = Pull::of(&uri) else {
        return (
            StatusCode::BAD_REQUEST,
            "from, to, after and max are asked for",
        )
            .into_response();
    };
    let limits = (pull.after, pull.max.clamp(1, MOST));
    let backend = &state.service.backend;
    match backend
        .parcels_for_node(pull.from, pull.to, limits, PULL_WAIT)
        .await
    {
        Ok(bytes) => (StatusCode::OK, bytes).into_response(),
        Err(error) => not_served(error.to_string()),
    }
}

fn not_served(message: String) -> Response {
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
    (response.headers_mut()).insert(NOT_SERVED, HeaderValue::from_static("1"));
    response
}

/// Pulls parcels from the node leading their source shard, as this node (`name`, announced in
/// the database).
pub struct Puller {
    pub standby: Arc<Standby>,
    pub name: String,
}

impl ParcelsElsewhere for Puller {
    fn pull(&self, from: u32, to: u32, after: u64, max: usize) -> Answer<'_, bytes::Bytes> {
        Box::pin(async move {
            let leader = (self.standby.shard_leaders().borrow().get(from as usize)).cloned();
            let Some(leader) = leader.filter(|leader| !leader.is_empty()) else {
                return Err(BackendError::Unavailable(format!(
                    "shard {from}'s leader is not known"
                )));
            };
            let url = format!("{}{PATH}", leader.trim_end_matches('/'));
            let query = [
                ("from", from as u64),
                ("to", to as u64),
                ("after", after),
                ("max", max as u64),
            ];
            let asked = (self.standby.client().get(&url))
                .query(&query)
                .header(NODE, &self.name)
                .send()
                .await
                .map_err(|e| BackendError::Unavailable(format!("{leader}: {}", e.without_url())))?;
            let status = asked.status();
            let bytes = asked
                .bytes()
                .await
                .map_err(|e| BackendError::Unavailable(format!("{leader}: {}", e.without_url())))?;
            if !status.is_success() {
                let said = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
                return Err(BackendError::Unavailable(format!(
                    "{leader} answered {status}: {said}"
                )));
            }
            Ok(bytes)
        })
    }
}
