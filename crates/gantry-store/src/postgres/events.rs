//! The event log and log sizes.

use super::*;

impl PgStore {
    pub(super) async fn events(&self, q: &EventQuery) -> Result<Vec<EventRow>> {
        let limit = if q.limit == 0 { 10_000 } else { q.limit } as i64;
        let rows = match (&q.workflow_id, &q.node) {
            (Some(w), _) => sqlx::query(
                "SELECT * FROM events WHERE workflow_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            )
            .bind(w.to_string())
            .bind(q.after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?,
            (None, Some(n)) => {
                sqlx::query(
                    "SELECT * FROM events WHERE node = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                )
                .bind(n)
                .bind(q.after)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?
            }
            (None, None) => {
                sqlx::query("SELECT * FROM events WHERE seq > $1 ORDER BY seq LIMIT $2")
                    .bind(q.after)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?
            }
        };
        rows.iter().map(event_row).collect()
    }

    pub(super) async fn node_events(
        &self,
        node: &str,
        since: Millis,
        limit: u32,
        vis: &Visibility,
    ) -> Result<(Vec<EventRow>, bool)> {
        let (all, user, group) = match vis {
            Visibility::All => (true, "", ""),
            Visibility::UserOrGroup { user, group } => (false, user.as_str(), group.as_str()),
        };
        // One query: the names come from the join, the page from the node index walked
        // backwards; one row past the page says whether there is more.
        let mut rows = sqlx::query(
            "SELECT e.*, w.name AS workflow_name FROM events e
             LEFT JOIN workflows w ON w.id = e.workflow_id
             WHERE e.node = $1 AND e.time >= $2
               AND (e.workflow_id IS NULL OR $3 OR w.owner = $4 OR w.grp = $5)
             ORDER BY e.seq DESC LIMIT $6",
        )
        .bind(node)
        .bind(since)
        .bind(all)
        .bind(user)
        .bind(group)
        .bind(limit as i64 + 1)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(event_row)
        .collect::<Result<Vec<_>>>()?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        rows.reverse();
        Ok((rows, more))
    }

    pub(super) async fn record_unknown_node_alerts(
        &self,
        alerts: &[UnknownNodeAlert],
        now: Millis,
    ) -> Result<usize> {
        if alerts.is_empty() {
            return Ok(0);
        }
        let mut tx = self.write_tx().await?;
        let mut recorded = 0;
        for a in alerts {
            let new = sqlx::query(
                "INSERT INTO unknown_node_alerts (fingerprint, episode, status, seen_at)
                 VALUES ($1, $2, $3, $4) ON CONFLICT (fingerprint, episode, status) DO NOTHING",
            )
            .bind(&a.fingerprint)
            .bind(&a.episode)
            .bind(&a.status)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if new > 0 {
                event(&mut tx, &a.event, now).await?;
                recorded += 1;
            }
        }
        tx.commit().await?;
        Ok(recorded)
    }

    pub(super) async fn record_event(&self, e: &NewEvent, now: Millis) -> Result<()> {
        let mut tx = self.write_tx().await?;
        event(&mut tx, e, now).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn log_size(&self, attempt_id: Uuid, stream: &str) -> Result<u64> {
        let n: Option<i64> =
            sqlx::query_scalar("SELECT bytes FROM logs WHERE attempt_id = $1 AND stream = $2")
                .bind(attempt_id.to_string())
                .bind(stream)
                .fetch_optional(&self.pool)
                .await?;
        Ok(n.unwrap_or(0) as u64)
    }

    pub(super) async fn set_log_size(
        &self,
        attempt_id: Uuid,
        stream: &str,
        bytes: u64,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO logs (attempt_id, stream, bytes) VALUES ($1, $2, $3)
             ON CONFLICT (attempt_id, stream) DO UPDATE SET bytes = GREATEST(logs.bytes, excluded.bytes)",
        )
        .bind(attempt_id.to_string())
        .bind(stream)
        .bind(bytes as i64)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
