//! Regions and accounts. On AWS the same queue name in two regions, or in two
//! accounts, is two queues. Orderly serves every region and account in one process: a queue or
//! topic is stored under a *key* that names its namespace.
//!
//! The home namespace (`--region`, `--account-id`) keys by the bare name, so data written before
//! namespaces existed reads unchanged and needs no new format version. Any other namespace keys
//! by `region:account:name`, the tail of the resource's ARN. Queue and topic names cannot hold a
//! `:`, so the two forms never collide; `key` refuses such names.
//!
//! Sources: shared/spec/sqs.md §1.7 (the region is the SigV4 credential scope's; ARNs
//! `arn:aws:sqs:<region>:<account-id>:<queue-name>`); shared/spec/sns.md §3 (topic ARNs).

use std::borrow::Cow;
use std::sync::Arc;

/// The name a key's clients use (the key itself at home).
pub fn name_of(key: &str) -> &str {
    key.rsplit(':').next().unwrap_or(key)
}

/// Whether `text` is an AWS account id: 12 digits.
pub fn is_account_id(text: &str) -> bool {
    text.len() == 12 && text.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `text` can be a region's name: lower-case letters, digits and dashes, as AWS's
/// (`us-east-1`, `eu-central-2`) and a local endpoint's made-up ones are.
pub fn is_region_name(text: &str) -> bool {
    (1..=32).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The account of an IAM principal ARN (`arn:aws:iam::<account>:user/<name>` or `:root`): a
/// subscription's `Owner` is its subscriber's account, which may not be the topic's.
pub fn account_of_principal(principal: &str) -> Option<&str> {
    let rest = principal.strip_prefix("arn:aws:iam::")?;
    rest.split(':').next().filter(|account| !account.is_empty())
}

/// A region and an account: where a request acts, or where a queue or topic lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Namespace {
    pub region: Arc<str>,
    pub account: Arc<str>,
}

impl Namespace {
    pub fn new(region: &str, account: &str) -> Namespace {
        Namespace {
            region: region.into(),
            account: account.into(),
        }
    }

    fn is(&self, region: &str, account: &str) -> bool {
        &*self.region == region && &*self.account == account
    }
}

/// A key taken apart: the namespace it lives in and the name its clients use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place<'a> {
    pub region: &'a str,
    pub account: &'a str,
    pub name: &'a str,
}

/// Keys of queues and topics, relative to the home namespace.
#[derive(Clone, Debug)]
pub struct Namespaces {
    home: Namespace,
}

impl Namespaces {
    pub fn new(home: Namespace) -> Namespaces {
        Namespaces { home }
    }

    pub fn home(&self) -> &Namespace {
        &self.home
    }

    /// The key of `name` in `namespace`; `None` for a name no queue or topic can have.
    pub fn key<'a>(&self, namespace: &Namespace, name: &'a str) -> Option<Cow<'a, str>> {
        if name.contains(':') {
            return None;
        }
        Some(if namespace == &self.home {
            Cow::Borrowed(name)
        } else {
            Cow::Owned(format!("{}:{}:{name}", namespace.region, namespace.account))
        })
    }

    /// Where a key lives.
    pub fn place<'a>(&'a self, key: &'a str) -> Place<'a> {
        let mut parts = key.splitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(region), Some(account), Some(name)) => Place {
                region,
                account,
                name,
            },
            _ => Place {
                region: &self.home.region,
                account: &self.home.account,
                name: key,
            },
        }
    }

    /// Whether a key lives in `namespace`.
    pub fn holds(&self, namespace: &Namespace, key: &str) -> bool {
        let place = self.place(key);
        namespace.is(place.region, place.account)
    }

    /// Whether two keys live in one namespace.
    pub fn same_place(&self, a: &str, b: &str) -> bool {
        let (a, b) = (self.place(a), self.place(b));
        (a.region, a.account) == (b.region, b.account)
    }

    /// The ARN of a key: `arn:aws:<service>:<region>:<account>:<name>`.
    pub fn arn(&self, service: &str, key: &str) -> String {
        let place = self.place(key);
        format!(
            "arn:aws:{service}:{}:{}:{}",
            place.region, place.account, place.name
        )
    }

    /// The key an ARN of `service` names, in whichever region and account it names; `None` if
    /// it is not such an ARN. Anything after the sixth part (a subscription's id) is ignored.
    /// The key is a slice of the ARN either way: the name alone at home, else the tail.
    pub fn key_in_arn<'a>(&self, service: &str, arn: &'a str) -> Option<&'a str> {
        let rest = arn
            .strip_prefix("arn:aws:")?
            .strip_prefix(service)?
            .strip_prefix(':')?;
        let mut parts = rest.splitn(3, ':');
        let (region, account, tail) = (parts.next()?, parts.next()?, parts.next()?);
        let name = tail.split(':').next().unwrap_or(tail);
        if self.home.is(region, account) {
            Some(name)
        } else {
            Some(&rest[..region.len() + account.len() + name.len() + 2])
        }
    }

    /// The namespace an ARN names (any service), if it has one.
    pub fn of_arn(arn: &str) -> Option<Namespace> {
        let parts: Vec<&str> = arn.splitn(6, ':').collect();
        (parts.len() == 6 && parts[0] == "arn").then(|| Namespace::new(parts[3], parts[4]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespaces() -> Namespaces {
        Namespaces::new(Namespace::new("us-east-1", "000000000000"))
    }

    #[test]
    fn home_keys_are_bare_names_and_others_carry_their_namespace() {
        let ns = namespaces();
        let home = ns.home().clone();
        let away = Namespace::new("eu-west-1", "123456789012");
        assert_eq!(ns.key(&home, "q").as_deref(), Some("q"));
        assert_eq!(
            ns.key(&away, "q").as_deref(),
            Some("eu-west-1:123456789012:q")
        );
        assert_eq!(ns.key(&home, "eu-west-1:123456789012:q"), None);
        assert_eq!(ns.arn("sqs", "q"), "arn:aws:sqs:us-east-1:000000000000:q");
        assert_eq!(
            ns.arn("sns", "eu-west-1:123456789012:t"),
            "arn:aws:sns:eu-west-1:123456789012:t"
        );
        assert!(ns.holds(&home, "q"));
        assert!(!ns.holds(&home, "eu-west-1:123456789012:q"));
        assert!(ns.holds(&away, "eu-west-1:123456789012:q"));
        assert_eq!(ns.place("eu-west-1:123456789012:q").name, "q");
        assert_eq!(
            account_of_principal("arn:aws:iam::123456789012:user/alice"),
            Some("123456789012")
        );
        assert_eq!(account_of_principal("AIDAEXAMPLE"), None);
    }

    #[test]
    fn arns_give_back_their_keys() {
        let ns = namespaces();
        for key in ["q.fifo", "eu-west-1:123456789012:q.fifo"] {
            assert_eq!(ns.key_in_arn("sqs", &ns.arn("sqs", key)), Some(key));
        }
        let sub = "arn:aws:sns:eu-west-1:123456789012:t:6f1c2b3a";
        assert_eq!(ns.key_in_arn("sns", sub), Some("eu-west-1:123456789012:t"));
        assert_eq!(
            ns.key_in_arn("sns", "arn:aws:sns:us-east-1:000000000000:t:x"),
            Some("t")
        );
        assert_eq!(ns.key_in_arn("sqs", "arn:aws:sns:us-east-1:0:t"), None);
        assert_eq!(ns.key_in_arn("sqs", "arn:aws:sqs:us-east-1"), None);
        assert_eq!(
            Namespaces::of_arn("arn:aws:sqs:eu-west-1:123456789012:q"),
            Some(Namespace::new("eu-west-1", "123456789012"))
        );
    }
}
