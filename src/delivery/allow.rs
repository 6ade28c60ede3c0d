//! The opt-in allow-list of webhook destinations (`--webhook-allow`), so that a server exposed
//! to others cannot be made to POST to arbitrary internal addresses. Empty means everything is
//! allowed (loopback and private ranges included), which is what local development needs.
//!
//! Entries are CIDRs (`10.0.0.0/8`), addresses (`127.0.0.1`), host names (`hooks.example.com`)
//! or suffixes (`*.example.com`). A named host on the list is trusted wherever it resolves; any
//! other name is resolved at delivery time and only addresses inside a listed CIDR are used
//! (checked on the resolved address, so DNS cannot smuggle a request past the list).

use std::net::IpAddr;

use ipnet::IpNet;

#[derive(Clone, Debug, Default)]
pub struct AllowList {
    nets: Vec<IpNet>,
    hosts: Vec<String>,
}

impl AllowList {
    /// Parses a comma-separated list.
    pub fn parse(text: &str) -> Result<AllowList, String> {
        let mut list = AllowList::default();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if let Ok(net) = entry.parse::<IpNet>() {
                list.nets.push(net);
            } else if let Ok(ip) = entry.parse::<IpAddr>() {
                list.nets.push(IpNet::from(ip));
            } else if entry
                .trim_start_matches("*.")
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            {
                list.hosts.push(entry.to_ascii_lowercase());
            } else {
                return Err(format!("not a CIDR, address or host name: {entry}"));
            }
        }
        Ok(list)
    }

    pub fn is_open(&self) -> bool {
        self.nets.is_empty() && self.hosts.is_empty()
    }

    pub fn allows_ip(&self, ip: IpAddr) -> bool {
        self.is_open() || self.nets.iter().any(|net| net.contains(&ip))
    }

    /// A host name on the list (exactly, or under a `*.` suffix).
    pub fn names_host(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        self.hosts
            .iter()
            .any(|entry| match entry.strip_prefix("*.") {
                Some(suffix) => host.ends_with(&format!(".{suffix}")),
                None => *entry == host,
            })
    }

    /// Whether a delivery to this URL's host may go ahead before resolution: an allowed address
    /// literal, a listed name, or (when CIDRs are listed) a name to check once resolved.
    pub fn admits_host(&self, host: &str) -> bool {
        if self.is_open() {
            return true;
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(ip) => self.allows_ip(ip),
            Err(_) => self.names_host(bare) || !self.nets.is_empty(),
        }
    }

    /// Subscribe's check, so a refused endpoint fails at once rather than at every delivery:
    /// the endpoint's host when the list refuses it. A malformed URL is not refused here (it
    /// gets the engine's own error).
    pub fn refused_host(&self, endpoint: &str) -> Option<String> {
        if self.is_open() {
            return None;
        }
        let host = reqwest::Url::parse(endpoint)
            .ok()
            .and_then(|u| u.host_str().map(String::from))?;
        (!self.admits_host(&host)).then_some(host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_list_allows_everything() {
        let list = AllowList::parse("").unwrap();
        assert!(list.allows_ip("10.1.2.3".parse().unwrap()));
        assert_eq!(list.refused_host("http://169.254.169.254/latest"), None);
    }

    #[test]
    fn cidrs_addresses_and_names() {
        let list =
            AllowList::parse("10.0.0.0/8, 127.0.0.1, hooks.example.com, *.corp.test").unwrap();
        assert!(list.allows_ip("10.9.8.7".parse().unwrap()));
        assert!(list.allows_ip("127.0.0.1".parse().unwrap()));
        assert!(!list.allows_ip("127.0.0.2".parse().unwrap()));
        assert!(!list.allows_ip("169.254.169.254".parse().unwrap()));
        assert!(list.names_host("HOOKS.example.com"));
        assert!(list.names_host("a.corp.test"));
        assert!(!list.names_host("corp.test.evil"));
        assert_eq!(list.refused_host("http://127.0.0.1:9000/hook"), None);
        assert!(list.refused_host("http://169.254.169.254/").is_some());
        // Other names are checked on their resolved addresses at delivery.
        assert_eq!(list.refused_host("http://elsewhere.test/"), None);
        let names_only = AllowList::parse("hooks.example.com").unwrap();
        assert!(names_only.refused_host("http://elsewhere.test/").is_some());
        assert!(AllowList::parse("not a host!").is_err());
    }
}
