//! What the recorded protocols' endpoints would have received, kept in the database so every
//! node lists every node's (schema: `migrations/011_recorded_messages.sql`). A publish keeps
//! its records in its own transaction; the newest `KEPT` stay.

use deadpool_postgres::GenericClient;

use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::recorded::{Listed, KEPT};
use crate::backend::BackendResult;
use crate::engine::topic::recorded::RecordedMessage;
use crate::persist::format::{decode_recorded, encode_recorded};

impl Postgres {
    /// Keeps `records`, in the order given, dropping (and counting) the oldest beyond `KEPT`.
    /// The count's row is written only when something is dropped, so publishes that record
    /// do not take turns on it otherwise.
    pub(super) async fn keep_recorded(
        &self,
        client: &impl GenericClient,
        records: &[RecordedMessage],
    ) -> BackendResult<()> {
        if records.is_empty() {
            return Ok(());
        }
        let encoded: Vec<Vec<u8>> = records.iter().map(encode_recorded).collect();
        client
            .run(
                "INSERT INTO recorded_messages (record) \
                 SELECT r FROM unnest($1::bytea[]) WITH ORDINALITY AS t(r, n) ORDER BY n",
                &[&encoded],
            )
            .await
            .map_err(unavailable)?;
        client
            .run(
                "WITH gone AS (DELETE FROM recorded_messages \
                     WHERE id <= (SELECT max(id) FROM recorded_messages) - $1 RETURNING 1), \
                 counted AS (SELECT count(*) AS n FROM gone) \
                 UPDATE recorded_state SET dropped = dropped + counted.n \
                 FROM counted WHERE recorded_state.id = 1 AND counted.n > 0",
                &[&(KEPT as i64)],
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    pub(super) async fn list_recorded(&self) -> BackendResult<Listed> {
        let client = self.client().await?;
        let rows = client
            .rows("SELECT id, record FROM recorded_messages ORDER BY id", &[])
            .await
            .map_err(unavailable)?;
        let mut listed = Vec::with_capacity(rows.len());
        for row in rows {
            let record = decode_recorded(row.get(1)).map_err(unavailable)?;
            listed.push((row.get::<_, i64>(0) as u64, record));
        }
        let dropped: i64 = client
            .row("SELECT dropped FROM recorded_state WHERE id = 1", &[])
            .await
            .map_err(unavailable)?
            .get(0);
        Ok((listed, dropped as u64))
    }

    pub(super) async fn forget_recorded_ids(&self, ids: Vec<u64>) -> BackendResult<()> {
        let ids: Vec<i64> = ids.into_iter().map(|id| id as i64).collect();
        let client = self.client().await?;
        client
            .run("DELETE FROM recorded_messages WHERE id = ANY($1)", &[&ids])
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}
