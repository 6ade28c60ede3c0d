//! Temporary credentials STS hands out (AssumeRole, GetSessionToken): an access key id, a
//! secret and a session token, each random, good until they expire. A request signed with one
//! acts as the identity it was issued for: an assumed role acts in the role's account. They
//! live in this process only (a restart or a takeover forgets them, as if they had expired),
//! and at most `MAX_SESSIONS` at once.

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine as _;

use super::identity::Caller;
use crate::protocol::{ApiError, ErrorCode};

/// Temporary credentials held at once; past it, expired ones go first, then issuing is refused.
pub const MAX_SESSIONS: usize = 10_000;

/// One set of temporary credentials.
#[derive(Clone)]
pub struct Session {
    pub secret: String,
    pub token: String,
    pub caller: Caller,
    /// Unix seconds.
    pub expires: i64,
}

/// Credentials just issued.
pub struct Issued {
    pub access_key: String,
    pub session: Session,
}

#[derive(Default)]
pub struct Sessions {
    by_key: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// Issues credentials acting as `caller` until `expires` (Unix seconds), `now` being now.
    pub fn issue(&self, caller: Caller, (now, expires): (i64, i64)) -> Result<Issued, ApiError> {
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if by_key.len() >= MAX_SESSIONS {
            by_key.retain(|_, session| session.expires > now);
        }
        if by_key.len() >= MAX_SESSIONS {
            return Err(ApiError::new(
                ErrorCode::ServiceUnavailable,
                format!(
                    "{MAX_SESSIONS} sets of temporary credentials are unexpired: no more are \
                     issued until some expire"
                ),
            ));
        }
        let access_key = format!("ASIA{}", base32(&random::<10>()));
        let session = Session {
            secret: base64::engine::general_purpose::STANDARD.encode(random::<30>()),
            token: base64::engine::general_purpose::STANDARD.encode(random::<96>()),
            caller,
            expires,
        };
        by_key.insert(access_key.clone(), session.clone());
        Ok(Issued {
            access_key,
            session,
        })
    }

    /// The session of `access_key`, if one was issued (expired or not).
    pub fn get(&self, access_key: &str) -> Option<Session> {
        if !access_key.starts_with("ASIA") {
            return None;
        }
        let by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        by_key.get(access_key).cloned()
    }
}

/// Checks what a request signed with `session` carries: its token, and that it has not
/// expired. (The signature is checked with its secret by the caller.)
pub fn admit(session: &Session, token: Option<&str>, now: i64) -> Result<(), ApiError> {
    use sha2::{Digest, Sha256};
    // Digests compared, so the time taken says nothing about how much of the token matched.
    let matches = token.is_some_and(|token| {
        Sha256::digest(token.as_bytes()) == Sha256::digest(session.token.as_bytes())
    });
    if !matches {
        return Err(ApiError::new(
            ErrorCode::InvalidClientTokenId,
            "The security token included in the request is invalid.",
        ));
    }
    if session.expires <= now {
        return Err(ApiError::new(
            ErrorCode::ExpiredToken,
            "The security token included in the request is expired",
        ));
    }
    Ok(())
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0; N];
    getrandom::getrandom(&mut bytes).expect("the operating system's random source");
    bytes
}

/// Upper-case base32 (AWS's alphabet for key ids), five bits a character.
fn base32(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::new();
    let (mut buffer, mut bits) = (0u32, 0);
    for byte in bytes {
        buffer = buffer << 8 | u32::from(*byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[(buffer >> bits & 31) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller() -> Caller {
        Caller::account("000000000000")
    }

    #[test]
    fn credentials_are_random_and_admitted_only_with_their_token_until_they_expire() {
        let sessions = Sessions::default();
        let one = sessions.issue(caller(), (0, 100)).unwrap();
        let two = sessions.issue(caller(), (0, 100)).unwrap();
        assert_ne!(one.access_key, two.access_key);
        assert_ne!(one.session.secret, two.session.secret);
        assert_eq!(one.access_key.len(), 20, "{}", one.access_key);
        let found = sessions.get(&one.access_key).expect("issued");
        assert!(admit(&found, Some(&one.session.token), 99).is_ok());
        assert!(admit(&found, Some(&two.session.token), 99).is_err());
        assert!(admit(&found, None, 99).is_err());
        let expired = admit(&found, Some(&one.session.token), 100).unwrap_err();
        assert_eq!(expired.code, ErrorCode::ExpiredToken);
        assert!(sessions.get("AKIDNOTASESSION").is_none());
    }

    #[test]
    fn at_most_so_many_are_held_and_expired_ones_make_room() {
        let sessions = Sessions::default();
        for _ in 0..MAX_SESSIONS {
            sessions.issue(caller(), (0, 10)).unwrap();
        }
        assert!(sessions.issue(caller(), (5, 100)).is_err());
        assert!(sessions.issue(caller(), (10, 100)).is_ok());
    }
}
