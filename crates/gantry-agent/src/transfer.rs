//! Data transfers of a volume (`ingress:VOLUME`): an attempt whose assignment carries a
//! [`TransferSpec`] fetches each source into the volume, in order, on this node, so the data
//! lands on the pool's storage before any step that mounts the volume starts.
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
use gantry_api::agent::{TransferCredential, TransferItem, TransferSpec};
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
    if spec.direction != "ingress" {
        return Err(TransferError::failed(format!(
            "{} transfers are not supported by this agent",
            spec.direction
        )));
    }
    let volume = Rel::new(&spec.volume).map_err(|e| {
        TransferError::failed(format!("refusing volume path {:?}: {e}", spec.volume))
    })?;
    let root = Dir::open_root(storage_root).map_err(|e| {
        TransferError::failed(format!(
            "opening the storage root {}: {e}",
            storage_root.display()
        ))
    })?;
    let dir = root
        .create_dirs(&volume, Resolve::Beneath, 0o755, Owner::ROOT)
        .map_err(|e| TransferError::failed(volume_error(&e, "the volume's directory")))?;
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| TransferError::failed(format!("an HTTP client: {e}")))?;
    let started = Instant::now();
    let mut total = 0u64;
    for item in &spec.items {
        total += ingress_with_retries(&client, &dir, item, log, stop).await?;
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

async fn ingress_with_retries(
    client: &reqwest::Client,
    dir: &Dir,
    item: &TransferItem,
    log: &dyn Log,
    stop: &StopSignal,
) -> Result<u64, TransferError> {
    let tries = item.attempts.max(1);
    let mut backoff = Duration::from_secs(1);
    for n in 1..=tries {
        let one = ingress_one(client, dir, item, log);
        let result = match item.timeout_ms {
            Some(ms) => {
                let limit = Duration::from_millis(ms);
                tokio::select! {
                    r = tokio::time::timeout(limit, one) => r.unwrap_or_else(|_| Err(TransferError {
                        code: EXIT_TIMEOUT,
                        message: format!(
                            "{}: timed out after {} (policy.timeout.execute)",
                            item.source,
                            humantime(limit)
                        ),
                    })),
                    _ = stop.wait() => return Err(stopped(item)),
                }
            }
            None => tokio::select! {
                r = one => r,
                _ = stop.wait() => return Err(stopped(item)),
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
                    _ = stop.wait() => return Err(stopped(item)),
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

fn stopped(item: &TransferItem) -> TransferError {
    TransferError {
        code: EXIT_STOPPED,
        message: format!("{}: stopped", item.source),
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
    } else {
        return Err(TransferError::failed(format!(
            "{}: this agent cannot read that kind of source",
            item.source
        )));
    };
    staged
        .commit(0o644)
        .map_err(|e| TransferError::failed(volume_error(&e, &item.destination)))?;
    let secs = started.elapsed().as_secs_f64();
    log.line(&format!(
        "{what}: {} in {secs:.2} s ({}/s)",
        human_size(written),
        human_size(rate(written, secs))
    ));
    Ok(written)
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
    mut out: tokio::fs::File,
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
    let mut body = resp.bytes_stream();
    let mut done = 0u64;
    let started = Instant::now();
    let mut last = started;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| {
            TransferError::failed(format!(
                "{url}: the body broke off after {done} bytes: {}",
                error_chain(&e)
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
            log.line(&progress(
                what,
                done,
                total,
                started.elapsed().as_secs_f64(),
            ));
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
