//! Errors as SDKs see them: modeled variants, the legacy code from x-amzn-query-error, statuses.

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::operation::get_queue_url::GetQueueUrlError;
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;

use crate::common::{create_queue, fifo_queue, start};

#[tokio::test]
async fn unknown_queue_is_the_modeled_error_with_the_legacy_code() {
    let server = start().await;
    let err = server
        .sqs
        .get_queue_url()
        .queue_name("missing")
        .send()
        .await
        .unwrap_err();
    let raw = err.raw_response().expect("http response");
    assert_eq!(raw.status().as_u16(), 400);
    let service = err.into_service_error();
    assert!(
        matches!(service, GetQueueUrlError::QueueDoesNotExist(_)),
        "{service:?}"
    );
    assert_eq!(
        service.code(),
        Some("AWS.SimpleQueueService.NonExistentQueue")
    );
    assert_eq!(
        service.message(),
        Some("The specified queue does not exist.")
    );
}

#[tokio::test]
async fn missing_group_id_is_missing_parameter() {
    let server = start().await;
    let url = fifo_queue(&server, "g.fifo", &[]).await;
    let err = server
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .send()
        .await
        .unwrap_err();
    let service = err.into_service_error();
    assert_eq!(service.code(), Some("MissingParameter"));
    assert_eq!(
        service.message(),
        Some("The request must contain the parameter MessageGroupId.")
    );
}

#[tokio::test]
async fn batch_structure_errors() {
    let server = start().await;
    let url = create_queue(&server, "plain", &[]).await;
    let entry = |id: &str| {
        SendMessageBatchRequestEntry::builder()
            .id(id)
            .message_body("x")
            .build()
            .unwrap()
    };
    let too_many: Vec<_> = (0..11).map(|i| entry(&format!("e{i}"))).collect();
    let err = server
        .sqs
        .send_message_batch()
        .queue_url(&url)
        .set_entries(Some(too_many))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(
        err.into_service_error(),
        SendMessageBatchError::TooManyEntriesInBatchRequest(_)
    ));
    let err = server
        .sqs
        .send_message_batch()
        .queue_url(&url)
        .set_entries(Some(vec![entry("a"), entry("a")]))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(
        err.into_service_error(),
        SendMessageBatchError::BatchEntryIdsNotDistinct(_)
    ));
    let err = server
        .sqs
        .send_message_batch()
        .queue_url(&url)
        .set_entries(Some(vec![entry("bad id!")]))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(
        err.into_service_error(),
        SendMessageBatchError::InvalidBatchEntryId(_)
    ));
    let err = server
        .sqs
        .send_message_batch()
        .queue_url(&url)
        .set_entries(Some(vec![]))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(
        err.into_service_error(),
        SendMessageBatchError::EmptyBatchRequest(_)
    ));
}

#[tokio::test]
async fn oversized_batch_entry_fails_alone() {
    let server = start().await;
    let url = server
        .sqs
        .create_queue()
        .queue_name("small")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::MaximumMessageSize,
            "1024",
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let out = server
        .sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("ok")
                .message_body("x")
                .build()
                .unwrap(),
        )
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("big")
                .message_body("y".repeat(2000))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(out.successful.len(), 1);
    assert_eq!(out.failed[0].id, "big");
    assert_eq!(out.failed[0].code, "InvalidParameterValue");
    assert!(out.failed[0].sender_fault);
    assert_eq!(
        out.failed[0].message.as_deref(),
        Some("One or more parameters cannot be validated. Reason: Message must be shorter than 1024 bytes.")
    );
}

#[tokio::test]
async fn purge_twice_within_a_minute_is_403() {
    let server = start().await;
    let url = create_queue(&server, "p", &[]).await;
    server
        .sqs
        .purge_queue()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    let err = server
        .sqs
        .purge_queue()
        .queue_url(&url)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.raw_response().unwrap().status().as_u16(), 403);
    let service = err.into_service_error();
    assert!(service.is_purge_queue_in_progress());
    assert_eq!(
        service.message(),
        Some("Only one PurgeQueue operation on p is allowed every 60 seconds.")
    );
}

#[tokio::test]
async fn bad_receipt_handles_and_parameters() {
    let server = start().await;
    let url = create_queue(&server, "h", &[]).await;
    let err = server
        .sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle("garbage")
        .send()
        .await
        .unwrap_err();
    let service = err.into_service_error();
    assert!(service.is_receipt_handle_is_invalid());
    assert_eq!(
        service.message(),
        Some("The input receipt handle \"garbage\" is not a valid receipt handle.")
    );
    let err = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(11)
        .send()
        .await
        .unwrap_err();
    let service = err.into_service_error();
    assert_eq!(service.code(), Some("InvalidParameterValue"));
    assert_eq!(
        service.message(),
        Some("Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.")
    );
    let err = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(21)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.into_service_error().code(),
        Some("InvalidParameterValue")
    );
    let err = server
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("bad\u{1}")
        .send()
        .await
        .unwrap_err();
    assert!(err.into_service_error().is_invalid_message_contents());
}

/// Text that XML cannot carry: tags refuse it; an error echoing it answers U+FFFD in XML.
#[tokio::test]
async fn characters_xml_cannot_hold() {
    let server = start().await;
    let url = fifo_queue(&server, "x.fifo", &[]).await;
    let err = server
        .sqs
        .tag_queue()
        .queue_url(&url)
        .tags("team", "a\u{1}b")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("InvalidParameterValue"), "{err:?}");
    let tags = server
        .sqs
        .list_queue_tags()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert!(tags.tags().is_none_or(|t| t.is_empty()), "{tags:?}");
    let (status, body) = crate::common::query(
        &server,
        "/",
        &[
            ("Action", "DeleteMessage"),
            ("QueueUrl", url.as_str()),
            ("ReceiptHandle", "bad\u{0}handle"),
        ],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(!body.contains('\u{0}'), "{body:?}");
    assert!(body.contains("bad\u{fffd}handle"), "{body}");
}

/// A JSON request escaping half of a UTF-16 surrogate pair alone (which an SDK in a language
/// with UTF-16 strings may send): the message is refused as AWS refuses its invalid contents,
/// entry by entry in a batch, where the whole request was refused as unreadable JSON.
#[tokio::test]
async fn a_lone_surrogate_in_a_json_send_is_refused_as_invalid_contents() {
    let server = start().await;
    let url = create_queue(&server, "surrogates", &[]).await;
    let send = |target: &'static str, body: String| {
        let server_url = server.url();
        async move {
            let answer = reqwest::Client::new()
                .post(server_url)
                .header("content-type", "application/x-amz-json-1.0")
                .header("x-amz-target", format!("AmazonSQS.{target}"))
                .header("authorization", crate::common::signed("sqs"))
                .body(body)
                .send()
                .await
                .unwrap();
            let status = answer.status().as_u16();
            let text = answer.text().await.unwrap();
            (
                status,
                serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            )
        }
    };
    let (status, answer) = send(
        "SendMessage",
        format!(r#"{{"QueueUrl":"{url}","MessageBody":"a\ud800b"}}"#),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["__type"]
        .as_str()
        .unwrap()
        .ends_with("InvalidMessageContents"));
    let (status, answer) = send(
        "SendMessage",
        format!(
            r#"{{"QueueUrl":"{url}","MessageBody":"ok","MessageAttributes":
                {{"a":{{"DataType":"String","StringValue":"\udc00"}}}}}}"#
        ),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    // A pair is a character like any other; an escaped backslash is not an escape.
    let (status, answer) = send(
        "SendMessageBatch",
        format!(
            r#"{{"QueueUrl":"{url}","Entries":[
                {{"Id":"lone","MessageBody":"\udbff!"}},
                {{"Id":"pair","MessageBody":"\ud83d\ude00 \\ud800"}}]}}"#
        ),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["Failed"][0]["Id"], "lone");
    assert_eq!(answer["Failed"][0]["Code"], "InvalidMessageContents");
    assert_eq!(answer["Failed"][0]["SenderFault"], true);
    assert_eq!(answer["Successful"][0]["Id"], "pair");
    let bodies = crate::common::drain(&server, &url).await;
    assert_eq!(bodies, [("\u{1f600} \\ud800".to_string(), None)]);
}
