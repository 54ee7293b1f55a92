//! Storage provisioners and persistent volumes.

use super::*;

pub(super) async fn insert_volume(
    tx: &mut Transaction<'_, Sqlite>,
    v: &VolumeRow,
    now: Millis,
    first_use: bool,
) -> Result<()> {
    let sql = if first_use {
        "INSERT INTO volumes (id, scope, owner, name, storage, created_by, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope, owner, name) DO NOTHING"
    } else {
        "INSERT INTO volumes (id, scope, owner, name, storage, created_by, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?)"
    };
    let n = sqlx::query(sql)
        .bind(v.id.to_string())
        .bind(v.scope.as_str())
        .bind(&v.owner)
        .bind(&v.name)
        .bind(&v.storage)
        .bind(&v.created_by)
        .bind(now)
        .execute(&mut **tx)
        .await?
        .rows_affected();
    if n > 0 {
        let how = if first_use { " on first use" } else { "" };
        plain_event(
            tx,
            "volume.created",
            format!(
                "{} created volume {}/{} ({}) on storage {}{how}",
                v.created_by, v.scope, v.name, v.owner, v.storage
            ),
            now,
        )
        .await?;
    }
    Ok(())
}

impl SqliteStore {
    pub(super) async fn add_storage(&self, s: &StorageRow, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let groups = s
            .groups
            .as_ref()
            .map(|g| serde_json::to_string(g).expect("strings serialize"));
        let res = sqlx::query(
            "INSERT INTO storages (name, driver, path, pool, groups, created_by, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&s.name)
        .bind(s.driver.as_str())
        .bind(&s.path)
        .bind(&s.pool)
        .bind(groups)
        .bind(&s.created_by)
        .bind(now)
        .execute(&mut *tx)
        .await;
        conflict_if_taken(res.map_err(StoreError::from), || {
            format!("storage {} already exists", s.name)
        })?;
        plain_event(
            &mut tx,
            "storage.added",
            format!(
                "{} added storage {} ({} at {})",
                s.created_by, s.name, s.driver, s.path
            ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn storages(&self) -> Result<Vec<StorageRow>> {
        let rows = sqlx::query("SELECT * FROM storages ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(storage_row).collect()
    }

    pub(super) async fn delete_storage(&self, name: &str, by: &str, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let used: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM volumes WHERE storage = ?")
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
        let n = sqlx::query("DELETE FROM storages WHERE name = ?")
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        if used > 0 {
            return Err(StoreError::Conflict(format!(
                "storage {name} holds {used} volume(s): remove them first"
            )));
        }
        plain_event(
            &mut tx,
            "storage.removed",
            format!("{by} removed storage {name}"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn create_volume(&self, v: &VolumeRow, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let res = insert_volume(&mut tx, v, now, false).await;
        conflict_if_taken(res, || {
            format!("volume {} already exists in {} scope", v.name, v.scope)
        })?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn ensure_volume(&self, v: &VolumeRow, now: Millis) -> Result<VolumeRow> {
        let mut tx = self.writer.begin().await?;
        insert_volume(&mut tx, v, now, true).await?;
        let r = sqlx::query("SELECT * FROM volumes WHERE scope = ? AND owner = ? AND name = ?")
            .bind(v.scope.as_str())
            .bind(&v.owner)
            .bind(&v.name)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        volume_row(&r)
    }

    pub(super) async fn volume(
        &self,
        scope: VolumeScope,
        owner: &str,
        name: &str,
    ) -> Result<Option<VolumeRow>> {
        sqlx::query("SELECT * FROM volumes WHERE scope = ? AND owner = ? AND name = ?")
            .bind(scope.as_str())
            .bind(owner)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(volume_row)
            .transpose()
    }

    pub(super) async fn volumes(
        &self,
        owners: Option<&[(VolumeScope, String)]>,
    ) -> Result<Vec<VolumeRow>> {
        let rows = sqlx::query("SELECT * FROM volumes ORDER BY scope, owner, name")
            .fetch_all(&self.pool)
            .await?;
        let all = rows.iter().map(volume_row).collect::<Result<Vec<_>>>()?;
        Ok(match owners {
            None => all,
            Some(owners) => all
                .into_iter()
                .filter(|v| owners.iter().any(|(s, o)| *s == v.scope && *o == v.owner))
                .collect(),
        })
    }

    pub(super) async fn volume_users(&self, id: Uuid) -> Result<Vec<Uuid>> {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT u.workflow_id FROM volume_uses u JOIN workflows w ON w.id = u.workflow_id
             WHERE u.volume_id = ? AND w.status IN ('PENDING', 'RUNNING') ORDER BY w.created_at",
        )
        .bind(id.to_string())
        .fetch_all(&self.pool)
        .await?;
        ids.iter().map(|s| uuid(s)).collect()
    }

    pub(super) async fn delete_volume(&self, id: Uuid, by: &str, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let users: Vec<String> = sqlx::query_scalar(
            "SELECT u.workflow_id FROM volume_uses u JOIN workflows w ON w.id = u.workflow_id
             WHERE u.volume_id = ? AND w.status IN ('PENDING', 'RUNNING') ORDER BY w.created_at",
        )
        .bind(id.to_string())
        .fetch_all(&mut *tx)
        .await?;
        if !users.is_empty() {
            return Err(StoreError::Conflict(format!(
                "the volume is mounted by workflow(s) not yet ended: {}; stop them or wait",
                users.join(", ")
            )));
        }
        sqlx::query("DELETE FROM volume_uses WHERE volume_id = ?")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        let r = sqlx::query("DELETE FROM volumes WHERE id = ? RETURNING scope, name")
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
        let (scope, name): (String, String) = (r.get("scope"), r.get("name"));
        plain_event(
            &mut tx,
            "volume.removed",
            format!("{by} removed volume {scope}/{name}"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
