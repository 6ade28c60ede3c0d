//! `--init FILE`: queues, topics and subscriptions declared in a TOML file, created at start
//! before the server listens (see `service::init` for how it is applied). This module reads and
//! checks the file's shape; AWS's own rules are checked when it is applied.
//!
//! ```toml
//! [[queues]]
//! name = "prices.fifo"
//! attributes = { FifoQueue = true, RedrivePolicy = { deadLetterTargetArn = "prices-dlq.fifo", maxReceiveCount = 5 } }
//! tags = { team = "pricing" }
//!
//! [[topics]]
//! name = "prices.fifo"
//! attributes = { FifoTopic = true, ContentBasedDeduplication = true }
//!
//! [[subscriptions]]
//! topic = "prices.fifo"
//! queue = "prices.fifo"          # or endpoint = "https://…" (protocol from the scheme)
//! attributes = { RawMessageDelivery = true, FilterPolicy = { region = ["eu"] } }
//! ```
//!
//! Attribute names are AWS's. A value may be a string, number or boolean, or a table or array
//! for the attributes that hold JSON (policies); where an ARN is asked for, a bare name of a
//! queue or topic of this server does.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// What the file declares, in the order given.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitFile {
    #[serde(default)]
    pub queues: Vec<QueueDecl>,
    #[serde(default)]
    pub topics: Vec<TopicDecl>,
    #[serde(default)]
    pub subscriptions: Vec<SubscriptionDecl>,
}

/// A queue or a topic: its name, attributes and tags.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedDecl {
    pub name: String,
    #[serde(default)]
    pub attributes: BTreeMap<String, toml::Value>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

pub type QueueDecl = NamedDecl;
pub type TopicDecl = NamedDecl;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionDecl {
    /// The topic's name or ARN.
    pub topic: String,
    /// An SQS subscription: the queue's name or ARN.
    pub queue: Option<String>,
    /// An HTTP/S (or other) subscription's endpoint.
    pub endpoint: Option<String>,
    /// Defaults to `sqs` with `queue`, to the endpoint's scheme with `endpoint`.
    pub protocol: Option<String>,
    #[serde(default)]
    pub attributes: BTreeMap<String, toml::Value>,
}

/// A problem with the file, naming where it is.
#[derive(Debug)]
pub struct InitError {
    pub file: PathBuf,
    /// `queues[2] (prices.fifo)`; empty for the file as a whole.
    pub entry: String,
    /// `attributes.VisibilityTimeout`; empty when no one field is to blame.
    pub field: String,
    pub message: String,
}

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        for part in [&self.entry, &self.field] {
            if !part.is_empty() {
                write!(f, ": {part}")?;
            }
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for InitError {}

impl InitFile {
    pub fn read(path: &Path) -> Result<InitFile, InitError> {
        let whole = |message: String| InitError {
            file: path.to_path_buf(),
            entry: String::new(),
            field: String::new(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| whole(e.to_string()))?;
        toml::from_str(&text).map_err(|e| whole(where_and_why(&text, &e)))
    }
}

/// `line L, column C: why` for a TOML error: toml's own text draws the line with a caret
/// under it, which a one-line message cannot keep.
fn where_and_why(text: &str, error: &toml::de::Error) -> String {
    let why = error.message().trim_end().replace('\n', " ");
    let Some(span) = error.span() else {
        return why;
    };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!("line {line}, column {column}: {why}")
}

/// An attribute's value as the API takes it: text as is, numbers and booleans written out,
/// tables and arrays as JSON.
pub fn attribute_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(text) => text.clone(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(n) => n.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(at) => at.to_string(),
        toml::Value::Array(_) | toml::Value::Table(_) => {
            serde_json::to_string(value).unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<InitFile, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("init.toml");
        std::fs::write(&path, text).unwrap();
        InitFile::read(&path).map_err(|e| e.to_string())
    }

    #[test]
    fn values_become_what_the_api_takes() {
        let file = parse(
            r#"
            [[queues]]
            name = "q"
            attributes = { VisibilityTimeout = 30, FifoQueue = true, Policy = { Version = "2012-10-17" }, DelaySeconds = "5" }
            "#,
        )
        .unwrap();
        let attributes = &file.queues[0].attributes;
        let text = |name: &str| attribute_text(&attributes[name]);
        assert_eq!(text("VisibilityTimeout"), "30");
        assert_eq!(text("FifoQueue"), "true");
        assert_eq!(text("DelaySeconds"), "5");
        assert_eq!(text("Policy"), r#"{"Version":"2012-10-17"}"#);
    }

    #[test]
    fn shape_errors_name_the_file_line_and_key() {
        let error = parse("[[queues]]\nattributes = {}\n").unwrap_err();
        assert!(
            error.contains("init.toml") && error.contains("line 1") && error.contains("name"),
            "{error}"
        );
        let error = parse("[[queues]]\nname = \"q\"\ncolour = \"red\"\n").unwrap_err();
        assert!(error.contains("colour"), "{error}");
        let error = parse("[[topicz]]\nname = \"t\"\n").unwrap_err();
        assert!(error.contains("topicz"), "{error}");
    }

    #[test]
    fn a_syntax_error_is_one_line_naming_where_and_why() {
        let error = parse("[[queues]]\nname = \"é\"\nfifo = tru\n").unwrap_err();
        assert!(
            error.ends_with("line 3, column 8: invalid boolean, expected `true`"),
            "{error}"
        );
        assert!(!error.contains('\n') && !error.contains('^'), "{error}");
    }
}
