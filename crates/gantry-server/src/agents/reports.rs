//! The one attempt-end applier: every end of an attempt, reported by its agent or decided by
//! the controller (a start that could not be prepared), goes through here. Core decides what
//! the end means for the task (`attempt_outcome`, and a gang's `member_outcome`); the store
//! applies it only to the task's current attempt.

use std::collections::HashMap;

use gantry_api::{EndCause, TaskStatus};
use gantry_store::{AttemptEnd, TaskNext};
use uuid::Uuid;

use super::lock;
use crate::state::{now_ms, AppState};

/// Ends an attempt and moves its task on, as core decides from the attempt's cause.
pub async fn end_attempt(
    st: &AppState,
    attempt_id: Uuid,
    exit_code: Option<i32>,
    cause: EndCause,
    reason: Option<String>,
) -> anyhow::Result<()> {
    let attempt = st.store.attempt(attempt_id).await?;
    end_read_attempt(st, attempt, exit_code, cause, reason).await
}

/// [`end_attempt`] for an attempt the caller has read already (every end report has).
pub(super) async fn end_read_attempt(
    st: &AppState,
    attempt: gantry_store::AttemptRow,
    exit_code: Option<i32>,
    cause: EndCause,
    reason: Option<String>,
) -> anyhow::Result<()> {
    let attempt_id = attempt.id;
    lock(&st.transfer_progress).remove(&attempt_id);
    lock(&st.probe_failures).remove(&attempt_id);
    let task = st.store.task(attempt.task_id).await?;
    let plan = st
        .cache
        .plan_of(st.store.as_ref(), attempt.workflow_id)
        .await?;
    let jp = plan.job(&task.job).ok_or_else(|| {
        anyhow::anyhow!("workflow {} has no job {}", attempt.workflow_id, task.job)
    })?;
    let mut job = crate::plan::job_view_of(jp);
    // A member's end depends on its gang's other members: core reads them from the job.
    if jp.multinode.is_some() {
        job.tasks = gang_members(st, &task).await?;
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
            crate::logs::last_line(st, attempt_id, "stderr")
        }
        (r, _) => r,
    };
    // Say which hold took the node's work away.
    let reason = match (reason, cause) {
        (None, EndCause::Evicted) => crate::holds::active_by_node(st).await.ok().and_then(|m| {
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
    let outcome = st
        .store
        .end_attempt(
            &AttemptEnd {
                attempt_id,
                status,
                cause,
                exit_code,
                reason,
                task: next,
            },
            now,
        )
        .await?;
    if !outcome.is_ended() {
        // A repeated or stale report: the store changed nothing, and the agent is not told.
        tracing::debug!("end of attempt {attempt_id} not applied: {outcome:?}");
        return Ok(());
    }
    st.wake_controller();
    Ok(())
}

/// Every member of `task`'s multinode job, with its live attempt.
async fn gang_members(
    st: &AppState,
    task: &gantry_store::TaskRow,
) -> anyhow::Result<Vec<gantry_core::engine::TaskView>> {
    let attempts: HashMap<Uuid, gantry_store::AttemptRow> = st
        .store
        .attempts(task.workflow_id)
        .await?
        .into_iter()
        .filter(|a| a.ended_at.is_none())
        .map(|a| (a.id, a))
        .collect();
    let mut members: Vec<gantry_store::TaskRow> = st
        .store
        .tasks(task.workflow_id)
        .await?
        .into_iter()
        .filter(|t| t.job == task.job)
        .collect();
    members.sort_by_key(|t| t.index);
    Ok(members
        .iter()
        .map(|t| crate::views::task_view_of(t, t.live_attempt.and_then(|a| attempts.get(&a))))
        .collect())
}
