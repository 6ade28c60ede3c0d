//! Subscription filter policies end to end.

use aws_sdk_sns::error::ProvideErrorMetadata;
use aws_sdk_sns::types::MessageAttributeValue;

use crate::common::{drain, fifo_queue, fifo_topic, start, subscribe, subscribe_with};

#[tokio::test]
async fn filter_policies_in_both_scopes_select_copies() {
    let server = start().await;
    let topic = fifo_topic(&server, "filtered.fifo").await;
    let all_q = fifo_queue(&server, "all.fifo", &[]).await;
    let cheap_q = fifo_queue(&server, "cheap.fifo", &[]).await;
    let body_q = fifo_queue(&server, "body.fifo", &[]).await;
    subscribe(&server, &topic, "all.fifo", true).await;
    let cheap = server
        .sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:cheap.fifo")
        .attributes("RawMessageDelivery", "true")
        .attributes(
            "FilterPolicy",
            r#"{"price":[{"numeric":["<",100]}],"symbol":[{"prefix":"A"}]}"#,
        )
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    server
        .sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:body.fifo")
        .attributes("RawMessageDelivery", "true")
        .attributes("FilterPolicyScope", "MessageBody")
        .attributes("FilterPolicy", r#"{"quote":{"venue":["XNAS"]}}"#)
        .send()
        .await
        .unwrap();
    let publish = |symbol: &'static str, price: &'static str, venue: &'static str| {
        server
            .sns
            .publish()
            .topic_arn(&topic)
            .message(format!(
                r#"{{"quote":{{"symbol":"{symbol}","venue":"{venue}"}}}}"#
            ))
            .message_group_id(symbol)
            .message_attributes(
                "price",
                MessageAttributeValue::builder()
                    .data_type("Number")
                    .string_value(price)
                    .build()
                    .unwrap(),
            )
            .message_attributes(
                "symbol",
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(symbol)
                    .build()
                    .unwrap(),
            )
            .send()
    };
    publish("AAPL", "99.5", "XNAS").await.unwrap();
    publish("AMZN", "150", "XNYS").await.unwrap();
    publish("MSFT", "50", "XNAS").await.unwrap();
    let bodies = |v: Vec<(String, Option<String>)>| {
        v.into_iter().map(|(_, g)| g.unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(bodies(drain(&server, &all_q).await).len(), 3);
    assert_eq!(bodies(drain(&server, &cheap_q).await), ["AAPL"]);
    let mut by_body = bodies(drain(&server, &body_q).await);
    by_body.sort();
    assert_eq!(by_body, ["AAPL", "MSFT"]);
    let attrs = server
        .sns
        .get_subscription_attributes()
        .subscription_arn(&cheap)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(attrs["FilterPolicyScope"], "MessageAttributes");
    assert!(attrs["FilterPolicy"].contains("numeric"));
    // A nested policy does not fit the attribute scope, so switching scope back is refused.
    let body_sub = server
        .sns
        .list_subscriptions_by_topic()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap()
        .subscriptions
        .unwrap()
        .into_iter()
        .find(|s| s.endpoint().unwrap().ends_with("body.fifo"))
        .unwrap();
    let err = server
        .sns
        .set_subscription_attributes()
        .subscription_arn(body_sub.subscription_arn().unwrap())
        .attribute_name("FilterPolicyScope")
        .attribute_value("MessageAttributes")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.into_service_error().message(),
        Some("Invalid parameter: Filter policy scope MessageAttributes does not support nested filter policy")
    );
    // Removing the policy delivers everything again.
    server
        .sns
        .set_subscription_attributes()
        .subscription_arn(&cheap)
        .attribute_name("FilterPolicy")
        .attribute_value("")
        .send()
        .await
        .unwrap();
    // (A new body: the same body again would be a content-based duplicate and go nowhere.)
    publish("AMZN", "151", "XLON").await.unwrap();
    assert_eq!(bodies(drain(&server, &cheap_q).await), ["AMZN"]);
}

#[tokio::test]
async fn at_most_200_filtered_subscriptions_per_topic() {
    let server = start().await;
    let topic = server
        .sns
        .create_topic()
        .name("busy")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let filtered = |i: usize| {
        let topic = topic.clone();
        let server = &server;
        async move {
            subscribe_with(
                server,
                &topic,
                &format!("q{i}"),
                &[("FilterPolicy", r#"{"k":["v"]}"#)],
            )
            .await
        }
    };
    for i in 0..200 {
        filtered(i).await.unwrap();
    }
    let err = filtered(200).await.unwrap_err();
    assert_eq!(err.raw_response().unwrap().status().as_u16(), 403);
    assert_eq!(
        err.into_service_error().code(),
        Some("FilterPolicyLimitExceeded")
    );
}

#[tokio::test]
async fn a_body_filter_matches_keys_that_mix_nesting_and_dots() {
    let server = start().await;
    let topic = fifo_topic(&server, "dotted.fifo").await;
    let queue = fifo_queue(&server, "dotted.fifo", &[]).await;
    server
        .sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:dotted.fifo")
        .attributes("RawMessageDelivery", "true")
        .attributes("FilterPolicyScope", "MessageBody")
        .attributes("FilterPolicy", r#"{"object":{"nested":{"test":["yes"]}}}"#)
        .send()
        .await
        .unwrap();
    for (group, body) in [
        ("a", r#"{"object.nested":{"test":"yes"}}"#),
        ("b", r#"{"object":{"nested.test":"yes"}}"#),
        ("c", r#"{"object":{"nested.test":"no"}}"#),
    ] {
        let publish = server.sns.publish().topic_arn(&topic).message(body);
        publish.message_group_id(group).send().await.unwrap();
    }
    let mut groups: Vec<String> = drain(&server, &queue)
        .await
        .into_iter()
        .map(|(_, group)| group.unwrap())
        .collect();
    groups.sort();
    assert_eq!(groups, ["a", "b"]);
}

/// A String.Array attribute whose value is JSON but not an array is matched as that one
/// value: the bare `100` as the number 100, as SNS does.
#[tokio::test]
async fn a_string_array_attribute_that_is_not_an_array_is_matched_as_its_one_value() {
    let server = start().await;
    let topic = fifo_topic(&server, "prices.fifo").await;
    let queue = fifo_queue(&server, "priced.fifo", &[]).await;
    let filter = [
        ("RawMessageDelivery", "true"),
        ("FilterPolicy", r#"{"price":[100,500]}"#),
    ];
    subscribe_with(&server, &topic, "priced.fifo", &filter)
        .await
        .unwrap();
    for (n, price) in ["100", "[100, 7]", "7", "[7]"].into_iter().enumerate() {
        let attribute = MessageAttributeValue::builder()
            .data_type("String.Array")
            .string_value(price)
            .build()
            .unwrap();
        (server.sns.publish())
            .topic_arn(&topic)
            .message(format!("price {price}"))
            .message_group_id("g")
            .message_deduplication_id(format!("d{n}"))
            .message_attributes("price", attribute)
            .send()
            .await
            .unwrap();
    }
    let bodies: Vec<String> = drain(&server, &queue)
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    assert_eq!(bodies, ["price 100", "price [100, 7]"]);
}

/// A String.Array attribute that is not JSON at all is invalid: a subscription whose policy
/// names it filters the message out, even one asking only that the attribute exist, while a
/// subscription whose policy names other attributes still gets it.
#[tokio::test]
async fn a_string_array_attribute_that_is_not_json_is_filtered_out_where_a_policy_names_it() {
    let server = start().await;
    let topic = fifo_topic(&server, "tags.fifo").await;
    let policies = [
        ("tagged.fifo", r#"{"tags":[{"exists":true}]}"#),
        ("sized.fifo", r#"{"size":["L"]}"#),
    ];
    let mut queues = Vec::new();
    for (name, policy) in policies {
        queues.push(fifo_queue(&server, name, &[]).await);
        let filter = [("RawMessageDelivery", "true"), ("FilterPolicy", policy)];
        subscribe_with(&server, &topic, name, &filter)
            .await
            .unwrap();
    }
    for (n, tags) in [r#"["a"]"#, "a", r#"["a""#, "[]", "7"]
        .into_iter()
        .enumerate()
    {
        let attribute = |kind: &str, value: &str| {
            MessageAttributeValue::builder()
                .data_type(kind)
                .string_value(value)
                .build()
                .unwrap()
        };
        (server.sns.publish())
            .topic_arn(&topic)
            .message(format!("tags {tags}"))
            .message_group_id("g")
            .message_deduplication_id(format!("d{n}"))
            .message_attributes("tags", attribute("String.Array", tags))
            .message_attributes("size", attribute("String", "L"))
            .send()
            .await
            .unwrap();
    }
    let mut got = Vec::new();
    for queue in &queues {
        let bodies: Vec<String> = (drain(&server, queue).await.into_iter())
            .map(|(b, _)| b)
            .collect();
        got.push(bodies);
    }
    // An empty array leaves no value, so the attribute counts as absent.
    assert_eq!(got[0], ["tags [\"a\"]", "tags 7"]);
    assert_eq!(
        got[1],
        ["tags [\"a\"]", "tags a", "tags [\"a\"", "tags []", "tags 7"]
    );
}
