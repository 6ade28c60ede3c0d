//! A real HTTP endpoint for webhook tests: records every request and answers with scripted
//! statuses per path (200 once the script runs out).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use tokio::sync::mpsc;

#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: String,
    /// Status this request was answered with.
    pub status: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

#[derive(Default)]
struct Script {
    statuses: HashMap<String, VecDeque<u16>>,
    always: HashMap<String, u16>,
    delays: HashMap<String, Duration>,
}

type Shared = (Arc<Mutex<Script>>, mpsc::UnboundedSender<Received>);

pub struct Receiver {
    pub addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    requests: tokio::sync::Mutex<mpsc::UnboundedReceiver<Received>>,
    scheme: &'static str,
    failed_handshakes: Arc<std::sync::atomic::AtomicUsize>,
}

async fn record(
    State((script, tx)): State<Shared>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let path = uri.path().to_string();
    let (status, delay) = {
        let mut script = script.lock().unwrap();
        let scripted = script.statuses.get_mut(&path).and_then(VecDeque::pop_front);
        let status = scripted
            .or_else(|| script.always.get(&path).copied())
            .unwrap_or(200);
        (status, script.delays.get(&path).copied())
    };
    let _ = tx.send(Received {
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        status,
    });
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    StatusCode::from_u16(status).unwrap()
}

/// TLS on accepted connections, with a self-signed certificate for 127.0.0.1.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    failed_handshakes: Arc<std::sync::atomic::AtomicUsize>,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.tcp.accept().await else {
                continue;
            };
            // A client that refuses the certificate just ends its handshake.
            match self.acceptor.accept(stream).await {
                Ok(tls) => return (tls, addr),
                Err(_) => {
                    self.failed_handshakes
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

fn tls_acceptor() -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![certified.cert.der().clone()], key)
    .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

impl Receiver {
    pub async fn start() -> Receiver {
        Self::start_with_tls(false).await
    }

    /// A receiver on a fixed port (a data directory written earlier names its endpoint).
    pub async fn start_on(port: u16) -> Receiver {
        Self::listen(("127.0.0.1", port), false).await
    }

    /// An HTTPS receiver with a self-signed certificate.
    pub async fn start_tls() -> Receiver {
        Self::start_with_tls(true).await
    }

    async fn start_with_tls(tls: bool) -> Receiver {
        Self::listen(("127.0.0.1", 0), tls).await
    }

    async fn listen(addr: (&str, u16), tls: bool) -> Receiver {
        let script = Arc::new(Mutex::new(Script::default()));
        let (tx, rx) = mpsc::unbounded_channel();
        let app = axum::Router::new()
            .fallback(record)
            .with_state((script.clone(), tx));
        // A fixed port may still be held for a moment by the previous test's runtime.
        let mut tries = 0;
        let tcp = loop {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(tcp) => break tcp,
                Err(e) if tries < 50 && e.kind() == std::io::ErrorKind::AddrInUse => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("receiver cannot listen on {addr:?}: {e}"),
            }
        };
        let addr = tcp.local_addr().unwrap();
        let failed_handshakes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        if tls {
            let listener = TlsListener {
                tcp,
                acceptor: tls_acceptor(),
                failed_handshakes: failed_handshakes.clone(),
            };
            tokio::spawn(async move { axum::serve(listener, app).await });
        } else {
            tokio::spawn(async move { axum::serve(tcp, app).await });
        }
        Receiver {
            addr,
            script,
            requests: tokio::sync::Mutex::new(rx),
            scheme: if tls { "https" } else { "http" },
            failed_handshakes,
        }
    }

    /// TLS handshakes a client broke off (it refused the certificate).
    pub fn failed_handshakes(&self) -> usize {
        self.failed_handshakes
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// The next requests to `path` get these statuses, in order.
    pub fn respond(&self, path: &str, statuses: &[u16]) {
        self.script
            .lock()
            .unwrap()
            .statuses
            .entry(path.to_string())
            .or_default()
            .extend(statuses);
    }

    /// Requests to `path` are answered only after this long.
    pub fn delay(&self, path: &str, delay: Duration) {
        self.script
            .lock()
            .unwrap()
            .delays
            .insert(path.to_string(), delay);
    }

    /// Every request to `path` gets this status (after any scripted ones).
    pub fn always(&self, path: &str, status: u16) {
        self.script
            .lock()
            .unwrap()
            .always
            .insert(path.to_string(), status);
    }

    /// The next request, waiting up to 10 seconds.
    pub async fn next(&self) -> Received {
        tokio::time::timeout(Duration::from_secs(10), self.requests.lock().await.recv())
            .await
            .expect("no webhook request within 10 s")
            .expect("receiver closed")
    }

    /// The next request if one arrives within `millis`.
    pub async fn within(&self, millis: u64) -> Option<Received> {
        tokio::time::timeout(
            Duration::from_millis(millis),
            self.requests.lock().await.recv(),
        )
        .await
        .ok()
        .flatten()
    }
}

/// Verifies an SNS message's signature as SDK validators do, with ring (not the rsa crate the
/// server signs with), against the certificate downloaded from SigningCertURL.
pub async fn verify_signature(message: &serde_json::Value) -> Result<(), String> {
    let field = |k: &str| message.get(k).and_then(|v| v.as_str());
    let cert_url = field("SigningCertURL").ok_or("no SigningCertURL")?;
    let pem = reqwest::get(cert_url)
        .await
        .map_err(|e| e.to_string())?
        .text()
        .await
        .map_err(|e| e.to_string())?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
    let certificate = pem.parse_x509().map_err(|e| e.to_string())?;
    let public_key = certificate.public_key().subject_public_key.data.to_vec();
    let mut text = String::new();
    for key in [
        "Message",
        "MessageId",
        "Subject",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ] {
        if let Some(value) = field(key) {
            text.push_str(&format!("{key}\n{value}\n"));
        }
    }
    use base64::Engine as _;
    let signature = base64::engine::general_purpose::STANDARD
        .decode(field("Signature").ok_or("no Signature")?)
        .map_err(|e| e.to_string())?;
    let algorithm: &dyn ring::signature::VerificationAlgorithm = match field("SignatureVersion") {
        Some("1") => &ring::signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
        Some("2") => &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        other => return Err(format!("SignatureVersion {other:?}")),
    };
    ring::signature::UnparsedPublicKey::new(algorithm, public_key)
        .verify(text.as_bytes(), &signature)
        .map_err(|_| "signature does not verify".to_string())
}
