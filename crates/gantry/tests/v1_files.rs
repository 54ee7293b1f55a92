//! `version: v1` files through the CLI and a real cluster: validated with a
//! warning, printed in v4 form by `workflow upgrade`, and run.

mod common;

use common::Cluster;

const V1: &str = r#"version: v1
volumes:
  shared:
    name: shared
    reference: volume://user/ephemeral
jobs:
  writer:
    image: {uri: docker://busybox:1}
    command: [/bin/sh, -c, "echo written-by-v1 > /work/msg"]
    mounts:
      shared: {location: /work}
  reader:
    image: {uri: docker://busybox:1}
    command: [/bin/sh, -c, "cat /in/msg"]
    requires: [writer]
    mounts:
      shared:
        location: /in
"#;

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(common::GANTRY)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn validate_warns_and_upgrade_prints_v4() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("v1.yaml");
    std::fs::write(&file, V1).unwrap();
    let f = file.to_str().unwrap();

    let out = cli(&["workflow", "validate", f]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning") && err.contains("version: v1"),
        "{err}"
    );

    let out = cli(&["workflow", "upgrade", f]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v4 = String::from_utf8(out.stdout).unwrap();
    assert!(v4.starts_with("version: v4\n"), "{v4}");
    let up = dir.path().join("v4.yaml");
    std::fs::write(&up, &v4).unwrap();
    // The printed file is v4 through and through: no warning when validated.
    let out = cli(&["workflow", "validate", up.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}\n{v4}");
    assert!(!err.contains("warning"), "{err}");

    let out = cli(&["workflow", "upgrade", f, "-o", "json"]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["from"], "v1");
    assert_eq!(j["spec"], v4.as_str());

    // An invalid v1 file: the position is in the original text, exit 2.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, V1.replace("location: /in", "location: in")).unwrap();
    let out = cli(&["workflow", "upgrade", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:18:19:", bad.display())), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_v1_workflow_runs_its_mounts_and_requires() {
    let c = Cluster::up(1);
    let file = c.write("v1.yaml", V1);
    let out = c.gantry(&["workflow", "start", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}\n{}", c.log());
    assert!(
        err.contains("warning") && err.contains("version: v1"),
        "{err}"
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let d = c.wait_for(&id, "the workflow to end", |d| {
        matches!(
            d["status"].as_str(),
            Some("FINISHED" | "FAILED" | "STOPPED")
        )
    });
    assert_eq!(d["status"], "FINISHED", "{d:#}\n{}", c.log());
    let log = c.ok(&["workflow", "log", &id, "reader"]);
    assert_eq!(log.trim(), "written-by-v1");
}
