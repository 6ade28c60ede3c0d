//! Errors of Orderly's own endpoints in JSON. Their handlers answer `{"message": …}`, but what
//! axum refuses before a handler runs (a body past its limit, a method the path does not take)
//! it answers in plain text or with no body: those are rewritten here, so a test helper reading
//! JSON reads every refusal. The API's answers and the nodes' own paths are left alone.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use super::between_nodes;

/// Longest plain-text refusal read to be rewritten; axum's are a line.
const MOST_TEXT: usize = 16 << 10;

pub async fn as_json(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let own = (path.starts_with("/_orderly/") || path.starts_with("/_aws/"))
        && !between_nodes::is_between_nodes(path);
    let response = next.run(request).await;
    if !own || !response.status().is_client_error() && !response.status().is_server_error() {
        return response;
    }
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_none_or(|kind| kind.as_bytes().starts_with(b"text/plain"));
    if !plain {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MOST_TEXT)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let message = match text.trim() {
        "" => parts
            .status
            .canonical_reason()
            .unwrap_or("refused")
            .to_string(),
        said => said.to_string(),
    };
    let body = serde_json::json!({ "message": message }).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body))
}

#[cfg(test)]
mod tests {
    use axum::routing::post;
    use axum::Router;
    use tower::ServiceExt;

    use super::*;

    async fn answer(
        router: Router,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> (u16, String, String) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::from(body))
            .unwrap();
        let response = router.oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let kind = response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap_or("")
            .to_string();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, kind, String::from_utf8_lossy(&body).into_owned())
    }

    fn router() -> Router {
        Router::new()
            .route(
                "/_orderly/clock",
                post(|_: axum::body::Bytes| async { "moved" }),
            )
            .route(
                between_nodes::SETTLED,
                post(|_: axum::body::Bytes| async { "ok" }),
            )
            .route_layer(axum::middleware::from_fn(as_json))
    }

    #[tokio::test]
    async fn axums_refusals_of_own_endpoints_are_json() {
        let (status, kind, body) =
            answer(router(), "POST", "/_orderly/clock", vec![b'x'; 3 << 20]).await;
        assert_eq!((status, kind.as_str()), (413, "application/json"));
        let said: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(
            said["message"].as_str().unwrap().contains("length limit"),
            "{body}"
        );
        let (status, kind, body) = answer(router(), "GET", "/_orderly/clock", vec![]).await;
        assert_eq!((status, kind.as_str()), (405, "application/json"));
        assert_eq!(body, r#"{"message":"Method Not Allowed"}"#);
        // Successes and the nodes' own paths stay as they were.
        let (status, _, body) = answer(router(), "POST", "/_orderly/clock", vec![]).await;
        assert_eq!((status, body.as_str()), (200, "moved"));
        let (status, kind, _) = answer(
            router(),
            "POST",
            between_nodes::SETTLED,
            vec![b'x'; 3 << 20],
        )
        .await;
        assert_eq!(status, 413);
        assert!(kind.starts_with("text/plain"), "{kind}");
    }
}
