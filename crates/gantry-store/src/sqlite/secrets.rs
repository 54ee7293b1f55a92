//! Sealed secrets.

use super::*;

impl SqliteStore {
    pub(super) async fn put_secret(
        &self,
        key: &SecretKey,
        kind: SecretType,
        sealed: &str,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO secrets (scope, owner, name, kind, sealed, updated_by, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (scope, owner, name) DO UPDATE SET kind = excluded.kind, sealed = excluded.sealed,
             updated_by = excluded.updated_by, updated_at = excluded.updated_at",
        )
        .bind(key.scope.as_str())
        .bind(&key.owner)
        .bind(&key.name)
        .bind(kind.as_str())
        .bind(sealed)
        .bind(by)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        plain_event(
            &mut tx,
            "secret.set",
            format!(
                "{by} set secret://{}/{} ({})",
                key.scope, key.name, key.owner
            ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn secret(&self, key: &SecretKey) -> Result<Option<SealedSecret>> {
        let row: Option<(String, String)> = sqlx::query_as(
            "SELECT kind, sealed FROM secrets WHERE scope = ? AND owner = ? AND name = ?",
        )
        .bind(key.scope.as_str())
        .bind(&key.owner)
        .bind(&key.name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|(kind, sealed)| {
            Ok(SealedSecret {
                kind: parse(&kind)?,
                sealed,
            })
        })
        .transpose()
    }

    pub(super) async fn list_secrets(
        &self,
        owners: &[(SecretScope, String)],
    ) -> Result<Vec<SecretRow>> {
        let rows = sqlx::query("SELECT scope, owner, name, kind, updated_by, updated_at FROM secrets ORDER BY scope, owner, name")
            .fetch_all(&self.pool)
            .await?;
        let mut out = Vec::new();
        for r in &rows {
            let s = secret_row(r)?;
            if owners
                .iter()
                .any(|(scope, owner)| *scope == s.scope && *owner == s.owner)
            {
                out.push(s);
            }
        }
        Ok(out)
    }

    pub(super) async fn delete_secret(
        &self,
        key: &SecretKey,
        by: &str,
        now: Millis,
    ) -> Result<bool> {
        let mut tx = self.writer.begin().await?;
        let n = sqlx::query("DELETE FROM secrets WHERE scope = ? AND owner = ? AND name = ?")
            .bind(key.scope.as_str())
            .bind(&key.owner)
            .bind(&key.name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n > 0 {
            plain_event(
                &mut tx,
                "secret.deleted",
                format!(
                    "{by} deleted secret://{}/{} ({})",
                    key.scope, key.name, key.owner
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(n > 0)
    }
}
