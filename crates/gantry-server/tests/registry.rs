//! The object cache's OCI registry at `/v2/`, against a server started in-process, with real
//! clients: skopeo (pushes and pulls the busybox layouts `scripts/test-images.sh` builds),
//! oci-client (what Gantry's agents pull with) and plain HTTP for the protocol's corners.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use common::{bearer, client, Cluster};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

// --- the test images ----------------------------------------------------------------------

/// A value from the env file `scripts/test-images.sh` writes, running it once if needed.
fn test_env(key: &str) -> String {
    static ENV: OnceLock<BTreeMap<String, String>> = OnceLock::new();
    let all = ENV.get_or_init(|| {
        let dir = std::env::var("GANTRY_TEST_DIR").unwrap_or_else(|_| "/tmp/gantry-test".into());
        let file = Path::new(&dir).join("env");
        let wanted = ["GANTRY_TEST_OCI_BUSYBOX", "GANTRY_TEST_OCI_MULTI"];
        let complete = std::fs::read_to_string(&file)
            .map(|t| wanted.iter().all(|k| t.contains(k)))
            .unwrap_or(false);
        let layouts_there = complete
            && std::fs::read_to_string(&file)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.split_once('='))
                .filter(|(k, _)| k.starts_with("GANTRY_TEST_OCI_"))
                .all(|(_, v)| Path::new(v).join("index.json").is_file());
        if !layouts_there {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-images.sh");
            let status = std::process::Command::new(script)
                .stdout(std::process::Stdio::null())
                .status()
                .expect("running scripts/test-images.sh");
            assert!(status.success(), "scripts/test-images.sh failed");
        }
        std::fs::read_to_string(&file)
            .expect("the test env file")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    });
    all.get(key)
        .unwrap_or_else(|| panic!("{key} is not in the test env file"))
        .clone()
}

fn layout(which: &str) -> PathBuf {
    PathBuf::from(test_env(&format!("GANTRY_TEST_OCI_{which}")))
}

/// The digest `index.json` of a layout points at.
fn layout_digest(dir: &Path) -> String {
    let index: Value = serde_json::from_slice(
        &std::fs::read(dir.join("index.json")).expect("a layout's index.json"),
    )
    .expect("index.json is JSON");
    index["manifests"][0]["digest"]
        .as_str()
        .expect("a digest")
        .to_string()
}

/// The blob files of a directory of `sha256/<hex>` files, as `sha256:<hex>` → size.
fn blob_files(dir: &Path) -> BTreeMap<String, u64> {
    let Ok(entries) = std::fs::read_dir(dir.join("sha256")) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .map(|e| {
            (
                format!("sha256:{}", e.file_name().to_string_lossy()),
                e.metadata().expect("metadata").len(),
            )
        })
        .collect()
}

fn layout_blobs(dir: &Path) -> BTreeMap<String, u64> {
    blob_files(&dir.join("blobs"))
}

fn cache_blobs(data: &Path) -> BTreeMap<String, u64> {
    blob_files(&data.join("objects/blobs"))
}

fn read_blob(layout: &Path, digest: &str) -> Vec<u8> {
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    std::fs::read(layout.join("blobs/sha256").join(hex)).expect("a layout blob")
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

// --- skopeo -------------------------------------------------------------------------------

async fn skopeo(args: &[&str]) -> Output {
    tokio::process::Command::new("skopeo")
        .arg("--insecure-policy")
        .args(args)
        .output()
        .await
        .expect("skopeo runs (apt-get install skopeo)")
}

fn host(c: &Cluster) -> String {
    c.server.addr.to_string()
}

/// Pushes tag "1" of a layout to `repo` (`user/alice/busybox:1`) as the token's user.
async fn push(c: &Cluster, layout: &Path, repo: &str, token: &str) -> Output {
    skopeo(&[
        "copy",
        "--all",
        "--dest-tls-verify=false",
        "--dest-creds",
        &format!("someone:{token}"),
        &format!("oci:{}:1", layout.display()),
        &format!("docker://{}/{repo}", host(c)),
    ])
    .await
}

async fn push_ok(c: &Cluster, layout: &Path, repo: &str, token: &str) {
    let out = push(c, layout, repo, token).await;
    assert!(
        out.status.success(),
        "skopeo push to {repo} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Pulls `repo` into a new layout; returns the layout (kept in `into`) or skopeo's output.
async fn pull(c: &Cluster, repo: &str, token: &str, into: &Path) -> Result<PathBuf, Output> {
    let dest = into.join(repo.replace(['/', ':'], "_"));
    let _ = std::fs::remove_dir_all(&dest);
    let out = skopeo(&[
        "copy",
        "--all",
        "--src-tls-verify=false",
        "--src-creds",
        &format!("someone:{token}"),
        &format!("docker://{}/{repo}", host(c)),
        &format!("oci:{}:1", dest.display()),
    ])
    .await;
    if out.status.success() {
        Ok(dest)
    } else {
        Err(out)
    }
}

async fn pull_ok(c: &Cluster, repo: &str, token: &str, into: &Path) -> PathBuf {
    match pull(c, repo, token, into).await {
        Ok(p) => p,
        Err(out) => panic!(
            "skopeo pull of {repo} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

// --- plain HTTP --------------------------------------------------------------------------

struct V2 {
    base: String,
    http: reqwest::Client,
}

#[derive(Debug)]
struct Resp {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}), status {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }

    /// The code of a distribution-spec error body.
    fn code(&self) -> String {
        let v = self.json();
        v["errors"][0]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no errors[0].code in a {} reply: {v}", self.status))
            .to_string()
    }

    fn expect(&self, status: StatusCode, code: &str, what: &str) {
        assert_eq!(
            self.status,
            status,
            "{what}: {}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(self.code(), code, "{what}");
    }
}

impl V2 {
    fn new(c: &Cluster) -> V2 {
        V2 {
            base: format!("http://{}", c.server.addr),
            http: client(),
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        auth: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Resp {
        let url = if path.starts_with("http") {
            path.to_string()
        } else {
            format!("{}{path}", self.base)
        };
        let mut b = self.http.request(method, url);
        if let Some(a) = auth {
            b = b.header(AUTHORIZATION, a);
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        if let Some(body) = body {
            b = b.body(body);
        }
        let r = b.send().await.expect("the server answers");
        Resp {
            status: r.status(),
            headers: r.headers().clone(),
            body: r.bytes().await.expect("a body").to_vec(),
        }
    }

    async fn get(&self, path: &str, token: &str) -> Resp {
        self.send(Method::GET, path, Some(&bearer(token)), &[], None)
            .await
    }

    /// Uploads a blob monolithically (POST ?digest=).
    async fn put_blob(&self, repo: &str, token: &str, bytes: &[u8]) -> String {
        let digest = sha256(bytes);
        let r = self
            .send(
                Method::POST,
                &format!("/v2/{repo}/blobs/uploads/?digest={digest}"),
                Some(&bearer(token)),
                &[("content-type", "application/octet-stream")],
                Some(bytes.to_vec()),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::CREATED,
            "{}",
            String::from_utf8_lossy(&r.body)
        );
        digest
    }

    async fn head(&self, path: &str, token: &str) -> Resp {
        self.send(Method::HEAD, path, Some(&bearer(token)), &[], None)
            .await
    }

    /// Asks for a cross-repository mount of `digest` from `from` into `repo`.
    async fn mount(&self, repo: &str, digest: &str, from: &str, token: &str) -> Resp {
        self.send(
            Method::POST,
            &format!("/v2/{repo}/blobs/uploads/?mount={digest}&from={from}"),
            Some(&bearer(token)),
            &[],
            None,
        )
        .await
    }

    /// Pushes a [`tiny_image`] of `content` as `repo:1`; returns its (manifest, config,
    /// layer).
    async fn push_tiny(
        &self,
        repo: &str,
        token: &str,
        content: &str,
    ) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let (m, config, layer) = tiny_image(content);
        self.put_blob(repo, token, &config).await;
        self.put_blob(repo, token, &layer).await;
        let r = self
            .put_manifest(repo, "1", token, OCI_MANIFEST, &m, &[])
            .await;
        assert_eq!(
            r.status,
            StatusCode::CREATED,
            "{repo}:1: {}",
            String::from_utf8_lossy(&r.body)
        );
        (m, config, layer)
    }

    async fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        token: &str,
        media_type: &str,
        body: &[u8],
        extra: &[(&str, &str)],
    ) -> Resp {
        let mut headers = vec![("content-type", media_type)];
        headers.extend_from_slice(extra);
        self.send(
            Method::PUT,
            &format!("/v2/{repo}/manifests/{reference}"),
            Some(&bearer(token)),
            &headers,
            Some(body.to_vec()),
        )
        .await
    }
}

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// A small image of one layer, built in memory: (manifest bytes, config, layer).
fn tiny_image(content: &str) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [sha256(content.as_bytes())]}
    }))
    .expect("json");
    let layer = content.as_bytes().to_vec();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha256(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": sha256(&layer), "size": layer.len()}]
    }))
    .expect("json");
    (manifest, config, layer)
}

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// An index of these image manifests (linux/amd64 each).
fn index_of(manifests: &[&[u8]]) -> Vec<u8> {
    let entries: Vec<Value> = manifests
        .iter()
        .map(|m| {
            json!({"mediaType": OCI_MANIFEST, "digest": sha256(m), "size": m.len(),
                   "platform": {"os": "linux", "architecture": "amd64"}})
        })
        .collect();
    serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}))
        .expect("json")
}

/// A refusal that says no more than the same request for a digest that exists nowhere: the
/// same status, code and body but for the digest itself.
fn same_as_nowhere(got: &Resp, digest: &str, nowhere: &Resp, nowhere_digest: &str, what: &str) {
    assert_eq!(got.status, nowhere.status, "{what}");
    assert_eq!(
        String::from_utf8_lossy(&got.body).replace(digest, "D"),
        String::from_utf8_lossy(&nowhere.body).replace(nowhere_digest, "D"),
        "{what}"
    );
}

async fn started() -> (Cluster, tempfile::TempDir, tempfile::TempDir) {
    let data = tempfile::tempdir().expect("a data dir");
    let scratch = tempfile::tempdir().expect("a scratch dir");
    let c = Cluster::start_in(data.path()).await;
    (c, data, scratch)
}

/// The images a user's token lists: `repository:tag` (or `@digest`) → digest.
async fn listed(c: &Cluster, token: &str) -> BTreeMap<String, String> {
    let r = c.get(token, "/images").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.json()
        .as_array()
        .expect("a list")
        .iter()
        .map(|i| {
            let repo = i["repository"].as_str().expect("a repository");
            let name = match i["tag"].as_str() {
                Some(t) => format!("{repo}:{t}"),
                None => format!("{repo}@{}", i["digest"].as_str().expect("a digest")),
            };
            (name, i["digest"].as_str().expect("a digest").to_string())
        })
        .collect()
}

fn names(m: &BTreeMap<String, String>) -> BTreeSet<&str> {
    m.keys().map(String::as_str).collect()
}

// --- the tests ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skopeo_pushes_and_pulls_within_scope() {
    let (c, data, scratch) = started().await;
    let v2 = V2::new(&c);
    let busybox = layout("BUSYBOX");
    let want = test_env("GANTRY_TEST_BUSYBOX_DIGEST");
    assert_eq!(layout_digest(&busybox), want);

    // Alice pushes to her own namespace and to her group's; she pulls both back unchanged.
    push_ok(&c, &busybox, "user/alice/busybox:1", &c.alice).await;
    push_ok(&c, &busybox, "group/physics/busybox:1", &c.alice).await;
    for repo in ["user/alice/busybox:1", "group/physics/busybox:1"] {
        let got = pull_ok(&c, repo, &c.alice, scratch.path()).await;
        assert_eq!(layout_digest(&got), want, "{repo}");
        assert_eq!(layout_blobs(&got), layout_blobs(&busybox), "{repo}");
    }

    // Blobs are stored once, whatever the number of names: manifest, config and layer.
    assert_eq!(cache_blobs(data.path()), layout_blobs(&busybox));

    // Carol (same group) pulls the group's image, not Alice's own.
    let got = pull_ok(&c, "group/physics/busybox:1", &c.carol, scratch.path()).await;
    assert_eq!(layout_digest(&got), want);
    assert!(pull(&c, "user/alice/busybox:1", &c.carol, scratch.path())
        .await
        .is_err());
    v2.get("/v2/user/alice/busybox/manifests/1", &c.carol)
        .await
        .expect(
            StatusCode::NOT_FOUND,
            "NAME_UNKNOWN",
            "carol, alice's image",
        );

    // Bob (another group) sees neither: 404, as for a repository that does not exist.
    assert!(pull(&c, "group/physics/busybox:1", &c.bob, scratch.path())
        .await
        .is_err());
    for path in [
        "/v2/group/physics/busybox/manifests/1".to_string(),
        format!("/v2/group/physics/busybox/manifests/{want}"),
        "/v2/group/physics/busybox/tags/list".to_string(),
        "/v2/user/alice/busybox/tags/list".to_string(),
        format!("/v2/user/alice/busybox/blobs/{want}"),
    ] {
        v2.get(&path, &c.bob).await.expect(
            StatusCode::NOT_FOUND,
            "NAME_UNKNOWN",
            &format!("bob, {path}"),
        );
    }
    let r = v2
        .send(
            Method::HEAD,
            "/v2/group/physics/busybox/manifests/1",
            Some(&bearer(&c.bob)),
            &[],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // Pushing into someone else's namespace is refused, and leaves nothing behind.
    let out = push(&c, &busybox, "user/alice/evil:1", &c.bob).await;
    assert!(!out.status.success(), "bob pushed into alice's namespace");
    let out = push(&c, &busybox, "group/physics/evil:1", &c.bob).await;
    assert!(!out.status.success(), "bob pushed into physics' namespace");
    let r = v2
        .send(
            Method::POST,
            "/v2/user/alice/evil/blobs/uploads/",
            Some(&bearer(&c.bob)),
            &[],
            None,
        )
        .await;
    r.expect(
        StatusCode::NOT_FOUND,
        "NAME_UNKNOWN",
        "bob starts an upload",
    );
    let all = listed(&c, &c.admin).await;
    assert_eq!(
        names(&all),
        BTreeSet::from(["group/physics/busybox:1", "user/alice/busybox:1"])
    );

    // Tags, the manifest's headers, and a HEAD that says the same without a body.
    let r = v2.get("/v2/user/alice/busybox/tags/list", &c.alice).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.json(),
        json!({"name": "user/alice/busybox", "tags": ["1"]})
    );
    let manifest = read_blob(&busybox, &want);
    for reference in ["1", want.as_str()] {
        let path = format!("/v2/user/alice/busybox/manifests/{reference}");
        let r = v2.get(&path, &c.alice).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body, manifest);
        assert_eq!(r.header("content-type").as_deref(), Some(OCI_MANIFEST));
        assert_eq!(r.header("docker-content-digest"), Some(want.clone()));
        let h = v2
            .send(Method::HEAD, &path, Some(&bearer(&c.alice)), &[], None)
            .await;
        assert_eq!(h.status, StatusCode::OK);
        assert!(h.body.is_empty());
        assert_eq!(h.header("content-length"), Some(manifest.len().to_string()));
        assert_eq!(h.header("docker-content-digest"), Some(want.clone()));
    }
    let parsed: Value = serde_json::from_slice(&manifest).expect("json");
    let layer = parsed["layers"][0]["digest"].as_str().expect("a layer");
    let r = v2
        .get(&format!("/v2/user/alice/busybox/blobs/{layer}"), &c.alice)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(sha256(&r.body), layer);
    assert_eq!(r.header("docker-content-digest").as_deref(), Some(layer));
    let h = v2
        .send(
            Method::HEAD,
            &format!("/v2/user/alice/busybox/blobs/{layer}"),
            Some(&bearer(&c.alice)),
            &[],
            None,
        )
        .await;
    assert_eq!(h.status, StatusCode::OK);
    assert_eq!(h.header("content-length"), Some(r.body.len().to_string()));
    assert!(h.body.is_empty());

    // The API lists exactly what each caller may see.
    let alice = listed(&c, &c.alice).await;
    assert_eq!(
        names(&alice),
        BTreeSet::from(["group/physics/busybox:1", "user/alice/busybox:1"])
    );
    assert!(alice.values().all(|d| *d == want));
    assert_eq!(
        names(&listed(&c, &c.carol).await),
        BTreeSet::from(["group/physics/busybox:1"])
    );
    assert!(listed(&c, &c.bob).await.is_empty());
    let r = c.get(&c.alice, "/images").await;
    let item = r
        .json()
        .as_array()
        .expect("a list")
        .iter()
        .find(|i| i["repository"] == "user/alice/busybox")
        .cloned()
        .expect("alice's image");
    let total: u64 = layout_blobs(&busybox).values().sum();
    assert_eq!(item["scope"], "user");
    assert_eq!(item["owner"], "alice");
    assert_eq!(item["name"], "busybox");
    assert_eq!(item["size"], total);
    assert_eq!(item["media_type"], OCI_MANIFEST);
    assert!(item["created_at"].is_string() && item["last_used_at"].is_string());

    // Details: tags and layers, for those who may see them; 404 for others.
    let r = c.get(&c.carol, "/images/group/physics/busybox").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let d = r.json();
    assert_eq!(d["tags"][0]["tag"], "1");
    assert_eq!(d["manifests"][0]["digest"], want.as_str());
    assert_eq!(d["manifests"][0]["layers"][0]["digest"], layer);
    for (token, path) in [
        (&c.bob, "/images/group/physics/busybox"),
        (&c.carol, "/images/user/alice/busybox"),
        (&c.alice, "/images/user/alice/nothing"),
    ] {
        let r = c.get(token, path).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}: {}", r.body);
    }

    // Removing: others get 404 and nothing changes; a group member may remove the group's tag.
    let del = |token: &str, path: &str| c.raw(Method::DELETE, path, Some(&bearer(token))).send();
    let r = del(&c.bob, "/images/group/physics/busybox?tag=1").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let r = del(&c.carol, "/images/user/alice/busybox").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let r = del(&c.carol, "/images/group/physics/busybox?tag=2").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let r = del(&c.carol, "/images/group/physics/busybox?tag=1").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()["deleted"], json!(["1"]));
    assert_eq!(
        names(&listed(&c, &c.admin).await),
        BTreeSet::from(["user/alice/busybox:1"])
    );
    // Alice's tag still holds every blob.
    assert_eq!(cache_blobs(data.path()), layout_blobs(&busybox));
    // Through the registry API: an owner deletes by digest; then the blobs go too.
    let r = v2
        .send(
            Method::DELETE,
            &format!("/v2/user/alice/busybox/manifests/{want}"),
            Some(&bearer(&c.alice)),
            &[],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    v2.get("/v2/user/alice/busybox/manifests/1", &c.alice)
        .await
        .expect(StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN", "deleted");
    assert!(listed(&c, &c.admin).await.is_empty());
    assert!(cache_blobs(data.path()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials() {
    let (c, _data, _scratch) = started().await;
    let v2 = V2::new(&c);
    let basic = |user: &str, token: &str| {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"))
        )
    };
    let unknown = format!("gantry_{}", "0".repeat(64));
    for (what, auth) in [
        ("no token", None),
        ("an unknown bearer token", Some(bearer(&unknown))),
        ("an unknown basic password", Some(basic("alice", &unknown))),
        ("basic without a password", Some(basic("alice", ""))),
        ("basic that is not base64", Some("Basic !!!".to_string())),
        ("another scheme", Some(format!("Token {}", c.alice))),
    ] {
        for path in ["/v2/", "/v2/user/alice/busybox/manifests/1"] {
            let r = v2.send(Method::GET, path, auth.as_deref(), &[], None).await;
            r.expect(
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                &format!("{what} on {path}"),
            );
            assert_eq!(
                r.header(WWW_AUTHENTICATE.as_str()).as_deref(),
                Some("Basic realm=\"gantry\""),
                "{what}"
            );
        }
    }
    for auth in [
        bearer(&c.alice),
        basic("alice", &c.alice),
        basic("anyone", &c.alice),
        basic("agent", &c.agent),
    ] {
        let r = v2.send(Method::GET, "/v2/", Some(&auth), &[], None).await;
        assert_eq!(r.status, StatusCode::OK, "{auth}");
        assert_eq!(
            r.header("docker-distribution-api-version").as_deref(),
            Some("registry/2.0")
        );
    }
    // The images API is the JSON API: bearer tokens only, users and administrators.
    let r = c
        .raw(Method::GET, "/images", Some(&basic("alice", &c.alice)))
        .send()
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = c.get(&c.agent, "/images").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_recently_used_images_are_evicted() {
    let (c, data, scratch) = started().await;
    let v2 = V2::new(&c);
    let (a, b, cc) = (
        layout("BUSYBOX"),
        layout("BUSYBOX_ZSTD"),
        layout("WHITEOUT"),
    );
    push_ok(&c, &a, "user/alice/a:1", &c.alice).await;
    push_ok(&c, &b, "user/alice/b:1", &c.alice).await;
    // Pulling a makes b the least recently used.
    pull_ok(&c, "user/alice/a:1", &c.alice, scratch.path()).await;

    // Room for exactly a and c (they share busybox's layer), not for b as well.
    let mut keep = layout_blobs(&a);
    keep.extend(layout_blobs(&cc));
    let limit: u64 = keep.values().sum();
    let mut everything = keep.clone();
    everything.extend(layout_blobs(&b));
    assert!(everything.values().sum::<u64>() > limit);
    for bad in ["0", "-1", "ten", "1.5", ""] {
        let r = c
            .put(
                &c.admin,
                "/admin/settings/images.cache_bytes",
                json!({"key": "images.cache_bytes", "value": bad}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad:?}: {}", r.body);
    }
    assert_eq!(c.setting("images.cache_bytes").await, "10737418240");
    let r = c
        .put(
            &c.admin,
            "/admin/settings/images.cache_bytes",
            json!({"key": "images.cache_bytes", "value": limit.to_string()}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    push_ok(&c, &cc, "user/alice/c:1", &c.alice).await;
    assert_eq!(
        names(&listed(&c, &c.alice).await),
        BTreeSet::from(["user/alice/a:1", "user/alice/c:1"])
    );
    v2.get("/v2/user/alice/b/manifests/1", &c.alice)
        .await
        .expect(StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN", "evicted b");
    v2.get("/v2/user/alice/b/tags/list", &c.alice).await.expect(
        StatusCode::NOT_FOUND,
        "NAME_UNKNOWN",
        "evicted b's tags",
    );
    // What only b referenced is gone from disk; what a and c need stays.
    assert_eq!(cache_blobs(data.path()), keep);
    for (repo, l) in [("user/alice/a:1", &a), ("user/alice/c:1", &cc)] {
        let got = pull_ok(&c, repo, &c.alice, scratch.path()).await;
        assert_eq!(layout_digest(&got), layout_digest(l), "{repo}");
    }
    // An image alone over the limit is kept (the cache never evicts what was just pushed).
    let r = c
        .put(
            &c.admin,
            "/admin/settings/images.cache_bytes",
            json!({"key": "images.cache_bytes", "value": "1"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    push_ok(&c, &b, "group/physics/b:1", &c.carol).await;
    assert_eq!(
        names(&listed(&c, &c.admin).await),
        BTreeSet::from(["group/physics/b:1"])
    );
    assert_eq!(cache_blobs(data.path()), layout_blobs(&b));
    pull_ok(&c, "group/physics/b:1", &c.alice, scratch.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_platform_indexes() {
    let (c, _data, scratch) = started().await;
    let v2 = V2::new(&c);
    let multi = layout("MULTI");
    let index = layout_digest(&multi);
    push_ok(&c, &multi, "user/alice/multi:1", &c.alice).await;
    let got = pull_ok(&c, "user/alice/multi:1", &c.alice, scratch.path()).await;
    assert_eq!(layout_digest(&got), index);
    assert_eq!(layout_blobs(&got), layout_blobs(&multi));
    // The platforms were pushed by digest before the index; the tag reaches them now.
    assert_eq!(
        names(&listed(&c, &c.alice).await),
        BTreeSet::from(["user/alice/multi:1"])
    );
    let r = v2.get("/v2/user/alice/multi/tags/list", &c.alice).await;
    assert_eq!(r.json()["tags"], json!(["1"]));
    let r = v2.get("/v2/user/alice/multi/manifests/1", &c.alice).await;
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/vnd.oci.image.index.v1+json")
    );
    let amd64 = test_env("GANTRY_TEST_BUSYBOX_DIGEST");
    let r = v2
        .get(&format!("/v2/user/alice/multi/manifests/{amd64}"), &c.alice)
        .await;
    assert_eq!(r.status, StatusCode::OK, "a platform by digest");
    assert_eq!(r.header("content-type").as_deref(), Some(OCI_MANIFEST));
    // ... but only in the repository whose index lists it.
    push_ok(&c, &layout("WHITEOUT"), "user/alice/other:1", &c.alice).await;
    v2.get(&format!("/v2/user/alice/other/manifests/{amd64}"), &c.alice)
        .await
        .expect(StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN", "another repo");
    let r = c.get(&c.alice, "/images/user/alice/multi").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let platforms = r.json()["manifests"][0]["manifests"].clone();
    assert_eq!(platforms.as_array().map(Vec::len), Some(2), "{platforms}");
    assert_eq!(platforms[1]["digest"], amd64.as_str());
    assert_eq!(platforms[1]["platform"]["architecture"], "amd64");

    // Gantry's agents resolve the linux/amd64 image of an index, as they do for any registry.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let oci = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        platform_resolver: Some(Box::new(oci_client::client::linux_amd64_resolver)),
        ..Default::default()
    });
    let reference: oci_client::Reference = format!("{}/user/alice/multi:1", host(&c))
        .parse()
        .expect("a reference");
    let auth = oci_client::secrets::RegistryAuth::Basic("agent-1".into(), c.agent.clone());
    let (_, digest) = oci
        .pull_image_manifest(&reference, &auth)
        .await
        .expect("the agent resolves the index");
    assert_eq!(digest, amd64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_pull_and_push_with_oci_client() {
    let (c, _data, scratch) = started().await;
    let busybox = layout("BUSYBOX");
    push_ok(&c, &busybox, "user/alice/busybox:1", &c.alice).await;
    let manifest: Value =
        serde_json::from_slice(&read_blob(&busybox, &layout_digest(&busybox))).expect("json");
    let layer_digest = manifest["layers"][0]["digest"]
        .as_str()
        .expect("a layer")
        .to_string();

    let _ = rustls::crypto::ring::default_provider().install_default();
    let oci = || {
        oci_client::Client::new(oci_client::client::ClientConfig {
            protocol: oci_client::client::ClientProtocol::Http,
            platform_resolver: Some(Box::new(oci_client::client::linux_amd64_resolver)),
            ..Default::default()
        })
    };
    let reference = |repo: &str| -> oci_client::Reference {
        format!("{}/{repo}", host(&c)).parse().expect("a reference")
    };
    use oci_client::secrets::RegistryAuth;
    let layers = vec![oci_client::manifest::IMAGE_LAYER_GZIP_MEDIA_TYPE];
    // The agent's token as basic auth (what agents send for a registry credential), and as a
    // bearer token: both pull any repository.
    for auth in [
        RegistryAuth::Basic("agent-1".into(), c.agent.clone()),
        RegistryAuth::Bearer(c.agent.clone()),
    ] {
        let image = oci()
            .pull(&reference("user/alice/busybox:1"), &auth, layers.clone())
            .await
            .expect("the agent pulls alice's image");
        assert_eq!(
            image.digest.as_deref(),
            Some(layout_digest(&busybox).as_str())
        );
        assert_eq!(image.layers.len(), 1);
        assert_eq!(sha256(&image.layers[0].data), layer_digest);
    }
    // A user's token pulls only what the user may see.
    let r = oci()
        .pull(
            &reference("user/alice/busybox:1"),
            &RegistryAuth::Basic("bob".into(), c.bob.clone()),
            layers.clone(),
        )
        .await;
    assert!(r.is_err(), "bob pulled alice's image");

    // A build's result, pushed by an agent into a group's namespace; members pull it.
    let config = read_blob(
        &busybox,
        manifest["config"]["digest"].as_str().expect("a config"),
    );
    let layer = read_blob(&busybox, &layer_digest);
    let pushed = oci()
        .push(
            &reference("group/physics/built:1"),
            &[oci_client::client::ImageLayer::new(
                layer,
                oci_client::manifest::IMAGE_LAYER_GZIP_MEDIA_TYPE.into(),
                None,
            )],
            oci_client::client::Config::new(
                config,
                oci_client::manifest::IMAGE_CONFIG_MEDIA_TYPE.into(),
                None,
            ),
            &RegistryAuth::Basic("agent-1".into(), c.agent.clone()),
            None,
        )
        .await
        .expect("the agent pushes");
    let got = pull_ok(&c, "group/physics/built:1", &c.carol, scratch.path()).await;
    let got_manifest: Value =
        serde_json::from_slice(&read_blob(&got, &layout_digest(&got))).expect("json");
    assert_eq!(got_manifest["layers"][0]["digest"], layer_digest.as_str());
    assert!(pushed.manifest_url.contains("group/physics/built"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protocol_by_hand() {
    let (c, data, _scratch) = started().await;
    let v2 = V2::new(&c);
    let auth = bearer(&c.alice);
    let repo = "user/alice/tiny";
    let (manifest, config, layer) = tiny_image("hello, object cache");

    // A chunked upload: POST, two PATCHes with Content-Range, PUT ?digest=.
    let r = v2
        .send(
            Method::POST,
            &format!("/v2/{repo}/blobs/uploads/"),
            Some(&auth),
            &[],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let loc = r.header(LOCATION.as_str()).expect("a Location");
    assert!(
        loc.starts_with(&format!("/v2/{repo}/blobs/uploads/")),
        "{loc}"
    );
    let (one, two) = layer.split_at(5);
    let r = v2
        .send(
            Method::PATCH,
            &loc,
            Some(&auth),
            &[("content-range", &format!("0-{}", one.len() - 1))],
            Some(one.to_vec()),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    assert_eq!(r.header("range"), Some(format!("0-{}", one.len() - 1)));
    // Out of order: 416, and the upload is unchanged.
    let r = v2
        .send(
            Method::PATCH,
            &loc,
            Some(&auth),
            &[("content-range", "100-200")],
            Some(two.to_vec()),
        )
        .await;
    assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(r.header("range"), Some(format!("0-{}", one.len() - 1)));
    // Someone else cannot continue it, even in their own repository.
    let bobs = loc.replace("user/alice/tiny", "user/bob/tiny");
    v2.send(
        Method::PATCH,
        &bobs,
        Some(&bearer(&c.bob)),
        &[],
        Some(two.to_vec()),
    )
    .await
    .expect(StatusCode::NOT_FOUND, "BLOB_UPLOAD_UNKNOWN", "bob's patch");
    let r = v2.get(&loc, &c.alice).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(r.header("range"), Some(format!("0-{}", one.len() - 1)));
    let r = v2
        .send(
            Method::PATCH,
            &loc,
            Some(&auth),
            &[(
                "content-range",
                &format!("{}-{}", one.len(), layer.len() - 1),
            )],
            Some(two.to_vec()),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let loc = r.header(LOCATION.as_str()).expect("a Location");
    let layer_digest = sha256(&layer);
    let r = v2
        .send(
            Method::PUT,
            &format!("{loc}?digest={layer_digest}"),
            Some(&auth),
            &[],
            None,
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(
        r.header(LOCATION.as_str()),
        Some(format!("/v2/{repo}/blobs/{layer_digest}"))
    );
    assert_eq!(
        r.header("docker-content-digest"),
        Some(layer_digest.clone())
    );
    v2.get(&loc, &c.alice).await.expect(
        StatusCode::NOT_FOUND,
        "BLOB_UPLOAD_UNKNOWN",
        "a finished upload",
    );
    let r = v2
        .get(&format!("/v2/{repo}/blobs/{layer_digest}"), &c.alice)
        .await;
    assert_eq!(r.body, layer);

    // A digest that does not match the content: refused, nothing stored.
    let wrong = sha256(b"something else");
    let r = v2
        .send(
            Method::POST,
            &format!("/v2/{repo}/blobs/uploads/?digest={wrong}"),
            Some(&auth),
            &[],
            Some(config.clone()),
        )
        .await;
    r.expect(StatusCode::BAD_REQUEST, "DIGEST_INVALID", "wrong digest");
    v2.get(&format!("/v2/{repo}/blobs/{wrong}"), &c.alice)
        .await
        .expect(StatusCode::NOT_FOUND, "BLOB_UNKNOWN", "never stored");
    v2.get(&format!("/v2/{repo}/blobs/sha256:abc"), &c.alice)
        .await
        .expect(StatusCode::BAD_REQUEST, "DIGEST_INVALID", "a short digest");

    // A manifest whose config is missing is refused, naming it; then pushed once it is there.
    let r = v2
        .put_manifest(repo, "v1", &c.alice, OCI_MANIFEST, &manifest, &[])
        .await;
    r.expect(
        StatusCode::BAD_REQUEST,
        "MANIFEST_BLOB_UNKNOWN",
        "no config",
    );
    assert!(String::from_utf8_lossy(&r.body).contains(&sha256(&config)));
    for (body, ct) in [
        (&b"not json"[..], OCI_MANIFEST),
        (
            b"{\"schemaVersion\": 2, \"mediaType\": \"text/plain\"}",
            "text/plain",
        ),
        (b"{\"schemaVersion\": 1, \"name\": \"x\"}", OCI_MANIFEST),
    ] {
        v2.put_manifest(repo, "v1", &c.alice, ct, body, &[])
            .await
            .expect(
                StatusCode::BAD_REQUEST,
                "MANIFEST_INVALID",
                "a bad manifest",
            );
    }
    v2.put_manifest(repo, "bad tag!", &c.alice, OCI_MANIFEST, &manifest, &[])
        .await
        .expect(StatusCode::BAD_REQUEST, "TAG_INVALID", "a bad tag");
    v2.put_manifest(
        repo,
        &sha256(b"not this"),
        &c.alice,
        OCI_MANIFEST,
        &manifest,
        &[],
    )
    .await
    .expect(
        StatusCode::BAD_REQUEST,
        "DIGEST_INVALID",
        "by the wrong digest",
    );
    v2.put_blob(repo, &c.alice, &config).await;
    // A user's build key is ignored; an agent's is kept.
    let r = v2
        .put_manifest(
            repo,
            "v1",
            &c.alice,
            OCI_MANIFEST,
            &manifest,
            &[("gantry-build-key", "from-alice")],
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let digest = sha256(&manifest);
    assert_eq!(r.header("docker-content-digest"), Some(digest.clone()));
    assert_eq!(
        r.header(LOCATION.as_str()),
        Some(format!("/v2/{repo}/manifests/{digest}"))
    );
    let r = v2
        .put_manifest(
            repo,
            "v2",
            &c.agent,
            OCI_MANIFEST,
            &manifest,
            &[("gantry-build-key", "key-123")],
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = c.get(&c.alice, "/images").await;
    let keys: BTreeMap<String, Value> = r
        .json()
        .as_array()
        .expect("a list")
        .iter()
        .map(|i| {
            (
                i["tag"].as_str().unwrap_or("").to_string(),
                i["build_key"].clone(),
            )
        })
        .collect();
    assert_eq!(keys["v1"], Value::Null);
    assert_eq!(keys["v2"], "key-123");
    // The server's build code may record a key after an oci-client push, and look it up.
    let store = &c.server.state.store;
    let v1 = gantry_store::ImageKey {
        scope: "user".into(),
        owner: "alice".into(),
        name: "tiny".into(),
        tag: "v1".into(),
    };
    assert!(store
        .set_image_build_key(&v1, Some("key-456"))
        .await
        .expect("the store"));
    let found = store
        .image_by_build_key("user", "alice", "key-456")
        .await
        .expect("the store")
        .expect("an image under that key");
    assert_eq!(found.key, v1);
    assert_eq!(found.digest, sha256(&manifest));
    assert!(store
        .image_by_build_key("group", "physics", "key-456")
        .await
        .expect("the store")
        .is_none());

    // Tags are listed in order, and in pages.
    for t in ["a", "b", "c"] {
        let r = v2
            .put_manifest(repo, t, &c.alice, OCI_MANIFEST, &manifest, &[])
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let r = v2.get(&format!("/v2/{repo}/tags/list"), &c.alice).await;
    assert_eq!(r.json()["tags"], json!(["a", "b", "c", "v1", "v2"]));
    let r = v2.get(&format!("/v2/{repo}/tags/list?n=2"), &c.alice).await;
    assert_eq!(r.json()["tags"], json!(["a", "b"]));
    assert!(r.header("link").expect("a Link").contains("last=b"));
    let r = v2
        .get(&format!("/v2/{repo}/tags/list?n=2&last=b"), &c.alice)
        .await;
    assert_eq!(r.json()["tags"], json!(["c", "v1"]));

    // Cross-repository mounts: from a repository the caller may use, 201; otherwise an
    // upload session (202), never the blob.
    let r = v2
        .send(
            Method::POST,
            &format!("/v2/group/physics/tiny/blobs/uploads/?mount={layer_digest}&from={repo}"),
            Some(&bearer(&c.alice)),
            &[],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = v2
        .send(
            Method::POST,
            &format!("/v2/user/bob/tiny/blobs/uploads/?mount={layer_digest}&from={repo}"),
            Some(&bearer(&c.bob)),
            &[],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);

    // Pushed by digest alone: kept under its digest, listed without a tag.
    let (m2, c2, l2) = tiny_image("another");
    v2.put_blob("group/physics/x", &c.carol, &c2).await;
    v2.put_blob("group/physics/x", &c.carol, &l2).await;
    let d2 = sha256(&m2);
    let r = v2
        .put_manifest("group/physics/x", &d2, &c.carol, OCI_MANIFEST, &m2, &[])
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert!(listed(&c, &c.alice)
        .await
        .contains_key(&format!("group/physics/x@{d2}")));
    let r = v2.get("/v2/group/physics/x/tags/list", &c.alice).await;
    assert_eq!(r.json()["tags"], json!([]));

    // Agents may not delete; an owner may. Unknown references are 404.
    v2.send(
        Method::DELETE,
        &format!("/v2/{repo}/manifests/a"),
        Some(&bearer(&c.agent)),
        &[],
        None,
    )
    .await
    .expect(StatusCode::FORBIDDEN, "DENIED", "an agent deletes");
    v2.send(
        Method::DELETE,
        &format!("/v2/{repo}/manifests/zzz"),
        Some(&auth),
        &[],
        None,
    )
    .await
    .expect(StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN", "no such tag");
    let r = v2
        .send(
            Method::DELETE,
            &format!("/v2/{repo}/manifests/a"),
            Some(&auth),
            &[],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let r = v2.get(&format!("/v2/{repo}/tags/list"), &c.alice).await;
    assert_eq!(r.json()["tags"], json!(["b", "c", "v1", "v2"]));
    v2.send(
        Method::DELETE,
        &format!("/v2/{repo}/blobs/{layer_digest}"),
        Some(&auth),
        &[],
        None,
    )
    .await
    .expect(
        StatusCode::METHOD_NOT_ALLOWED,
        "UNSUPPORTED",
        "deleting a blob",
    );

    // Names outside the two scopes, and routes that do not exist.
    v2.get("/v2/library/busybox/manifests/1", &c.admin)
        .await
        .expect(StatusCode::BAD_REQUEST, "NAME_INVALID", "library/");
    v2.get("/v2/user/alice/UPPER/manifests/1", &c.alice)
        .await
        .expect(StatusCode::BAD_REQUEST, "NAME_INVALID", "upper case");
    v2.get("/v2/_catalog", &c.alice).await.expect(
        StatusCode::NOT_FOUND,
        "NAME_UNKNOWN",
        "the catalog",
    );
    let r = v2.get(&format!("/v2/{repo}/manifests/1"), &c.alice).await;
    assert_eq!(
        r.header(CONTENT_TYPE.as_str()).as_deref(),
        Some("application/json")
    );
    r.expect(StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN", "no tag 1");

    // Every blob is a file named by its digest; nothing is left in uploads.
    let blobs = cache_blobs(data.path());
    for bytes in [&manifest, &config, &layer, &m2, &c2, &l2] {
        assert_eq!(blobs.get(&sha256(bytes)), Some(&(bytes.len() as u64)));
    }
    let uploads: Vec<_> = std::fs::read_dir(data.path().join("objects/uploads"))
        .expect("the uploads dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    // The one session left open (bob's mount fell back to an upload he never made); the
    // refused and finished uploads left nothing.
    assert_eq!(uploads.len(), 1, "{uploads:?}");
}

/// Blobs and manifests belong to the repositories that link them. Every way another group's
/// user (bob, chem), or a member of the same group (carol, physics) for alice's own images,
/// could reach alice's content through a repository of their own is refused exactly as for
/// content that exists nowhere; the owners' and the group's own use goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_and_manifests_answer_only_where_linked() {
    let (c, data, _scratch) = started().await;
    let v2 = V2::new(&c);
    let created = |r: &Resp, what: &str| {
        assert_eq!(
            r.status,
            StatusCode::CREATED,
            "{what}: {}",
            String::from_utf8_lossy(&r.body)
        )
    };

    // Alice's own image, and one of her group's.
    let secret = "user/alice/secret";
    let (am, ac, al) = v2
        .push_tiny(secret, &c.alice, "alice's private layer")
        .await;
    let shared = "group/physics/shared";
    let (gm, gc, gl) = v2
        .push_tiny(shared, &c.alice, "the physics group's layer")
        .await;
    let private = [sha256(&am), sha256(&ac), sha256(&al)];
    let group = [sha256(&gm), sha256(&gc), sha256(&gl)];
    let nowhere = sha256(b"exists nowhere");

    // GET and HEAD of blobs and of manifests by digest, through the stranger's own user and
    // group repositories and a same-group member's.
    let mut tries: Vec<(&str, &str, Vec<&String>)> = vec![];
    for repo in ["user/bob/x", "group/chem/x"] {
        tries.push((&c.bob, repo, private.iter().chain(&group).collect()));
    }
    for repo in ["user/carol/x", "group/physics/x"] {
        tries.push((&c.carol, repo, private.iter().collect()));
    }
    // Alice's private content is not her group's either, even through the group's image.
    tries.push((&c.alice, shared, private.iter().collect()));
    for (token, repo, digests) in &tries {
        for kind in ["blobs", "manifests"] {
            let code = if kind == "blobs" {
                "BLOB_UNKNOWN"
            } else {
                "MANIFEST_UNKNOWN"
            };
            let none_path = format!("/v2/{repo}/{kind}/{nowhere}");
            let none = v2.get(&none_path, token).await;
            none.expect(StatusCode::NOT_FOUND, code, &none_path);
            let none_head = v2.head(&none_path, token).await;
            for d in digests {
                let path = format!("/v2/{repo}/{kind}/{d}");
                let r = v2.get(&path, token).await;
                r.expect(StatusCode::NOT_FOUND, code, &path);
                same_as_nowhere(&r, d, &none, &nowhere, &path);
                let h = v2.head(&path, token).await;
                assert_eq!(h.status, StatusCode::NOT_FOUND, "HEAD {path}");
                assert_eq!(h.status, none_head.status);
                assert_eq!(
                    h.header("content-length"),
                    none_head.header("content-length")
                );
            }
        }
    }

    // Mounts from a repository the caller may not read, or from one that does not link the
    // blob (the caller's own included), fall back to an upload (202); nothing is linked.
    v2.put_blob("user/bob/own", &c.bob, b"bob's own blob").await;
    for (token, repo, digest, from) in [
        (&c.bob, "user/bob/x", &private[2], secret),
        (&c.bob, "group/chem/x", &group[2], shared),
        (&c.carol, "user/carol/x", &private[2], secret),
        (&c.carol, "group/physics/x", &private[2], secret),
        (&c.bob, "user/bob/x", &private[2], "user/bob/own"),
        (&c.alice, "user/alice/y", &group[2], secret),
        (&c.bob, "user/bob/x", &nowhere, "user/bob/own"),
        (&c.bob, "user/bob/x", &private[2], "library/busybox"),
    ] {
        let what = format!("mount {digest} from {from} into {repo}");
        let r = v2.mount(repo, digest, from, token).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{what}");
        assert!(r
            .header(LOCATION.as_str())
            .is_some_and(|l| l.starts_with(&format!("/v2/{repo}/blobs/uploads/"))));
        v2.get(&format!("/v2/{repo}/blobs/{digest}"), token)
            .await
            .expect(StatusCode::NOT_FOUND, "BLOB_UNKNOWN", &what);
    }
    // From where the caller may read it and it is linked, a mount links it (201).
    let r = v2.mount("user/carol/x", &group[2], shared, &c.carol).await;
    created(&r, "carol mounts the group's layer");
    let r = v2
        .get(&format!("/v2/user/carol/x/blobs/{}", group[2]), &c.carol)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, gl);

    // Manifests that name blobs their repository does not link are refused as if the blobs
    // did not exist, naming every one of them; nothing is stored.
    let (fake_m, _, _) = tiny_image("content nobody has");
    let none = v2
        .put_manifest("user/bob/x", "stolen", &c.bob, OCI_MANIFEST, &fake_m, &[])
        .await;
    none.expect(
        StatusCode::BAD_REQUEST,
        "MANIFEST_BLOB_UNKNOWN",
        "a manifest of nothing",
    );
    for (token, repo, m, unlinked) in [
        (&c.bob, "user/bob/x", &am, vec![&private[1], &private[2]]),
        (&c.bob, "group/chem/x", &gm, vec![&group[1], &group[2]]),
        (
            &c.carol,
            "user/carol/x",
            &am,
            vec![&private[1], &private[2]],
        ),
        (
            &c.carol,
            "group/physics/x",
            &am,
            vec![&private[1], &private[2]],
        ),
        // Carol mounted the group's layer, not its config.
        (&c.carol, "user/carol/x", &gm, vec![&group[1]]),
    ] {
        let what = format!("{repo}: a manifest of others' blobs");
        let r = v2
            .put_manifest(repo, "stolen", token, OCI_MANIFEST, m, &[])
            .await;
        r.expect(StatusCode::BAD_REQUEST, "MANIFEST_BLOB_UNKNOWN", &what);
        let named: Vec<String> = r.json()["errors"][0]["detail"]["digests"]
            .as_array()
            .expect("the digests")
            .iter()
            .map(|d| d.as_str().expect("a digest").to_string())
            .collect();
        let want: Vec<String> = unlinked.into_iter().cloned().collect();
        assert_eq!(named, want, "{what}");
        assert_eq!(r.status, none.status);
        v2.get(&format!("/v2/{repo}/manifests/stolen"), token)
            .await
            .expect(StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN", &what);
        v2.get(&format!("/v2/{repo}/manifests/{}", sha256(m)), token)
            .await
            .expect(StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN", &what);
    }
    // An index listing another's manifest, likewise.
    for (token, repo, m) in [
        (&c.bob, "user/bob/x", &am),
        (&c.bob, "group/chem/x", &gm),
        (&c.carol, "user/carol/x", &am),
        (&c.carol, "group/physics/x", &am),
    ] {
        let idx = index_of(&[m]);
        let what = format!("{repo}: an index of another's manifest");
        let r = v2
            .put_manifest(repo, "idx", token, OCI_INDEX, &idx, &[])
            .await;
        r.expect(StatusCode::BAD_REQUEST, "MANIFEST_BLOB_UNKNOWN", &what);
        assert!(
            String::from_utf8_lossy(&r.body).contains(&sha256(m)),
            "{what}"
        );
        for reference in ["idx".to_string(), sha256(m), sha256(&idx)] {
            v2.get(&format!("/v2/{repo}/manifests/{reference}"), token)
                .await
                .expect(StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN", &what);
        }
    }

    // The owners' own use: alice reads her image by tag and digest, and lists it in an index
    // of her own; carol pulls the group's image and its blobs.
    for (token, repo, m, blobs) in [
        (&c.alice, secret, &am, [&ac, &al]),
        (&c.carol, shared, &gm, [&gc, &gl]),
    ] {
        for reference in ["1".to_string(), sha256(m)] {
            let r = v2
                .get(&format!("/v2/{repo}/manifests/{reference}"), token)
                .await;
            assert_eq!(r.status, StatusCode::OK, "{repo}:{reference}");
            assert_eq!(&r.body, m);
            let h = v2
                .head(&format!("/v2/{repo}/manifests/{reference}"), token)
                .await;
            assert_eq!(h.status, StatusCode::OK);
        }
        for b in blobs {
            let path = format!("/v2/{repo}/blobs/{}", sha256(b));
            let r = v2.get(&path, token).await;
            assert_eq!(r.status, StatusCode::OK, "{path}");
            assert_eq!(&r.body, b);
            let h = v2.head(&path, token).await;
            assert_eq!(h.status, StatusCode::OK, "HEAD {path}");
            assert_eq!(h.header("content-length"), Some(b.len().to_string()));
        }
    }
    let idx = index_of(&[&am]);
    let r = v2
        .put_manifest(secret, "multi", &c.alice, OCI_INDEX, &idx, &[])
        .await;
    created(&r, "alice's index of her own manifest");
    let r = v2
        .get(&format!("/v2/{secret}/manifests/multi"), &c.alice)
        .await;
    assert_eq!(r.body, idx);
    // Alice shares her image with her group on purpose: she may read both repositories.
    for d in &private[1..] {
        let r = v2
            .mount("group/physics/published", d, secret, &c.alice)
            .await;
        created(&r, "alice mounts her blob into her group's repository");
    }
    let r = v2
        .put_manifest(
            "group/physics/published",
            "1",
            &c.alice,
            OCI_MANIFEST,
            &am,
            &[],
        )
        .await;
    created(&r, "alice publishes to her group");
    let r = v2
        .get(
            &format!("/v2/group/physics/published/blobs/{}", private[2]),
            &c.carol,
        )
        .await;
    assert_eq!(r.body, al, "carol reads what alice published");

    // Agents pull and push for every user, but through the links too: what a workflow makes
    // an agent push to a repository may only use what that repository links.
    let agent = &c.agent;
    v2.get(&format!("/v2/user/bob/x/blobs/{}", private[2]), agent)
        .await
        .expect(StatusCode::NOT_FOUND, "BLOB_UNKNOWN", "an agent, unlinked");
    v2.put_manifest("user/bob/x", "by-agent", agent, OCI_MANIFEST, &am, &[])
        .await
        .expect(
            StatusCode::BAD_REQUEST,
            "MANIFEST_BLOB_UNKNOWN",
            "an agent's manifest of others' blobs",
        );
    // An agent mounts only from where the repository's owner could read: a user's own
    // repositories and their group's; a group's repositories only from the group's.
    for (repo, digest, from, linked) in [
        ("user/bob/x", &private[2], secret, false),
        ("user/bob/x", &group[2], shared, false),
        ("group/physics/z", &private[2], secret, false),
        ("user/alice/z", &private[2], secret, true),
        ("user/alice/z", &group[2], shared, true),
        ("group/physics/z", &group[2], shared, true),
    ] {
        let what = format!("an agent mounts {digest} from {from} into {repo}");
        let r = v2.mount(repo, digest, from, agent).await;
        let want = if linked {
            StatusCode::CREATED
        } else {
            StatusCode::ACCEPTED
        };
        assert_eq!(r.status, want, "{what}");
        let got = v2.get(&format!("/v2/{repo}/blobs/{digest}"), agent).await;
        let want = if linked {
            StatusCode::OK
        } else {
            StatusCode::NOT_FOUND
        };
        assert_eq!(got.status, want, "{what}");
    }

    // Bob uploads content identical to alice's (he has it himself): his own link, no file
    // more; with both blobs proven, the same manifest is his to push.
    let before = cache_blobs(data.path());
    v2.put_blob("user/bob/x", &c.bob, &ac).await;
    v2.put_blob("user/bob/x", &c.bob, &al).await;
    assert_eq!(cache_blobs(data.path()), before, "stored once");
    let r = v2
        .get(&format!("/v2/user/bob/x/blobs/{}", private[2]), &c.bob)
        .await;
    assert_eq!(r.body, al);
    let r = v2
        .put_manifest("user/bob/x", "mine", &c.bob, OCI_MANIFEST, &am, &[])
        .await;
    created(&r, "bob's manifest of content he uploaded");
    assert_eq!(
        cache_blobs(data.path()),
        before,
        "the manifest too is stored once"
    );
    // ... while the group's blobs are still not his.
    v2.get(&format!("/v2/user/bob/x/blobs/{}", group[2]), &c.bob)
        .await
        .expect(StatusCode::NOT_FOUND, "BLOB_UNKNOWN", "still not bob's");
}

/// With skopeo: another group's user cannot pull alice's image by digest through a repository
/// of his own; pushing the same image himself links it there and stores nothing new, and each
/// keeps the image when the other removes theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skopeo_a_second_user_of_the_same_image_links_it_and_stores_nothing() {
    let (c, data, scratch) = started().await;
    let busybox = layout("BUSYBOX");
    let want = layout_digest(&busybox);
    push_ok(&c, &busybox, "user/alice/busybox:1", &c.alice).await;
    let files = cache_blobs(data.path());
    assert_eq!(files, layout_blobs(&busybox));

    let by_digest = format!("user/bob/busybox@{want}");
    let out = pull(&c, &by_digest, &c.bob, scratch.path())
        .await
        .expect_err("bob pulled alice's image through his own repository");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("manifest unknown"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    push_ok(&c, &busybox, "user/bob/busybox:1", &c.bob).await;
    assert_eq!(cache_blobs(data.path()), files, "nothing new on disk");
    for repo in ["user/bob/busybox:1", by_digest.as_str()] {
        let got = pull_ok(&c, repo, &c.bob, scratch.path()).await;
        assert_eq!(layout_digest(&got), want, "{repo}");
        assert_eq!(layout_blobs(&got), layout_blobs(&busybox), "{repo}");
    }

    let remove = |repo: &'static str, token: &str| {
        let req = c.raw(
            Method::DELETE,
            &format!("/images/{repo}"),
            Some(&bearer(token)),
        );
        async move {
            let r = req.send().await;
            assert_eq!(r.status, StatusCode::OK, "removing {repo}: {}", r.body);
        }
    };
    // Alice removes hers: bob's image keeps every blob, and hers is gone from her repository.
    remove("user/alice/busybox", &c.alice).await;
    assert_eq!(cache_blobs(data.path()), files);
    let got = pull_ok(&c, "user/bob/busybox:1", &c.bob, scratch.path()).await;
    assert_eq!(layout_digest(&got), want);
    assert!(pull(
        &c,
        &format!("user/alice/busybox@{want}"),
        &c.alice,
        scratch.path()
    )
    .await
    .is_err());
    remove("user/bob/busybox", &c.bob).await;
    assert!(cache_blobs(data.path()).is_empty());
}
