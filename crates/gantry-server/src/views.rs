//! The store's rows as core sees them: what the controller's tick and an agent's report both
//! hand `gantry_core::engine`.

use std::collections::HashMap;

use gantry_api::TaskStatus;
use gantry_core::engine::{Ended, LiveAttempt, TaskView, WorkflowView};
use gantry_store::{ActiveWorkflow, AttemptRow, TaskRow};
use uuid::Uuid;

use crate::plan::{self, job_view_of, WorkflowPlan};

pub(crate) fn task_label(t: &TaskRow) -> String {
    plan::task_label(&t.job, t.index)
}

/// A task as core sees it, with its live attempt (the one `live_attempt` names).
pub(crate) fn task_view_of(t: &TaskRow, live: Option<&AttemptRow>) -> TaskView {
    TaskView {
        id: t.id,
        status: t.status,
        index: t.index,
        reason: t.reason.clone(),
        attempts_made: t.attempts,
        not_before: t.not_before,
        live: live.map(|a| LiveAttempt {
            id: a.id,
            status: a.status,
            running_since: a.running_at,
            stop_sent: a.stop_sent,
        }),
    }
}

pub(crate) fn view_of(aw: &ActiveWorkflow, plan: &WorkflowPlan) -> WorkflowView {
    let live: HashMap<Uuid, &gantry_store::AttemptRow> =
        aw.live.iter().map(|a| (a.id, a)).collect();
    let mut by_job: HashMap<&str, Vec<&TaskRow>> = HashMap::new();
    for t in &aw.tasks {
        by_job.entry(t.job.as_str()).or_default().push(t);
    }
    let mut ended: HashMap<&str, Ended> = HashMap::new();
    for c in &aw.ended {
        ended
            .entry(c.job.as_str())
            .or_default()
            .add(c.status, c.count);
    }
    let pending: HashMap<&str, u32> = aw
        .pending
        .iter()
        .map(|c| (c.job.as_str(), c.count))
        .collect();
    let jobs = plan
        .jobs
        .iter()
        .map(|jp| {
            let mut jv = job_view_of(jp);
            jv.ended = ended.get(jp.name.as_str()).copied().unwrap_or_default();
            let listed = by_job.get(jp.name.as_str()).map_or(0, |ts| {
                ts.iter()
                    .filter(|t| t.status == TaskStatus::Pending)
                    .count() as u32
            });
            jv.pending_unlisted = pending
                .get(jp.name.as_str())
                .map_or(0, |n| n.saturating_sub(listed));
            jv.tasks = by_job
                .remove(jp.name.as_str())
                .unwrap_or_default()
                .into_iter()
                .map(|t| task_view_of(t, t.live_attempt.and_then(|a| live.get(&a).copied())))
                .collect();
            jv
        })
        .collect();
    WorkflowView {
        status: aw.workflow.status,
        stop_requested: aw.workflow.stop_requested,
        jobs,
    }
}
