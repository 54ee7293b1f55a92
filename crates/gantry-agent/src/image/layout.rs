//! Local OCI image layouts (`oci://PATH[:TAG]`), read only beneath the directories an
//! administrator allows (`--oci-root`). A layout path comes from a workflow file, so it is
//! hostile: it is resolved beneath its root without following any symlink (`openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), every file of the layout is opened relative to the
//! layout's directory the same way, and only regular files are read. A path outside every
//! root, a missing layout and an unreadable one all get the same answer, so a workflow cannot
//! probe what exists on the node.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use oci_client::manifest::OciImageManifest;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{check_digest, ImageError};
use crate::beneath::{Dir, Rel, Resolve};

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

/// The one answer for a layout that cannot be opened, whatever the reason.
fn unavailable(path: &Path) -> ImageError {
    ImageError::LayoutUnavailable {
        path: path.display().to_string(),
    }
}

/// A layout's directory, opened beneath an allowed root: everything else of the layout is
/// read relative to it.
#[derive(Clone)]
pub struct LayoutDir {
    /// As the workflow named it, for messages.
    path: PathBuf,
    dir: Arc<Dir>,
}

impl LayoutDir {
    /// Opens the layout at `path` (absolute, as a workflow names it) beneath the first of
    /// `roots` it lies in, and checks that it has an `index.json` that can be read.
    pub fn open(roots: &[PathBuf], path: &Path) -> Result<LayoutDir, ImageError> {
        let rel = roots
            .iter()
            .find_map(|r| relative_to(r, path).map(|rel| (r, rel)));
        let Some((root, rel)) = rel else {
            return Err(unavailable(path));
        };
        let dir = Dir::open_root(root)
            .and_then(|root| match rel {
                // The root itself may be a layout.
                None => Ok(root),
                Some(rel) => root.open_dir(&rel, Resolve::Beneath),
            })
            .map_err(|_| unavailable(path))?;
        let dir = LayoutDir {
            path: path.to_path_buf(),
            dir: Arc::new(dir),
        };
        dir.open_file(Path::new("index.json"))
            .map_err(|_| unavailable(path))?;
        Ok(dir)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens a regular file of the layout for reading (see [`Dir::open_file`]).
    pub fn open_file(&self, rel: &Path) -> io::Result<fs::File> {
        let rel = Rel::new(rel).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        self.dir.open_file(&rel, Resolve::Beneath)
    }

    /// The blob with this digest, opened.
    pub fn open_blob(&self, digest: &str) -> Result<fs::File, ImageError> {
        let rel = Path::new("blobs/sha256").join(check_digest(digest)?);
        self.open_file(&rel)
            .map_err(|e| layout_err(&self.path, format!("opening blob {digest}: {e}")))
    }

    fn read(&self, rel: &Path) -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        self.open_file(rel)?.read_to_end(&mut buf)?;
        Ok(buf)
    }
}

/// `path` relative to `root` when it lies beneath it, compared by components (`Some(None)`:
/// the root itself); a `..` anywhere in `path` places it nowhere.
fn relative_to(root: &Path, path: &Path) -> Option<Option<Rel>> {
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return None;
    }
    let rel = path.strip_prefix(root).ok()?;
    if rel.components().next().is_none() {
        return Some(None);
    }
    Rel::new(rel).ok().map(Some)
}

/// Reads a small JSON blob from the layout, checking it against its digest.
pub fn read_blob(dir: &LayoutDir, digest: &str) -> Result<Vec<u8>, ImageError> {
    let rel = Path::new("blobs/sha256").join(check_digest(digest)?);
    let bytes = dir
        .read(&rel)
        .map_err(|e| layout_err(&dir.path, format!("reading blob {digest}: {e}")))?;
    super::verify(digest, &Sha256::digest(&bytes))?;
    Ok(bytes)
}

/// Finds the image manifest for `tag` (or the only image when no tag is given), following a
/// nested index to its linux/amd64 entry.
pub fn resolve(
    layout: &LayoutDir,
    tag: Option<&str>,
) -> Result<(String, OciImageManifest), ImageError> {
    let dir = layout.path();
    let raw = layout
        .read(Path::new("index.json"))
        .map_err(|_| unavailable(dir))?;
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
            let raw = read_blob(layout, &entry.digest)?;
            let manifest: OciImageManifest = serde_json::from_slice(&raw).map_err(|e| {
                layout_err(dir, format!("manifest {} is not valid: {e}", entry.digest))
            })?;
            return Ok((entry.digest, manifest));
        }
        let raw = read_blob(layout, &entry.digest)?;
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
