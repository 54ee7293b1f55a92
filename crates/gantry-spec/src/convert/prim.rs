//! The field readers every part of the conversion uses: a node as a string, number, list,
//! path or reference, each recording a diagnostic (and returning nothing) when it is not one,
//! and the field paths those diagnostics name.

use std::collections::{BTreeMap, BTreeSet};

use crate::diag::Pos;
use crate::names::reserved_target_error;
use crate::suggest::suggest;
use crate::units::{parse_duration, parse_size};
use crate::yaml::{parse_bool, parse_int, Entry, Kind, Node};

use super::Cx;

/// The field path of `key` under `path`: `jobs.a.image`, or
/// `jobs.a.mounts["/data"]` for keys that are not plain names.
pub(crate) fn child(path: &str, key: &str) -> String {
    let simple = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if simple {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    } else {
        format!("{path}[{key:?}]")
    }
}

pub(super) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// The entries of one mapping, by canonical key.
pub(super) struct Fields<'a> {
    pub(super) entries: Vec<(&'static str, &'a Entry)>,
    pub(super) path: String,
    /// Where the mapping is named (its key in the parent), for "missing key"
    /// messages.
    pub(super) owner: Pos,
}

impl<'a> Fields<'a> {
    pub(super) fn get(&self, key: &str) -> Option<&'a Node> {
        self.entry(key).map(|e| &e.value)
    }

    pub(super) fn entry(&self, key: &str) -> Option<&'a Entry> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, e)| *e)
    }

    pub(super) fn child(&self, key: &str) -> String {
        child(&self.path, key)
    }

    pub(super) fn key_pos(&self, key: &str) -> Pos {
        self.entry(key).map_or(self.owner, |e| e.key_pos)
    }
}

pub(super) fn listing(set: &BTreeSet<String>) -> String {
    if set.is_empty() {
        "(none)".into()
    } else {
        set.iter()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

pub(super) fn did_you_mean(word: &str, set: &BTreeSet<String>) -> String {
    match suggest(word, set.iter().map(String::as_str)) {
        Some(s) => format!(" (did you mean `{s}`?)"),
        None => String::new(),
    }
}

pub(super) fn scheme_of(uri: &str) -> Option<&str> {
    let (scheme, rest) = uri.split_once("://")?;
    if scheme.is_empty()
        || rest.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-' || b == b'.')
    {
        return None;
    }
    Some(scheme)
}

impl Cx<'_> {
    pub(super) fn err(&mut self, pos: Pos, path: &str, msg: impl AsRef<str>) {
        self.d.err(pos, path, msg);
    }

    pub(super) fn expected(&mut self, node: &Node, path: &str, what: &str) {
        let msg = format!("expected {what}, found {}", node.describe());
        self.err(node.pos, path, msg);
    }

    /// The entries of a mapping whose keys are free names.
    pub(super) fn map_entries<'a>(&mut self, node: &'a Node, path: &str) -> &'a [Entry] {
        match &node.kind {
            Kind::Map(entries) => entries,
            _ if node.is_null() => &[],
            _ => {
                self.expected(node, path, "a mapping");
                &[]
            }
        }
    }

    pub(super) fn seq<'a>(&mut self, node: &'a Node, path: &str) -> &'a [Node] {
        match &node.kind {
            Kind::Seq(items) => items,
            _ if node.is_null() => &[],
            _ => {
                self.expected(node, path, "a list");
                &[]
            }
        }
    }

    pub(super) fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.kind {
            Kind::Scalar(s) if !node.is_null() => Some(s.text.clone()),
            _ => {
                self.expected(node, path, "a string");
                None
            }
        }
    }

    pub(super) fn nonempty(&mut self, node: &Node, path: &str) -> Option<String> {
        let s = self.string(node, path)?;
        if s.trim().is_empty() {
            self.err(node.pos, path, "must not be empty");
            return None;
        }
        Some(s)
    }

    pub(super) fn uint(&mut self, node: &Node, path: &str, min: u64, max: u64) -> Option<u64> {
        let value = match &node.kind {
            Kind::Scalar(s) if !node.is_null() => parse_int(s.text.trim()),
            _ => None,
        };
        let Some(v) = value else {
            self.expected(node, path, "a whole number");
            return None;
        };
        if v < i128::from(min) || v > i128::from(max) {
            let msg = if max == u64::from(u32::MAX) || max == u64::MAX {
                format!("{v} is out of range; it must be at least {min}")
            } else {
                format!("{v} is out of range; it must be between {min} and {max}")
            };
            self.err(node.pos, path, msg);
            return None;
        }
        u64::try_from(v).ok()
    }

    pub(super) fn u32_in(&mut self, node: &Node, path: &str, min: u32) -> Option<u32> {
        self.uint(node, path, u64::from(min), u64::from(u32::MAX))
            .and_then(|v| u32::try_from(v).ok())
    }

    pub(super) fn port(&mut self, node: &Node, path: &str) -> Option<u16> {
        self.uint(node, path, 1, 65535)
            .and_then(|v| u16::try_from(v).ok())
    }

    pub(super) fn boolean(&mut self, node: &Node, path: &str) -> Option<bool> {
        match &node.kind {
            Kind::Scalar(s) if s.plain => {
                if let Some(b) = parse_bool(&s.text) {
                    return Some(b);
                }
            }
            _ => {}
        }
        self.expected(node, path, "true or false");
        None
    }

    pub(super) fn string_list(&mut self, node: &Node, path: &str) -> Vec<(String, Pos)> {
        let mut out = Vec::new();
        if let Kind::Scalar(_) = node.kind {
            if !node.is_null() {
                self.expected(node, path, "a list of strings");
                return out;
            }
        }
        for (i, item) in self.seq(node, path).iter().enumerate() {
            if let Some(s) = self.string(item, &index(path, i)) {
                out.push((s, item.pos));
            }
        }
        out
    }

    pub(super) fn strings(&mut self, node: &Node, path: &str) -> Vec<String> {
        self.string_list(node, path)
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    }

    pub(super) fn string_map(&mut self, node: &Node, path: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for e in self.map_entries(node, path) {
            if let Some(v) = self.string(&e.value, &child(path, &e.key)) {
                out.insert(e.key.clone(), v);
            }
        }
        out
    }

    pub(super) fn enum_value<T: Copy>(
        &mut self,
        node: &Node,
        path: &str,
        choices: &[(&str, T)],
        case_insensitive: bool,
    ) -> Option<T> {
        let text = self.string(node, path)?;
        let found = choices.iter().find(|(name, _)| {
            if case_insensitive {
                name.eq_ignore_ascii_case(text.trim())
            } else {
                *name == text
            }
        });
        match found {
            Some((_, v)) => Some(*v),
            None => {
                let names: Vec<String> = choices.iter().map(|(n, _)| format!("`{n}`")).collect();
                let msg = format!("`{text}` is not one of {}", names.join(", "));
                self.err(node.pos, path, msg);
                None
            }
        }
    }

    pub(super) fn abs_path(&mut self, text: &str, pos: Pos, path: &str, what: &str) -> bool {
        if !text.starts_with('/') {
            let msg = format!("{what} `{text}` must be an absolute path (start with `/`)");
            self.err(pos, path, msg);
            return false;
        }
        if text.split('/').any(|seg| seg == "..") {
            let msg = format!("{what} `{text}` must not contain `..`");
            self.err(pos, path, msg);
            return false;
        }
        true
    }

    /// A path in a step's container that a volume or a file goes to: absolute, and not one
    /// of the container's own (see `names::reserved_target_error`).
    pub(super) fn container_target(
        &mut self,
        text: &str,
        pos: Pos,
        path: &str,
        what: &str,
    ) -> bool {
        if !self.abs_path(text, pos, path, what) {
            return false;
        }
        match reserved_target_error(text) {
            Some(why) => {
                self.err(pos, path, format!("{what} {why}"));
                false
            }
            None => true,
        }
    }

    pub(super) fn secret_uri(&mut self, node: &Node, path: &str) -> Option<String> {
        let s = self.string(node, path)?;
        match s.strip_prefix("secret://") {
            Some(rest) if !rest.is_empty() => Some(s),
            _ => {
                let msg = format!("`{s}` is not a secret reference; write `secret://SCOPE/NAME`");
                self.err(node.pos, path, msg);
                None
            }
        }
    }

    pub(super) fn size(&mut self, node: &Node, path: &str) -> Option<u64> {
        let text = self.string(node, path)?;
        match parse_size(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                self.err(node.pos, path, e);
                None
            }
        }
    }

    pub(super) fn duration(&mut self, node: &Node, path: &str) -> Option<std::time::Duration> {
        let text = self.string(node, path)?;
        match parse_duration(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                self.err(node.pos, path, e);
                None
            }
        }
    }

    pub(super) fn file_ref(&mut self, name: &str, pos: Pos, path: &str) {
        if !self.names.files.contains(name) {
            let msg = format!(
                "file `{name}` is not defined under the top-level `files`{}; files: {}",
                did_you_mean(name, &self.names.files),
                listing(&self.names.files)
            );
            self.err(pos, path, msg);
        }
    }
}
