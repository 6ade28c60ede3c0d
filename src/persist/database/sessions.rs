//! Temporary credentials STS issued, kept once in the database (`log_sessions`): any node of
//! it admits them whichever node issued them, and a takeover or a restart keeps them until
//! they expire. Written when issued and read by a node the first time a request signed with
//! them reaches it; expired rows are dropped when more are issued. The secret is kept as it
//! is, as a signature is checked with it; the session token only as its SHA-256 digest, which
//! is all a request's token is compared with.

use std::time::Duration;

use super::connection::{Failed, Session};

/// Longest a read or a write may take once connected, and longest a request waits for the
/// connection another request uses.
const TIMEOUT: Duration = Duration::from_secs(2);

/// One set of temporary credentials as the database keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptSession {
    pub secret: String,
    pub token_sha256: Vec<u8>,
    /// Who they act as: the account, `SenderId` and `SubscriptionPrincipal`.
    pub account: String,
    pub user_id: String,
    pub principal: String,
    /// Unix seconds.
    pub expires: i64,
}

/// The table, over a connection of its own (made at first use, again after a failure).
pub struct SessionTable {
    session: tokio::sync::Mutex<Session>,
}

impl SessionTable {
    /// The table of the database at `storage` (made with the log's tables, `schema`).
    pub fn new(storage: &str) -> Result<SessionTable, String> {
        let config = super::connection::config(storage)?;
        Ok(SessionTable {
            session: tokio::sync::Mutex::new(Session::new(config)),
        })
    }

    /// Keeps `kept` under `access_key` unless `max` are kept already once expired ones are
    /// dropped (`now` in Unix seconds; nodes issuing at once may pass it by one each); false
    /// when full.
    pub async fn keep(
        &self,
        access_key: &str,
        kept: &KeptSession,
        (now, max): (i64, i64),
    ) -> Result<bool, Failed> {
        let mut session = connection_of(&self.session).await?;
        let client = session.connected().await?;
        let answered = tokio::time::timeout(TIMEOUT, async {
            client
                .execute("DELETE FROM log_sessions WHERE expires <= $1", &[&now])
                .await?;
            let added = client
                .execute(
                    "INSERT INTO log_sessions \
                     (access_key, secret, token_sha256, account, user_id, principal, expires) \
                     SELECT $1, $2, $3, $4, $5, $6, $7 \
                     WHERE (SELECT count(*) FROM log_sessions) < $8",
                    &[
                        &access_key,
                        &kept.secret,
                        &kept.token_sha256,
                        &kept.account,
                        &kept.user_id,
                        &kept.principal,
                        &kept.expires,
                        &max,
                    ],
                )
                .await?;
            Ok(added == 1)
        })
        .await;
        settle(&mut session, answered)
    }

    /// The credentials kept under `access_key`, expired or not.
    pub async fn find(&self, access_key: &str) -> Result<Option<KeptSession>, Failed> {
        let mut session = connection_of(&self.session).await?;
        let client = session.connected().await?;
        let answered = tokio::time::timeout(TIMEOUT, async {
            let row = client
                .query_opt(
                    "SELECT secret, token_sha256, account, user_id, principal, expires \
                     FROM log_sessions WHERE access_key = $1",
                    &[&access_key],
                )
                .await?;
            Ok(row.map(|row| KeptSession {
                secret: row.get(0),
                token_sha256: row.get(1),
                account: row.get(2),
                user_id: row.get(3),
                principal: row.get(4),
                expires: row.get(5),
            }))
        })
        .await;
        settle(&mut session, answered)
    }
}

/// The connection, once no other request uses it (within `TIMEOUT`: nothing was asked of the
/// database otherwise).
async fn connection_of(
    session: &tokio::sync::Mutex<Session>,
) -> Result<tokio::sync::MutexGuard<'_, Session>, Failed> {
    (tokio::time::timeout(TIMEOUT, session.lock()).await).map_err(|_| Failed {
        cause: format!(
            "PostgreSQL: the connection was busy for {} ms",
            TIMEOUT.as_millis()
        ),
        unknown_outcome: false,
        code: None,
        refused_at_connect: None,
    })
}

/// A request's answer, or why it failed (the connection dropped when the outcome is unknown).
fn settle<T>(
    session: &mut Session,
    answered: Result<Result<T, tokio_postgres::Error>, tokio::time::error::Elapsed>,
) -> Result<T, Failed> {
    match answered {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(session.failed(&error)),
        Err(_) => Err(session.timed_out(TIMEOUT)),
    }
}
