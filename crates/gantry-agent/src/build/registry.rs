//! The registries a build talks to: the base image's (its manifest and configuration, which the
//! node's image store does not keep), and the build's own (the server's object cache): cached
//! layers are fetched from it, and the result is pushed to it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use gantry_api::agent::ImageSource;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::image::{parse_source, read_blob, ImageStore, LayoutDir, PullConfig, Source};

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// A content descriptor, as manifests list them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RawManifest {
    config: Descriptor,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

/// What a build takes from its base besides the unpacked layers.
#[derive(Debug, Clone)]
pub struct BaseImage {
    /// The configuration as the image has it, unknown fields included.
    pub config: serde_json::Value,
    /// Its layers, with OCI media types (Docker's are translated).
    pub layers: Vec<Descriptor>,
}

fn hex_of(digest: &str) -> Result<&str, String> {
    crate::image::check_digest(digest).map_err(|e| e.to_string())
}

fn verify(digest: &str, bytes: &[u8]) -> Result<(), String> {
    let actual = hex::encode(Sha256::digest(bytes));
    if hex_of(digest)? != actual {
        return Err(format!(
            "content of {digest} does not match it (got sha256:{actual})"
        ));
    }
    Ok(())
}

/// Docker media types -> OCI's, so the built manifest is all OCI.
fn oci_media_type(mt: &str) -> String {
    match mt {
        "application/vnd.docker.image.rootfs.diff.tar.gzip" => {
            "application/vnd.oci.image.layer.v1.tar+gzip".into()
        }
        "application/vnd.docker.image.rootfs.diff.tar" => {
            "application/vnd.oci.image.layer.v1.tar".into()
        }
        other => other.into(),
    }
}

/// Error text with its causes (reqwest hides refused connections in the chain).
fn detail(e: &OciDistributionError) -> String {
    let mut s = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// The base's manifest (by the digest the image store used) and configuration. The
/// configuration blob is read from the image store when it is there (it always is after a
/// pull), so this costs one manifest request.
pub async fn base_image(
    images: &ImageStore,
    pull: &PullConfig,
    src: &ImageSource,
    manifest_digest: &str,
) -> Result<BaseImage, String> {
    let local_config = |digest: &str| -> Result<Option<Vec<u8>>, String> {
        let p = images.root().join("blobs/sha256").join(hex_of(digest)?);
        match std::fs::read(&p) {
            Ok(b) => verify(digest, &b).map(|()| Some(b)),
            Err(_) => Ok(None),
        }
    };
    let (manifest, config) = match parse_source(&src.uri).map_err(|e| e.to_string())? {
        Source::Sif(_) => {
            return Err(format!(
                "{}: a build's base is an OCI image (docker:// or oci://), not a SIF",
                src.uri
            ))
        }
        Source::Layout { path, .. } => {
            // Beneath the agent's `--oci-root`s, without following symlinks out of them, as
            // the image store opens a layout a job runs from.
            let dir = LayoutDir::open(&pull.oci_roots, &path).map_err(|e| e.to_string())?;
            let read = |digest: &str| read_blob(&dir, digest).map_err(|e| e.to_string());
            let raw = read(manifest_digest)?;
            let m: RawManifest = serde_json::from_slice(&raw)
                .map_err(|e| format!("manifest {manifest_digest}: {e}"))?;
            let config = match local_config(&m.config.digest)? {
                Some(c) => c,
                None => read(&m.config.digest)?,
            };
            (m, config)
        }
        Source::Registry(reference) => {
            let (target, plain) = gantry_oci::pull_target(&reference, pull)?;
            let registry = target.resolve_registry().to_owned();
            let plain_http = plain.contains(&registry);
            let base_detail =
                |e: &OciDistributionError| crate::image::hint::describe(e, &registry, plain_http);
            let client = gantry_oci::client(plain, gantry_oci::PULL_READ_TIMEOUT);
            let by_digest = Reference::with_digest(
                registry.clone(),
                target.repository().to_owned(),
                manifest_digest.to_owned(),
            );
            let auth = gantry_oci::registry_auth(src.credential.as_ref());
            let (raw, _) = client
                .pull_manifest_raw(&by_digest, &auth, &[OCI_MANIFEST, DOCKER_MANIFEST])
                .await
                .map_err(|e| format!("manifest {manifest_digest}: {}", base_detail(&e)))?;
            verify(manifest_digest, &raw)?;
            let m: RawManifest = serde_json::from_slice(&raw)
                .map_err(|e| format!("manifest {manifest_digest}: {e}"))?;
            let config = match local_config(&m.config.digest)? {
                Some(c) => c,
                None => {
                    let mut buf = Vec::new();
                    client
                        .pull_blob(&by_digest, m.config.digest.as_str(), &mut buf)
                        .await
                        .map_err(|e| format!("config {}: {}", m.config.digest, base_detail(&e)))?;
                    verify(&m.config.digest, &buf)?;
                    buf
                }
            };
            (m, config)
        }
    };
    let config: serde_json::Value = serde_json::from_slice(&config)
        .map_err(|e| format!("config {}: {e}", manifest.config.digest))?;
    if !config.is_object() {
        return Err(format!(
            "config {} is not a JSON object",
            manifest.config.digest
        ));
    }
    let layers = manifest
        .layers
        .into_iter()
        .map(|l| Descriptor {
            media_type: oci_media_type(&l.media_type),
            annotations: BTreeMap::new(),
            ..l
        })
        .collect();
    Ok(BaseImage { config, layers })
}

/// The build's registry and repository, spoken to in plain HTTP with the agent's token.
pub struct Target {
    client: Client,
    reference: Reference,
}

impl Target {
    pub async fn new(
        registry: &str,
        repository: &str,
        tag: &str,
        token: Option<&str>,
    ) -> Result<Self, String> {
        let reference = Reference::with_tag(registry.into(), repository.into(), tag.into());
        // A reference that does not parse back is one the registry would refuse.
        let text = reference.whole();
        text.parse::<Reference>()
            .map_err(|e| format!("`{text}` is not a valid image reference: {e}"))?;
        let client = Client::new(ClientConfig {
            protocol: ClientProtocol::HttpsExcept(vec![registry.to_owned()]),
            // One PUT per blob: every registry takes those; chunked uploads are optional.
            use_monolithic_push: true,
            connect_timeout: Some(Duration::from_secs(30)),
            read_timeout: Some(Duration::from_secs(300)),
            ..Default::default()
        });
        let auth = match token {
            Some(t) if !t.is_empty() => RegistryAuth::Bearer(t.to_owned()),
            _ => RegistryAuth::Anonymous,
        };
        client
            .store_auth_if_needed(reference.resolve_registry(), &auth)
            .await;
        Ok(Target { client, reference })
    }

    /// `registry/repository:tag`.
    pub fn name(&self) -> String {
        self.reference.whole()
    }

    /// Whether the build's repository has the blob: the object cache answers yes only where
    /// the repository links it, whatever other repositories hold.
    pub async fn has_blob(&self, digest: &str) -> Result<bool, String> {
        self.client
            .blob_exists(&self.reference, digest)
            .await
            .map_err(|e| format!("asking for {digest}: {}", detail(&e)))
    }

    /// Asks the registry to link a blob it holds in another repository into this one (a
    /// cross-repository mount), so it need not be uploaded. False when it would not.
    pub async fn mount_blob(&self, from_repository: &str, digest: &str) -> bool {
        let source = Reference::with_tag(
            self.reference.registry().to_owned(),
            from_repository.to_owned(),
            "latest".into(),
        );
        self.client
            .mount_blob(&self.reference, &source, digest)
            .await
            .is_ok()
    }

    /// Downloads a blob of the repository into `dest`, checking it against its digest.
    pub async fn fetch_blob(&self, digest: &str, dest: &Path) -> Result<(), String> {
        let mut stream = self
            .client
            .pull_blob_stream(&self.reference, digest)
            .await
            .map_err(|e| format!("fetching {digest}: {}", detail(&e)))?;
        let mut file = tokio::fs::File::create(dest)
            .await
            .map_err(|e| format!("creating {}: {e}", dest.display()))?;
        let mut hasher = Sha256::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| format!("fetching {digest}: {e}"))?;
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| format!("writing {}: {e}", dest.display()))?;
        }
        file.sync_all()
            .await
            .map_err(|e| format!("writing {}: {e}", dest.display()))?;
        let actual = hex::encode(hasher.finalize());
        if hex_of(digest)? != actual {
            return Err(format!(
                "the registry's {digest} does not match its digest (got sha256:{actual})"
            ));
        }
        Ok(())
    }

    /// Uploads a file as the blob `digest` (one PUT, streamed from disk).
    pub async fn push_file(&self, path: &Path, digest: &str, size: u64) -> Result<(), String> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        let stream = futures_util::stream::unfold(Some(file), |file| async move {
            let mut file = file?;
            let mut buf = vec![0u8; 1 << 20];
            match file.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(bytes::Bytes::from(buf)), Some(file)))
                }
                Err(e) => Some((Err(OciDistributionError::IoError(e)), None)),
            }
        });
        self.client
            .push_blob_stream(&self.reference, stream, digest, Some(size))
            .await
            .map(|_| ())
            .map_err(|e| format!("pushing {digest}: {}", detail(&e)))
    }

    pub async fn push_bytes(&self, data: Vec<u8>, digest: &str) -> Result<(), String> {
        self.client
            .push_blob(&self.reference, data, digest)
            .await
            .map(|_| ())
            .map_err(|e| format!("pushing {digest}: {}", detail(&e)))
    }

    /// Pushes an image manifest under the target's tag.
    pub async fn push_manifest(&self, manifest: Vec<u8>) -> Result<(), String> {
        self.client
            .push_manifest_raw(
                &self.reference,
                manifest,
                http::HeaderValue::from_static(OCI_MANIFEST),
            )
            .await
            .map(|_| ())
            .map_err(|e| format!("pushing the manifest: {}", detail(&e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_layers_get_oci_media_types() {
        assert_eq!(
            oci_media_type("application/vnd.docker.image.rootfs.diff.tar.gzip"),
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        assert_eq!(
            oci_media_type("application/vnd.oci.image.layer.v1.tar+zstd"),
            "application/vnd.oci.image.layer.v1.tar+zstd"
        );
    }

    /// A layout of one image with no layers, written by hand: its manifest's digest.
    fn write_layout(dir: &Path) -> String {
        let blobs = dir.join("blobs/sha256");
        std::fs::create_dir_all(&blobs).unwrap();
        let put = |bytes: &[u8]| {
            let hex = hex::encode(Sha256::digest(bytes));
            std::fs::write(blobs.join(&hex), bytes).unwrap();
            (format!("sha256:{hex}"), bytes.len())
        };
        let (config, config_len) = put(br#"{"architecture":"amd64","os":"linux","config":{}}"#);
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"mediaType":"{OCI_CONFIG}","digest":"{config}","size":{config_len}}},"layers":[]}}"#
        );
        let (digest, len) = put(manifest.as_bytes());
        std::fs::write(
            dir.join("index.json"),
            format!(
                r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"{OCI_MANIFEST}","digest":"{digest}","size":{len}}}]}}"#
            ),
        )
        .unwrap();
        digest
    }

    #[tokio::test]
    async fn a_layout_base_is_read_only_beneath_the_oci_roots_and_never_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("layouts");
        let outside = tmp.path().join("outside");
        let digest = write_layout(&root.join("base"));
        write_layout(&outside);
        std::os::unix::fs::symlink(&outside, root.join("linked")).unwrap();
        let pull = PullConfig {
            oci_roots: vec![root.clone()],
            ..Default::default()
        };
        let images = ImageStore::new(tmp.path().join("store"), pull.clone()).unwrap();
        let src = |path: &Path| ImageSource {
            uri: format!("oci://{}", path.display()),
            credential: None,
            secret: None,
        };

        // The legitimate use: a layout beneath the root gives its configuration.
        let base = base_image(&images, &pull, &src(&root.join("base")), &digest)
            .await
            .unwrap();
        assert_eq!(base.config["os"], "linux");
        assert!(base.layers.is_empty());

        // The same bytes reached through a link out of the root, or outside every root, are
        // refused as unavailable, whatever the server checked by name before.
        for path in [
            root.join("linked"),
            outside.clone(),
            root.join("../outside"),
        ] {
            let e = base_image(&images, &pull, &src(&path), &digest)
                .await
                .unwrap_err();
            assert!(
                e.contains("is not available on this node"),
                "{}: {e}",
                path.display()
            );
        }
    }
}
