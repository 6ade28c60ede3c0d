//! Memory given back after a burst: the pipeline's load for `--duration` seconds on a server
//! with a manual clock, every message received and deleted; the resident memory then (the
//! messages gone, each one's deduplication id remembered), again once the clock has moved
//! past the five-minute deduplication window, and once the queue is deleted, against the idle
//! process before the burst: once with only its queue created, and once after one request of
//! each kind the pipeline makes (the figures are given against both).

use std::time::Duration;

use crate::load::{
    call, create_fifo_queue, delete_received, http_client, pipeline_on, send_batch, System,
};
use crate::report::Row;
use crate::server::ServerProcess;
use crate::Args;

/// Past the deduplication window (five minutes) with room to spare.
const PAST_THE_WINDOW: &str = "6m";

/// Settles allocations (and lets a collector, where there is one, run) before a reading.
const SETTLE: Duration = Duration::from_millis(1500);

/// Longest wait for memory to go back: allocators that give it back do so on a timer
/// (jemalloc's decay is 10 s by default).
const LONGEST_SETTLE: Duration = Duration::from_secs(30);

/// The resident memory once it has stopped falling for three seconds (or after
/// `LONGEST_SETTLE`), in KiB.
async fn settled_rss(server: &ServerProcess) -> u64 {
    let deadline = tokio::time::Instant::now() + LONGEST_SETTLE;
    let mut lowest = server.rss_kib();
    let mut since_lower = 0;
    while since_lower < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = server.rss_kib();
        if now < lowest {
            lowest = now;
            since_lower = 0;
        } else {
            since_lower += 1;
        }
    }
    lowest
}

/// Runs each request of the pipeline once, on a queue of its own deleted after: the code
/// they run is then paged in before the idle reading, as it is after the burst, so the
/// readings after compare memory the burst left with memory the process holds anyway.
async fn warm_up(client: &reqwest::Client, endpoint: &str) -> Result<(), String> {
    let queue_url = create_fifo_queue(client, endpoint, "warm-up.fifo").await;
    let entries: Vec<(usize, u64)> = (0..10).map(|g| (g, 1)).collect();
    send_batch(client, endpoint, &queue_url, &entries, 256, true).await?;
    let receive = format!(r#"{{"QueueUrl":"{queue_url}","MaxNumberOfMessages":10}}"#);
    let received = call(client, endpoint, "ReceiveMessage", receive).await?;
    let received: serde_json::Value = serde_json::from_str(&received).map_err(|e| e.to_string())?;
    let messages = received["Messages"].as_array().cloned().unwrap_or_default();
    if messages.is_empty() {
        return Err("nothing was received".into());
    }
    delete_received(client, endpoint, &queue_url, &messages).await?;
    call(
        client,
        endpoint,
        "DeleteQueue",
        format!(r#"{{"QueueUrl":"{queue_url}"}}"#),
    )
    .await?;
    Ok(())
}

pub async fn run(args: &Args) -> Row {
    let scenario = "burst memory".to_string();
    let server = ServerProcess::start(
        &args.orderly,
        &["--bind", "127.0.0.1:0", "--ephemeral", "--clock", "manual"],
    )
    .await;
    let client = http_client();
    let queue_url = create_fifo_queue(&client, &server.endpoint, "burst.fifo").await;
    tokio::time::sleep(SETTLE).await;
    let cold = server.rss_kib();
    let warmed = warm_up(&client, &server.endpoint).await;
    if let Err(e) = &warmed {
        eprintln!("burst-memory: the warm-up failed: {e}");
    }
    tokio::time::sleep(SETTLE).await;
    let idle = server.rss_kib();
    let pipeline = pipeline_on(
        args,
        (System::Orderly, &server),
        (&client, &queue_url),
        None,
        scenario.clone(),
        0,
    )
    .await;
    let drained = settled_rss(&server).await;
    let moved = client
        .post(format!("{}/_orderly/clock", server.endpoint))
        .body(format!(r#"{{"advance":"{PAST_THE_WINDOW}"}}"#))
        .send()
        .await
        .map(|r| r.status())
        .map_err(|e| e.to_string());
    let moved = moved.is_ok_and(|status| status.is_success());
    if !moved {
        eprintln!("burst-memory: the clock did not move");
    }
    // A receive finds the queue past its window, so its expired ids are let go now.
    let receive = format!(r#"{{"QueueUrl":"{queue_url}","MaxNumberOfMessages":10}}"#);
    let received = call(&client, &server.endpoint, "ReceiveMessage", receive).await;
    if let Err(e) = &received {
        eprintln!("burst-memory: ReceiveMessage failed: {e}");
    }
    let past_window = settled_rss(&server).await;
    let deleted = call(
        &client,
        &server.endpoint,
        "DeleteQueue",
        format!(r#"{{"QueueUrl":"{queue_url}"}}"#),
    )
    .await;
    if let Err(e) = &deleted {
        eprintln!("burst-memory: DeleteQueue failed: {e}");
    }
    let after = settled_rss(&server).await;
    // The load generator's connections go too, with what the server holds for each.
    drop(client);
    let closed = settled_rss(&server).await;
    let ids = pipeline.messages.max(1);
    let per_id = drained.saturating_sub(idle) * 1024 / ids;
    let warm_up_failed = match &warmed {
        Ok(()) => "",
        Err(_) => " (the warm-up failed: its queue may be in every reading)",
    };
    let undelivered = match pipeline.lost {
        0 => String::new(),
        lost => format!(" ({lost} messages were never delivered: the drained figure holds them)"),
    };
    Row {
        note: format!(
            "RSS idle {} MiB{warm_up_failed} (before the warm-up {} MiB: past the window, queue deleted and connections closed are {:.0} %, {:.0} % and {:.0} % of it); drained {} MiB ({per_id} bytes per message over idle){undelivered}; past the window {} MiB ({:.0} % of idle); queue deleted {} MiB ({:.0} % of idle); connections closed {} MiB ({:.0} % of idle)",
            idle >> 10,
            cold >> 10,
            past_window as f64 * 100.0 / cold.max(1) as f64,
            after as f64 * 100.0 / cold.max(1) as f64,
            closed as f64 * 100.0 / cold.max(1) as f64,
            drained >> 10,
            past_window >> 10,
            past_window as f64 * 100.0 / idle.max(1) as f64,
            after >> 10,
            after as f64 * 100.0 / idle.max(1) as f64,
            closed >> 10,
            closed as f64 * 100.0 / idle.max(1) as f64
        ),
        errors: pipeline.errors
            + u64::from(deleted.is_err() || received.is_err() || !moved || warmed.is_err()),
        ..pipeline
    }
}
