//! The node's labels, reported in `Hello` for placement (`nvidia.com/gpu.model=NVIDIA H200`):
//! what the agent finds, named as Kubernetes' GPU feature discovery names it, and what the
//! administrator gives with `--label KEY=VALUE`, which wins.

use std::collections::BTreeMap;

use crate::metrics::gpu::{self, GpuModel};

/// NVML's device name of the node's GPUs.
pub const GPU_MODEL: &str = "nvidia.com/gpu.model";
/// Their architecture, lowercase (`hopper`).
pub const GPU_ARCH: &str = "nvidia.com/gpu.arch";
/// How many there are.
pub const GPU_COUNT: &str = "nvidia.com/gpu.count";
/// `/proc/cpuinfo`'s `model name`.
pub const CPU_MODEL: &str = "cpu.model";

/// The longest value a label may have.
pub const MAX_VALUE: usize = 256;

/// `[prefix/]name` as Kubernetes takes a label key: the name 1-63 letters, digits, `-`, `_`
/// and `.`, starting and ending with a letter or digit; the prefix a DNS subdomain.
pub fn check_key(key: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("label key `{key}`: {why}"));
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty() || name.len() > 63 {
        return bad("the name (after any `prefix/`) is 1 to 63 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || !alnum(name.chars().next())
        || !alnum(name.chars().last())
    {
        return bad("the name is letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit");
    }
    if let Some(p) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if p.len() > 253 || !p.split('.').all(label_ok) {
            return bad("the prefix is a DNS subdomain (lowercase letters, digits, `-` and `.`, at most 253)");
        }
    }
    Ok(())
}

/// A value is printable (no control characters) and at most [`MAX_VALUE`] characters.
pub fn check_value(key: &str, value: &str) -> Result<(), String> {
    if value.chars().count() > MAX_VALUE {
        return Err(format!(
            "label `{key}`: the value is longer than {MAX_VALUE} characters"
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("label `{key}`: the value has a control character"));
    }
    Ok(())
}

/// One `--label KEY=VALUE`.
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected KEY=VALUE, e.g. zone=a"))?;
    check_key(k)?;
    check_value(k, v)?;
    Ok((k.to_owned(), v.to_owned()))
}

/// Labels as a caller gives them whole.
pub fn check(labels: &BTreeMap<String, String>) -> Result<(), String> {
    labels
        .iter()
        .try_for_each(|(k, v)| check_key(k).and_then(|()| check_value(k, v)))
}

/// The administrator's labels: each checked, and each key given once.
pub fn admin_labels(pairs: &[(String, String)]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (k, v) in pairs {
        check_key(k)?;
        check_value(k, v)?;
        if out.insert(k.clone(), v.clone()).is_some() {
            return Err(format!("label `{k}` is given twice"));
        }
    }
    Ok(out)
}

/// The CPU's model: the first `model name` of `/proc/cpuinfo` (all a node's sockets are one
/// model in practice). ARM kernels have none.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == "model name")
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// The GPUs' labels. A node whose GPUs differ is labelled by the first (and says so).
pub fn gpu_labels(gpus: &[GpuModel]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(first) = gpus.first() else {
        return out;
    };
    if let Some(other) = gpus.iter().find(|g| g.name != first.name) {
        tracing::warn!(
            "this node's GPUs are of more than one model ({} and {}): labelled {GPU_MODEL}={}",
            first.name,
            other.name,
            first.name
        );
    }
    out.insert(GPU_MODEL.into(), first.name.clone());
    if let Some(arch) = first.arch {
        out.insert(GPU_ARCH.into(), arch.into());
    }
    out.insert(GPU_COUNT.into(), gpus.len().to_string());
    out
}

/// What is found on this node, with `admin`'s labels over it. A found value a label could
/// not carry (a driver's odd name) is left out rather than refused.
pub fn node_labels(admin: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out = gpu_labels(&gpu::models());
    if let Some(cpu) = cpu_model(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default()) {
        out.insert(CPU_MODEL.into(), cpu);
    }
    out.retain(|k, v| check_value(k, v).is_ok());
    out.extend(admin.iter().map(|(k, v)| (k.clone(), v.clone())));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_kubernetes() {
        for ok in [
            "zone",
            "rack",
            "nvidia.com/gpu.model",
            "topology.kubernetes.io/zone",
            "a",
            "x_y-z.1",
        ] {
            check_key(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "",
            "/zone",
            "Example.com/zone",
            "-zone",
            "zone-",
            "zo ne",
            "a/b/c",
            "ex..com/zone",
            "zone=",
            &"x".repeat(64),
        ] {
            assert!(check_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn labels_parse_and_are_checked() {
        assert_eq!(parse_label("zone=a").unwrap(), ("zone".into(), "a".into()));
        // The value is everything after the first `=`, spaces and all; empty is a value.
        assert_eq!(
            parse_label("nvidia.com/gpu.model=NVIDIA H200").unwrap().1,
            "NVIDIA H200"
        );
        assert_eq!(parse_label("a=b=c").unwrap().1, "b=c");
        assert_eq!(parse_label("empty=").unwrap().1, "");
        assert!(parse_label("zone").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_label("bad key=1").unwrap_err().contains("bad key"));
        assert!(parse_label("k=a\nb").unwrap_err().contains("control"));
        let long = format!("k={}", "v".repeat(MAX_VALUE + 1));
        assert!(parse_label(&long).unwrap_err().contains("256"));
        assert!(parse_label(&format!("k={}", "é".repeat(MAX_VALUE))).is_ok());
        let twice = [("zone".into(), "a".into()), ("zone".into(), "b".into())];
        assert!(admin_labels(&twice).unwrap_err().contains("twice"));
    }

    #[test]
    fn cpu_model_is_the_first_model_name() {
        let info = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n";
        assert_eq!(
            cpu_model(info).as_deref(),
            Some("Intel(R) Xeon(R) Platinum 8480+")
        );
        assert_eq!(cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\n"), None);
    }

    // No GPU can run here: NVML's answers are given as `metrics::gpu::models` returns them.
    #[test]
    fn gpus_are_labelled_by_the_first() {
        assert!(gpu_labels(&[]).is_empty());
        let h200 = GpuModel {
            name: "NVIDIA H200".into(),
            arch: Some("hopper"),
        };
        let l = gpu_labels(&[h200.clone(), h200.clone()]);
        assert_eq!(l[GPU_MODEL], "NVIDIA H200");
        assert_eq!(l[GPU_ARCH], "hopper");
        assert_eq!(l[GPU_COUNT], "2");
        let mixed = [
            h200,
            GpuModel {
                name: "NVIDIA A100-SXM4-80GB".into(),
                arch: None,
            },
        ];
        let l = gpu_labels(&mixed);
        assert_eq!(l[GPU_MODEL], "NVIDIA H200");
        assert_eq!(l[GPU_COUNT], "2");
    }

    #[test]
    fn the_admin_wins() {
        let admin = BTreeMap::from([
            (CPU_MODEL.to_string(), "set by hand".to_string()),
            ("zone".to_string(), "a".to_string()),
        ]);
        let l = node_labels(&admin);
        assert_eq!(l[CPU_MODEL], "set by hand");
        assert_eq!(l["zone"], "a");
    }
}
