//! Looking without consuming: `GET /_orderly/queues`, `GET /_orderly/queues/{name}/messages`,
//! and LocalStack's `/_aws/sqs/messages` and `/_localstack/health`, read by the way test helpers
//! read them. None of them may change a receive count, a visibility timeout or a group lock.

use aws_sdk_sqs::types::MessageSystemAttributeName as S;
use serde_json::Value;

use crate::common::{create_queue, fifo_queue, start_with_manual_clock, xml_text, Server};

async fn get_json(server: &Server, path: &str) -> (u16, Value) {
    let response = reqwest::get(format!("{}{path}", server.url()))
        .await
        .unwrap();
    let status = response.status().as_u16();
    (
        status,
        serde_json::from_str(&response.text().await.unwrap()).unwrap(),
    )
}

async fn send(server: &Server, url: &str, body: &str, group: &str) {
    server
        .sqs
        .send_message()
        .queue_url(url)
        .message_body(body)
        .message_group_id(group)
        .message_deduplication_id(body)
        .message_attributes(
            "kind",
            aws_sdk_sqs::types::MessageAttributeValue::builder()
                .data_type("String")
                .string_value("price")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
}

/// A FIFO queue with two groups, the first locked by one received message.
async fn seeded(server: &Server) -> String {
    let url = fifo_queue(server, "prices.fifo", &[("VisibilityTimeout", "30")]).await;
    for (body, group) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
        send(server, &url, body, group).await;
    }
    let got = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(1)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(got[0].body(), Some("a1"));
    url
}

#[tokio::test]
async fn queues_and_messages_are_shown_without_being_received() {
    let (server, clock) = start_with_manual_clock().await;
    let url = seeded(&server).await;
    create_queue(&server, "plain", &[("DelaySeconds", "60")]).await;
    server
        .sqs
        .send_message()
        .queue_url(server.queue_url("plain"))
        .message_body("later")
        .send()
        .await
        .unwrap();
    clock.advance_millis(4_000);

    let (status, overview) = get_json(&server, "/_orderly/queues").await;
    assert_eq!(status, 200, "{overview}");
    let queues = overview["queues"].as_array().unwrap();
    let names: Vec<&str> = queues.iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["plain", "prices.fifo"]);
    let fifo = &queues[1];
    assert_eq!(fifo["url"], url.as_str());
    assert_eq!(
        (&fifo["visible"], &fifo["inFlight"], &fifo["delayed"]),
        (&Value::from(2), &Value::from(1), &Value::from(0))
    );
    assert_eq!(
        (&fifo["groups"], &fifo["lockedGroups"]),
        (&2.into(), &1.into())
    );
    assert_eq!(fifo["oldestMessageAgeSeconds"], 4);
    assert_eq!(queues[0]["delayed"], 1);
    assert_eq!(
        queues[0]["groups"],
        Value::Null,
        "standard queues have no groups"
    );

    let path = "/_orderly/queues/prices.fifo/messages";
    let (_, all) = get_json(&server, path).await;
    let messages = all["messages"].as_array().unwrap();
    let bodies: Vec<&str> = messages
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["a1", "a2", "b1"], "in the order they were sent");
    assert_eq!(all["truncated"], false);
    let first = &messages[0];
    assert_eq!(
        (&first["state"], &first["receiveCount"], &first["groupId"]),
        (&"inFlight".into(), &1.into(), &"a".into())
    );
    assert_eq!(first["deduplicationId"], "a1");
    assert_eq!(first["messageAttributes"]["kind"]["StringValue"], "price");
    assert!(first["invisibleUntil"].as_str().unwrap().ends_with('Z'));
    assert!(first["sequenceNumber"].as_str().unwrap().len() >= 20);
    assert_eq!(messages[1]["state"], "visible");

    let (_, groups) = get_json(&server, "/_orderly/queues/prices.fifo/groups").await;
    assert_eq!(groups["groups"][0]["group"], "a");
    assert_eq!(
        (
            &groups["groups"][0]["locked"],
            &groups["groups"][0]["blocked"]
        ),
        (&Value::Bool(true), &Value::from(1))
    );
    assert_eq!(groups["groups"][1]["locked"], false);

    let (_, in_flight) = get_json(&server, &format!("{path}?state=inFlight")).await;
    assert_eq!(in_flight["messages"].as_array().unwrap().len(), 1);
    let (_, limited) = get_json(&server, &format!("{path}?state=visible&limit=1")).await;
    assert_eq!(limited["messages"][0]["body"], "a2");
    for bad in ["?state=gone", "?limit=0", "?limit=x"] {
        assert_eq!(
            get_json(&server, &format!("{path}{bad}")).await.0,
            400,
            "{bad}"
        );
    }
    let (status, missing) = get_json(&server, "/_orderly/queues/nope/messages").await;
    assert_eq!(
        (status, &missing["code"]),
        (404, &"QueueDoesNotExist".into())
    );

    // Nothing moved: group a is still locked, so a receive gets b1; a1 comes back with its
    // second receive once its timeout ends.
    let next = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    let bodies: Vec<_> = next.iter().map(|m| m.body().unwrap()).collect();
    assert_eq!(bodies, ["b1"]);
    clock.advance_millis(30_000);
    let again = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names(S::ApproximateReceiveCount)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(again[0].body(), Some("a1"));
    assert_eq!(
        again[0].attributes().unwrap()[&S::ApproximateReceiveCount],
        "2"
    );
}

/// A peek answers at most 8 MiB of messages and says when that left some out; a limit that
/// leaves some out is not that.
#[tokio::test]
async fn a_peek_past_its_bytes_says_it_left_messages_out() {
    let server = crate::common::start().await;
    let url = create_queue(&server, "large-peek", &[]).await;
    let body = "x".repeat(250_000);
    for _ in 0..34 {
        let sent = server
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body(&body);
        sent.send().await.unwrap();
    }
    let path = "/_orderly/queues/large-peek/messages?limit=100";
    let (status, peek) = get_json(&server, path).await;
    assert_eq!(status, 200);
    // 33 bodies of 250 kB fit in 8 MiB (8,388,608 bytes), the 34th does not.
    let shown = peek["messages"].as_array().unwrap().len();
    assert_eq!((shown, &peek["truncated"]), (33, &Value::Bool(true)));
    let (_, limited) = get_json(&server, "/_orderly/queues/large-peek/messages?limit=5").await;
    let shown = limited["messages"].as_array().unwrap().len();
    assert_eq!((shown, &limited["truncated"]), (5, &Value::Bool(false)));
}

/// A test helper as written for LocalStack: it reads a queue through `/_aws/sqs/messages`,
/// accepting JSON, and gets the XML answer's structure (a lone message as an object).
async fn localstack_peek(server: &Server, queue_url: &str, extra: &str) -> Vec<Value> {
    let response = reqwest::Client::new()
        .post(format!("{}/_aws/sqs/messages", server.url()))
        .header("accept", "application/json")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("QueueUrl={}{extra}", urlencode(queue_url)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    match &answer["ReceiveMessageResponse"]["ReceiveMessageResult"]["Message"] {
        Value::Array(messages) => messages.clone(),
        Value::Null => Vec::new(),
        one => vec![one.clone()],
    }
}

/// LocalStack's JSON lists attributes as `[{"Name", "Value"}]`.
fn attribute<'a>(message: &'a Value, name: &str) -> Option<&'a str> {
    let list = match &message["Attribute"] {
        Value::Array(list) => list.clone(),
        one => vec![one.clone()],
    };
    list.iter()
        .position(|a| a["Name"] == name)
        .and_then(|i| message["Attribute"][i]["Value"].as_str())
}

fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[tokio::test]
async fn a_localstack_style_helper_reads_messages_unchanged() {
    let (server, _clock) = start_with_manual_clock().await;
    let url = seeded(&server).await;

    let visible = localstack_peek(&server, &url, "").await;
    let bodies: Vec<&str> = visible
        .iter()
        .map(|m| m["Body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["a2", "b1"]);
    let all = localstack_peek(&server, &url, "&ShowInvisible=true").await;
    assert_eq!(all.len(), 3);
    let a1 = &all[0];
    assert_eq!(attribute(a1, "MessageGroupId"), Some("a"));
    assert_eq!(attribute(a1, "ApproximateReceiveCount"), Some("1"));
    assert_eq!(attribute(a1, "IsVisible"), Some("false"));
    assert_eq!(attribute(&all[1], "IsVisible"), Some("true"));
    assert_eq!(
        attribute(&all[1], "ApproximateFirstReceiveTimestamp"),
        Some("0")
    );
    assert_eq!(a1["MessageAttribute"]["Name"], "kind");
    assert_eq!(a1["MessageAttribute"]["Value"]["StringValue"], "price");
    // The MD5s an SDK would check are the stored ones.
    assert_eq!(a1["MD5OfBody"], md5_hex("a1"));

    // XML by default, by GET and the path form too.
    let xml = reqwest::get(format!(
        "{}/_aws/sqs/messages/us-east-1/000000000000/prices.fifo?ShowInvisible=true",
        server.url()
    ))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(xml.contains("<ReceiveMessageResponse"), "{xml}");
    assert_eq!(xml.matches("<Message>").count(), 3, "{xml}");
    assert_eq!(xml_text(&xml, "Body"), Some("a1"));

    // A handle from a peek deletes nothing.
    let handle = a1["ReceiptHandle"].as_str().unwrap();
    let deleted = server
        .sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle(handle)
        .send()
        .await;
    assert!(deleted.is_err());
    assert_eq!(
        localstack_peek(&server, &url, "&ShowInvisible=true")
            .await
            .len(),
        3
    );

    // An SDK pointed at the endpoint receives every message, receiving none of them.
    for endpoint in ["/_aws/sqs/messages", "/_aws/sqs/messages/"] {
        let peeking = aws_sdk_sqs::Client::from_conf(
            server
                .sqs
                .config()
                .to_builder()
                .endpoint_url(format!("{}{endpoint}", server.url()))
                .build(),
        );
        let got = peeking
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(1)
            .send()
            .await
            .unwrap();
        let bodies: Vec<_> = got.messages().iter().map(|m| m.body().unwrap()).collect();
        assert_eq!(
            bodies,
            ["a2", "b1"],
            "max messages ignored; in-flight a1 hidden"
        );
        let refused = peeking
            .send_message()
            .queue_url(&url)
            .message_body("x")
            .send()
            .await
            .unwrap_err();
        assert_eq!(
            aws_sdk_sqs::error::ProvideErrorMetadata::code(&refused),
            Some("InvalidRequest")
        );
    }
    assert_eq!(
        localstack_peek(&server, &url, "").await.len(),
        2,
        "nothing was received"
    );

    // Errors: no queue URL, a URL that is no queue's, another region's queue.
    let base = server.url();
    let json_error = |path: String| {
        let url = format!("{base}{path}");
        async move {
            let response = reqwest::Client::new()
                .get(url)
                .header("accept", "application/json")
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
            (
                status,
                body["ErrorResponse"]["Error"]["Code"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        }
    };
    let missing = json_error("/_aws/sqs/messages".into()).await;
    assert_eq!(
        missing,
        (400, "AWS.SimpleQueueService.NonExistentQueue".into())
    );
    let nonsense = format!(
        "/_aws/sqs/messages?QueueUrl={}",
        urlencode("http://localhost:4566/nonsense")
    );
    assert_eq!(json_error(nonsense).await, (404, "InvalidAddress".into()));
    let elsewhere =
        json_error("/_aws/sqs/messages/us-east-2/000000000000/prices.fifo".into()).await;
    assert_eq!(
        elsewhere,
        (400, "AWS.SimpleQueueService.NonExistentQueue".into())
    );

    // An unknown queue is answered as SQS answers it.
    let response = reqwest::Client::new()
        .get(format!(
            "{}/_aws/sqs/messages?QueueUrl={}",
            server.url(),
            urlencode(&server.queue_url("nope"))
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let text = response.text().await.unwrap();
    assert!(
        text.contains("AWS.SimpleQueueService.NonExistentQueue"),
        "{text}"
    );

    // A lone message is an object, as xmltodict reads a lone element.
    let single = create_queue(&server, "single", &[]).await;
    server
        .sqs
        .send_message()
        .queue_url(&single)
        .message_body("only")
        .send()
        .await
        .unwrap();
    let one = reqwest::Client::new()
        .get(format!(
            "{}/_aws/sqs/messages/us-east-1/000000000000/single",
            server.url()
        ))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    let one: Value = serde_json::from_str(&one.text().await.unwrap()).unwrap();
    let message = &one["ReceiveMessageResponse"]["ReceiveMessageResult"]["Message"];
    assert_eq!(message["Body"], "only");

    let (status, health) = get_json(&server, "/_localstack/health").await;
    assert_eq!(status, 200);
    assert_eq!(
        (&health["services"]["sqs"], &health["services"]["sns"]),
        (&"running".into(), &"running".into())
    );
}

fn md5_hex(text: &str) -> String {
    use md5::Digest;
    md5::Md5::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn each_subscription_shows_what_became_of_its_last_messages() {
    let (server, _clock) = start_with_manual_clock().await;
    let topic = crate::common::fifo_topic(&server, "prices.fifo").await;
    fifo_queue(&server, "all.fifo", &[]).await;
    fifo_queue(&server, "eu.fifo", &[]).await;
    crate::common::subscribe(&server, &topic, "all.fifo", true).await;
    crate::common::subscribe_with(
        &server,
        &topic,
        "eu.fifo",
        &[
            ("RawMessageDelivery", "true"),
            ("FilterPolicy", r#"{"region":["eu"]}"#),
        ],
    )
    .await
    .unwrap();
    let mut ids = Vec::new();
    for (body, region) in [("us price", "us"), ("eu price", "eu")] {
        let published = server
            .sns
            .publish()
            .topic_arn(&topic)
            .message(body)
            .message_group_id("g")
            .message_deduplication_id(region)
            .message_attributes("region", crate::common::string_attribute(region))
            .send()
            .await
            .unwrap();
        ids.push(published.message_id.unwrap());
    }
    // A copy for a queue of another shard is `relayed` until it lands there (a moment, as
    // the carrier commits it to that shard's log); what it became is asked for after.
    let started = std::time::Instant::now();
    let listing = loop {
        let (status, listing) = get_json(&server, "/_orderly/subscriptions").await;
        assert_eq!(status, 200);
        if !listing.to_string().contains("\"relayed\"") {
            break listing;
        }
        assert!(started.elapsed().as_secs() < 10, "never landed: {listing}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let subscriptions = listing["subscriptions"].as_array().unwrap();
    assert_eq!(subscriptions.len(), 2);
    let fates = |s: &Value| -> Vec<(String, String)> {
        s["lastDeliveries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["messageId"].as_str().unwrap().to_string(),
                    d["fate"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let all = subscriptions
        .iter()
        .find(|s| s["endpoint"].as_str().unwrap().ends_with("all.fifo"))
        .unwrap();
    let eu = subscriptions
        .iter()
        .find(|s| s["endpoint"].as_str().unwrap().ends_with("eu.fifo"))
        .unwrap();
    assert_eq!(
        fates(all),
        [
            (ids[0].clone(), "queued".to_string()),
            (ids[1].clone(), "queued".to_string())
        ]
    );
    assert_eq!(
        fates(eu),
        [
            (ids[0].clone(), "filteredOut".to_string()),
            (ids[1].clone(), "queued".to_string())
        ]
    );
    assert_eq!(eu["filterPolicy"], r#"{"region":["eu"]}"#);
    assert_eq!(eu["rawMessageDelivery"], true);
}

/// Without `--auth`, the console's actions (`POST /_orderly/sqs`) need no credentials and
/// act as the server's account.
#[tokio::test]
async fn the_consoles_actions_need_no_key_without_auth() {
    let server = crate::common::start().await;
    let url = create_queue(&server, "console", &[]).await;
    let sent = reqwest::Client::new()
        .post(format!("{}/_orderly/sqs", server.url()))
        .header("X-Amz-Target", "AmazonSQS.SendMessage")
        .header("Content-Type", "application/x-amz-json-1.0")
        .body(serde_json::json!({"QueueUrl": url, "MessageBody": "hello"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200);
    let got = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names(S::SenderId)
        .send()
        .await
        .unwrap();
    let message = &got.messages()[0];
    assert_eq!(message.body(), Some("hello"));
    assert_eq!(message.attributes().unwrap()[&S::SenderId], "000000000000");
    // A body past the limit is refused in the endpoint's one protocol, whatever the headers.
    let too_large = reqwest::Client::new()
        .post(format!("{}/_orderly/sqs", server.url()))
        .body(vec![
            b'x';
            orderly::config::Config::ephemeral().max_request_bytes
                + 1
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(too_large.status(), 413);
    let said: serde_json::Value = serde_json::from_str(&too_large.text().await.unwrap()).unwrap();
    assert!(
        said["__type"]
            .as_str()
            .unwrap()
            .ends_with("RequestEntityTooLargeException"),
        "{said}"
    );
}

#[tokio::test]
async fn a_node_on_its_own_says_it_is_single() {
    let (server, _clock) = start_with_manual_clock().await;
    let (status, state) = get_json(&server, "/_orderly/cluster").await;
    assert_eq!(status, 200);
    // Moved to a log in a database by this run, it leads that log, or follows its leader.
    use crate::common::TestStorage;
    let (role, epoch) = match crate::common::test_storage() {
        Some(TestStorage::Log) => ("leader", 1),
        Some(TestStorage::Standby) => ("standby", 1),
        // One of three nodes leading their shares: its own, each in the epoch it took it.
        Some(TestStorage::Spread) => ("leader", 0),
        _ => ("single", 0),
    };
    assert_eq!(state["role"], role, "{state}");
    assert_eq!(state["epoch"], epoch, "{state}");
    let leads = role != "standby";
    assert_eq!(state["leader"] == server.url().as_str(), leads, "{state}");
    assert_eq!(state["lag"], 0, "{state}");
    // One shard (more when this run asks), each of which a node leads unless it is a standby;
    // a third of them when three nodes lead their shares.
    let shards = crate::common::test_shards();
    assert_eq!(state["shards"], shards, "{state}");
    let led: Vec<u64> = (state["led"].as_array().into_iter().flatten())
        .filter_map(serde_json::Value::as_u64)
        .collect();
    let leads_count = match (crate::common::test_storage(), leads) {
        (Some(TestStorage::Spread), _) => shards as usize / 3,
        (_, true) => shards as usize,
        (_, false) => 0,
    };
    assert_eq!(led.len(), leads_count, "{state}");
    assert!(led.iter().all(|&n| n < u64::from(shards)), "{state}");
    // Each shard's log, when it keeps one (the shards it leads, when it leads its share):
    // none in memory.
    let logs = match crate::common::test_storage() {
        Some(TestStorage::Log | TestStorage::Standby) => shards as usize,
        Some(TestStorage::Spread) => leads_count,
        _ => 0,
    };
    assert_eq!(
        state["logs"].as_array().map(Vec::len),
        Some(logs),
        "{state}"
    );
}

/// A path under `/_orderly/` that names no endpoint (a typo, a slash too many) is answered
/// 404 naming it, in JSON, whatever the method, not read as an SQS request.
#[tokio::test]
async fn a_mistyped_endpoint_is_not_found() {
    let (server, _clock) = start_with_manual_clock().await;
    for path in [
        "/_orderly/nonexistent",
        "/_orderly/reset/",
        "/_orderly/queues/p",
    ] {
        let (status, body) = get_json(&server, path).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body["message"].as_str().unwrap().contains(path), "{body}");
        let posted = reqwest::Client::new()
            .post(format!("{}{path}", server.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(posted.status(), 404, "{path}");
    }
}
