//! Confirmation tokens: the `Token` in SubscriptionConfirmation and UnsubscribeConfirmation
//! messages. A token names the subscription it confirms (or, for an unsubscribe, the
//! subscription as it was, so confirming restores it) and is valid for two days, as AWS's are.
//! A subscription still pending when its token expires is deleted.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::engine::time::Timestamp;
use crate::engine::topic::Subscription;
use crate::engine::FastMap;

/// How long a token is valid (and how long a subscription may stay pending).
pub const TOKEN_LIFETIME_MS: u64 = 2 * 24 * 3600 * 1000;
/// Hex digits in a token (AWS's are 256 or more).
pub const TOKEN_HEX_LEN: usize = 256;

#[derive(Clone, Debug)]
pub enum Grant {
    /// Confirms a pending subscription.
    Confirm(Arc<str>),
    /// Restores an unsubscribed subscription as it was.
    Restore(Arc<Subscription>),
}

impl Grant {
    pub fn subscription_arn(&self) -> &Arc<str> {
        match self {
            Grant::Confirm(arn) => arn,
            Grant::Restore(sub) => &sub.arn,
        }
    }
}

#[derive(Default)]
pub struct TokenBook {
    grants: FastMap<String, (Timestamp, Grant)>,
    expiry: BTreeSet<(Timestamp, String)>,
}

/// A fresh random token: 256 hex digits from the OS-seeded UUID generator.
pub fn new_token() -> String {
    (0..TOKEN_HEX_LEN / 32)
        .map(|_| uuid::Uuid::new_v4().simple().to_string())
        .collect()
}

/// Whether a string looks like one of our tokens (AWS answers malformed ones differently).
pub fn well_formed(token: &str) -> bool {
    token.len() >= 32
        && token.len() <= 2 * TOKEN_HEX_LEN
        && token.chars().all(|c| c.is_ascii_hexdigit())
}

impl TokenBook {
    pub fn issue(&mut self, grant: Grant, now: Timestamp) -> String {
        let token = new_token();
        let expires = now.plus_millis(TOKEN_LIFETIME_MS);
        self.expiry.insert((expires, token.clone()));
        self.grants.insert(token.clone(), (expires, grant));
        token
    }

    /// Puts back a token from the log or a snapshot.
    pub fn restore(&mut self, token: String, expires: Timestamp, grant: Grant) {
        self.expiry.insert((expires, token.clone()));
        self.grants.insert(token, (expires, grant));
    }

    /// Every token with its expiry and grant (expired ones are dropped on the next tick).
    pub fn all(&self) -> impl Iterator<Item = (&str, Timestamp, &Grant)> {
        self.grants
            .iter()
            .map(|(token, (expires, grant))| (token.as_str(), *expires, grant))
    }

    /// The grant of a live token.
    pub fn get(&self, token: &str, now: Timestamp) -> Option<&Grant> {
        self.grants
            .get(token)
            .filter(|(expires, _)| *expires > now)
            .map(|(_, grant)| grant)
    }

    /// Removes expired tokens and returns their grants.
    pub fn expire(&mut self, now: Timestamp) -> Vec<Grant> {
        let mut out = Vec::new();
        while let Some((expires, _)) = self.expiry.first() {
            if *expires > now {
                break;
            }
            if let Some((_, token)) = self.expiry.pop_first() {
                if let Some((_, grant)) = self.grants.remove(&token) {
                    out.push(grant);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_hex_and_expire_after_two_days() {
        let mut book = TokenBook::default();
        let token = book.issue(Grant::Confirm("arn".into()), Timestamp(0));
        assert_eq!(token.len(), TOKEN_HEX_LEN);
        assert!(well_formed(&token));
        assert!(!well_formed("garbage"));
        assert!(book.get(&token, Timestamp(TOKEN_LIFETIME_MS - 1)).is_some());
        assert!(book.expire(Timestamp(TOKEN_LIFETIME_MS - 1)).is_empty());
        let expired = book.expire(Timestamp(TOKEN_LIFETIME_MS));
        assert_eq!(expired.len(), 1);
        assert_eq!(&**expired[0].subscription_arn(), "arn");
        assert!(book.get(&token, Timestamp(0)).is_none());
    }
}
