//! Image source URIs (`docker://REF`, `oci://PATH[:TAG]`) and registry mirrors.

use std::path::PathBuf;

use oci_client::Reference;

use crate::{OciError, PullConfig};

/// Where an image comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A registry reference, normalised like docker does (`busybox` ->
    /// `docker.io/library/busybox:latest`).
    Registry(Reference),
    /// A local OCI image layout, with the `org.opencontainers.image.ref.name` to pick.
    Layout { path: PathBuf, tag: Option<String> },
    /// `oras://`: a SIF file as an ORAS artifact in a registry. Unlike `docker://` there is no
    /// default registry (Apptainer's rule), so the reference always names its host.
    Sif(Reference),
}

pub fn parse_source(uri: &str) -> Result<Source, OciError> {
    let invalid = |reason: &str| OciError::InvalidSource {
        uri: uri.to_owned(),
        reason: reason.to_owned(),
    };
    if let Some(rest) = uri.strip_prefix("docker://") {
        let reference: Reference = rest
            .parse()
            .map_err(|e| invalid(&format!("not a valid image reference ({e})")))?;
        return Ok(Source::Registry(reference));
    }
    if let Some(rest) = uri.strip_prefix("oras://") {
        let host = rest.split('/').next().unwrap_or("");
        let names_host =
            rest.contains('/') && (host.contains('.') || host.contains(':') || host == "localhost");
        if !names_host {
            return Err(invalid(
                "an oras:// image names its registry (oras://REGISTRY/REPO:TAG); there is no default one",
            ));
        }
        let reference: Reference = rest
            .parse()
            .map_err(|e| invalid(&format!("not a valid image reference ({e})")))?;
        return Ok(Source::Sif(reference));
    }
    if let Some(rest) = uri.strip_prefix("oci://") {
        if !rest.starts_with('/') {
            return Err(invalid("an oci:// layout path must be absolute"));
        }
        // Split by the name alone: looking at the path here would tell a workflow what exists
        // on the node. A layout whose directory has a `:` in its name is still found when it
        // is opened (the agent's `open_layout` tries the whole name too).
        if let Some((path, tag)) = rest.rsplit_once(':') {
            if !tag.is_empty() && !tag.contains('/') {
                return Ok(Source::Layout {
                    path: PathBuf::from(path),
                    tag: Some(tag.to_owned()),
                });
            }
        }
        return Ok(Source::Layout {
            path: PathBuf::from(rest),
            tag: None,
        });
    }
    Err(invalid(
        "expected docker://REF, oras://REGISTRY/REF or oci://PATH",
    ))
}

/// The `host[:port]` of a mirror base URL, and whether it speaks plain HTTP.
pub fn mirror_host(base: &str) -> Result<(String, bool), String> {
    let (rest, plain) = if let Some(r) = base.strip_prefix("http://") {
        (r, true)
    } else if let Some(r) = base.strip_prefix("https://") {
        (r, false)
    } else {
        (base, false)
    };
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains('/') {
        return Err(format!(
            "`{base}` must be a registry base URL like http://host:port (registries serve /v2/ at their root)"
        ));
    }
    Ok((host.to_owned(), plain))
}

/// Rewrites a reference to go to its registry's mirror, if one is configured. Returns the
/// reference to use and any host that must be spoken to in plain HTTP.
pub fn apply_mirror(
    original: &Reference,
    config: &PullConfig,
) -> Result<(Reference, Option<String>), String> {
    let Some(base) = config.mirrors.get(original.registry()) else {
        return Ok((original.clone(), None));
    };
    let (host, plain) = mirror_host(base)?;
    let repo = original.repository().to_owned();
    let r = match (original.tag(), original.digest()) {
        (Some(t), Some(d)) => {
            Reference::with_tag_and_digest(host.clone(), repo, t.to_owned(), d.to_owned())
        }
        (None, Some(d)) => Reference::with_digest(host.clone(), repo, d.to_owned()),
        (t, None) => Reference::with_tag(host.clone(), repo, t.unwrap_or("latest").to_owned()),
    };
    Ok((r, plain.then_some(host)))
}

/// Where a pull of `original` goes (its mirror's reference when one is configured) and every
/// host to speak plain HTTP to on the way: the configured insecure hosts and a plain mirror.
pub fn pull_target(
    original: &Reference,
    config: &PullConfig,
) -> Result<(Reference, Vec<String>), String> {
    let (target, plain_mirror) = apply_mirror(original, config)?;
    let mut plain = config.insecure_hosts.clone();
    plain.extend(plain_mirror);
    Ok((target, plain))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(uri: &str) -> Reference {
        match parse_source(uri).unwrap() {
            Source::Registry(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn normalises_like_docker() {
        assert_eq!(
            reg("docker://alpine").whole(),
            "docker.io/library/alpine:latest"
        );
        assert_eq!(
            reg("docker://busybox:1").whole(),
            "docker.io/library/busybox:1"
        );
        assert_eq!(
            reg("docker://index.docker.io/user/app:2").whole(),
            "docker.io/user/app:2"
        );
        let r = reg("docker://127.0.0.1:5055/library/busybox:1");
        assert_eq!(r.registry(), "127.0.0.1:5055");
        assert_eq!(r.repository(), "library/busybox");
        assert!(parse_source("docker://UPPER/Case").is_err());
        assert!(parse_source("http://x/y").is_err());
    }

    #[test]
    fn oras_names_its_registry() {
        let sif = |uri: &str| match parse_source(uri) {
            Ok(Source::Sif(r)) => Ok(r.whole()),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(
            sif("oras://ghcr.io/ctrliq/blast:2.17").unwrap(),
            "ghcr.io/ctrliq/blast:2.17"
        );
        assert!(sif("oras://127.0.0.1:5055/gantry/sif@sha256:").is_err());
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            sif(&format!("oras://127.0.0.1:5055/gantry/sif@{d}")).unwrap(),
            format!("127.0.0.1:5055/gantry/sif@{d}")
        );
        assert_eq!(sif("oras://localhost/x:1").unwrap(), "localhost/x:1");
        for no_host in ["oras://library/busybox:1", "oras://busybox", "oras://"] {
            let e = sif(no_host).unwrap_err();
            assert!(e.contains("names its registry"), "{no_host}: {e}");
        }
    }

    #[test]
    fn layout_paths_and_tags() {
        assert_eq!(
            parse_source("oci:///no/such/layout:v1").unwrap(),
            Source::Layout {
                path: "/no/such/layout".into(),
                tag: Some("v1".into())
            }
        );
        assert_eq!(
            parse_source("oci:///no/such/layout").unwrap(),
            Source::Layout {
                path: "/no/such/layout".into(),
                tag: None
            }
        );
        assert!(parse_source("oci://relative/path").is_err());
    }

    #[test]
    fn mirrors_rewrite_the_registry() {
        let mut config = PullConfig::default();
        config
            .mirrors
            .insert("docker.io".into(), "http://127.0.0.1:5000/".into());
        let (r, plain) = apply_mirror(&reg("docker://busybox:1"), &config).unwrap();
        assert_eq!(r.whole(), "127.0.0.1:5000/library/busybox:1");
        assert_eq!(plain.as_deref(), Some("127.0.0.1:5000"));
        let (r, plain) = apply_mirror(&reg("docker://quay.io/x/y:1"), &config).unwrap();
        assert_eq!(r.whole(), "quay.io/x/y:1");
        assert_eq!(plain, None);
        assert!(mirror_host("http://host:1/path").is_err());
    }

    #[test]
    fn a_pull_goes_to_its_mirror_and_a_plain_mirror_is_spoken_to_in_http() {
        let r = reg("docker://busybox@sha256:0000000000000000000000000000000000000000000000000000000000000000");
        let mut pull = PullConfig {
            insecure_hosts: vec!["registry.lan:5000".into()],
            ..Default::default()
        };
        let (target, plain) = pull_target(&r, &pull).unwrap();
        assert_eq!(target.resolve_registry(), "index.docker.io");
        assert_eq!(target.repository(), "library/busybox");
        assert_eq!(plain, vec!["registry.lan:5000".to_owned()]);
        pull.mirrors
            .insert("docker.io".into(), "http://127.0.0.1:5000/".into());
        let (target, plain) = pull_target(&r, &pull).unwrap();
        assert_eq!(target.resolve_registry(), "127.0.0.1:5000");
        assert_eq!(target.digest(), r.digest());
        assert_eq!(
            plain,
            vec!["registry.lan:5000".to_owned(), "127.0.0.1:5000".to_owned()]
        );
        pull.mirrors
            .insert("docker.io".into(), "https://m.lan/v2/x".into());
        assert!(pull_target(&r, &pull).is_err());
    }
}
