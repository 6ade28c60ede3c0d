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

impl MobileChange {
    /// About how many bytes the change takes in a record (for sizing snapshot chunks).
    pub fn size(&self) -> usize {
        let map = |m: &BTreeMap<String, String>| -> usize {
            m.iter().map(|(k, v)| k.len() + v.len() + 4).sum()
        };
        16 + match self {
            MobileChange::Application { arn, attributes } => arn.len() + map(attributes),
            MobileChange::DeleteApplication { arn } | MobileChange::DeleteEndpoint { arn } => {
                arn.len()
            }
            MobileChange::Endpoint {
                arn,
                application,
                attributes,
            } => arn.len() + application.len() + map(attributes),
            MobileChange::SmsAttributes {
                namespace,
                attributes,
            } => namespace.len() + map(attributes),
            MobileChange::OptedOut {
                namespace, number, ..
            }
            | MobileChange::DeleteSandboxNumber { namespace, number } => {
                namespace.len() + number.len()
            }
            MobileChange::SandboxNumber {
                namespace,
                number,
                language,
                password,
            } => {
                namespace.len()
                    + number.len()
                    + language.len()
                    + password.as_ref().map_or(0, String::len)
            }
        }
    }
}
