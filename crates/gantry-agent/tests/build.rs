//! Image builds with real runc, a real registry (the local `docker-registry` of
//! `scripts/test-images.sh`) and busybox from it as the base: nothing is downloaded from
//! elsewhere. A `harness = false` test like `runtime.rs`.
//!
//! Each test process works in its own directory (`<test dir>/agent-build/<pid>`); what killed
//! runs left is removed at start.

mod common;

use std::collections::HashMap;
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use gantry_agent::build::{self, BuildEnv, Builder, StopSignal};
use gantry_agent::image::{ImageStore, PreparedImage, PullConfig};
use gantry_agent::net::{self, NetConfig, Network};
use gantry_agent::node::{self, AgentConfig};
use gantry_agent::runtime::{Runtime, RuntimeConfig};
use gantry_api::agent::{
    AgentMessage, Assignment, AttemptPhase, Capacity, ServerMessage, BUILD_KEY_ANNOTATION,
};
use gantry_api::EndCause;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

struct Ctx {
    dir: PathBuf,
    registry: String,
    base: String,
    cgroup_parent: String,
    rt: Runtime,
    images: Arc<ImageStore>,
    net: Arc<Network>,
    builder: Builder,
    tokio: tokio::runtime::Runtime,
}

/// A step, as the server sends it.
fn run(key: &str, command: &str) -> Value {
    json!({ "kind": "run", "key": key, "command": command })
}

fn files(key: &str, list: &[(&str, &str, u32)]) -> Value {
    let files: Vec<Value> = list
        .iter()
        .map(|(target, content, mode)| {
            json!({
                "target": target,
                "content": base64::engine::general_purpose::STANDARD.encode(content),
                "mode": mode,
            })
        })
        .collect();
    json!({ "kind": "files", "key": key, "files": files })
}

/// A unique repository per build, so the tests never see each other's images.
fn repository(tag: &str) -> String {
    format!(
        "test/build-{}-{tag}-{}",
        std::process::id(),
        &Uuid::new_v4().to_string()[..8]
    )
}

/// Built from JSON so the test does not depend on every field of the wire type.
fn assignment(c: &Ctx, repo: &str, steps: Vec<Value>, extra: Value) -> Assignment {
    let tag = steps
        .last()
        .map(|s| s["key"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| "base".into());
    let mut build = json!({
        "registry": c.registry,
        "repository": repo,
        "tag": tag,
        "base": { "uri": c.base },
        "steps": steps,
        "network": "none",
        "timeout_secs": 300,
    });
    for (k, v) in extra.as_object().unwrap() {
        build[k] = v.clone();
    }
    serde_json::from_value(json!({
        "attempt_id": Uuid::new_v4(),
        "workflow_id": Uuid::new_v4(),
        "task": "build:app",
        "attempt": 1,
        "image": { "uri": c.base },
        "argv": [],
        "env": [],
        "resources": { "cpus": 1.0, "memory_bytes": 512u64 << 20 },
        "build": build,
    }))
    .unwrap()
}

struct Outcome {
    code: i32,
    out: String,
    err: String,
}

/// Runs a build to its end, takes its log, and removes its task (as the agent does when the
/// server forgets the attempt).
fn build(c: &Ctx, asg: &Assignment) -> Outcome {
    let code = c
        .tokio
        .block_on(c.builder.build(asg, StopSignal::new()))
        .unwrap_or_else(|e| panic!("the build did not start: {e}"));
    finish(c, asg, code)
}

fn finish(c: &Ctx, asg: &Assignment, code: i32) -> Outcome {
    let id = asg.attempt_id.to_string();
    assert_eq!(
        c.rt.status(&id),
        gantry_agent::runtime::ContainerState::Exited {
            exit_code: code,
            signal: None
        }
    );
    let (out, err) = c.rt.log_paths(&id);
    let out = fs::read_to_string(out).unwrap();
    let err = fs::read_to_string(err).unwrap();
    c.rt.remove(&id).unwrap();
    assert_clean(c);
    print!("--- build log ---\n{out}--- stderr ---\n{err}-----------------\n");
    Outcome { code, out, err }
}

/// Nothing of a build stays: no containers, mounts, cgroups, scratch files.
fn assert_clean(c: &Ctx) {
    assert_eq!(c.rt.list(), Vec::<String>::new(), "containers left");
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mounts: Vec<&str> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| Path::new(m).starts_with(&c.dir))
        .collect();
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    let runc = Command::new("runc")
        .arg("--root")
        .arg(c.dir.join("runc"))
        .args(["list", "-q"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&runc.stdout).trim(),
        "",
        "runc containers left"
    );
    for ctrl in ["cpu", "memory", "pids", "freezer", "devices"] {
        let p = Path::new("/sys/fs/cgroup")
            .join(ctrl)
            .join(&c.cgroup_parent);
        let children: Vec<_> = fs::read_dir(&p)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            children.is_empty(),
            "cgroups left in {}: {children:?}",
            p.display()
        );
    }
    let tmp: Vec<_> = fs::read_dir(c.images.root().join("tmp"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(tmp.is_empty(), "image store scratch left: {tmp:?}");
    assert!(c.net.attachments().is_empty(), "networks left");
}

/// GETs a registry path (plain HTTP); returns the status and the body.
fn registry_get(c: &Ctx, path: &str) -> (u16, Vec<u8>) {
    c.tokio.block_on(async {
        let r = reqwest::Client::new()
            .get(format!("http://{}{path}", c.registry))
            .header(
                "Accept",
                "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json",
            )
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.bytes().await.unwrap().to_vec())
    })
}

/// The pushed manifest and configuration of `repo:tag`.
fn pushed(c: &Ctx, repo: &str, tag: &str) -> (Value, Value) {
    let (status, body) = registry_get(c, &format!("/v2/{repo}/manifests/{tag}"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let manifest: Value = serde_json::from_slice(&body).unwrap();
    let digest = manifest["config"]["digest"].as_str().unwrap();
    let (status, body) = registry_get(c, &format!("/v2/{repo}/blobs/{digest}"));
    assert_eq!(status, 200);
    (manifest, serde_json::from_slice(&body).unwrap())
}

/// Pulls a built image into a fresh image store (from the registry, nothing local).
fn pull(c: &Ctx, repo: &str, tag: &str) -> (PreparedImage, ImageStore) {
    let store = ImageStore::new(
        c.dir.join(format!("pull-{}", Uuid::new_v4())),
        PullConfig {
            insecure_hosts: vec![c.registry.clone()],
            ..Default::default()
        },
    )
    .unwrap();
    let src = serde_json::from_value(json!({
        "uri": format!("docker://{}/{repo}:{tag}", c.registry)
    }))
    .unwrap();
    let img = c
        .tokio
        .block_on(store.prepare(&src))
        .expect("pulling the built image");
    (img, store)
}

fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: valid strings and buffer.
    let len = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    (len >= 0).then(|| buf[..len as usize].to_vec())
}

fn builds_files_and_commands_and_pushes(c: &Ctx) {
    let repo = repository("app");
    let asg = assignment(
        c,
        &repo,
        vec![
            files(
                "k1",
                &[
                    ("/opt/app/hello.txt", "hello\n", 0o640),
                    ("/usr/local/bin/tool", "#!/bin/sh\necho tool\n", 0o4755),
                    ("/tmp/seed.txt", "seed\n", 0o644),
                ],
            ),
            run(
                "k2",
                "echo hi > /built; ls /; rm /etc/group; rm -r /root; mkdir -p /srv/data; \
                 echo owned > /srv/data/f; chown 1000:1000 /srv/data/f; \
                 ln /built /built-link; ln -s /built /built-sym; \
                 rm -r /var && mkdir /var && touch /var/new; \
                 cat /opt/app/hello.txt; echo \"env=$FOO,$STEP\"; pwd; echo to-stderr >&2",
            ),
            json!({ "kind": "run", "key": "k3", "command": "pwd; test -f /built && touch here",
                    "env": ["STEP=3"], "workdir": "/work/dir" }),
        ],
        json!({ "env": ["FOO=bar", "PATH=/usr/local/bin:/bin"] }),
    );
    let o = build(c, &asg);
    assert_eq!(o.code, 0, "{}\n{}", o.out, o.err);
    // The RUN step's output, in order, between the progress lines.
    assert!(
        o.out
            .contains("step 1/3: FILES /opt/app/hello.txt /usr/local/bin/tool /tmp/seed.txt"),
        "{}",
        o.out
    );
    assert!(
        o.out.contains("step 2/3: RUN echo hi > /built"),
        "{}",
        o.out
    );
    let ls = o.out.split("step 2/3: RUN").nth(1).unwrap();
    assert!(
        ls.contains("\nopt\n"),
        "`ls /` shows the FILES step's directory: {ls}"
    );
    assert!(o.out.contains("hello\nenv=bar,\n/\n"), "{}", o.out);
    assert!(o.out.contains("step 3/3: RUN pwd"), "{}", o.out);
    assert!(o.out.contains("/work/dir\n"), "{}", o.out);
    assert!(o.err.contains("to-stderr"), "{}", o.err);
    assert!(o.out.contains("steps run in a user namespace"), "{}", o.out);
    for phase in [
        "build finished in",
        "base ",
        "push ",
        "pushing layer sha256:",
    ] {
        assert!(o.out.contains(phase), "{phase}: {}", o.out);
    }

    let (manifest, config) = pushed(c, &repo, "k3");
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 4);
    assert!(layers[0].get("annotations").is_none());
    for (i, key) in ["k1", "k2", "k3"].iter().enumerate() {
        assert_eq!(layers[i + 1]["annotations"][BUILD_KEY_ANNOTATION], *key);
        assert_eq!(
            layers[i + 1]["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
    }
    assert_eq!(config["rootfs"]["diff_ids"].as_array().unwrap().len(), 4);
    let history = config["history"].as_array().unwrap();
    assert_eq!(history.len(), 4);
    assert!(
        history.iter().all(|h| h["created"].is_string()),
        "{history:?}"
    );
    let env: Vec<&str> = config["config"]["Env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(env, vec!["PATH=/usr/local/bin:/bin", "FOO=bar"]);
    assert_eq!(
        config["config"]["Cmd"],
        json!(["/bin/sh"]),
        "the base's config is kept"
    );

    // Pulled back: the files, their owners and modes, and the deletions as whiteouts.
    let (img, _store) = pull(c, &repo, "k3");
    assert_eq!(img.layers.len(), 4);
    assert_eq!(img.config.env, env);
    let (files_l, run_l, last_l) = (&img.layers[1], &img.layers[2], &img.layers[3]);
    let hello = files_l.join("opt/app/hello.txt");
    assert_eq!(fs::read_to_string(&hello).unwrap(), "hello\n");
    let md = fs::metadata(&hello).unwrap();
    assert_eq!((md.mode() & 0o7777, md.uid(), md.gid()), (0o640, 0, 0));
    let md = fs::metadata(files_l.join("usr/local/bin/tool")).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o4755);
    // /tmp existed in the base (1777): it came up with its own mode, not a default.
    assert_eq!(
        fs::metadata(files_l.join("tmp")).unwrap().mode() & 0o7777,
        0o1777
    );
    assert_eq!(fs::read_to_string(run_l.join("built")).unwrap(), "hi\n");
    let built = fs::metadata(run_l.join("built")).unwrap();
    assert_eq!(
        (built.uid(), built.gid()),
        (0, 0),
        "shifted back from the user namespace"
    );
    assert_eq!(
        fs::metadata(run_l.join("built-link")).unwrap().ino(),
        built.ino()
    );
    assert_eq!(
        fs::read_link(run_l.join("built-sym")).unwrap(),
        Path::new("/built")
    );
    let owned = fs::metadata(run_l.join("srv/data/f")).unwrap();
    assert_eq!((owned.uid(), owned.gid()), (1000, 1000));
    for gone in ["etc/group", "root"] {
        let wh = fs::symlink_metadata(run_l.join(gone)).unwrap();
        assert!(
            wh.file_type().is_char_device() && wh.rdev() == 0,
            "{gone} is a whiteout"
        );
    }
    // A directory removed and made again hides what the base had in it.
    assert_eq!(
        xattr(&run_l.join("var"), "trusted.overlay.opaque").as_deref(),
        Some(&b"y"[..])
    );
    assert!(run_l.join("var/new").is_file());
    // Mount points runc made are not part of the layer; the image had them anyway.
    for absent in ["proc", "sys", "dev", "tmp"] {
        assert!(!run_l.join(absent).exists(), "{absent} in the layer");
    }
    assert!(last_l.join("work/dir/here").is_file());
    assert!(
        fs::metadata(last_l.join("work/dir/here")).unwrap().mtime() <= build::layer::EPOCH,
        "mtimes are clamped"
    );
    // The base layer is the registry's own busybox layer, by digest.
    assert_eq!(
        img.layers[0].file_name(),
        c.images
            .layer_path(manifest["layers"][0]["digest"].as_str().unwrap())
            .unwrap()
            .file_name()
    );
}

fn cached_steps_are_not_run(c: &Ctx) {
    let repo = repository("cached");
    let key1 = format!("c1-{}", Uuid::new_v4());
    let first = assignment(
        c,
        &repo,
        vec![
            run(
                &key1,
                "test ! -e /marker && touch /marker && echo made-marker",
            ),
            run("c2", "test -e /marker && echo saw-marker"),
        ],
        json!({}),
    );
    let o = build(c, &first);
    assert_eq!(o.code, 0, "{}\n{}", o.out, o.err);
    assert!(o.out.contains("made-marker") && o.out.contains("saw-marker"));
    let (manifest, config) = pushed(c, &repo, "c2");
    let layer = &manifest["layers"][1];
    let cached = json!([{
        "key": key1,
        "digest": layer["digest"],
        "diff_id": config["rootfs"]["diff_ids"][1],
        "size": layer["size"],
        "media_type": layer["mediaType"],
    }]);
    // Nothing of it on this node: the layer comes from the registry.
    let digest = layer["digest"].as_str().unwrap();
    let hex = digest.strip_prefix("sha256:").unwrap();
    let _ = fs::remove_file(c.images.root().join("blobs/sha256").join(hex));
    assert!(!c.images.layer_path(digest).unwrap().exists());

    // The same keys: the first step is taken from the cache. Its command would fail if run.
    let second = assignment(
        c,
        &repo,
        vec![
            run(&key1, "echo ran-again; exit 7"),
            json!({ "kind": "run", "key": "c3", "command": "test -e /marker && echo saw-cached-marker" }),
        ],
        json!({ "cached": cached, "tag": "c3" }),
    );
    let o = build(c, &second);
    assert_eq!(o.code, 0, "{}\n{}", o.out, o.err);
    assert!(!o.out.lines().any(|l| l == "ran-again"), "{}", o.out);
    assert!(
        o.out
            .contains("step 1/2: RUN echo ran-again; exit 7 (cached: sha256:"),
        "{}",
        o.out
    );
    assert!(o.out.contains("saw-cached-marker"), "{}", o.out);
    assert!(c
        .images
        .layer_path(digest)
        .unwrap()
        .join("marker")
        .is_file());
    let (manifest2, config2) = pushed(c, &repo, "c3");
    assert_eq!(manifest2["layers"][1]["digest"], layer["digest"]);
    assert_eq!(
        manifest2["layers"][1]["annotations"][BUILD_KEY_ANNOTATION],
        key1.as_str()
    );
    assert_eq!(
        config2["rootfs"]["diff_ids"][1],
        config["rootfs"]["diff_ids"][1]
    );
    assert_eq!(manifest2["layers"].as_array().unwrap().len(), 3);
}

fn a_failing_step_fails_the_build(c: &Ctx) {
    let repo = repository("fails");
    let asg = assignment(
        c,
        &repo,
        vec![
            run("f1", "echo first"),
            run("f2", "echo about-to-fail; echo oops >&2; exit 3"),
            run("f3", "echo never"),
        ],
        json!({}),
    );
    let o = build(c, &asg);
    assert_eq!(o.code, 3);
    assert!(o.err.contains("oops\n"), "{}", o.err);
    assert!(o.err.contains("step 2/3 failed: exit code 3"), "{}", o.err);
    assert!(o.out.contains("about-to-fail"), "{}", o.out);
    assert!(
        !o.out.contains("never") && !o.out.contains("step 3/3"),
        "{}",
        o.out
    );
    assert!(o.out.contains("build failed after"), "{}", o.out);
    let (status, _) = registry_get(c, &format!("/v2/{repo}/manifests/f3"));
    assert_eq!(status, 404, "nothing pushed");

    // A base that cannot be pulled: the build does not start, and leaves nothing.
    let mut bad = assignment(c, &repository("nobase"), vec![run("n1", "true")], json!({}));
    bad.build.as_mut().unwrap().base.uri = format!("docker://{}/library/no-such:1", c.registry);
    let err = c
        .tokio
        .block_on(c.builder.build(&bad, StopSignal::new()))
        .unwrap_err();
    assert!(err.to_string().contains("no-such"), "{err}");
    assert_clean(c);
}

fn run_steps_are_confined(c: &Ctx) {
    let secret = format!("gantry-build-secret-{}", Uuid::new_v4());
    let host_file = Path::new("/tmp").join(&secret);
    fs::write(&host_file, "secret").unwrap();
    let script = format!(
        "ps -o pid,comm; echo --; cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '; echo --; \
         ls /tmp/{secret} 2>&1; find / -xdev -name '{secret}' 2>/dev/null; echo --; \
         cat /proc/self/uid_map; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; \
         stat -c %a /tmp; echo --; \
         if unshare -n true 2>/dev/null; then echo unshare-allowed; else echo unshare-refused; fi; \
         if mknod /dev/x c 1 3 2>/dev/null; then echo mknod-allowed; else echo mknod-refused; fi; \
         if mount -t tmpfs none /tmp 2>/dev/null; then echo mount-allowed; else echo mount-refused; fi"
    );
    let asg = assignment(
        c,
        &repository("confined"),
        vec![run("x1", &script)],
        json!({}),
    );
    let o = build(c, &asg);
    let _ = fs::remove_file(&host_file);
    assert_eq!(o.code, 0, "{}\n{}", o.out, o.err);
    let start = o.out.find("PID").expect("ps output");
    let parts: Vec<&str> = o.out[start..].split("--\n").collect();
    let procs: Vec<(u32, &str)> = parts[0]
        .lines()
        .skip(1)
        .map(|l| {
            let mut f = l.split_whitespace();
            (f.next().unwrap().parse().unwrap(), f.next().unwrap_or(""))
        })
        .collect();
    // The init, the shell, ps: nothing of the host.
    assert!(procs.len() <= 3, "{procs:?}");
    assert!(procs.iter().all(|(pid, _)| *pid < 10), "{procs:?}");
    assert_eq!(parts[1].trim(), "lo", "network none: only loopback");
    assert!(parts[2].contains("No such file"), "{}", parts[2]);
    assert!(
        !parts[2].lines().any(|l| l.ends_with(&secret)),
        "{}",
        parts[2]
    );
    let status = parts[3];
    let map: Vec<&str> = status.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        map,
        vec![
            "0",
            &gantry_agent::runtime::userns::BUILD_MAP.host.to_string(),
            "65536"
        ]
    );
    // CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID AUDIT_WRITE SETFCAP, nothing else.
    assert!(status.contains("CapEff:\t00000000a00000fb"), "{status}");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    assert!(status.contains("Seccomp:\t2"), "{status}");
    assert!(status.contains("\n1777\n"), "{status}");
    for refused in ["unshare-refused", "mknod-refused", "mount-refused"] {
        assert!(parts[4].contains(refused), "{}", parts[4]);
    }
}

fn builds_without_a_user_namespace(c: &Ctx) {
    // Where a node cannot map ids, steps run as root with the short capability list.
    let plain = Builder::new(BuildEnv {
        userns: None,
        ..c.builder.env().clone()
    });
    let repo = repository("plain");
    let asg = assignment(
        c,
        &repo,
        vec![
            files("p1", &[("/etc/app.conf", "x=1\n", 0o600)]),
            run(
                "p2",
                "cat /proc/self/uid_map; grep CapEff /proc/self/status; \
                 echo made > /made; chown 1000:1000 /made; rm /etc/group",
            ),
        ],
        json!({}),
    );
    let code = c
        .tokio
        .block_on(plain.build(&asg, StopSignal::new()))
        .unwrap();
    let o = finish(c, &asg, code);
    assert_eq!(o.code, 0, "{}\n{}", o.out, o.err);
    assert!(o.out.contains("without a user namespace"), "{}", o.out);
    assert!(o.out.contains("0          0 4294967295"), "{}", o.out);
    assert!(o.out.contains("CapEff:\t00000000a00000fb"), "{}", o.out);
    let (img, _store) = pull(c, &repo, "p2");
    let conf = fs::metadata(img.layers[1].join("etc/app.conf")).unwrap();
    assert_eq!((conf.mode() & 0o7777, conf.uid()), (0o600, 0));
    let made = fs::metadata(img.layers[2].join("made")).unwrap();
    assert_eq!((made.uid(), made.gid()), (1000, 1000));
    let wh = fs::symlink_metadata(img.layers[2].join("etc/group")).unwrap();
    assert!(wh.file_type().is_char_device() && wh.rdev() == 0);
}

fn bridge_builds_reach_the_node_bridge(c: &Ctx) {
    let asg = assignment(
        c,
        &repository("bridge"),
        vec![run(
            "b1",
            "cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' ' | sort; ls /sys | head -3; \
             cat /etc/resolv.conf > /dev/null && echo has-resolv",
        )],
        json!({ "network": "bridge" }),
    );
    let o = build(c, &asg);
    assert_eq!(o.code, 0, "{}\n{}", o.out, o.err);
    assert!(o.out.contains("eth0\nlo\n"), "{}", o.out);
    assert!(o.out.contains("has-resolv"), "{}", o.out);
}

fn the_timeout_stops_a_build(c: &Ctx) {
    let asg = assignment(
        c,
        &repository("slow"),
        vec![run("s1", "echo sleeping; sleep 600")],
        json!({ "timeout_secs": 3 }),
    );
    let o = build(c, &asg);
    assert_eq!(o.code, build::EXIT_TIMEOUT, "{}\n{}", o.out, o.err);
    assert!(
        o.err.contains("ran past the build's timeout of 3 s"),
        "{}",
        o.err
    );

    // A stop from the server: the step gets SIGTERM.
    let asg = assignment(
        c,
        &repository("stopped"),
        vec![run("s2", "sleep 600")],
        json!({}),
    );
    let stop = StopSignal::new();
    let s2 = stop.clone();
    let code = c.tokio.block_on(async {
        let prepared = c.builder.prepare(&asg).await.unwrap();
        let h = tokio::spawn(prepared.run(s2));
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.stop(Duration::from_secs(5));
        h.await.unwrap()
    });
    let o = finish(c, &asg, code);
    assert_eq!(o.code, 143, "{}\n{}", o.out, o.err);
    assert!(o.err.contains("stopped at step 1/1"), "{}", o.err);
}

// --- the whole agent against a small server -------------------------------------------------

fn the_agent_runs_build_assignments(c: &Ctx) {
    let state = c.dir.join("agent");
    let name = format!("buildtest-{}", std::process::id());
    let listener = c
        .tokio
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let config = AgentConfig {
        server: format!("http://{}", listener.local_addr().unwrap()),
        token: "agent-token".into(),
        pool: "default".into(),
        name: name.clone(),
        capacity: Capacity {
            cpus: 2,
            memory_bytes: 1 << 30,
            devices: Default::default(),
        },
        storage_root: c.dir.join("storage"),
        state_dir: state.clone(),
        pull: PullConfig {
            insecure_hosts: vec![c.registry.clone()],
            ..Default::default()
        },
        metrics_listen: None,
        node_exporter: None,
        job_userns: Some(gantry_agent::runtime::JOB_IDS),
        host_allow: vec![],
        labels: Default::default(),
        advertise: None,
        exec_listen: None,
    };
    let repo = repository("agent");
    let asg = assignment(c, &repo, vec![run("a1", "echo from-the-build")], json!({}));
    let agent = tokio::runtime::Runtime::new().unwrap();
    agent.spawn(node::run(config));
    c.tokio.block_on(async {
        let (sock, _) = tokio::time::timeout(Duration::from_secs(60), listener.accept())
            .await
            .expect("the agent did not connect")
            .unwrap();
        let mut ws = tokio_tungstenite::accept_async(sock).await.unwrap();
        let send = |m: ServerMessage| Message::Text(serde_json::to_string(&m).unwrap().into());
        ws.send(send(ServerMessage::Welcome {
            node_id: Uuid::new_v4(),
            heartbeat_interval_ms: 1000,
            subnet: None,
            transfer_events: false,
            probe_results: false,
            ping_heartbeats: false,
        }))
        .await
        .unwrap();
        ws.send(send(ServerMessage::Assign(Box::new(asg.clone()))))
            .await
            .unwrap();
        let mut phases = Vec::new();
        let mut logs: HashMap<bool, Vec<u8>> = HashMap::new();
        let end = loop {
            let msg = tokio::time::timeout(Duration::from_secs(120), ws.next())
                .await
                .expect("the agent said nothing for two minutes")
                .unwrap()
                .unwrap();
            let Message::Text(t) = msg else { continue };
            match serde_json::from_str::<AgentMessage>(t.as_str()).unwrap() {
                AgentMessage::Status(r) if r.attempt_id == asg.attempt_id => {
                    phases.push(r.phase.clone());
                    if matches!(
                        r.phase,
                        AttemptPhase::Exited { .. } | AttemptPhase::StartFailed { .. }
                    ) {
                        break r.phase;
                    }
                }
                AgentMessage::Log(l) => {
                    let data = base64::engine::general_purpose::STANDARD
                        .decode(&l.data)
                        .unwrap();
                    let buf = logs
                        .entry(l.stream == gantry_api::agent::Stream::Stdout)
                        .or_default();
                    buf.truncate(l.offset as usize);
                    buf.extend_from_slice(&data);
                }
                _ => {}
            }
        };
        assert_eq!(
            end,
            AttemptPhase::Exited {
                exit_code: 0,
                cause: EndCause::Exit
            },
            "{logs:?}"
        );
        assert_eq!(phases[0], AttemptPhase::Preparing);
        assert!(
            matches!(phases[1], AttemptPhase::Running { .. }),
            "{phases:?}"
        );
        // The whole log came before the end.
        let out = String::from_utf8_lossy(&logs[&true]).into_owned();
        assert!(
            out.contains("step 1/1: RUN echo from-the-build\nfrom-the-build\n"),
            "{out}"
        );
        assert!(out.contains("build finished in"), "{out}");
        ws.send(send(ServerMessage::Forget {
            attempt_id: asg.attempt_id,
        }))
        .await
        .unwrap();
        let dir = state
            .join("runtime/containers")
            .join(asg.attempt_id.to_string());
        let deadline = Instant::now() + Duration::from_secs(30);
        while dir.exists() {
            assert!(
                Instant::now() < deadline,
                "the build's directory stays after Forget"
            );
            let _ = tokio::time::timeout(Duration::from_millis(100), ws.next()).await;
        }
    });
    agent.shutdown_background();
    pushed(c, &repo, "a1");
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!info.contains(state.to_str().unwrap()), "mounts left");
}

// --- setup and cleanup ----------------------------------------------------------------------

type Test = (&'static str, fn(&Ctx));

const TESTS: &[Test] = &[
    (
        "builds_files_and_commands_and_pushes",
        builds_files_and_commands_and_pushes,
    ),
    ("cached_steps_are_not_run", cached_steps_are_not_run),
    (
        "a_failing_step_fails_the_build",
        a_failing_step_fails_the_build,
    ),
    ("run_steps_are_confined", run_steps_are_confined),
    (
        "builds_without_a_user_namespace",
        builds_without_a_user_namespace,
    ),
    (
        "bridge_builds_reach_the_node_bridge",
        bridge_builds_reach_the_node_bridge,
    ),
    ("the_timeout_stops_a_build", the_timeout_stops_a_build),
    (
        "the_agent_runs_build_assignments",
        the_agent_runs_build_assignments,
    ),
];

/// A /24 of 10.233.0.0/16 that the host routes nowhere yet.
fn free_subnet() -> String {
    let out = Command::new("ip").args(["-4", "route"]).output().unwrap();
    let routes = String::from_utf8_lossy(&out.stdout).into_owned();
    let start = std::process::id() as usize % 200;
    (0..250)
        .map(|i| (start + i) % 250 + 1)
        .find(|k| !routes.contains(&format!("10.233.{k}.")))
        .map(|k| format!("10.233.{k}.0/24"))
        .expect("no free subnet in 10.233.0.0/16")
}

fn runtime_of(dir: &Path, cgroup_parent: &str) -> Runtime {
    Runtime::new(RuntimeConfig::new(
        dir.join("state"),
        dir.join("runc"),
        cgroup_parent,
    ))
    .unwrap()
}

fn net_of(dir: &Path) -> Network {
    Network::new(NetConfig::for_agent(
        dir,
        &format!("buildtest-{}", dir.display()),
    ))
    .unwrap()
}

/// Tears down one test process's directory: containers, networks, the bridges, mounts, files.
fn teardown(dir: &Path) {
    let pid = dir.file_name().unwrap().to_string_lossy().into_owned();
    let agent = dir.join("agent");
    // (runtime state, runc root, cgroup parent, network state) of the builder the tests drive
    // and of the agent run whole.
    for (state, runc, cgroup, net) in [
        (
            dir.join("state"),
            dir.join("runc"),
            format!("gantry-test/agent-build-{pid}"),
            dir.join("net"),
        ),
        (
            agent.join("runtime"),
            agent.join("runc"),
            format!("gantry/buildtest-{pid}"),
            agent.join("net"),
        ),
    ] {
        if state.join("containers").is_dir() {
            let rt = Runtime::new(RuntimeConfig::new(state, runc, cgroup.as_str())).unwrap();
            for id in rt.list() {
                if let Err(e) = rt.remove(&id) {
                    eprintln!("removing leftover {id}: {e}");
                }
            }
        }
        common::remove_agent_network(&net);
    }
    common::unmount_beneath(dir);
    if let Err(e) = fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            eprintln!("removing {}: {e}", dir.display());
        }
    }
}

fn main() {
    let Some(selected) = common::select(TESTS) else {
        return;
    };
    assert!(
        net::find_plugin_dir().is_some(),
        "no CNI plugins: apt-get install containernetworking-plugins"
    );

    let env = common::env();
    let base = env.dir.join("agent-build");
    fs::create_dir_all(&base).unwrap();
    if let Ok(rd) = fs::read_dir(&base) {
        for e in rd.flatten() {
            let pid = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok());
            if pid.is_some_and(|p| !common::pid_alive(p)) {
                teardown(&e.path());
            }
        }
    }
    let dir = base.join(std::process::id().to_string());
    teardown(&dir);
    fs::create_dir_all(&dir).unwrap();
    let cgroup_parent = format!("gantry-test/agent-build-{}", std::process::id());
    let rt = runtime_of(&dir, &cgroup_parent);
    let images = Arc::new(
        ImageStore::new(
            dir.join("images"),
            PullConfig {
                insecure_hosts: vec![env.registry.clone()],
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let network = Arc::new(net_of(&dir));
    network.set_subnet(&free_subnet()).unwrap();
    let builder = Builder::new(BuildEnv {
        runtime: rt.clone(),
        images: images.clone(),
        net: Some(network.clone()),
        pull: PullConfig {
            insecure_hosts: vec![env.registry.clone()],
            ..Default::default()
        },
        token: Some("agent-token".into()),
        userns: Some(gantry_agent::runtime::userns::BUILD_MAP),
    });
    let forwarding = common::forwarding();
    let ctx = Ctx {
        dir: dir.clone(),
        registry: env.registry.clone(),
        base: format!("docker://{}/library/busybox:1", env.registry),
        cgroup_parent,
        rt,
        images,
        net: network,
        builder,
        tokio: tokio::runtime::Runtime::new().unwrap(),
    };

    let tally = common::run_all(
        TESTS.len(),
        &selected,
        |t| t(&ctx),
        || {
            for id in ctx.rt.list() {
                let _ = ctx.rt.remove(&id);
            }
            ctx.net.cleanup(&[]);
        },
    );
    drop(ctx);
    teardown(&dir);
    common::restore_forwarding(&forwarding);
    tally.finish();
}
