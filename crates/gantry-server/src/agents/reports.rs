//! The one attempt-end applier: every end of an attempt, reported by its agent or decided by
//! the controller (a start that could not be prepared), goes through here. Core decides what
//! the end means for the task (`attempt_outcome`, and a gang's `member_outcome`); the store
//! applies it only to the task's current attempt.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use gantry_api::{EndCause, TaskStatus};
use gantry_store::{AttemptEnd, EndOutcome, Millis, Store, TaskNext};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::cache::Cache;
use crate::clock::now_ms;
use crate::group::Group;
use crate::news::News;

/// The applier and what it may use: the store (its ends committed as a group: the ends that
/// arrive together share a transaction), the plan cache (what an end means depends on the
/// job), the agents' news (an ended attempt's is over), the data directory (a failed build's
/// last line of output) and the controller's wake notifier.
pub struct Ends {
    pub(crate) store: Arc<dyn Store>,
    commits: Group<(AttemptEnd, Millis), EndOutcome>,
    pub(crate) cache: Arc<Cache>,
    pub(crate) news: Arc<News>,
    pub(crate) data_dir: PathBuf,
    pub(crate) wake: Arc<Notify>,
}

/// At most this many ends share one transaction (a long one would hold the writer).
const ENDS_PER_COMMIT: usize = 256;

impl Ends {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        cache: Arc<Cache>,
        news: Arc<News>,
        data_dir: PathBuf,
        wake: Arc<Notify>,
    ) -> Self {
        let writer = store.clone();
        let commits = Group::new(ENDS_PER_COMMIT, move |batch: Vec<(AttemptEnd, Millis)>| {
            let store = writer.clone();
            async move { Ok(store.end_attempts(&batch).await?) }
        });
        Ends {
            store,
            commits,
            cache,
            news,
            data_dir,
            wake,
        }
    }

    /// Ends an attempt and moves its task on, as core decides from the attempt's cause.
    pub async fn end(
        &self,
        attempt_id: Uuid,
        exit_code: Option<i32>,
        cause: EndCause,
        reason: Option<String>,
    ) -> anyhow::Result<()> {
        let attempt = self.store.attempt(attempt_id).await?;
        end_read_attempt(self, attempt, exit_code, cause, reason).await
    }
}

/// [`Ends::end`] for an attempt the caller has read already (every end report has).
pub(super) async fn end_read_attempt(
    ends: &Ends,
    attempt: gantry_store::AttemptRow,
    exit_code: Option<i32>,
    cause: EndCause,
    reason: Option<String>,
) -> anyhow::Result<()> {
    let attempt_id = attempt.id;
    ends.news.forget(attempt_id);
    let task = ends.store.task(attempt.task_id).await?;
    let plan = ends
        .cache
        .plan_of(ends.store.as_ref(), attempt.workflow_id)
        .await?;
    let jp = plan.job(&task.job).ok_or_else(|| {
        anyhow::anyhow!("workflow {} has no job {}", attempt.workflow_id, task.job)
    })?;
    let mut job = crate::plan::job_view_of(jp);
    // A member's end depends on its gang's other members: core reads them from the job.
    if jp.multinode.is_some() {
        job.tasks = gang_members(ends.store.as_ref(), &task).await?;
    }
    // A stop the server asked for names its own cause (timeout, stopped, evicted); the agent
    // only knows the process ended.
    let cause = match (cause, attempt.stop_sent) {
        (EndCause::Exit, Some(asked)) => asked,
        (c, _) => c,
    };
    // A failed build says why in its last line of output.
    let reason = match (reason, cause) {
        (None, EndCause::Exit) if task.job.starts_with("build:") && exit_code != Some(0) => {
            crate::logs::last_line(&ends.data_dir, attempt_id, "stderr")
        }
        (r, _) => r,
    };
    // Say which hold took the node's work away.
    let reason = match (reason, cause) {
        (None, EndCause::Evicted) => crate::holds::active_by_node(ends.store.as_ref())
            .await
            .ok()
            .and_then(|m| {
                m.get(&attempt.node)
                    .and_then(|hs| hs.iter().find(|h| h.kind == gantry_store::HoldKind::Evict))
                    .map(crate::holds::describe)
            }),
        (r, _) => r,
    };
    // One time for the end and the backoff it starts, so the next attempt waits the whole
    // backoff after the end the store records.
    let now = now_ms();
    let outcome = gantry_core::engine::member_outcome(
        &job,
        task.index,
        task.attempts,
        exit_code,
        cause,
        &attempt.node,
        now,
    );
    // A start error's own message is what a person needs to see on the task.
    let detail = |r: String| match (&reason, cause) {
        (Some(why), EndCause::StartError | EndCause::Evicted | EndCause::Exit) => {
            format!("{r}: {why}")
        }
        _ => r,
    };
    let next = match outcome {
        gantry_core::engine::Outcome::Retry { reason, not_before } => TaskNext::Retry {
            reason: detail(reason),
            not_before,
        },
        gantry_core::engine::Outcome::Final { status, reason } => TaskNext::Final {
            status,
            reason: reason.map(detail),
        },
    };
    // The attempt's own status, whatever becomes of its task.
    let status = match cause {
        EndCause::Exit if exit_code == Some(0) => TaskStatus::Finished,
        EndCause::Stopped => TaskStatus::Stopped,
        _ => TaskStatus::Failed,
    };
    let end = AttemptEnd {
        attempt_id,
        status,
        cause,
        exit_code,
        reason,
        task: next,
    };
    let outcome = ends.commits.write((end, now)).await?;
    if !outcome.is_ended() {
        // A repeated or stale report: the store changed nothing, and the agent is not told.
        tracing::debug!("end of attempt {attempt_id} not applied: {outcome:?}");
        return Ok(());
    }
    ends.wake.notify_one();
    Ok(())
}

/// Every member of `task`'s multinode job, with its live attempt: the job's rows and their
/// attempts only, whatever else the workflow holds.
async fn gang_members(
    store: &dyn Store,
    task: &gantry_store::TaskRow,
) -> anyhow::Result<Vec<gantry_core::engine::TaskView>> {
    let limit = gantry_spec::MAX_MULTINODE_NODES;
    let members = store
        .job_tasks(task.workflow_id, &task.job, None, limit)
        .await?;
    let ids: Vec<Uuid> = members.iter().map(|t| t.id).collect();
    let attempts: HashMap<Uuid, gantry_store::AttemptRow> = store
        .attempts_of(&ids)
        .await?
        .into_iter()
        .filter(|a| a.ended_at.is_none())
        .map(|a| (a.id, a))
        .collect();
    Ok(members
        .iter()
        .map(|t| crate::views::task_view_of(t, t.live_attempt.and_then(|a| attempts.get(&a))))
        .collect())
}
