//! Workflows: check, start, list, show, follow and stop, for any client (the API's handlers,
//! the web UI, MCP) with the caller it authenticated. No HTTP here: each function takes the
//! caller and the request's fields and returns the API's body or an error.

use std::collections::HashMap;

use crate::clock::ts;
use gantry_api::v1::{
    AttemptInfo, Event, SubmitWorkflow, TaskInfo, TransferProgress, ValidateWorkflow, Validation,
    WorkflowCreated, WorkflowDetail, WorkflowSummary,
};
use gantry_api::{Channel, TaskStatus};
use gantry_intake::requests::{self, Refusal};
use gantry_store::{EventQuery, EventRow, NewTask, NewWorkflow, WorkflowRow};
use uuid::Uuid;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::{now_ms, AppState};

/// A refusal of a workflow file (or of a submit) before the store.
fn refused(r: Refusal) -> ApiError {
    match r {
        Refusal::Bad(message) => ApiError::BadRequest(message),
        Refusal::Invalid {
            message,
            diagnostics,
        } => ApiError::Invalid {
            message,
            diagnostics,
        },
        Refusal::TooLarge { size, limit } => ApiError::TooLarge {
            message: format!(
                "the workflow file is {}; the server takes at most {}",
                gantry_api::v1::iec_bytes(size),
                gantry_api::v1::iec_bytes(limit)
            ),
            limit,
        },
    }
}

/// Checks a workflow file: its diagnostics, or an error for what is no workflow file at all.
pub fn validate(req: &ValidateWorkflow) -> Result<Validation, ApiError> {
    match requests::parse_spec(&req.spec).map_err(refused) {
        Ok(_) => Ok(Validation {
            valid: true,
            diagnostics: vec![],
        }),
        Err(ApiError::Invalid { diagnostics, .. }) => Ok(Validation {
            valid: false,
            diagnostics,
        }),
        Err(e) => Err(e),
    }
}

/// Starts a workflow: [`prepare`] then [`commit`], its takeovers left for `endpoint approve`.
/// `channel` is the client that asked (recorded on the takeovers).
pub async fn submit(
    st: &AppState,
    c: &Caller,
    req: SubmitWorkflow,
    channel: Channel,
) -> Result<WorkflowCreated, ApiError> {
    let prepared = prepare(st, c, req, channel).await?;
    commit(st, c, prepared, None).await
}

/// A submit checked and compiled, with nothing stored yet: what it would do (the takeovers
/// among it) can be shown to a person before [`commit`] (the MCP server asks first).
pub struct Prepared {
    /// What was asked for: [`commit`] stores exactly the file that was checked.
    pub req: SubmitWorkflow,
    /// The name checked; `None` takes the default.
    name: Option<String>,
    id: Uuid,
    compiled: crate::plan::WorkflowPlan,
    warnings: Vec<String>,
    pub takeovers: Vec<gantry_store::TakeoverRow>,
}

pub async fn prepare(
    st: &AppState,
    c: &Caller,
    req: SubmitWorkflow,
    channel: Channel,
) -> Result<Prepared, ApiError> {
    let requests::Submission {
        workflow: wf,
        plan: mut compiled,
        name,
        mut warnings,
    } = requests::submission(&req).map_err(refused)?;
    let placement = crate::placement::PlacementSettings::read(st.store.as_ref()).await?;
    warnings.extend(requests::annotation_warnings(
        &wf,
        &placement.constraint_keys,
    ));
    warnings.extend(host_network_warnings(st, &compiled, &placement).await?);
    warnings.extend(crate::placement::fit_warnings(
        &st.store.nodes().await?,
        &compiled,
        &placement,
    ));
    let cap = requests::retry_cap(
        st.store
            .setting(requests::RETRY_MAX_ATTEMPTS_KEY)
            .await?
            .as_deref(),
    );
    requests::check_retries(&wf, cap).map_err(ApiError::BadRequest)?;
    let arrays = requests::array_cap(
        st.store
            .setting(requests::MAX_ARRAY_SIZE_KEY)
            .await?
            .as_deref(),
    );
    requests::check_arrays(&wf, arrays).map_err(ApiError::BadRequest)?;
    check_layouts(st, &wf)?;
    if !wf.images.is_empty() {
        let enabled = st.store.setting("builds.enabled").await?;
        if enabled.as_deref() == Some("false") {
            return Err(ApiError::BadRequest(
                "image builds are disabled on this cluster (an administrator set builds.enabled=false): \
                 use a prebuilt image in `image.uri` instead of `images:`"
                    .into(),
            ));
        }
        let builds = crate::builds::plan(&st.config, &wf, c).await?;
        crate::builds::attach(&mut compiled, builds, &st.config.registry_host());
    }
    crate::builds::check_image_access(&compiled, &st.config.registry_host(), c)?;
    crate::secrets::check_refs(st.store.as_ref(), &compiled, &c.user.name, &c.user.group).await?;
    crate::volumes::resolve(st.store.as_ref(), c, &mut compiled).await?;
    let id = Uuid::new_v4();
    let takeovers =
        crate::endpoints::check_attach(st.store.as_ref(), c, &compiled, id, channel).await?;
    Ok(Prepared {
        req,
        name,
        id,
        compiled,
        warnings,
        takeovers,
    })
}

/// Host-network steps where an administrator forbade host networking in some pools: they
/// wait for a node of another pool, and are told so now (a pool may gain nodes, or the
/// setting change, later: never a refusal).
async fn host_network_warnings(
    st: &AppState,
    plan: &crate::plan::WorkflowPlan,
    placement: &crate::placement::PlacementSettings,
) -> Result<Vec<String>, ApiError> {
    let steps: Vec<&str> = plan
        .jobs
        .iter()
        .filter(|j| j.host_network)
        .map(|j| j.name.as_str())
        .collect();
    if steps.is_empty() {
        return Ok(vec![]);
    }
    let (allowed, forbidden): (Vec<String>, Vec<String>) =
        crate::placement::pools(st.store.as_ref())
            .await?
            .into_iter()
            .partition(|p| placement.host_network_allowed(p));
    if forbidden.is_empty() {
        return Ok(vec![]);
    }
    let where_ = if allowed.is_empty() {
        "no pool with nodes allows it now: they wait until one does".to_string()
    } else {
        format!("they run only in pool(s) {}", allowed.join(", "))
    };
    Ok(vec![format!(
        "{}: host networking (network.host, multinode) is forbidden in pool(s) {} by an \
         administrator ({}); {where_}",
        steps.join(", "),
        forbidden.join(", "),
        gantry_intake::requests::HOST_NETWORK_FORBIDDEN_KEY
    )])
}

/// Refuses `oci://` layouts outside the directories this server allows (`--oci-root`), by
/// name alone: nothing on disk is looked at, so the answer says nothing of what exists. The
/// node checks again, opening the layout beneath its own roots.
fn check_layouts(st: &AppState, wf: &gantry_spec::Workflow) -> Result<(), ApiError> {
    let roots = &st.config.pull.oci_roots;
    let outside: Vec<String> = crate::plan::layouts(wf)
        .into_iter()
        .filter(|(_, uri)| !gantry_oci::oci_path_allowed(roots, uri))
        .map(|(at, uri)| format!("{at}: {uri}"))
        .collect();
    if outside.is_empty() {
        return Ok(());
    }
    let allowed = if roots.is_empty() {
        "this cluster allows none".to_string()
    } else {
        let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        format!("this cluster allows those under {}", list.join(", "))
    };
    Err(ApiError::BadRequest(format!(
        "oci:// images are read only from directories an administrator allows (--oci-root), \
         and {allowed}:\n  {}",
        outside.join("\n  ")
    )))
}

// A gang is placed whole or not at all, so the controller's snapshot must list every waiting
// member of one: the file format caps a multinode job within the store's window.
const _: () = assert!(gantry_spec::MAX_MULTINODE_NODES as usize <= gantry_store::PENDING_WINDOW);

/// Stores a prepared workflow. `confirmed_via` says that the submitter confirmed its takeovers
/// already (and through which channel), so they do not wait for `endpoint approve`.
pub async fn commit(
    st: &AppState,
    c: &Caller,
    prepared: Prepared,
    confirmed_via: Option<&str>,
) -> Result<WorkflowCreated, ApiError> {
    let Prepared {
        req,
        name,
        id,
        mut compiled,
        warnings,
        takeovers,
    } = prepared;
    crate::volumes::make_on_first_use(st.store.as_ref(), c, &mut compiled).await?;
    let mut tasks = Vec::new();
    let mut unborn = Vec::new();
    for (ord, job) in compiled.jobs.iter().enumerate() {
        // A task-array member or a multinode member is one task each, by index. A big
        // array's members past the first `BORN_AHEAD` are one range, given rows as the first
        // are placed (a gang is placed whole, so all its members have rows).
        match job.task_indexes() {
            Some(indexes) => {
                let (first, last) = (*indexes.start(), *indexes.end());
                let ahead = if job.multinode.is_some() {
                    last
                } else {
                    last.min(first.saturating_add(gantry_store::BORN_AHEAD as u32 - 1))
                };
                for i in first..=ahead {
                    tasks.push(NewTask {
                        id: Uuid::new_v4(),
                        job: job.name.clone(),
                        index: Some(i),
                        ord: ord as u32,
                    });
                }
                if ahead < last {
                    unborn.push(gantry_store::NewUnborn {
                        job: job.name.clone(),
                        ord: ord as u32,
                        first: ahead + 1,
                        last,
                    });
                }
            }
            None => tasks.push(NewTask {
                id: Uuid::new_v4(),
                job: job.name.clone(),
                index: None,
                ord: ord as u32,
            }),
        }
    }
    // A build whose result the object cache holds already does not run at all.
    let mut ended = vec![];
    for b in &compiled.builds {
        if let Some(digest) = crate::builds::cached(st.store.as_ref(), b).await? {
            if let Some(t) = tasks.iter().find(|t| t.job == b.task_name()) {
                ended.push(gantry_store::EndedTask {
                    task_id: t.id,
                    status: gantry_api::TaskStatus::Finished,
                    reason: format!(
                        "{}{}: image {} is {}:{} ({digest}); nothing to build",
                        crate::builds::CACHE_HIT,
                        b.final_key(),
                        b.name,
                        b.repository,
                        &b.final_key()[..12]
                    ),
                });
            }
        }
    }
    let takeover_changes = match confirmed_via {
        Some(via) => takeovers
            .iter()
            .flat_map(|t| crate::endpoints::confirm_changes(t, c, via, "confirmed"))
            .collect(),
        None => vec![],
    };
    let name = name.unwrap_or_else(|| format!("workflow-{}", &id.to_string()[..8]));
    let new = NewWorkflow {
        id,
        name,
        owner: c.user.name.clone(),
        group: c.user.group.clone(),
        spec: req.spec,
        plan: serde_json::to_string(&compiled).map_err(|e| ApiError::Internal(e.to_string()))?,
        tasks,
        unborn,
        volumes: compiled
            .persistent
            .values()
            .filter_map(|v| Some(v.resolved.as_ref()?.id))
            .collect(),
        takeovers,
        takeover_changes,
        ended,
    };
    // One store call: the workflow, its takeovers and their confirmations, and its cached
    // builds' ends are stored together or not at all.
    st.store.create_workflow(&new, now_ms()).await?;
    st.wake_controller();
    Ok(WorkflowCreated { id, warnings })
}

/// The fewest characters of an id the server looks up: shorter prefixes match too much to mean
/// one workflow, and the CLI prints ids at this length.
pub const MIN_ID_PREFIX: usize = 8;

/// Finds a workflow the caller may see, by id or unique prefix; anything else is 404. Only
/// workflows the caller may see count: a prefix shared with someone else's workflow is not
/// ambiguous to them (saying so would tell them it exists).
pub async fn visible_workflow(
    st: &AppState,
    c: &Caller,
    id: &str,
) -> Result<WorkflowRow, ApiError> {
    let p = id.trim().to_ascii_lowercase();
    let not_found = || ApiError::NotFound(format!("no workflow {id} (see `gantry workflow list`)"));
    if !p.chars().all(|c| c.is_ascii_hexdigit() || c == '-') || p.is_empty() {
        return Err(ApiError::NotFound(format!(
            "no workflow {id:?}: give its id, or its first {MIN_ID_PREFIX} characters or more \
             (see `gantry workflow list`)"
        )));
    }
    if p.len() < MIN_ID_PREFIX {
        return Err(ApiError::BadRequest(format!(
            "workflow ids need at least {MIN_ID_PREFIX} characters, and {id} has {} \
             (see `gantry workflow list`)",
            p.len()
        )));
    }
    // Enough rows to list a handful of matches after leaving out the ones the caller
    // may not see.
    let rows = st.store.workflows_by_prefix(&p, 200).await?;
    let mut mine: Vec<WorkflowRow> = rows
        .into_iter()
        .filter(|w| c.can_see(&w.owner, &w.group))
        .collect();
    match mine.len() {
        0 => Err(not_found()),
        1 => Ok(mine.remove(0)),
        n => {
            let list: Vec<String> = mine
                .iter()
                .take(10)
                .map(|w| format!("  {} {} {}", w.id, w.name, w.status))
                .collect();
            Err(ApiError::BadRequest(format!(
                "{id} matches {n} workflows; give more characters:\n{}{}",
                list.join("\n"),
                if n > 10 { "\n  ..." } else { "" }
            )))
        }
    }
}

async fn summary(st: &AppState, w: WorkflowRow) -> Result<WorkflowSummary, ApiError> {
    let counts = st.store.task_counts(&[w.id]).await?.remove(&w.id);
    Ok(summary_with(w, counts.unwrap_or_default()))
}

/// A workflow's summary with its tasks' counts (from the store's counts: no task is read).
fn summary_with(
    w: WorkflowRow,
    counts: std::collections::BTreeMap<TaskStatus, u64>,
) -> WorkflowSummary {
    WorkflowSummary {
        id: w.id,
        name: w.name,
        owner: w.owner,
        group: w.group,
        status: w.status,
        reason: w.reason,
        created_at: ts(w.created_at),
        ended_at: w.ended_at.map(ts),
        counts: counts
            .into_iter()
            .map(|(s, n)| (s, u32::try_from(n).unwrap_or(u32::MAX)))
            .collect(),
    }
}

/// The workflows the caller may see, with `status` (a name, case-insensitive) only those.
pub async fn list(
    st: &AppState,
    c: &Caller,
    status: Option<&str>,
) -> Result<Vec<WorkflowSummary>, ApiError> {
    let want = requests::status_filter(status).map_err(ApiError::BadRequest)?;
    let rows: Vec<WorkflowRow> = st
        .store
        .list_workflows(&c.visibility())
        .await?
        .into_iter()
        .filter(|w| want.is_none_or(|s| s == w.status))
        .collect();
    // One read of the counts for every workflow listed.
    let ids: Vec<Uuid> = rows.iter().map(|w| w.id).collect();
    let mut counts = st.store.task_counts(&ids).await?;
    Ok(rows
        .into_iter()
        .map(|w| {
            let n = counts.remove(&w.id).unwrap_or_default();
            summary_with(w, n)
        })
        .collect())
}

/// Which of a workflow's tasks `detail` shows: a page of `limit` (0: the counts alone) after
/// task `after`, of these statuses (all when empty).
#[derive(Debug, Clone)]
pub struct TaskQuery {
    pub after: Option<Uuid>,
    pub statuses: Vec<TaskStatus>,
    pub limit: u32,
}

impl Default for TaskQuery {
    fn default() -> Self {
        TaskQuery {
            after: None,
            statuses: vec![],
            limit: requests::TASK_PAGE_DEFAULT,
        }
    }
}

/// A workflow the caller may see, by id or unique prefix, with a page of its tasks and their
/// attempts (a million-task array is shown a page at a time, never read whole).
pub async fn detail(
    st: &AppState,
    c: &Caller,
    id: &str,
    q: &TaskQuery,
) -> Result<WorkflowDetail, ApiError> {
    let w = visible_workflow(st, c, id).await?;
    let counts = st
        .store
        .task_counts(&[w.id])
        .await?
        .remove(&w.id)
        .unwrap_or_default();
    let tasks_total: u64 = counts
        .iter()
        .filter(|(s, _)| q.statuses.is_empty() || q.statuses.contains(s))
        .map(|(_, n)| n)
        .sum();
    // One more than asked: whether a next page exists.
    // A page of none still checks `after`.
    let mut tasks = if q.limit == 0 && q.after.is_none() {
        vec![]
    } else {
        let page = gantry_store::TaskPage {
            after: q.after,
            statuses: q.statuses.clone(),
            limit: q.limit + 1,
        };
        match st.store.tasks_page(w.id, &page).await {
            Err(gantry_store::StoreError::NotFound) => {
                return Err(ApiError::BadRequest(format!(
                    "after: {} is not a task of workflow {}",
                    q.after.unwrap_or_default(),
                    w.id
                )))
            }
            r => r?,
        }
    };
    let next = if tasks.len() > q.limit as usize {
        tasks.truncate(q.limit as usize);
        tasks.last().map(|t| t.id)
    } else {
        None
    };
    let ids: Vec<Uuid> = tasks.iter().map(|t| t.id).collect();
    let mut attempts: HashMap<Uuid, Vec<AttemptInfo>> = HashMap::new();
    for a in st.store.attempts_of(&ids).await? {
        attempts.entry(a.task_id).or_default().push(AttemptInfo {
            id: a.id,
            number: a.number,
            node: a.node,
            status: a.status,
            cause: a.cause,
            exit_code: a.exit_code,
            reason: a.reason,
            created_at: ts(a.created_at),
            ended_at: a.ended_at.map(ts),
        });
    }
    // The controller tries only the first waiting tasks of a big array (`PENDING_WINDOW`):
    // the others wait behind the first one the scheduler explained, never tried yet itself.
    let mut first_waiting: HashMap<&str, String> = HashMap::new();
    for t in &tasks {
        if let (TaskStatus::Pending, 0, Some(why)) = (t.status, t.attempts, &t.reason) {
            first_waiting.entry(t.job.as_str()).or_insert_with(|| {
                format!("waiting behind {}: {why}", crate::views::task_label(t))
            });
        }
    }
    // The progress of this workflow's running transfers, by task (the map holds the whole
    // cluster's: only these are copied out).
    let mut progress: HashMap<Uuid, TransferProgress> = {
        let all = st.news.transfers();
        tasks
            .iter()
            .filter(|t| t.status == TaskStatus::Running)
            .filter_map(|t| {
                let attempt = attempts.get(&t.id)?.last()?;
                Some((t.id, all.get(&attempt.id)?.clone()))
            })
            .collect()
    };
    // Why services not ready yet fail their probe, by task.
    let mut probing: HashMap<Uuid, crate::news::ProbeFailure> = {
        let all = st.news.probes();
        tasks
            .iter()
            .filter(|t| t.status == TaskStatus::Started)
            .filter_map(|t| {
                let attempt = attempts.get(&t.id)?.last()?;
                Some((t.id, all.get(&attempt.id)?.clone()))
            })
            .collect()
    };
    let infos = tasks
        .iter()
        .map(|t| {
            let probe = probing.remove(&t.id);
            TaskInfo {
                progress: progress.remove(&t.id),
                id: t.id,
                job: t.job.clone(),
                index: t.index,
                status: t.status,
                reason: match (&t.reason, t.status) {
                    (None, TaskStatus::Pending) => first_waiting.get(t.job.as_str()).cloned(),
                    (r, TaskStatus::Started) => {
                        probe.as_ref().map(|p| p.reason()).or_else(|| r.clone())
                    }
                    (r, _) => r.clone(),
                },
                node: t.node.clone(),
                exit_code: t.exit_code,
                attempts: attempts.remove(&t.id).unwrap_or_default(),
                probe: probe.map(|p| gantry_api::v1::ProbeFailing {
                    why: p.why,
                    count: p.count,
                }),
            }
        })
        .collect();
    Ok(WorkflowDetail {
        summary: summary_with(w, counts),
        tasks: infos,
        tasks_total,
        next,
    })
}

pub fn event(e: EventRow) -> Event {
    Event {
        seq: e.seq,
        time: ts(e.time),
        workflow_id: e.workflow_id,
        node: e.node,
        task: e.task,
        kind: e.kind,
        message: e.message,
        workflow_name: e.workflow_name,
    }
}

/// A workflow's events after sequence number `after`, oldest first.
pub async fn events(
    st: &AppState,
    c: &Caller,
    id: &str,
    after: i64,
) -> Result<Vec<Event>, ApiError> {
    let w = visible_workflow(st, c, id).await?;
    let rows = st
        .store
        .events(&EventQuery {
            workflow_id: Some(w.id),
            after,
            ..Default::default()
        })
        .await?;
    Ok(rows.into_iter().map(event).collect())
}

/// Asks the controller to stop a workflow the caller may see.
pub async fn stop(st: &AppState, c: &Caller, id: &str) -> Result<WorkflowSummary, ApiError> {
    let w = visible_workflow(st, c, id).await?;
    if w.status.is_terminal() {
        return Err(ApiError::Conflict(format!(
            "workflow {} already ended {}",
            w.id, w.status
        )));
    }
    st.store.request_stop(w.id, &c.user.name, now_ms()).await?;
    st.wake_controller();
    let w = st.store.workflow(w.id).await?;
    summary(st, w).await
}

/// The takeovers a prepared submit would make that need the person first (MCP asks them
/// before [`commit`]): endpoints another
/// workflow serves now, unless the endpoint asks for `approve` at switch time anyway.
pub async fn takeovers_to_confirm(
    st: &AppState,
    prepared: &Prepared,
) -> Result<Vec<(String, Uuid, String)>, ApiError> {
    let mut out = vec![];
    for t in &prepared.takeovers {
        let Some(from) = t.from_workflow else {
            continue;
        };
        let e = st.store.endpoint(&t.endpoint).await?;
        if e.confirm {
            continue;
        }
        let owner = st
            .store
            .workflow(from)
            .await
            .map(|w| w.owner)
            .unwrap_or_else(|_| "someone".into());
        out.push((t.endpoint.clone(), from, owner));
    }
    Ok(out)
}
