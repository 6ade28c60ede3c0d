//! `--auth FILE`: the access keys Orderly accepts, each with its secret and account. With it,
//! every request must carry a valid SigV4 signature (`sigv4.rs`) except the SubscribeURL and
//! UnsubscribeURL links, which AWS serves unsigned too, and Orderly's own endpoints (metrics,
//! console, inspection, clock), which take HTTP Basic credentials of a key instead; without
//! it, signatures are not checked.
//!
//! The file is JSON: `{"Keys": [{"AccessKeyId": "…", "SecretAccessKey": "…", "Account": "…",
//! "UserName": "…", "UserId": "…"}]}` (`Account` defaults to `--account-id`; `UserName` and
//! `UserId`, the IAM user the key stands for, default as `identity.rs` says). A key of another
//! account acts in that account (`service::access` judges its use of this one's queues and
//! topics by their policies); with `--single-namespace` such keys are refused with
//! `AccessDenied`, as Orderly serves only the one account then.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::identity::{derived_user_id, Caller};
use super::sigv4::{self, Arrived, SignatureError};
use crate::protocol::{ApiError, ErrorCode};

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct File {
    keys: Vec<KeyEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct KeyEntry {
    access_key_id: String,
    secret_access_key: String,
    account: Option<String>,
    user_name: Option<String>,
    user_id: Option<String>,
}

struct Key {
    secret: String,
    account: String,
    user_name: Option<String>,
    user_id: Option<String>,
}

pub struct Auth {
    keys: HashMap<String, Key>,
    account: String,
    one_account: bool,
}

impl Auth {
    /// Reads the key file; `account` is the server's (`--account-id`); `one_account`: keys of
    /// other accounts are refused (`--single-namespace`).
    pub fn load(path: &Path, account: &str, one_account: bool) -> Result<Auth, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file: File =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if file.keys.is_empty() {
            return Err(format!("{}: no keys", path.display()));
        }
        let keys = file
            .keys
            .into_iter()
            .map(|k| {
                let key = Key {
                    secret: k.secret_access_key,
                    account: k.account.unwrap_or_else(|| account.to_string()),
                    user_name: k.user_name,
                    user_id: k.user_id,
                };
                (k.access_key_id, key)
            })
            .collect();
        Ok(Auth {
            keys,
            account: account.to_string(),
            one_account,
        })
    }

    /// The verified access key id; `Ok(None)` for a request with no signature at all (which
    /// may only follow the SNS links). `now` is Unix seconds.
    pub fn check(&self, request: &Arrived<'_>, now: i64) -> Result<Option<String>, ApiError> {
        let verified = match sigv4::verify(request, now, |key| {
            self.keys.get(key).map(|k| k.secret.as_str())
        }) {
            Ok(verified) => verified,
            Err(SignatureError::Missing) => return Ok(None),
            Err(error) => return Err(to_api_error(error)),
        };
        let key = &self.keys[&verified.access_key];
        if self.one_account && key.account != self.account {
            return Err(ApiError::new(
                ErrorCode::AccessDenied,
                format!(
                    "Access to the resource is denied: the key of account {} has no access to account {}.",
                    key.account, self.account
                ),
            ));
        }
        Ok(Some(verified.access_key))
    }
}

impl Auth {
    /// The IAM user a key of this server's account stands for.
    pub fn caller(&self, access_key: &str) -> Caller {
        let Some(key) = self.keys.get(access_key) else {
            return Caller::of_key(&self.account, access_key);
        };
        let name = key.user_name.as_deref().unwrap_or(access_key);
        match &key.user_id {
            Some(id) => Caller::user(&key.account, name, id),
            None => Caller::user(&key.account, name, &derived_user_id(access_key)),
        }
    }

    /// The key a request is signed with, if the signature verifies and the key is of this
    /// server's account: how an SDK given one of Orderly's own endpoints as its endpoint URL
    /// (LocalStack's `/_aws/sqs/messages`) is let in, since it signs and cannot send HTTP Basic.
    /// `Ok(None)`: not signed at all.
    pub fn own_signed_key(
        &self,
        request: &Arrived<'_>,
        now: i64,
    ) -> Result<Option<String>, ApiError> {
        let Some(key) = self.check(request, now)? else {
            return Ok(None);
        };
        if self.keys[&key].account != self.account {
            return Err(ApiError::new(
                ErrorCode::AccessDenied,
                format!(
                    "Access to the resource is denied: only keys of account {} may use this endpoint.",
                    self.account
                ),
            ));
        }
        Ok(Some(key))
    }

    /// HTTP Basic credentials (`access key id:secret`) of a key of this server's account: how
    /// Prometheus and a browser reach Orderly's own endpoints (`/metrics`, the console, the
    /// inspection API), which cannot sign requests.
    /// Answers the key's access key id.
    pub fn basic_key(&self, authorization: Option<&str>) -> Option<String> {
        use base64::Engine as _;
        use sha2::{Digest, Sha256};
        let encoded = authorization?.strip_prefix("Basic ")?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()?;
        let text = std::str::from_utf8(&decoded).ok()?;
        let (id, secret) = text.split_once(':')?;
        // Digests compared, so the time taken says nothing about how much of the secret matched.
        let key = self.keys.get(id)?;
        let valid = key.account == self.account
            && Sha256::digest(key.secret.as_bytes()) == Sha256::digest(secret.as_bytes());
        valid.then(|| id.to_string())
    }
}

/// Calls `judge` with a request as the signature checks read it and the machine's time in Unix
/// seconds: the time the client's signer used (`--clock manual` moves only the engine's).
pub fn as_arrived<R>(
    (method, uri, headers, body): (
        &axum::http::Method,
        &axum::http::Uri,
        &axum::http::HeaderMap,
        &[u8],
    ),
    judge: impl FnOnce(&Arrived<'_>, i64) -> R,
) -> R {
    let list: Vec<(&str, &str)> = headers
        .iter()
        .filter_map(|(name, value)| value.to_str().ok().map(|v| (name.as_str(), v)))
        .collect();
    let arrived = Arrived {
        method: method.as_str(),
        path: uri.path(),
        query: uri.query().unwrap_or(""),
        headers: &list,
        body,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64);
    judge(&arrived, now)
}

/// Checks the signature of a request signed with temporary credentials (`key`, `secret`).
pub fn verify_temporary(
    request: &Arrived<'_>,
    now: i64,
    key: &str,
    secret: &str,
) -> Result<(), ApiError> {
    let verified = sigv4::verify(request, now, |asked| (asked == key).then_some(secret));
    verified.map(|_| ()).map_err(to_api_error)
}

fn to_api_error(error: SignatureError) -> ApiError {
    match error {
        SignatureError::Missing => ApiError::new(
            ErrorCode::MissingAuthenticationToken,
            "Request is missing Authentication Token",
        ),
        SignatureError::Incomplete(what) => ApiError::new(ErrorCode::IncompleteSignature, what),
        SignatureError::UnknownKey(key) => ApiError::new(
            ErrorCode::InvalidClientTokenId,
            format!("The security token included in the request is invalid: no access key {key}."),
        ),
        SignatureError::Mismatch => ApiError::new(
            ErrorCode::SignatureDoesNotMatch,
            "The request signature we calculated does not match the signature you provided.",
        ),
        SignatureError::Expired => ApiError::new(
            ErrorCode::RequestExpired,
            "Request has expired: its date is more than 5 minutes from the server's time, or a presigned URL has expired.",
        ),
    }
}
