//! Image pull, node cache and layer unpack.
//!
//! The cache is content-addressed under one root:
//!
//! ```text
//! blobs/sha256/<hex>     verified blobs (manifests' configs and layers), fetched once
//! layers/sha256/<hex>/   each layer unpacked once, ready to be an overlayfs lowerdir
//! layers/sha256/<hex>.sif/  the root filesystem of each SIF file (`oras://`), unpacked once
//! locks/                 per-digest lock files (agents may share a cache root)
//! tmp/<pid>.<n>          work in progress; renamed into place only when complete
//! ```
//!
//! Layer directories are named without a `:` because overlayfs splits `lowerdir` on colons.

mod layout;
pub mod sif;
pub mod unpack;

pub use layout::{read_blob, LayoutDir};
// References, pull configuration, the registry client and its errors' hints are shared with
// the server (which must not link this crate): they live in gantry-oci.
pub use gantry_oci::{
    check_oci_roots, hint, oci_path_allowed, parse_source, OciError, PullConfig, Source,
};

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use gantry_api::agent::{ImageSource, RegistryCredential};
use gantry_oci::layout_whole;
use oci_client::errors::OciDistributionError;
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::{Client, Reference};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::lock;

/// What a container needs from its image's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
}

/// An image whose layers are unpacked on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedImage {
    /// The normalised source (`docker.io/library/busybox:1`, `oci:/path:tag`).
    pub reference: String,
    /// Digest of the platform manifest that was used (`sha256:...`).
    pub manifest_digest: String,
    /// Unpacked layer directories, bottom layer first.
    pub layers: Vec<PathBuf>,
    pub config: ImageConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A reference, the pull configuration or the registry refused (gantry-oci's error, its
    /// message unchanged).
    #[error(transparent)]
    Oci(#[from] OciError),
    #[error("blob {digest}: content does not match its digest (got {actual})")]
    DigestMismatch { digest: String, actual: String },
    #[error("unsupported digest `{0}` (only sha256 is supported)")]
    UnsupportedDigest(String),
    #[error("image {reference} is for {platform}; this node runs linux/amd64")]
    WrongPlatform { reference: String, platform: String },
    #[error("OCI layout {path}: {reason}")]
    Layout { path: String, reason: String },
    #[error(
        "OCI layout {path} is not available on this node: layouts are read only from the \
         directories an administrator allows (--oci-root), and only when they can be read there"
    )]
    LayoutUnavailable { path: String },
    #[error("image config {digest} is not valid: {reason}")]
    BadConfig { digest: String, reason: String },
    #[error("unpacking layer {digest}: {source}")]
    Unpack {
        digest: String,
        #[source]
        source: unpack::UnpackError,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

type Result<T, E = ImageError> = std::result::Result<T, E>;

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> ImageError {
    let context = context.into();
    move |source| ImageError::Io { context, source }
}

/// The node's image cache. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct ImageStore {
    root: PathBuf,
    config: PullConfig,
    /// In-process half of the per-digest lock (the other half is a file lock).
    locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    fetches: AtomicU64,
    tmp_seq: AtomicU64,
    /// Registry clients by credential, reused across pulls: building one loads every root
    /// certificate of the host (~8 ms of CPU), and it keeps the registry's bearer tokens.
    clients: Mutex<HashMap<CredentialKey, Client>>,
    /// Recently resolved registry images, so a task array resolves its tag once rather than
    /// once per task (see [`RESOLVED_TTL`]).
    resolved: Mutex<HashMap<(String, CredentialKey), (Instant, PreparedImage)>>,
}

/// How long a resolved tag is trusted before the registry is asked again. Short, so a tag
/// pushed anew is seen within seconds; long enough that a burst of tasks with one image asks
/// the registry once. Keyed by the exact credential, so a cached answer is only ever handed to
/// a caller who presented the credential the registry accepted.
const RESOLVED_TTL: Duration = Duration::from_secs(5);
/// Bounds both maps (entries are small; this only stops unbounded growth with many users).
const CACHE_ENTRIES: usize = 256;

/// A credential's fingerprint (never the secret itself) as a map key; `None` is anonymous.
type CredentialKey = Option<[u8; 32]>;

fn credential_key(c: Option<&RegistryCredential>) -> CredentialKey {
    c.map(|c| {
        let mut h = Sha256::new();
        match c {
            RegistryCredential::Basic { username, password } => {
                h.update(b"basic\0");
                h.update(username.as_bytes());
                h.update(b"\0");
                h.update(password.as_bytes());
            }
            RegistryCredential::Bearer { token } => {
                h.update(b"bearer\0");
                h.update(token.as_bytes());
            }
        }
        h.finalize().into()
    })
}

impl ImageStore {
    /// Opens (creating if needed) the cache under `root`, and clears work left behind by
    /// processes that died mid-pull.
    pub fn new(root: impl Into<PathBuf>, config: PullConfig) -> Result<Self> {
        let root = root.into();
        for (host, base) in &config.mirrors {
            gantry_oci::mirror_host(base).map_err(|reason| {
                ImageError::Oci(OciError::InvalidConfig(format!(
                    "mirror for {host}: {reason}"
                )))
            })?;
        }
        check_oci_roots(&config.oci_roots)?;
        for d in ["blobs/sha256", "layers/sha256", "locks", "tmp"] {
            let p = root.join(d);
            fs::create_dir_all(&p).map_err(io_err(format!("creating {}", p.display())))?;
        }
        // Private images' blobs and layers are their owners' alone: blobs are read by the agent
        // only; layers are overlays' lower directories, reached by path, never listed.
        for (d, keep) in [
            ("", crate::PASS_THROUGH),
            ("blobs", crate::OWNER_ONLY),
            ("layers", crate::PASS_THROUGH),
            ("locks", crate::OWNER_ONLY),
            ("tmp", crate::OWNER_ONLY),
        ] {
            let p = root.join(d);
            crate::restrict_dir(&p, keep)
                .map_err(io_err(format!("restricting {}", p.display())))?;
        }
        // reqwest is built without a bundled crypto provider; ring is the light one. An error
        // only means some other part of the process installed one first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let store = ImageStore {
            root,
            config,
            locks: Mutex::new(HashMap::new()),
            fetches: AtomicU64::new(0),
            tmp_seq: AtomicU64::new(0),
            clients: Mutex::new(HashMap::new()),
            resolved: Mutex::new(HashMap::new()),
        };
        store.clean_stale_tmp();
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How many blobs this store has downloaded from registries since it was created.
    pub fn fetch_count(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// Bytes used by the cache on disk (hard links counted once).
    pub fn cache_bytes(&self) -> u64 {
        let mut seen = std::collections::HashSet::new();
        let mut total = 0;
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                let Ok(m) = e.metadata() else { continue };
                if m.is_dir() {
                    stack.push(e.path());
                } else if m.nlink() <= 1 || seen.insert((m.dev(), m.ino())) {
                    total += m.blocks() * 512;
                }
            }
        }
        total
    }

    /// Resolves, downloads (what is not cached) and unpacks an image.
    ///
    /// A `docker://` image's manifest is asked of the registry, even when every blob is
    /// cached: a tag may have moved, and it is the registry that checks this caller's
    /// credential, so one user's cached private image is never handed to another. The answer
    /// is reused for [`RESOLVED_TTL`] by callers presenting the same credential.
    pub async fn prepare(&self, src: &ImageSource) -> Result<PreparedImage> {
        match parse_source(&src.uri)? {
            Source::Registry(reference) => {
                self.prepare_registry(reference, src.credential.as_ref(), Format::Oci)
                    .await
            }
            Source::Sif(reference) => {
                self.prepare_registry(reference, src.credential.as_ref(), Format::Sif)
                    .await
            }
            Source::Layout { path, tag } => {
                let (dir, tag) = open_layout(&self.config.oci_roots, &path, tag)?;
                self.prepare_layout(&dir, tag.as_deref()).await
            }
        }
    }

    async fn prepare_registry(
        &self,
        original: Reference,
        credential: Option<&RegistryCredential>,
        format: Format,
    ) -> Result<PreparedImage> {
        let display = original.whole();
        let (target, plain) = gantry_oci::pull_target(&original, &self.config)
            .map_err(|e| ImageError::Oci(OciError::InvalidConfig(e)))?;
        let registry = target.resolve_registry().to_owned();
        let key = credential_key(credential);
        // The format is part of the key: `docker://` and `oras://` of one reference are
        // different images.
        let cache_key = (format!("{format:?} {}", target.whole()), key);
        if let Some((at, image)) = lock(&self.resolved).get(&cache_key) {
            if at.elapsed() < RESOLVED_TTL {
                return Ok(image.clone());
            }
        }
        // One client per credential: oci-client keeps the tokens a registry grants inside its
        // client, and two assignments may pull from the same registry as different users.
        let client = {
            let mut clients = lock(&self.clients);
            if clients.len() >= CACHE_ENTRIES {
                clients.clear();
            }
            clients
                .entry(key)
                .or_insert_with(|| gantry_oci::client(plain.clone(), gantry_oci::PULL_READ_TIMEOUT))
                .clone()
        };
        let auth = gantry_oci::registry_auth(credential);
        let ctx = RegistryCtx {
            plain_http: plain.contains(&registry),
            client,
            reference: target,
            display: display.clone(),
            registry,
        };
        let (manifest, digest) = ctx
            .client
            .pull_image_manifest(&ctx.reference, &auth)
            .await
            .map_err(|e| ctx.error(e))?;
        check_digest(&digest)?;
        let source = BlobSource::Registry(&ctx);
        let image = self
            .finish(&source, display, digest, &manifest, format)
            .await?;
        let mut resolved = lock(&self.resolved);
        if resolved.len() >= CACHE_ENTRIES {
            resolved.retain(|_, (at, _)| at.elapsed() < RESOLVED_TTL);
        }
        if resolved.len() < CACHE_ENTRIES {
            resolved.insert(cache_key, (Instant::now(), image.clone()));
        }
        Ok(image)
    }

    async fn prepare_layout(&self, dir: &LayoutDir, tag: Option<&str>) -> Result<PreparedImage> {
        let (digest, manifest) = layout::resolve(dir, tag)?;
        let path = dir.path();
        let display = match tag {
            Some(t) => format!("oci:{}:{t}", path.display()),
            None => format!("oci:{}", path.display()),
        };
        let source = BlobSource::Layout(dir);
        self.finish(&source, display, digest, &manifest, Format::Oci)
            .await
    }

    async fn finish(
        &self,
        source: &BlobSource<'_>,
        reference: String,
        manifest_digest: String,
        manifest: &OciImageManifest,
        format: Format,
    ) -> Result<PreparedImage> {
        let (layers, config) = match format {
            Format::Oci => {
                let config_path = self.ensure_blob(source, &manifest.config).await?;
                let raw = tokio::fs::read(&config_path)
                    .await
                    .map_err(io_err(format!("reading {}", config_path.display())))?;
                let config = parse_image_config(&manifest.config.digest, &reference, &raw)?;
                let layers = futures_util::future::try_join_all(
                    manifest.layers.iter().map(|l| self.ensure_layer(source, l)),
                )
                .await?;
                (layers, config)
            }
            Format::Sif => self.sif_layer(source, &manifest_digest, manifest).await?,
        };
        Ok(PreparedImage {
            reference,
            manifest_digest,
            layers,
            config,
        })
    }

    /// An ORAS artifact's one SIF layer, unpacked as the image's only layer, and the
    /// environment it sets.
    async fn sif_layer(
        &self,
        source: &BlobSource<'_>,
        manifest_digest: &str,
        manifest: &OciImageManifest,
    ) -> Result<(Vec<PathBuf>, ImageConfig)> {
        let sifs: Vec<&OciDescriptor> = manifest
            .layers
            .iter()
            .filter(|l| l.media_type == sif::SIF_LAYER_MEDIA_TYPE)
            .collect();
        let [layer] = sifs[..] else {
            let types: Vec<&str> = manifest
                .layers
                .iter()
                .map(|l| l.media_type.as_str())
                .collect();
            return Err(ImageError::BadConfig {
                digest: manifest_digest.to_string(),
                reason: format!(
                    "an oras:// image is an artifact with one `{}` layer; this one has [{}]",
                    sif::SIF_LAYER_MEDIA_TYPE,
                    types.join(", ")
                ),
            });
        };
        let dir = self.ensure_layer_as(source, layer, Format::Sif).await?;
        let d = dir.clone();
        let config = tokio::task::spawn_blocking(move || sif::image_config(&d))
            .await
            .map_err(|e| io_err("reading the SIF's environment")(io::Error::other(e)))?;
        Ok((vec![dir], config))
    }

    fn blob_path(&self, digest: &str) -> Result<PathBuf> {
        Ok(self.root.join("blobs/sha256").join(check_digest(digest)?))
    }

    /// The directory a layer is (or will be) unpacked into.
    pub fn layer_path(&self, digest: &str) -> Result<PathBuf> {
        Ok(self.root.join("layers/sha256").join(check_digest(digest)?))
    }

    fn tmp_path(&self) -> PathBuf {
        let n = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        self.root
            .join("tmp")
            .join(format!("{}.{n}", std::process::id()))
    }

    async fn ensure_layer(&self, source: &BlobSource<'_>, desc: &OciDescriptor) -> Result<PathBuf> {
        self.ensure_layer_as(source, desc, Format::Oci).await
    }

    /// A blob unpacked once per digest: as an OCI layer (tar), or as a SIF file.
    async fn ensure_layer_as(
        &self,
        source: &BlobSource<'_>,
        desc: &OciDescriptor,
        format: Format,
    ) -> Result<PathBuf> {
        // A SIF's tree has a directory of its own: the same blob asked for as an OCI layer
        // (`docker://` of an ORAS artifact) is a tar to unpack, and fails as one.
        let (dest, key) = match format {
            Format::Oci => (
                self.layer_path(&desc.digest)?,
                format!("layer-{}", check_digest(&desc.digest)?),
            ),
            Format::Sif => {
                let hex = check_digest(&desc.digest)?;
                (
                    self.root.join("layers/sha256").join(format!("{hex}.sif")),
                    format!("layer-{hex}.sif"),
                )
            }
        };
        if dest.is_dir() {
            return Ok(dest);
        }
        let _guard = self.lock(&key).await?;
        if dest.is_dir() {
            return Ok(dest);
        }
        let blob = self.ensure_blob(source, desc).await?;
        let tmp = self.tmp_path();
        let digest = desc.digest.clone();
        let final_dest = dest.clone();
        tokio::task::spawn_blocking(move || -> Result<()> {
            fs::create_dir(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
            let unpacked = match format {
                Format::Oci => unpack::unpack_layer(&blob, &tmp),
                Format::Sif => sif::unpack_sif(&blob, &tmp),
            };
            let done = unpacked
                .map_err(|source| ImageError::Unpack {
                    digest: digest.clone(),
                    source,
                })
                .and_then(|()| {
                    // The rename is the commit point: make the content durable before it.
                    sync_fs(&tmp).map_err(io_err("syncing unpacked layer"))?;
                    fs::rename(&tmp, &final_dest).map_err(io_err(format!(
                        "moving layer into {}",
                        final_dest.display()
                    )))
                });
            if done.is_err() {
                let _ = fs::remove_dir_all(&tmp);
            }
            done
        })
        .await
        .map_err(|e| io_err("unpack task")(io::Error::other(e)))??;
        Ok(dest)
    }

    async fn ensure_blob(&self, source: &BlobSource<'_>, desc: &OciDescriptor) -> Result<PathBuf> {
        let path = self.blob_path(&desc.digest)?;
        if path.is_file() {
            return Ok(path);
        }
        let _guard = self
            .lock(&format!("blob-{}", check_digest(&desc.digest)?))
            .await?;
        if path.is_file() {
            return Ok(path);
        }
        let tmp = self.tmp_path();
        let res = match source {
            BlobSource::Registry(ctx) => self.fetch_blob(ctx, desc, &tmp).await,
            BlobSource::Layout(dir) => {
                let src = dir.open_blob(&desc.digest)?;
                let (tmp2, digest) = (tmp.clone(), desc.digest.clone());
                tokio::task::spawn_blocking(move || copy_verified(src, &tmp2, &digest))
                    .await
                    .map_err(|e| io_err("copy task")(io::Error::other(e)))?
            }
        };
        let res = res.and_then(|()| {
            fs::rename(&tmp, &path).map_err(io_err(format!("storing {}", path.display())))
        });
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res.map(|()| path)
    }

    async fn fetch_blob(&self, ctx: &RegistryCtx, desc: &OciDescriptor, tmp: &Path) -> Result<()> {
        let mut stream = ctx
            .client
            .pull_blob_stream(&ctx.reference, desc)
            .await
            .map_err(|e| ctx.error(e))?;
        let mut file = tokio::fs::File::create(tmp)
            .await
            .map_err(io_err(format!("creating {}", tmp.display())))?;
        let mut hasher = Sha256::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ImageError::Oci(OciError::Registry {
                    registry: ctx.registry.clone(),
                    reference: ctx.display.clone(),
                    detail: format!("downloading {}: {e}", desc.digest),
                })
            })?;
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(io_err(format!("writing {}", tmp.display())))?;
        }
        file.sync_all()
            .await
            .map_err(io_err(format!("syncing {}", tmp.display())))?;
        self.fetches.fetch_add(1, Ordering::Relaxed);
        verify(&desc.digest, &hasher.finalize())
    }

    /// Serialises work on one digest, across tasks of this process (async mutex) and across
    /// processes sharing the cache root (flock).
    async fn lock(&self, key: &str) -> Result<DigestGuard> {
        let m = {
            let mut map = lock(&self.locks);
            map.retain(|_, w| w.strong_count() > 0);
            match map.get(key).and_then(Weak::upgrade) {
                Some(m) => m,
                None => {
                    let m = Arc::new(tokio::sync::Mutex::new(()));
                    map.insert(key.to_owned(), Arc::downgrade(&m));
                    m
                }
            }
        };
        let local = m.lock_owned().await;
        let path = self.root.join("locks").join(key);
        let file = tokio::task::spawn_blocking(move || -> io::Result<fs::File> {
            let f = fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?;
            flock(&f)?;
            Ok(f)
        })
        .await
        .map_err(|e| io_err("lock task")(io::Error::other(e)))?
        .map_err(io_err(format!("locking {key}")))?;
        Ok(DigestGuard {
            _file: file,
            _local: local,
        })
    }

    fn clean_stale_tmp(&self) {
        let Ok(rd) = fs::read_dir(self.root.join("tmp")) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.split('.').next())
                .and_then(|p| p.parse::<i32>().ok());
            let alive = pid.is_some_and(|p| p == std::process::id() as i32 || pid_alive(p));
            if !alive {
                let p = e.path();
                let _ = if p.is_dir() {
                    fs::remove_dir_all(&p)
                } else {
                    fs::remove_file(&p)
                };
            }
        }
    }
}

/// What a registry image's manifest holds: OCI layers, or (`oras://`) one SIF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Oci,
    Sif,
}

/// Held while one digest is being fetched or unpacked; released on drop (closing the file
/// releases the flock).
struct DigestGuard {
    _file: fs::File,
    _local: tokio::sync::OwnedMutexGuard<()>,
}

enum BlobSource<'a> {
    Registry(&'a RegistryCtx),
    Layout(&'a LayoutDir),
}

struct RegistryCtx {
    client: Client,
    reference: Reference,
    display: String,
    registry: String,
    plain_http: bool,
}

impl RegistryCtx {
    fn error(&self, e: OciDistributionError) -> ImageError {
        let registry = self.registry.clone();
        let reference = self.display.clone();
        gantry_oci::registry_error(e, registry, reference, self.plain_http).into()
    }
}

/// Opens an `oci://PATH[:TAG]` layout beneath the allowed roots: `PATH` with the tag, or, when
/// that is not a layout, the whole `PATH:TAG` as a directory's name. Either failing answers
/// the same way for whatever reason.
fn open_layout(
    roots: &[PathBuf],
    path: &Path,
    tag: Option<String>,
) -> Result<(LayoutDir, Option<String>)> {
    match LayoutDir::open(roots, path) {
        Ok(dir) => Ok((dir, tag)),
        Err(e) if tag.is_none() => Err(e),
        Err(e) => LayoutDir::open(roots, &layout_whole(path, tag.as_deref()))
            .map(|dir| (dir, None))
            .map_err(|_| e),
    }
}

/// Returns the hex part of a `sha256:` digest, refusing anything else: the hex becomes a file
/// name, so it must be exactly 64 lowercase hex digits.
pub(crate) fn check_digest(digest: &str) -> Result<&str> {
    match digest.strip_prefix("sha256:") {
        Some(hex)
            if hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Ok(hex)
        }
        _ => Err(ImageError::UnsupportedDigest(digest.to_owned())),
    }
}

fn verify(digest: &str, actual: &[u8]) -> Result<()> {
    let actual = hex::encode(actual);
    if check_digest(digest)? != actual {
        return Err(ImageError::DigestMismatch {
            digest: digest.to_owned(),
            actual: format!("sha256:{actual}"),
        });
    }
    Ok(())
}

fn copy_verified(mut input: fs::File, dst: &Path, digest: &str) -> Result<()> {
    let mut out = fs::File::create(dst).map_err(io_err(format!("creating {}", dst.display())))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = input
            .read(&mut buf)
            .map_err(io_err(format!("reading blob {digest}")))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(io_err(format!("writing {}", dst.display())))?;
    }
    out.sync_all()
        .map_err(io_err(format!("syncing {}", dst.display())))?;
    verify(digest, &hasher.finalize())
}

#[derive(Deserialize)]
struct RawImage {
    #[serde(default)]
    os: Option<String>,
    #[serde(default)]
    architecture: Option<String>,
    #[serde(default)]
    config: Option<RawConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawConfig {
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    cmd: Option<Vec<String>>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    user: Option<String>,
}

fn parse_image_config(digest: &str, reference: &str, raw: &[u8]) -> Result<ImageConfig> {
    let img: RawImage = serde_json::from_slice(raw).map_err(|e| ImageError::BadConfig {
        digest: digest.to_owned(),
        reason: e.to_string(),
    })?;
    let os = img.os.as_deref().unwrap_or("linux");
    let arch = img.architecture.as_deref().unwrap_or("amd64");
    if os != "linux" || arch != "amd64" {
        return Err(ImageError::WrongPlatform {
            reference: reference.to_owned(),
            platform: format!("{os}/{arch}"),
        });
    }
    let c = img.config.unwrap_or(RawConfig {
        env: None,
        entrypoint: None,
        cmd: None,
        working_dir: None,
        user: None,
    });
    Ok(ImageConfig {
        env: c.env.unwrap_or_default(),
        entrypoint: c.entrypoint.unwrap_or_default(),
        cmd: c.cmd.unwrap_or_default(),
        working_dir: c.working_dir.filter(|w| !w.is_empty()),
        user: c.user.filter(|u| !u.is_empty()),
    })
}

fn flock(f: &fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: the fd is owned by `f` and open.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn sync_fs(path: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = fs::File::open(path)?;
    // SAFETY: the fd is owned by `f` and open.
    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// The manifest digest an image source names now, without pulling it: what a build is keyed
/// on (see [`gantry_oci::resolve_digest`]), an `oci://` layout read as a pull reads it.
pub async fn resolve_digest(src: &ImageSource, config: &PullConfig) -> Result<String> {
    gantry_oci::resolve_digest(src, config, layout_digest).await
}

/// The digest of the layout at `path` (with its tag), opened beneath `roots` as a pull opens
/// it: a missing or refused layout answers as a pull would.
fn layout_digest(roots: &[PathBuf], path: &Path, tag: Option<String>) -> Result<String> {
    let (dir, tag) = open_layout(roots, path, tag)?;
    Ok(layout::resolve(&dir, tag.as_deref())?.0)
}

/// This node's layout reader, for a server in the same binary: the server resolves a build's
/// `oci://` base to its digest at submit (the build's cache keys start from it) but must not
/// link this crate, so the binary hands it this function.
pub fn read_layout(
    roots: &[PathBuf],
    path: &Path,
    tag: Option<String>,
) -> std::result::Result<String, gantry_oci::BoxError> {
    layout_digest(roots, path, tag).map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_must_be_sha256_hex() {
        let good = format!("sha256:{}", "a".repeat(64));
        assert!(check_digest(&good).is_ok());
        assert!(check_digest("sha512:abcd").is_err());
        assert!(check_digest(&format!("sha256:{}", "A".repeat(64))).is_err());
        assert!(check_digest(&format!("sha256:../{}", "a".repeat(61))).is_err());
    }

    #[test]
    fn image_config_fields() {
        let raw = br#"{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin","A=1"],
            "Entrypoint":["/init"],"Cmd":["serve"],"WorkingDir":"/srv","User":"1000:1000"}}"#;
        let c = parse_image_config("d", "r", raw).unwrap();
        assert_eq!(c.env, vec!["PATH=/bin", "A=1"]);
        assert_eq!(c.entrypoint, vec!["/init"]);
        assert_eq!(c.cmd, vec!["serve"]);
        assert_eq!(c.working_dir.as_deref(), Some("/srv"));
        assert_eq!(c.user.as_deref(), Some("1000:1000"));
        let bare =
            parse_image_config("d", "r", br#"{"config":{"Cmd":null,"WorkingDir":""}}"#).unwrap();
        assert_eq!(bare, ImageConfig::default());
        let arm = parse_image_config("d", "r", br#"{"os":"linux","architecture":"arm64"}"#);
        assert!(matches!(arm, Err(ImageError::WrongPlatform { .. })));
    }

    /// gantry-oci's errors read the same as the agent's: the messages users see of a failed
    /// pull did not change when they moved.
    #[test]
    fn oci_errors_keep_their_messages() {
        let (r, g, d) = ("docker.io/library/x:1", "docker.io", "401 Unauthorized");
        let cases = [
            OciError::InvalidSource {
                uri: "http://x".into(),
                reason: "expected docker://REF".into(),
            },
            OciError::InvalidConfig("mirror for docker.io: bad".into()),
            OciError::Unauthorized {
                registry: g.into(),
                reference: r.into(),
                detail: d.into(),
            },
            OciError::NotFound {
                reference: r.into(),
                detail: d.into(),
            },
            OciError::Registry {
                registry: g.into(),
                reference: r.into(),
                detail: d.into(),
            },
        ];
        // The messages as users read them before the move, word for word.
        let before = [
            "invalid image `http://x`: expected docker://REF",
            "invalid pull configuration: mirror for docker.io: bad",
            "registry docker.io refused access to docker.io/library/x:1: 401 Unauthorized \
             (check the image's secret)",
            "image docker.io/library/x:1 not found: 401 Unauthorized (check the tag and the \
             repository's name)",
            "pulling docker.io/library/x:1 from docker.io: 401 Unauthorized",
        ];
        for (e, want) in cases.into_iter().zip(before) {
            let text = e.to_string();
            let converted = ImageError::from(e);
            assert_eq!(converted.to_string(), text);
            assert_eq!(text, want);
        }
        assert!(matches!(
            ImageError::from(parse_source("http://x").unwrap_err()),
            ImageError::Oci(OciError::InvalidSource { .. })
        ));
    }
}
