//! `--clock manual`: the server's clock moves only through `POST /_orderly/clock`, so a
//! 5-minute deduplication window and a 12-hour visibility timeout pass at once, in each SQS
//! protocol.

use aws_sdk_sqs::types::QueueAttributeName as A;
use orderly::config::Config;

use crate::common::{query, start, start_with, xml_text, Server};

async fn manual() -> Server {
    let args = [
        "orderly",
        "--bind",
        "127.0.0.1:0",
        "--ephemeral",
        "--clock",
        "manual",
    ];
    let config = <Config as clap::Parser>::parse_from(args);
    start_with(config).await
}

/// Posts to the clock endpoint; answers (status, JSON body).
async fn clock(server: &Server, body: &str) -> (u16, serde_json::Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/_orderly/clock", server.url()))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (
        status,
        serde_json::from_str(&response.text().await.unwrap()).unwrap(),
    )
}

#[tokio::test]
async fn the_clock_is_moved_only_with_the_flag() {
    let server = start().await;
    let (status, body) = clock(&server, r#"{"advance":"5m"}"#).await;
    assert_eq!(status, 403, "{body}");
    let server = manual().await;
    let (status, before) = clock(&server, r#"{"advance":"0s"}"#).await;
    assert_eq!(status, 200);
    let start = before["epochMillis"].as_u64().unwrap();
    let (_, after) = clock(&server, r#"{"advance":"1h 30m"}"#).await;
    assert_eq!(after["epochMillis"].as_u64().unwrap(), start + 90 * 60_000);
    // Set: forward only.
    let (status, _) = clock(&server, &format!(r#"{{"set":{}}}"#, start + 100 * 60_000)).await;
    assert_eq!(status, 200);
    let (status, body) = clock(&server, r#"{"set":"2001-01-01T00:00:00Z"}"#).await;
    assert_eq!(status, 409, "{body}");
    // Months and years (no fixed length: `5M` is no typo of minutes to be undone), less than a
    // millisecond and a bare number are refused, and move nothing.
    for bad in [
        "{}",
        r#"{"advance":"soon"}"#,
        "[1]",
        r#"{"advance":"1s","set":5}"#,
        r#"{"advance":"5M"}"#,
        r#"{"advance":"1y"}"#,
        r#"{"advance":"1 month"}"#,
        r#"{"advance":"1ns"}"#,
        r#"{"advance":"1500us"}"#,
        r#"{"advance":300}"#,
    ] {
        assert_eq!(clock(&server, bad).await.0, 400, "{bad}");
    }
    // A time with an offset from UTC is that instant (2040-01-01T00:00:00.5+02:00 is
    // 2039-12-31T22:00:00.5Z).
    let (status, body) = clock(&server, r#"{"set":"2040-01-01T00:00:00.5+02:00"}"#).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["now"], "2039-12-31T22:00:00.500Z");
    let (status, body) = clock(&server, r#"{"set":"2040-01-01t00:00:00z"}"#).await;
    assert_eq!(
        (status, &body["now"]),
        (200, &serde_json::json!("2040-01-01T00:00:00.000Z"))
    );
    let (_, body) = clock(&server, r#"{"advance":"0s"}"#).await;
    let start = body["epochMillis"].as_u64().unwrap() - 100 * 60_000;
    // Time as the server tells it, standing still while nobody moves it.
    let read = reqwest::get(format!("{}/_orderly/clock", server.url()))
        .await
        .unwrap();
    let read: serde_json::Value = serde_json::from_str(&read.text().await.unwrap()).unwrap();
    assert_eq!(read["epochMillis"].as_u64().unwrap(), start + 100 * 60_000);
}

/// Times past what RFC 3339's four-digit years can write are refused, and the clock stays: a
/// message's times (and its deadlines, up to retention's 14 days ahead) still read back.
#[tokio::test]
async fn the_clock_goes_no_later_than_the_wire_formats_can_write() {
    let server = manual().await;
    let queue = crate::common::create_queue(&server, "late", &[]).await;
    let (_, before) = clock(&server, r#"{"advance":"0s"}"#).await;
    for (body, why) in [
        (
            r#"{"set":"9999-12-31T23:59:59Z"}"#,
            "the last second of year 9999",
        ),
        (r#"{"set":253402300800000}"#, "year 10000"),
        (r#"{"set":18446744073709551615}"#, "u64::MAX milliseconds"),
        (r#"{"advance":"4000000d"}"#, "past year 9999"),
        (
            r#"{"advance":"18446744073709551615s"}"#,
            "u64::MAX seconds on",
        ),
    ] {
        let (status, answer) = clock(&server, body).await;
        assert_eq!(status, 400, "{why}: {answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .contains("9999-12-01T00:00:00"),
            "{why}: {answer}"
        );
    }
    let (_, unmoved) = clock(&server, r#"{"advance":"0s"}"#).await;
    assert_eq!(unmoved["epochMillis"], before["epochMillis"]);
    // The latest time allowed, then everything that writes times.
    let (status, at) = clock(&server, r#"{"set":"9999-12-01T00:00:00Z"}"#).await;
    assert_eq!(status, 200, "{at}");
    assert_eq!(at["now"], "9999-12-01T00:00:00.000Z");
    assert_eq!(clock(&server, r#"{"advance":"1ms"}"#).await.0, 400);
    server
        .sqs
        .send_message()
        .queue_url(&queue)
        .message_body("at the end of time")
        .delay_seconds(900)
        .send()
        .await
        .unwrap();
    let peeked = reqwest::get(format!("{}/_orderly/queues/late/messages", server.url()))
        .await
        .unwrap();
    assert_eq!(peeked.status().as_u16(), 200);
    assert!(peeked.text().await.unwrap().contains("at the end of time"));
    let (status, _) = query(
        &server,
        "/000000000000/late",
        &[("Action", "GetQueueAttributes"), ("AttributeName.1", "All")],
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn long_windows_pass_at_once_over_json() {
    let server = manual().await;
    let url = crate::common::fifo_queue(&server, "q.fifo", &[]).await;
    let send = || {
        server
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body("m")
            .message_group_id("g")
            .message_deduplication_id("d")
            .send()
    };
    let first = send().await.unwrap();
    let receive = || {
        server
            .sqs
            .receive_message()
            .queue_url(&url)
            .visibility_timeout(43_200)
            .message_system_attribute_names(
                aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount,
            )
            .send()
    };
    assert_eq!(receive().await.unwrap().messages.unwrap().len(), 1);
    // In flight for 12 hours, and deduplicated for 5 minutes.
    assert!(receive().await.unwrap().messages.is_none());
    assert_eq!(send().await.unwrap().message_id, first.message_id);
    assert_eq!(clock(&server, r#"{"advance":"12h"}"#).await.0, 200);
    let again = receive().await.unwrap().messages.unwrap();
    let count = again[0].attributes().unwrap()
        [&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount]
        .clone();
    assert_eq!(count, "2");
    // Twelve hours on, the same deduplication id is a new message.
    assert_ne!(send().await.unwrap().message_id, first.message_id);
    let attributes = server
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    // The new message; the first is in flight again for another 12 hours.
    assert_eq!(attributes[&A::ApproximateNumberOfMessages], "1");
}

#[tokio::test]
async fn long_windows_pass_at_once_over_query() {
    let server = manual().await;
    let create = [
        ("Action", "CreateQueue"),
        ("QueueName", "q.fifo"),
        ("Attribute.1.Name", "FifoQueue"),
        ("Attribute.1.Value", "true"),
    ];
    query(&server, "/", &create).await;
    let path = "/000000000000/q.fifo";
    let send = [
        ("Action", "SendMessage"),
        ("MessageBody", "m"),
        ("MessageGroupId", "g"),
        ("MessageDeduplicationId", "d"),
    ];
    let receive = [("Action", "ReceiveMessage"), ("VisibilityTimeout", "43200")];
    let (_, sent) = query(&server, path, &send).await;
    let first = xml_text(&sent, "MessageId").unwrap().to_string();
    let (_, got) = query(&server, path, &receive).await;
    assert!(got.contains("<Body>m</Body>"), "{got}");
    let (_, got) = query(&server, path, &receive).await;
    assert!(!got.contains("<Body>"), "in flight: {got}");
    let (_, duplicate) = query(&server, path, &send).await;
    assert_eq!(xml_text(&duplicate, "MessageId"), Some(first.as_str()));
    assert_eq!(clock(&server, r#"{"advance":"12h"}"#).await.0, 200);
    let (_, got) = query(&server, path, &receive).await;
    assert!(got.contains("<Body>m</Body>"), "visible again: {got}");
    let (_, fresh) = query(&server, path, &send).await;
    assert_ne!(xml_text(&fresh, "MessageId"), Some(first.as_str()));
}
