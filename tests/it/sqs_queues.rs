//! Queue management through aws-sdk-sqs: creation rules, attributes, listing, tags, permissions.

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::QueueAttributeName as A;

use crate::common::{self, create_queue, start};

#[tokio::test]
async fn create_is_idempotent_only_with_equal_attributes() {
    let server = start().await;
    let create = |v: &'static str| {
        server
            .sqs
            .create_queue()
            .queue_name("q")
            .attributes(A::VisibilityTimeout, v)
            .send()
    };
    let a = create("60").await.unwrap().queue_url.unwrap();
    let b = create("60").await.unwrap().queue_url.unwrap();
    assert_eq!(a, b);
    assert_eq!(
        a,
        server.queue_url("q"),
        "queue URLs use the Host the client reached"
    );
    let err = create("61").await.unwrap_err().into_service_error();
    assert!(err.is_queue_name_exists());
    assert_eq!(err.code(), Some("QueueAlreadyExists"));
    // No attributes at all: returns the existing queue.
    assert!(server
        .sqs
        .create_queue()
        .queue_name("q")
        .send()
        .await
        .is_ok());
}

#[tokio::test]
async fn attribute_validation_and_fifo_only_rules() {
    let server = start().await;
    let err = server
        .sqs
        .create_queue()
        .queue_name("std")
        .attributes(A::FifoQueue, "false")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(err.is_invalid_attribute_name());
    assert_eq!(err.message(), Some("Unknown Attribute FifoQueue."));
    let err = server
        .sqs
        .create_queue()
        .queue_name("std")
        .attributes(A::MessageRetentionPeriod, "10")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(err.is_invalid_attribute_value());
    let err = server
        .sqs
        .create_queue()
        .queue_name("bad name")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(err.code(), Some("InvalidParameterValue"));
    let url = create_queue(&server, "std", &[]).await;
    server
        .sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(A::DelaySeconds, "7")
        .send()
        .await
        .unwrap();
    let got = server
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(A::All)
        .send()
        .await
        .unwrap();
    let attrs = got.attributes.unwrap();
    assert_eq!(attrs[&A::DelaySeconds], "7");
    assert_eq!(
        attrs[&A::QueueArn],
        "arn:aws:sqs:us-east-1:000000000000:std"
    );
    assert!(!attrs.contains_key(&A::FifoQueue));
    let none = server
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert!(none.attributes.is_none());
}

#[tokio::test]
async fn list_queues_by_prefix_with_pagination() {
    let server = start().await;
    for name in ["a1", "a2", "a3", "b1"] {
        server
            .sqs
            .create_queue()
            .queue_name(name)
            .send()
            .await
            .unwrap();
    }
    let all = server
        .sqs
        .list_queues()
        .queue_name_prefix("a")
        .send()
        .await
        .unwrap();
    assert_eq!(all.queue_urls.unwrap().len(), 3);
    assert!(all.next_token.is_none());
    let page1 = server
        .sqs
        .list_queues()
        .max_results(2)
        .send()
        .await
        .unwrap();
    assert_eq!(page1.queue_urls.as_ref().unwrap().len(), 2);
    let token = page1.next_token.unwrap();
    let page2 = server
        .sqs
        .list_queues()
        .max_results(2)
        .next_token(token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        page2.queue_urls.unwrap(),
        vec![server.queue_url("a3"), server.queue_url("b1")]
    );
    assert!(page2.next_token.is_none());
    let empty = server
        .sqs
        .list_queues()
        .queue_name_prefix("zzz")
        .send()
        .await
        .unwrap();
    assert!(empty.queue_urls.is_none());
}

#[tokio::test]
async fn tags_and_permissions() {
    let server = start().await;
    let url = server
        .sqs
        .create_queue()
        .queue_name("t")
        .tags("team", "prices")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    server
        .sqs
        .tag_queue()
        .queue_url(&url)
        .tags("env", "")
        .send()
        .await
        .unwrap();
    server
        .sqs
        .untag_queue()
        .queue_url(&url)
        .tag_keys("team")
        .send()
        .await
        .unwrap();
    let tags = server
        .sqs
        .list_queue_tags()
        .queue_url(&url)
        .send()
        .await
        .unwrap()
        .tags
        .unwrap();
    assert_eq!(tags.len(), 1);
    assert_eq!(tags["env"], "");
    // Empty ones change nothing (AWS's model sets no minimum); over the Query protocol an empty
    // map is not sent at all, so the member is missing.
    let sqs = &server.sqs;
    let empty = sqs
        .tag_queue()
        .queue_url(&url)
        .set_tags(Some(Default::default()));
    empty.send().await.expect("an empty Tags map");
    let empty = sqs
        .untag_queue()
        .queue_url(&url)
        .set_tag_keys(Some(Vec::new()));
    empty.send().await.expect("an empty TagKeys list");
    let listed = sqs.list_queue_tags().queue_url(&url).send().await.unwrap();
    assert_eq!(listed.tags.unwrap(), tags);
    let params = [
        ("Action", "TagQueue"),
        ("Version", "2012-11-05"),
        ("QueueUrl", url.as_str()),
    ];
    let (status, body) = common::query(&server, "/", &params).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        common::xml_text(&body, "Code"),
        Some("MissingParameter"),
        "{body}"
    );
    server
        .sqs
        .add_permission()
        .queue_url(&url)
        .label("send")
        .aws_account_ids("111122223333")
        .actions("SendMessage")
        .send()
        .await
        .unwrap();
    let policy = server
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(A::Policy)
        .send()
        .await
        .unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&policy.attributes.unwrap()[&A::Policy]).unwrap();
    assert_eq!(doc["Statement"][0]["Sid"], "send");
    // A queue is shared with accounts, by their twelve digits: not with everyone or a user.
    for account in ["*", "arn:aws:iam::111122223333:user/x"] {
        let err = server
            .sqs
            .add_permission()
            .queue_url(&url)
            .label("other")
            .aws_account_ids(account)
            .actions("SendMessage")
            .send()
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("InvalidParameterValue"), "{account}");
        assert_eq!(
            err.message(),
            Some(&*format!(
                "Value [{account}] for parameter PrincipalId is invalid. Reason: Unable to verify."
            ))
        );
    }
    assert_eq!(doc["Statement"][0]["Action"], "SQS:SendMessage");
    server
        .sqs
        .remove_permission()
        .queue_url(&url)
        .label("send")
        .send()
        .await
        .unwrap();
    let after = server
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(A::Policy)
        .send()
        .await
        .unwrap();
    assert!(after.attributes.is_none());
}

#[tokio::test]
async fn delete_queue_then_it_is_gone() {
    let server = start().await;
    let url = create_queue(&server, "gone", &[]).await;
    server
        .sqs
        .delete_queue()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    let err = server
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .send()
        .await
        .unwrap_err();
    assert!(err.into_service_error().is_queue_does_not_exist());
}

#[tokio::test]
async fn message_attribute_names_may_hold_letters_of_any_script() {
    use aws_sdk_sqs::types::MessageAttributeValue;
    let server = start().await;
    let url = create_queue(&server, "intl", &[]).await;
    let value = MessageAttributeValue::builder()
        .data_type("String")
        .string_value("v")
        .build()
        .unwrap();
    // The SDK checks the attributes' MD5 on the answer, so the name's bytes are compared too.
    server
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("m")
        .message_attributes("attr.1øßä", value)
        .send()
        .await
        .unwrap();
    let received = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap();
    let message = &received.messages.unwrap()[0];
    let attributes = message.message_attributes.as_ref().unwrap();
    assert_eq!(attributes["attr.1øßä"].string_value(), Some("v"));
}

#[tokio::test]
async fn an_earlier_receive_handle_still_changes_visibility_on_a_standard_queue() {
    let server = start().await;
    let url = create_queue(&server, "std", &[]).await;
    server
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("m")
        .send()
        .await
        .unwrap();
    let receive = |visibility: i32| {
        server
            .sqs
            .receive_message()
            .queue_url(&url)
            .visibility_timeout(visibility)
            .send()
    };
    let first = receive(0).await.unwrap().messages.unwrap().remove(0);
    let second = receive(30).await.unwrap().messages.unwrap().remove(0);
    assert_ne!(first.receipt_handle, second.receipt_handle);
    // The first receive's handle makes the message visible again at once.
    server
        .sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(first.receipt_handle.unwrap())
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let again = receive(30).await.unwrap().messages.unwrap_or_default();
    assert_eq!(again.len(), 1, "the change applied");
}

/// Bodies receivable now (no wait), left in flight.
async fn receivable(server: &crate::common::Server, url: &str) -> Vec<String> {
    let got = (server.sqs.receive_message())
        .queue_url(url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    let mut bodies: Vec<String> = (got.messages.unwrap_or_default().into_iter())
        .filter_map(|m| m.body)
        .collect();
    bodies.sort();
    bodies
}

/// On a delay queue a message's own timer overrides the queue's, 0 included (single and batch);
/// a message without one waits the queue's delay. A FIFO queue takes no timer of a message's
/// own: 0 leaves the queue's delay.
#[tokio::test]
async fn a_message_timer_of_zero_overrides_a_standard_queues_delay() {
    use aws_sdk_sqs::types::SendMessageBatchRequestEntry as Entry;
    let server = start().await;
    let url = create_queue(&server, "delayed", &[("DelaySeconds", "60")]).await;
    let send = |body: &'static str, delay: Option<i32>| {
        let sent = server.sqs.send_message().queue_url(&url).message_body(body);
        sent.set_delay_seconds(delay).send()
    };
    send("own timer of 0", Some(0)).await.unwrap();
    send("the queue's delay", None).await.unwrap();
    let entries = [("batch-0", Some(0)), ("batch-none", None)].map(|(id, delay)| {
        let entry = Entry::builder().id(id).message_body(id);
        entry.set_delay_seconds(delay).build().unwrap()
    });
    let batch = server.sqs.send_message_batch().queue_url(&url);
    let sent = batch
        .set_entries(Some(entries.to_vec()))
        .send()
        .await
        .unwrap();
    assert!(sent.failed.is_empty(), "{:?}", sent.failed);
    assert_eq!(
        receivable(&server, &url).await,
        ["batch-0", "own timer of 0"]
    );

    let fifo = crate::common::fifo_queue(
        &server,
        "delayed.fifo",
        &[
            ("DelaySeconds", "60"),
            ("ContentBasedDeduplication", "true"),
        ],
    )
    .await;
    let sent = server
        .sqs
        .send_message()
        .queue_url(&fifo)
        .message_group_id("g");
    sent.message_body("fifo")
        .delay_seconds(0)
        .send()
        .await
        .unwrap();
    assert!(receivable(&server, &fifo).await.is_empty());
}
