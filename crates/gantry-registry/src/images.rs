//! What `/api/v1/images` answers (the server serves it): what the object cache holds that the
//! caller may see, and removing it. Users see their own images and their group's;
//! administrators every image. Others' images answer 404.

use std::collections::BTreeMap;

use gantry_store::StoreError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use super::auth::Principal;
use super::manifest::{self, Descriptor};
use super::names::{sha256_hex, Repo, Scope};
use super::Registry;

/// One tag (or a manifest kept by digest alone: `tag` is then null).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageInfo {
    /// `user/<user>/<image>` or `group/<group>/<image>`.
    pub repository: String,
    pub scope: String,
    pub owner: String,
    pub name: String,
    pub tag: Option<String>,
    pub digest: String,
    pub media_type: String,
    /// Bytes of the manifest and everything it references, each blob once.
    pub size: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub last_used_at: OffsetDateTime,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub build_key: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BlobInfo {
    pub digest: String,
    pub media_type: String,
    pub size: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ManifestInfo {
    pub digest: String,
    pub media_type: String,
    pub size: i64,
    /// Where an index lists this manifest: its platform.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub platform: Option<Value>,
    pub config: Option<BlobInfo>,
    pub layers: Vec<BlobInfo>,
    /// An index's manifests.
    pub manifests: Vec<ManifestInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RepositoryDetail {
    pub repository: String,
    pub scope: String,
    pub owner: String,
    pub name: String,
    pub tags: Vec<ImageInfo>,
    /// Each manifest the tags point at, once.
    pub manifests: Vec<ManifestInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deleted {
    pub repository: String,
    /// The tags (or digests of untagged manifests) removed.
    pub deleted: Vec<String>,
}

/// Why a listing or a removal failed; the server answers each as the rest of its API does.
#[derive(Debug)]
pub enum ImagesError {
    /// Not there, or not the caller's to see: 404 with this message.
    NotFound(String),
    /// The index failed.
    Store(StoreError),
    /// Removing what the removed images referenced failed (their rows are gone).
    Failed(String),
}

impl From<StoreError> for ImagesError {
    fn from(e: StoreError) -> Self {
        ImagesError::Store(e)
    }
}

fn info(ts: fn(i64) -> OffsetDateTime, r: &gantry_store::ImageRow) -> ImageInfo {
    let k = &r.key;
    ImageInfo {
        repository: format!("{}/{}/{}", k.scope, k.owner, k.name),
        scope: k.scope.clone(),
        owner: k.owner.clone(),
        name: k.name.clone(),
        tag: (!k.tag.contains(':')).then(|| k.tag.clone()),
        digest: r.digest.clone(),
        media_type: r.media_type.clone(),
        size: r.size,
        created_at: ts(r.created_at),
        last_used_at: ts(r.last_used_at),
        build_key: r.build_key.clone(),
    }
}

fn visible(c: &Principal, scope: &str, owner: &str) -> bool {
    Scope::parse(scope).is_some_and(|scope| {
        Repo {
            scope,
            owner: owner.to_string(),
            name: String::new(),
        }
        .allows(c)
    })
}

/// The repository a path names, if the caller may see it.
fn repo_for(c: &Principal, scope: &str, owner: &str, name: &str) -> Result<Repo, ImagesError> {
    let full = format!("{scope}/{owner}/{name}");
    let not_found = || ImagesError::NotFound(format!("no image repository {full}"));
    let repo = Repo::parse(&full).map_err(|_| not_found())?;
    if repo.allows(c) {
        Ok(repo)
    } else {
        Err(not_found())
    }
}

/// The cached images the caller may see: theirs, their group's and the organization's.
pub async fn list(reg: &Registry, c: &Principal) -> Result<Vec<ImageInfo>, ImagesError> {
    let rows = reg.index.images(None).await?;
    Ok(rows
        .iter()
        .filter(|r| visible(c, &r.key.scope, &r.key.owner))
        .map(|r| info(reg.clock.ts, r))
        .collect())
}

/// One repository the caller may see: its tags and each manifest they point at.
pub async fn show(
    reg: &Registry,
    c: &Principal,
    scope: &str,
    owner: &str,
    name: &str,
) -> Result<RepositoryDetail, ImagesError> {
    let repo = repo_for(c, scope, owner, name)?;
    let rows = reg.index.images(Some(repo.stored())).await?;
    if rows.is_empty() {
        return Err(ImagesError::NotFound(format!("no image repository {repo}")));
    }
    let mut distinct: BTreeMap<String, String> = BTreeMap::new();
    for r in &rows {
        distinct.insert(r.digest.clone(), r.media_type.clone());
    }
    let mut manifests = vec![];
    for (digest, media_type) in distinct {
        manifests.push(reg.describe(&digest, &media_type, None, 0).await);
    }
    Ok(RepositoryDetail {
        repository: repo.to_string(),
        scope: repo.scope.as_str().into(),
        owner: repo.owner.clone(),
        name: repo.name.clone(),
        tags: rows.iter().map(|r| info(reg.clock.ts, r)).collect(),
        manifests,
    })
}

/// Removes one tag of a repository the caller may see, or every tag with `tag` `None`; then
/// the blobs only they referenced.
pub async fn delete(
    reg: &Registry,
    c: &Principal,
    scope: &str,
    owner: &str,
    name: &str,
    tag: Option<&str>,
) -> Result<Deleted, ImagesError> {
    let repo = repo_for(c, scope, owner, name)?;
    let _g = reg.commit.lock().await;
    let rows: Vec<_> = reg
        .index
        .images(Some(repo.stored()))
        .await?
        .into_iter()
        .filter(|r| tag.is_none_or(|t| r.key.tag == t))
        .collect();
    if rows.is_empty() {
        return Err(ImagesError::NotFound(match tag {
            Some(t) => format!("no image {repo}:{t}"),
            None => format!("no image repository {repo}"),
        }));
    }
    reg.remove_images(&rows, &c.user, "deleted")
        .await
        .map_err(|e| ImagesError::Failed(e.message))?;
    Ok(Deleted {
        repository: repo.to_string(),
        deleted: rows.into_iter().map(|r| r.key.tag).collect(),
    })
}

fn blob_info(d: &Descriptor) -> BlobInfo {
    BlobInfo {
        digest: d.digest.clone(),
        media_type: d.media_type.clone(),
        size: d.size,
    }
}

impl Registry {
    /// A stored manifest's config and layers (an index's: each platform's).
    async fn describe(
        &self,
        digest: &str,
        media_type: &str,
        platform: Option<Value>,
        depth: u32,
    ) -> ManifestInfo {
        let mut out = ManifestInfo {
            digest: digest.to_string(),
            media_type: media_type.to_string(),
            size: 0,
            platform,
            config: None,
            layers: vec![],
            manifests: vec![],
        };
        let Ok(hex) = sha256_hex(digest) else {
            return out;
        };
        let Ok(bytes) = self.blobs.read(hex).await else {
            return out;
        };
        out.size = bytes.len() as i64;
        let Ok(parsed) = manifest::parse(&bytes, Some(media_type)) else {
            return out;
        };
        out.config = parsed.config.as_ref().map(blob_info);
        out.layers = parsed.layers.iter().map(blob_info).collect();
        if depth < 2 {
            for m in &parsed.manifests {
                let child = Box::pin(self.describe(
                    &m.digest,
                    &m.media_type,
                    m.platform.clone(),
                    depth + 1,
                ))
                .await;
                out.manifests.push(child);
            }
        }
        out
    }
}
