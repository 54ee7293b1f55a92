//! Persistent volumes, tried by a user of another group: another user's or group's volume is
//! not found (show, list, rm, mount), a storage restricted to other groups is not usable, and
//! neither names nor symlinks planted in the storage or the volume lead out of the storage's
//! directory. Next to each, the legitimate use.

use std::process::Command;

use crate::common::Cluster;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An API call with a token, as a client that skips the CLI; returns the HTTP status.
fn api(c: &Cluster, token: &str, method: &str, path: &str, body: Option<&str>) -> u16 {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method])
        .arg(format!("http://127.0.0.1:{}/api/v1{path}", c.port))
        .args(["-H", &format!("Authorization: Bearer {token}")]);
    if let Some(b) = body {
        cmd.args(["-H", "Content-Type: application/json", "--data-binary", b]);
    }
    let out = cmd.output().expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

fn ended(c: &Cluster, id: &str) -> serde_json::Value {
    c.wait_for(id, "the workflow to end", |d| {
        matches!(
            d["status"].as_str(),
            Some("FINISHED" | "FAILED" | "STOPPED")
        )
    })
}

fn one_job(volume: &str, script: &str) -> String {
    format!(
        r#"version: v4
volumes:
  v: {volume}
jobs:
  j:
    image: {{uri: docker://busybox:1}}
    mounts: {{/v: {{volume: v}}}}
    command: [/bin/sh, -c, "{script}"]
"#
    )
}

/// Runs `gantry workflow VERB FILE` as `token`, which must fail; returns what it said.
fn refused(c: &Cluster, token: &str, verb: &str, file: &str, text: &str) -> String {
    let path = c.write(file, text);
    let out = c.as_user(token, &["workflow", verb, path.to_str().unwrap()]);
    assert!(!out.status.success(), "{file} was accepted");
    stderr(&out)
}

fn volume_uris(c: &Cluster, token: &str) -> Vec<String> {
    let out = c.as_user(token, &["volume", "list", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|v| {
            format!(
                "{} ({})",
                v["uri"].as_str().unwrap(),
                v["owner"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn another_groups_user_cannot_see_mount_or_remove_a_volume() {
    let c = Cluster::up(1);
    let ada = c.user_token("ada", "lab");
    let bob = c.user_token("bob", "lab");
    let mallory = c.user_token("mallory", "outsiders");
    for (name, scope) in [("private", "user"), ("shared", "group")] {
        let out = c.as_user(&ada, &["volume", "create", name, "--scope", scope]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let write = c.start_as(
        &ada,
        &c.write(
            "write.yaml",
            r#"version: v4
volumes:
  p: {use: persistent, name: private}
  s: {reference: volume://group/persistent/shared}
jobs:
  j:
    image: {uri: docker://busybox:1}
    mounts: {/p: {volume: p}, /s: {volume: s}}
    command: [/bin/sh, -c, "echo ada-only > /p/f && echo lab-only > /s/f"]
"#,
        ),
    );
    assert_eq!(ended(&c, &write)["status"], "FINISHED");

    // Legitimate: her group sees the group's volume and reads it; she sees both.
    assert_eq!(
        volume_uris(&c, &ada),
        [
            "volume://group/persistent/shared (lab)",
            "volume://user/persistent/private (ada)"
        ]
    );
    assert_eq!(
        volume_uris(&c, &bob),
        ["volume://group/persistent/shared (lab)"]
    );
    let read = c.start_as(
        &bob,
        &c.write(
            "bob.yaml",
            &one_job("{use: persistent, name: shared}", "cat /v/f"),
        ),
    );
    assert_eq!(ended(&c, &read)["status"], "FINISHED");
    assert_eq!(c.ok(&["workflow", "log", &read, "j"]), "lab-only\n");

    // The attack: list, show and remove answer as if the volumes did not exist.
    assert!(volume_uris(&c, &mallory).is_empty());
    for (name, scope) in [("private", "user"), ("shared", "group")] {
        let out = c.as_user(&mallory, &["volume", "show", name, "--scope", scope]);
        assert!(
            stderr(&out).contains(&format!("no volume {scope}/{name}")),
            "{}",
            stderr(&out)
        );
        let out = c.as_user(&mallory, &["volume", "rm", name, "--scope", scope]);
        assert!(!out.status.success());
        assert!(stderr(&out).contains("no volume"), "{}", stderr(&out));
        assert_eq!(
            api(
                &c,
                &mallory,
                "DELETE",
                &format!("/volumes/{scope}/{name}"),
                None
            ),
            404
        );
        assert_eq!(
            api(
                &c,
                &mallory,
                "GET",
                &format!("/volumes/{scope}/{name}"),
                None
            ),
            404
        );
    }
    // Bob may not remove ada's own volume either.
    assert_eq!(api(&c, &bob, "DELETE", "/volumes/user/private", None), 404);
    assert!(volume_uris(&c, &ada).len() == 2, "nothing was removed");

    // Mounting: a v4 name is looked up among her own volumes and her group's only...
    let err = refused(
        &c,
        &mallory,
        "start",
        "m1.yaml",
        &one_job("{use: persistent, name: private}", "cat /v/f"),
    );
    assert!(
        err.contains("persistent volume \"private\" does not exist"),
        "{err}"
    );
    // ... and a legacy reference to the same names makes volumes of her own: empty.
    for reference in [
        "volume://user/persistent/private",
        "volume://group/persistent/shared",
    ] {
        let id = c.start_as(
            &mallory,
            &c.write(
                "m2.yaml",
                &one_job(
                    &format!("{{reference: {reference}}}"),
                    "cat /v/f 2>/dev/null || echo nothing-here",
                ),
            ),
        );
        assert_eq!(ended(&c, &id)["status"], "FINISHED");
        assert_eq!(c.ok(&["workflow", "log", &id, "j"]), "nothing-here\n");
    }
    assert_eq!(
        volume_uris(&c, &mallory),
        [
            "volume://group/persistent/shared (outsiders)",
            "volume://user/persistent/private (mallory)"
        ]
    );
    // Ada's data is untouched.
    let again = c.start_as(
        &ada,
        &c.write(
            "again.yaml",
            &one_job("{use: persistent, name: private}", "cat /v/f"),
        ),
    );
    assert_eq!(ended(&c, &again)["status"], "FINISHED");
    assert_eq!(c.ok(&["workflow", "log", &again, "j"]), "ada-only\n");
}

#[test]
fn a_storage_of_other_groups_and_names_that_are_paths_are_refused() {
    let c = Cluster::up(1);
    let ada = c.user_token("ada", "lab");
    let mallory = c.user_token("mallory", "outsiders");
    let site = c.data_dir().join("site");
    std::fs::create_dir_all(&site).unwrap();
    c.ok(&[
        "admin",
        "storage",
        "add",
        "labonly",
        "--path",
        site.to_str().unwrap(),
        "--groups",
        "lab",
    ]);
    // Not an administrator: she cannot add storage or list the site's.
    let out = c.as_user(
        &mallory,
        &["admin", "storage", "add", "mine", "--path", "/"],
    );
    assert!(!out.status.success());
    assert_eq!(
        api(
            &c,
            &mallory,
            "POST",
            "/admin/storages",
            Some(r#"{"name":"mine","driver":"hostpath","path":"/"}"#)
        ),
        403
    );
    assert_eq!(api(&c, &mallory, "GET", "/admin/storages", None), 403);

    // She is not shown the lab's storage among those she may use; the lab is.
    let names = |token: &str| -> Vec<String> {
        let out = c.as_user(token, &["volume", "storages", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&mallory), ["default"]);
    assert_eq!(names(&ada), ["default", "labonly"]);

    // Legitimate: the lab uses its storage.
    let out = c.as_user(&ada, &["volume", "create", "d", "--storage", "labonly"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The attack: another group cannot, by the CLI, the API or a workflow file.
    let out = c.as_user(&mallory, &["volume", "create", "d", "--storage", "labonly"]);
    assert!(
        stderr(&out).contains("no storage labonly"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        api(
            &c,
            &mallory,
            "POST",
            "/volumes",
            Some(r#"{"name":"e","storage":"labonly"}"#)
        ),
        404
    );
    for (volume, want) in [
        (
            "{use: labonly, name: d}",
            "persistent volume \"d\" does not exist",
        ),
        (
            "{reference: volume://user/labonly/d}",
            "volumes.v: no storage labonly (or your group may not use it)",
        ),
    ] {
        let err = refused(&c, &mallory, "start", "m.yaml", &one_job(volume, "true"));
        assert!(err.contains(want), "{volume}: {err}");
    }
    assert_eq!(
        std::fs::read_dir(&site).unwrap().count(),
        0,
        "nothing made there"
    );

    // Names are never paths: refused by the API, the CLI and the workflow file.
    for name in ["..", "../../etc", "a/b", ".hidden"] {
        let body = serde_json::json!({ "name": name }).to_string();
        assert_eq!(
            api(&c, &mallory, "POST", "/volumes", Some(&body)),
            400,
            "{name}"
        );
    }
    let out = c.as_user(&mallory, &["volume", "create", "../escape"]);
    assert!(
        stderr(&out).contains("is not a valid name"),
        "{}",
        stderr(&out)
    );
    let err = refused(
        &c,
        &mallory,
        "validate",
        "n.yaml",
        &one_job("{use: persistent, name: ../ada}", "true"),
    );
    assert!(err.contains("is not a valid name"), "{err}");
}

#[test]
fn symlinks_planted_in_a_storage_or_a_volume_never_lead_out() {
    let c = Cluster::up(1);
    let mallory = c.user_token("mallory", "outsiders");
    let host_dir = c.data_dir().join("host-dir");
    std::fs::create_dir_all(&host_dir).unwrap();
    let site = c.data_dir().join("site");
    std::fs::create_dir_all(&site).unwrap();
    c.ok(&[
        "admin",
        "storage",
        "add",
        "shared-fs",
        "--path",
        site.to_str().unwrap(),
    ]);

    // Users of a site's shared filesystem can often write in it from a login node: one plants
    // a link where her volume's directory will be.
    let made = c.as_user(
        &mallory,
        &[
            "volume",
            "create",
            "v",
            "--storage",
            "shared-fs",
            "-o",
            "json",
        ],
    );
    assert!(made.status.success(), "{}", stderr(&made));
    let made: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
    let vdir = site.join(made["id"].as_str().unwrap());
    std::os::unix::fs::symlink(&host_dir, &vdir).unwrap();
    let id = c.start_as(
        &mallory,
        &c.write(
            "p.yaml",
            &one_job("{use: shared-fs, name: v}", "echo evil > /v/x"),
        ),
    );
    let d = ended(&c, &id);
    assert_eq!(d["status"], "FAILED", "{d:#}");
    let reason = Cluster::task(&d, "j")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(reason.contains("symlink"), "{reason}");
    assert_eq!(std::fs::read_dir(&host_dir).unwrap().count(), 0);

    // Legitimate: with the link gone, the same volume works (its directory is made).
    std::fs::remove_file(&vdir).unwrap();
    let id = c.start_as(
        &mallory,
        &c.write(
            "ok.yaml",
            &one_job("{use: shared-fs, name: v}", "echo fine > /v/x"),
        ),
    );
    assert_eq!(ended(&c, &id)["status"], "FINISHED");
    assert_eq!(std::fs::read_to_string(vdir.join("x")).unwrap(), "fine\n");

    // A link planted inside a persistent volume outlives the workflow that made it; a later
    // workflow's files are never written through it.
    let hd = host_dir.display();
    let plant = c.start_as(
        &mallory,
        &c.write(
            "plant.yaml",
            &one_job(
                "{reference: volume://user/persistent/home}",
                &format!("ln -s {hd} /v/link"),
            ),
        ),
    );
    assert_eq!(ended(&c, &plant)["status"], "FINISHED");
    let through = c.start_as(
        &mallory,
        &c.write(
            "through.yaml",
            r#"version: v4
volumes:
  v: {reference: volume://user/persistent/home}
jobs:
  j:
    image: {uri: docker://busybox:1}
    mounts: {/v: {volume: v}}
    files: {/v/link/x: "evil"}
    command: ["true"]
"#,
        ),
    );
    let d = ended(&c, &through);
    assert_eq!(d["status"], "FAILED", "{d:#}");
    let reason = Cluster::task(&d, "j")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(reason.contains("symlink"), "{reason}");
    assert_eq!(std::fs::read_dir(&host_dir).unwrap().count(), 0);
}
