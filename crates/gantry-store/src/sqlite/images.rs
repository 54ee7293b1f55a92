//! The object cache: blobs, their repository links, manifests, image tags.

use super::*;

/// Links a blob that has a row into a repository; 1 when the link is new.
pub(super) async fn link_blob(
    tx: &mut Transaction<'_, Sqlite>,
    (scope, owner, name): Repository<'_>,
    digest: &str,
    now: Millis,
) -> Result<u64> {
    Ok(sqlx::query(
        "INSERT OR IGNORE INTO blob_links (scope, owner, name, digest, created_at)
         SELECT ?, ?, ?, digest, ? FROM blobs WHERE digest = ?",
    )
    .bind(scope)
    .bind(owner)
    .bind(name)
    .bind(now)
    .bind(digest)
    .execute(&mut **tx)
    .await?
    .rows_affected())
}

pub(super) async fn is_linked(
    tx: &mut Transaction<'_, Sqlite>,
    (scope, owner, name): Repository<'_>,
    digest: &str,
) -> Result<bool> {
    Ok(sqlx::query_scalar::<_, i64>(
        "SELECT 1 FROM blob_links WHERE scope = ? AND owner = ? AND name = ? AND digest = ?",
    )
    .bind(scope)
    .bind(owner)
    .bind(name)
    .bind(digest)
    .fetch_optional(&mut **tx)
    .await?
    .is_some())
}

impl SqliteStore {
    pub(super) async fn put_blob(
        &self,
        digest: &str,
        size: i64,
        link: Option<Repository<'_>>,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO blobs (digest, size, created_at, last_used_at) VALUES (?, ?, ?, ?)
             ON CONFLICT (digest) DO UPDATE SET last_used_at = excluded.last_used_at",
        )
        .bind(digest)
        .bind(size)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if let Some(repo) = link {
            link_blob(&mut tx, repo, digest, now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn link_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
        now: Millis,
    ) -> Result<u64> {
        let mut tx = self.writer.begin().await?;
        let mut added = 0;
        for d in digests {
            added += link_blob(&mut tx, repo, d, now).await?;
        }
        tx.commit().await?;
        Ok(added)
    }

    pub(super) async fn linked_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
    ) -> Result<std::collections::HashSet<String>> {
        let (scope, owner, name) = repo;
        let mut out = std::collections::HashSet::new();
        for chunk in digests.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql = format!(
                "SELECT digest FROM blob_links WHERE scope = ? AND owner = ? AND name = ?
                 AND digest IN ({marks})"
            );
            let mut q = sqlx::query_scalar::<_, String>(&sql)
                .bind(scope)
                .bind(owner)
                .bind(name);
            for d in chunk {
                q = q.bind(d);
            }
            out.extend(q.fetch_all(&self.pool).await?);
        }
        Ok(out)
    }

    pub(super) async fn blob(&self, digest: &str) -> Result<Option<BlobRow>> {
        sqlx::query("SELECT * FROM blobs WHERE digest = ?")
            .bind(digest)
            .fetch_optional(&self.pool)
            .await?
            .map(|r| blob_row(&r))
            .transpose()
    }

    pub(super) async fn blobs(&self) -> Result<Vec<BlobRow>> {
        sqlx::query("SELECT * FROM blobs ORDER BY digest")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(blob_row)
            .collect()
    }

    pub(super) async fn touch_blob(&self, digest: &str, now: Millis) -> Result<()> {
        sqlx::query("UPDATE blobs SET last_used_at = MAX(last_used_at, ?) WHERE digest = ?")
            .bind(now)
            .bind(digest)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    pub(super) async fn put_image(
        &self,
        repo: Repository<'_>,
        m: &NewManifest,
        image: Option<&ImageRow>,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        // Checked where it is written, so no other writer (another replica) can slip a
        // reference to a blob this repository does not link between a check and the push.
        let mut unlinked = vec![];
        for child in &m.refs {
            if !is_linked(&mut tx, repo, child).await? {
                unlinked.push(child.as_str());
            }
        }
        if !unlinked.is_empty() {
            return Err(StoreError::Conflict(format!(
                "{}/{}/{} does not link {}",
                repo.0,
                repo.1,
                repo.2,
                unlinked.join(", ")
            )));
        }
        sqlx::query(
            "INSERT INTO blobs (digest, size, created_at, last_used_at) VALUES (?, ?, ?, ?)
             ON CONFLICT (digest) DO UPDATE SET last_used_at = excluded.last_used_at",
        )
        .bind(&m.digest)
        .bind(m.size)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO manifests (digest, media_type, size, created_at) VALUES (?, ?, ?, ?)
             ON CONFLICT (digest) DO NOTHING",
        )
        .bind(&m.digest)
        .bind(&m.media_type)
        .bind(m.size)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        link_blob(&mut tx, repo, &m.digest, now).await?;
        for child in &m.refs {
            sqlx::query("INSERT OR IGNORE INTO manifest_refs (manifest, child) VALUES (?, ?)")
                .bind(&m.digest)
                .bind(child)
                .execute(&mut *tx)
                .await?;
        }
        if let Some(img) = image {
            let k = &img.key;
            sqlx::query(
                "INSERT INTO images (scope, owner, name, tag, digest, media_type, size, created_at,
                 last_used_at, build_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                 ON CONFLICT (scope, owner, name, tag) DO UPDATE SET digest = excluded.digest,
                 media_type = excluded.media_type, size = excluded.size,
                 created_at = excluded.created_at, last_used_at = excluded.last_used_at,
                 build_key = excluded.build_key",
            )
            .bind(&k.scope)
            .bind(&k.owner)
            .bind(&k.name)
            .bind(&k.tag)
            .bind(&img.digest)
            .bind(&img.media_type)
            .bind(img.size)
            .bind(img.created_at)
            .bind(img.last_used_at)
            .bind(&img.build_key)
            .execute(&mut *tx)
            .await?;
            // Untagged manifests this one references are reachable through it now.
            for child in &m.refs {
                if *child == k.tag {
                    continue;
                }
                sqlx::query(
                    "DELETE FROM images WHERE scope = ? AND owner = ? AND name = ? AND tag = ?",
                )
                .bind(&k.scope)
                .bind(&k.owner)
                .bind(&k.name)
                .bind(child)
                .execute(&mut *tx)
                .await?;
            }
            plain_event(
                &mut tx,
                "image.pushed",
                format!(
                    "{by} pushed {}/{}/{}:{} ({}, {} bytes)",
                    k.scope, k.owner, k.name, k.tag, img.digest, img.size
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn manifest(&self, digest: &str) -> Result<Option<ManifestRow>> {
        Ok(sqlx::query("SELECT * FROM manifests WHERE digest = ?")
            .bind(digest)
            .fetch_optional(&self.pool)
            .await?
            .map(|r| manifest_row(&r)))
    }

    pub(super) async fn manifest_refs(
        &self,
        manifests: Option<&[String]>,
    ) -> Result<Vec<(String, String)>> {
        let pair = |r: &SqliteRow| (r.get::<String, _>("manifest"), r.get::<String, _>("child"));
        let Some(manifests) = manifests else {
            return Ok(sqlx::query(
                "SELECT manifest, child FROM manifest_refs ORDER BY manifest, child",
            )
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(pair)
            .collect());
        };
        let mut out = vec![];
        for chunk in manifests.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql = format!(
                "SELECT manifest, child FROM manifest_refs WHERE manifest IN ({marks})
                 ORDER BY manifest, child"
            );
            let mut q = sqlx::query(&sql);
            for d in chunk {
                q = q.bind(d);
            }
            out.extend(q.fetch_all(&self.pool).await?.iter().map(pair));
        }
        Ok(out)
    }

    pub(super) async fn image(&self, key: &ImageKey) -> Result<Option<ImageRow>> {
        Ok(sqlx::query(
            "SELECT * FROM images WHERE scope = ? AND owner = ? AND name = ? AND tag = ?",
        )
        .bind(&key.scope)
        .bind(&key.owner)
        .bind(&key.name)
        .bind(&key.tag)
        .fetch_optional(&self.pool)
        .await?
        .map(|r| image_row(&r)))
    }

    pub(super) async fn images(&self, repo: Option<(&str, &str, &str)>) -> Result<Vec<ImageRow>> {
        let rows = match repo {
            Some((scope, owner, name)) => {
                sqlx::query(
                    "SELECT * FROM images WHERE scope = ? AND owner = ? AND name = ?
                     ORDER BY tag",
                )
                .bind(scope)
                .bind(owner)
                .bind(name)
                .fetch_all(&self.pool)
                .await?
            }
            None => {
                sqlx::query("SELECT * FROM images ORDER BY scope, owner, name, tag")
                    .fetch_all(&self.pool)
                    .await?
            }
        };
        Ok(rows.iter().map(image_row).collect())
    }

    pub(super) async fn image_by_build_key(
        &self,
        scope: &str,
        owner: &str,
        build_key: &str,
    ) -> Result<Option<ImageRow>> {
        Ok(sqlx::query(
            "SELECT * FROM images WHERE scope = ? AND owner = ? AND build_key = ?
             ORDER BY created_at DESC LIMIT 1",
        )
        .bind(scope)
        .bind(owner)
        .bind(build_key)
        .fetch_optional(&self.pool)
        .await?
        .map(|r| image_row(&r)))
    }

    pub(super) async fn touch_image(&self, key: &ImageKey, now: Millis) -> Result<()> {
        sqlx::query(
            "UPDATE images SET last_used_at = MAX(last_used_at, ?)
             WHERE scope = ? AND owner = ? AND name = ? AND tag = ?",
        )
        .bind(now)
        .bind(&key.scope)
        .bind(&key.owner)
        .bind(&key.name)
        .bind(&key.tag)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    pub(super) async fn delete_images(
        &self,
        keys: &[ImageKey],
        by: &str,
        why: &str,
        now: Millis,
    ) -> Result<u64> {
        let mut tx = self.writer.begin().await?;
        let mut removed = 0;
        for k in keys {
            let n = sqlx::query(
                "DELETE FROM images WHERE scope = ? AND owner = ? AND name = ? AND tag = ?",
            )
            .bind(&k.scope)
            .bind(&k.owner)
            .bind(&k.name)
            .bind(&k.tag)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 0 {
                continue;
            }
            removed += n;
            plain_event(
                &mut tx,
                "image.deleted",
                format!(
                    "{by} removed {}/{}/{}:{} ({why})",
                    k.scope, k.owner, k.name, k.tag
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(removed)
    }

    pub(super) async fn delete_blobs(&self, digests: &[String], now: Millis) -> Result<()> {
        if digests.is_empty() {
            return Ok(());
        }
        let mut tx = self.writer.begin().await?;
        let mut bytes: i64 = 0;
        for d in digests {
            bytes += sqlx::query_scalar::<_, i64>("SELECT size FROM blobs WHERE digest = ?")
                .bind(d)
                .fetch_optional(&mut *tx)
                .await?
                .unwrap_or(0);
            for sql in [
                "DELETE FROM blobs WHERE digest = ?",
                "DELETE FROM manifests WHERE digest = ?",
                "DELETE FROM manifest_refs WHERE manifest = ?",
                "DELETE FROM blob_links WHERE digest = ?",
            ] {
                sqlx::query(sql).bind(d).execute(&mut *tx).await?;
            }
        }
        plain_event(
            &mut tx,
            "image.blobs_deleted",
            format!(
                "the object cache deleted {} unreferenced blobs ({bytes} bytes)",
                digests.len()
            ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn set_image_build_key(
        &self,
        key: &ImageKey,
        build_key: Option<&str>,
    ) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE images SET build_key = ? WHERE scope = ? AND owner = ? AND name = ? AND tag = ?",
        )
        .bind(build_key)
        .bind(&key.scope)
        .bind(&key.owner)
        .bind(&key.name)
        .bind(&key.tag)
        .execute(&self.writer)
        .await?
        .rows_affected();
        Ok(n > 0)
    }
}
