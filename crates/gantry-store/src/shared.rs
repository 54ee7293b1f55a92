//! What both backends share besides row decoding (`rows.rs`): sqlx's errors as the trait's,
//! the unique-violation mapping, the placement guard's fit check, and the texts of the events
//! whose wording is more than a line, so that an event reads the same whichever backend
//! wrote it.

use gantry_api::{EndCause, TaskStatus};
use uuid::Uuid;

use crate::*;

// sqlx's errors become the trait's backend-neutral one here, so that `?` works on queries
// throughout `sqlite/` and `postgres/` while no sqlx type appears in `StoreError`.
impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Backend(Box::new(e))
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        StoreError::Backend(Box::new(e))
    }
}

/// `res`, with a unique-key violation turned into [`StoreError::Conflict`] with `what` (the
/// name is taken).
pub(crate) fn conflict_if_taken<T>(res: Result<T>, what: impl FnOnce() -> String) -> Result<T> {
    match res {
        Err(StoreError::Backend(e))
            if matches!(
                e.downcast_ref::<sqlx::Error>(),
                Some(sqlx::Error::Database(d)) if d.is_unique_violation()
            ) =>
        {
            Err(StoreError::Conflict(what()))
        }
        other => other,
    }
}

pub(crate) fn ev(
    workflow_id: Option<Uuid>,
    node: Option<&str>,
    task: Option<String>,
    kind: &str,
    message: String,
) -> NewEvent {
    NewEvent {
        workflow_id,
        node: node.map(str::to_string),
        task,
        kind: kind.into(),
        message,
    }
}

/// A node as the applier re-checks placements on it: its state and capacity, and what its
/// live attempts hold, those this plan adds included. A backend reads it in the plan's
/// transaction, so the check and the commit see the same rows.
pub(crate) struct NodeFit {
    state: String,
    millicpus: u64,
    memory_bytes: u64,
    devices: std::collections::BTreeMap<String, u32>,
    /// What its live attempts hold (`need.exclusive`: one of them is exclusive).
    pub live: NodeUsage,
}

impl NodeFit {
    /// A node in `state` with `capacity` (the agent's JSON), before its live attempts are
    /// added to `live`.
    pub fn new(state: String, capacity: &str) -> Self {
        // As the controller reads it: a capacity it cannot read is none at all.
        let cap: gantry_api::agent::Capacity = serde_json::from_str(capacity).unwrap_or_default();
        NodeFit {
            state,
            millicpus: u64::from(cap.cpus) * 1000,
            memory_bytes: cap.memory_bytes,
            devices: cap.devices,
            live: NodeUsage::default(),
        }
    }

    /// Why `need` does not fit here now, as the scheduler decides fit; `None` when it fits.
    pub fn refusal(&self, need: &AttemptNeed) -> Option<String> {
        if self.state != "READY" {
            return Some(format!("it is {}", self.state));
        }
        if self.live.need.exclusive {
            return Some("an exclusive attempt runs there".into());
        }
        if need.exclusive && self.live.attempts > 0 {
            return Some(format!(
                "it is exclusive and {} attempts run there",
                self.live.attempts
            ));
        }
        if self.live.need.millicpus + need.millicpus > self.millicpus {
            return Some(format!(
                "{} of {} millicores are taken, it needs {}",
                self.live.need.millicpus, self.millicpus, need.millicpus
            ));
        }
        if self.live.need.memory_bytes + need.memory_bytes > self.memory_bytes {
            return Some(format!(
                "{} of {} bytes of memory are taken, it needs {}",
                self.live.need.memory_bytes, self.memory_bytes, need.memory_bytes
            ));
        }
        for (d, n) in &need.devices {
            let used = self.live.need.devices.get(d).copied().unwrap_or(0);
            let total = self.devices.get(d).copied().unwrap_or(0);
            if used + n > total {
                return Some(format!("{used} of {total} {d} are taken, it needs {n}"));
            }
        }
        None
    }
}

/// Why the guarded placement of task `label` (in `status`) on `node` moved no row.
pub(crate) fn not_placed(label: &str, status: TaskStatus, node: &str) -> StoreError {
    StoreError::Refused(if status != TaskStatus::Pending {
        format!("task {label} is {status}, not PENDING: not placed on {node}")
    } else {
        format!("task {label} has a live attempt already: not placed on {node}")
    })
}

/// A cause as an event's words: `NODE_LOST` is "node lost".
fn cause_words(cause: EndCause) -> String {
    cause.as_str().to_lowercase().replace('_', " ")
}

/// The `attempt.ended` event's message.
pub(crate) fn attempt_ended(end: &AttemptEnd, number: i64, node: &str) -> String {
    let what = match (end.cause, end.exit_code) {
        (EndCause::Exit, Some(c)) => format!("exited with code {c}"),
        (cause, Some(c)) => format!("{} (exit code {c})", cause_words(cause)),
        (cause, None) => cause_words(cause),
    };
    let detail = end
        .reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    format!("attempt {number} on {node} {what}{detail}")
}

/// What an attempt's end does to its task: (status, reason, ended_at, not_before).
pub(crate) fn task_next(
    next: &TaskNext,
    now: Millis,
) -> (TaskStatus, Option<String>, Option<Millis>, Option<Millis>) {
    match next {
        TaskNext::Retry { reason, not_before } => (
            TaskStatus::Pending,
            Some(reason.clone()),
            None,
            Some(*not_before),
        ),
        TaskNext::Final { status, reason } => (*status, reason.clone(), Some(now), None),
    }
}

/// The `task.status` event's message after an attempt's end moved its task.
pub(crate) fn task_moved(next: &TaskNext, status: TaskStatus, reason: Option<String>) -> String {
    match (next, reason) {
        (TaskNext::Retry { .. }, Some(r)) => format!("PENDING: {r}"),
        (_, Some(r)) => format!("{status}: {r}"),
        (_, None) => status.to_string(),
    }
}

/// The event of a big array's unborn tasks ended as a whole (`EndPending`); the range is the
/// event's task.
pub(crate) fn unborn_ended(status: TaskStatus, reason: &str, n: u64) -> String {
    cap_text(&format!(
        "{status}: {reason} ({n} task(s) that never started)"
    ))
    .into_owned()
}

/// The `task.stopping` event's message.
pub(crate) fn stopping(node: &str, cause: EndCause) -> String {
    format!("stopping on {node}: {}", cause_words(cause))
}

/// The `endpoint.takeover` event's message.
pub(crate) fn takeover_requested(t: &TakeoverRow) -> String {
    match t.from_workflow {
        Some(from) => format!(
            "takeover of endpoint {} by {} requested by {} (from workflow {})",
            t.endpoint,
            t.to_service,
            t.requested_by,
            &from.to_string()[..8]
        ),
        None => format!(
            "{} attaches to endpoint {} (requested by {})",
            t.to_service, t.endpoint, t.requested_by
        ),
    }
}

/// What a call to `acquire_lease` does with the lease as stored (holder, token, expiry).
pub(crate) enum LeaseStep {
    /// The caller holds it: the expiry moves on, the token stays.
    Renew(i64),
    /// Another holder's lease has not expired.
    Busy,
    /// The caller takes it under `token`: a new lease, or one whose holder let it expire.
    Take { token: i64, event: String },
}

pub(crate) fn lease_step(
    name: &str,
    stored: Option<(String, i64, Millis)>,
    holder: &str,
    now: Millis,
) -> LeaseStep {
    match stored {
        None => LeaseStep::Take {
            token: 1,
            event: format!("{holder} holds lease {name} (token 1)"),
        },
        Some((h, token, _)) if h == holder => LeaseStep::Renew(token),
        Some((_, _, expires)) if expires > now => LeaseStep::Busy,
        Some((was, token, expires)) => LeaseStep::Take {
            token: token + 1,
            event: format!(
                "{holder} holds lease {name} (token {}), taken from {was}, whose lease ran out {:.1}s ago",
                token + 1,
                (now - expires) as f64 / 1000.0
            ),
        },
    }
}

/// A fence checked against the lease as stored (holder and token): [`StoreError::Deposed`]
/// unless the token is still the lease's.
pub(crate) fn fence_holds(f: &Fence, stored: Option<(String, i64)>) -> Result<()> {
    match stored {
        Some((_, token)) if token == f.token => Ok(()),
        Some((holder, token)) => Err(StoreError::Deposed(format!(
            "lease {} is held by {holder} under token {token}, not token {}",
            f.lease, f.token
        ))),
        None => Err(StoreError::Deposed(format!("no lease {} is held", f.lease))),
    }
}

/// A hold decision made on holds that have changed since (`HoldChange::Expect`).
pub(crate) fn holds_moved(expected: i64, now: i64) -> StoreError {
    StoreError::Refused(format!(
        "the holds changed since the decision read them (version {expected}, now {now})"
    ))
}
