//! What the agent and the server share about images: source URIs (`docker://`, `oras://`,
//! `oci://`) and registry mirrors (`reference.rs`), how a node reaches registries
//! ([`PullConfig`]), the registry client both build ([`client`]), a registry's error as a typed
//! [`OciError`] with the hint that fits its cause (`hint.rs`), the checks of `oci://` layout
//! paths by name alone, and a source's manifest digest ([`resolve_digest`]).
//!
//! No I/O on node paths: layouts are read on disk only by the agent (`gantry-agent`'s
//! `beneath.rs`, `openat2` beneath `--oci-root`), so nothing here opens a path a workflow names.
//! Whoever resolves a layout's digest passes a reader ([`ReadLayout`]).

pub mod hint;
mod reference;

pub use reference::{apply_mirror, mirror_host, parse_source, pull_target, Source};

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use gantry_api::agent::{ImageSource, RegistryCredential};
use oci_client::client::{linux_amd64_resolver, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::Client;
use serde::{Deserialize, Serialize};

/// How this node reaches registries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PullConfig {
    /// Registry host -> base URL of a mirror to pull from instead, e.g.
    /// `docker.io` -> `http://127.0.0.1:5000` (air-gapped sites). A mirror given as `http://`
    /// is spoken to in plain HTTP. There is no fallback to the original registry.
    #[serde(default)]
    pub mirrors: BTreeMap<String, String>,
    /// Registry hosts (`host` or `host:port`) that speak plain HTTP.
    #[serde(default)]
    pub insecure_hosts: Vec<String>,
    /// Directories under which `oci://PATH` layouts may be read (`--oci-root`, absolute). A
    /// layout elsewhere is refused, and none is read when the list is empty.
    #[serde(default)]
    pub oci_roots: Vec<PathBuf>,
}

/// What goes wrong naming an image or asking a registry about it. The agent's `ImageError`
/// has the same variants with the same messages (and more of its own: digests, layouts,
/// unpacking), converted one to one.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("invalid image `{uri}`: {reason}")]
    InvalidSource { uri: String, reason: String },
    #[error("invalid pull configuration: {0}")]
    InvalidConfig(String),
    #[error(
        "registry {registry} refused access to {reference}: {detail} (check the image's secret)"
    )]
    Unauthorized {
        registry: String,
        reference: String,
        detail: String,
    },
    #[error("image {reference} not found: {detail} (check the tag and the repository's name)")]
    NotFound { reference: String, detail: String },
    #[error("pulling {reference} from {registry}: {detail}")]
    Registry {
        registry: String,
        reference: String,
        detail: String,
    },
}

/// Between two reads of a pull's response: layers are streamed, and a registry may pause.
pub const PULL_READ_TIMEOUT: Duration = Duration::from_secs(120);
/// Between two reads of a digest resolution's response: one manifest.
const RESOLVE_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// A registry client as image pulls and digest resolution build it: plain HTTP only to
/// `plain_http_hosts` (the insecure registries and plain-HTTP mirrors), image indexes resolved
/// to linux/amd64 (the only platform nodes run), 30 s to connect; the read timeout is the
/// caller's ([`PULL_READ_TIMEOUT`] for pulls).
pub fn client(plain_http_hosts: Vec<String>, read_timeout: Duration) -> Client {
    Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(plain_http_hosts),
        platform_resolver: Some(Box::new(linux_amd64_resolver)),
        connect_timeout: Some(Duration::from_secs(30)),
        read_timeout: Some(read_timeout),
        ..Default::default()
    })
}

/// A source's credential as oci-client takes it; none is anonymous.
pub fn registry_auth(credential: Option<&RegistryCredential>) -> RegistryAuth {
    match credential {
        None => RegistryAuth::Anonymous,
        Some(RegistryCredential::Basic { username, password }) => {
            RegistryAuth::Basic(username.clone(), password.clone())
        }
        Some(RegistryCredential::Bearer { token }) => RegistryAuth::Bearer(token.clone()),
    }
}

/// A registry's error as an `OciError`, its detail keeping the causes and the hint that fits
/// them (see `hint`).
pub fn registry_error(
    e: OciDistributionError,
    registry: String,
    reference: String,
    plain_http: bool,
) -> OciError {
    let detail = hint::describe(&e, &registry, plain_http);
    match &e {
        OciDistributionError::AuthenticationFailure(_)
        | OciDistributionError::UnauthorizedError { .. } => OciError::Unauthorized {
            registry,
            reference,
            detail,
        },
        OciDistributionError::ImageManifestNotFoundError(_) => {
            OciError::NotFound { reference, detail }
        }
        OciDistributionError::RegistryError { envelope, .. }
            if envelope
                .errors
                .iter()
                .any(|x| matches!(x.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)) =>
        {
            OciError::Unauthorized {
                registry,
                reference,
                detail,
            }
        }
        OciDistributionError::RegistryError { envelope, .. }
            if envelope.errors.iter().any(|x| {
                matches!(
                    x.code,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                )
            }) =>
        {
            OciError::NotFound { reference, detail }
        }
        _ => OciError::Registry {
            registry,
            reference,
            detail,
        },
    }
}

/// The roots a node reads `oci://` layouts from must be absolute, without `..`: layout paths
/// are matched against them component by component.
pub fn check_oci_roots(roots: &[PathBuf]) -> Result<(), OciError> {
    for r in roots {
        if !r.is_absolute() || r.components().any(|c| c == Component::ParentDir) {
            return Err(OciError::InvalidConfig(format!(
                "--oci-root {} must be an absolute path without `..`",
                r.display()
            )));
        }
    }
    Ok(())
}

/// Whether `path` lies beneath one of `roots` by its name alone (nothing is opened): what the
/// server can check at submit. The node still opens it beneath its root, refusing symlinks.
pub fn oci_path_allowed(roots: &[PathBuf], uri: &str) -> bool {
    match parse_source(uri) {
        Ok(Source::Layout { path, tag }) => {
            let whole = layout_whole(&path, tag.as_deref());
            roots.iter().any(|r| {
                let inside = |p: &Path| {
                    p.components().all(|c| c != Component::ParentDir) && p.starts_with(r)
                };
                inside(&path) || inside(&whole)
            })
        }
        _ => false,
    }
}

/// `PATH:TAG` as one path: a layout's directory may itself have a `:` in its name.
pub fn layout_whole(path: &Path, tag: Option<&str>) -> PathBuf {
    match tag {
        Some(t) => PathBuf::from(format!("{}:{t}", path.display())),
        None => path.to_path_buf(),
    }
}

/// Whether `registry` is spoken to in plain HTTP: an insecure host, or a plain-HTTP mirror.
pub fn plain_http_to(registry: &str, insecure: &[String], extra: &[String]) -> bool {
    insecure.iter().chain(extra).any(|h| h == registry)
}

/// Any error, as a [`ReadLayout`] returns it (the agent's `ImageError` for one).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Reads the manifest digest of the `oci://` layout at `path` (with its tag, if any) beneath
/// one of `roots`. The agent's reader opens it with `openat2`, refusing symlinks; a process
/// that has none uses [`read_no_layouts`].
pub type ReadLayout =
    fn(roots: &[PathBuf], path: &Path, tag: Option<String>) -> Result<String, BoxError>;

/// The [`ReadLayout`] of a process that reads no layouts: each is refused, saying so.
pub fn read_no_layouts(
    _roots: &[PathBuf],
    path: &Path,
    _tag: Option<String>,
) -> Result<String, BoxError> {
    Err(format!(
        "OCI layout {} cannot be resolved here: this process was started without a reader \
         of layouts",
        path.display()
    )
    .into())
}

/// The manifest digest an image source names now, without pulling it: what a build is keyed
/// on (never a tag, which can move). Goes through the same mirrors and plain-HTTP list as
/// pulls. For a registry it returns the digest of the platform manifest (linux/amd64).
///
/// An `oci://` layout is read on disk, which this crate never does (it has no `openat2`
/// beneath its roots, and must not join a workflow's path onto a host path): it is handed to
/// `read_layout` with the allowed roots, and its error returned as it is. The server resolves
/// a build's `from` this way too, with the reader its binary gives it (the agent's), so a
/// layout base keeps a digest the build's cache keys can be computed from.
pub async fn resolve_digest<E: From<OciError>>(
    src: &ImageSource,
    config: &PullConfig,
    read_layout: impl FnOnce(&[PathBuf], &Path, Option<String>) -> Result<String, E>,
) -> Result<String, E> {
    match parse_source(&src.uri)? {
        Source::Registry(original) | Source::Sif(original) => {
            let (target, plain_http) =
                apply_mirror(&original, config).map_err(OciError::InvalidConfig)?;
            let plain_extra: Vec<String> = plain_http.into_iter().collect();
            let mut plain: Vec<String> = config.insecure_hosts.clone();
            plain.extend(plain_extra.iter().cloned());
            let client = client(plain, RESOLVE_READ_TIMEOUT);
            let auth = registry_auth(src.credential.as_ref());
            let (_, digest) = client
                .pull_image_manifest(&target, &auth)
                .await
                .map_err(|e| {
                    let registry = target.resolve_registry().to_owned();
                    let plain = plain_http_to(&registry, &config.insecure_hosts, &plain_extra);
                    registry_error(e, registry, original.whole(), plain)
                })?;
            Ok(digest)
        }
        Source::Layout { path, tag } => read_layout(&config.oci_roots, &path, tag),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(uri: &str) -> ImageSource {
        ImageSource {
            uri: uri.into(),
            credential: None,
            secret: None,
        }
    }

    #[test]
    fn roots_are_absolute_without_parent_components() {
        assert!(check_oci_roots(&["/srv/layouts".into()]).is_ok());
        for bad in ["relative/dir", "/srv/../etc"] {
            let e = check_oci_roots(&[bad.into()]).unwrap_err();
            assert!(matches!(e, OciError::InvalidConfig(_)), "{bad}: {e}");
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn layout_paths_are_allowed_by_name_beneath_a_root() {
        let roots: Vec<PathBuf> = vec!["/srv/layouts".into()];
        assert!(oci_path_allowed(&roots, "oci:///srv/layouts/busybox:1"));
        assert!(oci_path_allowed(&roots, "oci:///srv/layouts/busybox"));
        // A directory with a `:` in its name, taken whole rather than as PATH:TAG.
        assert!(oci_path_allowed(&["/srv/a:b".into()], "oci:///srv/a:b"));
        assert!(!oci_path_allowed(&["/srv/a:b".into()], "oci:///srv/a:c"));
        assert!(!oci_path_allowed(&roots, "oci:///etc"));
        assert!(!oci_path_allowed(&roots, "oci:///srv/layouts/../etc"));
        assert!(!oci_path_allowed(&roots, "oci:///srv/layoutsx/busybox"));
        assert!(!oci_path_allowed(&[], "oci:///srv/layouts/busybox"));
        assert!(!oci_path_allowed(&roots, "docker://busybox:1"));
        assert_eq!(
            layout_whole(Path::new("/a/b"), Some("1")),
            PathBuf::from("/a/b:1")
        );
        assert_eq!(layout_whole(Path::new("/a/b"), None), PathBuf::from("/a/b"));
    }

    #[tokio::test]
    async fn layouts_go_to_the_reader_with_the_roots() {
        let config = PullConfig {
            oci_roots: vec!["/srv/layouts".into()],
            ..Default::default()
        };
        let digest = resolve_digest(
            &src("oci:///srv/layouts/busybox:1"),
            &config,
            |roots, path, tag| -> Result<String, OciError> {
                assert_eq!(roots, &config.oci_roots[..]);
                assert_eq!(path, Path::new("/srv/layouts/busybox"));
                assert_eq!(tag.as_deref(), Some("1"));
                Ok("sha256:feed".into())
            },
        )
        .await
        .unwrap();
        assert_eq!(digest, "sha256:feed");
        let e = resolve_digest(&src("oci:///srv/layouts/x"), &config, read_no_layouts)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("/srv/layouts/x"), "{e}");
        assert!(e.to_string().contains("without a reader"), "{e}");
    }

    #[tokio::test]
    async fn bad_sources_and_mirrors_are_refused_before_any_request() {
        let never = |_: &[PathBuf], _: &Path, _: Option<String>| -> Result<String, OciError> {
            panic!("not a layout")
        };
        let e = resolve_digest(&src("http://x/y"), &PullConfig::default(), never)
            .await
            .unwrap_err();
        assert!(matches!(e, OciError::InvalidSource { .. }), "{e}");
        let mut config = PullConfig::default();
        config
            .mirrors
            .insert("docker.io".into(), "http://127.0.0.1:5000/path".into());
        let e = resolve_digest(&src("docker://busybox:1"), &config, never)
            .await
            .unwrap_err();
        assert!(matches!(e, OciError::InvalidConfig(_)), "{e}");
    }
}
