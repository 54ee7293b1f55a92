//! Manifests as pushed: JSON of a known media type, whose references are collected so that
//! every blob they name can be checked on push and kept (or collected) afterwards.

use serde_json::Value;

use super::errors::OciError;
use super::names::sha256_hex;

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// Media types this cache stores, and whether each is an index (a list of manifests).
const KNOWN: &[(&str, bool)] = &[
    (OCI_MANIFEST, false),
    (OCI_INDEX, true),
    (DOCKER_MANIFEST, false),
    (DOCKER_LIST, true),
];

/// Manifests larger than this are refused (the spec asks registries to take at least 4 MiB).
pub const MAX_MANIFEST: usize = 4 << 20;

/// A descriptor a manifest names.
#[derive(Debug, Clone, PartialEq)]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: i64,
    /// Foreign layers (with `urls`) need not be in this cache.
    pub foreign: bool,
    pub platform: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub media_type: String,
    pub is_index: bool,
    pub config: Option<Descriptor>,
    pub layers: Vec<Descriptor>,
    /// An index's manifests.
    pub manifests: Vec<Descriptor>,
}

impl Parsed {
    /// Every digest this manifest references that must be in the cache.
    pub fn refs(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .config
            .iter()
            .chain(&self.layers)
            .chain(&self.manifests)
            .filter(|d| !d.foreign)
            .map(|d| d.digest.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

fn descriptor(v: &Value, what: &str) -> Result<Descriptor, OciError> {
    let bad = |why: &str| OciError::manifest_invalid(format!("{what}: {why}"));
    let digest = v
        .get("digest")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no digest"))?;
    sha256_hex(digest).map_err(|e| bad(&e.message))?;
    let size = v
        .get("size")
        .and_then(Value::as_i64)
        .filter(|s| *s >= 0)
        .ok_or_else(|| bad("no size, or a negative one"))?;
    let media_type = v
        .get("mediaType")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let foreign = v
        .get("urls")
        .and_then(Value::as_array)
        .is_some_and(|u| !u.is_empty());
    Ok(Descriptor {
        media_type,
        digest: digest.to_string(),
        size,
        foreign,
        platform: v.get("platform").cloned(),
    })
}

/// Parses and checks a manifest. `content_type` is the request's `Content-Type`; a manifest
/// that states its `mediaType` must agree with it.
pub fn parse(bytes: &[u8], content_type: Option<&str>) -> Result<Parsed, OciError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| OciError::manifest_invalid(format!("the manifest is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(OciError::manifest_invalid(
            "the manifest is not a JSON object",
        ));
    }
    if v.get("schemaVersion").and_then(Value::as_i64) != Some(2) {
        return Err(OciError::manifest_invalid(
            "only schemaVersion 2 manifests are stored (Docker schema 1 is not supported)",
        ));
    }
    let content_type = content_type
        .map(|c| c.split(';').next().unwrap_or_default().trim())
        .filter(|c| KNOWN.iter().any(|(k, _)| k == c));
    let stated = v.get("mediaType").and_then(Value::as_str);
    let media_type = match (stated, content_type) {
        (Some(s), Some(c)) if s != c => {
            return Err(OciError::manifest_invalid(format!(
                "the manifest says mediaType {s} but was sent as {c}"
            )))
        }
        (Some(s), _) => s.to_string(),
        (None, Some(c)) => c.to_string(),
        // An OCI manifest may leave its media type out: tell one from an index by its fields.
        (None, None) if v.get("manifests").is_some() => OCI_INDEX.to_string(),
        (None, None) => OCI_MANIFEST.to_string(),
    };
    let Some(&(_, is_index)) = KNOWN.iter().find(|(k, _)| *k == media_type) else {
        let known: Vec<&str> = KNOWN.iter().map(|(k, _)| *k).collect();
        return Err(OciError::manifest_invalid(format!(
            "media type {media_type} is not one this cache stores: {}",
            known.join(", ")
        )));
    };
    let mut parsed = Parsed {
        media_type,
        is_index,
        config: None,
        layers: vec![],
        manifests: vec![],
    };
    if is_index {
        let list = v
            .get("manifests")
            .and_then(Value::as_array)
            .ok_or_else(|| OciError::manifest_invalid("an index needs a manifests list"))?;
        for (i, m) in list.iter().enumerate() {
            parsed
                .manifests
                .push(descriptor(m, &format!("manifests[{i}]"))?);
        }
    } else {
        let config = v
            .get("config")
            .ok_or_else(|| OciError::manifest_invalid("an image manifest needs a config"))?;
        parsed.config = Some(descriptor(config, "config")?);
        let layers = v
            .get("layers")
            .and_then(Value::as_array)
            .ok_or_else(|| OciError::manifest_invalid("an image manifest needs a layers list"))?;
        for (i, l) in layers.iter().enumerate() {
            parsed.layers.push(descriptor(l, &format!("layers[{i}]"))?);
        }
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn image(media_type: Option<&str>) -> Vec<u8> {
        let mut v = serde_json::json!({
            "schemaVersion": 2,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": D1, "size": 10},
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": D2, "size": 20},
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": D1, "size": 10,
                 "urls": ["https://example.com/layer"]}
            ]
        });
        if let Some(m) = media_type {
            v["mediaType"] = m.into();
        }
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn image_manifests() {
        let p = parse(&image(Some(OCI_MANIFEST)), Some(OCI_MANIFEST)).unwrap();
        assert_eq!(p.media_type, OCI_MANIFEST);
        assert!(!p.is_index);
        assert_eq!(p.refs(), vec![D1.to_string(), D2.to_string()]);
        // No mediaType in the body: the Content-Type says, or the fields do.
        let p = parse(&image(None), Some(DOCKER_MANIFEST)).unwrap();
        assert_eq!(p.media_type, DOCKER_MANIFEST);
        let p = parse(&image(None), Some("application/octet-stream")).unwrap();
        assert_eq!(p.media_type, OCI_MANIFEST);
        assert!(parse(&image(Some(OCI_MANIFEST)), Some(DOCKER_MANIFEST)).is_err());
    }

    #[test]
    fn indexes() {
        let v = serde_json::json!({"schemaVersion": 2, "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": D2, "size": 5, "platform": {"os": "linux", "architecture": "amd64"}}
        ]});
        let p = parse(&serde_json::to_vec(&v).unwrap(), None).unwrap();
        assert!(p.is_index);
        assert_eq!(p.media_type, OCI_INDEX);
        assert_eq!(p.refs(), vec![D2.to_string()]);
        assert!(p.manifests[0].platform.is_some());
    }

    #[test]
    fn refused() {
        for (body, ct) in [
            (&b"not json"[..], None),
            (b"[]", None),
            (b"{\"schemaVersion\": 1}", None),
            (b"{\"schemaVersion\": 2, \"mediaType\": \"text/plain\"}", None),
            (b"{\"schemaVersion\": 2, \"layers\": []}", Some(OCI_MANIFEST)),
            (b"{\"schemaVersion\": 2, \"config\": {\"digest\": \"sha256:x\", \"size\": 1}, \"layers\": []}", None),
            (b"{\"schemaVersion\": 2, \"mediaType\": \"application/vnd.oci.image.index.v1+json\"}", None),
        ] {
            assert!(parse(body, ct).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }
}
