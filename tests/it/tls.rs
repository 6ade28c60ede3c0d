//! HTTPS on the listening port: the AWS SDK trusting a CA the test makes reaches Orderly,
//! the queue URLs and SNS links it hands out use https, and plain HTTP to the port gets no
//! answer.

use std::time::Duration;

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_smithy_http_client::tls::{self, TlsContext, TrustStore};
use orderly::app::App;
use orderly::config::Config;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

/// A CA and a certificate it signed for localhost and 127.0.0.1: (CA PEM, cert PEM, key PEM).
pub(crate) fn certificates() -> (String, String, String) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

#[tokio::test]
async fn the_sdk_trusting_our_ca_speaks_https_and_gets_https_urls() {
    let (ca, cert, key) = certificates();
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_file, cert).unwrap();
    std::fs::write(&key_file, key).unwrap();
    let mut config = Config::ephemeral();
    config.tls_cert = Some(cert_file);
    config.tls_key = Some(key_file);
    let app = App::bind(&config).await.unwrap();
    let addr = app.local_addr().unwrap();
    tokio::spawn(app.serve(std::future::pending()));

    let trust = TlsContext::builder()
        .with_trust_store(TrustStore::empty().with_pem_certificate(ca.into_bytes()))
        .build()
        .unwrap();
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .tls_context(trust)
        .build_https();
    let endpoint = format!("https://localhost:{}", addr.port());
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url(&endpoint)
            .credentials_provider(Credentials::new("AKID", "secret", None, None, "test"))
            .http_client(http.clone())
            .build(),
    );
    let sns = aws_sdk_sns::Client::from_conf(
        aws_sdk_sns::Config::builder()
            .behavior_version(aws_sdk_sns::config::BehaviorVersion::latest())
            .region(aws_sdk_sns::config::Region::new("us-east-1"))
            .endpoint_url(&endpoint)
            .credentials_provider(aws_sdk_sns::config::Credentials::new(
                "AKID", "secret", None, None, "test",
            ))
            .http_client(http)
            .build(),
    );
    // A webhook's confirmation links back over https.
    let receiver = crate::receiver::Receiver::start().await;
    let topic = sns.create_topic().name("secure").send().await.unwrap();
    sns.subscribe()
        .topic_arn(topic.topic_arn().unwrap())
        .protocol("http")
        .endpoint(receiver.url("/hook"))
        .send()
        .await
        .unwrap();
    let confirmation = receiver.next().await.json();
    for link in ["SubscribeURL", "SigningCertURL"] {
        let url = confirmation[link].as_str().unwrap();
        assert!(url.starts_with(&format!("{endpoint}/")), "{link}: {url}");
    }
    let url = sqs
        .create_queue()
        .queue_name("secure")
        .send()
        .await
        .expect("an HTTPS answer")
        .queue_url
        .unwrap();
    assert_eq!(
        url,
        format!("https://localhost:{}/000000000000/secure", addr.port())
    );
    sqs.send_message()
        .queue_url(&url)
        .message_body("over TLS")
        .send()
        .await
        .unwrap();
    let received = sqs.receive_message().queue_url(&url).send().await.unwrap();
    assert_eq!(
        received.messages.unwrap()[0].body.as_deref(),
        Some("over TLS")
    );

    // Plain HTTP to the TLS port: no HTTP answer.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(format!("http://127.0.0.1:{}/health", addr.port()))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    // A client that does not trust the CA is refused at the handshake.
    let untrusting = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(format!("https://localhost:{}/health", addr.port()))
        .send()
        .await;
    assert!(untrusting.is_err());
}

#[tokio::test]
async fn a_missing_or_broken_certificate_stops_startup_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cert_file = dir.path().join("cert.pem");
    std::fs::write(&cert_file, "not a certificate").unwrap();
    let mut config = Config::ephemeral();
    config.tls_cert = Some(cert_file);
    config.tls_key = Some(dir.path().join("missing-key.pem"));
    let error = App::bind(&config).await.err().expect("refused");
    assert!(error.to_string().contains("cert.pem"), "{error}");
}
