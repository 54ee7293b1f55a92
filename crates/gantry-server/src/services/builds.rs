//! Image builds as the people who ran them see them: the builds of their newest workflows.

use gantry_api::TaskStatus;
use uuid::Uuid;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// One build step of a workflow and where it is.
pub struct RecentBuild {
    pub image: String,
    pub workflow_id: Uuid,
    pub workflow_name: String,
    /// The build's task, whose log is the build's.
    pub job: String,
    pub status: TaskStatus,
    pub node: Option<String>,
    pub reason: Option<String>,
    /// When it ended, or when its task was made if it has not.
    pub at: i64,
}

/// The builds of the caller's `workflows` newest workflows they may see, newest first. Each
/// workflow's builds come from its plan, then each build's one task: not every task and
/// attempt of the workflow (an array may have thousands).
pub async fn recent(
    st: &AppState,
    c: &Caller,
    workflows: usize,
) -> Result<Vec<RecentBuild>, ApiError> {
    let mut list = super::workflows::list(st, c, None).await?;
    list.sort_by_key(|w| std::cmp::Reverse(w.created_at));
    let mut out = vec![];
    for w in list.iter().take(workflows) {
        let plan = st
            .cache
            .plan_of(st.store.as_ref(), w.id)
            .await
            .map_err(|e| ApiError::Internal(format!("workflow {}: {e:#}", w.id)))?;
        for b in &plan.builds {
            let Some(t) = st.store.job_task(w.id, &b.task_name()).await? else {
                continue;
            };
            out.push(RecentBuild {
                image: b.name.clone(),
                workflow_id: w.id,
                workflow_name: w.name.clone(),
                at: t.ended_at.unwrap_or(t.created_at),
                job: t.job,
                status: t.status,
                node: t.node,
                reason: t.reason,
            });
        }
    }
    Ok(out)
}
