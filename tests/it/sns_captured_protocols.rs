//! email, email-json, sms, application, lambda and firehose subscriptions: accepted on standard
//! topics with their endpoints checked and their confirmation rules, never sent to, and what each
//! would have received readable over HTTP (`/_orderly/sns/deliveries`, LocalStack's
//! `/_aws/sns/sms-messages`), Publish to a phone number included.

use aws_sdk_sns::error::ProvideErrorMetadata;
use serde_json::Value;

use crate::common::{self, get_json, Server};

const LAMBDA: &str = "arn:aws:lambda:us-east-1:000000000000:function:notify";
const STREAM: &str = "arn:aws:firehose:us-east-1:000000000000:deliverystream/prices";
const APP: &str = "arn:aws:sns:us-east-1:000000000000:endpoint/GCM/prices/5e3e9847";

async fn subscribe(
    server: &Server,
    topic: &str,
    (protocol, endpoint): (&str, &str),
    attributes: &[(&str, &str)],
) -> Result<String, String> {
    let mut request = server
        .sns
        .subscribe()
        .topic_arn(topic)
        .protocol(protocol)
        .endpoint(endpoint)
        .return_subscription_arn(true);
    for (name, value) in attributes {
        request = request.attributes(*name, *value);
    }
    match request.send().await {
        Ok(out) => Ok(out.subscription_arn.unwrap()),
        Err(e) => Err(format!(
            "{}: {}",
            e.code().unwrap_or_default(),
            e.message().unwrap_or_default()
        )),
    }
}

pub async fn deliveries(server: &Server, query: &str) -> Vec<Value> {
    let listed = get_json(server, &format!("/_orderly/sns/deliveries{query}")).await;
    listed["deliveries"].as_array().unwrap().clone()
}

async fn pending(server: &Server, arn: &str) -> String {
    common::subscription_attributes(server, arn).await["PendingConfirmation"].clone()
}

#[tokio::test]
async fn other_protocols_are_captured_never_sent() {
    let server = common::start().await;
    let topic = server
        .sns
        .create_topic()
        .name("alerts")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();

    // Endpoints are checked per protocol.
    let refused = [
        (
            ("sms", "+15--551234567"),
            "InvalidParameter: Invalid SMS endpoint: +15--551234567",
        ),
        (("email", "not-an-address"), "InvalidParameter"),
        (("lambda", "notify"), "InvalidParameter"),
        (("application", STREAM), "InvalidParameter"),
        (("firehose", STREAM), "InvalidParameter"),
    ];
    for (endpoint, expected) in refused {
        let error = subscribe(&server, &topic, endpoint, &[]).await.unwrap_err();
        assert!(error.starts_with(expected), "{endpoint:?}: {error}");
    }
    let fifo = common::fifo_topic(&server, "alerts.fifo").await;
    let error = subscribe(&server, &fifo, ("email", "ops@example.com"), &[])
        .await
        .unwrap_err();
    assert_eq!(
        error,
        "InvalidParameter: Invalid parameter: Invalid protocol type: email"
    );

    // Email endpoints pend; the others are confirmed at once.
    let email = subscribe(&server, &topic, ("email", "ops@example.com"), &[])
        .await
        .unwrap();
    let email_json = subscribe(&server, &topic, ("email-json", "ops@example.com"), &[])
        .await
        .unwrap();
    let sms_filter = [("FilterPolicy", r#"{"severity":["high"]}"#)];
    let sms = subscribe(&server, &topic, ("sms", "+15551234567"), &sms_filter)
        .await
        .unwrap();
    let lambda = subscribe(&server, &topic, ("lambda", LAMBDA), &[])
        .await
        .unwrap();
    let role = [(
        "SubscriptionRoleArn",
        "arn:aws:iam::000000000000:role/firehose",
    )];
    let firehose = subscribe(&server, &topic, ("firehose", STREAM), &role)
        .await
        .unwrap();
    let app = subscribe(&server, &topic, ("application", APP), &[])
        .await
        .unwrap();
    assert_eq!(pending(&server, &email).await, "true");
    assert_eq!(pending(&server, &email_json).await, "true");
    for arn in [&sms, &lambda, &firehose, &app] {
        assert_eq!(pending(&server, arn).await, "false", "{arn}");
    }

    // The email's confirmation is captured; its SubscribeURL confirms it.
    let confirmations = deliveries(&server, "?protocol=email").await;
    assert_eq!(confirmations.len(), 1, "{confirmations:?}");
    assert_eq!(confirmations[0]["type"], "SubscriptionConfirmation");
    assert_eq!(confirmations[0]["endpoint"], "ops@example.com");
    let document: Value =
        serde_json::from_str(confirmations[0]["message"].as_str().unwrap()).unwrap();
    let visited = reqwest::get(document["SubscribeURL"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(visited.status(), 200);
    assert_eq!(pending(&server, &email).await, "false");
    assert_eq!(pending(&server, &email_json).await, "true");

    let structured =
        r#"{"default":"disk almost full","sms":"DISK","email":"The disk is almost full."}"#;
    for severity in ["high", "low"] {
        server
            .sns
            .publish()
            .topic_arn(&topic)
            .subject("Disk")
            .message(structured)
            .message_structure("json")
            .message_attributes("severity", common::string_attribute(severity))
            .send()
            .await
            .unwrap();
    }
    let notifications = |protocol: &'static str| {
        let server = &server;
        async move {
            deliveries(server, &format!("?protocol={protocol}"))
                .await
                .into_iter()
                .filter(|d| d["type"] == "Notification")
                .collect::<Vec<_>>()
        }
    };
    let email_got = notifications("email").await;
    assert_eq!(email_got.len(), 2, "no filter: both");
    assert_eq!(email_got[0]["message"], "The disk is almost full.");
    assert_eq!(email_got[0]["subject"], "Disk");
    assert!(
        notifications("email-json").await.is_empty(),
        "still pending"
    );
    let sms_got = notifications("sms").await;
    assert_eq!(sms_got.len(), 1, "the filter keeps only high: {sms_got:?}");
    assert_eq!(sms_got[0]["message"], "DISK");
    assert_eq!(sms_got[0]["endpoint"], "+15551234567");
    let lambda_got = notifications("lambda").await;
    let event: Value = serde_json::from_str(lambda_got[0]["message"].as_str().unwrap()).unwrap();
    let record = &event["Records"][0];
    assert_eq!(record["EventSource"], "aws:sns");
    assert_eq!(record["EventSubscriptionArn"], lambda.as_str());
    assert_eq!(record["Sns"]["Message"], "disk almost full");
    assert_eq!(record["Sns"]["Subject"], "Disk");
    assert!(record["Sns"]["SigningCertUrl"].is_string(), "{record}");
    let firehose_got = notifications("firehose").await;
    let envelope: Value =
        serde_json::from_str(firehose_got[0]["message"].as_str().unwrap()).unwrap();
    assert_eq!(envelope["Type"], "Notification");
    assert_eq!(envelope["TopicArn"], topic.as_str());
    assert_eq!(
        notifications("application").await[0]["message"],
        "disk almost full"
    );
    // LocalStack's view of the same, by endpoint ARN.
    let platform = get_json(&server, "/_aws/sns/platform-endpoint-messages").await;
    let to_app = &platform["platform_endpoint_messages"][APP];
    assert_eq!(to_app.as_array().map(Vec::len), Some(2), "{platform}");
    assert_eq!(to_app[0]["Message"], "disk almost full");
    assert_eq!(to_app[0]["TargetArn"], APP);

    // LocalStack's token endpoint confirms the email-json subscription without its message.
    let token = get_json(
        &server,
        &format!("/_aws/sns/subscription-tokens/{email_json}"),
    )
    .await;
    assert_eq!(token["subscription_arn"], email_json.as_str());
    server
        .sns
        .confirm_subscription()
        .topic_arn(&topic)
        .token(token["subscription_token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(pending(&server, &email_json).await, "false");
    let unknown = reqwest::get(format!(
        "{}/_aws/sns/subscription-tokens/{topic}:00000000-0000-0000-0000-000000000000",
        server.url()
    ))
    .await
    .unwrap();
    assert_eq!(unknown.status(), 404);
    let garbage = reqwest::get(format!(
        "{}/_aws/sns/subscription-tokens/nothing",
        server.url()
    ))
    .await
    .unwrap();
    assert_eq!(garbage.status(), 400);

    // Publish straight to a phone number; LocalStack's endpoint lists SMS by number.
    let direct = server
        .sns
        .publish()
        .phone_number("+447700900123")
        .message("Your code is 1234")
        .send()
        .await
        .unwrap();
    let bad = server
        .sns
        .publish()
        .phone_number("12ab")
        .message("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Some("InvalidParameter"));
    let sms = get_json(&server, "/_aws/sns/sms-messages").await;
    let to_uk = &sms["sms_messages"]["+447700900123"];
    assert_eq!(to_uk[0]["Message"], "Your code is 1234");
    assert_eq!(to_uk[0]["MessageId"], direct.message_id().unwrap());
    assert_eq!(sms["sms_messages"]["+15551234567"][0]["Message"], "DISK");
    assert_eq!(sms["region"], "us-east-1");
    let one = get_json(
        &server,
        "/_aws/sns/sms-messages?phoneNumber=%2B447700900123",
    )
    .await;
    assert_eq!(one["sms_messages"].as_object().unwrap().len(), 1);

    // DELETE forgets.
    let client = reqwest::Client::new();
    let deleted = client
        .delete(format!("{}/_aws/sns/sms-messages", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    assert!(deliveries(&server, "?protocol=sms").await.is_empty());
    assert!(
        !deliveries(&server, "").await.is_empty(),
        "other protocols kept"
    );
    let deleted = client
        .delete(format!("{}/_orderly/sns/deliveries", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    assert!(deliveries(&server, "").await.is_empty());
}
