//! The object cache: blobs, their repository links, manifests, image tags.

use super::*;

/// Links a blob that has a row into a repository; 1 when the link is new.
pub(super) async fn link_blob(
    tx: &mut Transaction<'_, Postgres>,
    (scope, owner, name): Repository<'_>,
    digest: &str,
    now: Millis,
) -> Result<u64> {
    Ok(sqlx::query(
        "INSERT INTO blob_links (scope, owner, name, digest, created_at)
         SELECT $1, $2, $3, digest, $4 FROM blobs WHERE digest = $5 ON CONFLICT DO NOTHING",
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
    tx: &mut Transaction<'_, Postgres>,
    (scope, owner, name): Repository<'_>,
    digest: &str,
) -> Result<bool> {
    Ok(sqlx::query_scalar::<_, i64>(
        "SELECT 1::BIGINT FROM blob_links WHERE scope = $1 AND owner = $2 AND name = $3 AND digest = $4",
    )
    .bind(scope)
    .bind(owner)
    .bind(name)
    .bind(digest)
    .fetch_optional(&mut **tx)
    .await?
    .is_some())
}

impl PgStore {
    pub(super) async fn put_blob(
        &self,
        digest: &str,
        size: i64,
        link: Option<Repository<'_>>,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO blobs (digest, size, created_at, last_used_at) VALUES ($1, $2, $3, $4)
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
        let (scope, owner, name) = repo;
        let mut tx = self.write_tx().await?;
        let added = sqlx::query(
            "INSERT INTO blob_links (scope, owner, name, digest, created_at)
             SELECT $1, $2, $3, digest, $4 FROM blobs WHERE digest = ANY($5)
             ON CONFLICT DO NOTHING",
        )
        .bind(scope)
        .bind(owner)
        .bind(name)
        .bind(now)
        .bind(digests)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(added)
    }

    pub(super) async fn linked_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
    ) -> Result<std::collections::HashSet<String>> {
        let (scope, owner, name) = repo;
        let linked = sqlx::query_scalar::<_, String>(
            "SELECT digest FROM blob_links WHERE scope = $1 AND owner = $2 AND name = $3
             AND digest = ANY($4)",
        )
        .bind(scope)
        .bind(owner)
        .bind(name)
        .bind(digests)
        .fetch_all(&self.pool)
        .await?;
        Ok(linked.into_iter().collect())
    }

    pub(super) async fn blob(&self, digest: &str) -> Result<Option<BlobRow>> {
        sqlx::query("SELECT * FROM blobs WHERE digest = $1")
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
        let mut tx = self.write_tx().await?;
        sqlx::query("UPDATE blobs SET last_used_at = GREATEST(last_used_at, $1) WHERE digest = $2")
            .bind(now)
            .bind(digest)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
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
        let mut tx = self.write_tx().await?;
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
            "INSERT INTO blobs (digest, size, created_at, last_used_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (digest) DO UPDATE SET last_used_at = excluded.last_used_at",
        )
        .bind(&m.digest)
        .bind(m.size)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO manifests (digest, media_type, size, created_at) VALUES ($1, $2, $3, $4)
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
            sqlx::query(
                "INSERT INTO manifest_refs (manifest, child) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            )
                .bind(&m.digest)
                .bind(child)
                .execute(&mut *tx)
                .await?;
        }
        if let Some(img) = image {
            let k = &img.key;
            sqlx::query(
                "INSERT INTO images (scope, owner, name, tag, digest, media_type, size, created_at,
                 last_used_at, build_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
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
                    "DELETE FROM images WHERE scope = $1 AND owner = $2 AND name = $3 AND tag = $4",
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
        Ok(sqlx::query("SELECT * FROM manifests WHERE digest = $1")
            .bind(digest)
            .fetch_optional(&self.pool)
            .await?
            .map(|r| manifest_row(&r)))
    }

    pub(super) async fn manifest_refs(
        &self,
        manifests: Option<&[String]>,
    ) -> Result<Vec<(String, String)>> {
        let pair = |r: &PgRow| (r.get::<String, _>("manifest"), r.get::<String, _>("child"));
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
        Ok(sqlx::query(
            "SELECT manifest, child FROM manifest_refs WHERE manifest = ANY($1)
             ORDER BY manifest, child",
        )
        .bind(manifests)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(pair)
        .collect())
    }

    pub(super) async fn image(&self, key: &ImageKey) -> Result<Option<ImageRow>> {
        Ok(sqlx::query(
            "SELECT * FROM images WHERE scope = $1 AND owner = $2 AND name = $3 AND tag = $4",
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
                    "SELECT * FROM images WHERE scope = $1 AND owner = $2 AND name = $3
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
            "SELECT * FROM images WHERE scope = $1 AND owner = $2 AND build_key = $3
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
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "UPDATE images SET last_used_at = GREATEST(last_used_at, $1)
             WHERE scope = $2 AND owner = $3 AND name = $4 AND tag = $5",
        )
        .bind(now)
        .bind(&key.scope)
        .bind(&key.owner)
        .bind(&key.name)
        .bind(&key.tag)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn delete_images(
        &self,
        keys: &[ImageKey],
        by: &str,
        why: &str,
        now: Millis,
    ) -> Result<u64> {
        let mut tx = self.write_tx().await?;
        let mut removed = 0;
        for k in keys {
            let n = sqlx::query(
                "DELETE FROM images WHERE scope = $1 AND owner = $2 AND name = $3 AND tag = $4",
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
        let mut tx = self.write_tx().await?;
        // Each statement for all of them: a collection may forget thousands of blobs.
        let bytes: i64 = sqlx::query_scalar(
            "SELECT COALESCE(SUM(size), 0)::BIGINT FROM blobs WHERE digest = ANY($1)",
        )
        .bind(digests)
        .fetch_one(&mut *tx)
        .await?;
        for sql in [
            "DELETE FROM blobs WHERE digest = ANY($1)",
            "DELETE FROM manifests WHERE digest = ANY($1)",
            "DELETE FROM manifest_refs WHERE manifest = ANY($1)",
            "DELETE FROM blob_links WHERE digest = ANY($1)",
        ] {
            sqlx::query(sql).bind(digests).execute(&mut *tx).await?;
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
        let mut tx = self.write_tx().await?;
        let n = sqlx::query(
            "UPDATE images SET build_key = $1 WHERE scope = $2 AND owner = $3 AND name = $4 AND tag = $5",
        )
        .bind(build_key)
        .bind(&key.scope)
        .bind(&key.owner)
        .bind(&key.name)
        .bind(&key.tag)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(n > 0)
    }
}
