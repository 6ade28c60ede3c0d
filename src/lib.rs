//! Orderly: Amazon SQS and SNS served over the real AWS wire protocols.
//!
//! Layout (dependencies point one way: `http` -> `service` -> `protocol` / `engine`):
//! - [`engine`]: pure queue state machines and the queue registry; takes `now` as an argument.
//! - [`protocol`]: bytes to typed requests and back, for AWS JSON 1.0 and the Query protocol;
//!   one exhaustive mapping of errors to AWS codes and statuses.
//! - [`service`]: the SQS and SNS actions: check what needs no storage, call the backend (or,
//!   for what is not behind it yet, the engine), encode.
//! - [`delivery`]: webhook (HTTP/S) sending: a worker, the reqwest client, the allow-list.
//! - [`backend`]: the storage seam the service calls (every action); the
//!   embedded engine with its log is the first implementation, and serves long polls.
//! - [`persist`]: the data directory: write-ahead log, snapshots, recovery, and the versioned
//!   on-disk format (`persist::format`). See ARCHITECTURE.md.
//! - [`http`]: the axum router and request context (host, credentials).
//! - [`app`]: wiring and the server's lifetime; [`config`]: flags and environment.
//! - [`clock`]: the only place time is read.

pub mod app;
pub mod backend;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod engine;
pub mod http;
pub mod init;
pub mod metrics;
pub mod persist;
pub mod protocol;
pub mod quiet_log;
pub mod service;
