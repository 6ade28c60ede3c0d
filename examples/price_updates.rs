//! Price updates through a FIFO queue with aws-sdk-sqs: a producer sends ticks for several
//! symbols (one message group per symbol), a consumer prints them in per-symbol order.
//!
//! Start the server (`cargo run --release`), then: `cargo run --example price_updates [ENDPOINT]`
//! (default endpoint http://127.0.0.1:4566). Exits non-zero if any symbol arrives out of order.

use std::collections::HashMap;

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageSystemAttributeName, SendMessageBatchRequestEntry,
};
use aws_smithy_http_client::tls;

const SYMBOLS: &[&str] = &["AAPL", "MSFT", "AMZN", "NVDA"];
const TICKS: usize = 25;

fn client(endpoint: &str) -> aws_sdk_sqs::Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new(
            "example", "example", None, None, "example",
        ))
        .http_client(http)
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:4566".into());
    let sqs = client(&endpoint);
    let queue_url = sqs
        .create_queue()
        .queue_name("price-updates.fifo")
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::ContentBasedDeduplication,
            "true",
        )
        .send()
        .await?
        .queue_url
        .ok_or("no queue url")?;

    // Producer: one batch per tick, one entry per symbol.
    for tick in 0..TICKS {
        let entries = SYMBOLS
            .iter()
            .enumerate()
            .map(|(i, symbol)| {
                let price = 100.0 + (tick as f64) * 0.25 + i as f64;
                SendMessageBatchRequestEntry::builder()
                    .id(format!("e{i}"))
                    .message_group_id(*symbol)
                    .message_body(format!("{symbol} {tick} {price:.2}"))
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        sqs.send_message_batch()
            .queue_url(&queue_url)
            .set_entries(Some(entries))
            .send()
            .await?;
    }

    // Consumer: receive, print, delete, and check each symbol's ticks arrive in order.
    let mut last_tick: HashMap<String, i64> = HashMap::new();
    let mut received = 0;
    while received < TICKS * SYMBOLS.len() {
        let out = sqs
            .receive_message()
            .queue_url(&queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(2)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .send()
            .await?;
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            return Err(format!("queue ran dry after {received} messages").into());
        }
        let mut deletes = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let body = m.body().unwrap_or_default();
            let mut parts = body.split(' ');
            let symbol = parts.next().unwrap_or_default().to_string();
            let tick: i64 = parts.next().unwrap_or("-1").parse()?;
            let previous = last_tick.insert(symbol.clone(), tick).unwrap_or(-1);
            if tick != previous + 1 {
                return Err(format!("{symbol}: tick {tick} after {previous}").into());
            }
            println!("{body}");
            deletes.push(
                DeleteMessageBatchRequestEntry::builder()
                    .id(format!("d{i}"))
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()?,
            );
            received += 1;
        }
        sqs.delete_message_batch()
            .queue_url(&queue_url)
            .set_entries(Some(deletes))
            .send()
            .await?;
    }
    sqs.delete_queue().queue_url(&queue_url).send().await?;
    println!("received {received} price updates, every symbol in order");
    Ok(())
}
