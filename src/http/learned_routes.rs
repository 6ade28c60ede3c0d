//! The shard a queue's messages were last found in, so that a node passes the next request on
//! that queue (a send, a receive, a delete, a change of visibility) straight to the shard's
//! leader, without first running it here up to the backend's refusal: signatures, the whole
//! payload's decoding and the service's checks are then done once, by the leader, instead of
//! twice. What a request names decides its shard alone (the caller's access key and signing
//! region give the namespace, the queue URL the queue), and the shard count never changes, so
//! what was learned stays true; a request sent where it is not served falls back to the path
//! that learns (`shard_routing`).

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::request::Parts;
use axum::http::{header, Method};
use serde::Deserialize;

use super::node_headers::FORWARDED;

/// Most routes remembered: past it, all are forgotten and learned again (one request each).
const MOST: usize = 4096;

/// The actions on one queue's messages, whose shard is the queue's (JSON protocol).
const ON_MESSAGES: [&str; 7] = [
    "AmazonSQS.SendMessage",
    "AmazonSQS.SendMessageBatch",
    "AmazonSQS.ReceiveMessage",
    "AmazonSQS.DeleteMessage",
    "AmazonSQS.DeleteMessageBatch",
    "AmazonSQS.ChangeMessageVisibility",
    "AmazonSQS.ChangeMessageVisibilityBatch",
];

/// What the routes are known by: the caller's access key, its signing region and the queue
/// URL, as the request gave them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct RouteKey(String);

#[derive(Default)]
pub(super) struct LearnedRoutes {
    shards: Mutex<HashMap<RouteKey, u32>>,
}

impl LearnedRoutes {
    pub(super) fn is_empty(&self) -> bool {
        self.held().is_empty()
    }

    pub(super) fn shard_of(&self, key: &RouteKey) -> Option<u32> {
        self.held().get(key).copied()
    }

    pub(super) fn learn(&self, key: RouteKey, shard: u32) {
        let mut shards = self.held();
        if shards.len() >= MOST && !shards.contains_key(&key) {
            shards.clear();
        }
        shards.insert(key, shard);
    }

    /// A route that led to a node that did not take the request: learned again next time.
    pub(super) fn forget(&self, key: &RouteKey) {
        self.held().remove(key);
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<RouteKey, u32>> {
        self.shards.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Deserialize)]
struct Named<'a> {
    #[serde(rename = "QueueUrl", borrow)]
    queue_url: std::borrow::Cow<'a, str>,
}

impl RouteKey {
    /// The key of a request from a client on one queue's messages in the JSON protocol
    /// (signed in its header, or not signed), or none: anything else is run here first.
    pub(super) fn of(parts: &Parts, body: &[u8]) -> Option<RouteKey> {
        let headers = &parts.headers;
        if parts.method != Method::POST
            || parts.uri.query().is_some()
            || headers.contains_key(FORWARDED)
            || headers.contains_key(header::CONTENT_ENCODING)
        {
            return None;
        }
        let action = headers.get("x-amz-target")?.to_str().ok()?;
        if !ON_MESSAGES.contains(&action) {
            return None;
        }
        let (access_key, region) = match headers.get(header::AUTHORIZATION) {
            Some(authorization) => {
                let credential = authorization.to_str().ok()?.split("Credential=").nth(1)?;
                let mut scope = credential.split([',', ' ']).next()?.split('/');
                (scope.next()?, scope.nth(1)?)
            }
            None => ("", ""),
        };
        // Only the top level's QueueUrl, once: a payload that repeats it or is not JSON is run
        // here, where it is refused as it should be.
        let named: Named = serde_json::from_slice(body).ok()?;
        let url = named.queue_url;
        let mut key = String::with_capacity(access_key.len() + region.len() + url.len() + 2);
        for part in [access_key, region, &url] {
            key.push_str(part);
            key.push('\n');
        }
        Some(RouteKey(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn parts(target: &str, authorization: Option<&str>) -> Parts {
        let mut request = Request::post("/").header("x-amz-target", target);
        if let Some(authorization) = authorization {
            request = request.header(header::AUTHORIZATION, authorization);
        }
        request.body(()).expect("a request").into_parts().0
    }

    const SIGNED: &str = "AWS4-HMAC-SHA256 Credential=AKID/20261204/eu-west-1/sqs/aws4_request, \
                          SignedHeaders=host, Signature=00";

    #[test]
    fn a_request_on_a_queues_messages_is_known_by_its_caller_region_and_queue() {
        let body = br#"{"Entries":[{"Id":"a","MessageBody":"{\"QueueUrl\":\"x\"}"}],"QueueUrl":"http://h/1/q"}"#;
        let send = RouteKey::of(&parts("AmazonSQS.SendMessageBatch", Some(SIGNED)), body);
        let receive = RouteKey::of(
            &parts("AmazonSQS.ReceiveMessage", Some(SIGNED)),
            br#"{"QueueUrl":"http://h/1/q","MaxNumberOfMessages":10}"#,
        );
        assert_eq!(send, receive);
        assert_eq!(
            send,
            Some(RouteKey("AKID\neu-west-1\nhttp://h/1/q\n".into()))
        );
        let other_region = SIGNED.replace("eu-west-1", "us-east-1");
        assert_ne!(
            RouteKey::of(
                &parts("AmazonSQS.SendMessageBatch", Some(&other_region)),
                body
            ),
            send
        );
        assert_eq!(
            RouteKey::of(&parts("AmazonSQS.SendMessageBatch", None), body),
            Some(RouteKey("\n\nhttp://h/1/q\n".into()))
        );
    }

    #[test]
    fn other_actions_and_payloads_that_are_not_plain_are_run_here_first() {
        let body = br#"{"QueueUrl":"http://h/1/q"}"#;
        for target in ["AmazonSQS.SetQueueAttributes", "AmazonSQS.DeleteQueue", "x"] {
            assert_eq!(RouteKey::of(&parts(target, Some(SIGNED)), body), None);
        }
        let send = parts("AmazonSQS.SendMessage", Some(SIGNED));
        for body in [
            &br#"{"QueueUrl":"http://h/1/q","QueueUrl":"http://h/1/r"}"#[..],
            br#"{"MessageBody":"b"}"#,
            b"QueueUrl=http://h/1/q",
        ] {
            assert_eq!(RouteKey::of(&send, body), None);
        }
        let mut forwarded = send.clone();
        forwarded
            .headers
            .insert(FORWARDED, "1".parse().expect("a value"));
        assert_eq!(RouteKey::of(&forwarded, body), None);
    }

    #[test]
    fn routes_are_bounded_and_forgotten_on_request() {
        let routes = LearnedRoutes::default();
        let key = |n: usize| RouteKey(format!("k{n}"));
        for n in 0..MOST {
            routes.learn(key(n), 1);
        }
        assert_eq!(routes.shard_of(&key(0)), Some(1));
        routes.learn(key(0), 2);
        assert_eq!(
            routes.shard_of(&key(0)),
            Some(2),
            "a known key is replaced in place"
        );
        routes.learn(key(MOST), 3);
        assert_eq!(routes.held().len(), 1, "full, the routes start again");
        assert_eq!(routes.shard_of(&key(MOST)), Some(3));
        routes.forget(&key(MOST));
        assert_eq!(routes.shard_of(&key(MOST)), None);
    }
}
