//! Who a request acts as, in the words AWS reports it: a message's `SenderId` is the sending IAM
//! user's unique id (`AIDA…`, 21 characters) and a subscription's `SubscriptionPrincipal` the
//! subscribing user's ARN (`arn:aws:iam::<account>:user/<name>`); a call with no credentials acts
//! as the account itself (its id, and `arn:aws:iam::<account>:root`). Sources: AWS SQS Developer
//! Guide, "SenderId" (an IAM user's ID, or for a role its ID and session name); AWS SNS API
//! reference, GetSubscriptionAttributes (`SubscriptionPrincipal`).
//!
//! With `--auth`, a key's `UserName` and `UserId` in the key file name it; a key without them,
//! or any key without `--auth`, is the user named as its access key id, with an id made from
//! the key (`derived_user_id`): the same key always gets the same id.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::engine::namespace::is_account_id;

/// The identity a request's messages and subscriptions carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The account the caller acts in (its namespace's account).
    pub account: Arc<str>,
    /// `SenderId`.
    pub user_id: Arc<str>,
    /// `SubscriptionPrincipal`.
    pub principal: Arc<str>,
}

impl Caller {
    /// A call without credentials: the account itself.
    pub fn account(account: &str) -> Caller {
        Caller {
            account: account.into(),
            user_id: account.into(),
            principal: format!("arn:aws:iam::{account}:root").into(),
        }
    }

    /// An IAM user of `account`.
    pub fn user(account: &str, name: &str, user_id: &str) -> Caller {
        Caller {
            account: account.into(),
            user_id: user_id.into(),
            principal: format!("arn:aws:iam::{account}:user/{name}").into(),
        }
    }

    /// The user an access key stands for when nothing names it: of the account the key
    /// names if it is 12 digits (LocalStack's convention), else of `account`.
    pub fn of_key(account: &str, access_key: &str) -> Caller {
        let account = if is_account_id(access_key) {
            access_key
        } else {
            account
        };
        Caller::user(account, access_key, &derived_user_id(access_key))
    }
}

/// An IAM user id for an access key: `AIDA` and 17 characters of base32 (AWS's alphabet for
/// these ids: A–Z and 2–7) from the key's SHA-256.
pub fn derived_user_id(access_key: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = Sha256::digest(access_key.as_bytes());
    // The first 85 bits of the digest, five at a time.
    let bits = digest
        .iter()
        .take(11)
        .fold(0u128, |acc, byte| acc << 8 | u128::from(*byte));
    let mut id = String::from("AIDA");
    for i in 0..17 {
        let shift = 88 - 5 * (i + 1);
        id.push(ALPHABET[(bits >> shift & 31) as usize] as char);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_gets_the_same_aws_shaped_user_id() {
        let id = derived_user_id("AKIDORDERLY");
        // Worked out by hand (Python's hashlib and the same bit order), so the derivation
        // cannot change unnoticed: users may have recorded these ids.
        assert_eq!(id, "AIDAGQSWUKCKFNOMMEKH5");
        assert_ne!(id, derived_user_id("AKIDOTHER"));
        assert_eq!(id.len(), 21);
        assert!(id.starts_with("AIDA"));
        assert!(id
            .chars()
            .all(|c| c.is_ascii_uppercase() || ('2'..='7').contains(&c)));
        let caller = Caller::of_key("000000000000", "AKIDORDERLY");
        assert_eq!(
            &*caller.principal,
            "arn:aws:iam::000000000000:user/AKIDORDERLY"
        );
        assert_eq!(
            &*Caller::account("000000000000").principal,
            "arn:aws:iam::000000000000:root"
        );
        let numbered = Caller::of_key("000000000000", "123456789012");
        assert_eq!(&*numbered.account, "123456789012");
        assert_eq!(
            &*numbered.principal,
            "arn:aws:iam::123456789012:user/123456789012"
        );
        assert_eq!(
            &*Caller::of_key("000000000000", "12345678901").account,
            "000000000000"
        );
    }
}
