//! Volumes: their kind (`use`, `name`, a legacy `reference`) and their ingress and egress
//! transfers.

use crate::diag::Pos;
use crate::model::*;
use crate::names::name_error;
use crate::yaml::{Entry, Node};

use super::prim::{child, index, scheme_of};
use super::schema::{TRANSFER, URI, VOLUME};
use super::Cx;

impl Cx<'_> {
    pub(super) fn volume(&mut self, e: &Entry, path: &str) -> Option<Volume> {
        self.entry_name(e, path);
        let f = self.fields(&e.value, path, e.key_pos, &VOLUME)?;
        let mut provisioner = None;
        let name = f
            .get("name")
            .and_then(|n| self.nonempty(n, &f.child("name")));
        let mut kind = VolumeKind::Ephemeral;
        let mut made_on_use = false;
        let sources: Vec<&str> = ["use", "reference", "type"]
            .into_iter()
            .filter(|k| f.get(k).is_some())
            .collect();
        if sources.len() > 1 {
            let msg = format!(
                "`{}` and `{}` are both set; say what the volume is once",
                sources[0], sources[1]
            );
            self.err(f.key_pos(sources[1]), path, msg);
            return None;
        }
        if let Some(n) = f.get("use") {
            let u = self.nonempty(n, &f.child("use"))?;
            match u.as_str() {
                "ephemeral" => {}
                "persistent" => match &name {
                    Some(nm) => {
                        kind = VolumeKind::Persistent {
                            scope: Scope::User,
                            name: nm.clone(),
                        }
                    }
                    None => {
                        self.err(
                            f.key_pos("use"),
                            path,
                            "a persistent volume needs `name`: the volume that outlives the workflow",
                        );
                        return None;
                    }
                },
                other => {
                    provisioner = Some(other.to_string());
                    if let Some(nm) = &name {
                        kind = VolumeKind::Persistent {
                            scope: Scope::User,
                            name: nm.clone(),
                        };
                    }
                }
            }
        } else if let Some(n) = f.get("reference") {
            let r = self.string(n, &f.child("reference"))?;
            let (k, prov) = self.reference(&r, n.pos, &f.child("reference"))?;
            made_on_use = matches!(k, VolumeKind::Persistent { .. });
            kind = k;
            provisioner = prov;
        } else if let Some(n) = f.get("type") {
            let t = self.enum_value(
                n,
                &f.child("type"),
                &[("EPHEMERAL", 0u8), ("HOST", 1u8)],
                true,
            )?;
            if t == 1 {
                let Some(pn) = f.get("path") else {
                    self.err(f.key_pos("type"), path, "a HOST volume needs `path`");
                    return None;
                };
                let p = self.string(pn, &f.child("path"))?;
                if !self.abs_path(&p, pn.pos, &f.child("path"), "host path") {
                    return None;
                }
                kind = VolumeKind::Host { path: p };
            }
        }
        if f.get("path").is_some() && !matches!(kind, VolumeKind::Host { .. }) {
            self.err(
                f.key_pos("path"),
                &f.child("path"),
                "`path` is only for the deprecated `type: HOST` volumes",
            );
        }
        if let VolumeKind::Persistent { name: nm, .. } = &kind {
            if let Some(msg) = name_error(nm) {
                let at = ["name", "reference", "use"]
                    .into_iter()
                    .find(|k| f.get(k).is_some())
                    .unwrap_or("name");
                self.err(f.get(at).map_or(e.key_pos, |n| n.pos), &f.child(at), msg);
            }
        }
        // The catalog's `fds` writes `name:` beside `reference: volume://user/ephemeral`: a
        // v1 leftover (the volume's key again) that Fuzzball ignores, and so does Gantry.
        if name.is_some() && kind == VolumeKind::Ephemeral && f.get("reference").is_none() {
            self.err(
                f.key_pos("name"),
                &f.child("name"),
                "an ephemeral volume has no `name`; use `use: persistent` for a named volume",
            );
        }
        let size = f.get("size").and_then(|n| self.size(n, &f.child("size")));
        let annotations = f
            .get("annotations")
            .map(|n| self.string_map(n, &f.child("annotations")))
            .unwrap_or_default();
        let ingress = f
            .get("ingress")
            .map(|n| self.transfers(n, &f.child("ingress"), true))
            .unwrap_or_default();
        let egress = f
            .get("egress")
            .map(|n| self.transfers(n, &f.child("egress"), false))
            .unwrap_or_default();
        Some(Volume {
            name: e.key.clone(),
            kind,
            provisioner,
            size,
            annotations,
            made_on_use,
            ingress,
            egress,
            pos: e.key_pos,
        })
    }

    /// The legacy `volume://SCOPE/CLASS[/NAME]`.
    pub(super) fn reference(
        &mut self,
        r: &str,
        pos: Pos,
        path: &str,
    ) -> Option<(VolumeKind, Option<String>)> {
        let bad = |cx: &mut Self, why: &str| {
            let msg = format!(
                "`{r}` is not a volume reference: {why}; write `volume://user/ephemeral` or \
                 `volume://SCOPE/persistent/NAME`"
            );
            cx.err(pos, path, msg);
            None
        };
        let Some(rest) = r.strip_prefix("volume://") else {
            return bad(self, "it must start with `volume://`");
        };
        let parts: Vec<&str> = rest.split('/').collect();
        if parts.len() < 2 || parts.len() > 3 || parts.iter().any(|p| p.is_empty()) {
            return bad(
                self,
                "expected `volume://SCOPE/CLASS` or `volume://SCOPE/CLASS/NAME`",
            );
        }
        let scope = match parts[0] {
            "user" => Scope::User,
            "group" | "account" => Scope::Group,
            // Fuzzball has no organization-wide volumes (its storage classes are scoped to
            // users or groups), and neither does Gantry.
            other => {
                let msg = format!(
                    "unknown volume scope `{other}` in `{r}`; use `user` or `group` (or `account`)"
                );
                self.err(pos, path, msg);
                return None;
            }
        };
        let name = parts.get(2).map(|s| s.to_string());
        match parts[1] {
            // An ephemeral volume's name comes from its workflow: Fuzzball ignores a suffix.
            "ephemeral" => Some((VolumeKind::Ephemeral, None)),
            "persistent" => Some((
                VolumeKind::Persistent {
                    scope,
                    name: name.unwrap_or_else(|| "default".into()),
                },
                None,
            )),
            class => {
                let kind = match name {
                    Some(name) => VolumeKind::Persistent { scope, name },
                    None => VolumeKind::Ephemeral,
                };
                Some((kind, Some(class.to_string())))
            }
        }
    }

    pub(super) fn transfers(&mut self, node: &Node, path: &str, ingress: bool) -> Vec<Transfer> {
        let mut out = Vec::new();
        for (i, item) in self.seq(node, path).iter().enumerate() {
            let p = index(path, i);
            let Some(f) = self.fields(item, &p, item.pos, &TRANSFER) else {
                continue;
            };
            let source = f
                .get("source")
                .and_then(|n| self.transfer_uri(n, &f.child("source"), f.key_pos("source")));
            let destination = f.get("destination").and_then(|n| {
                self.transfer_uri(n, &f.child("destination"), f.key_pos("destination"))
            });
            let policy = f.get("policy").map(|n| {
                self.policy(n, &f.child("policy"), f.key_pos("policy"))
                    .finish()
            });
            for key in ["source", "destination"] {
                if f.get(key).is_none() {
                    let msg = format!("missing `{key}`");
                    self.err(item.pos, &p, msg);
                }
            }
            let (Some((source, spos)), Some((destination, dpos))) = (source, destination) else {
                continue;
            };
            // Inside the volume the other end is a `file://` path.
            let (inside, inside_pos, inside_key) = if ingress {
                (&destination, dpos, "destination")
            } else {
                (&source, spos, "source")
            };
            if scheme_of(&inside.uri) != Some("file") {
                let msg = format!(
                    "the {inside_key} of {} is a path in the volume; write `file://PATH`",
                    if ingress { "an ingress" } else { "an egress" }
                );
                self.err(inside_pos, &child(&f.child(inside_key), "uri"), msg);
                continue;
            }
            // `file://PATH` and `file:///PATH` both mean PATH below the volume's root; one
            // that leaves it (or names the root itself) is refused here, and the agent
            // resolves it beneath the volume again when it writes.
            let in_volume = inside
                .uri
                .trim_start_matches("file://")
                .trim_start_matches('/');
            if in_volume.split('/').all(|seg| seg.is_empty() || seg == ".")
                || in_volume.split('/').any(|seg| seg == "..")
                || in_volume.contains('\0')
            {
                let msg = format!(
                    "`{}` must name a path below the volume's root (no `..`)",
                    inside.uri
                );
                self.err(inside_pos, &child(&f.child(inside_key), "uri"), msg);
                continue;
            }
            if ingress {
                if let Some(name) = source.uri.strip_prefix("file://") {
                    self.file_ref(name, spos, &child(&f.child("source"), "uri"));
                }
            }
            out.push(Transfer {
                source,
                destination,
                policy,
                pos: item.pos,
            });
        }
        out
    }

    pub(super) fn transfer_uri(
        &mut self,
        node: &Node,
        path: &str,
        owner: Pos,
    ) -> Option<(UriSpec, Pos)> {
        let f = self.fields(node, path, owner, &URI)?;
        let Some(u) = f.get("uri") else {
            self.err(owner, path, "missing `uri`");
            return None;
        };
        let uri = self.nonempty(u, &f.child("uri"))?;
        if scheme_of(&uri).is_none() {
            let msg =
                format!("`{uri}` is not a URI; write `SCHEME://...` (https://, s3://, file://)");
            self.err(u.pos, &f.child("uri"), msg);
            return None;
        }
        Some((self.uri_extras(&f, uri), u.pos))
    }
}
