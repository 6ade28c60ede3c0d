//! Platform applications and their endpoints: ARNs as AWS makes them
//! (`arn:aws:sns:<region>:<account>:app/<PLATFORM>/<name>` and
//! `…:endpoint/<PLATFORM>/<name>/<id>`), attributes as AWS keeps and shows them, and a token
//! registered once per application.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::engine::error::{invalid_parameter as invalid, EngineError, EngineResult};

/// The push services AWS knows, by the names CreatePlatformApplication takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    Adm,
    Apns,
    ApnsSandbox,
    ApnsVoip,
    ApnsVoipSandbox,
    Baidu,
    Gcm,
    Mpns,
    Wns,
}

impl Platform {
    const ALL: [(Platform, &'static str); 9] = [
        (Platform::Adm, "ADM"),
        (Platform::Apns, "APNS"),
        (Platform::ApnsSandbox, "APNS_SANDBOX"),
        (Platform::ApnsVoip, "APNS_VOIP"),
        (Platform::ApnsVoipSandbox, "APNS_VOIP_SANDBOX"),
        (Platform::Baidu, "BAIDU"),
        (Platform::Gcm, "GCM"),
        (Platform::Mpns, "MPNS"),
        (Platform::Wns, "WNS"),
    ];

    pub fn parse(name: &str) -> Option<Platform> {
        Self::ALL.iter().find(|(_, n)| *n == name).map(|(p, _)| *p)
    }

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("", |(_, n)| n)
    }
}

/// Attributes a platform application keeps but never shows (its credentials).
const SECRET_ATTRIBUTES: [&str; 2] = ["PlatformCredential", "PlatformPrincipal"];

/// Attributes an endpoint takes.
const ENDPOINT_ATTRIBUTES: [&str; 3] = ["CustomUserData", "Enabled", "Token"];

#[derive(Clone, Debug)]
pub struct Application {
    pub arn: Arc<str>,
    pub platform: Platform,
    pub name: String,
    pub attributes: BTreeMap<String, String>,
    pub(super) endpoints: BTreeSet<Arc<str>>,
}

impl Application {
    /// An application rebuilt from its ARN (what the log keeps).
    pub(super) fn from_arn(arn: &str, attributes: BTreeMap<String, String>) -> Option<Self> {
        // From the right: the namespace's parts come from the caller's credential scope.
        let (_, resource) = arn.rsplit_once(":app/")?;
        let (platform, name) = resource.split_once('/')?;
        Some(Application {
            arn: arn.into(),
            platform: Platform::parse(platform)?,
            name: name.to_string(),
            attributes,
            endpoints: BTreeSet::new(),
        })
    }

    /// What GetPlatformApplicationAttributes shows: everything but the credentials, and
    /// `Enabled` unless set otherwise.
    pub fn shown_attributes(&self) -> BTreeMap<String, String> {
        let mut shown: BTreeMap<String, String> = self
            .attributes
            .iter()
            .filter(|(k, _)| !SECRET_ATTRIBUTES.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        shown
            .entry("Enabled".into())
            .or_insert_with(|| "true".into());
        shown
    }

    pub(super) fn enabled(&self) -> bool {
        self.attributes.get("Enabled").is_none_or(|v| v != "false")
    }
}

#[derive(Clone, Debug)]
pub struct Endpoint {
    pub arn: Arc<str>,
    pub application: Arc<str>,
    /// `Token`, `Enabled` and `CustomUserData`, as GetEndpointAttributes shows them.
    pub attributes: BTreeMap<String, String>,
}

impl Endpoint {
    pub fn token(&self) -> &str {
        self.attributes.get("Token").map_or("", String::as_str)
    }

    pub fn enabled(&self) -> bool {
        self.attributes.get("Enabled").is_none_or(|v| v != "false")
    }
}

pub(super) fn no_application() -> EngineError {
    EngineError::NotFound("PlatformApplication does not exist".into())
}

pub(super) fn no_endpoint() -> EngineError {
    EngineError::NotFound("Endpoint does not exist".into())
}

/// Most attributes an application keeps, and the longest value of one (a credential such as
/// an APNs certificate with its key takes a few kilobytes).
const MAX_APPLICATION_ATTRIBUTES: usize = 32;
const MAX_ATTRIBUTE_BYTES: usize = 16 * 1024;

/// Longest device token an endpoint takes (APNs tokens are 64 characters, FCM's about 160).
const MAX_TOKEN_BYTES: usize = 4096;

/// An application's attributes, merged with what it has, stay within the bounds above.
pub(super) fn check_application_attributes(
    kept: &BTreeMap<String, String>,
    given: &BTreeMap<String, String>,
) -> EngineResult<()> {
    if let Some(name) = given
        .iter()
        .find(|(k, v)| k.len() > 256 || v.len() > MAX_ATTRIBUTE_BYTES)
        .map(|(k, _)| k)
    {
        return Err(invalid(format!(
            "Invalid parameter: Attributes Reason: {name} must be at most {MAX_ATTRIBUTE_BYTES} bytes long"
        )));
    }
    let names = kept
        .keys()
        .chain(given.keys().filter(|k| !kept.contains_key(*k)));
    if names.count() > MAX_APPLICATION_ATTRIBUTES {
        return Err(invalid(format!(
            "Invalid parameter: Attributes Reason: an application has at most {MAX_APPLICATION_ATTRIBUTES} attributes"
        )));
    }
    Ok(())
}

/// An endpoint's attributes: AWS's three names, `Enabled` a boolean, `CustomUserData` and
/// `Token` within their bounds.
pub(super) fn check_endpoint_attributes(attributes: &BTreeMap<String, String>) -> EngineResult<()> {
    if let Some(key) = attributes
        .keys()
        .find(|k| !ENDPOINT_ATTRIBUTES.contains(&k.as_str()))
    {
        return Err(invalid(format!(
            "Invalid parameter: Attributes Reason: Invalid attribute name: {key}"
        )));
    }
    check_enabled(attributes)?;
    check_custom_user_data(attributes)?;
    attributes.get("Token").map_or(Ok(()), |t| check_token(t))
}

pub(super) fn check_token(token: &str) -> EngineResult<()> {
    if token.is_empty() {
        return Err(invalid("Invalid parameter: Token Reason: cannot be empty"));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(invalid(format!(
            "Invalid parameter: Token Reason: must be at most {MAX_TOKEN_BYTES} bytes long"
        )));
    }
    Ok(())
}

/// `Enabled` must be a boolean as AWS spells it.
pub(super) fn check_enabled(attributes: &BTreeMap<String, String>) -> EngineResult<()> {
    match attributes.get("Enabled").map(String::as_str) {
        None | Some("true" | "false") => Ok(()),
        Some(_) => Err(invalid(
            "Invalid parameter: Attributes Reason: Enabled must be true or false",
        )),
    }
}

pub(super) fn check_custom_user_data(attributes: &BTreeMap<String, String>) -> EngineResult<()> {
    if attributes
        .get("CustomUserData")
        .is_some_and(|d| d.len() > 2048)
    {
        return Err(invalid(
            "Invalid parameter: Attributes Reason: Invalid value for attribute: CustomUserData: must be at most 2048 bytes long in UTF-8 encoding",
        ));
    }
    Ok(())
}

pub(super) fn check_application_name(name: &str) -> EngineResult<()> {
    if name.is_empty() {
        return Err(invalid("Invalid parameter:  Reason: cannot be empty"));
    }
    if name.len() > 256 {
        return Err(invalid(format!(
            "Invalid parameter: {name} Reason: must be at most 256 characters long"
        )));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(invalid(format!(
            "Invalid parameter: {name} Reason: must contain only characters 'a'-'z', 'A'-'Z', '0'-'9', '_', '-', and '.'"
        )));
    }
    Ok(())
}

/// A platform's credentials come in pairs where it has two: AWS refuses one without the other
/// (a principal never goes alone; APNS with a signing key, GCM and MPNS take a credential only).
pub(super) fn check_credentials(
    platform: Platform,
    attributes: &BTreeMap<String, String>,
) -> EngineResult<()> {
    let credential = attributes.contains_key("PlatformCredential");
    let principal = attributes.contains_key("PlatformPrincipal");
    let pairs = match platform {
        Platform::Adm | Platform::Baidu | Platform::Wns => true,
        Platform::Apns | Platform::ApnsSandbox | Platform::ApnsVoip | Platform::ApnsVoipSandbox => {
            !attributes.contains_key("PlatformSigningKeyID")
        }
        Platform::Gcm | Platform::Mpns => false,
    };
    if principal && !credential {
        return Err(invalid(
            "Invalid parameter: Attributes Reason: PlatformPrincipal attribute provided without PlatformCredential",
        ));
    }
    if pairs && credential && !principal {
        return Err(invalid(
            "Invalid parameter: Attributes Reason: PlatformCredential attribute provided without PlatformPrincipal",
        ));
    }
    Ok(())
}
