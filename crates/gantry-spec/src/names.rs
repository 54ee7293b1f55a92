//! The grammar of what a workflow names (steps, volumes, images, endpoints), and the container
//! paths it may not mount over or write to. Names end up as path components on nodes
//! (`<storage>/<pool>/ephemeral/<workflow>/<volume>`), repository names in the object cache and
//! host names, so one grammar keeps `/`, `..` and anything else with a meaning out of them.

/// Why `name` is not a name: 1-63 letters, digits, `-` and `_`, starting with a letter or a
/// digit. (DNS labels, plus `_`, which the vendor's catalog uses in volume names.)
pub fn name_error(name: &str) -> Option<String> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_');
    (!ok).then(|| {
        format!(
            "`{name}` is not a valid name: use letters, digits, `-` and `_`, starting with a \
             letter or digit, at most 63 characters"
        )
    })
}

/// Why `name` cannot name a persistent endpoint: it is also a host name (`NAME.<domain>`) and
/// a URL path segment (`/e/NAME/`), so a lower-case DNS label: 1-63 of `a-z`, `0-9` and `-`,
/// not starting or ending with `-`.
pub fn endpoint_name_error(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    (!ok).then(|| {
        format!(
            "`{name}` is not a valid endpoint name: use lower-case letters, digits and `-` (not \
             first or last), at most 63 characters"
        )
    })
}

/// The kernel's trees in every container, and the `/dev` that holds what each container
/// starts through (the agent's `/dev/confine` and its seccomp filter): nothing of a workflow
/// is mounted or written at or below them.
pub const KERNEL_TREES: [&str; 3] = ["/dev", "/proc", "/sys"];

/// Where Gantry puts its own files into a container (a step's `script`).
pub const GANTRY_TREE: &str = "/.gantry";

/// Whether the absolute container path `path` is at or below one of `trees` (or is `/`, which
/// is above all of them). Compares components, so `/device` is not below `/dev`, and `//dev/.`
/// is `/dev`.
pub fn at_or_below(path: &str, trees: &[&str]) -> Option<String> {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    if parts.is_empty() {
        return Some("/".into());
    }
    trees
        .iter()
        .find(|t| {
            let tp: Vec<&str> = t.split('/').filter(|s| !s.is_empty()).collect();
            parts.starts_with(&tp)
        })
        .map(|t| t.to_string())
}

/// Why a workflow may not mount a volume or put a file at the container path `path`.
pub fn reserved_target_error(path: &str) -> Option<String> {
    let mut trees = KERNEL_TREES.to_vec();
    trees.push(GANTRY_TREE);
    at_or_below(path, &trees).map(|t| {
        if t == "/" {
            format!("`{path}` is the container's root: mount volumes and put files below it")
        } else {
            format!(
                "`{path}` is reserved: Gantry and the kernel own `{t}` in every container \
                 (`/dev`, `/proc`, `/sys`, `/.gantry` and everything below them)"
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_have_one_grammar() {
        for ok in ["data", "data_volume", "vol-0", "A1", "x"] {
            assert_eq!(name_error(ok), None, "{ok}");
        }
        let long = "a".repeat(64);
        for bad in [
            "",
            "outer/inner",
            "..",
            "../x",
            ".hidden",
            "-x",
            "a b",
            "a.b",
            &long,
        ] {
            assert!(name_error(bad).is_some(), "{bad:?}");
        }
        assert_eq!(endpoint_name_error("chat-1"), None);
        for bad in ["Chat", "chat_1", "-chat", "chat-", "", "a/b"] {
            assert!(endpoint_name_error(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn reserved_paths_and_everything_above_and_below_them() {
        for bad in [
            "/",
            "//",
            "/dev",
            "/dev/",
            "//dev/.",
            "/dev/confine",
            "/dev/seccomp.bpf",
            "/dev/shm",
            "/proc",
            "/proc/1/root",
            "/sys/fs/cgroup",
            "/.gantry",
            "/.gantry/script",
        ] {
            assert!(reserved_target_error(bad).is_some(), "{bad}");
        }
        for ok in [
            "/data",
            "/device",
            "/devices/x",
            "/etc/hosts",
            "/process",
            "/srv/dev",
        ] {
            assert_eq!(reserved_target_error(ok), None, "{ok}");
        }
    }
}
