//! Persistent volumes against a real `gantry up` cluster: two agents that share one storage
//! root (as nodes of a pool share a Lustre, GPFS or NFS mount), runc, and a real user.

mod common;

use std::time::{Duration, Instant};

use common::Cluster;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn log(c: &Cluster, id: &str, job: &str) -> String {
    c.ok(&["workflow", "log", id, job])
}

/// Runs a workflow as `token` to its end; returns its id once FINISHED.
fn finish(c: &Cluster, token: &str, file: &str, text: &str) -> String {
    let id = c.start_as(token, &c.write(file, text));
    let d = c.wait_for(&id, "the workflow to end", |d| {
        matches!(
            d["status"].as_str(),
            Some("FINISHED" | "FAILED" | "STOPPED")
        )
    });
    assert_eq!(d["status"], "FINISHED", "{d:#}\n{}", c.log());
    id
}

fn wait_gone(p: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while p.exists() {
        assert!(Instant::now() < deadline, "{} was not removed", p.display());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A one-job workflow mounting the named volume `results`, the user's default one and an
/// ephemeral one.
fn both(job: &str, script: &str) -> String {
    format!(
        r#"version: v4
volumes:
  results: {{use: persistent, name: results}}
  home: {{reference: volume://user/persistent}}
  scratch: {{}}
jobs:
  {job}:
    image: {{uri: docker://busybox:1}}
    mounts:
      /results: {{volume: results}}
      /home/me: {{volume: home}}
      /scratch: {{volume: scratch}}
    command: [/bin/sh, -c, "{script}"]
"#
    )
}

#[test]
fn persistent_volumes_outlive_their_workflow_and_are_seen_from_every_node() {
    let c = Cluster::up(2);
    let ada = c.user_token("ada", "lab");
    let write = both(
        "write",
        "echo from-the-first > /results/out.txt && echo at-home > /home/me/note && echo gone > /scratch/f",
    );
    let read = both("read", "cat /results/out.txt /home/me/note");

    // A named volume must exist before a workflow mounts it: refused at submit, nothing made.
    let out = c.as_user(
        &ada,
        &[
            "workflow",
            "start",
            c.write("w.yaml", &write).to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "volumes.results: persistent volume \"results\" does not exist: create it with `gantry volume create results`"
        ),
        "{}",
        stderr(&out)
    );
    let list = c.as_user(&ada, &["volume", "list", "-o", "json"]);
    assert_eq!(String::from_utf8_lossy(&list.stdout).trim(), "[]");

    let made = c.as_user(&ada, &["volume", "create", "results", "-o", "json"]);
    assert!(made.status.success(), "{}", stderr(&made));
    let made: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
    assert_eq!(made["uri"], "volume://user/persistent/results");
    assert_eq!(made["storage"], "default");

    let first = finish(&c, &ada, "w.yaml", &write);
    let node = Cluster::task(&c.detail(&first), "write")["node"]
        .as_str()
        .unwrap()
        .to_string();
    // `volume://user/persistent` was made on first use, as the user's `default` volume.
    let list: serde_json::Value =
        serde_json::from_slice(&c.as_user(&ada, &["volume", "list", "-o", "json"]).stdout).unwrap();
    let uris: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["uri"].as_str().unwrap())
        .collect();
    assert_eq!(
        uris,
        [
            "volume://user/persistent/default",
            "volume://user/persistent/results"
        ]
    );
    // The files stay on the node's storage after the workflow ended and its ephemeral volume
    // was removed.
    wait_gone(&c.data_dir().join("storage/default/ephemeral").join(&first));
    let dir = c
        .data_dir()
        .join("storage/persistent")
        .join(made["id"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).unwrap(),
        "from-the-first\n"
    );

    // The second workflow runs on the other agent (the first one's node is cordoned) and sees
    // the first one's files through the storage root they share.
    c.ok(&[
        "node",
        "hold",
        &node,
        "--type",
        "cordon",
        "--reason",
        "run elsewhere",
    ]);
    let second = finish(&c, &ada, "r.yaml", &read);
    let other = Cluster::task(&c.detail(&second), "read")["node"].clone();
    assert_ne!(other, node.as_str());
    assert_eq!(log(&c, &second, "read"), "from-the-first\nat-home\n");
    c.ok(&["node", "release", &node, "--reason", "test done"]);

    // Removing a volume a running workflow mounts is refused; once it has ended, it goes, and
    // its files with it.
    let busy = c.start_as(
        &ada,
        &c.write(
            "busy.yaml",
            r#"version: v4
volumes:
  results: {use: persistent, name: results}
jobs:
  hold:
    image: {uri: docker://busybox:1}
    mounts: {/results: {volume: results}}
    command: [sleep, "600"]
"#,
        ),
    );
    c.wait_for(&busy, "the job to run", |d| {
        Cluster::task(d, "hold")["status"] == "RUNNING"
    });
    let shown: serde_json::Value = serde_json::from_slice(
        &c.as_user(&ada, &["volume", "show", "results", "-o", "json"])
            .stdout,
    )
    .unwrap();
    assert_eq!(shown["mounted_by"], serde_json::json!([busy]));
    let rm = c.as_user(&ada, &["volume", "rm", "results"]);
    assert!(!rm.status.success());
    assert!(
        stderr(&rm).contains("is mounted by workflow(s) not yet ended"),
        "{}",
        stderr(&rm)
    );
    assert!(dir.join("out.txt").exists());
    c.ok(&["workflow", "stop", &busy]);
    c.wait_status(&busy, "STOPPED");
    let rm = c.as_user(&ada, &["volume", "rm", "results"]);
    assert!(rm.status.success(), "{}", stderr(&rm));
    wait_gone(&dir);
    let out = c.as_user(&ada, &["volume", "show", "results"]);
    assert!(
        stderr(&out).contains("no volume user/results"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_storage_an_administrator_adds_is_used_by_its_groups_only() {
    let c = Cluster::up(1);
    let site = c.data_dir().join("site-nfs");
    std::fs::create_dir_all(&site).unwrap();
    let site_s = site.to_str().unwrap();
    let added = c.json(&[
        "admin",
        "storage",
        "add",
        "scratch-nfs",
        "--path",
        site_s,
        "--groups",
        "lab",
    ]);
    assert_eq!(added["groups"], serde_json::json!(["lab"]));
    let all = c.json(&["admin", "storage", "list"]);
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "scratch-nfs"]);

    let ada = c.user_token("ada", "lab");
    let eve = c.user_token("eve", "elsewhere");
    let made = c.as_user(
        &ada,
        &[
            "volume",
            "create",
            "data",
            "--scope",
            "group",
            "--storage",
            "scratch-nfs",
            "-o",
            "json",
        ],
    );
    assert!(made.status.success(), "{}", stderr(&made));
    let made: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
    let wf = r#"version: v4
volumes:
  data: {use: scratch-nfs, name: data}
jobs:
  write:
    image: {uri: docker://busybox:1}
    mounts: {/data: {volume: data}}
    command: [/bin/sh, -c, "echo on-the-site > /data/f"]
"#;
    finish(&c, &ada, "nfs.yaml", wf);
    // The catalog's `fds` writes a `name:` beside an ephemeral reference: it runs as one.
    let fds = finish(
        &c,
        &ada,
        "fds.yaml",
        &wf.replace(
            "{use: scratch-nfs, name: data}",
            "{name: data, reference: volume://user/ephemeral}",
        )
        .replace(
            "echo on-the-site > /data/f",
            "echo scratch > /data/f && cat /data/f",
        ),
    );
    assert_eq!(log(&c, &fds, "write"), "scratch\n");
    assert_eq!(
        std::fs::read_to_string(site.join(made["id"].as_str().unwrap()).join("f")).unwrap(),
        "on-the-site\n"
    );

    // Another group cannot make volumes there: the storage is not found for them.
    let out = c.as_user(
        &eve,
        &["volume", "create", "mine", "--storage", "scratch-nfs"],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no storage scratch-nfs"),
        "{}",
        stderr(&out)
    );
    // Nor can a legacy reference make one there on first use.
    let out = c.as_user(
        &eve,
        &[
            "workflow",
            "start",
            c.write(
                "eve.yaml",
                r#"version: v4
volumes:
  data: {reference: volume://user/scratch-nfs/mine}
jobs:
  j:
    image: {uri: docker://busybox:1}
    mounts: {/data: {volume: data}}
    command: ["true"]
"#,
            )
            .to_str()
            .unwrap(),
        ],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out)
            .contains("volumes.data: no storage scratch-nfs (or your group may not use it)"),
        "{}",
        stderr(&out)
    );

    // A storage only one pool sees holds the jobs that mount its volumes to that pool.
    let east = c.data_dir().join("east-nfs");
    std::fs::create_dir_all(&east).unwrap();
    c.ok(&[
        "admin",
        "storage",
        "add",
        "east-nfs",
        "--path",
        east.to_str().unwrap(),
        "--pool",
        "east",
    ]);
    let out = c.as_user(&ada, &["volume", "create", "far", "--storage", "east-nfs"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let far = c.start_as(
        &ada,
        &c.write(
            "far.yaml",
            &wf.replace("use: scratch-nfs, name: data", "use: east-nfs, name: far"),
        ),
    );
    c.wait_for(&far, "the job to be held to pool east", |d| {
        Cluster::task(d, "write")["reason"]
            .as_str()
            .is_some_and(|r| r.contains("pool \"east\" has no nodes"))
    });
    assert_eq!(std::fs::read_dir(&east).unwrap().count(), 0, "it never ran");

    // A storage that holds volumes is not removed.
    let out = c.gantry(&["admin", "storage", "rm", "scratch-nfs"]);
    assert!(
        stderr(&out).contains("holds 1 volume(s)"),
        "{}",
        stderr(&out)
    );
    let out = c.as_user(&ada, &["volume", "rm", "data", "--scope", "group"]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.ok(&["admin", "storage", "rm", "scratch-nfs"]);
}
