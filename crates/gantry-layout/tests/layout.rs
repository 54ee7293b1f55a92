//! The layout rules of ARCHITECTURE.md ("Invariants: layout"), checked on the sources.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// Import circles allowed to exist, as `crate: member, member, ...`: none. A circle found
/// fails the test with the path that closes it; break it (move what both sides need below
/// them) rather than list it here.
const KNOWN: &[&str] = &[];

#[test]
fn no_crate_has_an_import_circle() {
    let mut found = BTreeSet::new();
    let mut report = String::new();
    for (name, root) in gantry_layout::workspace_crates(&crates_dir()).unwrap() {
        let k = gantry_layout::load(&name, &root).unwrap();
        // A root that declares modules in files (`mod name;`) must have them read, else the
        // reader failed quietly; a one-file crate has only its root.
        let text = std::fs::read_to_string(&root).unwrap();
        let declares = text.lines().any(|l| {
            let l = l.trim();
            ["mod ", "pub mod ", "pub(crate) mod "]
                .iter()
                .any(|p| l.starts_with(p))
                && l.ends_with(';')
        });
        assert!(k.modules.len() > 1 || !declares, "{name}: no modules read");
        for c in k.circles() {
            let line = format!("{name}: {}", c.paths().join(", "));
            report.push_str(&format!("\n  {line}"));
            let a = &c.members[0];
            for b in &c.members[1..] {
                for (x, y) in [(a, b), (b, a)] {
                    if let Some(p) = k.path(&c.scope, x, y) {
                        let hops: Vec<String> = p
                            .iter()
                            .map(|e| format!("{} -> {} ({})", e.from, e.to, e.at))
                            .collect();
                        report.push_str(&format!("\n      {}", hops.join(", ")));
                    }
                }
            }
            found.insert(line);
        }
    }
    let known: BTreeSet<String> = KNOWN
        .iter()
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let new: Vec<&String> = found.difference(&known).collect();
    let gone: Vec<&String> = known.difference(&found).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "import circles changed.\n  new (break them: see each path below): {new:?}\n  \
         gone or changed (update KNOWN in this file): {gone:?}\nall circles:{report}"
    );
}

/// `gantry-server`'s layers (ARCHITECTURE.md, "Layers of the server"), lowest first. A module
/// may use modules of its own layer or below, never above; every module is in one.
const SERVER_LAYERS: &[(&str, &[&str])] = &[
    (
        "leaves",
        &[
            "error", "clock", "caller", "link", "cache", "views", "metrics", "routes", "private",
            "examples", "news", "group", "lease",
        ],
    ),
    (
        "areas",
        &[
            "endpoints",
            "holds",
            "secrets",
            "volumes",
            "builds",
            "placement",
            "netpolicy",
            "logs",
        ],
    ),
    ("state", &["state"]),
    ("use cases", &["services"]),
    ("request reading", &["auth"]),
    ("drivers", &["control", "agents"]),
    ("adapters", &["http", "web", "mcp", "registry"]),
    ("wiring", &["wiring"]),
];

#[test]
fn the_server_imports_only_downwards() {
    let root = crates_dir().join("gantry-server/src/lib.rs");
    let k = gantry_layout::load("gantry-server", &root).unwrap();
    let rank = |m: &str| SERVER_LAYERS.iter().position(|(_, ms)| ms.contains(&m));
    let top: Vec<&String> = k
        .modules
        .keys()
        .filter(|p| p.len() == 1)
        .map(|p| &p[0])
        .collect();
    let unplaced: Vec<&&String> = top.iter().filter(|m| rank(m).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "modules in no layer (add them to SERVER_LAYERS and ARCHITECTURE.md): {unplaced:?}"
    );
    let upward: Vec<String> = k
        .edges()
        .into_iter()
        .filter(|e| e.scope.is_empty())
        .filter(|e| rank(&e.from) < rank(&e.to))
        .map(|e| {
            let layer = |m: &str| SERVER_LAYERS[rank(m).unwrap()].0;
            format!(
                "{} ({}) -> {} ({}) at {}",
                e.from,
                layer(&e.from),
                e.to,
                layer(&e.to),
                e.at
            )
        })
        .collect();
    assert!(
        upward.is_empty(),
        "imports that go up a layer:\n  {}",
        upward.join("\n  ")
    );
}
