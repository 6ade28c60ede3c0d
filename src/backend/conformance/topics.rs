//! Topics and fan-out into queues.

use super::*;

fn publish_request(
    body: &str,
    region: &str,
    group: Option<&str>,
    dedup: Option<&str>,
) -> crate::engine::topic::PublishRequest {
    use crate::engine::message::{AttributeData, AttributeValue, MessageAttributes};
    crate::engine::topic::PublishRequest {
        message: body.into(),
        subject: None,
        structured: false,
        attributes: MessageAttributes::new(vec![(
            "region".into(),
            AttributeValue {
                data_type: "String".into(),
                data: AttributeData::String(region.into()),
            },
        )]),
        group_id: group.map(String::from),
        dedup_id: dedup.map(String::from),
        trace_header: None,
    }
}

/// Topics and fan-out into queues: creating and re-creating, subscribing with filter policies
/// and raw delivery, topic-wide deduplication and sequence numbers, envelopes (signed on
/// standard topics, with the certificate served), a subscription's dead-letter queue, batches
/// refused whole, attributes, tags, unsubscribing and deleting.
pub async fn topics<B: crate::backend::Backend>(backend: &B, clock: &ManualClock) {
    use crate::backend::{CreateTopic, Subscribe};
    const BASE: &str = "http://localhost:4566";
    const SUBSCRIBER: &str = "arn:aws:iam::000000000000:user/subscriber";
    let sns = "arn:aws:sns:us-east-1:000000000000:";
    let topic = |name: &str, attributes: &[(&str, &str)]| CreateTopic {
        name: name.into(),
        attributes: attrs(attributes),
        tags: Vec::new(),
    };
    let fifo_topic = [("FifoTopic", "true")];
    let arn = backend
        .create_topic(topic("prices.fifo", &fifo_topic))
        .await
        .unwrap();
    assert_eq!(&*arn, &format!("{sns}prices.fifo"));
    let again = backend
        .create_topic(topic("prices.fifo", &fifo_topic))
        .await
        .unwrap();
    assert_eq!(again, arn);
    let other = rejected(
        backend
            .create_topic(topic(
                "prices.fifo",
                &[("FifoTopic", "true"), ("ContentBasedDeduplication", "true")],
            ))
            .await,
    );
    assert_eq!(
        other.to_string(),
        "Invalid parameter: Attributes Reason: Topic already exists with different attributes"
    );
    let fifo = ("FifoQueue", "true");
    for name in ["eu.fifo", "all.fifo", "dlq.fifo"] {
        backend
            .create_queue(create(name, &[fifo], clock.now()))
            .await
            .unwrap();
    }
    let subscribe = |endpoint: String, attributes: &[(&str, &str)]| {
        backend.subscribe(Subscribe {
            topic_arn: &arn,
            protocol: "sqs",
            endpoint: Some(Box::leak(endpoint.into_boxed_str())),
            attributes: attrs(attributes),
            base_url: BASE,
            principal: SUBSCRIBER,
        })
    };
    let eu_only = [
        ("RawMessageDelivery", "true"),
        ("FilterPolicy", r#"{"region":["eu"]}"#),
    ];
    let eu = subscribe(format!("{ARN}eu.fifo"), &eu_only).await.unwrap();
    assert!(!eu.pending);
    assert_eq!(
        subscribe(format!("{ARN}eu.fifo"), &eu_only)
            .await
            .unwrap()
            .arn,
        eu.arn
    );
    let all = subscribe(format!("{ARN}all.fifo"), &[]).await.unwrap();
    let redrive = format!(r#"{{"deadLetterTargetArn":"{ARN}dlq.fifo"}}"#);
    subscribe(format!("{ARN}gone.fifo"), &[("RedrivePolicy", &redrive)])
        .await
        .unwrap();

    let topic_arn = &arn;
    let publish = |body: &'static str, region: &'static str, dedup: &'static str| async move {
        let request = publish_request(body, region, Some("g"), Some(dedup));
        backend.publish(topic_arn, request, BASE).await.unwrap()
    };
    let first = publish("EU 1", "eu", "d1").await;
    let second = publish("US 1", "us", "d2").await;
    let repeat = publish("EU 1", "eu", "d1").await;
    assert!(!first.duplicate && !second.duplicate && repeat.duplicate);
    assert_eq!(
        (repeat.message_id.clone(), repeat.sequence_number),
        (first.message_id.clone(), first.sequence_number)
    );
    let (s1, s2) = (
        first.sequence_number.unwrap(),
        second.sequence_number.unwrap(),
    );
    assert!(s2 > s1 && s1.to_string().len() == 20, "{s1} {s2}");

    let raw = receive(backend, "eu.fifo", 10).await;
    assert_eq!(bodies(&raw), ["EU 1"], "filtered, raw");
    assert!(raw[0].message.attributes.get("region").is_some());
    let enveloped = receive(backend, "all.fifo", 10).await;
    assert_eq!(enveloped.len(), 2, "in publish order, unfiltered");
    let envelopes: Vec<serde_json::Value> = enveloped
        .iter()
        .map(|r| serde_json::from_str(&r.message.body).unwrap())
        .collect();
    assert_eq!(envelopes[0]["Type"], "Notification");
    assert_eq!(envelopes[0]["Message"], "EU 1");
    assert_eq!(envelopes[1]["Message"], "US 1");
    assert_eq!(envelopes[0]["MessageId"], &*first.message_id);
    assert_eq!(envelopes[0]["SequenceNumber"], s1.to_string());
    assert!(
        envelopes[0].get("Signature").is_none(),
        "FIFO envelopes are unsigned"
    );
    assert_eq!(
        counts(backend, "dlq.fifo", clock).await.0,
        2,
        "the missing queue's copies (the duplicate made none)"
    );

    // A batch with one entry breaking the FIFO rules is refused whole.
    let batch = vec![
        publish_request("ok", "eu", Some("b"), Some("d3")),
        publish_request("no group", "eu", None, Some("d4")),
    ];
    let refused = rejected(backend.publish_batch(&arn, batch, BASE).await);
    assert!(refused.to_string().contains("MessageGroupId"), "{refused}");
    assert!(receive(backend, "eu.fifo", 10).await.is_empty());

    let attributes: BTreeMap<String, String> = backend
        .topic_attributes(&arn)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(attributes["SubscriptionsConfirmed"], "3");
    assert_eq!(attributes["FifoTopic"], "true");
    backend
        .set_topic_attribute(&arn, "ContentBasedDeduplication", "true")
        .await
        .unwrap();
    backend
        .publish(&arn, publish_request("EU 2", "eu", Some("h"), None), BASE)
        .await
        .unwrap();
    assert_eq!(bodies(&receive(backend, "eu.fifo", 10).await), ["EU 2"]);
    let copy = receive(backend, "all.fifo", 10).await;
    assert!(copy[0].message.body.contains(r#""Message":"EU 2""#));

    backend
        .tag_topic(&arn, vec![("team".into(), "prices".into())])
        .await
        .unwrap();
    assert_eq!(backend.topic_tags(&arn).await.unwrap()["team"], "prices");
    backend
        .untag_topic(&arn, vec!["team".into()])
        .await
        .unwrap();
    assert!(backend.topic_tags(&arn).await.unwrap().is_empty());
    let missing = rejected(backend.topic_tags(&format!("{sns}nope")).await);
    assert!(
        matches!(missing, EngineError::SnsResourceNotFound(_)),
        "{missing:?}"
    );

    let listed = backend.subscription_attributes(&all.arn).await.unwrap();
    assert!(listed.contains(&("Endpoint".into(), format!("{ARN}all.fifo"))));
    let principal = ("SubscriptionPrincipal".to_string(), SUBSCRIBER.to_string());
    assert!(listed.contains(&principal), "{listed:?}");
    backend
        .set_subscription_attribute(&all.arn, "FilterPolicy", r#"{"region":["us"]}"#, BASE)
        .await
        .unwrap();
    backend
        .publish(&arn, publish_request("EU 3", "eu", Some("k"), None), BASE)
        .await
        .unwrap();
    assert!(
        receive(backend, "all.fifo", 10).await.is_empty(),
        "the new filter holds"
    );
    backend.unsubscribe(&all.arn, true, BASE).await.unwrap();
    backend.unsubscribe(&all.arn, true, BASE).await.unwrap();
    assert_eq!(
        backend.list_subscriptions(Some(&arn)).await.unwrap().len(),
        2
    );
    let gone = rejected(backend.subscription_attributes(&all.arn).await);
    assert!(matches!(gone, EngineError::NotFound(_)), "{gone:?}");

    // A standard topic signs its envelopes; the certificate is served.
    let news = backend.create_topic(topic("news", &[])).await.unwrap();
    backend
        .create_queue(create("inbox", &[], clock.now()))
        .await
        .unwrap();
    let fifo_queue = rejected(
        backend
            .subscribe(Subscribe {
                topic_arn: &news,
                protocol: "sqs",
                endpoint: Some(&format!("{ARN}eu.fifo")),
                attributes: Vec::new(),
                base_url: BASE,
                principal: SUBSCRIBER,
            })
            .await,
    );
    assert!(
        fifo_queue
            .to_string()
            .contains("FIFO SQS Queues can not be subscribed"),
        "{fifo_queue}"
    );
    backend
        .subscribe(Subscribe {
            topic_arn: &news,
            protocol: "sqs",
            endpoint: Some(&format!("{ARN}inbox")),
            attributes: Vec::new(),
            base_url: BASE,
            principal: SUBSCRIBER,
        })
        .await
        .unwrap();
    backend
        .publish(&news, publish_request("hello", "eu", None, None), BASE)
        .await
        .unwrap();
    let got = receive(backend, "inbox", 1).await;
    let envelope: serde_json::Value = serde_json::from_str(&got[0].message.body).unwrap();
    assert_eq!(envelope["Message"], "hello");
    assert!(envelope["Signature"]
        .as_str()
        .is_some_and(|s| !s.is_empty()));
    let certificate_url = envelope["SigningCertURL"].as_str().unwrap();
    let file = certificate_url.rsplit('/').next().unwrap();
    let pem = backend
        .signing_certificate(file)
        .await
        .unwrap()
        .expect("served");
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));

    backend.delete_topic(&arn).await.unwrap();
    backend.delete_topic(&arn).await.unwrap();
    assert_eq!(backend.list_topics().await.unwrap(), vec![news.clone()]);
    let deleted = rejected(backend.topic_attributes(&arn).await);
    assert!(matches!(deleted, EngineError::NotFound(_)), "{deleted:?}");
}
