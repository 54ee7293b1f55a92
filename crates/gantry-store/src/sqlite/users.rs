//! Users, their API tokens, and settings.

use super::*;

pub(super) async fn token_by_id(tx: &mut Transaction<'_, Sqlite>, id: &str) -> Result<TokenRow> {
    let row = sqlx::query(
        "SELECT t.id, u.name, u.role, t.purpose, t.created_at, t.expires_at
         FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.id = ?",
    )
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or(StoreError::NotFound)?;
    token_row(&row)
}

pub(super) async fn enabled_admins(tx: &mut Transaction<'_, Sqlite>) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT COUNT(*) FROM users WHERE role = 'admin' AND disabled_at IS NULL",
    )
    .fetch_one(&mut **tx)
    .await?)
}

impl SqliteStore {
    pub(super) async fn create_user(
        &self,
        user: &User,
        token_hash: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let res = sqlx::query(
            "INSERT INTO users (id, name, grp, role, created_at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(user.id.to_string())
        .bind(&user.name)
        .bind(&user.group)
        .bind(user.role.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await;
        conflict_if_taken(res.map_err(StoreError::from), || {
            format!("user {} already exists", user.name)
        })?;
        sqlx::query(
            "INSERT INTO tokens (id, hash, user_id, purpose, created_at, expires_at)
             VALUES (lower(hex(randomblob(8))), ?, ?, 'login', ?, ?)",
        )
        .bind(token_hash)
        .bind(user.id.to_string())
        .bind(now)
        .bind(expires_at)
        .execute(&mut *tx)
        .await?;
        plain_event(
            &mut tx,
            "user.created",
            format!(
                "user {} ({}, group {}) created",
                user.name,
                user.role.as_str(),
                user.group
            ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn user_by_token(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> Result<Option<User>> {
        let row = sqlx::query(
            "SELECT u.id, u.name, u.grp, u.role FROM tokens t JOIN users u ON u.id = t.user_id
             WHERE t.hash = ? AND (t.expires_at IS NULL OR t.expires_at > ?)
               AND u.disabled_at IS NULL",
        )
        .bind(token_hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(user_row).transpose()
    }

    pub(super) async fn user_by_name(&self, name: &str) -> Result<Option<User>> {
        let row = sqlx::query("SELECT id, name, grp, role FROM users WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(user_row).transpose()
    }

    pub(super) async fn add_token(
        &self,
        user_id: Uuid,
        token_hash: &str,
        purpose: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<String> {
        Ok(sqlx::query_scalar(
            "INSERT INTO tokens (id, hash, user_id, purpose, created_at, expires_at)
             VALUES (lower(hex(randomblob(8))), ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(token_hash)
        .bind(user_id.to_string())
        .bind(purpose)
        .bind(now)
        .bind(expires_at)
        .fetch_one(&self.writer)
        .await?)
    }

    pub(super) async fn token_refusal(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> Result<Option<TokenRefusal>> {
        let row = sqlx::query(
            "SELECT t.expires_at, u.name, u.disabled_at FROM tokens t JOIN users u ON u.id = t.user_id
             WHERE t.hash = ?
             UNION ALL
             SELECT expires_at, NULL, NULL FROM endpoint_tokens WHERE hash = ?",
        )
        .bind(token_hash)
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        let Some(r) = row else { return Ok(None) };
        let expires: Option<Millis> = r.get("expires_at");
        let disabled: Option<Millis> = r.get("disabled_at");
        Ok(match expires {
            Some(at) if at <= now => Some(TokenRefusal::Expired(at)),
            _ if disabled.is_some() => Some(TokenRefusal::UserDisabled(r.get("name"))),
            _ => None,
        })
    }

    pub(super) async fn users(&self) -> Result<Vec<UserRow>> {
        let rows = sqlx::query(
            "SELECT u.id, u.name, u.grp, u.role, u.created_at, u.disabled_at,
                    (SELECT COUNT(*) FROM tokens t WHERE t.user_id = u.id) AS n
             FROM users u ORDER BY u.name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(UserRow {
                    user: user_row(r)?,
                    created_at: r.get("created_at"),
                    disabled_at: r.get("disabled_at"),
                    tokens: r.get::<i64, _>("n") as u64,
                })
            })
            .collect()
    }

    pub(super) async fn set_user_disabled(
        &self,
        name: &str,
        disabled: bool,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query("SELECT role, disabled_at FROM users WHERE name = ?")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
        let role: String = row.get("role");
        if disabled && role == "admin" && enabled_admins(&mut tx).await? <= 1 {
            return Err(StoreError::Conflict(format!(
                "{name} is the last enabled administrator; make or enable another first"
            )));
        }
        sqlx::query("UPDATE users SET disabled_at = ? WHERE name = ?")
            .bind(disabled.then_some(now))
            .bind(name)
            .execute(&mut *tx)
            .await?;
        let what = if disabled { "disabled" } else { "enabled" };
        plain_event(
            &mut tx,
            &format!("user.{what}"),
            format!("user {name} {what} by {by}"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn delete_user(
        &self,
        name: &str,
        force: bool,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query("SELECT id, role, disabled_at FROM users WHERE name = ?")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
        let id: String = row.get("id");
        let role: String = row.get("role");
        if role == "admin" {
            let others: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM users
                 WHERE role = 'admin' AND disabled_at IS NULL AND name != ?",
            )
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
            if others == 0 {
                return Err(StoreError::Conflict(format!(
                    "{name} is the last enabled administrator; make or enable another first"
                )));
            }
        }
        let running: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM workflows WHERE owner = ? AND ended_at IS NULL",
        )
        .bind(name)
        .fetch_one(&mut *tx)
        .await?;
        if running > 0 && !force {
            return Err(StoreError::Conflict(format!(
                "{name} owns {running} workflow(s) that have not ended; stop them first, or \
                 delete with force (they keep running, and their group can still manage them)"
            )));
        }
        sqlx::query("DELETE FROM tokens WHERE user_id = ?")
            .bind(&id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM users WHERE id = ?")
            .bind(&id)
            .execute(&mut *tx)
            .await?;
        plain_event(
            &mut tx,
            "user.deleted",
            format!("user {name} deleted by {by} ({running} workflow(s) not ended left running)"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn tokens(&self, user: Option<&str>) -> Result<Vec<TokenRow>> {
        let rows = sqlx::query(
            "SELECT t.id, u.name, u.role, t.purpose, t.created_at, t.expires_at
             FROM tokens t JOIN users u ON u.id = t.user_id
             WHERE ? IS NULL OR u.name = ? ORDER BY u.name, t.created_at, t.id",
        )
        .bind(user)
        .bind(user)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(token_row).collect()
    }

    pub(super) async fn revoke_token(&self, id: &str, by: &str, now: Millis) -> Result<TokenRow> {
        let mut tx = self.writer.begin().await?;
        let t = token_by_id(&mut tx, id).await?;
        sqlx::query("DELETE FROM tokens WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        plain_event(
            &mut tx,
            "token.revoked",
            format!("token {id} of {} revoked by {by}", t.user),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(t)
    }

    pub(super) async fn rotate_token(
        &self,
        id: &str,
        token_hash: &str,
        expires_at: Option<Millis>,
        by: &str,
        now: Millis,
    ) -> Result<TokenRow> {
        let mut tx = self.writer.begin().await?;
        token_by_id(&mut tx, id).await?;
        sqlx::query("UPDATE tokens SET hash = ?, created_at = ?, expires_at = ? WHERE id = ?")
            .bind(token_hash)
            .bind(now)
            .bind(expires_at)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let t = token_by_id(&mut tx, id).await?;
        plain_event(
            &mut tx,
            "token.rotated",
            format!("token {id} of {} rotated by {by}", t.user),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(t)
    }

    pub(super) async fn count_users(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&self.pool)
            .await?;
        Ok(n as u64)
    }

    pub(super) async fn setting(&self, key: &str) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT value FROM settings WHERE key = ?")
                .bind(key)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    pub(super) async fn set_setting(
        &self,
        key: &str,
        value: &str,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value")
            .bind(key)
            .bind(value)
            .execute(&mut *tx)
            .await?;
        plain_event(&mut tx, "settings", format!("{by} set {key}={value}"), now).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn sign_out_session(
        &self,
        sid: &str,
        expires_at: Millis,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query("DELETE FROM web_signouts WHERE expires_at <= ?")
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO web_signouts (sid, expires_at) VALUES (?, ?)
             ON CONFLICT (sid) DO NOTHING",
        )
        .bind(sid)
        .bind(expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn session_signed_out(&self, sid: &str, now: Millis) -> Result<bool> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT expires_at FROM web_signouts WHERE sid = ? AND expires_at > ?",
        )
        .bind(sid)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(found.is_some())
    }

    pub(super) async fn put_confirmation(&self, c: &NewConfirmation, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query("DELETE FROM mcp_confirmations WHERE expires_at <= ?")
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO mcp_confirmations (id_hash, kind, user_id, action, expires_at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(&c.id_hash)
        .bind(c.kind.as_str())
        .bind(c.user_id.to_string())
        .bind(&c.action)
        .bind(c.expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn take_confirmation(
        &self,
        kind: ConfirmationKind,
        id_hash: &str,
        user_id: Uuid,
        action: &str,
        now: Millis,
    ) -> Result<bool> {
        // One statement: two replicas taking the same confirmation at once, one gets it.
        let mut tx = self.writer.begin().await?;
        let n = sqlx::query(
            "DELETE FROM mcp_confirmations WHERE id_hash = ? AND kind = ? AND user_id = ? AND action = ? AND expires_at > ?",
        )
        .bind(id_hash)
        .bind(kind.as_str())
        .bind(user_id.to_string())
        .bind(action)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(n > 0)
    }
}
