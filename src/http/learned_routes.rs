//! The shard a queue's messages or a topic's publishes were last found in, so that a node
//! passes the next request on that queue (a send, a receive, a delete, a change of visibility)
//! or topic (a publish) straight to the shard's leader, without first running it here up to
//! the backend's refusal: signatures, the payload's decoding and the service's checks are then
//! done once, by the leader, instead of twice. What a request names decides its shard (the
//! caller's access key and signing region give the namespace, the queue URL or topic ARN the
//! queue or topic), and the shard count never changes. A route that is wrong all the same (two
//! keys of one digest, a request the service reads otherwise, nodes configured apart) costs a
//! hop: the leader finds the shard again and serves the request, or refuses it as not served,
//! and it is run here (`shard_routing`), which learns the shard again.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use axum::http::request::Parts;
use axum::http::{header, Method};
use serde::Deserialize;

use super::node_headers::FORWARDED;
use super::reply::is_json;

/// Most routes remembered: past it, one is forgotten for each one learned.
const MOST: usize = 4096;

/// Longest queue URL or topic ARN learned: a key is a digest whatever its length, but reading
/// ahead a name longer than any AWS hands out (hashing it on every request) buys nothing.
const LONGEST_NAME: usize = 1024;

/// The actions on one queue's messages, whose shard is the queue's.
const ON_MESSAGES: [&str; 7] = [
    "SendMessage",
    "SendMessageBatch",
    "ReceiveMessage",
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
];

/// What a route is known by: a digest, under this process's own random key, of the caller's
/// access key, its signing region and the queue URL or topic ARN, as the request gave them,
/// so each route takes a few bytes whatever the request named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct RouteKey(u64);

#[derive(Default)]
pub(super) struct LearnedRoutes {
    shards: RwLock<HashMap<RouteKey, u32>>,
    /// Whether any route was learned: until then (a node alone, always) no request is read
    /// ahead.
    any: AtomicBool,
    digest: RandomState,
}

impl LearnedRoutes {
    pub(super) fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    pub(super) fn shard_of(&self, key: RouteKey) -> Option<u32> {
        let shards = self.shards.read().unwrap_or_else(|p| p.into_inner());
        shards.get(&key).copied()
    }

    pub(super) fn learn(&self, key: RouteKey, shard: u32) {
        let mut shards = self.shards.write().unwrap_or_else(|p| p.into_inner());
        if shards.len() >= MOST && !shards.contains_key(&key) {
            if let Some(some) = shards.keys().next().copied() {
                shards.remove(&some);
            }
        }
        shards.insert(key, shard);
        self.any.store(true, Ordering::Relaxed);
    }

    /// The key of a request from a client on one queue's messages (in the JSON protocol or the
    /// Query protocol's body), or of a publish to a topic (signed in its header, or not
    /// signed), or none: anything else is run here first.
    pub(super) fn key_of(&self, parts: &Parts, body: &[u8]) -> Option<RouteKey> {
        let headers = &parts.headers;
        // Parameters in the URL (a presigned request, a Query request's own) and an encoded
        // body are the service's to read: only a plain body is read ahead.
        if parts.method != Method::POST
            || parts.uri.query().is_some()
            || headers.contains_key(FORWARDED)
            || headers.contains_key(header::CONTENT_ENCODING)
        {
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
        let (kind, named) = if is_json(headers) {
            let target = headers.get("x-amz-target")?.to_str().ok()?;
            if !ON_MESSAGES.contains(&target.strip_prefix("AmazonSQS.")?) {
                return None;
            }
            // The top level's QueueUrl, given once: a payload that repeats it or is not JSON is
            // run here, where it is refused as it should be.
            let named: Named = serde_json::from_slice(body).ok()?;
            ("sqs", named.queue_url)
        } else {
            form_route(body)?
        };
        if named.len() > LONGEST_NAME {
            return None;
        }
        let key = (kind, access_key, region, &*named);
        Some(RouteKey(self.digest.hash_one(key)))
    }
}

#[derive(Deserialize)]
struct Named<'a> {
    #[serde(rename = "QueueUrl", borrow)]
    queue_url: Cow<'a, str>,
}

/// The queue or topic a Query request's body names, for an action on a queue's messages (the
/// queue's `QueueUrl`, SQS's `Version` or none) or a publish (`Publish` or `PublishBatch`, the
/// topic's `TopicArn`, SNS's `Version` or none), or none. A name the client encoded, or one of
/// these given twice, is left to the service to read.
fn form_route(body: &[u8]) -> Option<(&'static str, Cow<'static, str>)> {
    let (mut action, mut version, mut queue, mut topic) = (None, None, None, None);
    // Every segment is looked at (a name given twice, or encoded, is the service's to
    // read), so the body's separators are found many bytes at a time: a publish's body is
    // mostly its messages.
    let ends = memchr::memchr_iter(b'&', body).chain(std::iter::once(body.len()));
    let mut start = 0;
    for end in ends {
        let segment = &body[start..end];
        start = end + 1;
        if segment.is_empty() {
            continue;
        }
        let at = memchr::memchr(b'=', segment)?;
        let (name, value) = (&segment[..at], &segment[at + 1..]);
        let slot = match name {
            b"Action" => &mut action,
            b"Version" => &mut version,
            b"QueueUrl" => &mut queue,
            b"TopicArn" => &mut topic,
            _ if name.iter().any(|&b| b == b'%' || b == b'+') => return None,
            _ => continue,
        };
        if slot.replace(value).is_some() {
            return None;
        }
    }
    let action = action?;
    let (kind, named, version_of_its_service) =
        if ON_MESSAGES.iter().any(|on| on.as_bytes() == action) {
            ("sqs", queue?, &b"2012-11-05"[..])
        } else if matches!(action, b"Publish" | b"PublishBatch") {
            ("sns", topic?, &b"2010-03-31"[..])
        } else {
            return None;
        };
    if version.is_some_and(|v| v != version_of_its_service) {
        return None;
    }
    let named = crate::protocol::form::decode_one(named)?;
    Some((kind, Cow::Owned(named)))
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

    fn form(authorization: &str) -> Parts {
        let request = Request::post("/")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::AUTHORIZATION, authorization);
        request.body(()).expect("a request").into_parts().0
    }

    const SIGNED: &str = "AWS4-HMAC-SHA256 Credential=AKID/20261204/eu-west-1/sqs/aws4_request, \
                          SignedHeaders=host, Signature=00";

    #[test]
    fn a_request_on_a_queues_messages_is_known_by_its_caller_region_and_queue() {
        let routes = LearnedRoutes::default();
        let body = br#"{"Entries":[{"Id":"a","MessageBody":"{\"QueueUrl\":\"x\"}"}],"QueueUrl":"http://h/1/q"}"#;
        let send = routes.key_of(&parts("AmazonSQS.SendMessageBatch", Some(SIGNED)), body);
        let receive = routes.key_of(
            &parts("AmazonSQS.ReceiveMessage", Some(SIGNED)),
            br#"{"QueueUrl":"http://h/1/q","MaxNumberOfMessages":10}"#,
        );
        assert!(send.is_some());
        assert_eq!(send, receive);
        let other_queue = routes.key_of(
            &parts("AmazonSQS.ReceiveMessage", Some(SIGNED)),
            br#"{"QueueUrl":"http://h/1/r"}"#,
        );
        let other_region = SIGNED.replace("eu-west-1", "us-east-1");
        let other_region = routes.key_of(
            &parts("AmazonSQS.SendMessageBatch", Some(&other_region)),
            body,
        );
        let other_key = SIGNED.replace("AKID", "AKIE");
        let other_key = routes.key_of(&parts("AmazonSQS.SendMessage", Some(&other_key)), body);
        let unsigned = routes.key_of(&parts("AmazonSQS.SendMessageBatch", None), body);
        let all = [send, other_queue, other_region, other_key, unsigned];
        for (n, key) in all.iter().enumerate() {
            assert!(key.is_some());
            assert!(!all[n + 1..].contains(key), "{n}");
        }
        // Another process keys them apart.
        let elsewhere = LearnedRoutes::default();
        assert_ne!(
            elsewhere.key_of(&parts("AmazonSQS.SendMessageBatch", Some(SIGNED)), body),
            send
        );
    }

    #[test]
    fn other_actions_and_payloads_that_are_not_plain_are_run_here_first() {
        let routes = LearnedRoutes::default();
        let body = br#"{"QueueUrl":"http://h/1/q"}"#;
        for target in ["AmazonSQS.SetQueueAttributes", "AmazonSQS.DeleteQueue", "x"] {
            assert_eq!(routes.key_of(&parts(target, Some(SIGNED)), body), None);
        }
        let send = parts("AmazonSQS.SendMessage", Some(SIGNED));
        let long = format!(
            r#"{{"QueueUrl":"http://h/1/{}"}}"#,
            "q".repeat(LONGEST_NAME)
        );
        for body in [
            &br#"{"QueueUrl":"http://h/1/q","QueueUrl":"http://h/1/r"}"#[..],
            br#"{"MessageBody":"b"}"#,
            b"QueueUrl=http://h/1/q",
            long.as_bytes(),
        ] {
            assert_eq!(routes.key_of(&send, body), None);
        }
        let mut forwarded = send.clone();
        forwarded
            .headers
            .insert(FORWARDED, "1".parse().expect("a value"));
        assert_eq!(routes.key_of(&forwarded, body), None);
    }

    #[test]
    fn the_query_protocol_is_known_by_its_caller_region_and_topic_or_queue() {
        let routes = LearnedRoutes::default();
        let signed = SIGNED.replace("/sqs/", "/sns/");
        let arn = "TopicArn=arn%3Aaws%3Asns%3Aeu-west-1%3A000000000000%3Aprices.fifo";
        let batch = format!(
            "Action=PublishBatch&Version=2010-03-31&{arn}&\
             PublishBatchRequestEntries.member.1.Id=1&\
             PublishBatchRequestEntries.member.1.Message=TopicArn%3Dx+y"
        );
        let key = routes.key_of(&form(&signed), batch.as_bytes());
        assert!(key.is_some());
        // The ARN as decoded: the same written plain.
        let plain = "Action=Publish&TopicArn=arn:aws:sns:eu-west-1:000000000000:prices.fifo";
        assert_eq!(routes.key_of(&form(&signed), plain.as_bytes()), key);
        let single = format!("{arn}&Message=m&Action=Publish");
        assert_eq!(routes.key_of(&form(&signed), single.as_bytes()), key);
        // Empty segments are passed over, wherever they are.
        let spaced = format!("&{arn}&&Message=m&Action=Publish&");
        assert_eq!(routes.key_of(&form(&signed), spaced.as_bytes()), key);
        let other = plain.replace("prices", "quotes");
        assert_ne!(routes.key_of(&form(&signed), other.as_bytes()), key);
        for body in [
            format!("Action=Publish&Version=2012-11-05&{arn}"),
            format!("Action=Publish&{arn}&{arn}"),
            format!("Action=Publish&Action=Publish&{arn}"),
            format!("Action=CreateTopic&{arn}"),
            format!("Action=Publish&Topic%41rn=arn%3Ax&{arn}"),
            "Action=Publish&TargetArn=arn%3Aaws%3Asns%3Aeu-west-1%3A0%3At".to_string(),
            format!("Action=Publish&{arn}&Message"),
            String::new(),
            "&&".to_string(),
        ] {
            assert_eq!(
                routes.key_of(&form(&signed), body.as_bytes()),
                None,
                "{body}"
            );
        }
        // SQS's Query protocol, known as the JSON protocol's request on the same queue is.
        let sqs = routes.key_of(
            &form(SIGNED),
            b"Action=SendMessage&QueueUrl=http%3A%2F%2Fh%2F1%2Fq&MessageBody=b",
        );
        let json = routes.key_of(
            &parts("AmazonSQS.SendMessage", Some(SIGNED)),
            br#"{"QueueUrl":"http://h/1/q"}"#,
        );
        assert!(sqs.is_some());
        assert_eq!(sqs, json);
        for body in [
            &b"Action=SendMessage&Version=2010-03-31&QueueUrl=http%3A%2F%2Fh%2F1%2Fq"[..],
            b"Action=SendMessage&TopicArn=arn%3Aaws%3Asns%3Aeu-west-1%3A0%3At",
            b"Action=Publish&QueueUrl=http%3A%2F%2Fh%2F1%2Fq",
            b"Action=PurgeQueue&QueueUrl=http%3A%2F%2Fh%2F1%2Fq",
        ] {
            assert_eq!(routes.key_of(&form(SIGNED), body), None);
        }
        // A topic's key is never a queue's.
        let queue = routes.key_of(
            &parts("AmazonSQS.SendMessage", Some(SIGNED)),
            br#"{"QueueUrl":"arn:aws:sns:eu-west-1:000000000000:prices.fifo"}"#,
        );
        assert!(queue.is_some());
        assert_ne!(queue, key);
    }

    #[test]
    fn routes_are_bounded_one_forgotten_for_each_learned_past_the_bound() {
        let routes = LearnedRoutes::default();
        assert!(!routes.any());
        for n in 0..MOST as u64 {
            routes.learn(RouteKey(n), 1);
        }
        assert!(routes.any());
        assert_eq!(routes.shard_of(RouteKey(0)), Some(1));
        routes.learn(RouteKey(0), 2);
        assert_eq!(routes.shard_of(RouteKey(0)), Some(2), "replaced in place");
        let held = || routes.shards.read().expect("held").len();
        assert_eq!(held(), MOST);
        routes.learn(RouteKey(MOST as u64), 3);
        assert_eq!(held(), MOST, "one forgotten for the one learned");
        assert_eq!(routes.shard_of(RouteKey(MOST as u64)), Some(3));
    }
}
