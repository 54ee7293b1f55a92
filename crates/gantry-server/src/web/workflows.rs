//! Workflows: the list with filters, a workflow's page (job graph, tasks, events, stop), its
//! live updates and logs as Server-Sent Events.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use futures_util::{Stream, StreamExt};
use gantry_api::v1::{Event, TaskInfo, WorkflowDetail, WorkflowSummary};
use gantry_api::TaskStatus;
use serde::{Deserialize, Serialize};

use super::session::{Nothing, Web, WebForm};
use super::{ok_page, segment, short, when, Ctx, Done, WebError, When};
use crate::caller::Caller;
use crate::plan::WorkflowPlan;
use crate::services::logs::{self, LogQuery};
use crate::services::workflows as svc;
use crate::state::AppState;

/// How often a live page looks for news. The store has no change feed; a quiet poll is one
/// read of the workflow's events (with the API's visibility check).
const POLL: Duration = Duration::from_millis(500);
/// The log page shows this much at once; the live stream brings the rest.
const LOG_PAGE: u64 = 1 << 20;

pub struct WfRow {
    pub id: String,
    pub short: String,
    pub name: String,
    pub owner: String,
    pub group: String,
    pub status: String,
    pub counts: String,
    pub created: When,
}

fn counts(s: &WorkflowSummary) -> String {
    s.counts
        .iter()
        .map(|(st, n)| format!("{n} {}", st.as_str().to_lowercase()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(askama::Template)]
#[template(path = "web/workflows.html")]
struct ListPage {
    ctx: Ctx,
    rows: Vec<WfRow>,
    total: usize,
    status: String,
    q: String,
    statuses: Vec<&'static str>,
}

#[derive(Deserialize)]
pub struct ListFilter {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    q: Option<String>,
}

pub async fn list(
    State(st): State<AppState>,
    web: Web,
    Query(f): Query<ListFilter>,
) -> Result<Response, WebError> {
    let status = f.status.unwrap_or_default();
    let q = f.q.unwrap_or_default();
    let all = svc::list(
        &st,
        &web.caller,
        (!status.is_empty()).then_some(status.as_str()),
    )
    .await?;
    let total = all.len();
    let needle = q.trim().to_lowercase();
    let mut found: Vec<WorkflowSummary> = all
        .into_iter()
        .filter(|w| {
            needle.is_empty()
                || w.name.to_lowercase().contains(&needle)
                || w.owner.to_lowercase().contains(&needle)
                || w.id.to_string().starts_with(&needle)
        })
        .collect();
    found.sort_by_key(|w| std::cmp::Reverse(w.created_at));
    let rows = found
        .iter()
        .map(|w| WfRow {
            id: w.id.to_string(),
            short: short(&w.id),
            name: w.name.clone(),
            owner: w.owner.clone(),
            group: w.group.clone(),
            status: w.status.to_string(),
            counts: counts(w),
            created: when(w.created_at),
        })
        .collect();
    Ok(ok_page(&ListPage {
        ctx: web.ctx("workflows"),
        rows,
        total,
        status,
        q,
        statuses: gantry_api::WorkflowStatus::ALL
            .iter()
            .map(|s| s.as_str())
            .collect(),
    }))
}

/// A job's status from its tasks' (a task array has many).
fn job_status(tasks: &[&TaskInfo]) -> TaskStatus {
    use TaskStatus::*;
    let any = |s: TaskStatus| tasks.iter().any(|t| t.status == s);
    if tasks.is_empty() {
        Pending
    } else if tasks.iter().all(|t| t.status == tasks[0].status) {
        tasks[0].status
    } else if any(Running) {
        Running
    } else if any(Started) {
        Started
    } else if any(Pending) {
        Pending
    } else if any(Failed) {
        Failed
    } else {
        Stopped
    }
}

/// One job's line in a live status update, and its box in the graph.
#[derive(Serialize, PartialEq)]
pub struct JobView {
    pub name: String,
    pub status: String,
    /// "3/4 finished" for task arrays; empty for single tasks.
    pub progress: String,
}

fn jobs(order: &[String], tasks: &[TaskInfo]) -> Vec<JobView> {
    order
        .iter()
        .map(|name| {
            let of: Vec<&TaskInfo> = tasks.iter().filter(|t| &t.job == name).collect();
            let done = of
                .iter()
                .filter(|t| t.status == TaskStatus::Finished)
                .count();
            JobView {
                name: name.clone(),
                status: job_status(&of).to_string(),
                progress: if of.len() > 1 {
                    format!("{done}/{} finished", of.len())
                } else {
                    String::new()
                },
            }
        })
        .collect()
}

pub struct GraphNode {
    pub job: JobView,
    pub label: String,
    pub x: u32,
    pub y: u32,
}

pub struct GraphEdge {
    pub path: String,
    /// The dependency waits for a service to be RUNNING, not for a step to finish.
    pub running: bool,
}

pub struct Graph {
    pub width: u32,
    pub height: u32,
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<GraphEdge>,
    pub summary: String,
}

const BOX_W: u32 = 200;
const BOX_H: u32 = 52;
const GAP_X: u32 = 56;
const GAP_Y: u32 = 16;
const PAD: u32 = 4;

/// Lays the job graph out in columns by depth (the longest chain of dependencies before a job).
fn graph(plan: &WorkflowPlan, views: Vec<JobView>) -> Graph {
    let mut depth: BTreeMap<&str, u32> = BTreeMap::new();
    // Jobs are few and acyclic (validated at submit): relax until nothing changes.
    for _ in 0..=plan.jobs.len() {
        let mut changed = false;
        for j in &plan.jobs {
            let d = j
                .depends_on
                .iter()
                .filter_map(|dep| depth.get(dep.name.as_str()).map(|d| d + 1))
                .max()
                .unwrap_or(0);
            if depth.insert(&j.name, d) != Some(d) {
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut rows_in: BTreeMap<u32, u32> = BTreeMap::new();
    let mut pos: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for j in &plan.jobs {
        let col = depth.get(j.name.as_str()).copied().unwrap_or(0);
        let row = rows_in.entry(col).or_default();
        pos.insert(
            &j.name,
            (PAD + col * (BOX_W + GAP_X), PAD + *row * (BOX_H + GAP_Y)),
        );
        *row += 1;
    }
    let cols = rows_in.len() as u32;
    let rows = rows_in.values().copied().max().unwrap_or(0);
    let mut edges = vec![];
    for j in &plan.jobs {
        let Some(&(x2, y2)) = pos.get(j.name.as_str()) else {
            continue;
        };
        for dep in &j.depends_on {
            if let Some(&(x1, y1)) = pos.get(dep.name.as_str()) {
                let (sx, sy, ex, ey) = (x1 + BOX_W, y1 + BOX_H / 2, x2, y2 + BOX_H / 2);
                let mid = (sx + ex) / 2;
                edges.push(GraphEdge {
                    path: format!("M{sx},{sy} C{mid},{sy} {mid},{ey} {ex},{ey}"),
                    running: dep.running,
                });
            }
        }
    }
    let summary = views
        .iter()
        .map(|v| format!("{} {}", v.name, v.status))
        .collect::<Vec<_>>()
        .join(", ");
    let nodes = views
        .into_iter()
        .filter_map(|job| {
            let &(x, y) = pos.get(job.name.as_str())?;
            let label = if job.name.chars().count() > 24 {
                format!("{}…", job.name.chars().take(23).collect::<String>())
            } else {
                job.name.clone()
            };
            Some(GraphNode { job, label, x, y })
        })
        .collect();
    Graph {
        width: cols.max(1) * (BOX_W + GAP_X) - GAP_X + 2 * PAD,
        height: rows.max(1) * (BOX_H + GAP_Y) - GAP_Y + 2 * PAD,
        nodes,
        edges,
        summary,
    }
}

/// A task's line on the page: its cells, which a live status update replaces, and its log.
struct TaskRow {
    label: String,
    log: String,
    cells: TaskSnap,
}

fn task_label(t: &TaskInfo) -> String {
    crate::plan::task_label(&t.job, t.index)
}

fn log_url(wf: &str, t: &TaskInfo) -> String {
    let task = t.index.map(|i| format!("?task={i}")).unwrap_or_default();
    format!("/workflows/{wf}/logs/{}{task}", segment(&t.job))
}

pub struct EventRow {
    pub time: When,
    pub clock: String,
    pub kind: String,
    pub task: String,
    pub message: String,
}

fn event_row(e: &Event) -> EventRow {
    let time = when(e.time);
    EventRow {
        clock: time.iso.get(11..19).unwrap_or_default().to_string(),
        time,
        kind: e.kind.clone(),
        task: e.task.clone().unwrap_or_default(),
        message: e.message.clone(),
    }
}

#[derive(askama::Template)]
#[template(path = "web/workflow.html")]
struct ShowPage {
    ctx: Ctx,
    id: String,
    name: String,
    owner: String,
    group: String,
    status: String,
    reason: String,
    created: When,
    ended: Option<When>,
    terminal: bool,
    graph: Graph,
    tasks: Vec<TaskRow>,
    events: Vec<EventRow>,
    last_seq: i64,
}

/// The workflow's full id and its plan (the job graph), when the caller may see it.
async fn plan_of(st: &AppState, c: &Caller, id: &str) -> Result<(String, WorkflowPlan), WebError> {
    let row = svc::visible_workflow(st, c, id).await?;
    let plan: WorkflowPlan = serde_json::from_str(&row.plan).unwrap_or(WorkflowPlan {
        jobs: vec![],
        builds: vec![],
        persistent: Default::default(),
    });
    Ok((row.id.to_string(), plan))
}

async fn detail_of(
    st: &AppState,
    c: &Caller,
    id: &str,
) -> Result<(WorkflowDetail, WorkflowPlan), WebError> {
    let (id, plan) = plan_of(st, c, id).await?;
    Ok((detail(st, c, &id).await?, plan))
}

/// The API's view of a workflow, without its plan.
async fn detail(st: &AppState, c: &Caller, id: &str) -> Result<WorkflowDetail, WebError> {
    Ok(svc::detail(st, c, id, &svc::TaskQuery::default()).await?)
}

async fn events_after(
    st: &AppState,
    c: &Caller,
    id: &str,
    after: i64,
) -> Result<Vec<Event>, WebError> {
    Ok(svc::events(st, c, id, after).await?)
}

pub async fn show(
    State(st): State<AppState>,
    web: Web,
    Path(id): Path<String>,
    Query(done): Query<Done>,
) -> Result<Response, WebError> {
    let (d, plan) = detail_of(&st, &web.caller, &id).await?;
    let s = &d.summary;
    let wf = s.id.to_string();
    let events = events_after(&st, &web.caller, &wf, 0).await?;
    let order: Vec<String> = plan.jobs.iter().map(|j| j.name.clone()).collect();
    let graph = graph(&plan, jobs(&order, &d.tasks));
    let tasks = d
        .tasks
        .iter()
        .map(|t| TaskRow {
            label: task_label(t),
            log: log_url(&wf, t),
            cells: task_snap(t),
        })
        .collect();
    Ok(ok_page(&ShowPage {
        ctx: web.ctx("workflows").with_notice(done.done()),
        name: s.name.clone(),
        owner: s.owner.clone(),
        group: s.group.clone(),
        status: s.status.to_string(),
        reason: s.reason.clone().unwrap_or_default(),
        created: when(s.created_at),
        ended: s.ended_at.map(when),
        terminal: s.status.is_terminal(),
        graph,
        tasks,
        last_seq: events.last().map(|e| e.seq).unwrap_or(0),
        events: events.iter().map(event_row).collect(),
        id: wf,
    }))
}

/// What a live page updates in place: the workflow's status, each job's and each task's.
#[derive(Serialize, PartialEq)]
struct Snapshot {
    status: String,
    reason: String,
    terminal: bool,
    jobs: Vec<JobView>,
    tasks: Vec<TaskSnap>,
}

#[derive(Serialize, PartialEq)]
struct TaskSnap {
    id: String,
    status: String,
    node: String,
    attempts: usize,
    exit_code: String,
    reason: String,
}

fn snapshot(d: &WorkflowDetail, order: &[String]) -> Snapshot {
    Snapshot {
        status: d.summary.status.to_string(),
        reason: d.summary.reason.clone().unwrap_or_default(),
        terminal: d.summary.status.is_terminal(),
        jobs: jobs(order, &d.tasks),
        tasks: d.tasks.iter().map(task_snap).collect(),
    }
}

fn task_snap(t: &TaskInfo) -> TaskSnap {
    TaskSnap {
        id: t.id.to_string(),
        status: t.status.to_string(),
        node: t.node.clone().unwrap_or_default(),
        attempts: t.attempts.len(),
        exit_code: t.exit_code.map(|c| c.to_string()).unwrap_or_default(),
        // A running transfer shows where it is; its reason is empty meanwhile.
        reason: match &t.progress {
            Some(p) => p.to_string(),
            None => t.reason.clone().unwrap_or_default(),
        },
    }
}

#[derive(Serialize)]
struct EventJson {
    seq: i64,
    time: String,
    clock: String,
    kind: String,
    task: String,
    message: String,
}

#[derive(Deserialize)]
pub struct After {
    #[serde(default)]
    after: i64,
}

/// `Last-Event-ID`, which a browser sends when it reconnects an event stream.
fn last_event_id(headers: &HeaderMap) -> Option<i64> {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

fn end_event() -> SseEvent {
    SseEvent::default().event("end").data("end")
}

type Events = Vec<SseEvent>;

fn sse(
    stream: impl Stream<Item = Events> + Send + 'static,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    Sse::new(stream.flat_map(|batch| futures_util::stream::iter(batch.into_iter().map(Ok))))
        .keep_alive(KeepAlive::default())
}

/// The workflow's new events and status changes, until it has ended.
pub async fn live(
    State(st): State<AppState>,
    web: Web,
    Path(id): Path<String>,
    Query(q): Query<After>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, WebError> {
    let (id, plan) = plan_of(&st, &web.caller, &id).await?;
    let order: Vec<String> = plan.jobs.iter().map(|j| j.name.clone()).collect();
    struct Live {
        st: AppState,
        caller: Caller,
        id: String,
        order: Vec<String>,
        after: i64,
        last: Option<Snapshot>,
        done: bool,
    }
    let start = Live {
        st,
        caller: web.caller,
        id,
        order,
        after: last_event_id(&headers).unwrap_or(q.after),
        last: None,
        done: false,
    };
    let stream = futures_util::stream::unfold(start, |mut s| async move {
        if s.done {
            return None;
        }
        loop {
            let mut out = vec![];
            // Every change of the workflow or its tasks commits with an event, so the status
            // is read again only after news (and at the start): a quiet poll is one read of
            // events. It ends once a status read before an empty read of events said ended:
            // no event of the run is missed.
            let was_ended = s.last.as_ref().is_some_and(|l| l.terminal);
            let read = async {
                let events = events_after(&s.st, &s.caller, &s.id, s.after).await?;
                let detail = if s.last.is_none() || !events.is_empty() {
                    Some(detail(&s.st, &s.caller, &s.id).await?)
                } else {
                    None
                };
                Ok::<_, WebError>((events, detail))
            }
            .await;
            let Ok((events, detail)) = read else {
                // Gone, or no longer visible: say so once and stop.
                s.done = true;
                return Some((vec![end_event()], s));
            };
            for e in &events {
                s.after = e.seq;
                let r = event_row(e);
                let json = EventJson {
                    seq: e.seq,
                    time: r.time.iso,
                    clock: r.clock,
                    kind: r.kind,
                    task: r.task,
                    message: r.message,
                };
                if let Ok(ev) = SseEvent::default()
                    .event("event")
                    .id(e.seq.to_string())
                    .json_data(json)
                {
                    out.push(ev);
                }
            }
            if let Some(snap) = detail.map(|d| snapshot(&d, &s.order)) {
                if s.last.as_ref() != Some(&snap) {
                    if let Ok(ev) = SseEvent::default().event("status").json_data(&snap) {
                        out.push(ev);
                    }
                    s.last = Some(snap);
                }
            }
            if was_ended && events.is_empty() {
                out.push(end_event());
                s.done = true;
            }
            if !out.is_empty() {
                return Some((out, s));
            }
            tokio::time::sleep(POLL).await;
        }
    });
    Ok(sse(stream))
}

#[derive(askama::Template)]
#[template(path = "web/stop.html")]
struct StopPage {
    ctx: Ctx,
    id: String,
    name: String,
    status: String,
    terminal: bool,
    /// "2 running, 1 pending": what the stop ends.
    unfinished: String,
    /// Endpoints this workflow serves: they lose their backend.
    endpoints: Vec<String>,
}

/// The confirmation before a stop: what will stop, and the endpoints that lose their backend.
/// A page, not a script's dialog, so it works without JavaScript; a GET changes nothing.
pub async fn stop_confirm(
    State(st): State<AppState>,
    web: Web,
    Path(id): Path<String>,
) -> Result<Response, WebError> {
    let d = detail(&st, &web.caller, &id).await?;
    let s = &d.summary;
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for t in d.tasks.iter().filter(|t| !t.status.is_terminal()) {
        *by.entry(t.status.as_str().to_lowercase()).or_default() += 1;
    }
    // The endpoints the caller can see, by the API's own rule (as `workflow stop` asks them).
    let all = crate::services::endpoints::list(&st, &web.caller).await?;
    let endpoints = all
        .into_iter()
        .filter(|e| e.workflow_id == Some(s.id))
        .map(|e| e.name)
        .collect();
    Ok(ok_page(&StopPage {
        ctx: web.ctx("workflows"),
        id: s.id.to_string(),
        name: s.name.clone(),
        status: s.status.to_string(),
        terminal: s.status.is_terminal(),
        unfinished: by
            .iter()
            .map(|(st, n)| format!("{n} {st}"))
            .collect::<Vec<_>>()
            .join(", "),
        endpoints,
    }))
}

pub async fn stop(
    State(st): State<AppState>,
    Path(id): Path<String>,
    WebForm { web, .. }: WebForm<Nothing>,
) -> Result<Response, WebError> {
    let s = svc::stop(&st, &web.caller, &id).await?;
    Ok(Redirect::to(&format!("/workflows/{}?done=stop", s.id)).into_response())
}

/// Takes the complete UTF-8 characters from `carry` (a character may be split between two
/// reads); returns them and how many bytes they were.
fn take_utf8(carry: &mut Vec<u8>) -> (String, usize) {
    let n = match std::str::from_utf8(carry) {
        Ok(_) => carry.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        // Not UTF-8 at all: show it as best we can.
        Err(_) => carry.len(),
    };
    let text = String::from_utf8_lossy(&carry[..n]).into_owned();
    carry.drain(..n);
    (text, n)
}

/// The stream a log page shows: stdout unless stderr is asked for.
fn stream_of(q: &LogQuery) -> &'static str {
    match q.stream.as_deref() {
        Some("stderr") => "stderr",
        _ => "stdout",
    }
}

/// The query string of a log page, or of its live stream (with an offset).
fn log_link(task: Option<u32>, attempt: Option<u32>, stream: &str, offset: Option<u64>) -> String {
    let mut q: Vec<(&str, String)> = vec![];
    let mut add = |k, v: Option<String>| {
        if let Some(v) = v {
            q.push((k, v));
        }
    };
    add("offset", offset.map(|o| o.to_string()));
    add("task", task.map(|t| t.to_string()));
    add("attempt", attempt.map(|a| a.to_string()));
    add("stream", Some(stream.to_string()));
    serde_urlencoded::to_string(q).unwrap_or_default()
}

pub struct AttemptLink {
    pub number: u32,
    pub url: String,
    pub current: bool,
}

/// One stream shown on a log page, with its live continuation and its download.
pub struct Pane {
    pub stream: &'static str,
    pub text: String,
    pub live_url: String,
    pub download_url: String,
}

pub struct ViewLink {
    pub name: &'static str,
    pub url: String,
    pub current: bool,
}

#[derive(askama::Template)]
#[template(path = "web/log.html")]
struct LogPage {
    ctx: Ctx,
    id: String,
    name: String,
    label: String,
    view: &'static str,
    /// The view was chosen for the reader: the task failed, its error is on stderr.
    failed_default: bool,
    views: Vec<ViewLink>,
    attempts: Vec<AttemptLink>,
    attempt: u32,
    panes: Vec<Pane>,
    ended: bool,
}

/// What a log page shows: one stream or both. Without a choice, stdout, but stderr for a
/// task that failed: its error is there. The store keeps each stream as a file of bytes with
/// no time per line, so "both" shows them one above the other, not interleaved.
fn view_of(q: Option<&str>, failed: bool) -> &'static str {
    match q {
        Some("stdout") => "stdout",
        Some("stderr") => "stderr",
        Some("both") => "both",
        _ if failed => "stderr",
        _ => "stdout",
    }
}

/// The first page of one stream of an attempt (the latest unless `attempt`), as text; with
/// the attempt it belongs to and the byte length of the text.
async fn first_page(
    st: &AppState,
    caller: &Caller,
    wf: &str,
    job: &str,
    task: Option<u32>,
    attempt: Option<u32>,
    stream: &str,
) -> Result<(String, u32, usize), WebError> {
    let q = LogQuery {
        task,
        attempt,
        stream: Some(stream.into()),
        offset: 0,
        follow: false,
        limit: Some(LOG_PAGE),
    };
    let r = logs::read(st, caller, wf, job, &q).await?;
    let shown = r.attempt;
    let mut carry = r.body.into_page();
    let (text, n) = take_utf8(&mut carry);
    Ok((text, shown, n))
}

pub async fn log(
    State(st): State<AppState>,
    web: Web,
    Path((id, job)): Path<(String, String)>,
    Query(p): Query<LogQuery>,
) -> Result<Response, WebError> {
    let d = detail(&st, &web.caller, &id).await?;
    let wf = d.summary.id.to_string();
    let task = d
        .tasks
        .iter()
        .find(|t| t.job == job && (p.task.is_none() || t.index == p.task));
    let failed = task.is_some_and(|t| t.status == TaskStatus::Failed);
    let view = view_of(p.stream.as_deref(), failed);
    let streams: &[&'static str] = match view {
        "both" => &["stdout", "stderr"],
        "stderr" => &["stderr"],
        _ => &["stdout"],
    };
    let base = format!("/workflows/{wf}/logs/{}", segment(&job));
    let mut panes = vec![];
    let mut attempt = 0;
    for &stream in streams {
        // Every pane stays on the attempt the first one showed, even if another starts now.
        let at = (attempt > 0).then_some(attempt).or(p.attempt);
        let (text, shown, n) = first_page(&st, &web.caller, &wf, &job, p.task, at, stream).await?;
        attempt = attempt.max(shown);
        let live = (shown > 0).then_some(shown).or(p.attempt);
        panes.push(Pane {
            stream,
            text,
            live_url: format!(
                "{base}/live?{}",
                log_link(p.task, live, stream, Some(n as u64))
            ),
            download_url: format!("{base}/download?{}", log_link(p.task, live, stream, None)),
        });
    }
    let attempts = task
        .map(|t| {
            t.attempts
                .iter()
                .map(|a| AttemptLink {
                    number: a.number,
                    url: format!("{base}?{}", log_link(p.task, Some(a.number), view, None)),
                    current: a.number == attempt,
                })
                .collect()
        })
        .unwrap_or_default();
    let ended = task.is_some_and(|t| {
        t.attempts
            .iter()
            .find(|a| a.number == attempt)
            .is_some_and(|a| a.ended_at.is_some())
            || (attempt == 0 && t.status.is_terminal())
    });
    let views = ["stdout", "stderr", "both"]
        .into_iter()
        .map(|v| ViewLink {
            name: v,
            url: format!("{base}?{}", log_link(p.task, p.attempt, v, None)),
            current: v == view,
        })
        .collect();
    Ok(ok_page(&LogPage {
        ctx: web.ctx("workflows"),
        name: d.summary.name.clone(),
        label: task.map(task_label).unwrap_or(job.clone()),
        view,
        failed_default: failed && p.stream.is_none(),
        views,
        attempts,
        attempt,
        panes,
        ended,
        id: wf,
    }))
}

/// A downloaded log holds at most this much (the newest output past it is cut, and says so).
const DOWNLOAD_LIMIT: u64 = 256 << 20;

/// One stream of one attempt as a text file to save, read through the API's own log read
/// (so with its visibility check) page by page.
pub async fn log_download(
    State(st): State<AppState>,
    web: Web,
    Path((id, job)): Path<(String, String)>,
    Query(p): Query<LogQuery>,
) -> Result<Response, WebError> {
    let stream = stream_of(&p);
    let d = detail(&st, &web.caller, &id).await?;
    let wf = d.summary.id;
    let mut out: Vec<u8> = vec![];
    let mut offset = 0;
    let mut attempt = p.attempt;
    loop {
        let q = LogQuery {
            task: p.task,
            attempt,
            stream: Some(stream.into()),
            offset,
            follow: false,
            limit: None,
        };
        let r = logs::read(&st, &web.caller, &wf.to_string(), &job, &q).await?;
        let shown = r.attempt;
        // Later pages stay on the attempt of the first.
        if shown > 0 {
            attempt = Some(shown);
        }
        let next = r.next_offset.unwrap_or(offset);
        let body = r.body.into_page();
        if body.is_empty() || next <= offset {
            break;
        }
        out.extend_from_slice(&body);
        offset = next;
        if offset >= DOWNLOAD_LIMIT {
            out.extend_from_slice(b"\n[gantry: the download stops here; the log goes on]\n");
            break;
        }
    }
    let task = p.task.map(|t| format!("-{t}")).unwrap_or_default();
    let at = attempt.map(|a| format!("-attempt{a}")).unwrap_or_default();
    // Job names are letters, digits, '-' and '_'; anything else becomes '_' all the same.
    let file: String = format!("{}-{job}{task}{at}.{stream}.txt", short(&wf))
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    Ok((
        [
            (
                axum::http::header::CONTENT_TYPE,
                "text/plain; charset=utf-8".to_string(),
            ),
            (
                axum::http::header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}\""),
            ),
        ],
        out,
    )
        .into_response())
}

/// A task's output as it is written, from `offset` (or `Last-Event-ID`) on; each event's id
/// is the byte offset after it, so a reconnect resumes exactly there.
pub async fn log_live(
    State(st): State<AppState>,
    web: Web,
    Path((id, job)): Path<(String, String)>,
    Query(p): Query<LogQuery>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, WebError> {
    let offset = last_event_id(&headers)
        .map(|o| o.max(0) as u64)
        .unwrap_or(p.offset);
    let q = LogQuery {
        stream: Some(stream_of(&p).into()),
        offset,
        follow: true,
        limit: None,
        ..p
    };
    let r = logs::read(&st, &web.caller, &id, &job, &q).await?;
    let body = r.body.into_chunks();
    let stream = futures_util::stream::unfold(
        (body, Vec::new(), offset, false),
        |(mut body, mut carry, mut pos, done)| async move {
            if done {
                return None;
            }
            match body.next().await {
                Some(Ok(chunk)) => {
                    carry.extend_from_slice(&chunk);
                    let (text, n) = take_utf8(&mut carry);
                    pos += n as u64;
                    let ev = SseEvent::default()
                        .event("log")
                        .id(pos.to_string())
                        .json_data(text)
                        .map(|e| vec![e])
                        .unwrap_or_default();
                    Some((ev, (body, carry, pos, false)))
                }
                // The attempt ended and everything it wrote was sent (or the read failed).
                _ => Some((vec![end_event()], (body, carry, pos, true))),
            }
        },
    );
    Ok(sse(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_wait_for_their_rest() {
        let mut carry = "hé".as_bytes()[..2].to_vec();
        assert_eq!(take_utf8(&mut carry), ("h".to_string(), 1));
        carry.extend_from_slice(&"hé".as_bytes()[2..]);
        assert_eq!(take_utf8(&mut carry), ("é".to_string(), 2));
        assert!(carry.is_empty());
    }

    #[test]
    fn the_graph_is_laid_out_in_columns_by_depth() {
        let wf = gantry_spec::parse(
            "version: v4
jobs:
  prepare: { image: { uri: docker://busybox:1 }, command: [ 'true' ] }
  count:
    image: { uri: docker://busybox:1 }
    command: [ 'true' ]
    depends-on: [ { name: prepare } ]
  square:
    image: { uri: docker://busybox:1 }
    command: [ 'true' ]
    depends-on: [ { name: prepare } ]
  report:
    image: { uri: docker://busybox:1 }
    command: [ 'true' ]
    depends-on: [ { name: count }, { name: square } ]
",
        )
        .expect("a valid workflow");
        let plan = crate::plan::compile(&wf);
        let order: Vec<String> = plan.jobs.iter().map(|j| j.name.clone()).collect();
        let g = graph(&plan, jobs(&order, &[]));
        let at = |name: &str| {
            let n = g.nodes.iter().find(|n| n.job.name == name).unwrap();
            (n.x, n.y)
        };
        let col = BOX_W + GAP_X;
        assert_eq!(at("prepare"), (PAD, PAD));
        assert_eq!(at("count").0, PAD + col);
        assert_eq!(at("square").0, PAD + col);
        assert_ne!(at("count").1, at("square").1, "one above the other");
        assert_eq!(at("report").0, PAD + 2 * col);
        assert_eq!(g.edges.len(), 4);
        assert_eq!(g.width, 3 * col - GAP_X + 2 * PAD);
        assert_eq!(g.height, 2 * (BOX_H + GAP_Y) - GAP_Y + 2 * PAD);
        assert!(g.nodes.iter().all(|n| n.job.status == "PENDING"));
    }
}
