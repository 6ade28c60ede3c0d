//! FIFO behaviour through aws-sdk-sqs: group order under concurrent producers, group locking,
//! deduplication, attributes and checksums, long polling.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName,
    SendMessageBatchRequestEntry,
};

use crate::common::{
    create_queue, fifo_queue, long_polls_parked, start, start_with_manual_clock, Server,
};

#[tokio::test]
async fn concurrent_producers_keep_per_group_order() {
    let server = start().await;
    let url = fifo_queue(
        &server,
        "orders.fifo",
        &[("ContentBasedDeduplication", "true")],
    )
    .await;
    let producers = 4;
    let per_producer = 50;
    let mut tasks = Vec::new();
    for p in 0..producers {
        let sqs = server.sqs.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            // Each producer owns group p; batches of 5 in order.
            for chunk in 0..per_producer / 5 {
                let entries = (0..5)
                    .map(|i| {
                        let n = chunk * 5 + i;
                        SendMessageBatchRequestEntry::builder()
                            .id(format!("e{i}"))
                            .message_body(format!("{p}:{n}"))
                            .message_group_id(format!("group-{p}"))
                            .build()
                            .unwrap()
                    })
                    .collect();
                let out = sqs
                    .send_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(out.successful.len(), 5);
                assert!(out.failed.is_empty());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut seen: HashMap<String, Vec<u32>> = HashMap::new();
    let mut total = 0;
    while total < producers * per_producer {
        let out = server
            .sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        let messages = out.messages.unwrap_or_default();
        assert!(!messages.is_empty(), "messages went missing after {total}");
        let mut entries = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let (p, n) = m.body().unwrap().split_once(':').unwrap();
            let group = m
                .attributes()
                .unwrap()
                .get(&MessageSystemAttributeName::MessageGroupId)
                .unwrap();
            assert_eq!(group, &format!("group-{p}"));
            seen.entry(p.to_string())
                .or_default()
                .push(n.parse().unwrap());
            entries.push(
                DeleteMessageBatchRequestEntry::builder()
                    .id(format!("d{i}"))
                    .receipt_handle(m.receipt_handle().unwrap())
                    .build()
                    .unwrap(),
            );
            total += 1;
        }
        let del = server
            .sqs
            .delete_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await
            .unwrap();
        assert!(del.failed.is_empty());
    }
    for (p, ns) in seen {
        assert_eq!(
            ns,
            (0..per_producer as u32).collect::<Vec<_>>(),
            "group {p} out of order"
        );
    }
}

#[tokio::test]
async fn group_is_locked_while_its_head_is_in_flight() {
    let server = start().await;
    let url = fifo_queue(&server, "locks.fifo", &[]).await;
    for (body, group) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
        server
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .message_group_id(group)
            .message_deduplication_id(body)
            .send()
            .await
            .unwrap();
    }
    let first = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(first[0].body(), Some("a1"));
    let second = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    let bodies: Vec<_> = second
        .messages
        .unwrap()
        .iter()
        .map(|m| m.body().unwrap().to_string())
        .collect();
    assert_eq!(bodies, ["b1"], "a2 must wait behind in-flight a1");
    server
        .sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(first[0].receipt_handle().unwrap())
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let again = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    let bodies: Vec<_> = again
        .messages
        .unwrap()
        .iter()
        .map(|m| m.body().unwrap().to_string())
        .collect();
    assert_eq!(bodies, ["a1", "a2"]);
}

#[tokio::test]
async fn duplicate_send_returns_original_ids_and_is_not_delivered() {
    let server = start().await;
    let url = fifo_queue(&server, "dedup.fifo", &[]).await;
    let send = |body: &'static str| {
        server
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .message_group_id("g")
            .message_deduplication_id("same")
            .send()
    };
    let first = send("one").await.unwrap();
    let second = send("two").await.unwrap();
    assert_eq!(first.message_id, second.message_id);
    assert_eq!(first.sequence_number, second.sequence_number);
    assert!(first.sequence_number().unwrap().len() >= 20);
    let got = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    let messages = got.messages.unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].body(), Some("one"));
}

#[tokio::test]
async fn attributes_and_checksums_round_trip() {
    let server = start().await;
    let url = fifo_queue(
        &server,
        "attrs.fifo",
        &[("ContentBasedDeduplication", "true")],
    )
    .await;
    let out = server
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("hello")
        .message_group_id("g")
        .message_attributes(
            "Foo",
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("Bar")
                .build()
                .unwrap(),
        )
        .message_attributes(
            "Blob",
            MessageAttributeValue::builder()
                .data_type("Binary.gif")
                .binary_value(aws_sdk_sqs::primitives::Blob::new(vec![0u8, 1, 2, 255]))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        out.md5_of_message_body(),
        Some("5d41402abc4b2a76b9719d911017c592")
    );
    let got = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("Foo")
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    let m = &got[0];
    assert_eq!(m.md5_of_body(), Some("5d41402abc4b2a76b9719d911017c592"));
    // Only Foo was asked for: the checksum covers just that subset (AWS's vector).
    assert_eq!(
        m.md5_of_message_attributes(),
        Some("ae7155c6026991b6d54b11589678bf9c")
    );
    assert_eq!(m.message_attributes().unwrap().len(), 1);
    let attrs = m.attributes().unwrap();
    assert_eq!(
        attrs
            .get(&MessageSystemAttributeName::MessageDeduplicationId)
            .map(String::as_str),
        Some("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
    );
    assert_eq!(
        attrs
            .get(&MessageSystemAttributeName::ApproximateReceiveCount)
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(
        attrs
            .get(&MessageSystemAttributeName::SenderId)
            .map(String::as_str),
        // Without --auth, the user id made from the access key (README, "Identities").
        Some("AIDAGQSWUKCKFNOMMEKH5")
    );
    let all = server
        .sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(m.receipt_handle().unwrap())
        .visibility_timeout(0)
        .send()
        .await;
    assert!(all.is_ok());
    let again = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap();
    let m = &again.messages.unwrap()[0];
    let blob = m.message_attributes().unwrap().get("Blob").unwrap();
    assert_eq!(blob.binary_value().unwrap().as_ref(), &[0u8, 1, 2, 255]);
    assert_eq!(blob.data_type(), "Binary.gif");
}

#[tokio::test]
async fn long_poll_returns_as_soon_as_a_message_arrives() {
    // The clock never moves: the poll can only end because of the send.
    let (server, _clock) = start_with_manual_clock().await;
    let url = fifo_queue(
        &server,
        "poll.fifo",
        &[("ContentBasedDeduplication", "true")],
    )
    .await;
    let poll = long_poll(&server, &url, 10);
    still_waiting(&server, &poll, 1).await;
    server
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("late")
        .message_group_id("g")
        .send()
        .await
        .unwrap();
    assert_eq!(answered(poll).await, ["late"]);
}

/// A FIFO queue's delay is retroactive (AWS documents it so): shortened, it frees a message
/// sent under the longer one, and a long poll waiting on the queue gets it.
#[tokio::test]
async fn a_shorter_fifo_queue_delay_frees_a_message_already_sent() {
    let (server, clock) = start_with_manual_clock().await;
    let url = fifo_queue(
        &server,
        "held.fifo",
        &[
            ("ContentBasedDeduplication", "true"),
            ("DelaySeconds", "100"),
        ],
    )
    .await;
    let send = server.sqs.send_message().queue_url(&url).message_body("x");
    send.message_group_id("g").send().await.unwrap();
    clock.advance_millis(10_000);
    let poll = long_poll(&server, &url, 5);
    still_waiting(&server, &poll, 1).await;
    let shorten = server.sqs.set_queue_attributes().queue_url(&url);
    let shorten = shorten.attributes(aws_sdk_sqs::types::QueueAttributeName::DelaySeconds, "10");
    shorten.send().await.unwrap();
    assert_eq!(answered(poll).await, ["x"]);
}

#[tokio::test]
async fn long_poll_wakes_when_a_visibility_timeout_expires() {
    let (server, clock) = start_with_manual_clock().await;
    let url = fifo_queue(
        &server,
        "expiry.fifo",
        &[("ContentBasedDeduplication", "true")],
    )
    .await;
    server
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("g")
        .send()
        .await
        .unwrap();
    let first = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(1)
        .send()
        .await
        .unwrap();
    assert_eq!(first.messages.unwrap().len(), 1);
    let poll = long_poll(&server, &url, 5);
    still_waiting(&server, &poll, 1).await;
    clock.advance_millis(999);
    still_waiting(&server, &poll, 1).await;
    clock.advance_millis(1);
    assert_eq!(answered(poll).await, ["x"]);
}

#[tokio::test]
async fn empty_long_poll_times_out_with_no_messages() {
    let (server, clock) = start_with_manual_clock().await;
    let url = fifo_queue(&server, "empty.fifo", &[]).await;
    let poll = long_poll(&server, &url, 20);
    still_waiting(&server, &poll, 1).await;
    clock.advance_millis(19_999);
    still_waiting(&server, &poll, 1).await;
    clock.advance_millis(1);
    assert!(answered(poll).await.is_empty());
}

/// A ReceiveMessage with this wait time, running on its own: the bodies it answers with.
fn long_poll(server: &Server, url: &str, wait: i32) -> tokio::task::JoinHandle<Vec<String>> {
    let request = server
        .sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(1)
        .wait_time_seconds(wait);
    tokio::spawn(async move {
        let out = request.send().await.unwrap();
        out.messages
            .unwrap_or_default()
            .iter()
            .map(|m| m.body().unwrap().to_string())
            .collect()
    })
}

/// Waits for `parked` polls to reach the server and park; with the clock held still, a long
/// poll that has answered had no cause to.
async fn still_waiting<T>(server: &Server, poll: &tokio::task::JoinHandle<T>, parked: u64) {
    long_polls_parked(server, parked).await;
    assert!(
        !poll.is_finished(),
        "the poll answered before it had cause to"
    );
}

async fn answered<T>(poll: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("the poll did not answer")
        .unwrap()
}

#[tokio::test]
async fn receive_request_attempt_id_retries_get_the_same_receipt() {
    let server = start().await;
    let url = fifo_queue(
        &server,
        "attempt.fifo",
        &[("ContentBasedDeduplication", "true")],
    )
    .await;
    server
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("g")
        .send()
        .await
        .unwrap();
    let receive = || {
        server
            .sqs
            .receive_message()
            .queue_url(&url)
            .receive_request_attempt_id("try-1")
            .send()
    };
    let a = receive().await.unwrap().messages.unwrap();
    let b = receive().await.unwrap().messages.unwrap();
    assert_eq!(a[0].receipt_handle(), b[0].receipt_handle());
    server
        .sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle(a[0].receipt_handle().unwrap())
        .send()
        .await
        .unwrap();
    assert!(receive().await.unwrap().messages.is_none());
}

#[tokio::test]
async fn one_send_of_two_messages_wakes_two_parked_polls() {
    let (server, _clock) = start_with_manual_clock().await;
    let url = create_queue(&server, "herd", &[]).await;
    let (a, b) = (long_poll(&server, &url, 10), long_poll(&server, &url, 10));
    still_waiting(&server, &a, 2).await;
    still_waiting(&server, &b, 2).await;
    server
        .sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("1")
                .message_body("x")
                .build()
                .unwrap(),
        )
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("2")
                .message_body("y")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let (a, b) = (answered(a).await, answered(b).await);
    assert_eq!(a.len() + b.len(), 2, "each poll takes one message");
}

#[tokio::test]
async fn deleting_a_queue_releases_its_long_polls() {
    let (server, _clock) = start_with_manual_clock().await;
    let url = create_queue(&server, "doomed", &[]).await;
    let poll = long_poll(&server, &url, 10);
    still_waiting(&server, &poll, 1).await;
    server
        .sqs
        .delete_queue()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert!(answered(poll).await.is_empty());
}
