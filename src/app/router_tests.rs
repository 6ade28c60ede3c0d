//! The HTTP router over a service built as `app` builds it, without a socket (`tower::ServiceExt::oneshot`): the worked request/response
//! examples of the API facts (`../shared/spec/sqs.md` §8, `sns.md` §8, taken from AWS's
//! documentation) replayed byte for byte, in each protocol, and their answers compared with the
//! documented ones. What AWS makes up per request (request, message and subscription ids,
//! receipt handles, sequence numbers, timestamps, sender ids) is masked on both sides; MD5s,
//! element names and order, ARNs, URLs and status are compared exactly.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use clap::Parser;
use http_body_util::BodyExt;
use tower::ServiceExt;

use crate::clock::ManualClock;
use crate::config::Config;
use crate::engine::Timestamp;
use crate::http::body::BodyLimits;
use crate::http::browser::BrowserRules;

/// Headers the documented examples leave out: the host the queue URLs name, and a signature
/// for `service` (unsigned requests may only read; the signing service tells SNS from SQS).
/// The signature's region is eu-west-1: apps are built with it as their home region, so the
/// examples' queue URLs name no region.
fn added_headers(service: &str) -> [(&'static str, String); 2] {
    [
        ("Host", "localhost:9324".into()),
        (
            "Authorization",
            format!(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260210/eu-west-1/{service}/aws4_request, \
                 SignedHeaders=host, Signature=0"
            ),
        ),
    ]
}

fn app(region: &str, account: &str) -> Router {
    let config = Config::parse_from([
        "orderly",
        "--ephemeral",
        "--region",
        region,
        "--account-id",
        account,
    ]);
    let clock = Arc::new(ManualClock::new(Timestamp(1_735_689_600_000)));
    let service = super::build_service(&config, clock, "127.0.0.1:9324".parse().unwrap())
        .unwrap()
        .service;
    let body = BodyLimits {
        max_bytes: config.max_request_bytes,
        timeout: Duration::from_secs(30),
    };
    let browser = BrowserRules {
        cors_allow: Vec::new(),
        allow_host: Vec::new(),
        loopback_only: true,
        hostname: None,
    };
    crate::http::router(service, body, browser, ("http", None), None)
}

/// Sends a request written as on the wire (`METHOD PATH HTTP/1.1`, headers, blank line,
/// body); the documented examples break long bodies over lines, which are joined again.
async fn replay(app: &Router, raw: &str) -> (StatusCode, String) {
    replay_to(app, "sqs", raw).await
}

/// `replay`, signed for `service`.
async fn replay_to(app: &Router, service: &str, raw: &str) -> (StatusCode, String) {
    let raw = raw.trim_start();
    let (head, body) = raw.split_once("\n\n").unwrap_or((raw, ""));
    let mut lines = head.lines();
    let start: Vec<&str> = lines.next().unwrap().split(' ').collect();
    let mut request = Request::builder().method(start[0]).uri(start[1]);
    for (name, value) in added_headers(service) {
        request = request.header(name, value);
    }
    for line in lines {
        let (name, value) = line.split_once(": ").unwrap();
        request = request.header(name, value);
    }
    let body: String = if body.trim_start().starts_with('{') {
        body.to_string()
    } else {
        body.lines().map(str::trim).collect()
    };
    let answer = app
        .clone()
        .oneshot(request.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = answer.status();
    let bytes = answer.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// Elements and JSON members whose values AWS makes up per request.
const MADE_UP: &[&str] = &[
    "RequestId",
    "MessageId",
    "ReceiptHandle",
    "SequenceNumber",
    "SenderId",
    "SentTimestamp",
    "ApproximateFirstReceiveTimestamp",
];

/// An XML document without its declaration, whitespace between elements, or made-up values.
fn masked_xml(xml: &str) -> String {
    let mut text: String = xml
        .trim()
        .trim_start_matches(r#"<?xml version="1.0"?>"#)
        .lines()
        .map(str::trim)
        .collect();
    for name in MADE_UP {
        let open = format!("<{name}>");
        let mut from = 0;
        while let Some(at) = text[from..].find(&open) {
            let start = from + at + open.len();
            let end = start + text[start..].find('<').unwrap();
            text.replace_range(start..end, "*");
            from = start;
        }
        // Attribute pairs: <Name>X</Name><Value>…</Value>.
        let pair = format!("<Name>{name}</Name><Value>");
        let mut from = 0;
        while let Some(at) = text[from..].find(&pair) {
            let start = from + at + pair.len();
            let end = start + text[start..].find('<').unwrap();
            text.replace_range(start..end, "*");
            from = start;
        }
    }
    // Attributes are a map: their order is not part of the answer.
    if let (Some(first), Some(last)) = (text.find("<Attribute>"), text.rfind("</Attribute>")) {
        let end = last + "</Attribute>".len();
        let mut items: Vec<String> = text[first..end]
            .split_inclusive("</Attribute>")
            .map(str::to_string)
            .collect();
        items.sort();
        text.replace_range(first..end, &items.concat());
    }
    // A subscription ARN ends in an id made up per subscription.
    if let Some(at) = text.find("<SubscriptionArn>") {
        let end = at + text[at..].find("</SubscriptionArn>").unwrap();
        let id = at + text[at..end].rfind(':').unwrap() + 1;
        text.replace_range(id..end, "*");
    }
    text
}

fn masked_json(json: &str) -> serde_json::Value {
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(members) => {
                for (name, member) in members.iter_mut() {
                    if MADE_UP.contains(&name.as_str()) && member.is_string() {
                        *member = "*".into();
                    } else {
                        walk(member);
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut value: serde_json::Value = serde_json::from_str(json).unwrap();
    walk(&mut value);
    value
}

/// Replays `request` (signed for `service`) and compares its XML answer with `documented`.
async fn expect_xml(app: &Router, service: &str, request: &str, documented: &str) {
    let (status, body) = replay_to(app, service, request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(masked_xml(&body), masked_xml(documented));
}

/// Replays `request` and compares its XML error answer and status with `documented`.
async fn expect_xml_error(
    app: &Router,
    service: &str,
    (request, status): (&str, StatusCode),
    documented: &str,
) {
    let (answered, body) = replay_to(app, service, request).await;
    assert_eq!(answered, status, "{body}");
    assert_eq!(masked_xml(&body), masked_xml(documented));
}

/// Replays `request` and compares its JSON answer with `documented`.
async fn expect_json(app: &Router, request: &str, documented: &str) {
    let (status, body) = replay(app, request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(masked_json(&body), masked_json(documented));
}

async fn create_fifo_queue(app: &Router, name: &str) {
    let (status, body) = replay(
        app,
        &format!(
            "POST / HTTP/1.1\nContent-Type: application/x-www-form-urlencoded\n\n\
             Action=CreateQueue&QueueName={name}&Attribute.1.Name=FifoQueue&Attribute.1.Value=true"
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn the_json_examples_of_the_sqs_spec_answer_as_documented() {
    let app = app("eu-west-1", "000000000000");
    // The developer guide's JSON CreateQueue request.
    expect_json(
        &app,
        r#"
POST / HTTP/1.1
X-Amz-Target: AmazonSQS.CreateQueue
Content-Type: application/x-amz-json-1.0

{ "QueueName":"MyQueue", "Attributes": { "VisibilityTimeout": "40" }, "tags": { "QueueType": "Production" } }"#,
        r#"{"QueueUrl":"http://localhost:9324/000000000000/MyQueue"}"#,
    )
    .await;
    create_fifo_queue(&app, "orders.fifo").await;

    // §8.1
    expect_json(
        &app,
        r#"
POST / HTTP/1.1
Content-Type: application/x-amz-json-1.0
X-Amz-Target: AmazonSQS.SendMessage

{"QueueUrl":"http://localhost:9324/000000000000/orders.fifo",
 "MessageBody":"hello",
 "MessageGroupId":"g1",
 "MessageDeduplicationId":"d1",
 "MessageAttributes":{"Foo":{"DataType":"String","StringValue":"Bar"}}}"#,
        r#"{"MD5OfMessageBody":"5d41402abc4b2a76b9719d911017c592",
 "MD5OfMessageAttributes":"ae7155c6026991b6d54b11589678bf9c",
 "MessageId":"8a3c2d15-6f0e-4e7b-9a41-0c5d3b2e7f90",
 "SequenceNumber":"18888000000000000001"}"#,
    )
    .await;

    // §8.3
    expect_json(
        &app,
        r#"
POST / HTTP/1.1
Content-Type: application/x-amz-json-1.0
X-Amz-Target: AmazonSQS.ReceiveMessage

{"QueueUrl":"http://localhost:9324/000000000000/orders.fifo",
 "MaxNumberOfMessages":10,"WaitTimeSeconds":20,"VisibilityTimeout":60,
 "MessageSystemAttributeNames":["All"],"MessageAttributeNames":["All"],
 "ReceiveRequestAttemptId":"attempt-42"}"#,
        r#"{"Messages":[{
  "MessageId":"8a3c2d15-6f0e-4e7b-9a41-0c5d3b2e7f90",
  "ReceiptHandle":"AQEBexampleOpaqueHandle==",
  "MD5OfBody":"5d41402abc4b2a76b9719d911017c592",
  "Body":"hello",
  "Attributes":{"SenderId":"AIDAEXAMPLEID","SentTimestamp":"1735689600000",
                "ApproximateReceiveCount":"1","ApproximateFirstReceiveTimestamp":"1735689601234",
                "SequenceNumber":"18888000000000000001","MessageDeduplicationId":"d1",
                "MessageGroupId":"g1"},
  "MD5OfMessageAttributes":"ae7155c6026991b6d54b11589678bf9c",
  "MessageAttributes":{"Foo":{"StringValue":"Bar","DataType":"String"}}}]}"#,
    )
    .await;
}

#[tokio::test]
async fn the_query_examples_of_the_sqs_spec_answer_as_documented() {
    let app = app("eu-west-1", "000000000000");
    create_fifo_queue(&app, "orders.fifo").await;
    // §8.2
    expect_xml(
        &app,
        "sqs",
        "
POST / HTTP/1.1
Content-Type: application/x-www-form-urlencoded; charset=utf-8

Action=SendMessage&Version=2012-11-05
&QueueUrl=http%3A%2F%2Flocalhost%3A9324%2F000000000000%2Forders.fifo
&MessageBody=hello&MessageGroupId=g1&MessageDeduplicationId=d1
&MessageAttribute.1.Name=Foo&MessageAttribute.1.Value.DataType=String
&MessageAttribute.1.Value.StringValue=Bar",
        r#"<?xml version="1.0"?>
<SendMessageResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">
  <SendMessageResult>
    <MessageId>8a3c2d15-6f0e-4e7b-9a41-0c5d3b2e7f90</MessageId>
    <MD5OfMessageBody>5d41402abc4b2a76b9719d911017c592</MD5OfMessageBody>
    <MD5OfMessageAttributes>ae7155c6026991b6d54b11589678bf9c</MD5OfMessageAttributes>
    <SequenceNumber>18888000000000000001</SequenceNumber>
  </SendMessageResult>
  <ResponseMetadata><RequestId>4e6f1a2b-93c1-4d52-8d0e-2f1b7c6a9e01</RequestId></ResponseMetadata>
</SendMessageResponse>"#,
    )
    .await;

    // §8.4
    expect_xml(
        &app,
        "sqs",
        "
POST / HTTP/1.1
Content-Type: application/x-www-form-urlencoded; charset=utf-8

Action=ReceiveMessage&Version=2012-11-05
&QueueUrl=http%3A%2F%2Flocalhost%3A9324%2F000000000000%2Forders.fifo
&MaxNumberOfMessages=10&WaitTimeSeconds=20
&AttributeName.1=All&MessageAttributeName.1=All",
        r#"<?xml version="1.0"?>
<ReceiveMessageResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">
  <ReceiveMessageResult>
    <Message>
      <MessageId>8a3c2d15-6f0e-4e7b-9a41-0c5d3b2e7f90</MessageId>
      <ReceiptHandle>AQEBexampleOpaqueHandle==</ReceiptHandle>
      <MD5OfBody>5d41402abc4b2a76b9719d911017c592</MD5OfBody>
      <Body>hello</Body>
      <Attribute><Name>SenderId</Name><Value>AIDAEXAMPLEID</Value></Attribute>
      <Attribute><Name>SentTimestamp</Name><Value>1735689600000</Value></Attribute>
      <Attribute><Name>ApproximateReceiveCount</Name><Value>1</Value></Attribute>
      <Attribute><Name>ApproximateFirstReceiveTimestamp</Name><Value>1735689601234</Value></Attribute>
      <Attribute><Name>MessageGroupId</Name><Value>g1</Value></Attribute>
      <Attribute><Name>MessageDeduplicationId</Name><Value>d1</Value></Attribute>
      <Attribute><Name>SequenceNumber</Name><Value>18888000000000000001</Value></Attribute>
      <MD5OfMessageAttributes>ae7155c6026991b6d54b11589678bf9c</MD5OfMessageAttributes>
      <MessageAttribute>
        <Name>Foo</Name>
        <Value><StringValue>Bar</StringValue><DataType>String</DataType></Value>
      </MessageAttribute>
    </Message>
  </ReceiveMessageResult>
  <ResponseMetadata><RequestId>0d9b8e57-1c3a-4a0f-b1d2-7e6c5f4a3b21</RequestId></ResponseMetadata>
</ReceiveMessageResponse>"#,
    )
    .await;
}

#[tokio::test]
async fn the_examples_of_the_sns_spec_answer_as_documented() {
    // The examples' region and account, so ARNs compare exactly.
    let app = app("eu-west-1", "123456789012");
    let sns = "POST / HTTP/1.1\nContent-Type: application/x-www-form-urlencoded; charset=utf-8\n\n";
    expect_xml(
        &app,
        "sns",
        &format!("{sns}Action=CreateTopic&Version=2010-03-31&Name=orders.fifo&Attributes.entry.1.key=FifoTopic&Attributes.entry.1.value=true&Attributes.entry.2.key=ContentBasedDeduplication&Attributes.entry.2.value=true&Tags.member.1.Key=team&Tags.member.1.Value=checkout"),
        r#"<CreateTopicResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">
  <CreateTopicResult>
    <TopicArn>arn:aws:sns:eu-west-1:123456789012:orders.fifo</TopicArn>
  </CreateTopicResult>
  <ResponseMetadata><RequestId>1b0b9a3e-5c1e-4d7e-9f0a-2a4b6c8d0e12</RequestId></ResponseMetadata>
</CreateTopicResponse>"#,
    )
    .await;

    create_fifo_queue(&app, "orders-worker.fifo").await;
    expect_xml(
        &app,
        "sns",
        &format!("{sns}Action=Subscribe&Version=2010-03-31&TopicArn=arn%3Aaws%3Asns%3Aeu-west-1%3A123456789012%3Aorders.fifo&Protocol=sqs&Endpoint=arn%3Aaws%3Asqs%3Aeu-west-1%3A123456789012%3Aorders-worker.fifo&Attributes.entry.1.key=RawMessageDelivery&Attributes.entry.1.value=true&Attributes.entry.2.key=FilterPolicy&Attributes.entry.2.value=%7B%22tenant%22%3A%5B%22acme%22%5D%7D&ReturnSubscriptionArn=true"),
        r#"<SubscribeResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">
  <SubscribeResult>
    <SubscriptionArn>arn:aws:sns:eu-west-1:123456789012:orders.fifo:3f6d2c1b-8a9e-4b7c-9d0e-1f2a3b4c5d6e</SubscriptionArn>
  </SubscribeResult>
  <ResponseMetadata><RequestId>7d2e</RequestId></ResponseMetadata>
</SubscribeResponse>"#,
    )
    .await;

    expect_xml(
        &app,
        "sns",
        &format!("{sns}Action=Publish&Version=2010-03-31&TopicArn=arn%3Aaws%3Asns%3Aeu-west-1%3A123456789012%3Aorders.fifo&Message=%7B%22orderId%22%3A7%7D&MessageGroupId=customer-17&MessageDeduplicationId=order-7-created&MessageAttributes.entry.1.Name=tenant&MessageAttributes.entry.1.Value.DataType=String&MessageAttributes.entry.1.Value.StringValue=acme"),
        r#"<PublishResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">
  <PublishResult>
    <MessageId>0d3c6a55-7a2e-5b0f-a7d1-4f0e9b1c2d33</MessageId>
    <SequenceNumber>10000000000000003000</SequenceNumber>
  </PublishResult>
  <ResponseMetadata><RequestId>c4f1</RequestId></ResponseMetadata>
</PublishResponse>"#,
    )
    .await;
    // An SNS error has no <Detail/> (SQS's have one).
    expect_xml_error(
        &app,
        "sns",
        (&format!("{sns}Action=Publish&Version=2010-03-31&TopicArn=arn%3Aaws%3Asns%3Aeu-west-1%3A123456789012%3Aorders.fifo&Message=x"), StatusCode::BAD_REQUEST),
        r#"<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">
  <Error>
    <Type>Sender</Type>
    <Code>InvalidParameter</Code>
    <Message>Invalid parameter: The MessageGroupId parameter is required for FIFO topics</Message>
  </Error>
  <RequestId>e8a1</RequestId>
</ErrorResponse>"#,
    )
    .await;
    // The raw, filtered copy reached the subscribed queue as the bare message.
    let (_, body) = replay(
        &app,
        "POST / HTTP/1.1\nContent-Type: application/x-amz-json-1.0\nX-Amz-Target: AmazonSQS.ReceiveMessage\n\n\
         {\"QueueUrl\":\"http://localhost:9324/123456789012/orders-worker.fifo\"}",
    )
    .await;
    assert_eq!(
        masked_json(&body)["Messages"][0]["Body"],
        r#"{"orderId":7}"#
    );
}

#[tokio::test]
async fn an_undeclared_action_is_refused_in_each_protocol() {
    let app = app("eu-west-1", "000000000000");
    let (status, body) = replay(
        &app,
        "POST / HTTP/1.1\nContent-Type: application/x-amz-json-1.0\nX-Amz-Target: AmazonSQS.Frobnicate\n\n{}",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("UnknownOperationException"), "{body}");
    let (status, body) = replay_to(
        &app,
        "sns",
        "POST / HTTP/1.1\nContent-Type: application/x-www-form-urlencoded\n\nAction=Frobnicate&Version=2010-03-31",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("<Code>InvalidAction</Code>"), "{body}");
}

/// A signature scoped to one service on a call of the other (AWS: 403 SignatureDoesNotMatch),
/// in each protocol; whatever the scope, an SQS call keeps SQS's shape.
#[tokio::test]
async fn a_signature_scoped_to_another_service_is_refused() {
    let app = app("us-east-1", "000000000000");
    for (service, raw, shape) in [
        (
            "sns",
            "POST / HTTP/1.1\nContent-Type: application/x-amz-json-1.0\nX-Amz-Target: AmazonSQS.ListQueues\n\n{}",
            "SignatureDoesNotMatchException",
        ),
        (
            "sns",
            "POST / HTTP/1.1\nContent-Type: application/x-www-form-urlencoded\n\nAction=ListQueues&Version=2012-11-05",
            "xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\"",
        ),
        (
            "sqs",
            "POST / HTTP/1.1\nContent-Type: application/x-www-form-urlencoded\n\nAction=ListTopics&Version=2010-03-31",
            "xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"",
        ),
        (
            "sqs",
            "POST / HTTP/1.1\nContent-Type: application/x-www-form-urlencoded\n\nAction=ListTopics",
            "xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"",
        ),
    ] {
        let (status, body) = replay_to(&app, service, raw).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{raw}: {body}");
        let called = if service == "sns" { "sqs" } else { "sns" };
        let message = format!("Credential should be scoped to correct service: '{called}'. ");
        assert!(body.contains(&message), "{raw}: {body}");
        assert!(body.contains(shape), "{raw}: {body}");
    }
    // The right scope, and an action of both without a Version: the scope says which.
    let (status, body) = replay_to(
        &app,
        "sns",
        "POST / HTTP/1.1\nContent-Type: application/x-www-form-urlencoded\n\nAction=ListTopics&Version=2010-03-31",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[test]
fn the_region_is_read_from_the_credential_scope_or_a_presigned_url() {
    use axum::http::{HeaderMap, HeaderValue, Uri};
    let mut headers = HeaderMap::new();
    headers.insert(
        "authorization",
        HeaderValue::from_static(
            "AWS4-HMAC-SHA256 Credential=AKID/20260210/eu-west-1/sqs/aws4_request, SignedHeaders=host, Signature=0",
        ),
    );
    let root: Uri = "/".parse().unwrap();
    assert_eq!(
        crate::http::aws::signing_region(&headers, &root).as_deref(),
        Some("eu-west-1")
    );
    let presigned: Uri = "/?Action=ListQueues&X-Amz-Credential=AKID%2F20260210%2Fap-south-1%2Fsqs%2Faws4_request&X-Amz-Signature=0"
        .parse()
        .unwrap();
    assert_eq!(
        crate::http::aws::signing_region(&HeaderMap::new(), &presigned).as_deref(),
        Some("ap-south-1")
    );
    assert_eq!(
        crate::http::aws::signing_region(&HeaderMap::new(), &root),
        None
    );
}
