//! The object cache's registry: a blob or manifest is served, and may be referenced, only in a
//! repository that links it. User A (group ga) builds an image in a workflow; user B (group gb)
//! knows its digests (they are no secret) and tries every way to read it through repositories
//! of his own, directly and through an agent; A's jobs still run the image and a rebuild is
//! still a cache hit.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::common::Cluster;

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

struct Reply {
    status: u16,
    body: Vec<u8>,
}

impl Reply {
    fn code(&self) -> String {
        let v: Value = serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}), status {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        });
        v["errors"][0]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn refused(&self, status: u16, code: &str, what: &str) {
        assert_eq!(
            (self.status, self.code().as_str()),
            (status, code),
            "{what}: {}",
            String::from_utf8_lossy(&self.body)
        );
    }
}

/// One request to the cluster's registry with a user's token, through curl.
fn v2(c: &Cluster, token: &str, method: &str, path: &str, body: Option<(&str, &[u8])>) -> Reply {
    let out_file = c.dir.path().join(format!("reply-{}", uuid_ish()));
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sS", "-m", "30", "-o"])
        .arg(&out_file)
        .args(["-w", "%{http_code}", "-H"])
        .arg(format!("Authorization: Bearer {token}"));
    if method == "HEAD" {
        cmd.arg("-I");
    } else {
        cmd.args(["-X", method]);
    }
    let body_file = c.dir.path().join(format!("body-{}", uuid_ish()));
    if let Some((content_type, bytes)) = body {
        std::fs::write(&body_file, bytes).unwrap();
        cmd.args(["-H", &format!("Content-Type: {content_type}")])
            .arg("--data-binary")
            .arg(format!("@{}", body_file.display()));
    }
    let out = cmd
        .arg(format!("http://127.0.0.1:{}{path}", c.port))
        .output()
        .expect("curl runs");
    let status = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    let body = std::fs::read(&out_file).unwrap_or_default();
    let _ = std::fs::remove_file(&out_file);
    let _ = std::fs::remove_file(&body_file);
    Reply { status, body }
}

fn uuid_ish() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn recipe(run: &str) -> String {
    format!(
        r#"version: v4
files:
  note.txt: |
    only for group ga
images:
  tool:
    from: docker://busybox:1
    files:
      /opt/app/note.txt: file://note.txt
    run:
      - {run}
    scope: user
jobs:
  use-it:
    image: {{ build: tool }}
    script: |
      #!/bin/sh
      cat /opt/app/note.txt /opt/app/built.txt
"#
    )
}

/// How many times the workflow's image build ran (0: a cache hit).
fn builds(d: &Value) -> usize {
    Cluster::task(d, "build:tool")["attempts"]
        .as_array()
        .map_or(0, Vec::len)
}

#[test]
fn another_group_cannot_reach_a_built_image_through_its_own_repositories() {
    let c = Cluster::up(1);
    let a = c.user_token("ana", "ga");
    let b = c.user_token("ben", "gb");

    // Ana builds her image in a workflow; its job runs in it.
    let file = c.write("a.yaml", &recipe("\"echo built > /opt/app/built.txt\""));
    let first = c.start_as(&a, &file);
    let d = c.wait_status(&first, "FINISHED");
    assert_eq!(builds(&d), 1, "it built");
    assert_eq!(
        c.ok(&["workflow", "log", &first, "use-it"]),
        "only for group ga\nbuilt\n"
    );
    let images = c.as_user(&a, &["image", "list", "-o", "json"]);
    let images: Value = serde_json::from_slice(&images.stdout).expect("JSON");
    let image = images
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["repository"] == "user/ana/tool")
        .unwrap_or_else(|| panic!("ana's image is listed: {images:#}"))
        .clone();
    let (tag, digest) = (
        image["tag"].as_str().unwrap().to_string(),
        image["digest"].as_str().unwrap().to_string(),
    );
    let r = v2(
        &c,
        &a,
        "GET",
        &format!("/v2/user/ana/tool/manifests/{tag}"),
        None,
    );
    assert_eq!(r.status, 200, "ana reads her manifest");
    assert_eq!(sha256(&r.body), digest);
    let manifest_bytes = r.body;
    let manifest: Value = serde_json::from_slice(&manifest_bytes).unwrap();
    let mut blobs = vec![manifest["config"]["digest"].as_str().unwrap().to_string()];
    for l in manifest["layers"].as_array().unwrap() {
        blobs.push(l["digest"].as_str().unwrap().to_string());
    }
    assert!(blobs.len() >= 3, "base, files and run layers: {manifest:#}");
    for d in &blobs {
        let r = v2(&c, &a, "GET", &format!("/v2/user/ana/tool/blobs/{d}"), None);
        assert_eq!(r.status, 200, "ana reads {d}");
        assert_eq!(sha256(&r.body), *d);
    }

    // Ben, with every digest, through his own user and group repositories: GET and HEAD of
    // each blob and of the manifest, all as for digests that exist nowhere.
    let nowhere = sha256(b"nothing");
    for repo in ["user/ben/tool", "group/gb/tool"] {
        for d in blobs.iter().chain([&digest, &nowhere]) {
            let path = format!("/v2/{repo}/blobs/{d}");
            v2(&c, &b, "GET", &path, None).refused(404, "BLOB_UNKNOWN", &path);
            assert_eq!(v2(&c, &b, "HEAD", &path, None).status, 404, "HEAD {path}");
        }
        for d in [&digest, &nowhere] {
            let path = format!("/v2/{repo}/manifests/{d}");
            v2(&c, &b, "GET", &path, None).refused(404, "MANIFEST_UNKNOWN", &path);
            assert_eq!(v2(&c, &b, "HEAD", &path, None).status, 404, "HEAD {path}");
        }
        // A mount from Ana's repository is an upload session, never her blob.
        for d in &blobs {
            let path = format!("/v2/{repo}/blobs/uploads/?mount={d}&from=user/ana/tool");
            assert_eq!(v2(&c, &b, "POST", &path, None).status, 202, "{path}");
            v2(&c, &b, "GET", &format!("/v2/{repo}/blobs/{d}"), None).refused(
                404,
                "BLOB_UNKNOWN",
                "after the mount",
            );
        }
        // Her manifest, pushed as his, and an index of it.
        let path = format!("/v2/{repo}/manifests/stolen");
        v2(&c, &b, "PUT", &path, Some((OCI_MANIFEST, &manifest_bytes))).refused(
            400,
            "MANIFEST_BLOB_UNKNOWN",
            &path,
        );
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2, "mediaType": OCI_INDEX,
            "manifests": [{"mediaType": OCI_MANIFEST, "digest": digest,
                           "size": manifest_bytes.len(),
                           "platform": {"os": "linux", "architecture": "amd64"}}]
        }))
        .unwrap();
        v2(&c, &b, "PUT", &path, Some((OCI_INDEX, &index))).refused(
            400,
            "MANIFEST_BLOB_UNKNOWN",
            &path,
        );
        v2(&c, &b, "GET", &path, None).refused(404, "MANIFEST_UNKNOWN", &path);
    }
    // Ana's repository itself is not his to name.
    v2(
        &c,
        &b,
        "GET",
        &format!("/v2/user/ana/tool/blobs/{}", blobs[1]),
        None,
    )
    .refused(404, "NAME_UNKNOWN", "ana's repository");

    // Through an agent: a job of Ben's naming Ana's manifest by digest in his own repository
    // (the agent pulls with its own token) does not start; nor does a build on her image.
    let port = c.port;
    let job = c.write(
        "b-job.yaml",
        &format!(
            "version: v4\njobs:\n  x:\n    image: {{ uri: \"docker://127.0.0.1:{port}/user/ben/tool@{digest}\" }}\n    command: [\"cat\", \"/opt/app/note.txt\"]\n"
        ),
    );
    let stolen = c.start_as(&b, &job);
    let d = c.wait_status(&stolen, "FAILED");
    let x = Cluster::task(&d, "x");
    let attempts = x["attempts"].as_array().unwrap();
    assert!(
        !attempts.is_empty() && attempts.iter().all(|t| t["cause"] == "START_ERROR"),
        "the image was never there to run: {x:#}"
    );
    assert!(
        x["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("manifest"),
        "{x:#}"
    );
    let from_hers = c.write(
        "b-build.yaml",
        &recipe("true").replace(
            "docker://busybox:1",
            &format!("docker://127.0.0.1:{port}/user/ana/tool:{tag}"),
        ),
    );
    let out = c.as_user(&b, &["workflow", "start", from_hers.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("images.tool.from") && err.contains("that you may use"),
        "{err}"
    );

    // Ben builds the same recipe: his own image, from his own uploads.
    let bens = c.start_as(&b, &file);
    let d = c.wait_status(&bens, "FINISHED");
    assert_eq!(builds(&d), 1, "ben's build is his own, not a hit on ana's");
    let got = c.as_user(&b, &["workflow", "log", &bens, "use-it"]);
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        "only for group ga\nbuilt\n"
    );

    // Ana's use goes on: the same recipe is a cache hit and its job runs the image; a changed
    // step rebuilds from there, taking the unchanged step's layer from her repository.
    let again = c.start_as(&a, &file);
    let d = c.wait_status(&again, "FINISHED");
    assert_eq!(builds(&d), 0, "a cache hit: {d:#}");
    let why = &Cluster::task(&d, "build:tool")["reason"];
    assert!(why.as_str().unwrap().contains("cache hit"), "{why}");
    assert_eq!(
        c.ok(&["workflow", "log", &again, "use-it"]),
        "only for group ga\nbuilt\n"
    );
    let changed = c.write("a2.yaml", &recipe("\"echo rebuilt > /opt/app/built.txt\""));
    let rebuilt = c.start_as(&a, &changed);
    let d = c.wait_status(&rebuilt, "FINISHED");
    assert_eq!(builds(&d), 1);
    let log = c.ok(&["workflow", "log", &rebuilt, "build:tool"]);
    assert!(
        log.contains("step 1/2: FILES /opt/app/note.txt (cached: "),
        "{log}"
    );
    assert_eq!(
        c.ok(&["workflow", "log", &rebuilt, "use-it"]),
        "only for group ga\nrebuilt\n"
    );
}
