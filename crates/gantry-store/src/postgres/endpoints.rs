//! Persistent endpoints, their takeovers and tokens, attempts' addresses.

use super::*;

impl PgStore {
    pub(super) async fn set_attempt_address(&self, attempt: Uuid, address: &str) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query("UPDATE attempts SET address = $1 WHERE id = $2")
            .bind(address)
            .bind(attempt.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn create_endpoint(&self, e: &EndpointRow, now: Millis) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let res = sqlx::query(
            "INSERT INTO endpoints (name, owner, grp, scope, mode, drain_timeout_ms, confirm, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&e.name)
        .bind(&e.owner)
        .bind(&e.group)
        .bind(e.scope.as_str())
        .bind(e.mode.as_str())
        .bind(e.drain_timeout_ms)
        .bind(e.confirm)
        .bind(now)
        .execute(&mut *tx)
        .await;
        conflict_if_taken(res.map_err(StoreError::from), || {
            format!("endpoint {} already exists", e.name)
        })?;
        plain_event(
            &mut tx,
            "endpoint.created",
            format!(
                "endpoint {} created by {} ({} scope, {})",
                e.name, e.owner, e.scope, e.mode
            ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn endpoint(&self, name: &str) -> Result<EndpointRow> {
        let r = sqlx::query("SELECT * FROM endpoints WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        endpoint_row(&r)
    }

    pub(super) async fn endpoints(&self) -> Result<Vec<EndpointRow>> {
        sqlx::query("SELECT * FROM endpoints ORDER BY name")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(endpoint_row)
            .collect()
    }

    pub(super) async fn delete_endpoint(&self, name: &str, by: &str, now: Millis) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let n = sqlx::query("DELETE FROM endpoints WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        sqlx::query(
            "UPDATE takeovers SET phase = 'CANCELLED', reason = 'the endpoint was deleted', ended_at = $1, updated_at = $2
             WHERE endpoint = $3 AND ended_at IS NULL",
        )
        .bind(now)
        .bind(now)
        .bind(name)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM endpoint_tokens WHERE endpoint = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        plain_event(
            &mut tx,
            "endpoint.deleted",
            format!("endpoint {name} deleted by {by}"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn create_takeover(&self, t: &TakeoverRow, now: Millis) -> Result<()> {
        let mut tx = self.write_tx().await?;
        insert_takeover(&mut tx, t, now).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn takeovers(
        &self,
        endpoint: Option<&str>,
        open_only: bool,
    ) -> Result<Vec<TakeoverRow>> {
        sqlx::query(
            "SELECT * FROM takeovers WHERE ($1 IS NULL OR endpoint = $1) AND (NOT $2 OR ended_at IS NULL)
             ORDER BY created_at, id",
        )
        .bind(endpoint)
        .bind(open_only)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(takeover_row)
        .collect()
    }

    pub(super) async fn takeover(&self, id: Uuid) -> Result<TakeoverRow> {
        let r = sqlx::query("SELECT * FROM takeovers WHERE id = $1")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        takeover_row(&r)
    }

    pub(super) async fn apply_endpoints(
        &self,
        changes: &[EndpointChange],
        now: Millis,
    ) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut tx = self.write_tx().await?;
        apply_endpoint_changes(&mut tx, changes, now).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn add_endpoint_token(
        &self,
        endpoint: &str,
        hash: &str,
        by: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<String> {
        let mut tx = self.write_tx().await?;
        let id: String = sqlx::query_scalar("INSERT INTO endpoint_tokens (id, hash, endpoint, created_by, created_at, expires_at) VALUES (left(md5(gen_random_uuid()::text), 16), $1, $2, $3, $4, $5) RETURNING id")
            .bind(hash)
            .bind(endpoint)
            .bind(by)
            .bind(now)
            .bind(expires_at)
            .fetch_one(&mut *tx)
            .await?;
        plain_event(
            &mut tx,
            "endpoint.token",
            format!("{by} made a token for endpoint {endpoint}"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    pub(super) async fn endpoint_token(&self, hash: &str, now: Millis) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT endpoint FROM endpoint_tokens WHERE hash = $1 AND (expires_at IS NULL OR expires_at > $2)",
        )
        .bind(hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub(super) async fn endpoint_tokens(
        &self,
        endpoint: Option<&str>,
    ) -> Result<Vec<EndpointTokenRow>> {
        let rows = sqlx::query(
            "SELECT id, endpoint, created_by, created_at, expires_at FROM endpoint_tokens
             WHERE $1 IS NULL OR endpoint = $2 ORDER BY endpoint, created_at, id",
        )
        .bind(endpoint)
        .bind(endpoint)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(endpoint_token_row).collect())
    }

    pub(super) async fn endpoint_token_by_id(&self, id: &str) -> Result<EndpointTokenRow> {
        let row = sqlx::query(
            "SELECT id, endpoint, created_by, created_at, expires_at FROM endpoint_tokens
             WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)?;
        Ok(endpoint_token_row(&row))
    }

    pub(super) async fn revoke_endpoint_token(
        &self,
        id: &str,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let endpoint: String =
            sqlx::query_scalar("DELETE FROM endpoint_tokens WHERE id = $1 RETURNING endpoint")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or(StoreError::NotFound)?;
        plain_event(
            &mut tx,
            "endpoint.token_revoked",
            format!("{by} revoked token {id} of endpoint {endpoint}"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// A takeover row and its event, in the caller's transaction (a submit stores its
/// workflow's takeovers with it).
pub(super) async fn insert_takeover(
    tx: &mut Transaction<'_, Postgres>,
    t: &TakeoverRow,
    now: Millis,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO takeovers (id, endpoint, from_workflow, to_workflow, to_service, port, requested_by, channel, mode,
         phase, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(t.id.to_string())
    .bind(&t.endpoint)
    .bind(t.from_workflow.map(|u| u.to_string()))
    .bind(t.to_workflow.to_string())
    .bind(&t.to_service)
    .bind(t.port as i64)
    .bind(&t.requested_by)
    .bind(t.channel.as_str())
    .bind(t.mode.as_str())
    .bind(t.phase.as_str())
    .bind(now)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    let msg = takeover_requested(t);
    event(
        tx,
        &ev(
            Some(t.to_workflow),
            None,
            Some(t.to_service.clone()),
            "endpoint.takeover",
            msg,
        ),
        now,
    )
    .await?;
    Ok(())
}

/// [`EndpointChange`]s in the caller's transaction.
pub(super) async fn apply_endpoint_changes(
    tx: &mut Transaction<'_, Postgres>,
    changes: &[EndpointChange],
    now: Millis,
) -> Result<()> {
    for c in changes {
        match c {
            EndpointChange::Phase {
                id,
                phase,
                reason,
                end,
            } => {
                let r = sqlx::query(
                    "UPDATE takeovers SET phase = $1, reason = COALESCE($2, reason), updated_at = $3,
                     ended_at = CASE WHEN $4 THEN $5 ELSE ended_at END
                     WHERE id = $6 AND ended_at IS NULL AND phase != $7 RETURNING endpoint, to_workflow",
                )
                .bind(phase.as_str())
                .bind(pg_opt(reason))
                .bind(now)
                .bind(end)
                .bind(now)
                .bind(id.to_string())
                .bind(phase.as_str())
                .fetch_optional(&mut **tx)
                .await?;
                if let Some(r) = r {
                    let endpoint: String = r.get("endpoint");
                    let wf = uuid(r.get("to_workflow"))?;
                    let why = reason
                        .as_deref()
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default();
                    event(
                        tx,
                        &ev(
                            Some(wf),
                            None,
                            None,
                            "endpoint.phase",
                            format!("takeover of {endpoint}: {phase}{why}"),
                        ),
                        now,
                    )
                    .await?;
                }
            }
            EndpointChange::Switch { takeover } => {
                let r = sqlx::query("SELECT * FROM takeovers WHERE id = $1")
                    .bind(takeover.to_string())
                    .fetch_one(&mut **tx)
                    .await?;
                let t = takeover_row(&r)?;
                sqlx::query("UPDATE endpoints SET workflow_id = $1, service = $2, port = $3, since = $4 WHERE name = $5")
                    .bind(t.to_workflow.to_string())
                    .bind(&t.to_service)
                    .bind(t.port as i64)
                    .bind(now)
                    .bind(&t.endpoint)
                    .execute(&mut **tx)
                    .await?;
                sqlx::query("UPDATE takeovers SET switched_at = $1, updated_at = $2 WHERE id = $3")
                    .bind(now)
                    .bind(now)
                    .bind(takeover.to_string())
                    .execute(&mut **tx)
                    .await?;
                let msg = format!(
                    "endpoint {} now served by {} of workflow {}",
                    t.endpoint, t.to_service, t.to_workflow
                );
                event(
                    tx,
                    &ev(
                        Some(t.to_workflow),
                        None,
                        Some(t.to_service.clone()),
                        "endpoint.switched",
                        msg.clone(),
                    ),
                    now,
                )
                .await?;
                if let Some(from) = t.from_workflow {
                    event(
                        tx,
                        &ev(Some(from), None, None, "endpoint.switched", msg),
                        now,
                    )
                    .await?;
                }
            }
            EndpointChange::Clear { endpoint, reason } => {
                let n = sqlx::query(
                    "UPDATE endpoints SET workflow_id = NULL, service = NULL, port = NULL, since = $1 WHERE name = $2 AND workflow_id IS NOT NULL",
                )
                .bind(now)
                .bind(endpoint)
                .execute(&mut **tx)
                .await?
                .rows_affected();
                if n > 0 {
                    plain_event(
                        tx,
                        "endpoint.idle",
                        format!("endpoint {endpoint} has no backend: {reason}"),
                        now,
                    )
                    .await?;
                }
            }
            EndpointChange::Confirm { id, by, via } => {
                sqlx::query("UPDATE takeovers SET confirmed_by = $1, confirmed_via = $2, updated_at = $3 WHERE id = $4 AND confirmed_by IS NULL")
                    .bind(by)
                    .bind(via)
                    .bind(now)
                    .bind(id.to_string())
                    .execute(&mut **tx)
                    .await?;
            }
            EndpointChange::Event(e) => event(tx, e, now).await?,
            EndpointChange::Fence(f) => leases::check_fence(tx, f).await?,
        }
    }
    Ok(())
}

impl PgStore {
    pub(super) async fn publish_proxy_views(
        &self,
        replica: &str,
        views: &[ProxyView],
        forget_before: Millis,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query("DELETE FROM proxy_views WHERE replica = $1 OR seen_at < $2")
            .bind(replica)
            .bind(forget_before)
            .execute(&mut *tx)
            .await?;
        for v in views {
            sqlx::query(
                "INSERT INTO proxy_views
                 (replica, endpoint, workflow_id, attempt_id, old_in_flight, seen_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (replica, endpoint) DO UPDATE SET workflow_id = excluded.workflow_id,
                    attempt_id = excluded.attempt_id, old_in_flight = excluded.old_in_flight,
                    seen_at = excluded.seen_at",
            )
            .bind(replica)
            .bind(&v.endpoint)
            .bind(v.workflow_id.map(|w| w.to_string()))
            .bind(v.attempt_id.map(|a| a.to_string()))
            .bind(i64::try_from(v.old_in_flight).unwrap_or(i64::MAX))
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn touch_proxy_views(&self, replica: &str, now: Millis) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let n = sqlx::query("UPDATE proxy_views SET seen_at = $1 WHERE replica = $2")
            .bind(now)
            .bind(replica)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(n > 0)
    }

    pub(super) async fn proxy_views(&self, since: Millis) -> Result<Vec<ProxyViewRow>> {
        sqlx::query("SELECT * FROM proxy_views WHERE seen_at >= $1 ORDER BY replica, endpoint")
            .bind(since)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(proxy_view_row)
            .collect()
    }
}
