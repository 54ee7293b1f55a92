//! `version: v1` files, read as v4.
//!
//! The rewrite works on the YAML tree, before conversion, so that every
//! diagnostic about an upgraded file still points at the text the user wrote.
//! What differs between v1 and v4, as the vendor's docs and API schemas state it:
//!
//! - a mount is keyed by its volume's name with the path under `location`
//!   (`data: {location: /data}`); in v4 it is keyed by the path
//!   (`/data: {volume: data}`);
//! - a volume's `name` is only a copy of its key in v1, while in v4 it names
//!   an existing persistent volume, so it is dropped rather than carried over;
//! - `type: EPHEMERAL|HOST` and `requires` are read by the v4 converter as
//!   they are (both deprecated, both still accepted).

use crate::diag::Diags;
use crate::yaml::{Entry, Kind, Node};
use std::collections::HashMap;

/// Rewrites a v1 tree into v4 in place; false (and the tree untouched) for
/// any other version.
pub(crate) fn upgrade(root: &mut Node, diags: &mut Diags) -> bool {
    let Kind::Map(top) = &mut root.kind else {
        return false;
    };
    let is_v1 = top
        .iter()
        .any(|e| e.key == "version" && matches!(&e.value.kind, Kind::Scalar(s) if s.text == "v1"));
    if !is_v1 {
        return false;
    }
    for e in top.iter_mut() {
        match e.key.as_str() {
            "version" => e.value = Node::scalar(e.value.pos, "v4", true),
            "volumes" => each_value(&mut e.value, |_, v| drop_key(v, "name")),
            "jobs" | "services" => {
                let section = e.key.clone();
                each_value(&mut e.value, |name, step| {
                    let path = format!("{section}.{name}.mounts");
                    rewrite_mounts_in(step, &path, diags);
                });
            }
            "defaults" => {
                rewrite_mounts_in(&mut e.value, "defaults.mounts", diags);
                if let Kind::Map(d) = &mut e.value.kind {
                    for de in d
                        .iter_mut()
                        .filter(|de| de.key == "job" || de.key == "service")
                    {
                        let path = format!("defaults.{}.mounts", de.key);
                        rewrite_mounts_in(&mut de.value, &path, diags);
                    }
                }
            }
            _ => {}
        }
    }
    true
}

fn each_value(node: &mut Node, mut f: impl FnMut(&str, &mut Node)) {
    if let Kind::Map(entries) = &mut node.kind {
        for e in entries.iter_mut() {
            f(&e.key, &mut e.value);
        }
    }
}

fn drop_key(node: &mut Node, key: &str) {
    if let Kind::Map(entries) = &mut node.kind {
        entries.retain(|e| e.key != key);
    }
}

/// The `mounts` of a step or of `defaults`, flipped from v1's
/// `VOLUME: {location: PATH}` to v4's `PATH: {volume: VOLUME}`. A mount
/// already written the v4 way is left as it is.
fn rewrite_mounts_in(owner: &mut Node, path: &str, diags: &mut Diags) {
    let Kind::Map(fields) = &mut owner.kind else {
        return;
    };
    let Some(mounts) = fields.iter_mut().find(|e| e.key == "mounts") else {
        return;
    };
    let Kind::Map(entries) = &mut mounts.value.kind else {
        return;
    };
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut out = Vec::with_capacity(entries.len());
    for e in std::mem::take(entries) {
        let Kind::Map(inner) = &e.value.kind else {
            out.push(e);
            continue;
        };
        let Some(loc) = inner.iter().find(|x| x.key == "location") else {
            out.push(e);
            continue;
        };
        let target = match &loc.value.kind {
            Kind::Scalar(s) if !loc.value.is_null() => s.text.clone(),
            _ => {
                let msg = format!(
                    "`location` of the v1 mount of volume `{}` is {}; write the container path, \
                     `location: /data`",
                    e.key,
                    loc.value.describe()
                );
                diags.err(loc.value.pos, &format!("{path}.{}", e.key), msg);
                continue;
            }
        };
        if let Some(other) = seen.get(&target) {
            let msg = format!(
                "volumes `{other}` and `{}` are both mounted at `{target}`; a path holds one volume",
                e.key
            );
            diags.err(loc.value.pos, &format!("{path}.{}", e.key), msg);
            continue;
        }
        seen.insert(target.clone(), e.key.clone());
        // The volume's name stays where the file wrote it, so a mount of an
        // undefined volume is reported at its key; the path at its `location`.
        let mut value = vec![Entry {
            key: "volume".into(),
            key_pos: e.key_pos,
            value: Node::scalar(e.key_pos, &e.key, false),
        }];
        // Anything else v1 put beside `location` is kept, so that the v4
        // converter names it as an unknown key instead of it vanishing.
        value.extend(inner.iter().filter(|x| x.key != "location").cloned());
        out.push(Entry {
            key: target,
            key_pos: loc.value.pos,
            value: Node::map(e.value.pos, value),
        });
    }
    *entries = out;
}
