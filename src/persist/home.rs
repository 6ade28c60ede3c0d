//! The region and account a data directory belongs to (`HOME`). Stored names are keys relative
//! to the home namespace (`engine::namespace`): a bare name is the home's, another namespace's
//! carries its region and account. Read with another `--region` or `--account-id`, every bare
//! name would move to another namespace while the prefixed ones and the topics' ARNs stayed,
//! so a directory is opened only with the home it was made with. A directory made before
//! `HOME` existed takes the settings it is next opened with.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{storage, RecoveryError};
use crate::engine::namespace::Namespace;

const FILE: &str = "HOME";

/// `HOME`'s contents; `format` is its version, 1 so far. A later format may drop fields, so
/// they default: its number is what is checked first.
#[derive(Serialize, Deserialize)]
struct Home {
    format: u32,
    #[serde(default)]
    region: String,
    #[serde(default)]
    account: String,
}

/// Checks `dir` belongs to `home`, recording `home` if it has none yet.
pub fn check(dir: &Path, home: &Namespace) -> Result<(), RecoveryError> {
    let path = dir.join(FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let found: Home =
                serde_json::from_slice(&bytes).map_err(|e| RecoveryError::Corruption {
                    file: FILE.into(),
                    offset: 0,
                    reason: format!("not a home record: {e}"),
                })?;
            if found.format != 1 {
                return Err(RecoveryError::NewerFormat(format!(
                    "{FILE} is of format {}, newer than this build of Orderly knows (1)",
                    found.format
                )));
            }
            if found.region != *home.region || found.account != *home.account {
                return Err(RecoveryError::OtherHome {
                    dir: dir.into(),
                    region: found.region,
                    account: found.account,
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let record = Home {
                format: 1,
                region: home.region.to_string(),
                account: home.account.to_string(),
            };
            let bytes = serde_json::to_vec(&record).expect("a home record serialises");
            storage::write_whole(dir, FILE, &bytes)?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_keeps_the_home_it_was_made_with() {
        let dir = tempfile::tempdir().unwrap();
        let home = Namespace::new("us-east-1", "000000000000");
        check(dir.path(), &home).unwrap();
        check(dir.path(), &home).unwrap();
        let elsewhere = Namespace::new("eu-west-1", "000000000000");
        let refused = check(dir.path(), &elsewhere).unwrap_err().to_string();
        assert!(refused.contains("us-east-1"), "{refused}");
        assert!(refused.contains("--region"), "{refused}");
        let other_account = Namespace::new("us-east-1", "111111111111");
        assert!(matches!(
            check(dir.path(), &other_account),
            Err(RecoveryError::OtherHome { .. })
        ));
    }

    #[test]
    fn a_damaged_or_newer_home_record_stops_startup() {
        let dir = tempfile::tempdir().unwrap();
        let home = Namespace::new("us-east-1", "000000000000");
        std::fs::write(dir.path().join(FILE), b"{\"format\":").unwrap();
        assert!(matches!(
            check(dir.path(), &home),
            Err(RecoveryError::Corruption { .. })
        ));
        std::fs::write(dir.path().join(FILE), br#"{"format":2,"regions":[]}"#).unwrap();
        assert!(matches!(
            check(dir.path(), &home),
            Err(RecoveryError::NewerFormat(_))
        ));
    }
}
