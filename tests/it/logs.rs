//! `--log-format json`: one JSON object a line on stderr, every error answer logged once with its
//! request id, action, resource, code and reason, every dead-lettered message once with its queues,
//! and every message retention drops once.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use aws_sdk_sqs::types::QueueAttributeName as A;

#[tokio::test]
async fn json_lines_name_error_answers_and_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_orderly"))
        .args([
            "--bind",
            "127.0.0.1:0",
            "--ephemeral",
            "--log-format",
            "json",
            "--clock",
            "manual",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = stdout.next().unwrap().unwrap();
    let addr: std::net::SocketAddr = line
        .strip_prefix("orderly listening on http://")
        .unwrap()
        .parse()
        .unwrap();
    let sqs = crate::common::client(addr);

    let dlq = sqs.create_queue().queue_name("dlq").send().await.unwrap();
    let source = sqs
        .create_queue()
        .queue_name("src")
        .attributes(A::VisibilityTimeout, "0")
        .attributes(
            A::RedrivePolicy,
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"1"}"#,
        )
        .send()
        .await
        .unwrap();
    let url = source.queue_url.unwrap();
    let sent = sqs
        .send_message()
        .queue_url(&url)
        .message_body("poison")
        .send()
        .await
        .unwrap();
    for _ in 0..2 {
        sqs.receive_message().queue_url(&url).send().await.unwrap();
    }
    let moved = sqs
        .receive_message()
        .queue_url(dlq.queue_url.unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(
        moved.messages().len(),
        1,
        "dead-lettered on its second receive"
    );
    assert!(sqs.get_queue_url().queue_name("nope").send().await.is_err());

    // A message past its retention, dropped when the queue is next looked at.
    let brief = sqs
        .create_queue()
        .queue_name("brief")
        .attributes(A::MessageRetentionPeriod, "60")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let old = sqs
        .send_message()
        .queue_url(&brief)
        .message_body("old")
        .send()
        .await
        .unwrap();
    let moved = reqwest::Client::new()
        .post(format!("http://{addr}/_orderly/clock"))
        .body(r#"{"advance":"2m"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), 200);
    for _ in 0..2 {
        let attributes = sqs
            .get_queue_attributes()
            .queue_url(&brief)
            .attribute_names(A::ApproximateNumberOfMessages)
            .send()
            .await
            .unwrap();
        assert_eq!(
            attributes.attributes().unwrap()[&A::ApproximateNumberOfMessages],
            "0"
        );
    }

    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let error: Vec<_> = lines
        .iter()
        .filter(|l| l["message"] == "error answer")
        .collect();
    assert_eq!(error.len(), 1, "{text}");
    let error = error[0];
    assert_eq!(error["action"], "GetQueueUrl");
    assert_eq!(error["resource"], "nope");
    assert_eq!(error["code"], "AWS.SimpleQueueService.NonExistentQueue");
    assert_eq!(error["status"], 400);
    assert!(error["request_id"].as_str().unwrap().len() >= 32);
    assert!(error["duration_ms"].as_f64().is_some());
    let dead: Vec<_> = lines
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("dead-lettered"))
        })
        .collect();
    assert_eq!(dead.len(), 1, "{text}");
    assert_eq!(
        (&dead[0]["queue"], &dead[0]["dead_letter_queue"]),
        (&"src".into(), &"dlq".into())
    );
    assert_eq!(dead[0]["message_id"], sent.message_id.unwrap().as_str());
    let expired: Vec<_> = lines
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("expired"))
        })
        .collect();
    assert_eq!(
        expired.len(),
        1,
        "once, though the queue was looked at twice: {text}"
    );
    assert_eq!(
        (&expired[0]["queue"], &expired[0]["message_id"]),
        (&"brief".into(), &old.message_id.unwrap().as_str().into())
    );
}

/// A storage URL that does not parse is refused without its password, whether it came as the
/// flag or as `ORDERLY_STORAGE` (meant to keep it out of process lists).
#[test]
fn a_storage_url_that_does_not_parse_is_refused_without_its_password() {
    let bad = "postgres://orderly:hunter2-secret@db.internal:notaport/orderly";
    let refused = |command: &mut Command| {
        let output = command.output().expect("runs");
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        String::from_utf8(output.stderr).expect("text")
    };
    let orderly = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_orderly"));
        command.env_remove("ORDERLY_STORAGE");
        command
    };
    let by_flag = refused(orderly().args(["--storage", bad]));
    let by_env = refused(
        orderly()
            .arg("--bind=127.0.0.1:0")
            .env("ORDERLY_STORAGE", bad),
    );
    let key_value = "host=db.internal port=notaport user=orderly password=hunter2-secret";
    let by_string = refused(orderly().args(["--storage", key_value]));
    for said in [by_flag, by_env, by_string] {
        assert!(!said.contains("hunter2"), "{said}");
        assert!(said.contains("--storage"), "{said}");
        assert!(said.contains("***"), "{said}");
    }
}
