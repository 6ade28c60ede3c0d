//! Orderly: Amazon SQS and SNS served over the real AWS wire protocols, so unmodified AWS SDKs
//! and the AWS CLI talk to it.
//!
//! Layout (dependencies point one way: `http` -> `service` -> `backend` -> `engine`;
//! `protocol` is shared by `http` and `service`; `persist` knows the engine's change records,
//! never the other way round). ARCHITECTURE.md follows one request from socket to disk.
//! - [`engine`]: pure state, in parts an `Engine` holds: the queues (FIFO groups,
//!   deduplication, receipts, dead-letter queues; `engine::queues`), the topics with their
//!   subscriptions and fan-out (`engine::topics`), the webhook outbox and tokens
//!   (`engine::webhooks`), move tasks (`engine::redrive`); takes `now` as an argument and
//!   logs every change.
//! - [`protocol`]: bytes to typed requests and back, for AWS JSON 1.0 and the Query protocol
//!   (SQS and SNS, XML or JSON answers); every action declared once (`protocol::actions`); one
//!   exhaustive mapping of errors to AWS codes and statuses.
//! - [`service`]: the SQS and SNS actions: check what needs no storage, call the backend,
//!   answer; cross-account access by queue and topic policies; the inspection endpoints and
//!   the `--init` file applied.
//! - [`backend`]: the storage seam the service calls for every action, answered once durable;
//!   the embedded engine with its log is its one implementation and serves long polls.
//! - [`persist`]: the write-ahead log, snapshots and recovery, in a data directory or in
//!   PostgreSQL under a leader's lease (`persist::database`); the versioned on-disk format
//!   (`persist::format`).
//! - [`delivery`]: webhook (HTTP/S) sending: a worker, the reqwest client, the allow-list.
//! - [`http`]: the accept loop with its limits and timeouts, TLS, the Origin/Host guards,
//!   SigV4 checking, telling the protocols apart, a standby passing requests on to the leader,
//!   and Orderly's own endpoints (clock, inspection, reset, console, LocalStack's).
//! - [`metrics`]: `GET /metrics` in the Prometheus text format.
//! - [`init`]: the shape of the `--init` TOML file.
//! - [`app`]: wiring, the server's lifetime and shutdown order, leading or following a log in
//!   PostgreSQL; [`config`]: flags and their environment twins.
//! - [`clock`]: the only place time is read (the system clock, or a manual one).
//! - [`test_hooks`]: points where a test of the binary holds the server from outside.
//! - [`quiet_log`]: warnings that would repeat for every request, said once per interval.
//! - [`worker`]: background loops (tasks, or threads for blocking I/O) started, named, stopped
//!   and backed off one way.

pub mod app;
pub mod backend;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod engine;
pub mod http;
pub mod init;
pub mod metrics;
pub mod password_blanking;
pub mod persist;
pub mod protocol;
pub mod quiet_log;
pub mod service;
pub mod test_hooks;
pub mod worker;
