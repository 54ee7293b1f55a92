//! Nodes (registration, liveness, state) and the chores sent to their pools.

use super::*;

/// A node's state follows its active holds (EVICTING over CORDONED over READY); a DOWN node
/// stays DOWN until its agent returns.
pub(super) async fn refresh_node_state(
    tx: &mut Transaction<'_, Postgres>,
    node: &str,
    now: Millis,
) -> Result<()> {
    let kinds: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT kind FROM holds WHERE node = $1 AND state = 'ACTIVE'")
            .bind(node)
            .fetch_all(&mut **tx)
            .await?;
    let want = if kinds.iter().any(|k| k == "evict") {
        "EVICTING"
    } else if kinds.iter().any(|k| k == "cordon") {
        "CORDONED"
    } else {
        "READY"
    };
    let n = sqlx::query(
        "UPDATE nodes SET state = $1 WHERE name = $2 AND state != 'DOWN' AND state != $3",
    )
    .bind(want)
    .bind(node)
    .bind(want)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if n > 0 {
        event(
            tx,
            &ev(
                None,
                Some(node),
                None,
                "node.state",
                format!("{want}: by its holds"),
            ),
            now,
        )
        .await?;
    }
    Ok(())
}

impl PgStore {
    pub(super) async fn register_node(
        &self,
        reg: &NodeRegistration,
        now: Millis,
    ) -> Result<NodeRow> {
        let labels = serde_json::to_string(&reg.labels)
            .map_err(|e| StoreError::Corrupt(format!("node labels: {e}")))?;
        let mut tx = self.write_tx().await?;
        let existing = sqlx::query("SELECT * FROM nodes WHERE name = $1")
            .bind(&reg.name)
            .fetch_optional(&mut *tx)
            .await?;
        let msg = match &existing {
            None => {
                sqlx::query(
                    "INSERT INTO nodes (id, name, pool, capacity, state, connected, last_seen, version, metrics_addr, created_at, node_exporter, address, exec_addr, labels, seq)
                     VALUES ($1, $2, $3, $4, 'READY', TRUE, $5, $6, $7, $8, $9, $10, $11, $12, (SELECT COALESCE(MAX(seq), 0) + 1 FROM nodes))",
                )
                .bind(Uuid::new_v4().to_string())
                .bind(&reg.name)
                .bind(&reg.pool)
                .bind(&reg.capacity)
                .bind(now)
                .bind(&reg.version)
                .bind(&reg.metrics_addr)
                .bind(now)
                .bind(&reg.node_exporter)
                .bind(&reg.address)
                .bind(&reg.exec_addr)
                .bind(&labels)
                .execute(&mut *tx)
                .await?;
                format!("registered in pool {}", reg.pool)
            }
            Some(r) => {
                let was: String = r.get("state");
                // A node that was DOWN comes back as its holds say (READY without any).
                sqlx::query(
                    "UPDATE nodes SET pool = $1, capacity = $2, connected = TRUE, last_seen = $3, version = $4, metrics_addr = $5,
                     node_exporter = $6, address = $7, exec_addr = $8, labels = $9,
                     state = CASE WHEN state = 'DOWN' THEN 'READY' ELSE state END WHERE name = $10",
                )
                .bind(&reg.pool)
                .bind(&reg.capacity)
                .bind(now)
                .bind(&reg.version)
                .bind(&reg.metrics_addr)
                .bind(&reg.node_exporter)
                .bind(&reg.address)
                .bind(&reg.exec_addr)
                .bind(&labels)
                .bind(&reg.name)
                .execute(&mut *tx)
                .await?;
                format!("reconnected (was {was})")
            }
        };
        event(
            &mut tx,
            &ev(None, Some(&reg.name), None, "node.connected", msg),
            now,
        )
        .await?;
        refresh_node_state(&mut tx, &reg.name, now).await?;
        let r = sqlx::query("SELECT * FROM nodes WHERE name = $1")
            .bind(&reg.name)
            .fetch_one(&mut *tx)
            .await?;
        let row = node_row(&r)?;
        tx.commit().await?;
        Ok(row)
    }

    pub(super) async fn nodes_seen(&self, seen: &[(String, Millis)]) -> Result<()> {
        if seen.is_empty() {
            return Ok(());
        }
        // One statement for the whole batch, however many nodes: a round trip per node
        // would cost more than the write. A name twice counts with its latest time.
        let (names, ats): (Vec<&str>, Vec<Millis>) =
            seen.iter().map(|(n, at)| (n.as_str(), *at)).unzip();
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "UPDATE nodes n SET last_seen = GREATEST(COALESCE(n.last_seen, 0), s.at)
             FROM (SELECT name, MAX(at) AS at FROM unnest($1::text[], $2::bigint[]) AS u(name, at)
                   GROUP BY name) s
             WHERE n.name = s.name",
        )
        .bind(&names)
        .bind(&ats)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn node_disconnected(&self, name: &str, now: Millis) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let n = sqlx::query("UPDATE nodes SET connected = FALSE WHERE name = $1 AND connected")
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n > 0 {
            event(
                &mut tx,
                &ev(
                    None,
                    Some(name),
                    None,
                    "node.disconnected",
                    "agent connection closed".into(),
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn set_node_state(
        &self,
        name: &str,
        state: NodeState,
        reason: &str,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let n = sqlx::query("UPDATE nodes SET state = $1 WHERE name = $2 AND state != $3")
            .bind(state.as_str())
            .bind(name)
            .bind(state.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n > 0 {
            event(
                &mut tx,
                &ev(
                    None,
                    Some(name),
                    None,
                    "node.state",
                    format!("{state}: {reason}"),
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn silent_nodes(&self, before: Millis) -> Result<Vec<NodeRow>> {
        sqlx::query(
            "SELECT * FROM nodes WHERE state != 'DOWN' AND (last_seen IS NULL OR last_seen < $1)
             ORDER BY pool, name",
        )
        .bind(before)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(node_row)
        .collect()
    }

    pub(super) async fn nodes(&self) -> Result<Vec<NodeRow>> {
        sqlx::query("SELECT * FROM nodes ORDER BY pool, name")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(node_row)
            .collect()
    }

    pub(super) async fn node(&self, name: &str) -> Result<NodeRow> {
        let r = sqlx::query("SELECT * FROM nodes WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        node_row(&r)
    }

    pub(super) async fn add_chore(&self, c: &ChoreRow) -> Result<()> {
        let kind = serde_json::to_string(&c.kind)
            .map_err(|e| StoreError::Corrupt(format!("chore kind: {e}")))?;
        let mut tx = self.write_tx().await?;
        sqlx::query("INSERT INTO chores (id, pool, kind, created_at) VALUES ($1, $2, $3, $4)")
            .bind(c.id.to_string())
            .bind(&c.pool)
            .bind(kind)
            .bind(c.created_at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn pending_chores(&self) -> Result<Vec<ChoreRow>> {
        sqlx::query("SELECT * FROM chores WHERE done_at IS NULL ORDER BY created_at")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(chore_row)
            .collect()
    }

    pub(super) async fn chore_sent(&self, id: Uuid, node: &str) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query("UPDATE chores SET sent_to = $1 WHERE id = $2")
            .bind(node)
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn chore_done(
        &self,
        id: Uuid,
        error: Option<&str>,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let r = sqlx::query("UPDATE chores SET done_at = $1, error = $2 WHERE id = $3 AND done_at IS NULL RETURNING sent_to, kind")
            .bind(now)
            .bind(error.map(pg_text))
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await?;
        if let (Some(r), Some(err)) = (r, error) {
            let node: Option<String> = r.get("sent_to");
            event(
                &mut tx,
                &ev(
                    None,
                    node.as_deref(),
                    None,
                    "chore.failed",
                    format!("{}: {err}", r.get::<String, _>("kind")),
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
