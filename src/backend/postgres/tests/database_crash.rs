//! A PostgreSQL crash (`pg_ctl stop -m immediate`) under load, on a throwaway cluster of the
//! test's own: nothing acknowledged is lost, and the node reconnects by itself.

use std::sync::Arc;

use super::{clock, node};
use crate::backend::QueueAdmin;
use crate::clock::Clock;
use crate::engine::QueueConfig;

/// A throwaway cluster of this test's own (it is crashed on purpose), stopped when dropped.
struct OwnCluster {
    url: String,
    dir: String,
}

impl OwnCluster {
    fn script() -> String {
        format!("{}/scripts/postgres-cluster", env!("CARGO_MANIFEST_DIR"))
    }

    /// `None` (the test passes vacuously, saying so) when PostgreSQL is not installed outside CI.
    fn start() -> Option<OwnCluster> {
        let out = std::process::Command::new(Self::script())
            .arg("start")
            .output()
            .expect("the script runs");
        if out.status.code() == Some(3) {
            assert!(
                std::env::var_os("CI").is_none(),
                "PostgreSQL must be installed in CI"
            );
            eprintln!("skipped: no PostgreSQL server binaries");
            return None;
        }
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let (url, dir) = text.trim().split_once(' ').expect("URL and directory");
        Some(OwnCluster {
            url: url.into(),
            dir: dir.into(),
        })
    }

    /// `pg_ctl restart -m immediate`: as if the server crashed, then came back.
    fn crash(&self) {
        let status = std::process::Command::new(Self::script())
            .args(["crash", &self.dir])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new(Self::script())
            .args(["stop", &self.dir])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_crash_under_load_loses_nothing_acknowledged() {
    use crate::backend::Messages;
    use crate::engine::body::Body;
    use crate::engine::queue::{ReceiveRequest, SendRequest};
    use std::sync::atomic::{AtomicBool, Ordering};
    let Some(cluster) = tokio::task::spawn_blocking(OwnCluster::start)
        .await
        .unwrap()
    else {
        return;
    };
    let clock = clock();
    let backend = Arc::new(node(&cluster.url, &clock).await);
    for (name, fifo) in [("plain", false), ("ordered.fifo", true)] {
        let attributes = match fifo {
            true => vec![("FifoQueue".to_string(), "true".to_string())],
            false => Vec::new(),
        };
        let now = clock.now();
        let request = crate::backend::CreateQueue {
            name: name.into(),
            config: QueueConfig::for_create(name, &attributes, now).unwrap(),
            attributes,
            tags: Vec::new(),
            now,
        };
        backend.create_queue(request).await.unwrap();
    }
    // Four producers, two per queue (one FIFO group each); what was acknowledged is recorded,
    // what failed is not retried (it may or may not be stored).
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(std::sync::Mutex::new(Vec::<(usize, usize)>::new()));
    let after_crash = Arc::new(AtomicBool::new(false));
    let acked_after_crash = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let producers: Vec<_> = (0..4)
        .map(|p| {
            let (backend, stop, acked) = (backend.clone(), stop.clone(), acked.clone());
            let (after_crash, acked_after_crash) = (after_crash.clone(), acked_after_crash.clone());
            tokio::spawn(async move {
                let queue = if p % 2 == 0 { "plain" } else { "ordered.fifo" };
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let fifo = queue.ends_with(".fifo");
                    let request = SendRequest {
                        body: Body::new(format!("{p}:{n}")),
                        group_id: fifo.then(|| format!("g{p}").into()),
                        dedup_id: fifo.then(|| format!("{p}-{n}").into()),
                        sender_id: "test".into(),
                        ..SendRequest::default()
                    };
                    match backend.send(queue, request).await {
                        Ok(_) => {
                            acked.lock().unwrap().push((p, n));
                            if after_crash.load(Ordering::SeqCst) {
                                acked_after_crash.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                    }
                    n += 1;
                }
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let before = acked.lock().unwrap().len();
    assert!(before > 0, "sends succeed before the crash");
    let crashing = tokio::task::spawn_blocking(move || {
        cluster.crash();
        cluster
    });
    let cluster = crashing.await.unwrap();
    after_crash.store(true, Ordering::SeqCst);
    // The node reconnects by itself: sends succeed again within a few seconds.
    for _ in 0..100 {
        if acked_after_crash.load(Ordering::SeqCst) >= 20 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for producer in producers {
        producer.await.unwrap();
    }
    assert!(
        acked_after_crash.load(Ordering::SeqCst) >= 20,
        "the node serves again"
    );
    // Everything acknowledged is there; each FIFO group in order.
    let mut stored = Vec::new();
    for queue in ["plain", "ordered.fifo"] {
        loop {
            let request = ReceiveRequest {
                max_messages: Some(10),
                ..ReceiveRequest::default()
            };
            let got = backend.receive(queue, request, Some(0)).await.unwrap();
            if got.is_empty() {
                break;
            }
            for received in &got {
                let (p, n) = received.message.body.split_once(':').unwrap();
                stored.push((p.parse::<usize>().unwrap(), n.parse::<usize>().unwrap()));
            }
            let handles = got.iter().map(|r| r.receipt_handle.as_str()).collect();
            backend.delete(queue, handles).await.unwrap();
        }
    }
    let acked = acked.lock().unwrap();
    for message in acked.iter() {
        assert!(
            stored.contains(message),
            "acknowledged {message:?} was lost"
        );
    }
    for p in [1, 3] {
        let order: Vec<usize> = stored
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|(_, n)| *n)
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "group g{p} out of order: {order:?}"
        );
    }
    eprintln!(
        "acknowledged {} ({} before the crash, {} after), stored {}",
        acked.len(),
        before,
        acked_after_crash.load(Ordering::SeqCst),
        stored.len()
    );
    drop(cluster);
}
