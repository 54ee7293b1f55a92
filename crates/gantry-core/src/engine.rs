//! The workflow state machine: given what is true of one workflow now, decide what happens
//! next. The server's controller builds a [`WorkflowView`] from the store, calls [`reconcile`],
//! and applies the actions in one transaction; attempt ends go through [`member_outcome`]
//! (exactly [`attempt_outcome`] for a task that is not a gang's member).
//!
//! Retry is decided by the *cause* of an attempt's end, never by its exit code alone: a process
//! that exited non-zero on its own, or timed out, is a `failure`; a lost or evicted node is
//! `node`. Attempts of one task are spaced by an exponential backoff ([`retry_backoff`]), so a
//! step that fails at once does not restart in a tight loop.
//!
//! # Multinode jobs (gangs)
//!
//! A job with `multinode: {nodes: N}` ([`JobView::gang`]) is N tasks of one job, its members,
//! numbered 0..N-1 by [`TaskView::index`]; member `i` is named `<job>-<i>` (its hostname).
//! Member 0 is the head: it runs the command (under `mpirun`); the others only host the ranks
//! the launcher starts in them. The members share one fate per run:
//!
//! - They are placed only all together, in one scheduler decision ([`Action::PlaceGang`], head
//!   first), once every member is PENDING, the job is ready and no member is still backing off;
//!   never one by one ([`Action::Place`]). So their attempt counts move together: one attempt
//!   of each member per run of the gang.
//! - The head ending with exit code 0 finishes the job; the other members are then stopped
//!   ([`EndCause::Gang`]) and end FINISHED too.
//! - Any other end of a member (a non-zero exit, a timeout, a start error, a lost node, an
//!   eviction, and any end of a non-head member's process on its own, whatever its code) is
//!   decided for that member as for any task ([`member_outcome`]: retried under `retry.on`, or
//!   failed); every other live member is then stopped with [`EndCause::Gang`], and a member that
//!   ends so mirrors the gang's fate: FINISHED beside a finished head, FAILED beside a failed
//!   member, back to PENDING with the same `not_before` beside one sent back for a retry (the
//!   whole gang reruns from the start, elsewhere if the scheduler so decides).
//! - Ends decided at the same moment from the same view may disagree (one member retried, one
//!   failed): [`reconcile`] settles them, ending the PENDING members as the gang's fate says
//!   (FAILED beside a failed member, FINISHED beside a finished head).
//! - Once the head has finished, a member ending in any way but the workflow's stop ends
//!   FINISHED; once a member has failed, another ending on its own is not retried. A member
//!   stopped for its gang beside a STOPPED one ends STOPPED.
//! - Reasons name the member and its node (`member run-lammps-1 on node n2 was lost; the gang
//!   restarts: attempt 2 of 3 starts after a 1s backoff`), and a mirror quotes the end of the
//!   member that decided it (`stopped: member run-lammps-1 on node n2 was lost; ...`, `the
//!   gang failed: member run-lammps-1 on node n2 exited with code 3`, `its head run-lammps-0
//!   finished`).
//! - A job's timeout is the head's: it is stopped with [`EndCause::Timeout`] and the others
//!   follow it. Stopping the workflow stops every member with [`EndCause::Stopped`], as for any
//!   task.
//!
//! The rules read a gang's members from [`JobView::tasks`], so a caller lists every member of
//! a gang job there, both in the view given to [`reconcile`] and in the job given to
//! [`member_outcome`], with each member's `index` and `reason`.

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
    /// `Some(N)` for a multinode job of N members (see the module docs): its tasks are the
    /// members, and the caller lists all of them in `tasks`.
    pub gang: Option<u32>,
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
    /// The task's index: its member number in a gang (`<job>-<index>`), or in a task array.
    pub index: Option<u32>,
    /// Why the task is where it is, as last recorded (the reason of its last end). Read only for
    /// a gang's members, whose ends quote the member that decided the gang's fate.
    pub reason: Option<String>,
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
    /// The members of a multinode job may start now, all together or not at all: one
    /// scheduler decision places every one on its own node, or none. Member order, head first.
    PlaceGang { tasks: Vec<TaskId> },
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
        if job.gang.is_some() {
            reconcile_gang(&mut actions, &mut ended, job, blocker.as_ref(), ready, now);
            continue;
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
/// For a member of a multinode job, use [`member_outcome`]: the member's end depends on which
/// member it is and on its siblings.
pub fn attempt_outcome(
    job: &JobView,
    attempts_made: u32,
    exit_code: Option<i32>,
    cause: EndCause,
    node: &str,
    now: Millis,
) -> Outcome {
    let (retryable, reason) = match cause {
        EndCause::Exit if exit_code == Some(0) => return finished(None),
        EndCause::Exit => (
            job.retry_on.failure,
            format!("exited with code {}", exit_code.unwrap_or(-1)),
        ),
        EndCause::Timeout => (job.retry_on.failure, "timeout".to_string()),
        EndCause::StartError => (job.retry_on.failure, "could not start".to_string()),
        EndCause::NodeLost => (job.retry_on.node, format!("node {node} was lost")),
        EndCause::Evicted => (job.retry_on.node, format!("evicted from node {node}")),
        EndCause::Stopped => return stopped(),
        EndCause::DependencyFailed => return failed("a dependency failed".into()),
        // Only a gang's members are stopped so; one the caller did not name as a member has
        // no siblings to follow.
        EndCause::Gang => return failed("another member of its multinode job ended".into()),
    };
    retry_or_fail(job, attempts_made, retryable, reason, "", now)
}

/// [`attempt_outcome`] for a task of `job` whose [`TaskView::index`] is `index`: for a member
/// of a multinode job ([`JobView::gang`]), the gang's rules (see the module docs), reading
/// the other members from `job.tasks` (the caller lists all of them, with their reasons);
/// for any other task, exactly [`attempt_outcome`].
pub fn member_outcome(
    job: &JobView,
    index: Option<u32>,
    attempts_made: u32,
    exit_code: Option<i32>,
    cause: EndCause,
    node: &str,
    now: Millis,
) -> Outcome {
    let (Some(_), Some(index)) = (job.gang, index) else {
        return attempt_outcome(job, attempts_made, exit_code, cause, node, now);
    };
    let me = member_name(job, index);
    let fate = fate(job, Some(index));
    let (retryable, reason) = match cause {
        EndCause::Stopped => return stopped(),
        EndCause::Exit if exit_code == Some(0) && index == 0 => return finished(None),
        // The head finished: the job's work is done, whatever ends its other members now.
        _ if matches!(fate, Some(Fate::Finished)) => {
            return finished(Some(fate_reason(job, &Fate::Finished)))
        }
        EndCause::Gang => return mirror(job, attempts_made, fate, now),
        EndCause::DependencyFailed => return failed("a dependency failed".into()),
        // A member other than the head only hosts ranks: its process ending on its own, even
        // with code 0, leaves the job without that node.
        EndCause::Exit if exit_code == Some(0) => (
            job.retry_on.failure,
            format!("member {me} on node {node} exited with code 0 before its head finished"),
        ),
        EndCause::Exit => (
            job.retry_on.failure,
            format!(
                "member {me} on node {node} exited with code {}",
                exit_code.unwrap_or(-1)
            ),
        ),
        EndCause::Timeout => (
            job.retry_on.failure,
            format!("member {me} on node {node} timed out"),
        ),
        EndCause::StartError => (
            job.retry_on.failure,
            format!("member {me} could not start on node {node}"),
        ),
        EndCause::NodeLost => (
            job.retry_on.node,
            format!("member {me} on node {node} was lost"),
        ),
        EndCause::Evicted => (
            job.retry_on.node,
            format!("member {me} was evicted from node {node}"),
        ),
    };
    // Another member has failed already: the gang cannot run again.
    let retryable = retryable && !matches!(fate, Some(Fate::Ended(..)));
    retry_or_fail(
        job,
        attempts_made,
        retryable,
        reason,
        "the gang restarts: ",
        now,
    )
}

fn finished(reason: Option<String>) -> Outcome {
    Outcome::Final {
        status: TaskStatus::Finished,
        reason,
    }
}

fn failed(reason: String) -> Outcome {
    Outcome::Final {
        status: TaskStatus::Failed,
        reason: Some(reason),
    }
}

fn stopped() -> Outcome {
    Outcome::Final {
        status: TaskStatus::Stopped,
        reason: Some("stopped".into()),
    }
}

/// Another attempt after the backoff if `retryable` and attempts remain, else a failure;
/// `restarts` names what starts again ("the gang restarts: ", or nothing for one task).
fn retry_or_fail(
    job: &JobView,
    attempts_made: u32,
    retryable: bool,
    reason: String,
    restarts: &str,
    now: Millis,
) -> Outcome {
    let left = attempts_made < job.attempts.max(1);
    if retryable && left {
        let wait = retry_backoff(attempts_made);
        Outcome::Retry {
            reason: format!(
                "{reason}; {restarts}attempt {} of {} starts after a {} backoff",
                attempts_made + 1,
                job.attempts,
                wait_text(wait)
            ),
            not_before: now.saturating_add(wait),
        }
    } else {
        failed(reason)
    }
}

/// A gang member's name, its hostname: `<job>-<index>`.
fn member_name(job: &JobView, index: u32) -> String {
    format!("{}-{index}", job.name)
}

/// A member's index; a caller that left it out gets the member's place in the listing.
fn index_of(pos: usize, t: &TaskView) -> u32 {
    t.index.unwrap_or(pos as u32)
}

/// What the ends of a gang's members so far decide for the rest of this run.
#[derive(Debug)]
enum Fate<'a> {
    /// The head exited 0 (a member is FINISHED only as the head, or beside it).
    Finished,
    /// A member ended FAILED or STOPPED: the gang ends so; the member, where listed.
    Ended(TaskStatus, Option<(u32, &'a TaskView)>),
    /// A member went back to PENDING for another attempt: the gang reruns.
    Retry(u32, &'a TaskView),
}

/// The gang's fate from the members that are not live (`except` the one ending now): the
/// head finished, else a member failed, else one was stopped, else one is waiting to rerun;
/// `None` while no member has ended.
fn fate(job: &JobView, except: Option<u32>) -> Option<Fate<'_>> {
    let ended: Vec<(u32, &TaskView)> = job
        .tasks
        .iter()
        .enumerate()
        .map(|(pos, t)| (index_of(pos, t), t))
        .filter(|(i, t)| Some(*i) != except && t.live.is_none())
        .collect();
    let with = |status: TaskStatus| {
        let mut them: Vec<(u32, &TaskView)> = ended
            .iter()
            .copied()
            .filter(|(_, t)| {
                t.status == status && (status != TaskStatus::Pending || t.attempts_made > 0)
            })
            .collect();
        // The member whose own end decided it tells the story; then one quoting it.
        them.sort_by_key(|(i, t)| {
            (
                t.reason
                    .as_deref()
                    .map_or(2, |r| if origin(r) { 0 } else { 1 }),
                *i,
            )
        });
        them.first().copied()
    };
    if job.ended.finished > 0 || with(TaskStatus::Finished).is_some() {
        return Some(Fate::Finished);
    }
    for (status, counted) in [
        (TaskStatus::Failed, job.ended.failed),
        (TaskStatus::Stopped, job.ended.stopped),
    ] {
        let member = with(status);
        if member.is_some() || counted > 0 {
            return Some(Fate::Ended(status, member));
        }
    }
    with(TaskStatus::Pending).map(|(i, t)| Fate::Retry(i, t))
}

/// Mirrored ends quote the member's end that decided them after one of these.
const FAILED_PREFIX: &str = "the gang failed: ";
const STOPPED_PREFIX: &str = "stopped: ";

/// A reason a member's own end gave it ([`member_outcome`]'s "member <job>-<i> ...").
fn origin(reason: &str) -> bool {
    reason.starts_with("member ")
}

/// What happened to the member that decided the gang's fate, from its reason (its own end's,
/// or a mirror's quoting it), or else from its name and status.
fn story(job: &JobView, member: Option<(u32, &TaskView)>, status: TaskStatus) -> String {
    let Some((index, t)) = member else {
        return format!("a member ended {status}");
    };
    t.reason
        .as_deref()
        .map(|r| {
            r.strip_prefix(FAILED_PREFIX)
                .or_else(|| r.strip_prefix(STOPPED_PREFIX))
                .unwrap_or(r)
        })
        .filter(|r| origin(r))
        .map(str::to_string)
        .unwrap_or_else(|| format!("member {} ended {status}", member_name(job, index)))
}

/// The reason of a member that ends as the gang's `fate` says.
fn fate_reason(job: &JobView, fate: &Fate) -> String {
    match fate {
        Fate::Finished => format!("its head {} finished", member_name(job, 0)),
        Fate::Ended(TaskStatus::Stopped, m) => {
            format!("{STOPPED_PREFIX}{}", story(job, *m, TaskStatus::Stopped))
        }
        Fate::Ended(status, m) => format!("{FAILED_PREFIX}{}", story(job, *m, *status)),
        Fate::Retry(i, t) => format!(
            "{STOPPED_PREFIX}{}",
            story(job, Some((*i, t)), TaskStatus::Pending)
        ),
    }
}

/// The end of a member stopped because another one ended ([`EndCause::Gang`]): the gang's fate.
fn mirror(job: &JobView, attempts_made: u32, fate: Option<Fate>, now: Millis) -> Outcome {
    let Some(fate) = fate else {
        return failed(format!(
            "{FAILED_PREFIX}stopped with its gang, and no other member's end is known"
        ));
    };
    let reason = fate_reason(job, &fate);
    match fate {
        Fate::Finished => finished(Some(reason)),
        Fate::Ended(TaskStatus::Stopped, _) => Outcome::Final {
            status: TaskStatus::Stopped,
            reason: Some(reason),
        },
        Fate::Ended(..) => failed(reason),
        // Lockstep: the member rerun waits out the same backoff, so the gang starts whole.
        Fate::Retry(_, t) if attempts_made < job.attempts.max(1) => Outcome::Retry {
            reason,
            not_before: t.not_before.unwrap_or(now),
        },
        // Not reached while members run in lockstep: the member sent back had attempts left.
        Fate::Retry(i, t) => failed(format!(
            "{FAILED_PREFIX}{}",
            story(job, Some((i, t)), TaskStatus::Pending)
        )),
    }
}

/// [`reconcile`] for a multinode job that the workflow's stop and the end of its services
/// left alone: see the module docs.
fn reconcile_gang(
    actions: &mut Vec<Action>,
    ended: &mut HashMap<TaskId, TaskStatus>,
    job: &JobView,
    blocker: Option<&(String, TaskStatus)>,
    ready: bool,
    now: Millis,
) {
    let mut members: Vec<(u32, &TaskView)> = job
        .tasks
        .iter()
        .enumerate()
        .map(|(pos, t)| (index_of(pos, t), t))
        .collect();
    members.sort_by_key(|(i, _)| *i);
    let waiting = |t: &TaskView| t.live.is_none() && t.status == TaskStatus::Pending;

    // A gang never ran before its dependencies were done, so its members wait together.
    if let Some((dep, status)) = blocker {
        for (_, t) in members.iter().filter(|(_, t)| waiting(t)) {
            ended.insert(t.id, TaskStatus::Failed);
            actions.push(Action::EndTask {
                task: t.id,
                status: TaskStatus::Failed,
                reason: format!("dependency {dep} ended {status}"),
            });
        }
    }

    let live: Vec<(&TaskView, &LiveAttempt)> = members
        .iter()
        .filter_map(|(_, t)| Some((*t, t.live.as_ref()?)))
        .collect();
    let broken = job.ended.total() > 0 || live.len() < members.len();
    if !live.is_empty() && broken {
        for (_, a) in live.iter().filter(|(_, a)| a.stop_sent.is_none()) {
            actions.push(Action::StopAttempt {
                attempt: a.id,
                cause: EndCause::Gang,
            });
        }
    } else if let (Some(limit), Some((_, head))) = (job.timeout_ms, live.first()) {
        // The head runs the command: the job's time is its time.
        if let (Some(since), None) = (head.running_since, head.stop_sent) {
            if now.saturating_sub(since) >= limit as i64 {
                actions.push(Action::StopAttempt {
                    attempt: head.id,
                    cause: EndCause::Timeout,
                });
            }
        }
    }
    if blocker.is_some() {
        return;
    }

    // The gang's fate is sealed: members sent back for a rerun at the same moment end with it.
    if let Some(f) = fate(job, None) {
        let status = match f {
            Fate::Finished => Some(TaskStatus::Finished),
            Fate::Ended(s, _) => Some(s),
            Fate::Retry(..) => None,
        };
        if let Some(status) = status {
            let reason = fate_reason(job, &f);
            for (_, t) in members.iter().filter(|(_, t)| waiting(t)) {
                ended.insert(t.id, status);
                actions.push(Action::EndTask {
                    task: t.id,
                    status,
                    reason: reason.clone(),
                });
            }
            return;
        }
    }

    let whole = job.pending_unlisted == 0
        && job.ended.total() == 0
        && job.gang == Some(members.len() as u32)
        && members.iter().all(|(_, t)| waiting(t));
    // Still backing off after the gang's last run: its members' reasons say until when.
    let backing_off = members
        .iter()
        .any(|(_, t)| t.not_before.is_some_and(|at| now < at));
    if ready && whole && !backing_off {
        actions.push(Action::PlaceGang {
            tasks: members.iter().map(|(_, t)| t.id).collect(),
        });
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
