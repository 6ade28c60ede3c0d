//! What the mobile state logs (`engine::mobile`).

use std::collections::BTreeMap;
use std::sync::Arc;

/// A logged change: the whole state of what it names, or its removal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MobileChange {
    Application {
        arn: Arc<str>,
        attributes: BTreeMap<String, String>,
    },
    DeleteApplication {
        arn: Arc<str>,
    },
    Endpoint {
        arn: Arc<str>,
        application: Arc<str>,
        attributes: BTreeMap<String, String>,
    },
    DeleteEndpoint {
        arn: Arc<str>,
    },
    /// A region and account's SMS settings (`region:account`).
    SmsAttributes {
        namespace: String,
        attributes: BTreeMap<String, String>,
    },
    OptedOut {
        namespace: String,
        number: String,
        opted_out: bool,
    },
    /// A sandbox number: pending with the password it was sent, or verified (`None`).
    SandboxNumber {
        namespace: String,
        number: String,
        language: String,
        password: Option<String>,
    },
    DeleteSandboxNumber {
        namespace: String,
        number: String,
    },
}
