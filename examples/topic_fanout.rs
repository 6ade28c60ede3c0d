//! Price updates published to a FIFO topic and fanned out to two subscriber queues: one gets
//! every update, the other (with a filter policy) only prices above 200. Consumers print what
//! they receive and check per-symbol order.
//!
//! Start the server (`cargo run --release`), then: `cargo run --example topic_fanout [ENDPOINT]`.

use std::collections::HashMap;

use aws_sdk_sns::types::MessageAttributeValue;
use aws_sdk_sqs::types::QueueAttributeName;
use aws_smithy_http_client::tls;

const SYMBOLS: &[(&str, f64)] = &[("AAPL", 189.0), ("MSFT", 415.0), ("NVDA", 120.0)];
const TICKS: usize = 10;

type Error = Box<dyn std::error::Error>;

fn clients(endpoint: &str) -> (aws_sdk_sns::Client, aws_sdk_sqs::Client) {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let credentials =
        aws_sdk_sqs::config::Credentials::new("example", "example", None, None, "example");
    let sns = aws_sdk_sns::Config::builder()
        .behavior_version(aws_sdk_sns::config::BehaviorVersion::latest())
        .region(aws_sdk_sns::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(credentials.clone())
        .http_client(http.clone())
        .build();
    let sqs = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(credentials)
        .http_client(http)
        .build();
    (
        aws_sdk_sns::Client::from_conf(sns),
        aws_sdk_sqs::Client::from_conf(sqs),
    )
}

async fn queue(sqs: &aws_sdk_sqs::Client, name: &str) -> Result<(String, String), Error> {
    let url = sqs
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await?
        .queue_url
        .ok_or("no queue url")?;
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await?
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .ok_or("no queue arn")?;
    Ok((url, arn))
}

/// Receives until the queue is empty; prints and checks per-symbol tick order.
async fn consume(sqs: &aws_sdk_sqs::Client, label: &str, url: &str) -> Result<usize, Error> {
    let mut last: HashMap<String, i64> = HashMap::new();
    let mut count = 0;
    loop {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await?;
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            return Ok(count);
        }
        for m in messages {
            let body = m.body().unwrap_or_default();
            let mut parts = body.split(' ');
            let (symbol, tick) = (
                parts.next().unwrap_or_default().to_string(),
                parts.next().unwrap_or("-1").parse::<i64>()?,
            );
            if last
                .insert(symbol.clone(), tick)
                .is_some_and(|previous| tick <= previous)
            {
                return Err(format!("{label}: {symbol} tick {tick} out of order").into());
            }
            println!("{label}: {body}");
            sqs.delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await?;
            count += 1;
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let endpoint = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:4566".into());
    let (sns, sqs) = clients(&endpoint);
    let topic = sns
        .create_topic()
        .name("price-ticks.fifo")
        .attributes("FifoTopic", "true")
        .attributes("ContentBasedDeduplication", "true")
        .send()
        .await?
        .topic_arn
        .ok_or("no topic arn")?;
    let (all_url, all_arn) = queue(&sqs, "all-ticks.fifo").await?;
    let (big_url, big_arn) = queue(&sqs, "big-ticks.fifo").await?;
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(&all_arn)
        .attributes("RawMessageDelivery", "true")
        .send()
        .await?;
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(&big_arn)
        .attributes("RawMessageDelivery", "true")
        .attributes("FilterPolicy", r#"{"price":[{"numeric":[">",200]}]}"#)
        .send()
        .await?;

    for tick in 0..TICKS {
        for (symbol, base) in SYMBOLS {
            let price = base + tick as f64 * 0.5;
            sns.publish()
                .topic_arn(&topic)
                .message(format!("{symbol} {tick} {price:.2}"))
                .message_group_id(*symbol)
                .message_attributes(
                    "price",
                    MessageAttributeValue::builder()
                        .data_type("Number")
                        .string_value(format!("{price}"))
                        .build()?,
                )
                .send()
                .await?;
        }
    }

    let all = consume(&sqs, "all", &all_url).await?;
    let big = consume(&sqs, "above-200", &big_url).await?;
    sns.delete_topic().topic_arn(&topic).send().await?;
    for url in [all_url, big_url] {
        sqs.delete_queue().queue_url(url).send().await?;
    }
    if all != TICKS * SYMBOLS.len() || big != TICKS {
        return Err(format!(
            "expected {} and {TICKS} updates, got {all} and {big}",
            TICKS * SYMBOLS.len()
        )
        .into());
    }
    println!("fan-out: {all} updates to every subscriber, {big} past the filter, all in order");
    Ok(())
}
