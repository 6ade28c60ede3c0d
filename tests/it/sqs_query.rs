//! The Query protocol: form requests, XML responses (golden shapes), escaping, queue-URL paths.

use crate::common::{query, start, xml_text, Server};

#[tokio::test]
async fn query_round_trip_keeps_carriage_returns() {
    let server = start().await;
    let (status, body) = query(
        &server,
        "/",
        &[
            ("Action", "CreateQueue"),
            ("Version", "2012-11-05"),
            ("QueueName", "q.fifo"),
            ("Attribute.1.Name", "FifoQueue"),
            ("Attribute.1.Value", "true"),
            ("Attribute.2.Name", "ContentBasedDeduplication"),
            ("Attribute.2.Value", "true"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let url = xml_text(&body, "QueueUrl").unwrap().to_string();
    assert_eq!(url, server.queue_url("q.fifo"));
    assert!(body.starts_with(r#"<?xml version="1.0"?><CreateQueueResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><CreateQueueResult><QueueUrl>"#));

    let body_text = "line1\r\nline2 \"quoted\" <tag> & more";
    let (status, sent) = query(
        &server,
        "/",
        &[
            ("Action", "SendMessage"),
            ("QueueUrl", &url),
            ("MessageBody", body_text),
            ("MessageGroupId", "g"),
            ("MessageAttribute.1.Name", "Foo"),
            ("MessageAttribute.1.Value.DataType", "String"),
            ("MessageAttribute.1.Value.StringValue", "Bar"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(
        xml_text(&sent, "MD5OfMessageAttributes"),
        Some("ae7155c6026991b6d54b11589678bf9c")
    );
    assert!(xml_text(&sent, "SequenceNumber").is_some());

    let (_, received) = query(
        &server,
        "/",
        &[
            ("Action", "ReceiveMessage"),
            ("QueueUrl", &url),
            ("AttributeName.1", "All"),
            ("MessageAttributeName.1", "All"),
        ],
    )
    .await;
    assert_eq!(
        xml_text(&received, "Body"),
        Some("line1&#xD;\nline2 &quot;quoted&quot; &lt;tag&gt; &amp; more")
    );
    assert!(received.contains("<Attribute><Name>MessageGroupId</Name><Value>g</Value></Attribute>"));
    assert!(received.contains(
        "<MessageAttribute><Name>Foo</Name><Value><StringValue>Bar</StringValue><DataType>String</DataType></Value></MessageAttribute>"
    ));
}

#[tokio::test]
async fn query_error_document_for_unknown_queue() {
    let server = start().await;
    let (status, body) = query(
        &server,
        "/",
        &[("Action", "GetQueueUrl"), ("QueueName", "nope")],
    )
    .await;
    assert_eq!(status, 400);
    assert!(body.starts_with(r#"<?xml version="1.0"?><ErrorResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><Error><Type>Sender</Type><Code>AWS.SimpleQueueService.NonExistentQueue</Code>"#), "{body}");
    assert!(body.contains("<Detail/></Error><RequestId>"));
    // Query's wording is longer than JSON's (sqs.md §1.6).
    assert!(
        body.contains(
            "<Message>The specified queue does not exist for this wsdl version.</Message>"
        ),
        "{body}"
    );
}

#[tokio::test]
async fn queue_url_as_path_and_no_result_shape() {
    let server = start().await;
    query(
        &server,
        "/",
        &[("Action", "CreateQueue"), ("QueueName", "plain")],
    )
    .await;
    let (status, body) = query(
        &server,
        "/000000000000/plain",
        &[("Action", "SendMessage"), ("MessageBody", "x")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, received) = query(
        &server,
        "/000000000000/plain",
        &[("Action", "ReceiveMessage")],
    )
    .await;
    let handle = xml_text(&received, "ReceiptHandle").unwrap().to_string();
    let (status, deleted) = query(
        &server,
        "/000000000000/plain",
        &[("Action", "DeleteMessage"), ("ReceiptHandle", &handle)],
    )
    .await;
    assert_eq!(status, 200);
    assert!(deleted.starts_with(r#"<?xml version="1.0"?><DeleteMessageResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><ResponseMetadata><RequestId>"#));
    let (_, empty) = query(
        &server,
        "/000000000000/plain",
        &[("Action", "ReceiveMessage")],
    )
    .await;
    assert!(
        empty.contains("<ReceiveMessageResult/><ResponseMetadata>"),
        "{empty}"
    );
}

#[tokio::test]
async fn missing_and_unknown_actions() {
    let server = start().await;
    // No Action: 404 and a bare <UnknownOperationException/>, as AWS answers (observed on AWS), a
    // GET on a queue's URL too, and whatever the request accepts.
    let (status, body) = query(&server, "/", &[("Version", "2012-11-05")]).await;
    assert_eq!(
        (status, body.as_str()),
        (404, "<UnknownOperationException/>")
    );
    for accept in ["application/json", "*/*"] {
        let response = reqwest::Client::new()
            .get(server.queue_url("missing-action"))
            .header("accept", accept)
            .header("authorization", crate::common::signed("sqs"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 404);
        assert_eq!(
            response.text().await.unwrap(),
            "<UnknownOperationException/>"
        );
    }
    let (status, body) = query(&server, "/", &[("Action", "Frobnicate")]).await;
    assert_eq!(status, 400);
    assert_eq!(xml_text(&body, "Code"), Some("InvalidAction"));
    // Actions that take no queue are not actions of a queue's URL.
    query(
        &server,
        "/",
        &[("Action", "CreateQueue"), ("QueueName", "plain")],
    )
    .await;
    for action in ["CreateQueue", "ListQueues"] {
        let params = [("Action", action), ("QueueName", "other")];
        let (status, body) = query(&server, "/000000000000/plain", &params).await;
        assert_eq!(status, 400, "{action}: {body}");
        assert_eq!(xml_text(&body, "Code"), Some("InvalidAction"), "{action}");
    }
    let (status, _) = query(&server, "/", &[("Action", "ListQueues")]).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn an_empty_list_written_under_its_member_name_is_an_empty_list() {
    // botocore's Query serializer writes an empty list as `Entries=` (its member name).
    let server = start().await;
    query(
        &server,
        "/",
        &[("Action", "CreateQueue"), ("QueueName", "q")],
    )
    .await;
    let url = format!("http://{}/000000000000/q", server.addr);
    for action in [
        "SendMessageBatch",
        "DeleteMessageBatch",
        "ChangeMessageVisibilityBatch",
    ] {
        let (status, body) = query(
            &server,
            "/",
            &[("Action", action), ("QueueUrl", &url), ("Entries", "")],
        )
        .await;
        assert_eq!(status, 400, "{action}: {body}");
        assert!(
            body.contains("<Code>AWS.SimpleQueueService.EmptyBatchRequest</Code>"),
            "{action}: {body}"
        );
    }
    let (status, body) = query(
        &server,
        "/",
        &[
            ("Action", "ReceiveMessage"),
            ("QueueUrl", &url),
            ("AttributeNames", ""),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

/// Posts a signed SQS Query request that accepts JSON; returns (status, content type, body).
async fn query_accepting_json(server: &Server, params: &[(&str, &str)]) -> (u16, String, String) {
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    let response = reqwest::Client::new()
        .post(server.url())
        .header(
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        )
        .header("accept", "application/json")
        .header("authorization", crate::common::signed("sqs"))
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    (status, content_type, response.text().await.unwrap())
}

#[tokio::test]
async fn a_query_request_accepting_json_is_answered_in_json() {
    // AWS renders the Query answer itself as JSON (observed on AWS), not the JSON protocol's answer.
    let server = start().await;
    let (status, content_type, body) =
        query_accepting_json(&server, &[("Action", "CreateQueue"), ("QueueName", "q")]).await;
    assert_eq!(
        (status, content_type.as_str()),
        (200, "application/json"),
        "{body}"
    );
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let url = created["CreateQueueResponse"]["CreateQueueResult"]["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(url.ends_with("/000000000000/q"), "{url}");
    assert!(created["CreateQueueResponse"]["ResponseMetadata"]["RequestId"].is_string());
    let (_, _, body) = query_accepting_json(&server, &[("Action", "ListQueues")]).await;
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        listed["ListQueuesResponse"]["ListQueuesResult"]["queueUrls"][0], url,
        "{body}"
    );
    let send = [
        ("Action", "SendMessage"),
        ("QueueUrl", &url),
        ("MessageBody", "hi"),
    ];
    let (status, _, body) = query_accepting_json(&server, &send).await;
    assert_eq!(status, 200, "{body}");
    let sent: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        sent["SendMessageResponse"]["SendMessageResult"]["MD5OfMessageBody"],
        "49f68a5c8493ec2c0bf489821c21fc3b"
    );
    // Every member of the result is written, null when it has no value, keys in ASCII order.
    let members: Vec<&String> = sent["SendMessageResponse"]["SendMessageResult"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(
        members,
        [
            "MD5OfMessageAttributes",
            "MD5OfMessageBody",
            "MD5OfMessageSystemAttributes",
            "MessageId",
            "SequenceNumber"
        ],
        "{body}"
    );
    assert!(sent["SendMessageResponse"]["SendMessageResult"]["SequenceNumber"].is_null());
    let receive = [
        ("Action", "ReceiveMessage"),
        ("QueueUrl", url.as_str()),
        ("MaxNumberOfMessages", "10"),
    ];
    let (_, _, body) = query_accepting_json(&server, &receive).await;
    let received: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        received["ReceiveMessageResponse"]["ReceiveMessageResult"]["messages"][0]["Body"], "hi",
        "{body}"
    );
    let attributes = [
        ("Action", "GetQueueAttributes"),
        ("QueueUrl", url.as_str()),
        ("AttributeName.1", "All"),
    ];
    let (_, _, body) = query_accepting_json(&server, &attributes).await;
    let read: serde_json::Value = serde_json::from_str(&body).unwrap();
    let pairs = &read["GetQueueAttributesResponse"]["GetQueueAttributesResult"]["Attributes"];
    assert!(
        pairs
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["Name"] == "DelaySeconds" && p["Value"] == "0"),
        "{body}"
    );
    // Errors: the Query code and status, in a top-level Error.
    let missing = [("Action", "GetQueueUrl"), ("QueueName", "nope")];
    let (status, _, body) = query_accepting_json(&server, &missing).await;
    assert_eq!(status, 400);
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        error["Error"]["Code"], "AWS.SimpleQueueService.NonExistentQueue",
        "{body}"
    );
    assert_eq!(error["Error"]["Type"], "Sender");
    assert!(error["RequestId"].is_string());
    // Without the header, the same request is answered in XML.
    let (_, body) = query(&server, "/", &missing).await;
    assert!(body.starts_with("<?xml"), "{body}");
}
