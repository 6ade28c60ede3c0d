//! A TCP relay between a node and PostgreSQL that, once armed, lets one transaction commit and
//! loses the database's answer: the first connection that inserts a row whose SQL starts with
//! the armed text has its `COMMIT` passed on, the answer dropped, and is then cut. The node
//! cannot tell whether that transaction committed; the database has committed it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct Relay {
    /// The database's URL with the relay's address in place of the server's.
    pub url: String,
    armed: Arc<Mutex<Option<Vec<u8>>>>,
    lost: Arc<AtomicBool>,
}

impl Relay {
    /// A relay to the server `url` names (`postgres://user@host:port/database`).
    pub fn start(url: &str) -> Relay {
        let (head, rest) = url.split_once('@').expect("a URL with a user");
        let (server, database) = rest.split_once('/').expect("a URL with a database");
        let server: SocketAddr = server.parse().expect("host:port");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let relay = Relay {
            url: format!("{head}@{}/{database}", listener.local_addr().unwrap()),
            armed: Arc::new(Mutex::new(None)),
            lost: Arc::new(AtomicBool::new(false)),
        };
        let (armed, lost) = (relay.armed.clone(), relay.lost.clone());
        // A runtime of its own: the test's may be blocked waiting for a process to start.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            runtime.expect("a runtime").block_on(async move {
                let listener = TcpListener::from_std(listener).unwrap();
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(database) = TcpStream::connect(server).await else {
                        continue;
                    };
                    tokio::spawn(relay_one(client, database, armed.clone(), lost.clone()));
                }
            });
        });
        relay
    }

    /// The next transaction that runs SQL starting with `sql` commits and its answer is lost.
    pub fn lose_the_commit_answer_after(&self, sql: &str) {
        *self.armed.lock().unwrap() = Some(sql.as_bytes().to_vec());
    }

    /// Whether a commit's answer has been lost.
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn relay_one(
    client: TcpStream,
    database: TcpStream,
    armed: Arc<Mutex<Option<Vec<u8>>>>,
    lost: Arc<AtomicBool>,
) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_database, mut to_database) = database.into_split();
    let silenced = Arc::new(AtomicBool::new(false));
    let answers = {
        let silenced = silenced.clone();
        tokio::spawn(async move {
            let mut buffer = vec![0u8; 65536];
            while let Ok(read) = from_database.read(&mut buffer).await {
                if read == 0 {
                    break;
                }
                if silenced.load(Ordering::SeqCst) {
                    // The commit's answer: the database has committed.
                    lost.store(true, Ordering::SeqCst);
                    break;
                }
                if to_client.write_all(&buffer[..read]).await.is_err() {
                    break;
                }
            }
            // Dropping both halves cuts the node's connection.
        })
    };
    let mut buffer = vec![0u8; 65536];
    let mut marked = false;
    while let Ok(read) = from_client.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        let bytes = &buffer[..read];
        let wanted = armed.lock().unwrap().clone();
        if let Some(sql) = wanted {
            marked |= contains(bytes, &sql);
            if marked && contains(bytes, b"COMMIT") {
                *armed.lock().unwrap() = None;
                silenced.store(true, Ordering::SeqCst);
                let _ = to_database.write_all(bytes).await;
                // Cut once the database has answered the commit.
                let _ = answers.await;
                return;
            }
        }
        if to_database.write_all(bytes).await.is_err() {
            break;
        }
    }
    answers.abort();
}
