//! `X-Amzn-Trace-Id`: a send carrying the header stores it as the `AWSTraceHeader` system attribute
//! (unless the request names one itself), and a publish passes it to its SQS copies.

use aws_sdk_sqs::types::MessageSystemAttributeName as S;

use crate::common::{create_queue, signed, start, subscribe, Server};

const TRACE: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

/// A signed request carrying the trace header; returns its status.
async fn traced(server: &Server, target: Option<&str>, body: String) -> u16 {
    let mut request = reqwest::Client::new()
        .post(server.url())
        .header("x-amzn-trace-id", TRACE)
        .body(body);
    request = match target {
        Some(target) => request
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", format!("AmazonSQS.{target}"))
            .header("authorization", signed("sqs")),
        None => request
            .header("content-type", "application/x-www-form-urlencoded")
            .header("authorization", signed("sns")),
    };
    request.send().await.unwrap().status().as_u16()
}

/// The trace headers of every message in the queue, in no particular order.
async fn trace_headers(server: &Server, url: &str) -> Vec<Option<String>> {
    let received = server
        .sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .message_system_attribute_names(S::AwsTraceHeader)
        .send()
        .await
        .unwrap();
    received
        .messages
        .unwrap_or_default()
        .iter()
        .map(|m| {
            m.attributes()
                .and_then(|a| a.get(&S::AwsTraceHeader))
                .cloned()
        })
        .collect()
}

#[tokio::test]
async fn a_send_carrying_the_header_stores_it_as_aws_trace_header() {
    let server = start().await;
    let url = create_queue(&server, "traced", &[]).await;
    let single = format!(r#"{{"QueueUrl":"{url}","MessageBody":"one"}}"#);
    assert_eq!(traced(&server, Some("SendMessage"), single).await, 200);
    let batch = format!(
        r#"{{"QueueUrl":"{url}","Entries":[{{"Id":"a","MessageBody":"two"}},{{"Id":"b","MessageBody":"three"}}]}}"#
    );
    assert_eq!(traced(&server, Some("SendMessageBatch"), batch).await, 200);
    // A trace header named in the request wins over the HTTP header.
    let own = format!(
        r#"{{"QueueUrl":"{url}","MessageBody":"four","MessageSystemAttributes":{{"AWSTraceHeader":{{"DataType":"String","StringValue":"Root=own"}}}}}}"#
    );
    assert_eq!(traced(&server, Some("SendMessage"), own).await, 200);
    let mut found = trace_headers(&server, &url).await;
    found.sort();
    let expected = [Some(TRACE), Some(TRACE), Some(TRACE), Some("Root=own")];
    assert_eq!(found, expected.map(|t| t.map(String::from)));
}

#[tokio::test]
async fn a_publish_carrying_the_header_passes_it_to_its_queue_copies() {
    let server = start().await;
    let topic = server.sns.create_topic().name("t").send().await.unwrap();
    let topic = topic.topic_arn.unwrap();
    let url = create_queue(&server, "copies", &[]).await;
    subscribe(&server, &topic, "copies", true).await;
    let body = format!(
        "Action=Publish&Version=2010-03-31&TopicArn={}&Message=hello",
        topic.replace(':', "%3A")
    );
    assert_eq!(traced(&server, None, body).await, 200);
    // A copy into a queue of another shard lands a moment later, as on AWS.
    crate::common::carried(&server).await;
    assert_eq!(
        trace_headers(&server, &url).await,
        [Some(TRACE.to_string())]
    );
}
