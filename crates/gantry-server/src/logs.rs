//! Container output. Agents ship chunks placed by byte offset (a resend is harmless); the server
//! keeps each attempt's stdout and stderr as files under `<data>/logs/<attempt>/` and records
//! the durable length in the store.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::Response;
use base64::Engine;
use gantry_api::agent::{LogChunk, Stream};
use serde::Deserialize;
use uuid::Uuid;

use crate::auth::UserCaller;
use crate::error::ApiError;
use crate::state::AppState;

fn stream_name(s: Stream) -> &'static str {
    match s {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

fn path(st: &AppState, attempt: Uuid, stream: &str) -> PathBuf {
    st.config
        .data_dir
        .join("logs")
        .join(attempt.to_string())
        .join(stream)
}

fn len_of(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Stores a chunk; returns the durable lengths of (stdout, stderr) to acknowledge.
pub async fn append(st: &AppState, chunk: &LogChunk) -> anyhow::Result<(u64, u64)> {
    let data = base64::engine::general_purpose::STANDARD.decode(&chunk.data)?;
    let name = stream_name(chunk.stream);
    let file = path(st, chunk.attempt_id, name);
    let offset = chunk.offset;
    let written = tokio::task::spawn_blocking(move || -> std::io::Result<Option<u64>> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Some(dir) = file.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(crate::private::DIR_MODE)
                .create(dir)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(crate::private::FILE_MODE)
            .open(&file)?;
        let len = f.metadata()?.len();
        let end = offset + data.len() as u64;
        // A gap means chunks were lost in between: take nothing, the ack makes the agent resend.
        if offset > len || end <= len {
            return Ok(None);
        }
        f.write_all(&data[(len - offset) as usize..])?;
        f.sync_data()?;
        Ok(Some(end))
    })
    .await??;
    if let Some(end) = written {
        st.store.set_log_size(chunk.attempt_id, name, end).await?;
    }
    Ok((
        len_of(&path(st, chunk.attempt_id, "stdout")),
        len_of(&path(st, chunk.attempt_id, "stderr")),
    ))
}

#[derive(Deserialize, Default)]
pub struct LogQuery {
    /// Task-array index.
    #[serde(default)]
    pub(crate) task: Option<u32>,
    /// Attempt number; the latest by default.
    #[serde(default)]
    pub(crate) attempt: Option<u32>,
    #[serde(default)]
    pub(crate) stream: Option<String>,
    #[serde(default)]
    pub(crate) offset: u64,
    #[serde(default)]
    pub(crate) follow: bool,
    /// At most this many bytes without `follow` (at most [`READ_LIMIT`]): a page.
    #[serde(default)]
    pub(crate) limit: Option<u64>,
}

/// Largest reply without `follow`; the `x-gantry-next-offset` header says where to go on.
const READ_LIMIT: u64 = 8 << 20;

/// A task array's indexes as a reader types them: `1-8` when they run without a gap (as
/// `task-array` makes them), else each one.
fn index_range(tasks: &[&gantry_store::TaskRow]) -> String {
    let mut idx: Vec<u32> = tasks.iter().filter_map(|t| t.index).collect();
    idx.sort_unstable();
    match (idx.first(), idx.last()) {
        (Some(a), Some(b)) if (b - a) as usize + 1 == idx.len() && idx.len() > 1 => {
            format!("indexes {a}-{b}")
        }
        (Some(_), _) => format!(
            "indexes {}",
            idx.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => "none with an index".into(),
    }
}

pub async fn read(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path((id, job)): Path<(String, String)>,
    Query(q): Query<LogQuery>,
) -> Result<Response, ApiError> {
    let wf = crate::services::workflows::visible_workflow(&st, &c, &id).await?;
    let stream = match q.stream.as_deref().unwrap_or("stdout") {
        s @ ("stdout" | "stderr") => s.to_string(),
        other => {
            return Err(ApiError::BadRequest(format!(
                "stream must be stdout or stderr, not {other:?}"
            )))
        }
    };
    let tasks = st.store.tasks(wf.id).await?;
    let of_job: Vec<_> = tasks.iter().filter(|t| t.job == job).collect();
    if of_job.is_empty() {
        let jobs: std::collections::BTreeSet<&str> = tasks.iter().map(|t| t.job.as_str()).collect();
        return Err(ApiError::NotFound(format!(
            "workflow {} has no job {job:?}; its jobs: {}",
            wf.id,
            jobs.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    let task = match q.task {
        Some(i) => of_job.iter().find(|t| t.index == Some(i)).ok_or_else(|| {
            ApiError::NotFound(format!(
                "job {job} has no task {i}; its tasks: {}",
                index_range(&of_job)
            ))
        })?,
        None if of_job.len() == 1 => of_job[0],
        None => {
            return Err(ApiError::BadRequest(format!(
                "job {job} is a task array of {} tasks ({}): say which with --task N",
                of_job.len(),
                index_range(&of_job)
            )))
        }
    };
    // A follower of a task that has not started yet waits for its first attempt.
    let attempt = loop {
        let attempts = st.store.attempts(wf.id).await?;
        let found = attempts
            .iter()
            .filter(|a| a.task_id == task.id)
            .filter(|a| q.attempt.is_none_or(|n| a.number == n))
            .max_by_key(|a| a.number)
            .cloned();
        if let Some(a) = found {
            break a;
        }
        if q.attempt.is_some() {
            return Err(ApiError::NotFound(format!("job {job} has no such attempt")));
        }
        let now = st.store.task(task.id).await?;
        if !q.follow || now.status.is_terminal() {
            // A build the object cache already held never ran: its log says so (the reason
            // the submit gave it) rather than nothing.
            let body = match now.reason.as_deref() {
                Some(r)
                    if r.starts_with(crate::builds::CACHE_HIT)
                        && stream == "stdout"
                        && q.offset == 0 =>
                {
                    format!("{r}\n")
                }
                _ => String::new(),
            };
            return Response::builder()
                .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .header("x-gantry-next-offset", body.len().to_string())
                .header("x-gantry-attempt", "0")
                .body(Body::from(body))
                .map_err(|e| ApiError::Internal(e.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let file = path(&st, attempt.id, &stream);
    if !q.follow {
        let offset = q.offset;
        let limit = q.limit.unwrap_or(READ_LIMIT).min(READ_LIMIT);
        let (bytes, next) = tokio::task::spawn_blocking(move || read_range(&file, offset, limit))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        return Response::builder()
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .header("x-gantry-next-offset", next.to_string())
            .header("x-gantry-attempt", attempt.number.to_string())
            .body(Body::from(bytes))
            .map_err(|e| ApiError::Internal(e.to_string()));
    }
    let store = st.store.clone();
    let attempt_id = attempt.id;
    let body = futures_util::stream::unfold((q.offset, false), move |(offset, done)| {
        let file = file.clone();
        let store = store.clone();
        async move {
            if done {
                return None;
            }
            loop {
                // Read the end state before the bytes: once ended, the file is complete.
                let ended = store
                    .attempt(attempt_id)
                    .await
                    .map(|a| a.ended_at.is_some())
                    .unwrap_or(true);
                let f = file.clone();
                let got = tokio::task::spawn_blocking(move || read_range(&f, offset, 1 << 20))
                    .await
                    .ok()
                    .and_then(|r| r.ok());
                match got {
                    Some((bytes, next)) if !bytes.is_empty() => {
                        return Some((Ok::<_, std::io::Error>(bytes), (next, false)))
                    }
                    _ if ended => return None,
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header("x-gantry-attempt", attempt.number.to_string())
        .body(Body::from_stream(body))
        .map_err(|e| ApiError::Internal(e.to_string()))
}

fn read_range(file: &std::path::Path, offset: u64, limit: u64) -> std::io::Result<(Vec<u8>, u64)> {
    let mut f = match std::fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((vec![], offset)),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    if offset >= len {
        return Ok((vec![], offset));
    }
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    f.take(limit.min(len - offset)).read_to_end(&mut buf)?;
    let next = offset + buf.len() as u64;
    Ok((buf, next))
}

/// The last non-empty line an attempt wrote to a stream (up to 4 KiB back): a failed build's
/// own explanation, for its events.
pub fn last_line(st: &AppState, attempt: Uuid, stream: &str) -> Option<String> {
    let file = path(st, attempt, stream);
    let len = len_of(&file);
    let (bytes, _) = read_range(&file, len.saturating_sub(4096), 4096).ok()?;
    String::from_utf8_lossy(&bytes)
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.chars().take(300).collect())
}
