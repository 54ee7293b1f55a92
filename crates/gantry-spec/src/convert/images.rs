//! Images: a step's `image` (a URI, or an `images` recipe to build), URIs with their secrets,
//! and the `images` recipes.

use std::collections::BTreeMap;

use crate::diag::Pos;
use crate::model::*;
use crate::yaml::{Entry, Kind, Node};

use super::prim::{child, did_you_mean, listing, scheme_of, Fields};
use super::schema::{IMAGE, IMAGE_RECIPE};
use super::Cx;

impl Cx<'_> {
    pub(super) fn image_ref(&mut self, node: &Node, path: &str, owner: Pos) -> Option<ImageRef> {
        if let Kind::Scalar(s) = &node.kind {
            if !node.is_null() {
                let msg = format!(
                    "expected a mapping; write `image: {{uri: {}}}`",
                    if s.text.contains("://") {
                        s.text.clone()
                    } else {
                        format!("docker://{}", s.text)
                    }
                );
                self.err(node.pos, path, msg);
                return None;
            }
        }
        let f = self.fields(node, path, owner, &IMAGE)?;
        if let Some(b) = f.get("build") {
            if let Some(k) = [
                "uri",
                "secret",
                "secrets",
                "decryption-secret",
                "cache",
                "cache-ttl",
            ]
            .into_iter()
            .find(|k| f.get(k).is_some())
            {
                let msg =
                    format!("`build` and `{k}` are both set; an image is either built or pulled");
                self.err(f.key_pos(k), path, msg);
                return None;
            }
            let name = self.string(b, &f.child("build"))?;
            if !self.names.images.contains(&name) {
                let msg = format!(
                    "image `{name}` is not defined under `images`{}; images: {}",
                    did_you_mean(&name, &self.names.images),
                    listing(&self.names.images)
                );
                self.err(b.pos, &f.child("build"), msg);
                return None;
            }
            return Some(ImageRef::Build(name));
        }
        let Some(u) = f.get("uri") else {
            self.err(
                owner,
                path,
                "missing `uri` (or Gantry's `build`); write `image: {uri: docker://...}`",
            );
            return None;
        };
        let uri = self.image_uri(u, &f.child("uri"), &["docker", "oras", "oci"])?;
        let spec = self.uri_extras(&f, uri);
        Some(ImageRef::Uri {
            uri: spec.uri,
            secret: spec.secret,
            secrets: spec.secrets,
            decryption_secret: spec.decryption_secret,
            cache: spec.cache,
            cache_ttl: spec.cache_ttl,
        })
    }

    pub(super) fn image_uri(
        &mut self,
        node: &Node,
        path: &str,
        schemes: &[&str],
    ) -> Option<String> {
        let uri = self.nonempty(node, path)?;
        let allowed = schemes
            .iter()
            .map(|s| format!("{s}://"))
            .collect::<Vec<_>>()
            .join(", ");
        match scheme_of(&uri) {
            Some(s) if schemes.contains(&s) => Some(uri),
            Some(s) => {
                let msg = format!("unsupported image URI scheme `{s}://`; use {allowed}");
                self.err(node.pos, path, msg);
                None
            }
            None => {
                let msg = format!(
                    "image URI `{uri}` has no scheme; write `docker://{uri}` (schemes: {allowed})"
                );
                self.err(node.pos, path, msg);
                None
            }
        }
    }

    /// The access fields a URI may carry beside `uri`.
    pub(super) fn uri_extras(&mut self, f: &Fields, uri: String) -> UriSpec {
        let secret = f
            .get("secret")
            .and_then(|n| self.secret_uri(n, &f.child("secret")));
        let secrets = f
            .get("secrets")
            .map(|n| self.string_map(n, &f.child("secrets")))
            .unwrap_or_default();
        let decryption_secret = f
            .get("decryption-secret")
            .and_then(|n| self.secret_uri(n, &f.child("decryption-secret")));
        let cache = f.get("cache").and_then(|n| {
            self.enum_value(
                n,
                &f.child("cache"),
                &[
                    ("once", CachePolicy::Once),
                    ("changed", CachePolicy::Changed),
                    ("never", CachePolicy::Never),
                ],
                true,
            )
        });
        let cache_ttl = f
            .get("cache-ttl")
            .and_then(|n| self.uint(n, &f.child("cache-ttl"), 0, u64::MAX));
        UriSpec {
            uri,
            secret,
            secrets,
            decryption_secret,
            cache,
            cache_ttl,
        }
    }

    pub(super) fn image_recipe(&mut self, e: &Entry, path: &str) -> Option<ImageRecipe> {
        self.entry_name(e, path);
        let f = self.fields(&e.value, path, e.key_pos, &IMAGE_RECIPE)?;
        let from = match f.get("from") {
            Some(n) => self.image_uri(n, &f.child("from"), &["docker", "oci"]),
            None => {
                self.err(
                    e.key_pos,
                    path,
                    "missing `from`, the base image (`docker://...`)",
                );
                None
            }
        };
        let mut files = BTreeMap::new();
        if let Some(n) = f.get("files") {
            let fp = f.child("files");
            for fe in self.map_entries(n, &fp) {
                let p = child(&fp, &fe.key);
                let ok = self.abs_path(&fe.key, fe.key_pos, &p, "file destination");
                let Some(v) = self.string(&fe.value, &p) else {
                    continue;
                };
                let Some(name) = v.strip_prefix("file://") else {
                    let msg = format!("`{v}` is not a file reference; write `file://NAME` naming a top-level file");
                    self.err(fe.value.pos, &p, msg);
                    continue;
                };
                self.file_ref(name, fe.value.pos, &p);
                if ok {
                    files.insert(fe.key.clone(), name.to_string());
                }
            }
        }
        let run = f
            .get("run")
            .map(|n| self.strings(n, &f.child("run")))
            .unwrap_or_default();
        let env = f
            .get("env")
            .map(|n| {
                self.env(n, &f.child("env"))
                    .into_iter()
                    .map(|v| match v.value {
                        EnvValue::Plain(s) | EnvValue::Secret(s) => format!("{}={}", v.name, s),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let scope = f
            .get("scope")
            .and_then(|n| {
                self.enum_value(
                    n,
                    &f.child("scope"),
                    &[("user", ImageScope::User), ("group", ImageScope::Group)],
                    true,
                )
            })
            .unwrap_or(ImageScope::User);
        Some(ImageRecipe {
            name: e.key.clone(),
            from: from?,
            files,
            run,
            env,
            scope,
            pos: e.key_pos,
        })
    }
}

impl ImageRef {
    pub(super) fn invalid() -> ImageRef {
        ImageRef::Uri {
            uri: String::new(),
            secret: None,
            secrets: BTreeMap::new(),
            decryption_secret: None,
            cache: None,
            cache_ttl: None,
        }
    }
}
