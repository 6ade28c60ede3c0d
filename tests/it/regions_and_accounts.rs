//! Regions and accounts: the SigV4 credential scope's region and a 12-digit access key's account
//! pick the namespace a request acts in, as on AWS (and LocalStack). The same name in two regions
//! or two accounts is two queues; a topic delivers to a queue of another region; another account's
//! queue or topic is used only as its policy allows.

use aws_sdk_sns::error::ProvideErrorMetadata as _;
use aws_sdk_sqs::types::QueueAttributeName;

use crate::common::{self, sns_in, sqs_in};

async fn create(sqs: &aws_sdk_sqs::Client, name: &str) -> String {
    let created = sqs.create_queue().queue_name(name).send().await.unwrap();
    created.queue_url.unwrap()
}

async fn create_topic(sns: &aws_sdk_sns::Client, name: &str) -> String {
    let created = sns.create_topic().name(name).send().await.unwrap();
    created.topic_arn.unwrap()
}

/// The AWS error code of a failed call.
fn code<T, E: aws_sdk_sns::error::ProvideErrorMetadata>(
    result: Result<T, aws_sdk_sns::error::SdkError<E>>,
) -> String {
    let error = result.err().expect("refused");
    error.code().unwrap_or("none").to_string()
}

async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone()
}

async fn listed(sqs: &aws_sdk_sqs::Client) -> Vec<String> {
    sqs.list_queues()
        .send()
        .await
        .unwrap()
        .queue_urls
        .unwrap_or_default()
}

async fn bodies(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    sqs.receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.body)
        .collect()
}

#[tokio::test]
async fn one_name_in_two_regions_is_two_queues() {
    let server = common::start().await;
    let east = sqs_in(server.addr, "us-east-1", "AKIDORDERLY", "secret");
    let west = sqs_in(server.addr, "eu-west-1", "AKIDORDERLY", "secret");
    let mut urls = Vec::new();
    for (client, body) in [(&east, "east"), (&west, "west")] {
        let url = create(client, "prices").await;
        client
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .unwrap();
        urls.push(url);
    }
    let base = server.url();
    assert_eq!(urls[0], format!("{base}/000000000000/prices"));
    assert_eq!(
        urls[1],
        format!("{base}/queue/eu-west-1/000000000000/prices")
    );
    assert_eq!(
        queue_arn(&east, &urls[0]).await,
        "arn:aws:sqs:us-east-1:000000000000:prices"
    );
    assert_eq!(
        queue_arn(&west, &urls[1]).await,
        "arn:aws:sqs:eu-west-1:000000000000:prices"
    );
    // LocalStack's and AWS's regional hosts name the region (a client of us-east-1 here).
    let by_host = "http://sqs.eu-west-1.localhost.localstack.cloud:4566/000000000000/prices";
    assert_eq!(
        queue_arn(&east, by_host).await,
        "arn:aws:sqs:eu-west-1:000000000000:prices"
    );
    assert_eq!(listed(&east).await, vec![urls[0].clone()]);
    assert_eq!(listed(&west).await, vec![urls[1].clone()]);
    let found = west
        .get_queue_url()
        .queue_name("prices")
        .send()
        .await
        .unwrap();
    assert_eq!(found.queue_url.as_deref(), Some(urls[1].as_str()));
    // Each queue holds only what was sent to it. A URL without a region is the caller's.
    assert_eq!(bodies(&west, &urls[1]).await, vec!["west".to_string()]);
    assert_eq!(bodies(&west, &urls[0]).await, Vec::<String>::new());
    assert_eq!(bodies(&east, &urls[0]).await, vec!["east".to_string()]);
    // A name only one region has is not found from the other.
    east.create_queue()
        .queue_name("only-east")
        .send()
        .await
        .unwrap();
    let missing = west
        .get_queue_url()
        .queue_name("only-east")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        missing.code(),
        Some("AWS.SimpleQueueService.NonExistentQueue")
    );
    // A Query client posting to the queue URL itself, signed for the home region, reaches the
    // queue the URL's path names.
    let (status, body) = common::query(
        &server,
        "/queue/eu-west-1/000000000000/prices",
        &[("Action", "SendMessage"), ("MessageBody", "by path")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(bodies(&west, &urls[1]).await, vec!["by path".to_string()]);
}

#[tokio::test]
async fn a_topic_of_one_region_delivers_to_a_queue_of_another() {
    let server = common::start().await;
    let east_sqs = sqs_in(server.addr, "us-east-1", "AKIDORDERLY", "secret");
    let east_sns = sns_in(server.addr, "us-east-1", "AKIDORDERLY");
    let west_sns = sns_in(server.addr, "eu-west-1", "AKIDORDERLY");
    let topic = create_topic(&west_sns, "quotes").await;
    assert_eq!(topic, "arn:aws:sns:eu-west-1:000000000000:quotes");
    let east_topics = east_sns.list_topics().send().await.unwrap().topics.unwrap();
    assert!(east_topics.is_empty(), "{east_topics:?}");
    let west_topics = west_sns.list_topics().send().await.unwrap().topics.unwrap();
    assert_eq!(west_topics.len(), 1);
    // A client of another region cannot use the topic's ARN (shared/spec/sns.md §3).
    let refused = east_sns
        .publish()
        .topic_arn(&topic)
        .message("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("InvalidParameter"));
    assert_eq!(refused.message(), Some("Invalid parameter: TopicArn"));
    let url = create(&east_sqs, "quotes-east").await;
    let queue = queue_arn(&east_sqs, &url).await;
    let subscription = west_sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(&queue)
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    assert!(subscription.starts_with(&topic), "{subscription}");
    let east_subscriptions = east_sns.list_subscriptions().send().await.unwrap();
    assert!(east_subscriptions.subscriptions.unwrap().is_empty());
    west_sns
        .publish()
        .topic_arn(&topic)
        .message("189.50")
        .send()
        .await
        .unwrap();
    // The queue may be another shard's, on another node: its copy lands a moment later.
    common::carried(&server).await;
    assert_eq!(bodies(&east_sqs, &url).await, vec!["189.50".to_string()]);
}

#[tokio::test]
async fn another_account_uses_a_queue_only_as_its_policy_allows() {
    let server = common::start().await;
    let owner = sqs_in(server.addr, "us-east-1", "111111111111", "secret");
    let other = sqs_in(server.addr, "us-east-1", "222222222222", "secret");
    let url = create(&owner, "orders").await;
    assert_eq!(url, format!("{}/111111111111/orders", server.url()));
    assert!(listed(&other).await.is_empty());
    // The same name in the other account is another queue.
    let own = create(&other, "orders").await;
    assert_eq!(own, format!("{}/222222222222/orders", server.url()));

    let send = other.send_message().queue_url(&url).message_body("from 2");
    let denied = send.send().await.unwrap_err();
    assert_eq!(denied.code(), Some("AccessDenied"));
    assert_eq!(
        denied.raw_response().map(|r| r.status().as_u16()),
        Some(403)
    );
    assert_eq!(
        code(
            other
                .get_queue_url()
                .queue_name("orders")
                .queue_owner_aws_account_id("111111111111")
                .send()
                .await
        ),
        "AccessDenied"
    );

    owner
        .add_permission()
        .queue_url(&url)
        .label("partner")
        .aws_account_ids("222222222222")
        .actions("SendMessage")
        .actions("GetQueueUrl")
        .send()
        .await
        .unwrap();
    let found = other
        .get_queue_url()
        .queue_name("orders")
        .queue_owner_aws_account_id("111111111111")
        .send()
        .await
        .unwrap();
    assert_eq!(found.queue_url.as_deref(), Some(url.as_str()));
    other
        .send_message()
        .queue_url(&url)
        .message_body("from 2")
        .send()
        .await
        .unwrap();
    // Only what was granted: receiving, and changing the queue, stay the owner's.
    assert_eq!(
        code(other.receive_message().queue_url(&url).send().await),
        "AccessDenied"
    );
    assert_eq!(
        code(other.purge_queue().queue_url(&url).send().await),
        "AccessDenied"
    );
    assert_eq!(
        code(other.delete_queue().queue_url(&url).send().await),
        "AccessDenied"
    );
    assert_eq!(bodies(&owner, &url).await, vec!["from 2".to_string()]);
    assert!(bodies(&other, &own).await.is_empty());
}

/// What another account names is checked for shape and looked up before access is refused
/// (observed on AWS): a subscription ARN without its id is malformed, and a move task of a queue
/// that does not exist is not found; only an existing foreign queue is denied.
#[tokio::test]
async fn another_accounts_malformed_or_missing_resources_are_answered_before_access() {
    use aws_sdk_sqs::error::ProvideErrorMetadata;
    use base64::Engine as _;
    let server = common::start().await;
    let owner = sqs_in(server.addr, "us-east-1", "111111111111", "secret");
    let other = sqs_in(server.addr, "us-east-1", "222222222222", "secret");
    create(&owner, "exists").await;
    let handle = |queue: &str| {
        let json = serde_json::json!({
            "taskId": "10f57157-fc38-4da9-a113-4de7e12d05dd",
            "sourceArn": format!("arn:aws:sqs:us-east-1:111111111111:{queue}"),
        });
        base64::engine::general_purpose::STANDARD.encode(json.to_string())
    };
    let missing = other
        .cancel_message_move_task()
        .task_handle(handle("test-queue-doesnt-exist-123456"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        missing.code(),
        Some("ResourceNotFoundException"),
        "{missing:?}"
    );
    assert_eq!(
        missing.message(),
        Some("The resource that you specified for the SourceArn parameter doesn't exist.")
    );
    let denied = other
        .cancel_message_move_task()
        .task_handle(handle("exists"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Some("AccessDenied"), "{denied:?}");

    let sns = sns_in(server.addr, "us-east-1", "222222222222");
    let malformed = sns
        .unsubscribe()
        .subscription_arn("arn:aws:sns:us-east-1:111111111111:random")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(malformed.is_invalid_parameter_exception(), "{malformed:?}");
    assert_eq!(
        aws_sdk_sns::error::ProvideErrorMetadata::message(&malformed),
        Some("Invalid parameter: SubscriptionId")
    );
}

#[tokio::test]
async fn another_account_publishes_to_a_topic_only_as_its_policy_allows() {
    let server = common::start().await;
    let owner = sns_in(server.addr, "us-east-1", "111111111111");
    let other = sns_in(server.addr, "us-east-1", "222222222222");
    let topic = create_topic(&owner, "alerts").await;
    assert_eq!(topic, "arn:aws:sns:us-east-1:111111111111:alerts");
    let attributes = owner
        .get_topic_attributes()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(attributes["Owner"], "111111111111");
    assert!(other
        .list_topics()
        .send()
        .await
        .unwrap()
        .topics
        .unwrap()
        .is_empty());
    // The default policy admits only the owner's account.
    let denied = other
        .publish()
        .topic_arn(&topic)
        .message("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Some("AuthorizationError"));
    assert!(denied
        .message()
        .unwrap()
        .contains("arn:aws:iam::222222222222:user/222222222222"));
    assert_eq!(
        denied.raw_response().map(|r| r.status().as_u16()),
        Some(403)
    );
    owner
        .add_permission()
        .topic_arn(&topic)
        .label("partner")
        .aws_account_id("222222222222")
        .action_name("Publish")
        .send()
        .await
        .unwrap();
    other
        .publish()
        .topic_arn(&topic)
        .message("x")
        .send()
        .await
        .unwrap();
    assert_eq!(
        code(
            other
                .subscribe()
                .topic_arn(&topic)
                .protocol("sqs")
                .endpoint("arn:aws:sqs:us-east-1:222222222222:mine")
                .send()
                .await
        ),
        "AuthorizationError"
    );
    // Granted Subscribe, the other account subscribes its own queue: the subscription is its
    // (Owner), and the topic delivers into the other account.
    owner
        .add_permission()
        .topic_arn(&topic)
        .label("partner-subscribe")
        .aws_account_id("222222222222")
        .action_name("Subscribe")
        .send()
        .await
        .unwrap();
    let other_sqs = sqs_in(server.addr, "us-east-1", "222222222222", "secret");
    let mine = create(&other_sqs, "mine").await;
    let subscription = other
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:222222222222:mine")
        .attributes("RawMessageDelivery", "true")
        .return_subscription_arn(true)
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    let attributes = owner
        .get_subscription_attributes()
        .subscription_arn(&subscription)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(attributes["Owner"], "222222222222");
    // ListSubscriptions lists the caller's own, whichever account's topic they are on.
    let listed = |sns: aws_sdk_sns::Client| async move {
        let page = sns.list_subscriptions().send().await.unwrap();
        let found = page.subscriptions.unwrap_or_default();
        found
            .into_iter()
            .filter_map(|s| s.subscription_arn)
            .collect::<Vec<_>>()
    };
    assert_eq!(listed(other.clone()).await, vec![subscription.clone()]);
    assert!(listed(owner.clone()).await.is_empty());
    owner
        .publish()
        .topic_arn(&topic)
        .message("to both accounts")
        .send()
        .await
        .unwrap();
    common::carried(&server).await;
    assert_eq!(
        bodies(&other_sqs, &mine).await,
        vec!["to both accounts".to_string()]
    );
}

#[tokio::test]
async fn a_queue_of_another_account_confirms_the_subscription_it_is_given() {
    let server = common::start().await;
    let owner = sns_in(server.addr, "us-east-1", "111111111111");
    let other_sns = sns_in(server.addr, "us-east-1", "222222222222");
    let other = sqs_in(server.addr, "us-east-1", "222222222222", "secret");
    let inbox = create(&other, "inbox").await;
    let topic = create_topic(&owner, "news").await;
    // The topic's owner subscribes the other account's queue: it pends, and the queue is sent
    // a SubscriptionConfirmation (SNS Developer Guide, cross-account SQS subscriptions).
    let subscribed = owner
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:222222222222:inbox")
        .send()
        .await
        .unwrap();
    assert_eq!(
        subscribed.subscription_arn.as_deref(),
        Some("pending confirmation")
    );
    let received = other
        .receive_message()
        .queue_url(&inbox)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(received.len(), 1);
    let document: serde_json::Value =
        serde_json::from_str(received[0].body.as_deref().unwrap()).unwrap();
    assert_eq!(document["Type"], "SubscriptionConfirmation");
    assert_eq!(document["TopicArn"], topic.as_str());
    assert!(document["SubscribeURL"]
        .as_str()
        .unwrap()
        .contains("Action=ConfirmSubscription"));
    let token = document["Token"].as_str().unwrap().to_string();
    let handle = received[0].receipt_handle.clone().unwrap();
    let delete = other
        .delete_message()
        .queue_url(&inbox)
        .receipt_handle(handle);
    delete.send().await.unwrap();
    let publish = |text: &'static str| owner.publish().topic_arn(&topic).message(text).send();
    publish("before").await.unwrap();
    assert!(
        bodies(&other, &inbox).await.is_empty(),
        "pending gets nothing"
    );
    // The queue's owner confirms with the token, though the topic's policy grants it nothing.
    let confirmed = other_sns
        .confirm_subscription()
        .topic_arn(&topic)
        .token(token)
        .send()
        .await
        .unwrap();
    assert!(confirmed.subscription_arn.unwrap().starts_with(&topic));
    publish("after").await.unwrap();
    let delivered = bodies(&other, &inbox).await;
    assert_eq!(delivered.len(), 1);
    let envelope: serde_json::Value = serde_json::from_str(&delivered[0]).unwrap();
    assert_eq!(envelope["Message"], "after");
}

#[tokio::test]
async fn one_namespace_when_asked() {
    let mut config = orderly::config::Config::ephemeral();
    config.single_namespace = true;
    let server = common::start_with(config).await;
    let east = sqs_in(server.addr, "us-east-1", "111111111111", "secret");
    let west = sqs_in(server.addr, "eu-west-1", "AKIDORDERLY", "secret");
    let url = create(&west, "shared").await;
    assert_eq!(url, server.queue_url("shared"));
    assert_eq!(listed(&east).await, vec![url.clone()]);
    // A URL's region and account are not looked at: the name alone finds the queue.
    let regional = "http://sqs.eu-west-1.localhost/999999999999/shared";
    east.send_message()
        .queue_url(regional)
        .message_body("by name")
        .send()
        .await
        .unwrap();
    assert_eq!(bodies(&west, &url).await, vec!["by name".to_string()]);
    // A 12-digit key is a user of the one account: its subscription needs no confirmation.
    let sns = sns_in(server.addr, "us-east-1", "111111111111");
    let topic = create_topic(&sns, "one").await;
    let subscribed = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:shared")
        .send()
        .await
        .unwrap();
    assert!(subscribed.subscription_arn.unwrap().starts_with(&topic));
}

/// A data directory's stored names are relative to its home region and account, so another
/// `--region` or `--account-id` is refused rather than moving every queue elsewhere.
#[tokio::test]
async fn a_data_directory_opens_only_with_its_own_region_and_account() {
    let dir = tempfile::tempdir().unwrap();
    drop(crate::binary::start(dir.path(), &[], "off"));
    for other in [["--region", "eu-west-1"], ["--account-id", "111111111111"]] {
        let said = crate::binary::refused(dir.path(), &other);
        assert!(
            said.contains("start with --region us-east-1 --account-id 000000000000"),
            "{said}"
        );
    }
    let again = crate::binary::start(dir.path(), &["--region", "us-east-1"], "off");
    drop(again);
}
