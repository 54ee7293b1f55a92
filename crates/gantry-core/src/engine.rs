//! The workflow state machine: given what is true of one workflow now, decide what happens
//! next. The server's controller builds a [`WorkflowView`] from the store, calls [`reconcile`],
//! and applies the actions in one transaction; attempt ends go through [`attempt_outcome`].
//!
//! Retry is decided by the *cause* of an attempt's end, never by its exit code alone: a process
//! that exited non-zero on its own, or timed out, is a `failure`; a lost or evicted node is
//! `node`. Attempts of one task are spaced by an exponential backoff ([`retry_backoff`]), so a
//! step that fails at once does not restart in a tight loop.

use gantry_api::{EndCause, TaskStatus, WorkflowStatus};
use std::collections::HashMap;
use uuid::Uuid;

/// Milliseconds since the Unix epoch. Time is passed in: core never reads a clock.
pub type Millis = i64;

/// The wait before a task's second attempt; each later one waits twice as long as the one
/// before, up to [`RETRY_BACKOFF_MAX_MS`].
pub const RETRY_BACKOFF_BASE_MS: Millis = 1_000;
/// The longest wait between two attempts of a task.
pub const RETRY_BACKOFF_MAX_MS: Millis = 5 * 60 * 1_000;

/// How long a task waits after its attempt number `ended` (1 for the first) ended before the
/// next one may start: 1 s, 2 s, 4 s, ... at most 5 min.
pub fn retry_backoff(ended: u32) -> Millis {
    let doublings = ended.saturating_sub(1).min(20);
    (RETRY_BACKOFF_BASE_MS << doublings).min(RETRY_BACKOFF_MAX_MS)
}

/// A wait for people: "1s", "2m8s", "5m".
fn wait_text(ms: Millis) -> String {
    let secs = (ms + 999) / 1000;
    match (secs / 60, secs % 60) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

pub type TaskId = Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetryOn {
    pub failure: bool,
    pub node: bool,
}

#[derive(Debug, Clone)]
pub struct WorkflowView {
    pub status: WorkflowStatus,
    pub stop_requested: bool,
    pub jobs: Vec<JobView>,
}

/// An edge of the graph: `name` must have FINISHED, or (`running`) a service must be RUNNING,
/// i.e. its readiness probe has passed.
#[derive(Debug, Clone, PartialEq)]
pub struct Dependency {
    pub name: String,
    pub running: bool,
}

impl Dependency {
    pub fn finished(name: &str) -> Dependency {
        Dependency {
            name: name.into(),
            running: false,
        }
    }
}

#[derive(Debug, Clone)]
pub struct JobView {
    pub name: String,
    pub depends_on: Vec<Dependency>,
    /// `Some` for a service. Services run until the workflow's jobs are done (then they are
    /// stopped), or with `persist` until the workflow is stopped.
    pub service: Option<ServiceView>,
    /// At most this many of the job's tasks (task-array members) run at once.
    pub concurrency: Option<u32>,
    /// Most starts of each task in all.
    pub attempts: u32,
    pub retry_on: RetryOn,
    pub timeout_ms: Option<u64>,
    /// The tasks still in play, and any ended ones the caller chose to list.
    pub tasks: Vec<TaskView>,
    /// Ended tasks not in `tasks`, counted. An ended task takes no action of its own and only
    /// counts towards its job's status, so a caller may count a big array's finished members
    /// instead of listing them: the decisions are the same either way.
    pub ended: Ended,
    /// PENDING tasks not in `tasks`, counted. A caller may list only the first of a big
    /// array's waiting members (as many as could start at once): the others keep the job from
    /// being done, and are ended together ([`Action::EndPending`]) when the job can no longer
    /// run; they are placed once a later call lists them.
    pub pending_unlisted: u32,
}

/// How many of a job's ended tasks ended each way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ended {
    pub finished: u32,
    pub failed: u32,
    pub stopped: u32,
}

impl Ended {
    /// Counts `n` tasks that ended `status`; a status that is not an end is ignored.
    pub fn add(&mut self, status: TaskStatus, n: u32) {
        match status {
            TaskStatus::Finished => self.finished += n,
            TaskStatus::Failed => self.failed += n,
            TaskStatus::Stopped => self.stopped += n,
            TaskStatus::Pending | TaskStatus::Started | TaskStatus::Running => {}
        }
    }

    pub fn total(&self) -> u32 {
        self.finished + self.failed + self.stopped
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ServiceView {
    pub persist: bool,
}

#[derive(Debug, Clone)]
pub struct TaskView {
    pub id: TaskId,
    pub status: TaskStatus,
    /// Attempts started so far (ended ones and the live one).
    pub attempts_made: u32,
    pub live: Option<LiveAttempt>,
    /// A PENDING task waiting out its retry backoff may not start before this time.
    pub not_before: Option<Millis>,
}

/// An attempt that has been placed and has not ended yet.
#[derive(Debug, Clone)]
pub struct LiveAttempt {
    pub id: TaskId,
    pub status: TaskStatus,
    pub running_since: Option<Millis>,
    /// A stop was already asked for, with this cause.
    pub stop_sent: Option<EndCause>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The task may start now: hand it to the scheduler.
    Place { task: TaskId },
    /// The task will never run (a dependency failed, or the workflow was stopped).
    EndTask {
        task: TaskId,
        status: TaskStatus,
        reason: String,
    },
    /// As `EndTask`, for every task of the job that is still PENDING: the job has tasks the
    /// view does not list ([`JobView::pending_unlisted`]).
    EndPending {
        job: String,
        status: TaskStatus,
        reason: String,
    },
    /// Ask the agent to stop an attempt (SIGTERM, grace, SIGKILL).
    StopAttempt { attempt: TaskId, cause: EndCause },
    SetWorkflow {
        status: WorkflowStatus,
        reason: Option<String>,
    },
}

/// What a job as a whole looks like, from its tasks.
pub fn job_status(job: &JobView) -> TaskStatus {
    let ended = job.ended;
    let mut all_finished = ended.failed == 0 && ended.stopped == 0;
    let mut all_terminal = true;
    let mut any_terminal = ended.total() > 0;
    let mut any_active = false;
    let mut any_failed = ended.failed > 0;
    let mut any_stopped = ended.stopped > 0;
    let mut any_running = false;
    if job.pending_unlisted > 0 {
        all_finished = false;
        all_terminal = false;
    }
    for t in &job.tasks {
        match t.status {
            TaskStatus::Finished => {}
            TaskStatus::Failed => any_failed = true,
            TaskStatus::Stopped => any_stopped = true,
            TaskStatus::Running => any_running = true,
            TaskStatus::Started => any_active = true,
            TaskStatus::Pending => {}
        }
        if t.status != TaskStatus::Finished {
            all_finished = false;
        }
        if t.status.is_terminal() {
            any_terminal = true;
        } else {
            all_terminal = false;
        }
    }
    if all_finished {
        TaskStatus::Finished
    } else if all_terminal && any_failed {
        TaskStatus::Failed
    } else if all_terminal && any_stopped {
        TaskStatus::Stopped
    } else if any_running {
        TaskStatus::Running
    } else if any_active || any_terminal {
        TaskStatus::Started
    } else {
        TaskStatus::Pending
    }
}

/// Decide the next actions for one workflow. Idempotent: calling it twice on the same view
/// gives the same actions, so a crash between deciding and applying loses nothing.
pub fn reconcile(wf: &WorkflowView, now: Millis) -> Vec<Action> {
    let mut actions = Vec::new();
    if wf.status.is_terminal() {
        return actions;
    }
    let by_name: HashMap<&str, &JobView> = wf.jobs.iter().map(|j| (j.name.as_str(), j)).collect();

    if wf.stop_requested {
        let mut live = false;
        for job in &wf.jobs {
            if job.pending_unlisted > 0 {
                actions.push(Action::EndPending {
                    job: job.name.clone(),
                    status: TaskStatus::Stopped,
                    reason: "workflow stopped before it ran".into(),
                });
            }
            for t in &job.tasks {
                if let Some(a) = &t.live {
                    live = true;
                    if a.stop_sent.is_none() {
                        actions.push(Action::StopAttempt {
                            attempt: a.id,
                            cause: EndCause::Stopped,
                        });
                    }
                } else if !t.status.is_terminal() {
                    actions.push(Action::EndTask {
                        task: t.id,
                        status: TaskStatus::Stopped,
                        reason: "workflow stopped before it ran".into(),
                    });
                }
            }
        }
        if !live {
            actions.push(Action::SetWorkflow {
                status: WorkflowStatus::Stopped,
                reason: Some("stopped by request".into()),
            });
        }
        return actions;
    }

    // The jobs are done: services that do not persist are no longer needed.
    let jobs_done = wf
        .jobs
        .iter()
        .filter(|j| j.service.is_none())
        .all(|j| j.pending_unlisted == 0 && j.tasks.iter().all(|t| t.status.is_terminal()));

    // Tasks this call ends, so the workflow's own status below sees them; and jobs whose
    // unlisted PENDING tasks it ends.
    let mut ended: HashMap<TaskId, TaskStatus> = HashMap::new();
    let mut pending_ended: HashMap<&str, TaskStatus> = HashMap::new();
    for job in &wf.jobs {
        if let (true, Some(svc)) = (jobs_done, job.service) {
            if !svc.persist {
                end_pending(
                    &mut actions,
                    &mut pending_ended,
                    job,
                    TaskStatus::Stopped,
                    "the workflow's jobs are done",
                );
                for t in &job.tasks {
                    match &t.live {
                        Some(a) if a.stop_sent.is_none() => actions.push(Action::StopAttempt {
                            attempt: a.id,
                            cause: EndCause::Stopped,
                        }),
                        Some(_) => {}
                        None if !t.status.is_terminal() => {
                            ended.insert(t.id, TaskStatus::Stopped);
                            actions.push(Action::EndTask {
                                task: t.id,
                                status: TaskStatus::Stopped,
                                reason: "the workflow's jobs are done".into(),
                            });
                        }
                        None => {}
                    }
                }
                continue;
            }
        }
        let blocker = job.depends_on.iter().find_map(|d| {
            let dep = by_name.get(d.name.as_str())?;
            match job_status(dep) {
                s @ (TaskStatus::Failed | TaskStatus::Stopped) => Some((d.name.clone(), s)),
                _ => None,
            }
        });
        let ready = job.depends_on.iter().all(|d| {
            by_name.get(d.name.as_str()).is_some_and(|dep| {
                let s = job_status(dep);
                s == TaskStatus::Finished || (d.running && s == TaskStatus::Running)
            })
        });
        if let Some((dep, status)) = &blocker {
            end_pending(
                &mut actions,
                &mut pending_ended,
                job,
                TaskStatus::Failed,
                &format!("dependency {dep} ended {status}"),
            );
        }
        let mut in_flight = job
            .tasks
            .iter()
            .filter(|t| matches!(t.status, TaskStatus::Started | TaskStatus::Running))
            .count() as u32;
        for t in &job.tasks {
            if let Some(a) = &t.live {
                if let (Some(limit), Some(since), None) =
                    (job.timeout_ms, a.running_since, a.stop_sent)
                {
                    if now.saturating_sub(since) >= limit as i64 {
                        actions.push(Action::StopAttempt {
                            attempt: a.id,
                            cause: EndCause::Timeout,
                        });
                    }
                }
                continue;
            }
            if t.status != TaskStatus::Pending {
                continue;
            }
            if let Some((dep, status)) = &blocker {
                ended.insert(t.id, TaskStatus::Failed);
                actions.push(Action::EndTask {
                    task: t.id,
                    status: TaskStatus::Failed,
                    reason: format!("dependency {dep} ended {status}"),
                });
                continue;
            }
            if !ready {
                continue;
            }
            // Still backing off after a failed attempt: its reason says until when.
            if t.not_before.is_some_and(|at| now < at) {
                continue;
            }
            if job.concurrency.is_some_and(|c| in_flight >= c) {
                continue;
            }
            in_flight += 1;
            actions.push(Action::Place { task: t.id });
        }
    }

    let status_of = |t: &TaskView| ended.get(&t.id).copied().unwrap_or(t.status);
    let tasks = || wf.jobs.iter().flat_map(|j| j.tasks.iter());
    let all_terminal = tasks().all(|t| status_of(t).is_terminal())
        && wf
            .jobs
            .iter()
            .all(|j| j.pending_unlisted == 0 || pending_ended.contains_key(j.name.as_str()));
    let job_failed = |j: &JobView| {
        j.ended.failed > 0
            || pending_ended.get(j.name.as_str()) == Some(&TaskStatus::Failed)
            || j.tasks.iter().any(|t| status_of(t) == TaskStatus::Failed)
    };
    let next = if all_terminal {
        // Services stopped because the jobs were done ended STOPPED: only a failure fails.
        if !wf.jobs.iter().any(job_failed) {
            Some((WorkflowStatus::Finished, None))
        } else {
            let failed: Vec<String> = wf
                .jobs
                .iter()
                .filter(|j| job_failed(j))
                .map(|j| j.name.clone())
                .collect();
            Some((
                WorkflowStatus::Failed,
                Some(format!("failed: {}", failed.join(", "))),
            ))
        }
    } else if wf.status == WorkflowStatus::Pending
        && (wf.jobs.iter().any(|j| j.ended.total() > 0)
            || tasks().any(|t| status_of(t) != TaskStatus::Pending))
    {
        Some((WorkflowStatus::Running, None))
    } else {
        None
    };
    if let Some((status, reason)) = next {
        if status != wf.status {
            actions.push(Action::SetWorkflow { status, reason });
        }
    }
    actions
}

/// Ends the job's unlisted PENDING tasks, if it has any (see [`JobView::pending_unlisted`]).
fn end_pending<'a>(
    actions: &mut Vec<Action>,
    pending_ended: &mut HashMap<&'a str, TaskStatus>,
    job: &'a JobView,
    status: TaskStatus,
    reason: &str,
) {
    if job.pending_unlisted > 0 {
        pending_ended.insert(job.name.as_str(), status);
        actions.push(Action::EndPending {
            job: job.name.clone(),
            status,
            reason: reason.into(),
        });
    }
}

/// What becomes of a task when its live attempt ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Back to PENDING for another attempt, which may start at `not_before` (after the
    /// backoff) and no earlier.
    Retry { reason: String, not_before: Millis },
    Final {
        status: TaskStatus,
        reason: Option<String>,
    },
}

/// What becomes of a task whose attempt number `attempts_made` ended `now` with `cause`.
pub fn attempt_outcome(
    job: &JobView,
    attempts_made: u32,
    exit_code: Option<i32>,
    cause: EndCause,
    node: &str,
    now: Millis,
) -> Outcome {
    let left = attempts_made < job.attempts.max(1);
    let (retryable, reason) = match cause {
        EndCause::Exit if exit_code == Some(0) => {
            return Outcome::Final {
                status: TaskStatus::Finished,
                reason: None,
            }
        }
        EndCause::Exit => (
            job.retry_on.failure,
            format!("exited with code {}", exit_code.unwrap_or(-1)),
        ),
        EndCause::Timeout => (job.retry_on.failure, "timeout".to_string()),
        EndCause::StartError => (job.retry_on.failure, "could not start".to_string()),
        EndCause::NodeLost => (job.retry_on.node, format!("node {node} was lost")),
        EndCause::Evicted => (job.retry_on.node, format!("evicted from node {node}")),
        EndCause::Stopped => {
            return Outcome::Final {
                status: TaskStatus::Stopped,
                reason: Some("stopped".into()),
            }
        }
        EndCause::DependencyFailed => {
            return Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some("a dependency failed".into()),
            }
        }
        EndCause::Gang => {
            return Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some("another member of its multinode job ended".into()),
            }
        }
    };
    if retryable && left {
        let wait = retry_backoff(attempts_made);
        Outcome::Retry {
            reason: format!(
                "{reason}; attempt {} of {} starts after a {} backoff",
                attempts_made + 1,
                job.attempts,
                wait_text(wait)
            ),
            not_before: now.saturating_add(wait),
        }
    } else {
        Outcome::Final {
            status: TaskStatus::Failed,
            reason: Some(reason),
        }
    }
}

#[cfg(test)]
mod tests;
