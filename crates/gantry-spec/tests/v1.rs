//! `version: v1` files are read as v4, keep their positions, and print
//! back as v4 with `upgrade`.

use gantry_spec::{parse, upgrade, VolumeKind};

fn problems(src: &str) -> Vec<String> {
    match parse(src) {
        Ok(_) => panic!("expected problems in:\n{src}"),
        Err(ds) => ds.iter().map(|d| d.to_string()).collect(),
    }
}

const RCLONE: &str = include_str!("fixtures/rclone_server_v1.yaml");

#[test]
fn the_catalog_v1_file_reads_as_v4() {
    let wf = parse(RCLONE).unwrap_or_else(|ds| panic!("{ds:?}"));
    assert_eq!(wf.version, "v4");
    assert_eq!(wf.upgraded_from.as_deref(), Some("v1"));
    let job = &wf.jobs["rclone-server"];
    let m = &job.mounts["/data"];
    assert_eq!(m.volume, "vol-i");
    // The mount's volume is placed where v1 wrote it: the key `vol-i:`.
    assert_eq!((m.pos.line, m.pos.column), (23, 7));
    assert_eq!(job.mounts.len(), 1);
    // v1's `name:` (a copy of the key) is not read as v4's persistent name.
    assert_eq!(wf.volumes["vol-i"].kind, VolumeKind::Ephemeral);
    let warning = gantry_spec::upgrade_warning(&wf).expect("a v1 file is warned about");
    assert!(warning.contains("gantry workflow upgrade"), "{warning}");
}

#[test]
fn a_v4_file_has_no_upgrade_warning_and_upgrades_to_itself() {
    let src = "version: v4\njobs:\n  a:\n    image: {uri: docker://alpine}\n    command: [true]\n";
    let wf = parse(src).unwrap();
    assert_eq!(wf.upgraded_from, None);
    assert_eq!(gantry_spec::upgrade_warning(&wf), None);
    assert_eq!(upgrade(src).unwrap(), src);
}

#[test]
fn upgrade_prints_a_v4_file_that_reads_the_same() {
    let text = upgrade(RCLONE).unwrap();
    assert!(text.starts_with("version: v4\n"), "{text}");
    assert!(!text.contains("location"), "{text}");
    assert!(text.contains("/data:"), "{text}");
    let again = parse(&text).unwrap_or_else(|ds| panic!("{ds:?}\n{text}"));
    assert_eq!(again.upgraded_from, None);
    let orig = parse(RCLONE).unwrap();
    // Everything but positions and the upgrade mark is the same workflow.
    let (a, b) = (&orig.jobs["rclone-server"], &again.jobs["rclone-server"]);
    assert_eq!(a.command, b.command);
    assert_eq!(a.env, b.env);
    assert_eq!(a.resource, b.resource);
    assert_eq!(a.policy, b.policy);
    assert_eq!(a.image, b.image);
    assert_eq!(b.mounts["/data"].volume, "vol-i");
    let (va, vb) = (&orig.volumes["vol-i"], &again.volumes["vol-i"]);
    assert_eq!((&va.kind, &va.provisioner), (&vb.kind, &vb.provisioner));
    assert_eq!(orig.volumes.len(), again.volumes.len());
}

#[test]
fn v1_errors_point_into_the_original_file() {
    let src = r#"version: v1
volumes:
  data: {reference: volume://user/ephemeral}
defaults:
  job:
    mounts:
      scratch: {location: /scratch}
jobs:
  a:
    image: {uri: docker://alpine}
    command: [true]
    mounts:
      data: {location: relative/path}
      missing: {location: /m}
"#;
    assert_eq!(
        problems(src),
        [
            "7:7: defaults.job.mounts[\"/scratch\"].volume: volume `scratch` is not defined under `volumes`; volumes: `data`",
            "13:24: jobs.a.mounts[\"relative/path\"]: mount path `relative/path` must be an absolute path (start with `/`)",
            "14:7: jobs.a.mounts[\"/m\"].volume: volume `missing` is not defined under `volumes`; volumes: `data`",
        ]
    );
}

#[test]
fn v1_mounts_that_cannot_be_flipped_are_refused_at_their_position() {
    let src = r#"version: v1
volumes:
  a: {reference: volume://user/ephemeral}
  b: {reference: volume://user/ephemeral}
jobs:
  j:
    image: {uri: docker://alpine}
    command: [true]
    mounts:
      a: {location: /same}
      b: {location: /same}
      c: {location: [x]}
"#;
    let got = problems(src);
    assert!(
        got.iter().any(|d| d.starts_with(
            "11:21: jobs.j.mounts.b: volumes `a` and `b` are both mounted at `/same`"
        )),
        "{got:?}"
    );
    assert!(
        got.iter().any(|d| d.starts_with(
            "12:21: jobs.j.mounts.c: `location` of the v1 mount of volume `c` is a list"
        )),
        "{got:?}"
    );
}

#[test]
fn requires_and_type_ephemeral_of_v1_still_read() {
    let src = r#"version: v1
volumes:
  scratch:
    type: EPHEMERAL
jobs:
  first:
    image: {uri: docker://alpine}
    command: [true]
  second:
    image: {uri: docker://alpine}
    command: [true]
    requires: [first]
    mounts:
      scratch: {location: /scratch}
"#;
    let wf = parse(src).unwrap_or_else(|ds| panic!("{ds:?}"));
    assert_eq!(wf.volumes["scratch"].kind, VolumeKind::Ephemeral);
    let deps = &wf.jobs["second"].depends_on;
    assert_eq!(deps.len(), 1);
    assert_eq!(deps[0].name, "first");
    let text = upgrade(src).unwrap();
    parse(&text).unwrap_or_else(|ds| panic!("{ds:?}\n{text}"));
}

#[test]
fn upgrade_keeps_block_scripts_as_blocks() {
    let text = upgrade(RCLONE).unwrap();
    assert!(text.contains("- |"), "{text}");
    assert!(text.contains("exec rclone serve webdav"), "{text}");
}
