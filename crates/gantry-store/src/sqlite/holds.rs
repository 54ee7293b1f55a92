//! Holds on nodes (cordon, evict) and the alerts behind them.

use super::nodes::refresh_node_state;
use super::*;

impl SqliteStore {
    pub(super) async fn holds(
        &self,
        node: Option<&str>,
        include_released: bool,
    ) -> Result<Vec<HoldRow>> {
        let rows = sqlx::query(
            "SELECT * FROM holds WHERE (?1 IS NULL OR node = ?1) AND (?2 OR state != 'RELEASED')
             ORDER BY created_at, id",
        )
        .bind(node)
        .bind(include_released)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(hold_row).collect()
    }

    pub(super) async fn hold(&self, id: Uuid) -> Result<HoldRow> {
        let r = sqlx::query("SELECT * FROM holds WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        hold_row(&r)
    }

    pub(super) async fn ended_episodes(
        &self,
        fingerprints: &[String],
    ) -> Result<std::collections::HashSet<(String, String)>> {
        let mut out = std::collections::HashSet::new();
        let mut wanted: Vec<&String> = fingerprints.iter().collect();
        wanted.sort();
        wanted.dedup();
        // SQLite caps bound parameters; ask in slices.
        for chunk in wanted.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(",");
            let sql = format!(
                "SELECT fingerprint, episode FROM alert_episodes WHERE fingerprint IN ({marks})"
            );
            let mut q = sqlx::query(&sql);
            for f in chunk {
                q = q.bind(f.as_str());
            }
            for r in q.fetch_all(&self.pool).await? {
                out.insert((r.get("fingerprint"), r.get("episode")));
            }
        }
        Ok(out)
    }

    pub(super) async fn apply_holds(&self, changes: &[HoldChange], now: Millis) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut tx = self.writer.begin().await?;
        let mut touched: Vec<String> = vec![];
        for c in changes {
            match c {
                HoldChange::Place(h) => {
                    sqlx::query(
                        "INSERT INTO holds (id, node, pool, kind, source, state, alertname, fingerprint, episode,
                         release_rule, reason, created_by, created_at, activated_at)
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    )
                    .bind(h.id.to_string())
                    .bind(&h.node)
                    .bind(&h.pool)
                    .bind(h.kind.as_str())
                    .bind(h.source.as_str())
                    .bind(h.state.as_str())
                    .bind(cap_opt(&h.alertname))
                    .bind(&h.fingerprint)
                    .bind(&h.episode)
                    .bind(h.release_rule.as_str())
                    .bind(cap_text(&h.reason))
                    .bind(&h.created_by)
                    .bind(now)
                    .bind((h.state == HoldStatus::Active).then_some(now))
                    .execute(&mut *tx)
                    .await?;
                    let what = if h.state == HoldStatus::Deferred {
                        "deferred (pool cap reached)"
                    } else {
                        "placed"
                    };
                    event(
                        &mut tx,
                        &ev(
                            None,
                            Some(&h.node),
                            None,
                            "hold.placed",
                            format!(
                                "{} hold {} {what} by {}: {}",
                                h.kind,
                                short(h.id),
                                h.created_by,
                                h.reason
                            ),
                        ),
                        now,
                    )
                    .await?;
                    touched.push(h.node.clone());
                }
                HoldChange::Activate { id } => {
                    let r = sqlx::query(
                        "UPDATE holds SET state = 'ACTIVE', activated_at = ? WHERE id = ? AND state = 'DEFERRED' RETURNING node, kind, reason",
                    )
                    .bind(now)
                    .bind(id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some(r) = r {
                        let node: String = r.get("node");
                        event(
                            &mut tx,
                            &ev(
                                None,
                                Some(&node),
                                None,
                                "hold.activated",
                                format!(
                                    "deferred {} hold {} applied: room freed in the pool",
                                    r.get::<String, _>("kind"),
                                    short(*id)
                                ),
                            ),
                            now,
                        )
                        .await?;
                        touched.push(node);
                    }
                }
                HoldChange::Release { id, by, reason } => {
                    let r = sqlx::query(
                        "UPDATE holds SET state = 'RELEASED', released_by = ?, released_at = ?, release_reason = ?
                         WHERE id = ? AND state != 'RELEASED' RETURNING node, kind",
                    )
                    .bind(by)
                    .bind(now)
                    .bind(cap_text(reason))
                    .bind(id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some(r) = r {
                        let node: String = r.get("node");
                        event(
                            &mut tx,
                            &ev(
                                None,
                                Some(&node),
                                None,
                                "hold.released",
                                format!(
                                    "{} hold {} released by {by}: {reason}",
                                    r.get::<String, _>("kind"),
                                    short(*id)
                                ),
                            ),
                            now,
                        )
                        .await?;
                        touched.push(node);
                    }
                }
                HoldChange::AlertResolved { id } => {
                    let r = sqlx::query(
                        "UPDATE holds SET alert_resolved_at = ? WHERE id = ? AND alert_resolved_at IS NULL RETURNING node",
                    )
                    .bind(now)
                    .bind(id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some(r) = r {
                        let node: String = r.get("node");
                        event(
                            &mut tx,
                            &ev(None, Some(&node), None, "hold.awaiting_admin", format!("the alert of hold {} resolved; an administrator must release it", short(*id))),
                            now,
                        )
                        .await?;
                    }
                }
                HoldChange::EndEpisode {
                    fingerprint,
                    episode,
                    by,
                } => {
                    sqlx::query(
                        "INSERT INTO alert_episodes (fingerprint, episode, ended_at, ended_by) VALUES (?, ?, ?, ?)
                         ON CONFLICT (fingerprint, episode) DO NOTHING",
                    )
                    .bind(fingerprint)
                    .bind(episode)
                    .bind(now)
                    .bind(by)
                    .execute(&mut *tx)
                    .await?;
                }
                HoldChange::Event(e) => event(&mut tx, e, now).await?,
                HoldChange::Expect(version) => {
                    let now_at: i64 = sqlx::query_scalar("SELECT version FROM hold_changes")
                        .fetch_one(&mut *tx)
                        .await?;
                    if now_at != *version {
                        return Err(holds_moved(*version, now_at));
                    }
                }
            }
        }
        sqlx::query("UPDATE hold_changes SET version = version + 1")
            .execute(&mut *tx)
            .await?;
        touched.sort();
        touched.dedup();
        for node in touched {
            refresh_node_state(&mut tx, &node, now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn holds_version(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT version FROM hold_changes")
            .fetch_one(&self.pool)
            .await?)
    }
}
