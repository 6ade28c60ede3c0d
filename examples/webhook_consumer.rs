//! A webhook consumer: an HTTP endpoint subscribed to a FIFO topic of price updates. It
//! confirms the subscription by visiting the SubscribeURL, checks the signature of every
//! message against the certificate at SigningCertURL (as SNS message validators do), and
//! prints the updates, checking that each symbol's ticks arrive in order.
//!
//! HTTP subscriptions on FIFO topics are an Orderly extension: start the server with
//! `cargo run --release -- --fifo-http-subscriptions`, then
//! `cargo run --example webhook_consumer [ENDPOINT]`.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use base64::Engine as _;
use serde_json::Value;
use tokio::sync::mpsc;

const SYMBOLS: &[(&str, f64)] = &[("AAPL", 189.0), ("MSFT", 415.0), ("NVDA", 120.0)];
const TICKS: usize = 10;

type Error = Box<dyn std::error::Error>;

fn sns_client(endpoint: &str) -> aws_sdk_sns::Client {
    let config = aws_sdk_sns::Config::builder()
        .behavior_version(aws_sdk_sns::config::BehaviorVersion::latest())
        .region(aws_sdk_sns::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_sns::config::Credentials::new(
            "example", "example", None, None, "example",
        ))
        .http_client(
            aws_smithy_http_client::Builder::new()
                .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                    aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                ))
                .build_https(),
        )
        .build();
    aws_sdk_sns::Client::from_conf(config)
}

/// The endpoint: every POST goes to the channel as (message type header, JSON body).
async fn hook(
    State(tx): State<mpsc::UnboundedSender<(String, Value)>>,
    headers: HeaderMap,
    body: Bytes,
) -> &'static str {
    let kind = headers
        .get("x-amz-sns-message-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    if let Ok(json) = serde_json::from_slice(&body) {
        let _ = tx.send((kind, json));
    }
    "ok"
}

/// Checks a message's signature: the fixed key set, the certificate from SigningCertURL.
struct Verifier {
    certificates: HashMap<String, Vec<u8>>,
}

impl Verifier {
    async fn verify(&mut self, message: &Value) -> Result<(), Error> {
        let field = |k: &str| message.get(k).and_then(Value::as_str);
        let url = field("SigningCertURL").ok_or("unsigned message")?;
        if !self.certificates.contains_key(url) {
            let pem = reqwest::get(url).await?.text().await?;
            let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes())?;
            let key = pem
                .parse_x509()?
                .public_key()
                .subject_public_key
                .data
                .to_vec();
            self.certificates.insert(url.to_string(), key);
        }
        let text: String = [
            "Message",
            "MessageId",
            "Subject",
            "SubscribeURL",
            "Timestamp",
            "Token",
            "TopicArn",
            "Type",
        ]
        .iter()
        .filter_map(|k| field(k).map(|v| format!("{k}\n{v}\n")))
        .collect();
        let signature = base64::engine::general_purpose::STANDARD
            .decode(field("Signature").ok_or("no signature")?)?;
        let algorithm: &dyn ring::signature::VerificationAlgorithm = match field("SignatureVersion")
        {
            Some("2") => &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            _ => &ring::signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
        };
        ring::signature::UnparsedPublicKey::new(algorithm, &self.certificates[url])
            .verify(text.as_bytes(), &signature)
            .map_err(|_| "signature does not verify".into())
    }
}

async fn next(rx: &mut mpsc::UnboundedReceiver<(String, Value)>) -> Result<(String, Value), Error> {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await?
        .ok_or_else(|| "endpoint closed".into())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let endpoint = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:4566".into());
    let sns = sns_client(&endpoint);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook_url = format!("http://{}/prices", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/prices", axum::routing::post(hook))
        .with_state(tx);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let topic = sns
        .create_topic()
        .name("webhook-prices.fifo")
        .attributes("FifoTopic", "true")
        .attributes("ContentBasedDeduplication", "true")
        .send()
        .await?
        .topic_arn
        .ok_or("no topic arn")?;
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("http")
        .endpoint(&hook_url)
        .send()
        .await
        .map_err(|e| {
            format!(
                "subscribe failed (is the server running with --fifo-http-subscriptions?): {e:?}"
            )
        })?;
    let mut verifier = Verifier {
        certificates: HashMap::new(),
    };
    let (kind, confirmation) = next(&mut rx).await?;
    if kind != "SubscriptionConfirmation" {
        return Err(format!("expected a confirmation, got {kind}").into());
    }
    verifier.verify(&confirmation).await?;
    let subscribe_url = confirmation["SubscribeURL"]
        .as_str()
        .ok_or("no SubscribeURL")?;
    reqwest::get(subscribe_url).await?.error_for_status()?;
    println!("subscription confirmed");

    for tick in 0..TICKS {
        for (symbol, base) in SYMBOLS {
            sns.publish()
                .topic_arn(&topic)
                .message(format!("{symbol} {tick} {:.2}", base + tick as f64 * 0.5))
                .message_group_id(*symbol)
                .send()
                .await?;
        }
    }

    let mut last: HashMap<String, i64> = HashMap::new();
    for _ in 0..TICKS * SYMBOLS.len() {
        let (_, message) = next(&mut rx).await?;
        verifier.verify(&message).await?;
        let text = message["Message"].as_str().unwrap_or_default();
        let mut parts = text.split(' ');
        let symbol = parts.next().unwrap_or_default().to_string();
        let tick: i64 = parts.next().unwrap_or("-1").parse()?;
        if last
            .insert(symbol.clone(), tick)
            .is_some_and(|previous| tick != previous + 1)
        {
            return Err(format!("{symbol} tick {tick} out of order").into());
        }
        println!(
            "{text}  (sequence {})",
            message["SequenceNumber"].as_str().unwrap_or("-")
        );
    }
    sns.delete_topic().topic_arn(&topic).send().await?;
    println!(
        "webhook: {} signed updates verified, every symbol in order",
        TICKS * SYMBOLS.len()
    );
    Ok(())
}
