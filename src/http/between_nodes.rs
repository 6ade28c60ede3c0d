//! What nodes leading different shards of one database ask one another (`Peers` is the asking
//! side): `POST /_orderly/parcels` answers, for every pair of shards between this node and the
//! asking one, the parcels a shard led here holds for a shard the asker leads, as the backend
//! encodes them, and forgets what the asker says it applied (`GET /_orderly/parcels` answers
//! one pair so, for a node of an earlier build); `POST /_orderly/settled` takes back what became of copies a shard led here made;
//! `POST /_orderly/shard-reset` resets a shard led here as part of a reset of every shard;
//! `GET /_orderly/shard-read` answers what a shard led here holds on another shard's behalf
//! (its queues, topics or subscriptions for a listing, its queues naming a dead-letter queue,
//! its signer's certificate, as a JSON array of texts; one of its queues as another shard's
//! rules read it, as `QueueTarget`, asked as `read=dead-letter-target`, the name nodes of
//! earlier builds know it by). Only a node of the database may ask:
//! the request names the node, by the random name it announced itself by in the database
//! (`X-Orderly-Node`), which the passing-on layer checks before the request gets here
//! (`FromPeer`).

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
use crate::backend::{Answer, BackendError, OtherNodes, QueueTarget, ResetScope, ShardRead};
use crate::engine::parcel::MOST_BYTES_AT_ONCE;
use crate::persist::format::between_nodes::{decode_pull, encode_pull, PairPull};

pub const PARCELS: &str = "/_orderly/parcels";
pub const READS: &str = "/_orderly/shard-read";
pub const SETTLED: &str = "/_orderly/settled";
pub const RESET: &str = "/_orderly/shard-reset";

/// Whether `path` is one of the requests between nodes above, which carry the asking node's
/// name (`X-Orderly-Node`).
pub fn is_between_nodes(path: &str) -> bool {
    matches!(path, PARCELS | READS | SETTLED | RESET)
}

/// Largest answer to a read of another node's shard this node takes: a listing of a shard's
/// queues, topics or subscriptions is a few hundred bytes an item, so this is about a million
/// of them.
const MOST_READ_BYTES: usize = 256 << 20;

/// Longest a pull waits for a parcel before it answers none.
const PULL_WAIT: Duration = Duration::from_secs(2);

/// Most parcels one pull answers.
const MOST: usize = 1024;

/// Largest body of notes one `POST /_orderly/settled` takes: a round's notes (a pull's
/// parcels' worth) are far smaller.
const MOST_NOTES_BYTES: usize = 8 << 20;

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

/// The refusal of a request no node of the database sent.
fn unless_from_peer(peer: Option<Extension<FromPeer>>) -> Option<Response> {
    let refused = (StatusCode::FORBIDDEN, "for the nodes of a database only");
    peer.is_none().then(|| refused.into_response())
}

/// `GET /_orderly/parcels?from=F&to=T&after=A&max=M`: one pair, as a node of an earlier build
/// pulls.
pub(super) async fn parcels(
    State(state): State<HttpState>,
    peer: Option<Extension<FromPeer>>,
    uri: Uri,
) -> Response {
    if let Some(refused) = unless_from_peer(peer) {
        return refused;
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
        Err(error) => refused(error),
    }
}

/// Largest pull a node takes: its pairs of shards (a shard led here, one led by the asking
/// node) take a few bytes each.
const MOST_PULL_BYTES: usize = 8 << 20;

/// `POST /_orderly/parcels`, the pairs of shards as `OtherNodes::pull` encodes them (read
/// only once the sender is known to be a node of the database): one pull for every pair of
/// shards between the asking node and this one.
pub(super) async fn pairs(
    State(state): State<HttpState>,
    peer: Option<Extension<FromPeer>>,
    body: axum::body::Body,
) -> Response {
    if let Some(refused) = unless_from_peer(peer) {
        return refused;
    }
    let Ok(bytes) = axum::body::to_bytes(body, MOST_PULL_BYTES).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "too many pairs at once").into_response();
    };
    let (pairs, max) = match decode_pull(&bytes) {
        Ok(pull) => pull,
        Err(error) => return (StatusCode::BAD_REQUEST, error.to_string()).into_response(),
    };
    let max = (max as usize).clamp(1, MOST);
    let backend = &state.service.backend;
    match backend.parcels_for_pairs(pairs, max, PULL_WAIT).await {
        Ok(bytes) => (StatusCode::OK, bytes).into_response(),
        Err(error) => refused(error),
    }
}

/// `POST /_orderly/settled?shard=N`, the notes as `OtherNodes::settled` encodes them (read
/// only once the sender is known to be a node of the database).
pub(super) async fn settled(
    State(state): State<HttpState>,
    peer: Option<Extension<FromPeer>>,
    uri: Uri,
    body: axum::body::Body,
) -> Response {
    if let Some(refused) = unless_from_peer(peer) {
        return refused;
    }
    let shard = (uri.query().into_iter())
        .flat_map(|query| form_urlencoded::parse(query.as_bytes()))
        .find(|(name, _)| name == "shard")
        .and_then(|(_, n)| n.parse().ok());
    let Some(shard) = shard else {
        return (StatusCode::BAD_REQUEST, "shard is asked for").into_response();
    };
    let Ok(notes) = axum::body::to_bytes(body, MOST_NOTES_BYTES).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "too many notes at once").into_response();
    };
    match state.service.backend.settled_for_node(shard, &notes).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => refused(error),
    }
}

/// `POST /_orderly/shard-reset?shard=N&scope=messages` (or `scope=everything`): one shard's
/// part of a reset of every shard asked through another node.
pub(super) async fn reset(
    State(state): State<HttpState>,
    peer: Option<Extension<FromPeer>>,
    uri: Uri,
) -> Response {
    if let Some(refused) = unless_from_peer(peer) {
        return refused;
    }
    let (mut shard, mut scope) = (None, None);
    for (name, value) in
        (uri.query().into_iter()).flat_map(|q| form_urlencoded::parse(q.as_bytes()))
    {
        match (&*name, &*value) {
            ("shard", n) => shard = n.parse::<u32>().ok(),
            ("scope", "messages") => scope = Some(ResetScope::Messages),
            ("scope", "everything") => scope = Some(ResetScope::Everything),
            _ => {}
        }
    }
    let (Some(shard), Some(scope)) = (shard, scope) else {
        return (StatusCode::BAD_REQUEST, "shard and scope are asked for").into_response();
    };
    match state.service.backend.reset_for_node(shard, scope).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => refused(error),
    }
}

/// `GET /_orderly/shard-read?shard=N&read=queues&prefix=P` (or `read=topics`,
/// `read=naming-as-dead-letter-queue&arn=A`, `read=subscriptions`, `read=queue-overviews`,
/// `read=subscription-activity`, `read=signing-certificate&file=F`, or
/// `read=dead-letter-target&key=K`).
pub(super) async fn read(
    State(state): State<HttpState>,
    peer: Option<Extension<FromPeer>>,
    uri: Uri,
) -> Response {
    if let Some(refused) = unless_from_peer(peer) {
        return refused;
    }
    let backend = &state.service.backend;
    let answered = match read_of(&uri) {
        Some((shard, Asked::Names(read))) => (backend.read_for_node(shard, read).await)
            .map(|names| serde_json::to_vec(&names.iter().map(|n| &**n).collect::<Vec<_>>())),
        Some((shard, Asked::Target(key))) => (backend.queue_target_for_node(shard, &key))
            .await
            .map(|target| serde_json::to_vec(&target)),
        None => return (StatusCode::BAD_REQUEST, "shard and read are asked for").into_response(),
    };
    match answered {
        Ok(Ok(body)) => (StatusCode::OK, body).into_response(),
        Ok(Err(error)) => not_served(error.to_string()),
        Err(error) => refused(error),
    }
}

/// What a `GET /_orderly/shard-read` asks of a shard.
enum Asked {
    Names(ShardRead),
    /// A queue as another shard's rules read it (`QueueTarget`), by key.
    Target(String),
}

/// The shard and what a `GET /_orderly/shard-read` asks of it.
fn read_of(uri: &Uri) -> Option<(u32, Asked)> {
    let mut shard = None;
    let (mut kind, mut prefix, mut arn, mut key) = (None, String::new(), None, None);
    let mut file = None;
    for (name, value) in form_urlencoded::parse(uri.query()?.as_bytes()) {
        match &*name {
            "shard" => shard = Some(value.parse().ok()?),
            "read" => kind = Some(value.into_owned()),
            "prefix" => prefix = value.into_owned(),
            "arn" => arn = Some(value.into_owned()),
            "key" => key = Some(value.into_owned()),
            "file" => file = Some(value.into_owned()),
            _ => return None,
        }
    }
    let asked = match kind.as_deref()? {
        "queues" => Asked::Names(ShardRead::Queues(prefix)),
        "topics" => Asked::Names(ShardRead::Topics),
        "naming-as-dead-letter-queue" => Asked::Names(ShardRead::NamingAsDeadLetterQueue(arn?)),
        "subscriptions" => Asked::Names(ShardRead::Subscriptions),
        "queue-overviews" => Asked::Names(ShardRead::QueueOverviews),
        "subscription-activity" => Asked::Names(ShardRead::SubscriptionActivity),
        "signing-certificate" => Asked::Names(ShardRead::SigningCertificate(file?)),
        "dead-letter-target" => Asked::Target(key?),
        _ => return None,
    };
    Some((shard?, asked))
}

/// A request from another node this node did not act on (503, not served, for the asker to
/// try the shard's next leader), or, when it may have, a 500 saying so.
fn refused(error: BackendError) -> Response {
    match error {
        BackendError::Unconfirmed(cause) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("it may or may not have been done: {cause}"),
        )
            .into_response(),
        error => not_served(error.to_string()),
    }
}

fn not_served(message: String) -> Response {
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
    (response.headers_mut()).insert(NOT_SERVED, HeaderValue::from_static("1"));
    response
}

/// Pulls parcels from the node leading their source shard, as this node (`name`, announced in
/// the database).
pub struct Peers {
    pub standby: Arc<Standby>,
    pub name: String,
}

impl Peers {
    /// Shard `shard`'s leader, waiting while none is known (a node starting over, one just
    /// started), for as long as a request passed on would wait.
    async fn leader(&self, shard: u32) -> Result<String, BackendError> {
        let mut leaders = self.standby.shard_leaders();
        let deadline = tokio::time::Instant::now() + self.standby.leader_wait();
        loop {
            let known = (leaders.borrow_and_update().get(shard as usize)).cloned();
            if let Some(leader) = known.filter(|leader| !leader.is_empty()) {
                return Ok(leader);
            }
            let changed = tokio::time::timeout_at(deadline, leaders.changed()).await;
            if !matches!(changed, Ok(Ok(()))) {
                return Err(BackendError::Unavailable(format!(
                    "shard {shard}'s leader is not known"
                )));
            }
        }
    }

    /// GETs `path` with `query` of `leader`, as this node; the answer's body when it succeeded.
    async fn ask(
        &self,
        leader: &str,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<bytes::Bytes, BackendError> {
        let url = format!("{}{path}", leader.trim_end_matches('/'));
        let failed =
            |e: reqwest::Error| BackendError::Unavailable(format!("{leader}: {}", e.without_url()));
        let asked = (self.standby.client().get(&url))
            .query(query)
            .header(NODE, &self.name)
            .send()
            .await
            .map_err(failed)?;
        Ok(answered(leader, asked, MOST_READ_BYTES).await?)
    }
}

/// Largest answer to a pull this node reads: one holds `MOST_BYTES_AT_ONCE` of parcels, a few
/// bytes more for each parcel and for each pair asked (a pull's pairs are at most
/// `MOST_PULL_BYTES`); a node of an earlier build, which set no bound in bytes, or one that
/// misbehaves, is refused past it rather than held in memory.
const MOST_PULLED_BYTES: usize = 2 * (MOST_BYTES_AT_ONCE + MOST_PULL_BYTES);

/// Why an answer's body was not taken.
pub(super) enum Unread {
    /// It was longer than the bound (its length said, or read that far): not read further.
    TooLong(BackendError),
    /// It could not be read, or said the request failed.
    Failed(BackendError),
}

impl From<Unread> for BackendError {
    fn from(unread: Unread) -> BackendError {
        match unread {
            Unread::TooLong(error) | Unread::Failed(error) => error,
        }
    }
}

/// The body of `leader`'s answer when it succeeded, read only up to `most` bytes (an answer
/// longer is not read further, and its connection dropped).
pub(super) async fn answered(
    leader: &str,
    mut answer: reqwest::Response,
    most: usize,
) -> Result<bytes::Bytes, Unread> {
    let failed = |e: reqwest::Error| {
        Unread::Failed(BackendError::Unavailable(format!(
            "{leader}: {}",
            e.without_url()
        )))
    };
    let too_long = || {
        Unread::TooLong(BackendError::Unavailable(format!(
            "{leader} answered more than {most} bytes"
        )))
    };
    let status = answer.status();
    // A length said is room made at once, within the bound.
    let length = answer.content_length().unwrap_or(0);
    if length > most as u64 {
        return Err(too_long());
    }
    let mut bytes = bytes::BytesMut::with_capacity(length as usize);
    while let Some(chunk) = answer.chunk().await.map_err(failed)? {
        if bytes.len() + chunk.len() > most {
            return Err(too_long());
        }
        bytes.extend_from_slice(&chunk);
    }
    let bytes = bytes.freeze();
    if !status.is_success() {
        let said = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
        return Err(Unread::Failed(BackendError::Unavailable(format!(
            "{leader} answered {status}: {said}"
        ))));
    }
    Ok(bytes)
}

impl OtherNodes for Peers {
    fn queue_target<'a>(&'a self, shard: u32, key: &'a str) -> Answer<'a, Option<QueueTarget>> {
        Box::pin(async move {
            let leader = self.leader(shard).await?;
            let query = [
                ("shard", shard.to_string()),
                ("read", "dead-letter-target".to_string()),
                ("key", key.to_string()),
            ];
            let bytes = self.ask(&leader, READS, &query).await?;
            serde_json::from_slice(&bytes)
                .map_err(|e| BackendError::Unavailable(format!("{leader} answered: {e}")))
        })
    }

    fn read<'a>(&'a self, shard: u32, read: &'a ShardRead) -> Answer<'a, Vec<String>> {
        Box::pin(async move {
            let leader = self.leader(shard).await?;
            let mut query = vec![("shard", shard.to_string())];
            match read {
                ShardRead::Queues(prefix) => {
                    query.push(("read", "queues".into()));
                    query.push(("prefix", prefix.clone()));
                }
                ShardRead::Topics => query.push(("read", "topics".into())),
                ShardRead::NamingAsDeadLetterQueue(arn) => {
                    query.push(("read", "naming-as-dead-letter-queue".into()));
                    query.push(("arn", arn.clone()));
                }
                ShardRead::Subscriptions => query.push(("read", "subscriptions".into())),
                ShardRead::QueueOverviews => query.push(("read", "queue-overviews".into())),
                ShardRead::SubscriptionActivity => {
                    query.push(("read", "subscription-activity".into()))
                }
                ShardRead::SigningCertificate(file) => {
                    query.push(("read", "signing-certificate".into()));
                    query.push(("file", file.clone()));
                }
            }
            let bytes = self.ask(&leader, READS, &query).await?;
            serde_json::from_slice(&bytes)
                .map_err(|e| BackendError::Unavailable(format!("{leader} answered: {e}")))
        })
    }

    fn reset(&self, shard: u32, scope: ResetScope) -> Answer<'_, ()> {
        Box::pin(async move {
            let leader = self.leader(shard).await?;
            let url = format!("{}{RESET}", leader.trim_end_matches('/'));
            let scope = match scope {
                ResetScope::Messages => "messages",
                ResetScope::Everything => "everything",
            };
            let failed = |e: reqwest::Error| {
                BackendError::Unavailable(format!("{leader}: {}", e.without_url()))
            };
            let done = (self.standby.client().post(&url))
                .query(&[("shard", shard.to_string()), ("scope", scope.to_string())])
                .header(NODE, &self.name)
                .send()
                .await
                .map_err(failed)?;
            let status = done.status();
            if !status.is_success() {
                let said = done.text().await.unwrap_or_default();
                let said = said.chars().take(300).collect::<String>();
                return Err(BackendError::Unavailable(format!(
                    "{leader} answered {status}: {said}"
                )));
            }
            Ok(())
        })
    }

    fn settled(&self, shard: u32, notes: Vec<u8>) -> Answer<'_, ()> {
        Box::pin(async move {
            let leader = self.leader(shard).await?;
            let url = format!("{}{SETTLED}", leader.trim_end_matches('/'));
            let failed = |e: reqwest::Error| {
                BackendError::Unavailable(format!("{leader}: {}", e.without_url()))
            };
            let told = (self.standby.client().post(&url))
                .query(&[("shard", shard.to_string())])
                .header(NODE, &self.name)
                .body(notes)
                .send()
                .await
                .map_err(failed)?;
            if !told.status().is_success() {
                return Err(BackendError::Unavailable(format!(
                    "{leader} answered {}",
                    told.status()
                )));
            }
            Ok(())
        })
    }

    fn leaders(&self) -> Vec<String> {
        self.standby.shard_leaders().borrow().clone()
    }

    fn pull<'a>(
        &'a self,
        leader: &'a str,
        pairs: &'a [PairPull],
        max: usize,
    ) -> Answer<'a, bytes::Bytes> {
        Box::pin(async move {
            let mut max = u32::try_from(max).unwrap_or(u32::MAX);
            let url = format!("{}{PARCELS}", leader.trim_end_matches('/'));
            let failed = |e: reqwest::Error| {
                BackendError::Unavailable(format!("{leader}: {}", e.without_url()))
            };
            loop {
                let body = encode_pull(pairs, max)
                    .map_err(|e| BackendError::Unavailable(format!("pull not encoded: {e}")))?;
                // A connection that hangs holds no node's pairs past the pull's own wait.
                let asked = (self.standby.client().post(&url))
                    .timeout(PULL_WAIT + Duration::from_secs(10))
                    .header(NODE, &self.name)
                    .body(body)
                    .send()
                    .await
                    .map_err(failed)?;
                // A node of an earlier build answers as many parcels as asked whatever their
                // size: asked again for half as many (its parcels are forgotten only as far as
                // the pull says they were applied, so nothing is lost by asking again).
                match answered(leader, asked, MOST_PULLED_BYTES).await {
                    Ok(bytes) => return Ok(bytes),
                    Err(Unread::TooLong(_)) if max > 1 => max /= 2,
                    Err(unread) => return Err(unread.into()),
                }
            }
        })
    }
}
