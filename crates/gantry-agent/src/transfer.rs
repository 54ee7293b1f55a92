//! Data transfers of a volume: an attempt whose assignment carries a [`TransferSpec`] fetches
//! each source into the volume (`ingress:VOLUME`, before any step that mounts it starts) or
//! uploads each file of the volume (`egress:VOLUME`, after they all FINISHED), in order, on
//! this node, so the data lands on (and leaves from) the pool's storage.
//!
//! S3 goes through `object_store` (any S3-compatible server: the secret's endpoint, addressed
//! path-style; uploads are multipart, a few parts in flight at once); HTTP through reqwest.
//!
//! - Destinations are paths below the volume's directory, resolved beneath it without
//!   following symlinks ([`crate::beneath`]): a link a container planted in the volume is
//!   refused, never followed. Each file is written under a temporary name and renamed into
//!   place only once it is whole, so a failed transfer leaves nothing half-written behind.
//! - Bodies are streamed to disk chunk by chunk (memory stays bounded whatever the size), and
//!   the bytes received are checked against the size the server announced.
//! - Each transfer has its own tries (`policy.retry.attempts`, a second apart, doubling) and a
//!   deadline per try (`policy.timeout.execute`). A failure names the URL and the cause (the
//!   HTTP status, the connection error, the timeout).
//! - Progress goes to the task's log: bytes done and total, and the rate.

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::StreamExt;
use gantry_api::agent::{TransferCredential, TransferItem, TransferOutcome, TransferSpec};
use gantry_api::v1::TransferProgress;
use tokio::io::AsyncWriteExt;

use crate::beneath::{self, Dir, Owner, Rel, Resolve};
use crate::build::{human_size, StopSignal};

/// The exit code of a transfer that ran past its deadline (as `timeout(1)`).
pub const EXIT_TIMEOUT: i32 = 124;
/// The exit code of a failed transfer.
pub const EXIT_FAILED: i32 = 1;
/// The exit code of a stopped transfer.
pub const EXIT_STOPPED: i32 = 143;

/// How often progress is logged while a body streams.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Why a transfer failed: the step's end reason, and its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferError {
    pub code: i32,
    pub message: String,
}

impl TransferError {
    fn failed(message: impl Into<String>) -> Self {
        TransferError {
            code: EXIT_FAILED,
            message: message.into(),
        }
    }
}

/// Where progress and results are written (the task's log).
pub trait Log: Sync {
    fn line(&self, line: &str);
    /// One item ended for good (after its tries).
    fn ended(&self, _item: &TransferItem, _outcome: TransferOutcome) {}
    /// Where an item is, as the log's progress lines say.
    fn progress(&self, _item: &TransferItem, _progress: TransferProgress) {}
}

impl<F: Fn(&str) + Sync> Log for F {
    fn line(&self, line: &str) {
        self(line)
    }
}

/// A path in the volume from a `file://PATH` or `file:///PATH` URI (both relative to the
/// volume's root; validation refused anything that leaves it, and [`Rel`] refuses it again).
fn in_volume(uri: &str) -> Result<Rel, String> {
    let path = uri
        .strip_prefix("file://")
        .ok_or_else(|| format!("{uri}: not a file:// path in the volume"))?;
    Rel::new(path.trim_start_matches('/')).map_err(|e| format!("{uri}: {e}"))
}

/// Runs every transfer of `spec` into the volume below `storage_root`. Returns a summary for
/// the log.
pub async fn run(
    storage_root: &Path,
    spec: &TransferSpec,
    log: &dyn Log,
    stop: &StopSignal,
) -> Result<String, TransferError> {
    let ingress = match spec.direction.as_str() {
        "ingress" => true,
        "egress" => false,
        other => {
            return Err(TransferError::failed(format!(
                "{other} transfers are not supported by this agent"
            )))
        }
    };
    let volume = Rel::new(&spec.volume).map_err(|e| {
        TransferError::failed(format!("refusing volume path {:?}: {e}", spec.volume))
    })?;
    // A persistent volume's storage is an administrator's directory, trusted as given (as
    // for mounts); only the volume's part is resolved beneath it.
    let storage = match &spec.root {
        Some(r) => Dir::open_root(Path::new(r)).map_err(|e| {
            TransferError::failed(format!(
                "opening the storage directory {r} (is it mounted on this node?): {e}"
            ))
        }),
        None => Dir::open_root(storage_root).map_err(|e| {
            TransferError::failed(format!(
                "opening the storage root {}: {e}",
                storage_root.display()
            ))
        }),
    }?;
    let dir = storage
        .create_dirs(&volume, Resolve::Beneath, 0o755, Owner::ROOT)
        .map_err(|e| TransferError::failed(volume_error(&e, "the volume's directory")))?;
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| TransferError::failed(format!("an HTTP client: {e}")))?;
    let started = Instant::now();
    let mut total = 0u64;
    for item in &spec.items {
        let began = Instant::now();
        match with_retries(&client, &dir, item, ingress, log, stop).await {
            Ok(n) => {
                let ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
                log.ended(item, TransferOutcome::Done { bytes: n, ms });
                total += n;
            }
            Err(e) => {
                let message = e.message.clone();
                log.ended(item, TransferOutcome::Failed { message });
                return Err(e);
            }
        }
    }
    Ok(format!(
        "{} transfer(s), {} in {:.2} s",
        spec.items.len(),
        human_size(total),
        started.elapsed().as_secs_f64()
    ))
}

fn volume_error(e: &std::io::Error, what: &str) -> String {
    if beneath::is_symlink_error(e) {
        format!(
            "{what}: a symlink is in the way in the volume: Gantry never follows symlinks in \
             volumes (a link means what it says only inside a container)"
        )
    } else {
        format!("{what}: {e}")
    }
}

async fn with_retries(
    client: &reqwest::Client,
    dir: &Dir,
    item: &TransferItem,
    ingress: bool,
    log: &dyn Log,
    stop: &StopSignal,
) -> Result<u64, TransferError> {
    let tries = item.attempts.max(1);
    let mut backoff = Duration::from_secs(1);
    let remote = if ingress {
        &item.source
    } else {
        &item.destination
    };
    for n in 1..=tries {
        let one = async {
            if ingress {
                ingress_one(client, dir, item, log).await
            } else {
                egress_one(dir, item, log).await
            }
        };
        let result = match item.timeout_ms {
            Some(ms) => {
                let limit = Duration::from_millis(ms);
                tokio::select! {
                    r = tokio::time::timeout(limit, one) => r.unwrap_or_else(|_| Err(TransferError {
                        code: EXIT_TIMEOUT,
                        message: format!(
                            "{remote}: timed out after {} (policy.timeout.execute)",
                            humantime(limit)
                        ),
                    })),
                    _ = stop.wait() => return Err(stopped(remote)),
                }
            }
            None => tokio::select! {
                r = one => r,
                _ = stop.wait() => return Err(stopped(remote)),
            },
        };
        match result {
            Ok(n) => return Ok(n),
            Err(e) if n < tries => {
                log.line(&format!(
                    "try {n} of {tries} failed: {}; again in {}",
                    e.message,
                    humantime(backoff)
                ));
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.wait() => return Err(stopped(remote)),
                }
                backoff = (backoff * 2).min(Duration::from_secs(60));
            }
            Err(e) if tries > 1 => {
                return Err(TransferError {
                    message: format!("{} (after {tries} tries)", e.message),
                    ..e
                })
            }
            Err(e) => return Err(e),
        }
    }
    unreachable!("the last try returns")
}

fn stopped(remote: &str) -> TransferError {
    TransferError {
        code: EXIT_STOPPED,
        message: format!("{remote}: stopped"),
    }
}

fn humantime(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// One try of one transfer into the volume. Returns the bytes written.
async fn ingress_one(
    client: &reqwest::Client,
    dir: &Dir,
    item: &TransferItem,
    log: &dyn Log,
) -> Result<u64, TransferError> {
    let dest = in_volume(&item.destination).map_err(TransferError::failed)?;
    let what = format!("{} -> {}", item.source, item.destination);
    let mut staged = dir
        .stage_file(&dest, Resolve::Beneath, Owner::ROOT)
        .map_err(|e| TransferError::failed(volume_error(&e, &item.destination)))?;
    let started = Instant::now();
    let written = if item.source.starts_with("file://") {
        let content = base64::engine::general_purpose::STANDARD
            .decode(item.content.as_deref().unwrap_or_default())
            .map_err(|e| TransferError::failed(format!("{}: {e}", item.source)))?;
        std::io::Write::write_all(staged.file(), &content)
            .map_err(|e| TransferError::failed(format!("{}: {e}", item.destination)))?;
        content.len() as u64
    } else if item.source.starts_with("http://") || item.source.starts_with("https://") {
        let file = staged
            .file()
            .try_clone()
            .map_err(|e| TransferError::failed(format!("{}: {e}", item.destination)))?;
        http_get(client, item, tokio::fs::File::from_std(file), &what, log).await?
    } else if item.source.starts_with("s3://") {
        let file = staged
            .file()
            .try_clone()
            .map_err(|e| TransferError::failed(format!("{}: {e}", item.destination)))?;
        s3_get(item, tokio::fs::File::from_std(file), &what, log).await?
    } else {
        return Err(TransferError::failed(format!(
            "{}: this agent cannot read that kind of source",
            item.source
        )));
    };
    staged
        .commit(0o644)
        .map_err(|e| TransferError::failed(volume_error(&e, &item.destination)))?;
    log.line(&moved(&what, written, started));
    Ok(written)
}

/// `WHAT: 3.0 MB in 0.12 s (25.0 MB/s)`: one transfer's end, for the log.
fn moved(what: &str, bytes: u64, started: Instant) -> String {
    let secs = started.elapsed().as_secs_f64();
    format!(
        "{what}: {} in {secs:.2} s ({}/s)",
        human_size(bytes),
        human_size(rate(bytes, secs))
    )
}

fn rate(bytes: u64, secs: f64) -> u64 {
    if secs > 0.0 {
        (bytes as f64 / secs) as u64
    } else {
        bytes
    }
}

async fn http_get(
    client: &reqwest::Client,
    item: &TransferItem,
    out: tokio::fs::File,
    what: &str,
    log: &dyn Log,
) -> Result<u64, TransferError> {
    let url = &item.source;
    let mut req = client.get(url);
    if let Some(TransferCredential::Http(h)) = &item.credential {
        let host = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_default();
        if !gantry_api::v1::trusted_host(&h.trusted_domains, &host) {
            return Err(TransferError::failed(format!(
                "{url}: its secret is trusted only for {}, not for {host}",
                h.trusted_domains.join(", ")
            )));
        }
        req = match (&h.username, &h.password, &h.token) {
            (_, _, Some(token)) => req.bearer_auth(token),
            (Some(u), p, None) => req.basic_auth(u, p.as_ref()),
            _ => req,
        };
    }
    let resp = req
        .send()
        .await
        .map_err(|e| TransferError::failed(format!("{url}: {}", error_chain(&e))))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(TransferError::failed(format!("{url}: HTTP {status}")));
    }
    let total = resp.content_length();
    stream_to_file(resp.bytes_stream(), out, item, total, what, log, |e| {
        error_chain(e)
    })
    .await
}

/// Writes a body to the staged file as it arrives, logging progress, and checks its length
/// against `total` (what the server announced).
async fn stream_to_file<S, E>(
    body: S,
    out: tokio::fs::File,
    item: &TransferItem,
    total: Option<u64>,
    what: &str,
    log: &dyn Log,
    why: impl Fn(&E) -> String,
) -> Result<u64, TransferError>
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, E>>,
{
    let url = &item.source;
    let mut body = std::pin::pin!(body);
    // Network chunks are small (16 kB and less); each write of a tokio file is a trip to its
    // blocking pool, so they are gathered into writes of a few MiB.
    let mut out = tokio::io::BufWriter::with_capacity(4 << 20, out);
    let mut done = 0u64;
    let started = Instant::now();
    let mut last = started;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| {
            TransferError::failed(format!(
                "{url}: the body broke off after {done} bytes: {}",
                why(&e)
            ))
        })?;
        out.write_all(&chunk)
            .await
            .map_err(|e| TransferError::failed(format!("{}: {e}", item.destination)))?;
        done += chunk.len() as u64;
        if total.is_some_and(|t| done > t) {
            return Err(TransferError::failed(format!(
                "{url}: more than the {} bytes announced",
                total.unwrap_or_default()
            )));
        }
        if last.elapsed() >= PROGRESS_EVERY {
            last = Instant::now();
            report(log, item, what, done, total, started);
        }
    }
    if let Some(t) = total {
        if done != t {
            return Err(TransferError::failed(format!(
                "{url}: got {done} of the {t} bytes announced"
            )));
        }
    }
    out.flush()
        .await
        .map_err(|e| TransferError::failed(format!("{}: {e}", item.destination)))?;
    Ok(done)
}

/// The S3 store and object a `s3://BUCKET/KEY` names, with the credentials of its secret.
fn s3_object(
    url: &str,
    cred: Option<&TransferCredential>,
) -> Result<(object_store::aws::AmazonS3, object_store::path::Path), TransferError> {
    let rest = url.strip_prefix("s3://").unwrap_or(url);
    let (bucket, key) = rest
        .split_once('/')
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
        .ok_or_else(|| TransferError::failed(format!("{url}: expected s3://BUCKET/KEY")))?;
    let Some(TransferCredential::S3(c)) = cred else {
        return Err(TransferError::failed(format!(
            "{url}: an s3:// transfer needs an s3 secret (`secret: secret://...`)"
        )));
    };
    let mut b = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_region(&c.region)
        .with_access_key_id(&c.access_key_id)
        .with_secret_access_key(&c.secret_access_key)
        .with_endpoint(c.endpoint.trim_end_matches('/'))
        // Path-style (`ENDPOINT/BUCKET/KEY`), which every S3-compatible server answers.
        .with_virtual_hosted_style_request(false)
        // Tries and deadlines are the transfer's policy's, not the library's; a whole-request
        // timeout would also cut off a large body that is still arriving.
        .with_retry(object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        })
        .with_client_options(
            object_store::ClientOptions::new()
                .with_allow_http(c.endpoint.starts_with("http://"))
                .with_timeout_disabled()
                .with_connect_timeout(Duration::from_secs(30)),
        );
    if let Some(t) = &c.session_token {
        b = b.with_token(t);
    }
    let store = b
        .build()
        .map_err(|e| TransferError::failed(format!("{url}: {e}")))?;
    let path = object_store::path::Path::parse(key)
        .map_err(|e| TransferError::failed(format!("{url}: {e}")))?;
    Ok((store, path))
}

/// An S3 failure in a user's terms: object_store's message (which carries the status and S3's
/// own error code and message) after the URL.
fn s3_error(url: &str, e: &object_store::Error) -> String {
    match e {
        object_store::Error::NotFound { .. } => format!("{url}: not found (NoSuchKey): {e}"),
        _ => format!("{url}: {e}"),
    }
}

async fn s3_get(
    item: &TransferItem,
    out: tokio::fs::File,
    what: &str,
    log: &dyn Log,
) -> Result<u64, TransferError> {
    use object_store::ObjectStoreExt;
    let url = &item.source;
    let (store, path) = s3_object(url, item.credential.as_ref())?;
    let got = store
        .get(&path)
        .await
        .map_err(|e| TransferError::failed(s3_error(url, &e)))?;
    let total = got.meta.size;
    stream_to_file(got.into_stream(), out, item, Some(total), what, log, |e| {
        e.to_string()
    })
    .await
}

/// Parts of a multipart upload: S3's smallest but the last is 5 MiB; 8 MiB with four in
/// flight keeps a 1 GiB upload at 32 MiB of memory.
const PART_SIZE: usize = 8 << 20;
const PARTS_IN_FLIGHT: usize = 4;

/// One try of one egress: a file of the volume uploaded to S3.
async fn egress_one(dir: &Dir, item: &TransferItem, log: &dyn Log) -> Result<u64, TransferError> {
    use object_store::ObjectStoreExt;
    use tokio::io::AsyncReadExt;
    let url = &item.destination;
    if !url.starts_with("s3://") {
        return Err(TransferError::failed(format!(
            "{url}: this agent uploads only to s3://"
        )));
    }
    let what = format!("{} -> {url}", item.source);
    let src = in_volume(&item.source).map_err(TransferError::failed)?;
    let file = dir
        .open_file(&src, Resolve::Beneath)
        .map_err(|e| TransferError::failed(volume_error(&e, &item.source)))?;
    let total = file
        .metadata()
        .map_err(|e| TransferError::failed(format!("{}: {e}", item.source)))?
        .len();
    let mut file = tokio::fs::File::from_std(file);
    let (store, path) = s3_object(url, item.credential.as_ref())?;
    let fail =
        |e: object_store::Error| TransferError::failed(format!("{url}: {}", error_chain(&e)));
    let upload = store.put_multipart(&path).await.map_err(fail)?;
    let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    let started = Instant::now();
    let mut last = started;
    loop {
        let n = file
            .read(&mut buf)
            .await
            .map_err(|e| TransferError::failed(format!("{}: {e}", item.source)))?;
        if n == 0 {
            break;
        }
        writer
            .wait_for_capacity(PARTS_IN_FLIGHT)
            .await
            .map_err(fail)?;
        writer.write(&buf[..n]);
        done += n as u64;
        if last.elapsed() >= PROGRESS_EVERY {
            last = Instant::now();
            report(log, item, &what, done, Some(total), started);
        }
    }
    if done != total {
        writer.abort().await.map_err(fail)?;
        return Err(TransferError::failed(format!(
            "{}: read {done} of its {total} bytes (it changed while it was uploaded)",
            item.source
        )));
    }
    writer.finish().await.map_err(fail)?;
    log.line(&moved(&what, done, started));
    Ok(done)
}

/// Progress to the log and to the server.
fn report(
    log: &dyn Log,
    item: &TransferItem,
    what: &str,
    done: u64,
    total: Option<u64>,
    started: Instant,
) {
    let secs = started.elapsed().as_secs_f64();
    log.line(&progress(what, done, total, secs));
    log.progress(
        item,
        TransferProgress {
            source: item.source.clone(),
            destination: item.destination.clone(),
            done_bytes: done,
            total_bytes: total,
            bytes_per_second: rate(done, secs),
        },
    );
}

/// `what: 12.3 MB / 100.0 MB (12 %), 45.6 MB/s`.
fn progress(what: &str, done: u64, total: Option<u64>, secs: f64) -> String {
    let of = match total {
        Some(t) if t > 0 => format!(" / {} ({} %)", human_size(t), done.saturating_mul(100) / t),
        _ => String::new(),
    };
    format!(
        "{what}: {}{of}, {}/s",
        human_size(done),
        human_size(rate(done, secs))
    )
}

/// An error with its sources, which is where reqwest says what happened (refused, timed out).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_paths_stay_below_the_volume() {
        assert_eq!(in_volume("file://a/b").unwrap().to_string(), "a/b");
        assert_eq!(in_volume("file:///a/b").unwrap().to_string(), "a/b");
        assert!(in_volume("file://../x").is_err());
        assert!(in_volume("file:///").is_err());
        assert!(in_volume("https://x/y").is_err());
    }

    #[test]
    fn progress_says_done_total_and_rate() {
        assert_eq!(
            progress("x", 50_000_000, Some(100_000_000), 2.0),
            "x: 50.0 MB / 100.0 MB (50 %), 25.0 MB/s"
        );
        assert_eq!(progress("x", 10, None, 1.0), "x: 10 B, 10 B/s");
    }
}
