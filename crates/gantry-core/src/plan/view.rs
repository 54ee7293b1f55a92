//! A job's plan as the workflow state machine sees it.

use crate::engine::{Dependency, JobView, RetryOn, ServiceView};

use super::JobPlan;

/// The job's policy from its plan; its tasks and counts are the caller's to fill in.
pub fn job_view_of(j: &JobPlan) -> JobView {
    JobView {
        name: j.name.clone(),
        depends_on: j
            .depends_on
            .iter()
            .map(|d| Dependency {
                name: d.name.clone(),
                running: d.running,
            })
            .collect(),
        service: j
            .service
            .as_ref()
            .map(|s| ServiceView { persist: s.persist }),
        concurrency: j.concurrency,
        attempts: j.attempts,
        retry_on: RetryOn {
            failure: j.retry_on_failure,
            node: j.retry_on_node,
        },
        timeout_ms: j.timeout_ms,
        tasks: vec![],
        ended: Default::default(),
        pending_unlisted: 0,
        gang: j.multinode.as_ref().map(|m| m.nodes),
    }
}
