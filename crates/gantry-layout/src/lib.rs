//! A crate's module graph, read from its sources as text: which module refers to which, through
//! `use` lines and through paths in code (`crate::a::b`, `super::c`, a child's name), with
//! re-exports (`pub use`) followed to where the item lives.
//!
//! The rule it serves: no import circle in any crate. A module's own file (`mod.rs`, `lib.rs`)
//! and its children are one room (the file is their façade: it may re-export them and they may
//! use what it declares), so a reference is counted between the two *siblings* under the
//! deepest module both lie in: `web/workflows.rs` using `crate::state::now_ms` is an edge
//! `web -> state` at the crate's top; `web/workflows.rs` using `super::session::X` is an edge
//! `workflows -> session` inside `web`. A circle among siblings of any room is an import circle.
//!
//! Written here rather than taken from `cargo modules`, which builds rust-analyzer's crates
//! (many minutes on this project's 2-core machines) for what is a text question; a `use` line
//! parser is enough because the project does not use `#[path]` for its modules (those are
//! skipped) or macros that expand to paths of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path from the crate root (`[]` is the root).
pub type ModPath = Vec<String>;

/// One crate's modules and who refers to whom.
#[derive(Debug, Default)]
pub struct Crate {
    pub name: String,
    /// Every module, with the file that holds it.
    pub modules: BTreeMap<ModPath, PathBuf>,
    /// Intra-crate references, resolved to the module that holds the item.
    pub refs: Vec<Ref>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ref {
    pub from: ModPath,
    pub to: ModPath,
    /// Where in `from`'s file (1-based line).
    pub line: usize,
}

/// An edge between two sibling modules inside `scope`, with the first reference that makes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub scope: ModPath,
    pub from: String,
    pub to: String,
    /// `file:line` of a reference that makes the edge.
    pub at: String,
}

/// A circle: sibling modules of `scope` that import each other, each reachable from every other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circle {
    pub scope: ModPath,
    pub members: Vec<String>,
}

impl Circle {
    /// Members as full module paths (`web::workflows`), the way a list of known circles names them.
    pub fn paths(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| {
                let mut p = self.scope.clone();
                p.push(m.clone());
                p.join("::")
            })
            .collect()
    }
}

/// Reads the crate whose root file is `root` (`src/lib.rs` or `src/main.rs`).
pub fn load(name: &str, root: &Path) -> std::io::Result<Crate> {
    let mut krate = Crate {
        name: name.to_string(),
        ..Default::default()
    };
    let mut texts: BTreeMap<ModPath, String> = BTreeMap::new();
    let mut todo = vec![(ModPath::new(), root.to_path_buf())];
    while let Some((path, file)) = todo.pop() {
        let text = strip(&fs::read_to_string(&file)?);
        for child in file_modules(&text) {
            let dir = module_dir(&file);
            let a = dir.join(format!("{child}.rs"));
            let b = dir.join(&child).join("mod.rs");
            let child_file = if a.exists() { a } else { b };
            if child_file.exists() {
                let mut p = path.clone();
                p.push(child);
                todo.push((p, child_file));
            }
        }
        krate.modules.insert(path.clone(), file);
        texts.insert(path, text);
    }
    // Re-exports first: `pub use x::Y;` in module M makes `M::Y` mean `x::Y`.
    let mut reexports: BTreeMap<(ModPath, String), ModPath> = BTreeMap::new();
    for (m, text) in &texts {
        for u in uses(text) {
            if !u.public {
                continue;
            }
            for p in u.paths {
                if let Some(abs) = absolute(&krate.modules, m, &p) {
                    let name = p
                        .alias
                        .clone()
                        .unwrap_or_else(|| p.segs.last().cloned().unwrap_or_default());
                    if name != "*" && name != "self" {
                        reexports.insert((m.clone(), name), abs);
                    }
                }
            }
        }
    }
    for (m, text) in &texts {
        let mut seen = BTreeSet::new();
        for (line, segs) in references(text) {
            let p = UsePath { segs, alias: None };
            let Some(abs) = absolute(&krate.modules, m, &p) else {
                continue;
            };
            let to = resolve(&krate.modules, &reexports, abs);
            if to != *m && seen.insert((to.clone(), line)) {
                krate.refs.push(Ref {
                    from: m.clone(),
                    to,
                    line,
                });
            }
        }
    }
    Ok(krate)
}

impl Crate {
    /// The edges between siblings, one per (scope, from, to), in order.
    pub fn edges(&self) -> Vec<Edge> {
        let mut out: BTreeMap<(ModPath, String, String), String> = BTreeMap::new();
        for r in &self.refs {
            let k = r.from.iter().zip(&r.to).take_while(|(a, b)| a == b).count();
            // A module and its own descendants are one room (see the crate's docs).
            if k == r.from.len() || k == r.to.len() {
                continue;
            }
            let file = self
                .modules
                .get(&r.from)
                .map(|f| short(f))
                .unwrap_or_default();
            out.entry((r.from[..k].to_vec(), r.from[k].clone(), r.to[k].clone()))
                .or_insert_with(|| format!("{file}:{}", r.line));
        }
        out.into_iter()
            .map(|((scope, from, to), at)| Edge {
                scope,
                from,
                to,
                at,
            })
            .collect()
    }

    /// Every circle among siblings (Tarjan's strongly connected components of more than one).
    pub fn circles(&self) -> Vec<Circle> {
        let mut by_scope: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for e in self.edges() {
            let g = by_scope.entry(e.scope).or_default();
            g.entry(e.from).or_default().insert(e.to.clone());
            g.entry(e.to).or_default();
        }
        let mut out = vec![];
        for (scope, graph) in by_scope {
            for members in strongly_connected(&graph) {
                if members.len() > 1 {
                    out.push(Circle {
                        scope: scope.clone(),
                        members,
                    });
                }
            }
        }
        out
    }

    /// One path of edges from `a` to `b` inside `scope`, to show how a circle closes.
    pub fn path(&self, scope: &ModPath, a: &str, b: &str) -> Option<Vec<Edge>> {
        let edges: Vec<Edge> = self
            .edges()
            .into_iter()
            .filter(|e| &e.scope == scope)
            .collect();
        let mut prev: BTreeMap<String, Edge> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([a.to_string()]);
        let mut seen = BTreeSet::from([a.to_string()]);
        while let Some(n) = queue.pop_front() {
            for e in edges.iter().filter(|e| e.from == n) {
                if seen.insert(e.to.clone()) {
                    prev.insert(e.to.clone(), e.clone());
                    if e.to == b {
                        let mut path = vec![e.clone()];
                        while path[0].from != a {
                            path.insert(0, prev[&path[0].from].clone());
                        }
                        return Some(path);
                    }
                    queue.push_back(e.to.clone());
                }
            }
        }
        None
    }
}

fn strongly_connected(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in &s.graph[v] {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = vec![];
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            comp.sort();
            s.out.push(comp);
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on_stack: BTreeSet::new(),
        out: vec![],
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// A file's path from the workspace's `crates/` on (the way a reader looks it up).
fn short(f: &Path) -> String {
    let s = f.display().to_string();
    match s.rfind("/crates/") {
        Some(i) => s[i + 1..].to_string(),
        None => s,
    }
}

/// The directory a file's child modules live in.
fn module_dir(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new("."));
    match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => parent.to_path_buf(),
        _ => parent.join(file.file_stem().unwrap_or_default()),
    }
}

/// `mod NAME;` declarations (file modules), leaving out those with a `#[path]` attribute.
fn file_modules(text: &str) -> Vec<String> {
    let mut out = vec![];
    let mut attrs_path = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("#[path") {
            attrs_path = true;
            continue;
        }
        if t.starts_with("#[") {
            continue;
        }
        let rest = t
            .strip_prefix("pub(crate) ")
            .or_else(|| t.strip_prefix("pub(super) "))
            .or_else(|| t.strip_prefix("pub "))
            .unwrap_or(t);
        if let Some(name) = rest.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            if !attrs_path {
                out.push(name.trim().to_string());
            }
        }
        attrs_path = false;
    }
    out
}

/// The text without comments, string and char literals (each replaced by spaces, keeping the
/// lines), and without inline `#[cfg(test)] mod NAME { ... }` blocks: tests may use anything
/// of the module they test.
pub fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && !ident_byte(b.get(i.wrapping_sub(1)).copied())
        {
            // Raw strings: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let end = find(b, j + 1, &close)
                .map(|e| e + close.len())
                .unwrap_or(b.len());
            for &x in &b[i..end] {
                blank(&mut out, x);
            }
            i = end;
        } else if c == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            for &x in &b[i..end] {
                blank(&mut out, x);
            }
            i = end;
        } else if c == b'\'' {
            // A char literal ('a', '\n', '\u{..}'), or a lifetime ('a), which stays.
            let lit_end = if b.get(i + 1) == Some(&b'\\') {
                find(b, i + 2, b"'").map(|e| e + 1)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 3)
            } else {
                None
            };
            match lit_end {
                Some(end) => {
                    for &x in &b[i..end] {
                        blank(&mut out, x);
                    }
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    drop_test_modules(&text)
}

fn ident_byte(c: Option<u8>) -> bool {
    c.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    (from..hay.len().saturating_sub(needle.len() - 1)).find(|&i| hay[i..].starts_with(needle))
}

fn drop_test_modules(text: &str) -> String {
    let mut out = text.to_string();
    let mut from = 0;
    while let Some(at) = out[from..].find("#[cfg(test)]").map(|a| a + from) {
        let after = at + "#[cfg(test)]".len();
        let rest = out[after..].trim_start();
        let rest = rest.strip_prefix("pub ").unwrap_or(rest);
        let Some(()) = rest.strip_prefix("mod ").and_then(|r| {
            let name_end = r.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
            r[name_end..].trim_start().starts_with('{').then_some(())
        }) else {
            from = after;
            continue;
        };
        let brace = after + out[after..].find('{').unwrap();
        let mut depth = 0;
        let mut end = out.len();
        for (k, ch) in out[brace..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = brace + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        // Same length in bytes, so the indices after it still hold.
        let blanked: String = out[at..end]
            .chars()
            .map(|c| {
                if c == '\n' {
                    "\n".to_string()
                } else {
                    " ".repeat(c.len_utf8())
                }
            })
            .collect();
        out.replace_range(at..end, &blanked);
        from = end;
    }
    out
}

/// One path of a `use` tree, e.g. `crate::a::B as C` is segs `[crate, a, B]`, alias `C`.
#[derive(Debug, Clone, PartialEq)]
struct UsePath {
    segs: Vec<String>,
    alias: Option<String>,
}

struct Use {
    public: bool,
    paths: Vec<UsePath>,
}

/// Every `use` item of the text, its tree expanded into paths.
fn uses(text: &str) -> Vec<Use> {
    let mut out = vec![];
    let toks = tokens(text);
    let mut i = 0;
    while i < toks.len() {
        if toks[i].1 == "use" {
            let public = i > 0 && (toks[i - 1].1 == "pub" || toks[i - 1].1 == ")");
            let mut j = i + 1;
            let mut paths = vec![];
            tree(&toks, &mut j, &[], &mut paths);
            out.push(Use { public, paths });
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// Parses a use tree at `toks[*j]` under `prefix`, up to (not past) `;`, `,` or `}`.
fn tree(toks: &[(usize, String)], j: &mut usize, prefix: &[String], out: &mut Vec<UsePath>) {
    let mut segs = prefix.to_vec();
    while *j < toks.len() {
        let t = toks[*j].1.as_str();
        match t {
            "::" => *j += 1,
            "{" => {
                *j += 1;
                while *j < toks.len() && toks[*j].1 != "}" {
                    tree(toks, j, &segs, out);
                    if *j < toks.len() && toks[*j].1 == "," {
                        *j += 1;
                    }
                }
                *j += 1;
                if *j < toks.len() && toks[*j].1 == ";" {
                    *j += 1;
                }
                return;
            }
            ";" => {
                *j += 1;
                out.push(UsePath { segs, alias: None });
                return;
            }
            "," | "}" => {
                out.push(UsePath { segs, alias: None });
                return;
            }
            "as" => {
                let alias = toks.get(*j + 1).map(|t| t.1.clone());
                *j += 2;
                out.push(UsePath { segs, alias });
                // Leave the terminator for the caller (`;` is consumed here).
                if *j < toks.len() && toks[*j].1 == ";" {
                    *j += 1;
                }
                return;
            }
            _ => {
                segs.push(t.to_string());
                *j += 1;
            }
        }
    }
}

/// Identifiers, `::` and punctuation, each with its line.
fn tokens(text: &str) -> Vec<(usize, String)> {
    let mut out = vec![];
    let b = text.as_bytes();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((line, text[s..i].to_string()));
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push((line, "::".into()));
            i += 2;
        } else {
            out.push((line, (c as char).to_string()));
            i += 1;
        }
    }
    out
}

/// Every path in the text (in `use` trees and in code) with its line: sequences
/// `a::b::c` of two or more segments, and single segments that a `use` brings in.
fn references(text: &str) -> Vec<(usize, Vec<String>)> {
    let toks = tokens(text);
    let mut out = vec![];
    let mut i = 0;
    while i < toks.len() {
        if toks[i].1 == "use" {
            let line = toks[i].0;
            let mut j = i + 1;
            let mut paths = vec![];
            tree(&toks, &mut j, &[], &mut paths);
            out.extend(paths.into_iter().map(|p| (line, p.segs)));
            i = j;
            continue;
        }
        let is_ident = |t: &str| {
            t.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
        };
        if is_ident(&toks[i].1)
            && toks.get(i + 1).is_some_and(|t| t.1 == "::")
            && (i == 0 || toks[i - 1].1 != "::")
        {
            let line = toks[i].0;
            let mut segs = vec![toks[i].1.clone()];
            let mut j = i + 1;
            while j + 1 < toks.len() && toks[j].1 == "::" && is_ident(&toks[j + 1].1) {
                segs.push(toks[j + 1].1.clone());
                j += 2;
            }
            out.push((line, segs));
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// The absolute path (from the crate root) a path written in module `m` names, if it is a
/// path into this crate: `crate::..`, `super::..`, `self::..`, or a child module's name.
fn absolute(modules: &BTreeMap<ModPath, PathBuf>, m: &ModPath, p: &UsePath) -> Option<ModPath> {
    let first = p.segs.first()?;
    let mut abs: ModPath;
    let mut rest = &p.segs[..];
    match first.as_str() {
        "crate" => {
            abs = vec![];
            rest = &rest[1..];
        }
        "self" => {
            abs = m.clone();
            rest = &rest[1..];
        }
        "super" => {
            abs = m.clone();
            while rest.first().is_some_and(|s| s == "super") {
                abs.pop();
                rest = &rest[1..];
            }
        }
        name => {
            let mut child = m.clone();
            child.push(name.to_string());
            if !modules.contains_key(&child) {
                return None;
            }
            abs = m.clone();
        }
    }
    abs.extend(rest.iter().cloned());
    Some(abs)
}

/// The module that holds what `abs` names: its longest prefix that is a module, after
/// following re-exports.
fn resolve(
    modules: &BTreeMap<ModPath, PathBuf>,
    reexports: &BTreeMap<(ModPath, String), ModPath>,
    mut abs: ModPath,
) -> ModPath {
    for _ in 0..8 {
        let mut k = abs.len();
        while k > 0 && !modules.contains_key(&abs[..k]) {
            k -= 1;
        }
        let m = abs[..k].to_vec();
        let Some(next) = abs.get(k) else {
            return m;
        };
        match reexports.get(&(m.clone(), next.clone())) {
            Some(target) if *target != abs[..=k] => {
                let mut t = target.clone();
                t.extend(abs[k + 1..].iter().cloned());
                abs = t;
            }
            _ => return m,
        }
    }
    abs
}

/// Every crate of a workspace's `crates/` directory with its root file: `src/lib.rs`, and
/// `src/main.rs` as a crate of its own (`NAME (bin)`) when both exist.
pub fn workspace_crates(crates_dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut out = vec![];
    let mut dirs: Vec<PathBuf> = fs::read_dir(crates_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Cargo.toml").exists())
        .collect();
    dirs.sort();
    for d in dirs {
        let name = d
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let lib = d.join("src/lib.rs");
        let bin = d.join("src/main.rs");
        match (lib.exists(), bin.exists()) {
            (true, true) => {
                out.push((name.clone(), lib));
                out.push((format!("{name} (bin)"), bin));
            }
            (true, false) => out.push((name, lib)),
            (false, true) => out.push((name, bin)),
            (false, false) => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        for (p, text) in files {
            let f = dir.join(p);
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(f, text).unwrap();
        }
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gantry-layout-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_circle_among_siblings_is_found_and_a_facade_is_not_one() {
        let d = tmp("circle");
        write(
            &d,
            &[
                (
                    "lib.rs",
                    "mod a;\nmod b;\nmod c;\npub mod web;\npub use a::Thing;\n",
                ),
                ("a.rs", "use crate::b::f;\npub struct Thing;\n"),
                ("b.rs", "pub fn f() { crate::c::g() }\n"),
                // Through the root's re-export: still c -> a.
                (
                    "c.rs",
                    "pub fn g() { let _ = crate::Thing; }\n// crate::b::f in a comment\n",
                ),
                (
                    "web/mod.rs",
                    "mod pages;\npub use pages::page;\npub struct Session;\n",
                ),
                (
                    "web/pages.rs",
                    "use super::Session;\npub fn page() { let _ = \"crate::a::x\"; }\n",
                ),
            ],
        );
        let k = load("t", &d.join("lib.rs")).unwrap();
        let circles = k.circles();
        assert_eq!(circles.len(), 1, "{circles:?}");
        assert_eq!(circles[0].paths(), vec!["a", "b", "c"]);
        // `web` and `web::pages` refer to each other, as a façade and its child: no circle,
        // and the comment and the string name nothing.
        assert!(
            !k.edges().iter().any(|e| e.from == "web" || e.to == "web"),
            "{:?}",
            k.edges()
        );
        let path = k.path(&vec![], "a", "c").unwrap();
        assert_eq!(
            path.iter().map(|e| e.to.as_str()).collect::<Vec<_>>(),
            vec!["b", "c"]
        );
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn nested_rooms_and_grouped_uses() {
        let d = tmp("nested");
        write(
            &d,
            &[
                ("lib.rs", "pub mod http;\nmod services;\n"),
                ("http/mod.rs", "mod api;\nmod auth;\n"),
                ("http/api.rs", "use super::{auth::{self, Caller}, super::services as svc};\nfn x() { svc::run() }\n"),
                ("http/auth.rs", "pub struct Caller;\n#[cfg(test)]\nmod tests {\n    use crate::http::api;\n}\n"),
                ("services.rs", "pub fn run() {}\n"),
            ],
        );
        let k = load("t", &d.join("lib.rs")).unwrap();
        let edges: Vec<(String, String, String)> = k
            .edges()
            .into_iter()
            .map(|e| (e.scope.join("::"), e.from, e.to))
            .collect();
        assert_eq!(
            edges,
            vec![
                ("".into(), "http".into(), "services".into()),
                ("http".into(), "api".into(), "auth".into()),
            ]
        );
        assert!(k.circles().is_empty());
        let _ = fs::remove_dir_all(&d);
    }
}
