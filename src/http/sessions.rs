//! Temporary credentials STS hands out (AssumeRole, GetSessionToken): an access key id, a
//! secret and a session token, each random, good until they expire. A request signed with one
//! acts as the identity it was issued for: an assumed role acts in the role's account. On a
//! database they are kept there (`persist::database::sessions`), so every node of it admits
//! them and a takeover keeps them; this process holds those it issued or met as a cache, and
//! remembers keys the database does not hold (random, and kept before they are handed out, so
//! one missing stays missing), so a client naming made-up keys costs one read each. With a
//! data directory or in memory they live in this process only (a restart forgets them, as if
//! they had expired). At most `MAX_SESSIONS` unexpired at once either way. Only the token's
//! SHA-256 digest is held.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::identity::Caller;
use crate::persist::database::sessions::{KeptSession, SessionTable};
use crate::protocol::{ApiError, ErrorCode};

/// Temporary credentials held at once; past it, expired ones go first, then issuing is refused.
pub const MAX_SESSIONS: usize = 10_000;

/// The access key ids handed out: `ASIA`, then 16 characters of base32.
const KEY_PREFIX: &str = "ASIA";
const KEY_LENGTH: usize = 20;

/// One set of temporary credentials.
#[derive(Clone)]
pub struct Session {
    pub secret: String,
    pub token_sha256: [u8; 32],
    pub caller: Caller,
    /// Unix seconds.
    pub expires: i64,
}

/// Credentials just issued.
pub struct Issued {
    pub access_key: String,
    pub token: String,
    pub session: Session,
}

#[derive(Default)]
pub struct Sessions {
    by_key: Mutex<HashMap<String, Session>>,
    /// On a database: where every node of it keeps and finds them.
    table: Option<SessionTable>,
    /// Keys of the right shape the database was asked for and does not hold.
    missing: Mutex<HashSet<String>>,
}

impl Sessions {
    /// Credentials kept in `table`, for every node of its database.
    pub fn kept_in(table: SessionTable) -> Sessions {
        Sessions {
            table: Some(table),
            ..Sessions::default()
        }
    }

    /// Issues credentials acting as `caller` until `expires` (Unix seconds), `now` being now.
    pub async fn issue(
        &self,
        caller: Caller,
        (now, expires): (i64, i64),
    ) -> Result<Issued, ApiError> {
        let access_key = format!("{KEY_PREFIX}{}", base32(&random::<10>()));
        let token = base64::engine::general_purpose::STANDARD.encode(random::<96>());
        let session = Session {
            secret: base64::engine::general_purpose::STANDARD.encode(random::<30>()),
            token_sha256: Sha256::digest(token.as_bytes()).into(),
            caller,
            expires,
        };
        let room = match &self.table {
            Some(table) => {
                let kept = KeptSession {
                    secret: session.secret.clone(),
                    token_sha256: session.token_sha256.to_vec(),
                    account: session.caller.account.to_string(),
                    user_id: session.caller.user_id.to_string(),
                    principal: session.caller.principal.to_string(),
                    expires,
                };
                let max = MAX_SESSIONS as i64;
                // Never handed out, so never used, whatever became of the write.
                (table.keep(&access_key, &kept, (now, max)).await).map_err(|failed| {
                    ApiError::new(
                        ErrorCode::ServiceUnavailable,
                        format!(
                            "Temporary credentials could not be kept in the database ({failed}): \
                             none were issued; ask again."
                        ),
                    )
                })?
            }
            None => true,
        };
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if by_key.len() >= MAX_SESSIONS {
            by_key.retain(|_, session| session.expires > now);
        }
        // On a database this process only caches them: the database said whether there is room.
        let cached = by_key.len() < MAX_SESSIONS;
        if !room || (!cached && self.table.is_none()) {
            return Err(ApiError::new(
                ErrorCode::ServiceUnavailable,
                format!(
                    "{MAX_SESSIONS} sets of temporary credentials are unexpired: no more are \
                     issued until some expire"
                ),
            ));
        }
        if cached {
            by_key.insert(access_key.clone(), session.clone());
        }
        Ok(Issued {
            access_key,
            token,
            session,
        })
    }

    /// The session of `access_key`, if one was issued (expired or not): held here, or kept in
    /// the database by any node of it. `now`: Unix seconds, to make room among those held.
    pub async fn find(&self, access_key: &str, now: i64) -> Result<Option<Session>, ApiError> {
        let shaped = access_key.len() == KEY_LENGTH
            && access_key.starts_with(KEY_PREFIX)
            && (access_key.bytes()).all(|b| BASE32.contains(&b));
        if !shaped {
            return Ok(None);
        }
        let held = (self.by_key.lock().unwrap_or_else(|p| p.into_inner()))
            .get(access_key)
            .cloned();
        let (Some(table), None) = (&self.table, &held) else {
            return Ok(held);
        };
        if (self.missing.lock().unwrap_or_else(|p| p.into_inner())).contains(access_key) {
            return Ok(None);
        }
        let kept = (table.find(access_key).await).map_err(|failed| {
            ApiError::new(
                ErrorCode::ServiceUnavailable,
                format!(
                    "The temporary credentials signing the request could not be looked up in \
                     the database ({failed}); try again."
                ),
            )
        })?;
        let session = kept.and_then(|kept| {
            Some(Session {
                secret: kept.secret,
                token_sha256: kept.token_sha256.try_into().ok()?,
                caller: Caller {
                    account: kept.account.into(),
                    user_id: kept.user_id.into(),
                    principal: kept.principal.into(),
                },
                expires: kept.expires,
            })
        });
        let Some(session) = session else {
            let mut missing = self.missing.lock().unwrap_or_else(|p| p.into_inner());
            if missing.len() >= MAX_SESSIONS {
                missing.clear();
            }
            missing.insert(access_key.to_string());
            return Ok(None);
        };
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if by_key.len() >= MAX_SESSIONS {
            by_key.retain(|_, session| session.expires > now);
        }
        if by_key.len() < MAX_SESSIONS {
            by_key.insert(access_key.to_string(), session.clone());
        }
        Ok(Some(session))
    }
}

/// Checks what a request signed with `session` carries: its token, and that it has not
/// expired. (The signature is checked with its secret by the caller.)
pub fn admit(session: &Session, token: Option<&str>, now: i64) -> Result<(), ApiError> {
    // Digests compared, so the time taken says nothing about how much of the token matched.
    let matches = token.is_some_and(|token| {
        <[u8; 32]>::from(Sha256::digest(token.as_bytes())) == session.token_sha256
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

/// AWS's alphabet for key ids.
const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// Upper-case base32 (AWS's alphabet for key ids), five bits a character.
fn base32(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = BASE32;
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

    #[tokio::test]
    async fn credentials_are_random_and_admitted_only_with_their_token_until_they_expire() {
        let sessions = Sessions::default();
        let one = sessions.issue(caller(), (0, 100)).await.unwrap();
        let two = sessions.issue(caller(), (0, 100)).await.unwrap();
        assert_ne!(one.access_key, two.access_key);
        assert_ne!(one.session.secret, two.session.secret);
        assert_eq!(one.access_key.len(), 20, "{}", one.access_key);
        let found = (sessions.find(&one.access_key, 0).await.unwrap()).expect("issued");
        assert!(admit(&found, Some(&one.token), 99).is_ok());
        assert!(admit(&found, Some(&two.token), 99).is_err());
        assert!(admit(&found, None, 99).is_err());
        let expired = admit(&found, Some(&one.token), 100).unwrap_err();
        assert_eq!(expired.code, ErrorCode::ExpiredToken);
        assert!(sessions.find("AKIDNOTASESSION", 0).await.unwrap().is_none());
        let unknown = format!("ASIA{}", &one.access_key[4..].to_lowercase());
        assert!(sessions.find(&unknown, 0).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn at_most_so_many_are_held_and_expired_ones_make_room() {
        let sessions = Sessions::default();
        for _ in 0..MAX_SESSIONS {
            sessions.issue(caller(), (0, 10)).await.unwrap();
        }
        assert!(sessions.issue(caller(), (5, 100)).await.is_err());
        assert!(sessions.issue(caller(), (10, 100)).await.is_ok());
    }
}
