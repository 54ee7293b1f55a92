//! The object cache: an OCI distribution API at `/v2/` that image builds push to and jobs pull
//! from, and what `/api/v1/images` lists and removes ([`images`]; the server serves that API).
//!
//! - Names are scoped: `user/<user>/<image>` and `group/<group>/<image>` (see `names.rs`).
//! - Blobs are files under `<data>/objects/blobs/sha256/<hex>`, stored once whoever pushes
//!   them, but each belongs to the repositories that *link* it (as in CNCF distribution's
//!   linked blob store): a repository links a blob when an upload into it proved the content,
//!   when a cross-repository mount from a repository the caller may read (and that links the
//!   blob) succeeded, or, for a manifest, when it was pushed there. A blob is served, and may
//!   be referenced by a manifest, only in a repository that links it; elsewhere it is
//!   `BLOB_UNKNOWN` (or `MANIFEST_BLOB_UNKNOWN`), exactly as a digest that exists nowhere, so
//!   knowing a digest reveals and gives nothing. Agents and administrators are held to the
//!   links too: what a workflow makes an agent push or pull goes through its repository.
//! - Credentials are Gantry tokens, as a bearer token or as the password of basic auth (any
//!   user name), checked by the server ([`Site`]). No or a bad token: 401 with a basic
//!   challenge. A repository the caller may not use: 404 `NAME_UNKNOWN`, as if it did not
//!   exist.
//! - The [`ImageIndex`] (that part of the server's store) keeps the index (images), the blobs,
//!   their links and what each manifest references. After every manifest push the least
//!   recently used tags are evicted until the cache fits in the administrator's bound
//!   ([`Site::cache_limit`]), and blobs nothing references any more are deleted, with their
//!   links.
//! - One lock orders everything that adds or removes blob files, links and index rows (a
//!   finished upload, a mount, a manifest push, a deletion, the collection), so a manifest's
//!   or a mount's check that its blobs exist and are linked cannot interleave with their
//!   deletion.
//!
//! What it may touch is what [`Context`] hands it: the index, the server's answers ([`Site`]),
//! the clock, and `<data>/objects` made private as the server makes its files.

mod auth;
mod errors;
mod gc;
pub mod images;
mod manifest;
mod names;
mod storage;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Query, Request};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::{Extension, Router};
use gantry_api::v1::Role;
use gantry_store::{ImageKey, ImageRow, NewManifest};
use serde_json::json;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use uuid::Uuid;

pub use auth::{AuthError, Principal, Site};
pub use gantry_store::ImageIndex;

use errors::{OciError, API_VERSION};
use names::{sha256_hex, Reference, Repo};
use storage::{BlobStore, Upload};

/// The admin setting that bounds the cache ([`Site::cache_limit`] reads it), named in what
/// eviction logs and records.
use gantry_intake::requests::CACHE_BYTES_KEY;
/// The cache's bound when the administrator set none, in bytes.
pub const DEFAULT_CACHE_BYTES: u64 = 10 << 30;
/// Pulls refresh an image's (or blob's) last use at most this often.
const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// Blobs nothing references are kept this long after their last use (a push may be between
/// its uploads and its manifest), unless they belonged to an image just removed.
const ORPHAN_GRACE_MS: i64 = 24 * 3600 * 1000;
/// Abandoned uploads are removed after this long.
const UPLOAD_GRACE: Duration = Duration::from_secs(24 * 3600);
/// A build may name the cache key it pushed under (agents and administrators only).
const BUILD_KEY_HEADER: &str = "gantry-build-key";

/// Time as the server's store keeps it (milliseconds since the epoch, UTC).
#[derive(Clone, Copy)]
pub struct Clock {
    /// Now, in the store's milliseconds.
    pub now_ms: fn() -> i64,
    /// The store's milliseconds as the API's time.
    pub ts: fn(i64) -> OffsetDateTime,
}

/// How the server keeps its files private: the registry makes its directories with `dir` and
/// creates its files with `file_mode` (the blobs of private images).
#[derive(Clone, Copy)]
pub struct Private {
    pub dir: fn(&Path) -> std::io::Result<()>,
    pub file_mode: u32,
}

/// What the registry is handed, and all it reaches.
pub struct Context {
    /// The server's data directory: the registry's files are under `<data_dir>/objects`.
    pub data_dir: PathBuf,
    pub index: Arc<dyn ImageIndex>,
    pub site: Arc<dyn Site>,
    pub clock: Clock,
    pub private: Private,
}

pub struct Registry {
    index: Arc<dyn ImageIndex>,
    site: Arc<dyn Site>,
    clock: Clock,
    blobs: BlobStore,
    commit: tokio::sync::Mutex<()>,
    uploads: Mutex<HashMap<Uuid, Arc<tokio::sync::Mutex<Upload>>>>,
    touched: Mutex<HashMap<String, Instant>>,
}

impl Registry {
    pub fn new(cx: Context) -> Arc<Registry> {
        let blobs = BlobStore::open(&cx.data_dir, cx.private);
        Arc::new(Registry {
            index: cx.index,
            site: cx.site,
            clock: cx.clock,
            blobs,
            commit: tokio::sync::Mutex::new(()),
            uploads: Mutex::default(),
            touched: Mutex::default(),
        })
    }

    fn now(&self) -> i64 {
        (self.clock.now_ms)()
    }
}

/// `/v2/...`: the registry.
pub fn v2_routes<S: Clone + Send + Sync + 'static>(reg: Arc<Registry>) -> Router<S> {
    Router::new()
        .route("/v2", any(base))
        .route("/v2/", any(base))
        .route("/v2/{*rest}", any(dispatch))
        .layer(Extension(reg))
}

fn with_version(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(API_VERSION.0, HeaderValue::from_static(API_VERSION.1));
    resp
}

/// `GET /v2/`: 200 for a valid token, so clients know their credentials work.
async fn base(Extension(reg): Extension<Arc<Registry>>, headers: HeaderMap) -> Response {
    match reg.caller(&headers).await {
        Ok(_) => with_version(
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                "{}",
            )
                .into_response(),
        ),
        Err(e) => e.into_response(),
    }
}

async fn dispatch(Extension(reg): Extension<Arc<Registry>>, req: Request) -> Response {
    match reg.handle(req).await {
        Ok(resp) => with_version(resp),
        Err(e) => e.into_response(),
    }
}

/// A manifest push naming blobs or manifests `repo` does not link (or that are not here).
fn blobs_unknown(repo: &Repo, missing: Vec<String>) -> OciError {
    OciError::new(
        StatusCode::BAD_REQUEST,
        "MANIFEST_BLOB_UNKNOWN",
        format!(
            "the manifest references what is not in {repo}; push it there first: {}",
            missing.join(", ")
        ),
    )
    .detail(json!({ "digests": missing }))
}

/// Parameters of the query string.
type Params = HashMap<String, String>;

fn location(resp: &mut Response, loc: &str) {
    if let Ok(v) = HeaderValue::from_str(loc) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
}

fn set(resp: &mut Response, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

fn empty(status: StatusCode) -> Response {
    let mut r = (status, Body::empty()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    r
}

/// `0-<last byte>` of what an upload holds.
fn range(len: u64) -> String {
    format!("0-{}", len.saturating_sub(1))
}

impl Registry {
    /// The caller, from a bearer token or basic auth with the token as the password.
    async fn caller(&self, headers: &HeaderMap) -> Result<Principal, OciError> {
        let header = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .ok_or_else(OciError::unauthorized)?;
        let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
        let token = if scheme.eq_ignore_ascii_case("bearer") {
            rest.trim().to_string()
        } else if scheme.eq_ignore_ascii_case("basic") {
            use base64::Engine;
            let raw = base64::engine::general_purpose::STANDARD
                .decode(rest.trim())
                .map_err(|_| OciError::unauthorized())?;
            let text = String::from_utf8(raw).map_err(|_| OciError::unauthorized())?;
            let (_user, password) = text.split_once(':').ok_or_else(OciError::unauthorized)?;
            password.to_string()
        } else {
            return Err(OciError::unauthorized());
        };
        if token.is_empty() {
            return Err(OciError::unauthorized());
        }
        match self.site.authenticate(&token).await {
            Ok(p) => Ok(p),
            Err(AuthError::Refused) => Err(OciError::unauthorized()),
            Err(AuthError::Failed(e)) => Err(OciError::internal(e)),
        }
    }

    async fn handle(self: &Arc<Self>, req: Request) -> Result<Response, OciError> {
        let caller = self.caller(req.headers()).await?;
        let path = req.uri().path().to_string();
        let rest = path.strip_prefix("/v2/").unwrap_or_default();
        let params: Params = Query::<Params>::try_from_uri(req.uri())
            .map(|q| q.0)
            .unwrap_or_default();
        let method = req.method().clone();
        let segs: Vec<&str> = rest.split('/').collect();
        let repo_of = |name: &[&str]| -> Result<Repo, OciError> {
            let full = name.join("/");
            let repo = Repo::parse(&full)?;
            if repo.allows(&caller) {
                Ok(repo)
            } else {
                // Something a caller may not see answers 404.
                Err(OciError::name_unknown(&full))
            }
        };
        match segs.as_slice() {
            [name @ .., "tags", "list"] if !name.is_empty() => {
                let repo = repo_of(name)?;
                match method {
                    Method::GET => self.tags_list(&repo, &params).await,
                    _ => Err(OciError::unsupported("tags/list takes GET")),
                }
            }
            [name @ .., "blobs", "uploads", ""] | [name @ .., "blobs", "uploads"]
                if !name.is_empty() =>
            {
                let repo = repo_of(name)?;
                match method {
                    Method::POST => {
                        self.start_upload(&caller, &repo, &params, req.into_body())
                            .await
                    }
                    _ => Err(OciError::unsupported("start an upload with POST")),
                }
            }
            [name @ .., "blobs", "uploads", id] if !name.is_empty() => {
                let repo = repo_of(name)?;
                let id = Uuid::parse_str(id).map_err(|_| OciError::upload_unknown())?;
                let (parts, body) = req.into_parts();
                match parts.method {
                    Method::PATCH => {
                        self.patch_upload(&caller, &repo, id, &parts.headers, body)
                            .await
                    }
                    Method::PUT => self.put_upload(&caller, &repo, id, &params, body).await,
                    Method::GET => self.upload_status(&caller, &repo, id).await,
                    Method::DELETE => self.cancel_upload(&caller, &repo, id).await,
                    _ => Err(OciError::unsupported(
                        "an upload takes PATCH, PUT, GET or DELETE",
                    )),
                }
            }
            [name @ .., "manifests", reference] if !name.is_empty() => {
                let repo = repo_of(name)?;
                let reference = Reference::parse(reference)?;
                let (parts, body) = req.into_parts();
                match parts.method {
                    Method::GET => self.get_manifest(&repo, &reference, false).await,
                    Method::HEAD => self.get_manifest(&repo, &reference, true).await,
                    Method::PUT => {
                        self.put_manifest(&caller, &repo, &reference, &parts.headers, body)
                            .await
                    }
                    Method::DELETE => self.delete_manifest(&caller, &repo, &reference).await,
                    _ => Err(OciError::unsupported(
                        "a manifest takes GET, HEAD, PUT or DELETE",
                    )),
                }
            }
            [name @ .., "blobs", digest] if !name.is_empty() => {
                let repo = repo_of(name)?;
                match method {
                    Method::GET => self.get_blob(&repo, digest, false).await,
                    Method::HEAD => self.get_blob(&repo, digest, true).await,
                    Method::DELETE => Err(OciError::unsupported(
                        "blobs are collected by the cache once no image needs them: delete a \
                         manifest instead",
                    )),
                    _ => Err(OciError::unsupported("a blob takes GET or HEAD")),
                }
            }
            _ => Err(OciError::not_found_route()),
        }
    }

    // --- last use ---------------------------------------------------------------------------

    /// Whether `what` was not refreshed within [`TOUCH_EVERY`] (and counts it refreshed now).
    fn due(&self, what: String) -> bool {
        let now = Instant::now();
        let Ok(mut m) = self.touched.lock() else {
            return true;
        };
        if m.get(&what)
            .is_some_and(|t| now.duration_since(*t) < TOUCH_EVERY)
        {
            return false;
        }
        if m.len() > 10_000 {
            m.retain(|_, t| now.duration_since(*t) < TOUCH_EVERY);
        }
        m.insert(what, now);
        true
    }

    async fn touch_image(&self, key: &ImageKey) {
        let what = format!("{}/{}/{}:{}", key.scope, key.owner, key.name, key.tag);
        if self.due(what) {
            if let Err(e) = self.index.touch_image(key, self.now()).await {
                tracing::warn!("object cache: recording a pull: {e}");
            }
        }
    }

    async fn touch_blob(&self, digest: &str) {
        if self.due(digest.to_string()) {
            if let Err(e) = self.index.touch_blob(digest, self.now()).await {
                tracing::warn!("object cache: recording a pull: {e}");
            }
        }
    }

    // --- blobs -------------------------------------------------------------------------------

    /// A blob's size when it is in the cache (its row and its file).
    async fn blob_size(&self, digest: &str) -> Result<Option<u64>, OciError> {
        let hex = sha256_hex(digest)?;
        let path = self.blobs.blob_path(hex);
        let file = match tokio::fs::metadata(&path).await {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        match self.index.blob(digest).await? {
            Some(b) => Ok(Some(b.size as u64)),
            None => {
                // A file whose row was lost (a crash between the rename and the row): adopt it.
                // It is linked nowhere until an upload proves its content again.
                self.index
                    .put_blob(digest, file.len() as i64, None, self.now())
                    .await?;
                Ok(Some(file.len()))
            }
        }
    }

    /// Whether `repo` links the blob `digest`.
    async fn links(&self, repo: &Repo, digest: &str) -> Result<bool, OciError> {
        let one = [digest.to_string()];
        Ok(!self
            .index
            .linked_blobs(repo.stored(), &one)
            .await?
            .is_empty())
    }

    async fn get_blob(&self, repo: &Repo, digest: &str, head: bool) -> Result<Response, OciError> {
        let hex = sha256_hex(digest)?;
        if !self.links(repo, digest).await? {
            return Err(OciError::blob_unknown(digest));
        }
        let size = self
            .blob_size(digest)
            .await?
            .ok_or_else(|| OciError::blob_unknown(digest))?;
        self.touch_blob(digest).await;
        let mut resp = if head {
            empty(StatusCode::OK)
        } else {
            let (_, stream) = self.blobs.stream(hex).await.map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    OciError::blob_unknown(digest)
                } else {
                    e.into()
                }
            })?;
            (StatusCode::OK, Body::from_stream(stream)).into_response()
        };
        set(&mut resp, "content-length", &size.to_string());
        set(&mut resp, "content-type", "application/octet-stream");
        set(&mut resp, "docker-content-digest", digest);
        set(&mut resp, "etag", &format!("\"{digest}\""));
        Ok(resp)
    }

    // --- uploads -------------------------------------------------------------------------------

    async fn start_upload(
        &self,
        caller: &Principal,
        repo: &Repo,
        params: &Params,
        body: Body,
    ) -> Result<Response, OciError> {
        if let Some(mount) = params.get("mount") {
            sha256_hex(mount)?;
            if let Some(from) = self.mount_source(caller, repo, params.get("from")).await? {
                if self.mount(repo, &from, mount).await? {
                    self.touch_blob(mount).await;
                    return Ok(self.blob_created(repo, mount));
                }
            }
            // Not mounted: the client uploads (202 below), the same answer whether the blob
            // exists nowhere, `from` does not link it, or the caller may not read `from`.
        }
        let id = Uuid::new_v4();
        let mut up = Upload::create(&self.blobs, id, repo.to_string(), caller.user.clone()).await?;
        if let Some(digest) = params.get("digest") {
            // Monolithic: the whole blob in this request.
            sha256_hex(digest)?;
            if let Err(e) = up.append(body).await {
                let _ = tokio::fs::remove_file(&up.path).await;
                return Err(e);
            }
            return self.finish_upload(&mut up, repo, digest).await;
        }
        self.uploads
            .lock()
            .map_err(|_| OciError::internal("the upload table is poisoned"))?
            .insert(id, Arc::new(tokio::sync::Mutex::new(up)));
        Ok(self.upload_reply(StatusCode::ACCEPTED, repo, id, 0))
    }

    /// The repository named by a mount's `from`, if the caller may take blobs from it into
    /// `repo`: one the caller may read. An agent may read every repository, but pushes what a
    /// user's workflow decided, so it takes only from where the repository's owner could.
    async fn mount_source(
        &self,
        caller: &Principal,
        repo: &Repo,
        from: Option<&String>,
    ) -> Result<Option<Repo>, OciError> {
        let Some(from) = from
            .and_then(|f| Repo::parse(f).ok())
            .filter(|f| f.allows(caller))
        else {
            return Ok(None);
        };
        if caller.role != Role::Agent {
            return Ok(Some(from));
        }
        let owner_group = match repo.scope {
            names::Scope::User => self.site.group_of(&repo.owner).await?,
            names::Scope::Group => None,
        };
        Ok(repo
            .may_take_from(&from, owner_group.as_deref())
            .then_some(from))
    }

    /// Links a blob of `from` into `repo`, if `from` links it and it is here. The caller may
    /// take from `from` ([`Registry::mount_source`]).
    async fn mount(&self, repo: &Repo, from: &Repo, digest: &str) -> Result<bool, OciError> {
        let _g = self.commit.lock().await;
        if !self.links(from, digest).await? || self.blob_size(digest).await?.is_none() {
            return Ok(false);
        }
        let one = [digest.to_string()];
        self.index
            .link_blobs(repo.stored(), &one, self.now())
            .await?;
        Ok(true)
    }

    fn upload_reply(&self, status: StatusCode, repo: &Repo, id: Uuid, len: u64) -> Response {
        let mut resp = empty(status);
        location(&mut resp, &format!("/v2/{repo}/blobs/uploads/{id}"));
        set(&mut resp, "range", &range(len));
        set(&mut resp, "docker-upload-uuid", &id.to_string());
        resp
    }

    fn blob_created(&self, repo: &Repo, digest: &str) -> Response {
        let mut resp = empty(StatusCode::CREATED);
        location(&mut resp, &format!("/v2/{repo}/blobs/{digest}"));
        set(&mut resp, "docker-content-digest", digest);
        resp
    }

    /// The upload session `id`, locked, if it is this caller's on this repository (checked
    /// once it is locked); anyone else is told it does not exist.
    async fn upload(
        &self,
        id: Uuid,
        repo: &Repo,
        caller: &Principal,
    ) -> Result<tokio::sync::OwnedMutexGuard<Upload>, OciError> {
        let up = self
            .uploads
            .lock()
            .map_err(|_| OciError::internal("the upload table is poisoned"))?
            .get(&id)
            .cloned()
            .ok_or_else(OciError::upload_unknown)?;
        let up = up.lock_owned().await;
        if !up.continues(repo, caller) {
            return Err(OciError::upload_unknown());
        }
        Ok(up)
    }

    fn forget_upload(&self, id: Uuid) {
        if let Ok(mut m) = self.uploads.lock() {
            m.remove(&id);
        }
    }

    async fn patch_upload(
        &self,
        caller: &Principal,
        repo: &Repo,
        id: Uuid,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<Response, OciError> {
        let mut up = self.upload(id, repo, caller).await?;
        if let Some(cr) = headers
            .get(header::CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
        {
            let cr = cr.trim().trim_start_matches("bytes ").trim();
            let start = cr
                .split(['-', '/'])
                .next()
                .and_then(|s| s.trim().parse::<u64>().ok());
            if start != Some(up.len) {
                let mut e = OciError::new(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    "BLOB_UPLOAD_INVALID",
                    format!(
                        "chunks must come in order: this upload holds {} bytes, the chunk \
                         starts at {cr:?}",
                        up.len
                    ),
                );
                if let Ok(v) = HeaderValue::from_str(&range(up.len)) {
                    e = e.header(header::RANGE, v);
                }
                return Err(e.header(
                    header::LOCATION,
                    HeaderValue::from_str(&format!("/v2/{repo}/blobs/uploads/{id}"))
                        .unwrap_or(HeaderValue::from_static("/")),
                ));
            }
        }
        up.append(body).await?;
        Ok(self.upload_reply(StatusCode::ACCEPTED, repo, id, up.len))
    }

    async fn put_upload(
        &self,
        caller: &Principal,
        repo: &Repo,
        id: Uuid,
        params: &Params,
        body: Body,
    ) -> Result<Response, OciError> {
        let mut up = self.upload(id, repo, caller).await?;
        let digest = params.get("digest").ok_or_else(|| {
            OciError::digest_invalid("finishing an upload needs ?digest=sha256:<hex>")
        })?;
        sha256_hex(digest)?;
        up.append(body).await?;
        let res = self.finish_upload(&mut up, repo, digest).await;
        // Finished or refused, the upload is over; a later request for it is unknown.
        up.done = true;
        self.forget_upload(id);
        res
    }

    /// Checks the digest, moves the upload into the blob store (a blob already there stays as
    /// it is: the upload only proved its content) and links it in `repo`.
    async fn finish_upload(
        &self,
        up: &mut Upload,
        repo: &Repo,
        digest: &str,
    ) -> Result<Response, OciError> {
        let got = up.digest();
        if got != digest {
            let _ = tokio::fs::remove_file(&up.path).await;
            return Err(OciError::digest_invalid(format!(
                "the upload's content has digest {got}, not {digest}"
            ))
            .detail(json!({"expected": digest, "actual": got})));
        }
        let hex = sha256_hex(digest)?;
        let stored = async {
            up.sync().await?;
            let _g = self.commit.lock().await;
            self.blobs.commit(&up.path, hex).await?;
            self.index
                .put_blob(digest, up.len as i64, Some(repo.stored()), self.now())
                .await?;
            Ok::<_, OciError>(())
        }
        .await;
        if let Err(e) = stored {
            let _ = tokio::fs::remove_file(&up.path).await;
            return Err(e);
        }
        Ok(self.blob_created(repo, digest))
    }

    async fn upload_status(
        &self,
        caller: &Principal,
        repo: &Repo,
        id: Uuid,
    ) -> Result<Response, OciError> {
        let up = self.upload(id, repo, caller).await?;
        Ok(self.upload_reply(StatusCode::NO_CONTENT, repo, id, up.len))
    }

    async fn cancel_upload(
        &self,
        caller: &Principal,
        repo: &Repo,
        id: Uuid,
    ) -> Result<Response, OciError> {
        let mut up = self.upload(id, repo, caller).await?;
        let _ = tokio::fs::remove_file(&up.path).await;
        up.done = true;
        self.forget_upload(id);
        Ok(empty(StatusCode::NO_CONTENT))
    }

    // --- manifests --------------------------------------------------------------------------------

    /// Every digest reachable from `roots` through stored manifests (the roots included).
    async fn reachable(&self, roots: &[String]) -> Result<HashSet<String>, OciError> {
        let mut seen: HashSet<String> = roots.iter().cloned().collect();
        let mut frontier: Vec<String> = roots.to_vec();
        // Indexes of indexes are rare; a few levels are plenty and bound the work.
        for _ in 0..4 {
            if frontier.is_empty() {
                break;
            }
            let edges = self.index.manifest_refs(Some(&frontier)).await?;
            frontier = edges
                .into_iter()
                .filter_map(|(_, c)| seen.insert(c.clone()).then_some(c))
                .collect();
        }
        Ok(seen)
    }

    /// The digest and media type `reference` names in `repo`. A digest must be linked in the
    /// repository and be one of its manifests or listed by one of its indexes: a manifest
    /// whose tag was removed is not served, even while its blob (and link) stay for others.
    async fn resolve(
        &self,
        repo: &Repo,
        reference: &Reference,
    ) -> Result<(String, String), OciError> {
        match reference {
            Reference::Tag(t) => {
                let row = self
                    .index
                    .image(&repo.key(t))
                    .await?
                    .ok_or_else(|| OciError::manifest_unknown(t))?;
                self.touch_image(&row.key).await;
                Ok((row.digest, row.media_type))
            }
            Reference::Digest(d) => {
                if !self.links(repo, d).await? {
                    return Err(OciError::manifest_unknown(d));
                }
                let rows = self.index.images(Some(repo.stored())).await?;
                if let Some(row) = rows.iter().find(|r| r.digest == *d) {
                    for r in rows.iter().filter(|r| r.digest == *d) {
                        self.touch_image(&r.key).await;
                    }
                    return Ok((row.digest.clone(), row.media_type.clone()));
                }
                let roots: Vec<String> = rows.iter().map(|r| r.digest.clone()).collect();
                if !self.reachable(&roots).await?.contains(d) {
                    return Err(OciError::manifest_unknown(d));
                }
                let m = self
                    .index
                    .manifest(d)
                    .await?
                    .ok_or_else(|| OciError::manifest_unknown(d))?;
                let parents: HashSet<String> = self
                    .index
                    .manifest_refs(Some(&roots))
                    .await?
                    .into_iter()
                    .filter(|(_, c)| c == d)
                    .map(|(p, _)| p)
                    .collect();
                for r in rows.iter().filter(|r| parents.contains(&r.digest)) {
                    self.touch_image(&r.key).await;
                }
                Ok((m.digest, m.media_type))
            }
        }
    }

    async fn get_manifest(
        &self,
        repo: &Repo,
        reference: &Reference,
        head: bool,
    ) -> Result<Response, OciError> {
        let (digest, media_type) = self.resolve(repo, reference).await?;
        let hex = sha256_hex(&digest)?;
        let bytes = self.blobs.read(hex).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                OciError::manifest_unknown(&digest)
            } else {
                e.into()
            }
        })?;
        let len = bytes.len();
        let mut resp = if head {
            empty(StatusCode::OK)
        } else {
            (StatusCode::OK, bytes).into_response()
        };
        set(&mut resp, "content-length", &len.to_string());
        set(&mut resp, "content-type", &media_type);
        set(&mut resp, "docker-content-digest", &digest);
        set(&mut resp, "etag", &format!("\"{digest}\""));
        Ok(resp)
    }

    async fn put_manifest(
        &self,
        caller: &Principal,
        repo: &Repo,
        reference: &Reference,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<Response, OciError> {
        let bytes = axum::body::to_bytes(body, manifest::MAX_MANIFEST)
            .await
            .map_err(|_| {
                OciError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "SIZE_INVALID",
                    format!("a manifest may be at most {} bytes", manifest::MAX_MANIFEST),
                )
            })?;
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let parsed = manifest::parse(&bytes, content_type)?;
        let hex = hex::encode(Sha256::digest(&bytes));
        let digest = format!("sha256:{hex}");
        if let Reference::Digest(d) = reference {
            if *d != digest {
                return Err(OciError::digest_invalid(format!(
                    "the manifest's digest is {digest}, not {d}"
                )));
            }
        }
        let build_key = match caller.role {
            Role::Agent | Role::Admin => headers
                .get(BUILD_KEY_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|k| !k.is_empty() && k.len() <= 256)
                .map(str::to_string),
            _ => None,
        };
        let refs = parsed.refs();
        let _g = self.commit.lock().await;
        // Everything it names must be here and linked in this repository: blobs, and an
        // index's entries as manifests. One that another repository links is as unknown as
        // one that exists nowhere: push it here (or mount it from where you may read it).
        let linked = self.index.linked_blobs(repo.stored(), &refs).await?;
        let mut missing = vec![];
        for d in parsed
            .config
            .iter()
            .chain(&parsed.layers)
            .filter(|d| !d.foreign)
        {
            if !linked.contains(&d.digest) || self.blob_size(&d.digest).await?.is_none() {
                missing.push(d.digest.clone());
            }
        }
        for d in &parsed.manifests {
            let known = linked.contains(&d.digest)
                && self.index.manifest(&d.digest).await?.is_some()
                && self.blob_size(&d.digest).await?.is_some();
            if !known {
                missing.push(d.digest.clone());
            }
        }
        if !missing.is_empty() {
            return Err(blobs_unknown(repo, missing));
        }
        self.blobs.write(&bytes, &hex).await?;
        // Its size: itself and everything it reaches, each blob once.
        let mut size = bytes.len() as i64;
        let mut reach = self.reachable(&refs).await?;
        reach.remove(&digest);
        for d in &reach {
            if let Some(b) = self.index.blob(d).await? {
                size += b.size;
            }
        }
        let now = self.now();
        let row = |tag: &str| ImageRow {
            key: repo.key(tag),
            digest: digest.clone(),
            media_type: parsed.media_type.clone(),
            size,
            created_at: now,
            last_used_at: now,
            build_key: build_key.clone(),
        };
        let image = match reference {
            Reference::Tag(t) => Some(row(t)),
            Reference::Digest(d) => {
                // Pushed by digest: keep it under its digest unless a tag already reaches it
                // (an index's platforms are pushed before the index).
                let rows = self.index.images(Some(repo.stored())).await?;
                let roots: Vec<String> = rows.iter().map(|r| r.digest.clone()).collect();
                if self.reachable(&roots).await?.contains(d) {
                    None
                } else {
                    Some(row(d))
                }
            }
        };
        let m = NewManifest {
            digest: digest.clone(),
            media_type: parsed.media_type.clone(),
            size: bytes.len() as i64,
            refs,
        };
        match self
            .index
            .put_image(repo.stored(), &m, image.as_ref(), &caller.user, now)
            .await
        {
            Ok(()) => {}
            // Another replica collected a blob between the check above and this.
            Err(gantry_store::StoreError::Conflict(_)) => {
                let linked = self.index.linked_blobs(repo.stored(), &m.refs).await?;
                let missing = m.refs.into_iter().filter(|d| !linked.contains(d)).collect();
                return Err(blobs_unknown(repo, missing));
            }
            Err(e) => return Err(e.into()),
        }
        // The push is stored; keeping the cache in bounds must not fail it.
        if let Err(e) = self.enforce_limit(image.as_ref().map(|i| &i.key)).await {
            tracing::error!("object cache: enforcing {CACHE_BYTES_KEY}: {}", e.message);
        }
        let mut resp = empty(StatusCode::CREATED);
        location(&mut resp, &format!("/v2/{repo}/manifests/{digest}"));
        set(&mut resp, "docker-content-digest", &digest);
        Ok(resp)
    }

    async fn delete_manifest(
        &self,
        caller: &Principal,
        repo: &Repo,
        reference: &Reference,
    ) -> Result<Response, OciError> {
        if caller.role == Role::Agent {
            return Err(OciError::denied(
                "agents push and pull; deleting images needs their owner or an administrator",
            ));
        }
        let _g = self.commit.lock().await;
        let rows = self.index.images(Some(repo.stored())).await?;
        let (keys, shown): (Vec<ImageRow>, &str) = match reference {
            Reference::Tag(t) => (rows.into_iter().filter(|r| r.key.tag == *t).collect(), t),
            Reference::Digest(d) => (rows.into_iter().filter(|r| r.digest == *d).collect(), d),
        };
        if keys.is_empty() {
            return Err(OciError::manifest_unknown(shown));
        }
        self.remove_images(&keys, &caller.user, "deleted through the registry API")
            .await?;
        Ok(empty(StatusCode::ACCEPTED))
    }

    async fn tags_list(&self, repo: &Repo, params: &Params) -> Result<Response, OciError> {
        let rows = self.index.images(Some(repo.stored())).await?;
        if rows.is_empty() {
            return Err(OciError::name_unknown(&repo.to_string()));
        }
        let mut tags: Vec<String> = rows
            .into_iter()
            .map(|r| r.key.tag)
            .filter(|t| !t.contains(':'))
            .collect();
        tags.sort();
        if let Some(last) = params.get("last") {
            tags.retain(|t| t.as_str() > last.as_str());
        }
        let mut next = None;
        if let Some(n) = params.get("n").and_then(|n| n.parse::<usize>().ok()) {
            if tags.len() > n {
                tags.truncate(n);
                if let Some(last) = tags.last() {
                    next = Some(format!(
                        "</v2/{repo}/tags/list?n={n}&last={last}>; rel=\"next\""
                    ));
                }
            }
        }
        let body = json!({ "name": repo.to_string(), "tags": tags }).to_string();
        let mut resp = (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if let Some(link) = next {
            set(&mut resp, "link", &link);
        }
        Ok(resp)
    }

    // --- keeping the cache in bounds ------------------------------------------------------------

    async fn cache_limit(&self) -> Result<u64, OciError> {
        Ok(self
            .site
            .cache_limit()
            .await?
            .unwrap_or(DEFAULT_CACHE_BYTES))
    }

    /// Removes index rows and then the blobs only they referenced. Holds `commit`.
    ///
    /// The removed images' repositories keep their links to blobs that stay (others still
    /// reference them), as distribution keeps a repository's layer links when a manifest is
    /// deleted: the repository proved it had that content, and a push of the image again
    /// needs no upload. Links go with their blob, in [`Registry::collect`]; a manifest whose
    /// tag is gone is not served by digest even so (see [`Registry::resolve`]).
    async fn remove_images(&self, rows: &[ImageRow], by: &str, why: &str) -> Result<(), OciError> {
        let edges = gc::edges(self.index.manifest_refs(None).await?);
        let freed = gc::closure(rows.iter().map(|r| r.digest.as_str()), &edges);
        let keys: Vec<ImageKey> = rows.iter().map(|r| r.key.clone()).collect();
        self.index.delete_images(&keys, by, why, self.now()).await?;
        self.collect(&freed).await
    }

    /// Evicts least recently used tags until the cache fits its limit. Holds `commit`.
    async fn enforce_limit(&self, keep: Option<&ImageKey>) -> Result<(), OciError> {
        let limit = self.cache_limit().await?;
        let store = &self.index;
        let images = store.images(None).await?;
        let edges = gc::edges(store.manifest_refs(None).await?);
        let sizes: HashMap<String, i64> = store
            .blobs()
            .await?
            .into_iter()
            .map(|b| (b.digest, b.size))
            .collect();
        let evict = gc::plan_eviction(&images, &edges, &sizes, limit, keep);
        if evict.is_empty() {
            return self.collect(&HashSet::new()).await;
        }
        let rows: Vec<ImageRow> = images
            .into_iter()
            .filter(|i| evict.contains(&i.key))
            .collect();
        tracing::info!(
            "object cache: evicting {} least recently used image tags ({CACHE_BYTES_KEY} = {limit})",
            rows.len()
        );
        self.remove_images(
            &rows,
            "the object cache",
            &format!(
                "evicted: least recently used while the cache was over {CACHE_BYTES_KEY} = {limit}"
            ),
        )
        .await
    }

    /// Deletes blobs no remaining manifest references: at once those in `freed` (what removed
    /// images referenced), others after [`ORPHAN_GRACE_MS`] unused; every repository's links
    /// to them go in the same transaction. Holds `commit`.
    async fn collect(&self, freed: &HashSet<String>) -> Result<(), OciError> {
        let store = &self.index;
        let images = store.images(None).await?;
        let edges = gc::edges(store.manifest_refs(None).await?);
        let referenced = gc::closure(images.iter().map(|i| i.digest.as_str()), &edges);
        let cutoff = self.now() - ORPHAN_GRACE_MS;
        let garbage: Vec<String> = store
            .blobs()
            .await?
            .into_iter()
            .filter(|b| !referenced.contains(&b.digest))
            .filter(|b| freed.contains(&b.digest) || b.last_used_at < cutoff)
            .map(|b| b.digest)
            .collect();
        if !garbage.is_empty() {
            store.delete_blobs(&garbage, self.now()).await?;
            for d in &garbage {
                if let Ok(hex) = sha256_hex(d) {
                    if let Err(e) = self.blobs.remove(hex).await {
                        tracing::warn!("object cache: deleting blob {d}: {e}");
                    }
                }
            }
        }
        // Files the store lost track of (a crash between a write and its row), and uploads
        // abandoned for a day.
        let known: HashSet<String> = store.blobs().await?.into_iter().map(|b| b.digest).collect();
        let grace = Duration::from_millis(ORPHAN_GRACE_MS as u64);
        for (digest, path) in self.blobs.old_blobs(grace) {
            if !known.contains(&digest) && !referenced.contains(&digest) {
                tracing::info!("object cache: deleting {digest}, a file with no record");
                let _ = tokio::fs::remove_file(path).await;
            }
        }
        for p in self.blobs.stale_uploads(UPLOAD_GRACE) {
            if let Some(id) = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| Uuid::parse_str(n).ok())
            {
                self.forget_upload(id);
            }
            let _ = tokio::fs::remove_file(p).await;
        }
        Ok(())
    }
}
