//! `cargo run -p gantry-layout [-- CRATE]`: each crate's module edges between siblings and its
//! import circles, with one path that closes each circle. The test `tests/layout.rs` holds the
//! rules; this prints what they are checked on.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let only: Option<String> = std::env::args().nth(1);
    // The workspace this runs in: the nearest `crates/` at or above the current directory
    // (the binary may have been built from another checkout), else the one it was built in.
    let here = std::env::current_dir()?;
    let crates_dir = here
        .ancestors()
        .map(|d| d.join("crates"))
        .find(|d| d.join("gantry-layout").is_dir())
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    for (name, root) in gantry_layout::workspace_crates(&crates_dir)? {
        if only.as_deref().is_some_and(|o| !name.starts_with(o)) {
            continue;
        }
        let k = gantry_layout::load(&name, &root)?;
        println!("== {name}: {} modules", k.modules.len());
        for e in k.edges() {
            let scope = if e.scope.is_empty() {
                "crate".to_string()
            } else {
                e.scope.join("::")
            };
            println!("  {scope}: {} -> {}   ({})", e.from, e.to, e.at);
        }
        for c in k.circles() {
            println!(
                "  CIRCLE in {}: {}",
                if c.scope.is_empty() {
                    "crate".into()
                } else {
                    c.scope.join("::")
                },
                c.members.join(", ")
            );
            // One way round: from the first member to each other and back.
            let a = &c.members[0];
            for b in &c.members[1..] {
                for (x, y) in [(a, b), (b, a)] {
                    if let Some(p) = k.path(&c.scope, x, y) {
                        let hops: Vec<String> = p
                            .iter()
                            .map(|e| format!("{} -> {} ({})", e.from, e.to, e.at))
                            .collect();
                        println!("    {x} ~> {y}: {}", hops.join(", "));
                    }
                }
            }
        }
    }
    Ok(())
}
