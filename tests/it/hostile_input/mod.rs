//! Hostile input: random and half-valid requests of every action, in the SQS JSON, SQS Query
//! and SNS Query protocols, against the real server. Every answer must be a success or a
//! well-formed client error (never a 5xx, never a dropped connection), XML answers must hold
//! only characters XML allows, and messages stored before the barrage must come out intact.
//!
//! `ORDERLY_HOSTILE_CASES` sets the requests per protocol (default 300).

mod sns_requests;
mod sqs_requests;
mod values;

use std::cell::RefCell;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};

use crate::common;
use sns_requests::sns_query_request;
use sqs_requests::{json_request, sqs_query_request};
use values::{queue_url, HANDLE, SUBSCRIPTION};

#[derive(Debug, Clone)]
enum Hostile {
    Json {
        action: String,
        body: Vec<u8>,
    },
    /// `get`: the parameters go in the URL, as in a SubscribeURL or UnsubscribeURL.
    SqsQuery {
        params: Vec<(String, String)>,
        path: String,
        get: bool,
    },
    SnsQuery {
        params: Vec<(String, String)>,
        get: bool,
    },
}

/// A long poll would make the barrage slow, not wrong: waits of 1–20 s become 0.
fn no_long_polls_json(value: &mut Value) {
    if let Value::Object(m) = value {
        for (k, v) in m.iter_mut() {
            if k == "WaitTimeSeconds" || k == "ReceiveMessageWaitTimeSeconds" {
                if waits(v) {
                    *v = Value::from(0);
                }
            } else {
                no_long_polls_json(v);
            }
        }
    }
}

fn waits(v: &Value) -> bool {
    let n = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    n.is_some_and(|n| n > 0.0 && n < 21.0)
}

fn no_long_polls_query(params: &mut [(String, String)]) {
    let slow_attribute: Vec<String> = params
        .iter()
        .filter(|(k, v)| k.starts_with("Attribute.") && v == "ReceiveMessageWaitTimeSeconds")
        .map(|(k, _)| k.replace(".Name", ".Value"))
        .collect();
    for (k, v) in params.iter_mut() {
        if (k == "WaitTimeSeconds" || slow_attribute.contains(k)) && waits(&Value::from(v.as_str()))
        {
            *v = "0".into();
        }
    }
}

fn form(params: &[(String, String)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish()
}

/// Characters XML 1.0 allows, raw or as character references.
fn xml_allowed(c: u32) -> bool {
    matches!(c, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

fn check_xml(body: &str) -> Result<(), TestCaseError> {
    if let Some(bad) = body.chars().find(|c| !xml_allowed(*c as u32)) {
        return Err(TestCaseError::fail(format!(
            "XML holds U+{:04X}: {body:.300}",
            bad as u32
        )));
    }
    for reference in body.split("&#").skip(1) {
        let end = reference.find(';').unwrap_or(0);
        let digits = &reference[..end];
        let code = match digits.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => digits.parse(),
        };
        prop_assert!(
            code.is_ok_and(xml_allowed),
            "XML refers to a character it may not hold (&#{digits};): {body:.300}"
        );
    }
    Ok(())
}

/// SQS errors as the JSON protocol names them (the shape after `#`), their Query code and
/// status: spec sqs.md 1.4, plus the JSON protocol's own errors for unreadable requests.
const SQS_ERRORS: &[(&str, &str, u16)] = &[
    (
        "QueueDoesNotExist",
        "AWS.SimpleQueueService.NonExistentQueue",
        400,
    ),
    ("QueueNameExists", "QueueAlreadyExists", 400),
    (
        "QueueDeletedRecently",
        "AWS.SimpleQueueService.QueueDeletedRecently",
        400,
    ),
    (
        "PurgeQueueInProgress",
        "AWS.SimpleQueueService.PurgeQueueInProgress",
        403,
    ),
    (
        "TooManyEntriesInBatchRequest",
        "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        400,
    ),
    (
        "EmptyBatchRequest",
        "AWS.SimpleQueueService.EmptyBatchRequest",
        400,
    ),
    (
        "BatchEntryIdsNotDistinct",
        "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        400,
    ),
    (
        "BatchRequestTooLong",
        "AWS.SimpleQueueService.BatchRequestTooLong",
        400,
    ),
    (
        "InvalidBatchEntryId",
        "AWS.SimpleQueueService.InvalidBatchEntryId",
        400,
    ),
    (
        "MessageNotInflight",
        "AWS.SimpleQueueService.MessageNotInflight",
        400,
    ),
    (
        "UnsupportedOperation",
        "AWS.SimpleQueueService.UnsupportedOperation",
        400,
    ),
    ("OverLimit", "OverLimit", 403),
    (
        "ResourceNotFoundException",
        "ResourceNotFoundException",
        404,
    ),
    ("InvalidAttributeName", "InvalidAttributeName", 400),
    ("InvalidAttributeValue", "InvalidAttributeValue", 400),
    ("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 400),
    ("InvalidMessageContents", "InvalidMessageContents", 400),
    (
        "InvalidParameterValueException",
        "InvalidParameterValue",
        400,
    ),
    ("MissingRequiredParameterException", "MissingParameter", 400),
    ("SerializationException", "SerializationException", 400),
    ("UnknownOperationException", "InvalidAction", 400),
    // A body past --max-request-bytes: AWS's front end answers 413 too.
    (
        "RequestEntityTooLargeException",
        "RequestEntityTooLarge",
        413,
    ),
];

/// SNS error codes and their statuses: spec sns.md 1.4, the SNS service model's for the SMS
/// sandbox (VerificationException, UserError), plus the generic Query ones.
const SNS_ERRORS: &[(&str, u16)] = &[
    ("InvalidParameter", 400),
    ("EndpointDisabled", 400),
    ("PlatformApplicationDisabled", 400),
    ("VerificationException", 400),
    ("UserError", 400),
    ("ParameterValueInvalid", 400),
    ("NotFound", 404),
    ("ResourceNotFound", 404),
    ("AuthorizationError", 403),
    ("TopicLimitExceeded", 403),
    ("SubscriptionLimitExceeded", 403),
    ("FilterPolicyLimitExceeded", 403),
    ("ReplayLimitExceeded", 403),
    ("TagLimitExceeded", 400),
    ("InvalidState", 400),
    ("BatchEntryIdsNotDistinct", 400),
    ("BatchRequestTooLong", 400),
    ("EmptyBatchRequest", 400),
    ("InvalidBatchEntryId", 400),
    ("TooManyEntriesInBatchRequest", 400),
    ("ValidationError", 400),
    ("InvalidAction", 400),
    ("UnknownOperationException", 404),
    ("MissingParameter", 400),
    // Unsigned requests for actions that change state (see `http/unsigned.rs`).
    ("MissingAuthenticationToken", 403),
    ("RequestEntityTooLarge", 413),
];

/// A Query error's code and status are a pair one of the services answers. (An unsigned GET
/// of an action both services have, such as AddPermission, goes to SQS, so SNS requests may
/// get SQS's codes.)
fn known_query_error(code: &str, status: u16) -> bool {
    SQS_ERRORS.iter().any(|&(_, c, s)| (c, s) == (code, status))
        || SNS_ERRORS.contains(&(code, status))
}

struct Barrage {
    http: reqwest::Client,
    base: String,
    clock: std::sync::Arc<orderly::clock::ManualClock>,
    /// Receipt handles and subscription ARNs seen in answers, for `HANDLE` and `SUBSCRIPTION`.
    seen: RefCell<[Vec<String>; 2]>,
    sent: std::cell::Cell<usize>,
    /// Per protocol: (successes, errors).
    tally: RefCell<[(u32, u32); 3]>,
}

const SEEN: [(&str, &str); 2] = [(HANDLE, "ReceiptHandle"), (SUBSCRIPTION, "SubscriptionArn")];

impl Barrage {
    /// Moves the clock past the 60-second rules (purging again; recreating a deleted queue)
    /// and makes sure the target queues and topic exist and hold messages.
    async fn replenish(&self) {
        self.clock.advance_millis(61_000);
        let call = |action: &str, body: Value| {
            self.http
                .post(&self.base)
                .header("content-type", "application/x-amz-json-1.0")
                .header("x-amz-target", format!("AmazonSQS.{action}"))
                .body(body.to_string())
                .send()
        };
        for name in ["fz.fifo", "fz-dlq.fifo", "fz", "fz-dlq"] {
            let attributes = if name.ends_with(".fifo") {
                json!({"FifoQueue": "true"})
            } else {
                json!({})
            };
            // A queue whose attributes the barrage changed answers QueueNameExists: it is there.
            let _ = call(
                "CreateQueue",
                json!({"QueueName": name, "Attributes": attributes}),
            )
            .await;
        }
        for i in 0..5 {
            let n = self.sent.get() + i;
            let _ = call(
                "SendMessage",
                json!({"QueueUrl": queue_url("fz.fifo"), "MessageBody": format!("r{n}"),
                       "MessageGroupId": format!("g{}", n % 3), "MessageDeduplicationId": format!("r{n}")}),
            )
            .await;
            let _ = call(
                "SendMessage",
                json!({"QueueUrl": queue_url("fz"), "MessageBody": format!("r{n}")}),
            )
            .await;
        }
        let _ = self
            .http
            .post(&self.base)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[
                ("Action".into(), "CreateTopic".into()),
                ("Version".into(), "2010-03-31".into()),
                ("Name".into(), "ft.fifo".into()),
                ("Attributes.entry.1.key".into(), "FifoTopic".into()),
                ("Attributes.entry.1.value".into(), "true".into()),
            ]))
            .send()
            .await;
    }

    /// Puts values the server gave out in place of their placeholders.
    fn fill_in(&self, text: &str) -> String {
        let n = self.sent.get();
        let seen = self.seen.borrow();
        let mut text = text.to_string();
        for ((placeholder, _), values) in SEEN.iter().zip(seen.iter()) {
            if text.contains(placeholder) {
                let value = values
                    .get(n % values.len().max(1))
                    .map_or("none-yet", String::as_str);
                text = text.replace(placeholder, value);
            }
        }
        text
    }

    fn remember(&self, body: &str) {
        let mut seen = self.seen.borrow_mut();
        for ((_, name), values) in SEEN.iter().zip(seen.iter_mut()) {
            for part in body.split(name).skip(1) {
                // JSON: "Name":"value"; XML: <Name>value</Name>
                let rest = part.trim_start_matches(['"', ':', '>']);
                let end = rest.find(['"', '<']).unwrap_or(rest.len());
                if end > 20 {
                    values.push(rest[..end].to_string());
                }
            }
            let excess = values.len().saturating_sub(50);
            values.drain(..excess);
        }
    }

    async fn send(&self, request: &Hostile) -> Result<(), TestCaseError> {
        self.sent.set(self.sent.get() + 1);
        if self.sent.get().is_multiple_of(100) {
            self.replenish().await;
        }
        let (kind, action, response) = match request {
            Hostile::Json { action, body } => {
                let mut body = body.clone();
                if let Ok(mut value) = serde_json::from_slice::<Value>(&body) {
                    no_long_polls_json(&mut value);
                    body = serde_json::to_vec(&value).expect("json");
                }
                let body = self.fill_in(&String::from_utf8_lossy(&body));
                let response = self
                    .http
                    .post(&self.base)
                    .header("content-type", "application/x-amz-json-1.0")
                    .header("x-amz-target", format!("AmazonSQS.{action}"))
                    .header("authorization", common::signed("sqs"))
                    .body(body)
                    .send()
                    .await;
                (0, action.clone(), response)
            }
            Hostile::SqsQuery { params, get, .. } | Hostile::SnsQuery { params, get } => {
                let path = match request {
                    Hostile::SqsQuery { path, .. } => path.trim_start_matches('/'),
                    _ => "",
                };
                let mut params = params.clone();
                no_long_polls_query(&mut params);
                for (_, v) in params.iter_mut() {
                    *v = self.fill_in(v);
                }
                let sns = matches!(request, Hostile::SnsQuery { .. });
                let service = if sns { "sns" } else { "sqs" };
                let form = form(&params);
                // A URL holds a few kilobytes at most; longer parameters are posted. A GET
                // goes unsigned, as a SubscribeURL or UnsubscribeURL is followed.
                let response = if *get && form.len() < 8_000 {
                    // Every other GET is presigned; the rest go unsigned, as a SubscribeURL
                    // is followed, and may only read.
                    let presigned = if self.sent.get().is_multiple_of(2) {
                        format!("&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20260101%2Fus-east-1%2F{service}%2Faws4_request&X-Amz-Signature=0")
                    } else {
                        String::new()
                    };
                    self.http
                        .get(format!("{}{path}?{form}{presigned}", self.base))
                        .send()
                        .await
                } else {
                    self.http
                        .post(format!("{}{path}", self.base))
                        .header("content-type", "application/x-www-form-urlencoded")
                        .header(
                            "authorization",
                            format!("AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=0"),
                        )
                        .body(form)
                        .send()
                        .await
                };
                (if sns { 2 } else { 1 }, params[0].1.clone(), response)
            }
        };
        let response = response
            .map_err(|e| TestCaseError::fail(format!("no answer (connection dropped?): {e}")))?;
        let status = response.status().as_u16();
        let query_error = response
            .headers()
            .get("x-amzn-query-error")
            .and_then(|h| h.to_str().ok())
            .map(str::to_string);
        let body = response
            .text()
            .await
            .map_err(|e| TestCaseError::fail(format!("answer cut off: {e}")))?;
        prop_assert!(status < 500, "{status} for {request:?}: {body:.500}");
        {
            let mut tally = self.tally.borrow_mut();
            if status == 200 {
                tally[kind].0 += 1;
            } else {
                tally[kind].1 += 1;
            }
        }
        if kind == 0 {
            let value: Value = serde_json::from_str(&body)
                .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {body:.300}")))?;
            prop_assert!(value.is_object(), "not a JSON object: {body:.300}");
            if status != 200 {
                prop_assert!(
                    value["__type"].is_string() && value["message"].is_string(),
                    "JSON error without __type or message: {body:.300}"
                );
                prop_assert!(
                    query_error.as_deref().is_some_and(|h| h.ends_with(";Sender")),
                    "JSON error without x-amzn-query-error ...;Sender ({query_error:?}): {body:.300}"
                );
                let shape = value["__type"].as_str().unwrap_or("");
                let shape = shape.rsplit('#').next().unwrap_or(shape);
                let code = query_error
                    .as_deref()
                    .and_then(|h| h.strip_suffix(";Sender"));
                prop_assert!(
                    SQS_ERRORS.contains(&(shape, code.unwrap_or(""), status)),
                    "({shape}, {code:?}, {status}) is no error of the spec's table"
                );
            }
        } else {
            check_xml(&body)?;
            if status == 200 {
                prop_assert!(
                    body.contains(&format!("<{action}Response")),
                    "200 without <{action}Response>: {body:.300}"
                );
            } else {
                prop_assert!(
                    body.contains("<ErrorResponse") && body.contains("<Type>Sender</Type>"),
                    "{status} without an ErrorResponse naming a Sender fault: {body:.300}"
                );
                let code = common::xml_text(&body, "Code").unwrap_or("");
                prop_assert!(
                    known_query_error(code, status),
                    "({code}, {status}) is no error of the spec's tables: {body:.300}"
                );
            }
        }
        if status == 200 {
            self.remember(&body);
        }
        Ok(())
    }
}

const SEALED: [&str; 4] = ["first", "second\r\nline", "thïrd", "fourth"];

fn cases(default: u32) -> u32 {
    std::env::var("ORDERLY_HOSTILE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn server_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("server runtime")
}

/// The queue nothing in the barrage can reach, and the queues and topic it aims at.
async fn prepare(server: &common::Server) {
    let sealed = common::fifo_queue(server, "sealed.fifo", &[]).await;
    for (i, body) in SEALED.iter().enumerate() {
        server
            .sqs
            .send_message()
            .queue_url(&sealed)
            .message_body(*body)
            .message_group_id("g")
            .message_deduplication_id(format!("d{i}"))
            .message_attributes(
                "n",
                aws_sdk_sqs::types::MessageAttributeValue::builder()
                    .data_type("Number")
                    .string_value(i.to_string())
                    .build()
                    .expect("attribute"),
            )
            .send()
            .await
            .expect("send to the sealed queue");
    }
    let fz = common::fifo_queue(server, "fz.fifo", &[]).await;
    common::fifo_queue(server, "fz-dlq.fifo", &[]).await;
    common::create_queue(server, "fz", &[]).await;
    common::create_queue(server, "fz-dlq", &[]).await;
    for i in 0..20 {
        server
            .sqs
            .send_message()
            .queue_url(&fz)
            .message_body(format!("m{i}"))
            .message_group_id(format!("g{}", i % 3))
            .message_deduplication_id(format!("m{i}"))
            .send()
            .await
            .expect("send");
    }
    let topic = common::fifo_topic(server, "ft.fifo").await;
    common::subscribe(server, &topic, "fz.fifo", true).await;
}

/// Fires `cases` generated requests of each protocol at the server and checks every answer.
fn barrage(base: String, clock: std::sync::Arc<orderly::clock::ManualClock>, cases: u32) {
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let barrage = Barrage {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client"),
        base,
        clock,
        seen: RefCell::new([Vec::new(), Vec::new()]),
        sent: std::cell::Cell::new(0),
        tally: RefCell::new([(0, 0); 3]),
    };
    for (name, strategy) in [
        ("SQS JSON", json_request()),
        ("SQS Query", sqs_query_request()),
        ("SNS Query", sns_query_request()),
    ] {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        if let Err(failure) = runner.run(&strategy, |request| {
            client_runtime.block_on(barrage.send(&request))
        }) {
            panic!("{name}: {failure}");
        }
    }
    let tally = *barrage.tally.borrow();
    println!("(successes, errors) per protocol: {tally:?}");
    // The generators reach past the first checks: some requests of every protocol succeed.
    for (name, (ok, errors)) in ["SQS JSON", "SQS Query", "SNS Query"].iter().zip(tally) {
        assert!(
            ok > 0 && errors > 0,
            "{name}: {ok} successes, {errors} errors"
        );
    }
}

/// The sealed queue still holds its messages, in order, with their attributes.
async fn check_sealed(server: &common::Server) {
    let sealed = server
        .sqs
        .get_queue_url()
        .queue_name("sealed.fifo")
        .send()
        .await
        .expect("the server still answers")
        .queue_url
        .expect("url");
    let got = server
        .sqs
        .receive_message()
        .queue_url(&sealed)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .expect("receive")
        .messages
        .unwrap_or_default();
    let bodies: Vec<&str> = got.iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, SEALED, "the sealed queue's messages, in order");
    for (i, m) in got.iter().enumerate() {
        let n = m
            .message_attributes()
            .and_then(|a| a.get("n"))
            .and_then(|v| v.string_value());
        assert_eq!(n, Some(i.to_string().as_str()));
    }
}

#[test]
fn hostile_requests_get_client_errors_and_leave_stored_messages_alone() {
    let runtime = server_runtime();
    let (server, clock) = runtime.block_on(async {
        let (server, clock) = common::start_with_manual_clock().await;
        prepare(&server).await;
        (server, clock)
    });
    barrage(server.url() + "/", clock, cases(300));
    runtime.block_on(check_sealed(&server));
}

/// A durable server that can be stopped: (server, stop, the task serving it).
async fn start_durable(
    dir: &std::path::Path,
    clock: std::sync::Arc<orderly::clock::ManualClock>,
) -> (
    common::Server,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let mut config = orderly::config::Config::ephemeral();
    config.ephemeral = false;
    config.data_dir = dir.to_path_buf();
    let app = orderly::app::App::bind_with_clock(&config, clock)
        .await
        .expect("bind");
    let addr = app.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(app.serve(async {
        let _ = stopped.await;
    }));
    let server = common::Server {
        addr,
        sqs: common::client(addr),
        sns: common::sns_client(addr),
        others: Vec::new(),
    };
    (server, stop, serving)
}

/// Whatever the barrage stored is logged in a form the next start reads back: the server
/// restarts on the same directory, keeps the sealed messages and takes new ones.
#[test]
fn hostile_requests_leave_a_log_that_restarts() {
    let dir = tempfile::tempdir().expect("data dir");
    let runtime = server_runtime();
    let clock = common::manual_clock();
    let (server, stop, serving) = runtime.block_on(async {
        let started = start_durable(dir.path(), clock.clone()).await;
        prepare(&started.0).await;
        started
    });
    barrage(server.url() + "/", clock.clone(), cases(300) / 3);
    runtime.block_on(async {
        stop.send(()).expect("stop");
        serving.await.expect("join").expect("served");
        let (server, _stop, _serving) = start_durable(dir.path(), clock).await;
        check_sealed(&server).await;
        let url = server
            .sqs
            .get_queue_url()
            .queue_name("sealed.fifo")
            .send()
            .await
            .expect("url")
            .queue_url
            .expect("url");
        server
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body("after the restart")
            .message_group_id("g")
            .message_deduplication_id("after")
            .send()
            .await
            .expect("the restarted server takes new messages");
    });
}
