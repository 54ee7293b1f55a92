//! Jobs' output: a page of one stream of an attempt, or the stream as it is written. The
//! files themselves are the area's (`crate::logs`); the API's handler puts what this returns
//! into headers (`x-gantry-attempt`, `x-gantry-next-offset`), the web UI into its pages.

use std::pin::Pin;
use std::time::Duration;

use futures_util::Stream;
use serde::Deserialize;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::logs::{path, read_range};
use crate::state::AppState;

/// What was read of a log.
pub struct LogRead {
    /// The attempt's number; 0 when the task never ran (a build the cache held).
    pub attempt: u32,
    /// Where the next page starts; `None` when following.
    pub next_offset: Option<u64>,
    pub body: LogBody,
}

pub enum LogBody {
    Page(Vec<u8>),
    /// Chunks as the attempt writes them; it ends when the attempt has ended and all of its
    /// output was sent.
    Follow(Chunks),
}

impl LogBody {
    /// A page's bytes. A read without `follow` is always a page; a followed one gives none.
    pub fn into_page(self) -> Vec<u8> {
        match self {
            LogBody::Page(bytes) => bytes,
            LogBody::Follow(_) => vec![],
        }
    }

    /// The body as chunks, a page as its one chunk.
    pub fn into_chunks(self) -> Chunks {
        match self {
            LogBody::Follow(chunks) => chunks,
            LogBody::Page(bytes) => Box::pin(futures_util::stream::iter([Ok(bytes)])),
        }
    }
}

/// A followed log's chunks.
pub type Chunks = Pin<Box<dyn Stream<Item = std::io::Result<Vec<u8>>> + Send>>;

#[derive(Deserialize, Default)]
pub struct LogQuery {
    /// Task-array index.
    #[serde(default)]
    pub task: Option<u32>,
    /// Attempt number; the latest by default.
    #[serde(default)]
    pub attempt: Option<u32>,
    #[serde(default)]
    pub stream: Option<String>,
    #[serde(default)]
    pub offset: u64,
    #[serde(default)]
    pub follow: bool,
    /// At most this many bytes without `follow` (at most [`READ_LIMIT`]): a page.
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Largest reply without `follow`; the `x-gantry-next-offset` header says where to go on.
const READ_LIMIT: u64 = 8 << 20;

/// A task array's indexes as a reader types them: `1-8` when they run without a gap (as
/// `task-array` makes them), else each one.
fn index_range(indexes: Option<&std::ops::RangeInclusive<u32>>) -> String {
    match indexes {
        Some(r) if r.start() == r.end() => format!("index {}", r.start()),
        Some(r) => format!("indexes {}-{}", r.start(), r.end()),
        None => "none with an index".into(),
    }
}

/// One stream of a job's task's attempt (the latest unless `q.attempt`): a page of it from
/// `q.offset`, or with `q.follow` what it writes as it writes it, until its attempt ends.
pub async fn read(
    st: &AppState,
    c: &Caller,
    id: &str,
    job: &str,
    q: &LogQuery,
) -> Result<LogRead, ApiError> {
    let wf = crate::services::workflows::visible_workflow(st, c, id).await?;
    let stream = match q.stream.as_deref().unwrap_or("stdout") {
        s @ ("stdout" | "stderr") => s.to_string(),
        other => {
            return Err(ApiError::BadRequest(format!(
                "stream must be stdout or stderr, not {other:?}"
            )))
        }
    };
    // The job and its indexes from the plan; the task's row alone from the store (a big
    // array's member may not have one yet: it waits).
    let plan = st
        .cache
        .plan(&wf)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let Some(jp) = plan.job(job) else {
        let jobs: Vec<&str> = plan.jobs.iter().map(|j| j.name.as_str()).collect();
        return Err(ApiError::NotFound(format!(
            "workflow {} has no job {job:?}; its jobs: {}",
            wf.id,
            jobs.join(", ")
        )));
    };
    let indexes = jp.task_indexes();
    let index = match (q.task, &indexes) {
        (Some(i), Some(r)) if r.contains(&i) => Some(i),
        (Some(i), _) => {
            return Err(ApiError::NotFound(format!(
                "job {job} has no task {i}; its tasks: {}",
                index_range(indexes.as_ref())
            )))
        }
        (None, Some(r)) if r.start() != r.end() => {
            return Err(ApiError::BadRequest(format!(
                "job {job} is a task array of {} tasks ({}): say which with --task N",
                u64::from(r.end() - r.start()) + 1,
                index_range(indexes.as_ref())
            )))
        }
        (None, Some(r)) => Some(*r.start()),
        (None, None) => None,
    };
    let task_id = loop {
        let row = st.store.job_tasks(wf.id, job, index, 1).await?;
        match row.into_iter().find(|t| t.index == index) {
            Some(t) => break t.id,
            // Not born yet: a follower waits, as for a task that has not started, until the
            // workflow ends (a stop ends a range of them without rows).
            None => {
                if !q.follow || st.store.workflow(wf.id).await?.status.is_terminal() {
                    return Ok(LogRead {
                        attempt: 0,
                        next_offset: Some(0),
                        body: LogBody::Page(vec![]),
                    });
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // A follower of a task that has not started yet waits for its first attempt.
    let attempt = loop {
        let attempts = st.store.attempts_of(&[task_id]).await?;
        let found = attempts
            .iter()
            .filter(|a| q.attempt.is_none_or(|n| a.number == n))
            .max_by_key(|a| a.number)
            .cloned();
        if let Some(a) = found {
            break a;
        }
        if q.attempt.is_some() {
            return Err(ApiError::NotFound(format!("job {job} has no such attempt")));
        }
        let now = st.store.task(task_id).await?;
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
            return Ok(LogRead {
                attempt: 0,
                next_offset: Some(body.len() as u64),
                body: LogBody::Page(body.into_bytes()),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let file = path(st.config.files_dir(), attempt.id, &stream);
    if !q.follow {
        let offset = q.offset;
        let limit = q.limit.unwrap_or(READ_LIMIT).min(READ_LIMIT);
        let (bytes, next) = tokio::task::spawn_blocking(move || read_range(&file, offset, limit))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        return Ok(LogRead {
            attempt: attempt.number,
            next_offset: Some(next),
            body: LogBody::Page(bytes),
        });
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
    Ok(LogRead {
        attempt: attempt.number,
        next_offset: None,
        body: LogBody::Follow(Box::pin(body)),
    })
}
