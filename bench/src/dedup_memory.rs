//! Memory per remembered deduplication id: a million FIFO sends with unique 36-character ids
//! (a UUID's length), each received and deleted soon after, so what the server still holds at
//! the end is the five-minute history of those ids, not the messages.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::load::{
    call, create_fifo_queue, delete_received, failed_row, http_client, start, System,
};
use crate::report::Row;
use crate::Args;

/// Unique ids sent, in batches of ten.
const IDS: u64 = 1_000_000;
/// Groups the sends go to: enough that every worker finds one unlocked to receive from.
const GROUPS: u64 = 256;
/// A server that has not taken and given back every message by then has lost some.
const LIMIT: Duration = Duration::from_secs(900);

/// One worker: sends a batch, then receives and deletes one, so the queue's backlog stays
/// small and the memory that grows is the history's.
async fn work(
    client: reqwest::Client,
    endpoint: String,
    queue_url: String,
    next: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
    deadline: Instant,
) -> Result<(), String> {
    let receive =
        format!(r#"{{"QueueUrl":"{queue_url}","MaxNumberOfMessages":10,"WaitTimeSeconds":0}}"#);
    loop {
        let first = next.fetch_add(10, Ordering::Relaxed);
        if first < IDS {
            let mut batch = format!(r#"{{"QueueUrl":"{queue_url}","Entries":["#);
            for n in first..(first + 10).min(IDS) {
                if n > first {
                    batch.push(',');
                }
                batch.push_str(&format!(
                    r#"{{"Id":"e{}","MessageBody":"m","MessageGroupId":"g{}","MessageDeduplicationId":"{n:036}"}}"#,
                    n - first,
                    n % GROUPS
                ));
            }
            batch.push_str("]}");
            call(&client, &endpoint, "SendMessageBatch", batch).await?;
        } else if received.load(Ordering::Relaxed) >= IDS {
            return Ok(());
        } else if Instant::now() > deadline {
            return Err(format!("not every message was received in {LIMIT:?}"));
        }
        let text = call(&client, &endpoint, "ReceiveMessage", receive.clone()).await?;
        let v: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        let Some(messages) = v["Messages"].as_array().filter(|m| !m.is_empty()) else {
            continue;
        };
        delete_received(&client, &endpoint, &queue_url, messages).await?;
        received.fetch_add(messages.len() as u64, Ordering::Relaxed);
    }
}

pub async fn run(args: &Args, system: System) -> Row {
    let scenario = format!("dedup-memory: {IDS} unique ids");
    let server = match start(args, system).await {
        Ok(server) => server,
        Err(why) => return failed_row(args, &scenario, system, why),
    };
    let client = http_client();
    let queue_url = create_fifo_queue(&client, &server.endpoint, "dedup.fifo").await;
    // Let start-up allocations settle before the baseline.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = server.rss_kib();
    let cpu_before = server.cpu_micros();
    let (next, received) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started = Instant::now();
    let workers: Vec<_> = (0..args.producers)
        .map(|_| {
            tokio::spawn(work(
                client.clone(),
                server.endpoint.clone(),
                queue_url.clone(),
                next.clone(),
                received.clone(),
                started + LIMIT,
            ))
        })
        .collect();
    let mut errors = 0;
    for worker in workers {
        if let Err(e) = worker.await.expect("worker") {
            errors += 1;
            eprintln!("dedup-memory: {e}");
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let received = received.load(Ordering::Relaxed);
    let grown = server.rss_kib().saturating_sub(before) * 1024;
    Row {
        scenario,
        system: system.name(args),
        messages: received,
        seconds,
        errors,
        lost: IDS.saturating_sub(received),
        server_cpu_us: server.cpu_micros() - cpu_before,
        note: format!(
            "RSS grew {} MiB while every id is remembered: {} bytes per id; msg/s is sent, received and deleted",
            grown >> 20,
            grown / IDS
        ),
        ..Default::default()
    }
}
