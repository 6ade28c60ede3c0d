//! The null handler: same HTTP stack as Orderly (axum on tokio), parses each JSON request and
//! answers a well-formed response, stores nothing. Its figures are this machine's ceiling.

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::Router;
use serde_json::{json, Value};

async fn handle(headers: HeaderMap, body: Bytes) -> ([(&'static str, &'static str); 1], String) {
    let target = headers
        .get("x-amz-target")
        .and_then(|t| t.to_str().ok())
        .unwrap_or("");
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let response = match target {
        "AmazonSQS.SendMessageBatch" => {
            let ids: Vec<Value> = request["Entries"]
                .as_array()
                .map(|entries| {
                    entries
                        .iter()
                        .map(|e| json!({"Id": e["Id"], "MessageId": "00000000-0000-0000-0000-000000000000", "MD5OfMessageBody": "0", "SequenceNumber": "1"}))
                        .collect()
                })
                .unwrap_or_default();
            json!({"Successful": ids})
        }
        "AmazonSQS.SendMessage" => {
            json!({"MessageId": "00000000-0000-0000-0000-000000000000", "MD5OfMessageBody": "0", "SequenceNumber": "1"})
        }
        "AmazonSQS.CreateQueue" => {
            json!({"QueueUrl": format!("http://null/000000000000/{}", request["QueueName"].as_str().unwrap_or("q"))})
        }
        _ => json!({}),
    };
    (
        [("content-type", "application/x-amz-json-1.0")],
        response.to_string(),
    )
}

pub async fn run(bind: &str) {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .expect("bind null server");
    println!(
        "orderly listening on http://{}",
        listener.local_addr().expect("addr")
    );
    let router = Router::new().fallback(handle);
    axum::serve(listener, router).await.expect("null server");
}
