//! `--auth`: requests are checked against the key file's secrets with real SDK signatures.

use std::time::{Duration, SystemTime};

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use orderly::config::Config;

use crate::common::{self, Server};

fn keys_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("keys.json");
    std::fs::write(
        &path,
        r#"{"Keys": [
            {"AccessKeyId": "AKIDORDERLY", "SecretAccessKey": "secret",
             "UserName": "alice", "UserId": "AIDAALICE000000000001"},
            {"AccessKeyId": "AKIDOTHER", "SecretAccessKey": "other", "Account": "111111111111"}
        ]}"#,
    )
    .unwrap();
    path
}

/// A server's settings with `--auth` reading the key file written into `dir`.
fn with_keys(dir: &std::path::Path) -> Config {
    let mut config = Config::ephemeral();
    config.auth = Some(keys_file(dir));
    config
}

fn client(server: &Server, key: &str, secret: &str) -> aws_sdk_sqs::Client {
    common::client_as(server.addr, key, secret)
}

async fn error_code(sqs: &aws_sdk_sqs::Client) -> String {
    let error = sqs.list_queues().send().await.expect_err("refused");
    error.code().unwrap_or("none").to_string()
}

#[tokio::test]
async fn with_one_namespace_another_accounts_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = with_keys(dir.path());
    config.single_namespace = true;
    let server = common::start_with(config).await;
    assert_eq!(
        error_code(&client(&server, "AKIDOTHER", "other")).await,
        "AccessDenied"
    );
    assert!(client(&server, "AKIDORDERLY", "secret")
        .list_queues()
        .send()
        .await
        .is_ok());
}

#[tokio::test]
async fn the_right_key_works_and_names_the_sender_others_get_aws_errors() {
    let dir = tempfile::tempdir().unwrap();
    let config = with_keys(dir.path());
    let server = common::start_with(config).await;
    // common's clients sign with AKIDORDERLY / secret.
    let queue = common::create_queue(&server, "signed", &[]).await;
    server
        .sqs
        .send_message()
        .queue_url(&queue)
        .message_body("from a verified key")
        .send()
        .await
        .unwrap();
    let received = server
        .sqs
        .receive_message()
        .queue_url(&queue)
        .message_system_attribute_names(MessageSystemAttributeName::SenderId)
        .send()
        .await
        .unwrap();
    let message = &received.messages.unwrap()[0];
    // The key file names the IAM user the key stands for.
    assert_eq!(
        message.attributes.as_ref().unwrap()[&MessageSystemAttributeName::SenderId],
        "AIDAALICE000000000001"
    );
    let topic = server
        .sns
        .create_topic()
        .name("signed")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let queue_arn = "arn:aws:sqs:us-east-1:000000000000:signed";
    let subscription = common::subscribe(&server, &topic, queue_arn, false).await;
    let attributes = common::subscription_attributes(&server, &subscription).await;
    assert_eq!(
        attributes["SubscriptionPrincipal"],
        "arn:aws:iam::000000000000:user/alice"
    );

    assert_eq!(
        error_code(&client(&server, "AKIDORDERLY", "wrong")).await,
        "SignatureDoesNotMatch"
    );
    assert_eq!(
        error_code(&client(&server, "AKIDNOBODY", "secret")).await,
        "InvalidClientTokenId"
    );
    // Another account's key acts in its own account: it sees none of this one's queues and
    // may not use them (their policies grant it nothing).
    let other = client(&server, "AKIDOTHER", "other");
    let listed = other.list_queues().send().await.unwrap();
    assert!(listed.queue_urls.unwrap_or_default().is_empty());
    let denied = other
        .send_message()
        .queue_url(server.queue_url("signed"))
        .message_body("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Some("AccessDenied"));
    // Unsigned: even reads are refused, but the SNS links get through to SNS.
    let listed = reqwest::get(format!("{}/?Action=ListQueues", server.url()))
        .await
        .unwrap();
    assert_eq!(listed.status().as_u16(), 403);
    assert!(listed
        .text()
        .await
        .unwrap()
        .contains("MissingAuthenticationToken"));
    let link = reqwest::get(format!(
        "{}/?Action=ConfirmSubscription&TopicArn=arn:aws:sns:us-east-1:000000000000:signed&Token=nope",
        server.url()
    ))
    .await
    .unwrap();
    let body = link.text().await.unwrap();
    assert!(!body.contains("MissingAuthenticationToken"), "{body}");
    // Nothing the refused clients sent changed anything.
    let attributes = server
        .sqs
        .get_queue_attributes()
        .queue_url(&queue)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    assert_eq!(
        attributes.attributes.unwrap()[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "1"
    );
}

/// A `ListQueues` GET of `server` signed by AKIDORDERLY at `at`: the signature's instructions
/// (headers, or query parameters) and the URL they sign.
fn list_queues_signed(
    server: &Server,
    at: SystemTime,
    settings: aws_sigv4::http_request::SigningSettings,
) -> (aws_sigv4::http_request::SigningInstructions, String) {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest};
    let identity =
        aws_credential_types::Credentials::new("AKIDORDERLY", "secret", None, None, "t").into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("sqs")
        .time(at)
        .settings(settings)
        .build()
        .unwrap()
        .into();
    let url = format!("{}/?Action=ListQueues&Version=2012-11-05", server.url());
    let host = server.addr.to_string();
    let signable = SignableRequest::new(
        "GET",
        url.as_str(),
        [("host", host.as_str())].into_iter(),
        SignableBody::Bytes(b""),
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    (instructions, url)
}

/// Freshness is judged on the machine's clock, as the signer's was: not on the server's, which
/// `--clock manual` moves (here it reads 2023).
#[tokio::test]
async fn a_request_signed_at_another_time_is_expired() {
    let dir = tempfile::tempdir().unwrap();
    let config = with_keys(dir.path());
    let server = common::start_with_clock(config, common::manual_clock()).await;
    let sqs = client(&server, "AKIDORDERLY", "secret");
    sqs.list_queues().send().await.expect("signed now: fresh");
    let signed = |at: SystemTime| {
        let (instructions, url) = list_queues_signed(&server, at, Default::default());
        let mut request = reqwest::Client::new().get(&url);
        for (name, value) in instructions.headers() {
            request = request.header(name, value);
        }
        request
    };
    let answer = signed(SystemTime::now()).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let answer = signed(hour_ago).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 400);
    assert!(answer.text().await.unwrap().contains("RequestExpired"));
}

#[tokio::test]
async fn a_presigned_url_works_until_tampered_with() {
    use aws_sigv4::http_request::{SignatureLocation, SigningSettings};
    let dir = tempfile::tempdir().unwrap();
    let config = with_keys(dir.path());
    let server = common::start_with(config).await;
    common::create_queue(&server, "presigned", &[]).await;
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(Duration::from_secs(300));
    let (instructions, url) = list_queues_signed(&server, SystemTime::now(), settings);
    let mut request = reqwest::Client::new().get(&url).build().unwrap();
    for (name, value) in instructions.params() {
        request.url_mut().query_pairs_mut().append_pair(name, value);
    }
    let presigned = request.url().to_string();
    let answer = reqwest::get(&presigned).await.unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    assert!(answer.text().await.unwrap().contains("presigned"));
    let tampered = presigned.replace("ListQueues", "ListQueueTags");
    let answer = reqwest::get(&tampered).await.unwrap();
    assert_eq!(answer.status().as_u16(), 403);
    assert!(answer
        .text()
        .await
        .unwrap()
        .contains("SignatureDoesNotMatch"));
}

#[tokio::test]
async fn orderlys_own_endpoints_ask_for_a_key_by_http_basic() {
    let dir = tempfile::tempdir().unwrap();
    let config = with_keys(dir.path());
    let server = common::start_with(config).await;
    common::create_queue(&server, "private", &[]).await;
    let http = reqwest::Client::new();
    let url = |path: &str| format!("{}{path}", server.url());
    let paths = [
        "/metrics",
        "/_orderly/queues",
        "/_orderly/queues/private/messages",
        "/_orderly/subscriptions",
        "/_orderly/webhooks",
        "/_orderly/console",
        "/_aws/sqs/messages/us-east-1/000000000000/private",
    ];
    for path in paths {
        let bare = http.get(url(path)).send().await.unwrap();
        assert_eq!(bare.status(), 401, "{path}");
        let challenge = bare.headers()["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("Basic realm="), "{challenge}");
        for (key, secret) in [
            ("AKIDORDERLY", "wrong"),
            ("AKIDOTHER", "other"),
            ("nobody", "x"),
        ] {
            let refused = http
                .get(url(path))
                .basic_auth(key, Some(secret))
                .send()
                .await
                .unwrap();
            assert_eq!(refused.status(), 401, "{path} as {key}");
        }
        let allowed = http
            .get(url(path))
            .basic_auth("AKIDORDERLY", Some("secret"))
            .send()
            .await
            .unwrap();
        assert_eq!(allowed.status(), 200, "{path}");
    }
    let reset = http
        .post(url("/_orderly/reset?all=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status(), 401);
    // Nothing was reset.
    assert_eq!(
        server
            .sqs
            .list_queues()
            .send()
            .await
            .unwrap()
            .queue_urls()
            .len(),
        1
    );
}

/// An SDK given LocalStack's peek endpoint as its endpoint URL signs its requests and cannot
/// send HTTP Basic: a signature of a key of this account lets it in; a wrong secret, another
/// account's key and no credentials at all do not.
#[tokio::test]
async fn the_peek_endpoint_takes_a_signed_sdk_request_of_this_account() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start_with(with_keys(dir.path())).await;
    let owner = client(&server, "AKIDORDERLY", "secret");
    let url = owner
        .create_queue()
        .queue_name("peeked")
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_string();
    owner
        .send_message()
        .queue_url(&url)
        .message_body("kept")
        .send()
        .await
        .unwrap();
    let peeking = |key: &str, secret: &str| {
        aws_sdk_sqs::Client::from_conf(
            client(&server, key, secret)
                .config()
                .to_builder()
                .endpoint_url(format!("{}/_aws/sqs/messages", server.url()))
                .build(),
        )
    };
    for _ in 0..2 {
        let got = peeking("AKIDORDERLY", "secret")
            .receive_message()
            .queue_url(&url)
            .send()
            .await
            .unwrap();
        let bodies: Vec<_> = got.messages().iter().map(|m| m.body().unwrap()).collect();
        assert_eq!(bodies, ["kept"], "peeked, not received");
    }
    for (key, secret, code) in [
        ("AKIDORDERLY", "wrong", "SignatureDoesNotMatch"),
        ("AKIDOTHER", "other", "AccessDenied"),
    ] {
        let refused = peeking(key, secret)
            .receive_message()
            .queue_url(&url)
            .send()
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Some(code), "{key}");
    }
    let bare = reqwest::Client::new()
        .post(format!("{}/_aws/sqs/messages", server.url()))
        .form(&[("QueueUrl", url.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 401);
}

/// The console's actions (`POST /_orderly/sqs`): SQS's JSON protocol taken from the Basic key,
/// never from a browser page of another origin.
#[tokio::test]
async fn the_consoles_actions_act_as_the_basic_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = with_keys(dir.path());
    let server = common::start_with(config).await;
    let queue = common::create_queue(&server, "console", &[]).await;
    let http = reqwest::Client::new();
    let send = |body: &str| {
        http.post(format!("{}/_orderly/sqs", server.url()))
            .header("X-Amz-Target", "AmazonSQS.SendMessage")
            .header("Content-Type", "application/x-amz-json-1.0")
            .body(serde_json::json!({"QueueUrl": queue, "MessageBody": body}).to_string())
    };
    let bare = send("bare").send().await.unwrap();
    assert_eq!(bare.status(), 401);
    let wrong = send("wrong")
        .basic_auth("AKIDORDERLY", Some("guess"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let foreign = send("foreign")
        .basic_auth("AKIDORDERLY", Some("secret"))
        .header("Origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    let sent = send("from the console")
        .basic_auth("AKIDORDERLY", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200);
    let answer: serde_json::Value = serde_json::from_str(&sent.text().await.unwrap()).unwrap();
    assert!(answer["MessageId"].is_string(), "{answer}");
    let unknown = http
        .post(format!("{}/_orderly/sqs", server.url()))
        .basic_auth("AKIDORDERLY", Some("secret"))
        .header("X-Amz-Target", "AmazonSQS.PurgeQueue")
        .header("Content-Type", "application/x-amz-json-1.0")
        .body(r#"{"QueueUrl": "http://localhost/000000000000/nope"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 400);
    let error: serde_json::Value = serde_json::from_str(&unknown.text().await.unwrap()).unwrap();
    assert!(
        error["__type"]
            .as_str()
            .unwrap()
            .ends_with("QueueDoesNotExist"),
        "{error}"
    );

    let received = server
        .sqs
        .receive_message()
        .queue_url(&queue)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::SenderId)
        .send()
        .await
        .unwrap();
    let messages = received.messages();
    assert_eq!(messages.len(), 1, "only the authorised send arrived");
    assert_eq!(messages[0].body(), Some("from the console"));
    let sender = &messages[0].attributes().unwrap()[&MessageSystemAttributeName::SenderId];
    assert_eq!(sender, "AIDAALICE000000000001", "the key's user");
}

/// Receipt handles in the unkeyed form of earlier versions (the numbers and 6 bytes of their
/// plain SHA-256), for every small queue id, position and receive number: what anyone could
/// compute without the server's key.
fn guessed_handles() -> Vec<String> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use sha2::Digest;
    let mut handles = Vec::new();
    for queue in 1..=8u64 {
        for position in 1..=8u64 {
            for receive in 0..=2u64 {
                let mut bytes = vec![1u8];
                for word in [queue, position, receive] {
                    bytes.extend_from_slice(&word.to_be_bytes());
                }
                let sum = sha2::Sha256::digest(&bytes);
                bytes.extend_from_slice(&sum[..6]);
                handles.push(format!("AQEB{}", URL_SAFE_NO_PAD.encode(&bytes)));
                // Today's layout (version 2, a 16-byte tag) with a tag made up.
                bytes[0] = 2;
                bytes.truncate(25);
                bytes.extend_from_slice(&sum[..16]);
                handles.push(format!("AQEB{}", URL_SAFE_NO_PAD.encode(&bytes)));
            }
        }
    }
    handles
}

#[tokio::test]
async fn an_account_allowed_only_to_delete_deletes_nothing_it_did_not_receive() {
    use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
    let dir = tempfile::tempdir().unwrap();
    let config = with_keys(dir.path());
    let server = common::start_with(config).await;
    let queue = common::create_queue(&server, "shared", &[]).await;
    server
        .sqs
        .add_permission()
        .queue_url(&queue)
        .label("deleter")
        .aws_account_ids("111111111111")
        .actions("DeleteMessage")
        .send()
        .await
        .unwrap();
    common::send_numbered(&server, &queue, 6).await;
    // The real consumer holds two in flight.
    let held = server
        .sqs
        .receive_message()
        .queue_url(&queue)
        .max_number_of_messages(2)
        .visibility_timeout(600)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(held.len(), 2);

    let other = client(&server, "AKIDOTHER", "other");
    let refused = other
        .receive_message()
        .queue_url(&queue)
        .send()
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("AccessDenied"));
    let guesses = guessed_handles();
    for (call, chunk) in guesses.chunks(10).enumerate() {
        let entries = chunk.iter().enumerate().map(|(i, handle)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(format!("e{i}"))
                .receipt_handle(handle)
                .build()
                .unwrap()
        });
        let answer = other
            .delete_message_batch()
            .queue_url(&queue)
            .set_entries(Some(entries.collect()))
            .send()
            .await
            .unwrap();
        assert!(answer.successful.is_empty(), "call {call}: {answer:?}");
        assert!(
            answer
                .failed
                .iter()
                .all(|f| f.code == "ReceiptHandleIsInvalid" && f.sender_fault),
            "call {call}: {:?}",
            answer.failed
        );
    }
    let counts = common::queue_attributes(&server, &queue).await;
    assert_eq!(
        counts[&QueueAttributeName::ApproximateNumberOfMessages],
        "4"
    );
    assert_eq!(
        counts[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "2"
    );
    // A handle it is given, one the server issued, it may use: the permission works.
    other
        .delete_message()
        .queue_url(&queue)
        .receipt_handle(held[0].receipt_handle.clone().unwrap())
        .send()
        .await
        .unwrap();
    server
        .sqs
        .delete_message()
        .queue_url(&queue)
        .receipt_handle(held[1].receipt_handle.clone().unwrap())
        .send()
        .await
        .unwrap();
    let counts = common::queue_attributes(&server, &queue).await;
    assert_eq!(
        counts[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "0"
    );
}

/// Temporary credentials for `role_arn`, asked of `server` by AssumeRole signed with the key
/// file's AKIDORDERLY: the access key, the secret and the session token.
pub(crate) async fn assume_role(server: &Server, role_arn: &str) -> (String, String, String) {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest};
    let identity =
        aws_credential_types::Credentials::new("AKIDORDERLY", "secret", None, None, "t").into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("sts")
        .time(SystemTime::now())
        .settings(Default::default())
        .build()
        .unwrap()
        .into();
    let body = common::form_encode(&[
        ("Action", "AssumeRole"),
        ("Version", "2011-06-15"),
        ("RoleArn", role_arn),
        ("RoleSessionName", "tester"),
    ]);
    let (url, host) = (format!("{}/", server.url()), server.addr.to_string());
    let content_type = "application/x-www-form-urlencoded";
    let headers = [("host", host.as_str()), ("content-type", content_type)];
    let signable = SignableRequest::new(
        "POST",
        url.as_str(),
        headers.into_iter(),
        SignableBody::Bytes(body.as_bytes()),
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    let mut request = (reqwest::Client::new().post(&url))
        .header("content-type", content_type)
        .body(body.clone());
    for (name, value) in instructions.headers() {
        request = request.header(name, value);
    }
    let answer = request.send().await.unwrap().text().await.unwrap();
    let part = |tag: &str| {
        common::xml_text(&answer, tag)
            .unwrap_or_else(|| panic!("{tag}: {answer}"))
            .to_string()
    };
    (
        part("AccessKeyId"),
        part("SecretAccessKey"),
        part("SessionToken"),
    )
}

/// An SQS client signing with temporary credentials, their session token included or not.
pub(crate) fn temporary_client(
    server: &Server,
    (key, secret, token): &(String, String, String),
    with_token: bool,
) -> aws_sdk_sqs::Client {
    let token = with_token.then(|| token.clone());
    let credentials = aws_credential_types::Credentials::new(key, secret, token, None, "sts");
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .endpoint_url(server.url())
        .credentials_provider(credentials)
        .http_client(common::http_client())
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// With `--auth`, AssumeRole's credentials sign requests as the SDKs sign them (their session
/// token in `X-Amz-Security-Token`) and act in the role's account; without the token, or with
/// another secret, they are refused as AWS refuses them.
#[tokio::test]
async fn temporary_credentials_sign_requests_in_the_roles_account() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start_with(with_keys(dir.path())).await;
    let issued = assume_role(&server, "arn:aws:iam::222233334444:role/deployer").await;
    assert!(issued.0.starts_with("ASIA"), "{issued:?}");
    let sqs = temporary_client(&server, &issued, true);
    let created = (sqs.create_queue().queue_name("assumed").send().await).expect("admitted");
    let url = created.queue_url.unwrap();
    assert!(url.contains("/222233334444/assumed"), "{url}");
    let without_token = temporary_client(&server, &issued, false);
    assert_eq!(error_code(&without_token).await, "InvalidClientTokenId");
    let forged = (
        issued.0.clone(),
        "not-the-secret".to_string(),
        issued.2.clone(),
    );
    assert_eq!(
        error_code(&temporary_client(&server, &forged, true)).await,
        "SignatureDoesNotMatch"
    );
}
