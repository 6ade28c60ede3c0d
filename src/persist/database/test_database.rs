//! For tests, the unit tests here and the SDK suite in `tests/it` alike: a fresh database on
//! the server `ORDERLY_TEST_POSTGRES` names (`scripts/postgres-cluster start` makes one;
//! `scripts/test` and CI do so).

/// A fresh, empty database's URL; `None` (the test then passes vacuously, saying so) when no
/// server is configured outside CI. In CI a missing server fails the test.
pub async fn fresh_database() -> Option<String> {
    fresh_database_on(std::env::var("ORDERLY_TEST_POSTGRES")).await
}

/// A fresh, empty database's URL on a second server (`ORDERLY_TEST_POSTGRES_SECOND`, which
/// `scripts/test` starts beside the first), for a shard map whose databases fail apart; on
/// the first server when no second is named.
pub async fn fresh_database_elsewhere() -> Option<String> {
    match std::env::var("ORDERLY_TEST_POSTGRES_SECOND") {
        Ok(second) if !second.is_empty() => fresh_database_on(Ok(second)).await,
        _ => fresh_database().await,
    }
}

async fn fresh_database_on(server: Result<String, std::env::VarError>) -> Option<String> {
    let Ok(base) = server else {
        assert!(
            std::env::var_os("CI").is_none(),
            "ORDERLY_TEST_POSTGRES must name a PostgreSQL server in CI"
        );
        eprintln!("skipped: ORDERLY_TEST_POSTGRES is not set (scripts/postgres-cluster start)");
        return None;
    };
    let (client, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .expect("the test server answers");
    tokio::spawn(connection);
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("a database of the test's own");
    let (stem, _) = base.rsplit_once('/').expect("a URL naming a database");
    Some(format!("{stem}/{name}"))
}
