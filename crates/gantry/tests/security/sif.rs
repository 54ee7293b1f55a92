//! SIF images over ORAS: a SIF made here (mksquashfs and the agent's SIF writer) is pushed to
//! the local test registry as Apptainer pushes it (an OCI manifest with one
//! `application/vnd.sylabs.sif.layer.v1.sif` layer), and run as `oras://` by a normal user,
//! directly (plain HTTP through the insecure-registry list) and through the docker.io mirror.
//! Next to it, hostile SIFs (a device node, a name with `..`) fail their job with the cause
//! and write nothing outside the layer cache.

use std::path::Path;
use std::process::Command;

use sha2::{Digest, Sha256};

use super::common::{self, Cluster};

const SIF_LAYER: &str = "application/vnd.sylabs.sif.layer.v1.sif";
const SIF_CONFIG: &str = "application/vnd.sylabs.sif.config.v1+json";

fn digest(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

/// The registry to push to: its base URL and, for the one with basic auth, `user:password`.
struct Target<'a> {
    base: String,
    auth: Option<&'a str>,
}

fn curl(to: &Target, args: &[&str], body: Option<&Path>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    if let Some(a) = to.auth {
        cmd.args(["-u", a]);
    }
    cmd.args([
        "-sS",
        "-m",
        "60",
        "-o",
        "/dev/null",
        "-D",
        "-",
        "-w",
        "\n%{http_code}",
    ]);
    cmd.args(args);
    if let Some(b) = body {
        cmd.arg("--data-binary").arg(format!("@{}", b.display()));
    }
    let out = cmd.output().expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = text
        .lines()
        .last()
        .unwrap_or("0")
        .trim()
        .parse()
        .unwrap_or(0);
    (code, text)
}

fn push_blob(to: &Target, repo: &str, dir: &Path, bytes: &[u8]) -> String {
    let base = &to.base;
    let d = digest(bytes);
    let file = dir.join(d.replace(':', "-"));
    std::fs::write(&file, bytes).unwrap();
    let (code, head) = curl(
        to,
        &["-X", "POST", &format!("{base}/v2/{repo}/blobs/uploads/")],
        None,
    );
    assert_eq!(code, 202, "{head}");
    let location = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("Location: ")
                .or_else(|| l.strip_prefix("location: "))
        })
        .expect("an upload location")
        .trim()
        .to_string();
    let url = if location.starts_with("http") {
        location
    } else {
        format!("{base}{location}")
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let (code, head) = curl(
        to,
        &[
            "-X",
            "PUT",
            "-H",
            "Content-Type: application/octet-stream",
            &format!("{url}{sep}digest={d}"),
        ],
        Some(&file),
    );
    assert_eq!(code, 201, "{head}");
    d
}

/// Pushes `sif` as an ORAS artifact to `REPO:TAG` through the registry's API.
fn push_sif(to: &Target, repo: &str, tag: &str, sif: &[u8], dir: &Path) {
    let base = &to.base;
    let config = b"{}";
    let config_digest = push_blob(to, repo, dir, config);
    let layer_digest = push_blob(to, repo, dir, sif);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": SIF_CONFIG, "digest": config_digest, "size": config.len()},
        "layers": [{
            "mediaType": SIF_LAYER, "digest": layer_digest, "size": sif.len(),
            "annotations": {"org.opencontainers.image.title": "image.sif"}
        }]
    });
    let file = dir.join(format!("manifest-{tag}.json"));
    std::fs::write(&file, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let (code, head) = curl(
        to,
        &[
            "-X",
            "PUT",
            "-H",
            "Content-Type: application/vnd.oci.image.manifest.v1+json",
            &format!("{base}/v2/{repo}/manifests/{tag}"),
        ],
        Some(&file),
    );
    assert_eq!(code, 201, "{head}");
}

/// A root filesystem with busybox, a file and Apptainer's environment directory.
fn rootfs(dir: &Path) {
    for d in ["bin", ".singularity.d/env"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("busybox-static");
    std::fs::copy(busybox, dir.join("bin/busybox")).unwrap();
    for applet in ["sh", "cat", "echo"] {
        std::os::unix::fs::symlink("busybox", dir.join("bin").join(applet)).unwrap();
    }
    std::fs::write(dir.join("hello.txt"), "hello from a SIF\n").unwrap();
    std::fs::write(
        dir.join(".singularity.d/env/90-environment.sh"),
        "#!/bin/sh\nexport GREETING=\"from the SIF env\"\n",
    )
    .unwrap();
}

fn mksquashfs(src: &Path, out: &Path, extra: &[&str]) -> Vec<u8> {
    gantry_agent::image::sif::mksquashfs(src, out, extra)
        .expect("mksquashfs (squashfs-tools, scripts/install-deps.sh)")
}

#[test]
fn oras_sif_images_run_and_hostile_ones_are_refused() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("rootfs");
    rootfs(&src);
    let good =
        gantry_agent::image::sif::write_sif(&mksquashfs(&src, &work.path().join("a.sqfs"), &[]));
    let device = gantry_agent::image::sif::write_sif(&mksquashfs(
        &src,
        &work.path().join("b.sqfs"),
        &["-p", "kmem c 600 0 0 1 2"],
    ));
    std::fs::write(src.join("zzzzzzz"), "escaped\n").unwrap();
    let mut dotdot = mksquashfs(&src, &work.path().join("c.sqfs"), &[]);
    let at = dotdot
        .windows(7)
        .position(|w| w == b"zzzzzzz")
        .expect("the name in the directory table");
    dotdot[at..at + 7].copy_from_slice(b"../evil");
    let dotdot = gantry_agent::image::sif::write_sif(&dotdot);
    // A repository of this run's own, so that runs never share a tag.
    let repo = format!("gantry-test/sif-{}", std::process::id());
    let open = Target {
        base: format!("http://{}", common::registry()),
        auth: None,
    };
    push_sif(&open, &repo, "1", &good, work.path());
    push_sif(&open, &repo, "device", &device, work.path());
    push_sif(&open, &repo, "dotdot", &dotdot, work.path());
    let auth_reg = common::test_env("GANTRY_TEST_AUTH_REGISTRY");
    let credential = format!(
        "{}:{}",
        common::test_env("GANTRY_TEST_AUTH_USER"),
        common::test_env("GANTRY_TEST_AUTH_PASSWORD")
    );
    let private = Target {
        base: format!("http://{auth_reg}"),
        auth: Some(&credential),
    };
    push_sif(
        &private,
        &format!("private/{repo}"),
        "1",
        &good,
        work.path(),
    );

    let c = Cluster::up_with(
        1,
        vec!["--insecure-registry".into(), common::registry().into()],
    );
    let alice = c.user_token("alice", "physics");
    let set = c.as_user(
        &alice,
        &["secret", "set", "regcred", "--value", &credential],
    );
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let reg = common::registry();
    let spec = format!(
        r#"version: v4
jobs:
  direct:
    image: {{uri: "oras://{reg}/{repo}:1"}}
    command: [/bin/sh, -c, 'cat /hello.txt; echo "$GREETING"']
  mirrored:
    image: {{uri: "oras://docker.io/{repo}:1"}}
    command: [/bin/sh, -c, 'cat /hello.txt']
  device:
    image: {{uri: "oras://{reg}/{repo}:device"}}
    command: [/bin/sh, -c, 'echo ran']
  dotdot:
    image: {{uri: "oras://{reg}/{repo}:dotdot"}}
    command: [/bin/sh, -c, 'echo ran']
  private:
    image: {{uri: "oras://{auth_reg}/private/{repo}:1", secret: "secret://user/regcred"}}
    command: [/bin/sh, -c, 'cat /hello.txt']
  no-credential:
    image: {{uri: "oras://{auth_reg}/private/{repo}:1"}}
    command: [/bin/sh, -c, 'echo ran']
"#
    );
    let file = c.write("sif.yaml", &spec);
    let id = c.start_as(&alice, &file);
    let d = c.wait_for(&id, "the workflow to end", |d| {
        matches!(
            d["status"].as_str(),
            Some("FINISHED" | "FAILED" | "STOPPED")
        )
    });
    let log = |job: &str| {
        let out = c.as_user(&alice, &["workflow", "log", &id, job]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for job in ["direct", "mirrored", "private"] {
        let t = Cluster::task(&d, job);
        assert_eq!(t["status"], "FINISHED", "{job}: {t:#}\n{}", c.log());
    }
    assert_eq!(log("direct"), "hello from a SIF\nfrom the SIF env\n");
    assert_eq!(log("mirrored"), "hello from a SIF\n");
    assert_eq!(log("private"), "hello from a SIF\n");
    // The image's secret is what opens the private registry, as for docker://.
    let anon = Cluster::task(&d, "no-credential");
    assert_eq!(anon["status"], "FAILED", "{anon:#}");
    let reason = anon["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("refused access"), "{reason}");

    let device = Cluster::task(&d, "device");
    assert_eq!(device["status"], "FAILED", "{device:#}");
    let reason = device["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("kmem") && reason.contains("device node"),
        "{reason}"
    );
    let dotdot = Cluster::task(&d, "dotdot");
    assert_eq!(dotdot["status"], "FAILED", "{dotdot:#}");
    assert!(!log("device").contains("ran") && !log("dotdot").contains("ran"));
    // Nothing of the hostile images landed anywhere in the cluster's state (layer caches,
    // their work directories).
    let mut stack = vec![c.data_dir().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = e.file_name();
            assert!(name != "evil" && name != "kmem", "{}", e.path().display());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
}
