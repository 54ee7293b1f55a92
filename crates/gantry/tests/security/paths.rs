//! Paths from workflow input on the node. A job can plant symlinks in a volume, and the agent
//! runs as root: files a later job injects must never be written through them onto the host,
//! volume names must not be paths, and nothing may be mounted over what every container
//! starts through (`/dev/confine` and its seccomp filter).

use std::process::Command;

use crate::common::Cluster;

fn log(c: &Cluster, id: &str, job: &str) -> String {
    c.ok(&["workflow", "log", id, job])
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Posts a workflow file straight to the API, as a client that skips the CLI's own checks
/// would; returns the HTTP status and body.
fn post_workflow(c: &Cluster, token: &str, spec: &str) -> (u16, String) {
    let body = serde_json::json!({ "spec": spec }).to_string();
    let out = Command::new("curl")
        .args(["-s", "-o", "-", "-w", "\n%{http_code}", "-X", "POST"])
        .arg(format!("http://127.0.0.1:{}/api/v1/workflows", c.port))
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &body,
        ])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or((&text, "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
fn files_are_never_written_through_symlinks_planted_in_a_volume() {
    let c = Cluster::up(1);
    let mallory = c.user_token("mallory", "outsiders");
    // Host paths the agent (root) could reach if it followed the links.
    let host_dir = c.data_dir().join("host-dir");
    let host_file = c.data_dir().join("host-file");
    std::fs::create_dir_all(&host_dir).unwrap();
    std::fs::write(&host_file, "the host's\n").unwrap();
    let (hd, hf) = (host_dir.display(), host_file.display());
    let file = c.write(
        "plant.yaml",
        &format!(
            r#"version: v4
volumes:
  scratch: {{}}
jobs:
  plant:
    image: {{ uri: docker://busybox:1 }}
    command: [/bin/sh, -c, "ln -s {hd} /data/link && ln -s {hf} /data/f && ln -s {hd} /data/deep && mkdir /data/real"]
    mounts: {{ /data: {{ volume: scratch }} }}
  through-dir:
    image: {{ uri: docker://busybox:1 }}
    depends-on: [{{ name: plant }}]
    command: [/bin/true]
    mounts: {{ /data: {{ volume: scratch }} }}
    files: {{ /data/link/x: "evil" }}
  through-parents:
    image: {{ uri: docker://busybox:1 }}
    depends-on: [{{ name: plant }}]
    command: [/bin/true]
    mounts: {{ /data: {{ volume: scratch }} }}
    files: {{ /data/deep/new/dirs/x: "evil" }}
  over-file:
    image: {{ uri: docker://busybox:1 }}
    depends-on: [{{ name: plant }}]
    command: [/bin/sh, -c, "test ! -L /data/f && cat /data/f"]
    mounts: {{ /data: {{ volume: scratch }} }}
    files: {{ /data/f: "mine\n" }}
  legit:
    image: {{ uri: docker://busybox:1 }}
    depends-on: [{{ name: plant }}]
    command: [/bin/cat, /data/real/sub/y]
    mounts: {{ /data: {{ volume: scratch }} }}
    files: {{ /data/real/sub/y: "fine\n" }}
"#
        ),
    );
    let id = c.start_as(&mallory, &file);
    let d = c.wait_for(&id, "every job to end", |d| {
        d["tasks"].as_array().is_some_and(|ts| {
            ts.iter().all(|t| {
                t["status"] != "PENDING" && t["status"] != "STARTED" && t["status"] != "RUNNING"
            })
        })
    });
    for job in ["through-dir", "through-parents"] {
        let t = Cluster::task(&d, job);
        assert_eq!(t["status"], "FAILED", "{t:#}");
        let reason = t["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("symlink"), "{job}: {reason}");
    }
    for job in ["over-file", "legit"] {
        assert_eq!(Cluster::task(&d, job)["status"], "FINISHED", "{d:#}");
    }
    assert_eq!(log(&c, &id, "over-file"), "mine\n");
    assert_eq!(log(&c, &id, "legit"), "fine\n");
    // Nothing reached the host.
    assert_eq!(std::fs::read_to_string(&host_file).unwrap(), "the host's\n");
    assert_eq!(std::fs::read_dir(&host_dir).unwrap().count(), 0);
}

#[test]
fn a_symlink_swapped_in_while_files_are_written_never_leads_out() {
    let c = Cluster::up(1);
    let mallory = c.user_token("mallory", "outsiders");
    let host_dir = c.data_dir().join("host-dir");
    std::fs::create_dir_all(&host_dir).unwrap();
    let hd = host_dir.display();
    // A service swaps /data/d between a directory and a link to the host while twenty jobs
    // have a file written into /data/d: each either gets its file in the volume or fails to
    // start, and the host directory stays empty.
    let file = c.write(
        "race.yaml",
        &format!(
            r#"version: v4
volumes:
  scratch: {{}}
services:
  swap:
    image: {{ uri: docker://busybox:1 }}
    command: [/bin/sh, -c, "while :; do mkdir -p /data/d; rm -rf /data/d; ln -s {hd} /data/d; rm -f /data/d; done"]
    mounts: {{ /data: {{ volume: scratch }} }}
jobs:
  write:
    image: {{ uri: docker://busybox:1 }}
    depends-on: [{{ name: swap, status: RUNNING }}]
    task-array: {{ start: 1, end: 20, concurrency: 4 }}
    command: [/bin/true]
    mounts: {{ /data: {{ volume: scratch }} }}
    files: {{ /data/d/x: "evil" }}
"#
        ),
    );
    let id = c.start_as(&mallory, &file);
    let d = c.wait_for(&id, "the writers to end", |d| {
        (1..=20).all(|i| {
            let s = &Cluster::task(d, &format!("write[{i}]"))["status"];
            s == "FINISHED" || s == "FAILED"
        })
    });
    for i in 1..=20 {
        let t = Cluster::task(&d, &format!("write[{i}]"));
        if t["status"] == "FAILED" {
            let reason = t["reason"].as_str().unwrap_or_default();
            assert!(
                reason.contains("symlink") || reason.contains("No such file"),
                "write[{i}]: {reason}"
            );
        }
    }
    assert_eq!(std::fs::read_dir(&host_dir).unwrap().count(), 0);
}

#[test]
fn volume_names_are_names_not_paths() {
    let c = Cluster::up(1);
    let mallory = c.user_token("mallory", "outsiders");
    let nested = r#"version: v4
volumes:
  outer: {}
  outer/inner: {}
  ../up: {}
jobs:
  j:
    image: { uri: docker://busybox:1 }
    command: [/bin/true]
    mounts:
      /a: { volume: outer }
      /b: { volume: outer/inner }
      /c: { volume: ../up }
"#;
    let file = c.write("nested.yaml", nested);
    let out = c.as_user(&mallory, &["workflow", "start", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(":4:3: volumes[\"outer/inner\"]: `outer/inner` is not a valid name"),
        "{err}"
    );
    assert!(err.contains(":5:3: volumes[\"../up\"]"), "{err}");
    // The server refuses it too, for a client that skips the CLI's checks, and stores nothing.
    let (status, body) = post_workflow(&c, &mallory, nested);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("outer/inner"), "{body}");
    let mine = c.as_user(&mallory, &["workflow", "list", "-o", "json"]);
    let listed: serde_json::Value = serde_json::from_slice(&mine.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed:#}");
    // Two volumes side by side are what the nesting pretended to be.
    let side = c.write(
        "side.yaml",
        r#"version: v4
volumes:
  outer: {}
  inner: {}
jobs:
  put:
    image: { uri: docker://busybox:1 }
    command: [/bin/sh, -c, "echo o > /a/f && mkdir /a/inner && echo i > /b/f"]
    mounts: { /a: { volume: outer }, /b: { volume: inner } }
  get:
    image: { uri: docker://busybox:1 }
    depends-on: [{ name: put }]
    command: [/bin/sh, -c, "cat /a/f /b/f; ls /a/inner | wc -l"]
    mounts: { /a: { volume: outer }, /b: { volume: inner } }
"#,
    );
    let id = c.start_as(&mallory, &side);
    c.wait_status(&id, "FINISHED");
    assert_eq!(
        log(&c, &id, "get").split_whitespace().collect::<Vec<_>>(),
        ["o", "i", "0"]
    );
}

#[test]
fn nothing_is_mounted_over_the_containers_own_machinery() {
    let c = Cluster::up(1);
    let mallory = c.user_token("mallory", "outsiders");
    let attack = |name: &str, target: &str, want: &str| {
        let text = format!(
            r#"version: v4
volumes:
  tools: {{}}
jobs:
  j:
    image: {{ uri: docker://busybox:1 }}
    command: [/bin/true]
    {target}
"#
        );
        let file = c.write(name, &text);
        let out = c.as_user(&mallory, &["workflow", "start", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{target}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{target}: {}", stderr(&out));
        let (status, body) = post_workflow(&c, &mallory, &text);
        assert_eq!(status, 400, "{target}: {body}");
    };
    attack(
        "dev.yaml",
        "mounts: { /dev: { volume: tools } }",
        "mount path `/dev` is reserved",
    );
    attack(
        "root.yaml",
        "mounts: { /: { volume: tools } }",
        "is the container's root",
    );
    attack(
        "proc.yaml",
        "mounts: { /proc/1: { volume: tools } }",
        "`/proc`",
    );
    attack(
        "sys.yaml",
        "mounts: { /sys/fs: { volume: tools } }",
        "`/sys`",
    );
    attack(
        "shm.yaml",
        "mounts: { /dev/shm: { volume: tools } }",
        "mount path `/dev/shm` is reserved",
    );
    attack(
        "confine.yaml",
        "files: { /dev/confine: \"#!/bin/sh\" }",
        "file destination `/dev/confine` is reserved",
    );
    attack(
        "script.yaml",
        "files: { /.gantry/script: \"x\" }",
        "`/.gantry`",
    );
    // The legitimate use beside it: a volume and a file elsewhere, and the job is confined.
    let ok = c.write(
        "ok.yaml",
        r#"version: v4
volumes:
  tools: {}
jobs:
  j:
    image: { uri: docker://busybox:1 }
    command: [/bin/sh, -c, "grep ^Seccomp: /proc/self/status; cat /opt/tools/conf; unshare -U -r true 2>&1; echo rc=$?"]
    mounts: { /opt/tools: { volume: tools } }
    files: { /opt/tools/conf: "conf\n" }
"#,
    );
    let id = c.start_as(&mallory, &ok);
    c.wait_status(&id, "FINISHED");
    let out = log(&c, &id, "j");
    assert!(out.starts_with("Seccomp:\t2\nconf\n"), "{out}");
    // The filter refuses unshare: no user namespace with every capability in it.
    assert!(
        out.contains("Operation not permitted") && out.ends_with("rc=1\n"),
        "{out}"
    );
}

#[test]
fn root_in_a_job_is_an_unprivileged_user_of_the_node() {
    // On every node: the local agents of one `gantry up` share a storage root, where each
    // probes for idmapped mounts when it starts. Each agent offers 2 cores and each job asks
    // for 2, and `a` is still running when `b` is placed, so they run on different nodes.
    let c = Cluster::up_with(2, vec!["--cpus".into(), "2".into()]);
    let mallory = c.user_token("mallory", "outsiders");
    let file = c.write(
        "who.yaml",
        r#"version: v4
volumes:
  scratch: {}
jobs:
  a:
    image: { uri: docker://busybox:1 }
    resource: { cpu: { cores: 2 } }
    command: [/bin/sh, -c, "id -u; cat /proc/self/uid_map; touch /data/mine; stat -c %u /data/mine; sleep 5"]
    mounts: { /data: { volume: scratch } }
  b:
    image: { uri: docker://busybox:1 }
    resource: { cpu: { cores: 2 } }
    command: [/bin/sh, -c, "id -u; cat /proc/self/uid_map; touch /data/mine; stat -c %u /data/mine"]
    mounts: { /data: { volume: scratch } }
"#,
    );
    let id = c.start_as(&mallory, &file);
    let d = c.wait_status(&id, "FINISHED");
    assert_ne!(
        Cluster::task(&d, "a")["node"],
        Cluster::task(&d, "b")["node"],
        "{d:#}"
    );
    for job in ["a", "b"] {
        let out = log(&c, &id, job);
        let lines: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        // Root inside, written files root's inside: as without a user namespace...
        assert_eq!(lines[0], ["0"], "{job}: {out}");
        assert_eq!(lines[2], ["0"], "{job}: {out}");
        // ...but root of the container is a host uid far from root (and from any real user).
        assert_eq!(lines[1][0], "0", "{job}: {out}");
        let host: u32 = lines[1][1].parse().unwrap();
        assert!(
            host >= 0x7100_0000,
            "{job}: container root is host uid {host}: {out}"
        );
        assert_eq!(lines[1][2], "65536", "{job}: {out}");
    }
}

#[test]
fn an_images_symlink_cannot_carry_a_mount_over_dev() {
    // The file names a harmless path, but the image makes it a link to /dev: runc follows the
    // link inside the container's root, so the volume (with a fake confine planted by an
    // earlier job) lands on /dev. What the container starts through is mounted after every
    // mount of the workflow's, and checked: the job still runs confined.
    let c = Cluster::up(1);
    let mallory = c.user_token("mallory", "outsiders");
    let file = c.write(
        "image-link.yaml",
        r#"version: v4
images:
  sneaky:
    from: docker://busybox:1
    run: [ "ln -s /dev /shadow" ]
volumes:
  tools: {}
jobs:
  plant:
    image: { uri: docker://busybox:1 }
    command: [/bin/sh, -c, "printf '#!/bin/sh\nshift\nexec \"$@\"\n' > /t/confine && chmod +x /t/confine && : > /t/seccomp.bpf && : > /t/marker"]
    mounts: { /t: { volume: tools } }
  escape:
    image: { build: sneaky }
    depends-on: [{ name: plant }]
    command: [/bin/sh, -c, "test -e /dev/marker && echo volume-on-dev; grep ^Seccomp: /proc/self/status; unshare -U -r true 2>&1; echo rc=$?"]
    mounts: { /shadow: { volume: tools } }
"#,
    );
    let id = c.start_as(&mallory, &file);
    let d = c.wait_for(&id, "the workflow to end", |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    assert_eq!(Cluster::task(&d, "escape")["status"], "FINISHED", "{d:#}");
    let out = log(&c, &id, "escape");
    // The attack was real: the volume is what the container sees at /dev...
    assert!(out.starts_with("volume-on-dev\n"), "{out}");
    // ...and yet its first process was the agent's confine, and the filter is loaded.
    assert!(out.contains("Seccomp:\t2\n"), "{out}");
    assert!(
        out.contains("Operation not permitted") && out.ends_with("rc=1\n"),
        "{out}"
    );
}
