//! What a data directory must hold, as the server stopped and started by a user sees it: a
//! clean stop is noted, and what a later start finds missing or cut short is refused by name.

use crate::common::{self, Stoppable};

fn written_segments(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .filter(|p| std::fs::metadata(p).unwrap().len() > 0)
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn a_clean_stop_is_noted_and_what_goes_missing_after_it_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let app = orderly::app::App::bind(&common::durable(dir.path()))
        .await
        .unwrap();
    let running = Stoppable::start(app).await;
    let queue = common::create_queue(&running.server, "kept", &[]).await;
    common::send_numbered(&running.server, &queue, 3).await;
    running.stop().await;
    assert!(dir.path().join("CLEAN").exists(), "the clean stop noted");

    // The last write cut short: after a clean stop that is damage, not a crash's torn tail.
    let segment = written_segments(dir.path()).pop().unwrap();
    let bytes = std::fs::read(&segment).unwrap();
    let end = bytes.iter().rposition(|b| *b != 0).unwrap() + 1;
    std::fs::write(&segment, &bytes[..end - 37]).unwrap();
    let said = crate::binary::refused(dir.path(), &[]);
    let name = segment.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        said.contains(&name) && said.contains("stopped cleanly"),
        "{said}"
    );

    // Every segment gone, the key left: the data went, and the start says so.
    std::fs::remove_file(dir.path().join("CLEAN")).unwrap();
    for segment in written_segments(dir.path()) {
        std::fs::remove_file(segment).unwrap();
    }
    let said = crate::binary::refused(dir.path(), &[]);
    assert!(
        said.contains("holds a key (KEY) but no log segment"),
        "{said}"
    );
}

/// A switch's environment twin takes 1 and 0 as well as true and false.
#[test]
fn ephemeral_from_the_environment_takes_1_and_0() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    drop(crate::binary::start_with_env(
        &data,
        &[],
        "off",
        &[("ORDERLY_EPHEMERAL", "1")],
    ));
    assert!(!data.exists(), "in memory: no data directory made");
    drop(crate::binary::start_with_env(
        &data,
        &[],
        "off",
        &[("ORDERLY_EPHEMERAL", "0")],
    ));
    assert!(
        data.join("KEY").exists(),
        "durable: the data directory holds its key"
    );
}

/// `POST /_orderly/clock` with a JSON body; answers the status and the clock's epoch millis.
async fn move_clock(addr: std::net::SocketAddr, body: &str) -> (u16, u64) {
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/_orderly/clock"))
        .body(body.to_string())
        .send()
        .await
        .expect("the clock endpoint answers");
    let status = answer.status().as_u16();
    let text = answer.text().await.expect("a body");
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    (status, json["epochMillis"].as_u64().expect("the time"))
}

/// A manual clock on a data directory starts where it was moved to after a SIGKILL and a
/// restart, not at the machine's time; a damaged record of it refuses the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_clock_starts_where_it_was_moved_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--clock", "manual"];
    let mut first = crate::binary::start(dir.path(), &args, "warn");
    let (status, moved_to) = move_clock(first.addr, r#"{"advance": "3d"}"#).await;
    assert_eq!(status, 200);
    first.child.kill().expect("SIGKILL");
    first.child.wait().expect("gone");

    let restarted = crate::binary::start(dir.path(), &args, "warn");
    let (_, now) = move_clock(restarted.addr, r#"{"advance": "0s"}"#).await;
    assert!(
        now >= moved_to,
        "the clock went back {} ms across the restart",
        moved_to - now
    );
    drop(restarted);

    std::fs::write(dir.path().join("CLOCK"), b"not a time").unwrap();
    let said = crate::binary::refused(dir.path(), &args);
    assert!(said.contains("CLOCK"), "{said}");
}
