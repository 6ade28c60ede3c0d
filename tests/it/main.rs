//! Integration tests: the real server on a free port, driven over HTTP by aws-sdk-sqs (JSON
//! protocol) and by raw Query-protocol requests. One binary, so the SDK is linked once.

mod auth;
mod binary;
mod clock_control;
mod common;
mod crash;
mod data_directory;
mod database_failover;
mod format_upgrade;
mod hostile_clients;
mod hostile_input;
mod init_file;
mod inspection;
mod log_in_database;
mod log_outage;
mod log_transfer;
mod logs;
mod metrics;
mod multi_node;
mod multi_node_webhooks;
mod receiver;
mod regions_and_accounts;
mod reset;
mod sns_api;
mod sns_fanout;
mod sns_filters;
mod sns_recorded_protocols;
mod sns_redrive_replay;
mod sns_webhooks;
mod sqs_errors;
mod sqs_fifo;
mod sqs_query;
mod sqs_queues;
mod sqs_redrive;
mod tls;
mod trace_header;
