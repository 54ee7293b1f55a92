//! Image build cache keys. A build is keyed on its inputs, never its outputs (RUN layers are not
//! reproducible): key₀ = H(builder version, platform, base manifest digest), keyₙ = H(keyₙ₋₁,
//! step). A RUN step contributes its command, environment, working directory and network mode;
//! a FILES step each file's path, mode, owner and content digest — never a modification time.
//! Reads and writes of the cache compute keys with this one function, so they cannot disagree
//! (the classic cache bug).

use sha2::{Digest, Sha256};

/// Bumped when the builder's output for the same inputs would change.
pub const BUILDER_VERSION: &str = "gantry-build/1";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Files(Vec<FileInput>),
    Run {
        command: String,
        env: Vec<String>,
        workdir: String,
        /// `none` or `bridge`.
        network: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInput {
    pub path: String,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// `sha256:<hex>` of the content.
    pub digest: String,
}

/// Lengths make the encoding unambiguous: ("ab","c") and ("a","bc") hash differently.
fn field(h: &mut Sha256, s: &str) {
    h.update((s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

pub fn base_key(platform: &str, base_manifest_digest: &str) -> String {
    let mut h = Sha256::new();
    field(&mut h, BUILDER_VERSION);
    field(&mut h, platform);
    field(&mut h, base_manifest_digest);
    hex::encode(h.finalize())
}

pub fn step_key(previous: &str, step: &Step) -> String {
    let mut h = Sha256::new();
    field(&mut h, previous);
    match step {
        Step::Files(files) => {
            field(&mut h, "files");
            let mut sorted: Vec<&FileInput> = files.iter().collect();
            sorted.sort_by(|a, b| a.path.cmp(&b.path));
            for f in sorted {
                field(&mut h, &f.path);
                field(&mut h, &format!("{:o}:{}:{}", f.mode, f.uid, f.gid));
                field(&mut h, &f.digest);
            }
        }
        Step::Run {
            command,
            env,
            workdir,
            network,
        } => {
            field(&mut h, "run");
            field(&mut h, command);
            for e in env {
                field(&mut h, e);
            }
            field(&mut h, workdir);
            field(&mut h, network);
        }
    }
    hex::encode(h.finalize())
}

/// Every step's key, in order.
pub fn chain(platform: &str, base_manifest_digest: &str, steps: &[Step]) -> Vec<String> {
    let mut prev = base_key(platform, base_manifest_digest);
    steps
        .iter()
        .map(|s| {
            prev = step_key(&prev, s);
            prev.clone()
        })
        .collect()
}

/// How many leading steps are cached: the build resumes after them.
pub fn cached_prefix(keys: &[String], is_cached: impl Fn(&str) -> bool) -> usize {
    keys.iter().take_while(|k| is_cached(k)).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, digest: &str) -> FileInput {
        FileInput {
            path: path.into(),
            mode: 0o644,
            uid: 0,
            gid: 0,
            digest: digest.into(),
        }
    }

    fn run(cmd: &str) -> Step {
        Step::Run {
            command: cmd.into(),
            env: vec!["A=1".into()],
            workdir: "/".into(),
            network: "none".into(),
        }
    }

    #[test]
    fn the_same_recipe_gives_the_same_keys() {
        let steps = [Step::Files(vec![file("/a", "sha256:1")]), run("make")];
        assert_eq!(
            chain("linux/amd64", "sha256:base", &steps),
            chain("linux/amd64", "sha256:base", &steps)
        );
    }

    #[test]
    fn a_changed_step_changes_its_key_and_every_later_one_only() {
        let a = [run("one"), run("two"), run("three")];
        let b = [run("one"), run("TWO"), run("three")];
        let (ka, kb) = (chain("p", "sha256:b", &a), chain("p", "sha256:b", &b));
        assert_eq!(ka[0], kb[0]);
        assert_ne!(ka[1], kb[1]);
        assert_ne!(ka[2], kb[2], "later steps rebuild");
    }

    #[test]
    fn every_input_counts() {
        let base = chain("p", "sha256:b", &[run("x")]);
        assert_ne!(base, chain("p", "sha256:c", &[run("x")]), "base digest");
        assert_ne!(base, chain("q", "sha256:b", &[run("x")]), "platform");
        let env = Step::Run {
            command: "x".into(),
            env: vec!["A=2".into()],
            workdir: "/".into(),
            network: "none".into(),
        };
        assert_ne!(base, chain("p", "sha256:b", &[env]));
        let net = Step::Run {
            command: "x".into(),
            env: vec!["A=1".into()],
            workdir: "/".into(),
            network: "bridge".into(),
        };
        assert_ne!(base, chain("p", "sha256:b", &[net]));
        let f1 = chain(
            "p",
            "sha256:b",
            &[Step::Files(vec![file("/a", "sha256:1")])],
        );
        let f2 = chain(
            "p",
            "sha256:b",
            &[Step::Files(vec![file("/a", "sha256:2")])],
        );
        let mut moded = file("/a", "sha256:1");
        moded.mode = 0o755;
        let f3 = chain("p", "sha256:b", &[Step::Files(vec![moded])]);
        assert_ne!(f1, f2, "content");
        assert_ne!(f1, f3, "mode");
    }

    #[test]
    fn file_order_in_the_recipe_does_not_matter_but_boundaries_do() {
        let ab = chain(
            "p",
            "b",
            &[Step::Files(vec![file("/a", "1"), file("/b", "2")])],
        );
        let ba = chain(
            "p",
            "b",
            &[Step::Files(vec![file("/b", "2"), file("/a", "1")])],
        );
        assert_eq!(ab, ba);
        assert_ne!(
            chain("p", "b", &[run("ab c")]),
            chain("p", "b", &[run("a bc")])
        );
    }

    #[test]
    fn the_cached_prefix_stops_at_the_first_miss() {
        let keys: Vec<String> = ["k1", "k2", "k3"].iter().map(|s| s.to_string()).collect();
        assert_eq!(cached_prefix(&keys, |k| k != "k2"), 1);
        assert_eq!(cached_prefix(&keys, |_| true), 3);
        assert_eq!(cached_prefix(&keys, |_| false), 0);
    }
}
