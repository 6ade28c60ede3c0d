//! SNS API shapes: batches, errors as SDKs see them, Query XML, pagination.

use aws_sdk_sns::error::ProvideErrorMetadata;
use aws_sdk_sns::types::PublishBatchRequestEntry;

use crate::common::{self, fifo_topic, query, start, xml_text};

#[tokio::test]
async fn publish_batch_sequences_in_order_and_checks_the_whole_request() {
    let server = start().await;
    let topic = fifo_topic(&server, "batch.fifo").await;
    let entry = |id: &str, body: &str| {
        PublishBatchRequestEntry::builder()
            .id(id)
            .message(body)
            .message_group_id("g")
            .build()
            .unwrap()
    };
    let out = server
        .sns
        .publish_batch()
        .topic_arn(&topic)
        .publish_batch_request_entries(entry("a", "one"))
        .publish_batch_request_entries(entry("b", "two"))
        .send()
        .await
        .unwrap();
    let ok = out.successful.unwrap();
    assert_eq!(
        ok.iter().map(|e| e.id().unwrap()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    let seqs: Vec<u128> = ok
        .iter()
        .map(|e| e.sequence_number().unwrap().parse().unwrap())
        .collect();
    assert!(seqs[0] < seqs[1]);
    assert!(out.failed.unwrap().is_empty());
    let many: Vec<_> = (0..11).map(|i| entry(&format!("e{i}"), "x")).collect();
    let err = server
        .sns
        .publish_batch()
        .topic_arn(&topic)
        .set_publish_batch_request_entries(Some(many))
        .send()
        .await
        .unwrap_err();
    assert!(err
        .into_service_error()
        .is_too_many_entries_in_batch_request_exception());
    let no_group = PublishBatchRequestEntry::builder()
        .id("n")
        .message("x")
        .build()
        .unwrap();
    let err = server
        .sns
        .publish_batch()
        .topic_arn(&topic)
        .publish_batch_request_entries(entry("ok", "fine"))
        .publish_batch_request_entries(no_group)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.into_service_error().code(), Some("InvalidParameter"));
}

#[tokio::test]
async fn sns_errors_as_sdks_see_them() {
    let server = start().await;
    // A subscription's ARN starts with its topic's, but names no topic: nothing is done to it.
    let topic = common::standard_topic(&server, "kept").await;
    common::create_queue(&server, "kept-copies", &[]).await;
    let subscription = common::subscribe(&server, &topic, "kept-copies", false).await;
    let deleted = server.sns.delete_topic().topic_arn(&subscription).send();
    let published = server.sns.publish().topic_arn(&subscription).message("m");
    for refused in [
        deleted
            .await
            .unwrap_err()
            .into_service_error()
            .meta()
            .clone(),
        published
            .send()
            .await
            .unwrap_err()
            .into_service_error()
            .meta()
            .clone(),
    ] {
        assert_eq!(refused.code(), Some("InvalidParameter"));
        assert_eq!(refused.message(), Some("Invalid parameter: TopicArn"));
    }
    assert!(server
        .sns
        .get_topic_attributes()
        .topic_arn(&topic)
        .send()
        .await
        .is_ok());
    let err = server
        .sns
        .get_topic_attributes()
        .topic_arn("arn:aws:sns:us-east-1:000000000000:nope")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.raw_response().unwrap().status().as_u16(), 404);
    assert!(err.into_service_error().is_not_found_exception());
    let standard = server
        .sns
        .create_topic()
        .name("std")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let err = server
        .sns
        .subscribe()
        .topic_arn(&standard)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:q.fifo")
        .send()
        .await
        .unwrap_err();
    let message = err.into_service_error().message().unwrap().to_string();
    assert!(
        message.contains("FIFO SQS Queues can not be subscribed to standard SNS topics"),
        "{message}"
    );
    let err = server
        .sns
        .subscribe()
        .topic_arn(&standard)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:q")
        .attributes("FilterPolicy", r#"{"a":[{"numeric":[">",6,"<",5]}]}"#)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.into_service_error().message(),
        Some("Invalid parameter: Attributes Reason: FilterPolicy: Bottom must be less than top")
    );
    let err = server
        .sns
        .create_topic()
        .name("bad.fifo")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.into_service_error().message(),
        Some("Invalid parameter: Topic Name")
    );
    // Idempotent create, and a different attribute is refused.
    let again = server.sns.create_topic().name("std").send().await.unwrap();
    assert_eq!(again.topic_arn.unwrap(), standard);
    let err = server
        .sns
        .create_topic()
        .name("std")
        .attributes("DisplayName", "other")
        .send()
        .await
        .unwrap_err();
    assert!(err.into_service_error().is_invalid_parameter_exception());
}

#[tokio::test]
async fn sns_query_xml_shapes() {
    let server = start().await;
    let (status, body) = query(
        &server,
        "/",
        &[
            ("Action", "CreateTopic"),
            ("Version", "2010-03-31"),
            ("Name", "x"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.starts_with(r#"<?xml version="1.0"?><CreateTopicResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><CreateTopicResult><TopicArn>arn:aws:sns:us-east-1:000000000000:x</TopicArn></CreateTopicResult>"#), "{body}");
    let (_, subs) = query(
        &server,
        "/",
        &[
            ("Action", "ListSubscriptionsByTopic"),
            ("Version", "2010-03-31"),
            ("TopicArn", "arn:aws:sns:us-east-1:000000000000:x"),
        ],
    )
    .await;
    assert!(
        subs.contains("<Subscriptions></Subscriptions>"),
        "empty lists are still emitted: {subs}"
    );
    let (status, err) = query(
        &server,
        "/",
        &[
            ("Action", "DeleteTopic"),
            ("Version", "2010-03-31"),
            ("TopicArn", "bad"),
        ],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(xml_text(&err, "Code"), Some("InvalidParameter"));
    assert!(err.contains(r#"<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">"#));
    // SQS's AddPermission and SNS's differ only by Version/signing service; with neither (an
    // unsigned GET, which may read) an SNS-only action name routes to SNS.
    let response = reqwest::get(format!(
        "{}/?Action=ListTagsForResource&ResourceArn=arn:aws:sns:us-east-1:000000000000:x",
        server.url()
    ))
    .await
    .unwrap();
    let status = response.status().as_u16();
    let tags = response.text().await.unwrap();
    assert_eq!(status, 200, "{tags}");
    assert!(tags.contains("<Tags></Tags>"));
}

#[tokio::test]
async fn list_topics_and_subscriptions_page_by_100() {
    let server = start().await;
    for i in 0..101 {
        let topic = server
            .sns
            .create_topic()
            .name(format!("t{i:03}"))
            .send()
            .await
            .unwrap()
            .topic_arn
            .unwrap();
        if i < 2 {
            for q in 0..60 {
                server
                    .sns
                    .subscribe()
                    .topic_arn(&topic)
                    .protocol("sqs")
                    .endpoint(format!("arn:aws:sqs:us-east-1:000000000000:q{q}"))
                    .send()
                    .await
                    .unwrap();
            }
        }
    }
    let first = server.sns.list_topics().send().await.unwrap();
    assert_eq!(first.topics.as_ref().unwrap().len(), 100);
    let second = server
        .sns
        .list_topics()
        .next_token(first.next_token.unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(
        second.topics.unwrap()[0].topic_arn(),
        Some("arn:aws:sns:us-east-1:000000000000:t100")
    );
    assert!(second.next_token.is_none());
    let subs = server.sns.list_subscriptions().send().await.unwrap();
    assert_eq!(subs.subscriptions.unwrap().len(), 100);
    let rest = server
        .sns
        .list_subscriptions()
        .next_token(subs.next_token.unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(rest.subscriptions.unwrap().len(), 20);
    let err = server
        .sns
        .list_topics()
        .next_token("garbage!")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.into_service_error().message(),
        Some("Invalid parameter: NextToken")
    );
}

/// Text SNS keeps and answers in XML must be text XML can carry; SNS's codes for tag errors.
#[tokio::test]
async fn tags_and_attributes_refuse_characters_xml_cannot_hold() {
    let server = start().await;
    let topic = fifo_topic(&server, "t.fifo").await;
    let err = server
        .sns
        .create_topic()
        .name("named")
        .attributes("DisplayName", "a\u{1}b")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("InvalidParameter"), "{err:?}");
    let err = server
        .sns
        .tag_resource()
        .resource_arn(&topic)
        .tags(
            aws_sdk_sns::types::Tag::builder()
                .key("k")
                .value("v\u{fffe}")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("InvalidParameter"), "{err:?}");
    let many: Vec<_> = (0..51)
        .map(|i| {
            aws_sdk_sns::types::Tag::builder()
                .key(format!("k{i}"))
                .value("v")
                .build()
                .unwrap()
        })
        .collect();
    let err = server
        .sns
        .tag_resource()
        .resource_arn(&topic)
        .set_tags(Some(many))
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("TagLimitExceeded"), "{err:?}");
    // One key twice is refused whether the topic is made with it or tagged with it.
    let twice = ["1", "2"].map(|value| {
        aws_sdk_sns::types::Tag::builder()
            .key("k")
            .value(value)
            .build()
            .unwrap()
    });
    let err = server
        .sns
        .create_topic()
        .name("tagged-twice")
        .set_tags(Some(twice.to_vec()))
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("InvalidParameter"), "{err:?}");
    assert_eq!(
        err.message(),
        Some("Invalid parameter: Duplicated keys are not allowed.")
    );
    let err = server
        .sns
        .tag_resource()
        .resource_arn(&topic)
        .set_tags(Some(twice.to_vec()))
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("InvalidParameter"), "{err:?}");
    let topics = server.sns.list_topics().send().await.unwrap();
    assert!(
        !(topics.topics().iter()).any(|t| t.topic_arn().unwrap().ends_with(":tagged-twice")),
        "{topics:?}"
    );
    let subscription = crate::common::subscribe(&server, &topic, "q.fifo", true).await;
    let err = server
        .sns
        .set_subscription_attributes()
        .subscription_arn(&subscription)
        .attribute_name("FilterPolicy")
        .attribute_value("{\"a\":[\"\u{fffe}\"]}")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("InvalidParameter"), "{err:?}");
    // Nothing of it was kept.
    let tags = server
        .sns
        .list_tags_for_resource()
        .resource_arn(&topic)
        .send()
        .await
        .unwrap();
    assert!(tags.tags().is_empty(), "{tags:?}");
}

/// AddPermission and RemovePermission edit the topic's policy, after its default statement.
#[tokio::test]
async fn permissions_edit_the_topic_policy() {
    let server = start().await;
    let topic = fifo_topic(&server, "p.fifo").await;
    let policy = |server: &crate::common::Server, topic: String| {
        let sns = server.sns.clone();
        async move {
            let attributes = sns
                .get_topic_attributes()
                .topic_arn(topic)
                .send()
                .await
                .unwrap();
            let text = attributes.attributes().unwrap()["Policy"].clone();
            serde_json::from_str::<serde_json::Value>(&text).unwrap()
        }
    };
    server
        .sns
        .add_permission()
        .topic_arn(&topic)
        .label("partners")
        .aws_account_id("111122223333")
        .action_name("Publish")
        .action_name("Subscribe")
        .send()
        .await
        .unwrap();
    let with = policy(&server, topic.clone()).await;
    let statements = with["Statement"].as_array().unwrap();
    assert_eq!(statements[0]["Sid"], "__default_statement_ID");
    assert_eq!(statements[1]["Sid"], "partners");
    assert_eq!(
        statements[1]["Principal"]["AWS"],
        "arn:aws:iam::111122223333:root"
    );
    assert_eq!(
        statements[1]["Action"],
        serde_json::json!(["SNS:Publish", "SNS:Subscribe"])
    );
    assert_eq!(statements[1]["Resource"], topic.as_str());
    for (label, action) in [("partners", "Publish"), ("other", "SendMessage")] {
        let err = server
            .sns
            .add_permission()
            .topic_arn(&topic)
            .label(label)
            .aws_account_id("111122223333")
            .action_name(action)
            .send()
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("InvalidParameter"), "{label}: {err:?}");
    }
    // Only account ids (or everyone) may be granted.
    for account in ["public", "11112222333", "arn:aws:iam::111122223333:root"] {
        let err = server
            .sns
            .add_permission()
            .topic_arn(&topic)
            .label("bad")
            .aws_account_id(account)
            .action_name("Publish")
            .send()
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("InvalidParameter"), "{account}: {err:?}");
        assert_eq!(
            err.message(),
            Some("Invalid parameter: A provided account ID is not valid")
        );
    }
    let err = server
        .sns
        .add_permission()
        .topic_arn("arn:aws:sns:us-east-1:000000000000:missing")
        .label("x")
        .aws_account_id("111122223333")
        .action_name("Publish")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("NotFound"), "{err:?}");
    for _ in 0..2 {
        // The second removal finds nothing to remove and changes nothing.
        server
            .sns
            .remove_permission()
            .topic_arn(&topic)
            .label("partners")
            .send()
            .await
            .unwrap();
        let without = policy(&server, topic.clone()).await;
        let sids: Vec<_> = without["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["Sid"].clone())
            .collect();
        assert_eq!(sids, ["__default_statement_ID"]);
    }
}

#[tokio::test]
async fn sns_refuses_attributes_in_its_own_words() {
    use aws_sdk_sns::types::MessageAttributeValue;
    let server = start().await;
    let topic = server.sns.create_topic().name("t").send().await.unwrap();
    let topic = topic.topic_arn.unwrap();
    let value = |data_type: &str, text: &str| {
        let builder = MessageAttributeValue::builder().data_type(data_type);
        match data_type {
            "Binary" => builder.binary_value(aws_sdk_sns::primitives::Blob::new(text)),
            _ => builder.string_value(text),
        }
        .build()
        .unwrap()
    };
    let cases = [
        ("label", value("String.", "v"), "The message attribute 'label' has an invalid message attribute type, the set of supported type prefixes is Binary, Number, and String."),
        ("a^b", value("String", "v"), "Invalid non-alphanumeric character '#x5E' was found in the message attribute name. Can only include alphanumeric characters, hyphens, underscores, or dots."),
        ("a..b", value("String", "v"), "Message attribute name can not have successive '.' character."),
    ];
    for (name, value, expected) in cases {
        let err = server
            .sns
            .publish()
            .topic_arn(&topic)
            .message("m")
            .message_attributes(name, value)
            .send()
            .await
            .unwrap_err();
        let service = err.into_service_error();
        assert!(
            service.is_invalid_parameter_value_exception(),
            "{service:?}"
        );
        assert_eq!(service.message(), Some(expected), "{name}");
    }
}

/// Subscription attributes AWS refuses, in its words (each recorded from AWS): raw delivery on
/// a protocol that always gets SNS's shape, a redrive policy with a key it does not know, and a
/// webhook retry policy without its shortest delay. Nothing is changed by a refusal.
#[tokio::test]
async fn sns_refuses_subscription_attributes_aws_refuses() {
    let server = start().await;
    let topic = common::standard_topic(&server, "subs").await;
    let subscribe = |protocol: &'static str, endpoint: &'static str, raw: bool| {
        let mut asked = server.sns.subscribe().topic_arn(&topic);
        asked = asked.protocol(protocol).endpoint(endpoint);
        if raw {
            asked = asked.attributes("RawMessageDelivery", "true");
        }
        asked.return_subscription_arn(true).send()
    };
    let error = subscribe("email", "someone@example.com", true)
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some("InvalidParameter"));
    assert_eq!(
        error.message(),
        Some("Invalid parameter: Attributes Reason: Delivery protocol [email] does not support raw message delivery.")
    );
    let lambda = subscribe(
        "lambda",
        "arn:aws:lambda:us-east-1:000000000000:function:f",
        false,
    )
    .await
    .unwrap()
    .subscription_arn
    .unwrap();
    common::create_queue(&server, "subs-q", &[]).await;
    let queue = common::subscribe(&server, &topic, "subs-q", false).await;
    let set = |arn: String, name: &'static str, value: &'static str| {
        let server = &server;
        async move {
            server
                .sns
                .set_subscription_attributes()
                .subscription_arn(arn)
                .attribute_name(name)
                .attribute_value(value)
                .send()
                .await
        }
    };
    let cases = [
        (
            lambda.clone(),
            "RawMessageDelivery",
            "false",
            "Invalid parameter: Delivery protocol [lambda] does not support raw message delivery.",
        ),
        (
            queue.clone(),
            "RedrivePolicy",
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:subs-q","maxReceiveCount":3}"#,
            "Invalid parameter: RedrivePolicy: invalid JSON. Attribute maxReceiveCount is unknown.",
        ),
    ];
    for (arn, name, value, expected) in cases {
        let error = set(arn, name, value).await.unwrap_err();
        assert_eq!(error.code(), Some("InvalidParameter"), "{name}");
        assert_eq!(error.message(), Some(expected), "{name}");
    }
    let attributes = server
        .sns
        .get_subscription_attributes()
        .subscription_arn(&queue)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap_or_default();
    assert!(!attributes.contains_key("RedrivePolicy"), "{attributes:?}");
    // The same redrive policy without the SQS key is taken.
    set(
        queue,
        "RedrivePolicy",
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:subs-q"}"#,
    )
    .await
    .unwrap();
}

/// A value in the field its type does not name, and a missing type in a batch entry (each
/// observed on AWS), through Publish and PublishBatch.
#[tokio::test]
async fn sns_says_which_field_an_attribute_must_use_and_which_entry_lacks_a_type() {
    use aws_sdk_sns::primitives::Blob;
    use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
    let server = start().await;
    let topic = server
        .sns
        .create_topic()
        .name("fields")
        .send()
        .await
        .unwrap();
    let topic = topic.topic_arn.unwrap();
    let binary = |data_type: &str| {
        MessageAttributeValue::builder()
            .data_type(data_type)
            .binary_value(Blob::new("123"))
            .build()
            .unwrap()
    };
    let text = MessageAttributeValue::builder()
        .data_type("Binary")
        .string_value("123")
        .build()
        .unwrap();
    for (value, expected) in [
        (
            binary("String"),
            "The message attribute 'attr1' with type 'String' must use field 'String'.",
        ),
        (
            binary("Number"),
            "The message attribute 'attr1' with type 'Number' must use field 'String'.",
        ),
        (
            text,
            "The message attribute 'attr1' with type 'Binary' must use field 'Binary'.",
        ),
    ] {
        let single = server
            .sns
            .publish()
            .topic_arn(&topic)
            .message("m")
            .message_attributes("attr1", value.clone())
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert!(single.is_invalid_parameter_value_exception(), "{single:?}");
        assert_eq!(single.message(), Some(expected));
        let entry = |id: &str| PublishBatchRequestEntry::builder().id(id).message("m");
        let batch = server
            .sns
            .publish_batch()
            .topic_arn(&topic)
            .publish_batch_request_entries(
                entry("1")
                    .message_attributes("attr1", value)
                    .build()
                    .unwrap(),
            )
            .publish_batch_request_entries(entry("3").build().unwrap())
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert_eq!(batch.message(), Some(expected), "{batch:?}");
    }
    // No DataType (the SDKs refuse to send that, so by hand): the path names the entry.
    let arn = topic.as_str();
    for (params, path) in [
        (
            vec![("Action", "Publish"), ("TopicArn", arn), ("Message", "m")],
            "messageAttributes.attr1.member.dataType",
        ),
        (
            vec![
                ("Action", "PublishBatch"),
                ("TopicArn", arn),
                ("PublishBatchRequestEntries.member.1.Id", "1"),
                ("PublishBatchRequestEntries.member.1.Message", "m"),
                ("PublishBatchRequestEntries.member.2.Id", "3"),
                ("PublishBatchRequestEntries.member.2.Message", "m"),
            ],
            "publishBatchRequestEntries.2.member.messageAttributes.attr1.member.dataType",
        ),
    ] {
        let prefix = if params[1..]
            .iter()
            .any(|(k, _)| k.starts_with("PublishBatch"))
        {
            "PublishBatchRequestEntries.member.2."
        } else {
            ""
        };
        let name = format!("{prefix}MessageAttributes.entry.1.Name");
        let value = format!("{prefix}MessageAttributes.entry.1.Value.StringValue");
        let mut params = params.clone();
        params.push(("Version", "2010-03-31"));
        params.push((&name, "attr1"));
        params.push((&value, "v"));
        let (status, body) = crate::common::query(&server, "/", &params).await;
        assert_eq!(status, 400, "{body}");
        let expected = format!("1 validation error detected: Value null at '{path}' failed to satisfy constraint: Member must not be null");
        assert_eq!(
            crate::common::xml_text(&body, "Message"),
            Some(expected.as_str()),
            "{body}"
        );
    }
}

#[tokio::test]
async fn turning_a_standard_topic_fifo_names_the_topic_name() {
    let server = start().await;
    let topic = server
        .sns
        .create_topic()
        .name("plain")
        .send()
        .await
        .unwrap();
    let topic = topic.topic_arn.unwrap();
    for (value, expected) in [
        ("true", "Invalid parameter: Topic Name"),
        ("false", "Invalid parameter: AttributeName"),
    ] {
        let err = server
            .sns
            .set_topic_attributes()
            .topic_arn(&topic)
            .attribute_name("FifoTopic")
            .attribute_value(value)
            .send()
            .await
            .unwrap_err();
        let service = err.into_service_error();
        assert!(service.is_invalid_parameter_exception(), "{service:?}");
        assert_eq!(service.message(), Some(expected), "FifoTopic={value}");
    }
}

/// SetTopicAttributes with a name SNS does not know is refused as the parameter itself, as AWS
/// answers it, and changes nothing; CreateTopic gives the attribute as the reason.
#[tokio::test]
async fn setting_an_unknown_topic_attribute_names_the_attribute_name_parameter() {
    let server = start().await;
    let topic = server.sns.create_topic().name("unknown-attr").send().await;
    let topic = topic.unwrap().topic_arn.unwrap();
    for name in ["Colour", "HTTPSSuccessFeedbackRoleArn", "displayname"] {
        let err = server
            .sns
            .set_topic_attributes()
            .topic_arn(&topic)
            .attribute_name(name)
            .attribute_value("x")
            .send()
            .await
            .unwrap_err();
        let service = err.into_service_error();
        assert!(service.is_invalid_parameter_exception(), "{service:?}");
        assert_eq!(
            service.message(),
            Some("Invalid parameter: AttributeName"),
            "{name}"
        );
    }
    let attributes = server
        .sns
        .get_topic_attributes()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap_or_default();
    assert!(
        !attributes.contains_key("Colour") && !attributes.contains_key("displayname"),
        "{attributes:?}"
    );
    // CreateTopic names the attribute in its reason.
    let err = server
        .sns
        .create_topic()
        .name("unknown-attr-made")
        .attributes("Colour", "x")
        .send()
        .await
        .unwrap_err();
    let service = err.into_service_error();
    assert!(service.is_invalid_parameter_exception(), "{service:?}");
    assert_eq!(
        service.message(),
        Some("Invalid parameter: Attributes Reason: Unknown attribute Colour")
    );
}

/// CreateTopic again on a standard topic's name (observed on AWS): FifoTopic=true is checked
/// against the name first ("Topic Name"); FifoTopic=false is the same topic; a changed
/// attribute is "different attributes".
#[tokio::test]
async fn creating_a_standard_topic_again_as_fifo_names_the_topic_name() {
    let server = start().await;
    let create = |attributes: &[(&str, &str)]| {
        let mut request = server.sns.create_topic().name("plain-again");
        for (name, value) in attributes {
            request = request.attributes(*name, *value);
        }
        request.send()
    };
    let arn = create(&[("DisplayName", "d")]).await.unwrap().topic_arn;
    let same = create(&[("DisplayName", "d"), ("FifoTopic", "false")])
        .await
        .unwrap();
    assert_eq!(same.topic_arn, arn);
    for (attributes, expected) in [
        (
            &[("FifoTopic", "true")][..],
            "Invalid parameter: Topic Name",
        ),
        (
            &[("DisplayName", "other")][..],
            "Invalid parameter: Attributes Reason: Topic already exists with different attributes",
        ),
    ] {
        let service = create(attributes).await.unwrap_err().into_service_error();
        assert!(service.is_invalid_parameter_exception(), "{service:?}");
        assert_eq!(service.message(), Some(expected), "{attributes:?}");
    }
}

/// PutDataProtectionPolicy and GetDataProtectionPolicy: stored as given, checked for AWS's
/// documented shape, returned; not a topic attribute.
#[tokio::test]
async fn data_protection_policies_are_stored_checked_and_returned() {
    let server = common::start().await;
    let policy = r#"{"Name":"basicPII-protection","Version":"2021-06-01","Statement":[{"DataDirection":"Inbound","Principal":["*"],"DataIdentifier":["arn:aws:dataprotection::aws:data-identifier/EmailAddress"],"Operation":{"Deny":{}}}]}"#;
    let created = server
        .sns
        .create_topic()
        .name("guarded")
        .data_protection_policy(policy)
        .send()
        .await
        .unwrap();
    let arn = created.topic_arn().unwrap().to_string();
    let get = || {
        server
            .sns
            .get_data_protection_policy()
            .resource_arn(&arn)
            .send()
    };
    assert_eq!(get().await.unwrap().data_protection_policy(), Some(policy));
    // Not among the topic's attributes, and not settable as one.
    let attributes = common::topic_attributes(&server, &arn).await;
    assert!(
        !attributes.contains_key("DataProtectionPolicy"),
        "{attributes:?}"
    );
    let as_attribute = server
        .sns
        .set_topic_attributes()
        .topic_arn(&arn)
        .attribute_name("DataProtectionPolicy")
        .attribute_value(policy)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        as_attribute.into_service_error().code(),
        Some("InvalidParameter")
    );

    let audited = policy.replace(r#"{"Deny":{}}"#, r#"{"Audit":{"SampleRate":"10"}}"#);
    server
        .sns
        .put_data_protection_policy()
        .resource_arn(&arn)
        .data_protection_policy(&audited)
        .send()
        .await
        .unwrap();
    assert_eq!(
        get().await.unwrap().data_protection_policy(),
        Some(audited.as_str())
    );

    let put = |text: String, arn: String| {
        server
            .sns
            .put_data_protection_policy()
            .resource_arn(arn)
            .data_protection_policy(text)
            .send()
    };
    for broken in [
        "{not json".to_string(),
        policy.replace("2021-06-01", "2012-10-17"),
        policy.replace("Inbound", "Sideways"),
        policy.replace(r#"{"Deny":{}}"#, r#"{"Block":{}}"#),
    ] {
        let error = put(broken.clone(), arn.clone()).await.unwrap_err();
        let error = error.into_service_error();
        assert_eq!(error.code(), Some("InvalidParameter"), "{broken}");
        assert!(
            error
                .message()
                .unwrap()
                .starts_with("Invalid parameter: DataProtectionPolicy"),
            "{error:?}"
        );
    }
    // A refused policy changed nothing.
    assert_eq!(
        get().await.unwrap().data_protection_policy(),
        Some(audited.as_str())
    );
    // An empty policy removes it.
    put(String::new(), arn.clone()).await.unwrap();
    assert_eq!(get().await.unwrap().data_protection_policy(), Some(""));

    let missing = arn.replace("guarded", "missing");
    let error = put(policy.to_string(), missing).await.unwrap_err();
    assert!(error.into_service_error().is_not_found_exception());
    let fifo = common::fifo_topic(&server, "guarded.fifo").await;
    let error = put(policy.to_string(), fifo).await.unwrap_err();
    assert_eq!(error.into_service_error().code(), Some("InvalidParameter"));
    // CreateTopic checks the policy before it makes the topic.
    let refused = server
        .sns
        .create_topic()
        .name("never")
        .data_protection_policy("{not json")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        refused.into_service_error().code(),
        Some("InvalidParameter")
    );
    let topics = server.sns.list_topics().send().await.unwrap();
    assert!(topics
        .topics()
        .iter()
        .all(|t| !t.topic_arn().unwrap().ends_with(":never")));
}

/// SubscriptionPrincipal is the subscriber's ARN: without --auth, the user named as the access
/// key the request was signed with.
#[tokio::test]
async fn the_subscription_principal_is_the_subscriber() {
    let server = start().await;
    let topic = fifo_topic(&server, "principal.fifo").await;
    common::fifo_queue(&server, "principal.fifo", &[]).await;
    let queue_arn = "arn:aws:sqs:us-east-1:000000000000:principal.fifo";
    let subscription = common::subscribe(&server, &topic, queue_arn, false).await;
    let attributes = common::subscription_attributes(&server, &subscription).await;
    assert_eq!(
        attributes["SubscriptionPrincipal"],
        "arn:aws:iam::000000000000:user/AKIDORDERLY"
    );
}
