//! Local OCI image layouts (`oci://PATH[:TAG]`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oci_client::manifest::OciImageManifest;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{check_digest, ImageError};

const REF_NAME: &str = "org.opencontainers.image.ref.name";
const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    #[serde(default)]
    manifests: Vec<Entry>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize, Clone)]
struct Platform {
    os: String,
    architecture: String,
}

fn layout_err(path: &Path, reason: impl Into<String>) -> ImageError {
    ImageError::Layout {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

pub fn blob_path(dir: &Path, digest: &str) -> Result<PathBuf, ImageError> {
    Ok(dir.join("blobs/sha256").join(check_digest(digest)?))
}

/// Reads a small JSON blob from the layout, checking it against its digest.
async fn read_blob(dir: &Path, digest: &str) -> Result<Vec<u8>, ImageError> {
    let p = blob_path(dir, digest)?;
    let bytes = tokio::fs::read(&p)
        .await
        .map_err(|e| layout_err(dir, format!("reading blob {digest}: {e}")))?;
    super::verify(digest, &Sha256::digest(&bytes))?;
    Ok(bytes)
}

/// Finds the image manifest for `tag` (or the only image when no tag is given), following a
/// nested index to its linux/amd64 entry.
pub async fn resolve(
    dir: &Path,
    tag: Option<&str>,
) -> Result<(String, OciImageManifest), ImageError> {
    let raw = tokio::fs::read(dir.join("index.json"))
        .await
        .map_err(|e| layout_err(dir, format!("no readable index.json ({e})")))?;
    let index: Index = serde_json::from_slice(&raw)
        .map_err(|e| layout_err(dir, format!("index.json is not valid: {e}")))?;
    let chosen = match tag {
        Some(t) => {
            let found: Vec<&Entry> = index
                .manifests
                .iter()
                .filter(|m| m.annotations.get(REF_NAME).map(String::as_str) == Some(t))
                .collect();
            match found.as_slice() {
                [one] => (*one).clone(),
                [] => {
                    let tags: Vec<&str> = index
                        .manifests
                        .iter()
                        .filter_map(|m| m.annotations.get(REF_NAME).map(String::as_str))
                        .collect();
                    return Err(layout_err(
                        dir,
                        format!("no image named `{t}` (it has: {})", tags.join(", ")),
                    ));
                }
                _ => pick_platform(dir, found.into_iter().cloned().collect())?,
            }
        }
        None => match index.manifests.as_slice() {
            [one] => one.clone(),
            [] => return Err(layout_err(dir, "index.json lists no image")),
            many => {
                if many.iter().all(|m| m.platform.is_some()) {
                    pick_platform(dir, many.to_vec())?
                } else {
                    return Err(layout_err(
                        dir,
                        "it holds several images: name one with oci://PATH:TAG",
                    ));
                }
            }
        },
    };
    let mut entry = chosen;
    // An index may point at another index (multi-platform images): descend to linux/amd64.
    for _ in 0..4 {
        if !INDEX_TYPES.contains(&entry.media_type.as_str()) {
            let raw = read_blob(dir, &entry.digest).await?;
            let manifest: OciImageManifest = serde_json::from_slice(&raw).map_err(|e| {
                layout_err(dir, format!("manifest {} is not valid: {e}", entry.digest))
            })?;
            return Ok((entry.digest, manifest));
        }
        let raw = read_blob(dir, &entry.digest).await?;
        let nested: Index = serde_json::from_slice(&raw)
            .map_err(|e| layout_err(dir, format!("index {} is not valid: {e}", entry.digest)))?;
        entry = pick_platform(dir, nested.manifests)?;
    }
    Err(layout_err(dir, "image indexes nest too deeply"))
}

fn pick_platform(dir: &Path, entries: Vec<Entry>) -> Result<Entry, ImageError> {
    entries
        .into_iter()
        .find(|e| {
            e.platform
                .as_ref()
                .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
        })
        .ok_or_else(|| layout_err(dir, "no linux/amd64 image in the index"))
}
