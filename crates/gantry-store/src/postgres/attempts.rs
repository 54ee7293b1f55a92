//! The controller's plans (`apply`) and attempts: placement, running, ends.

use super::*;

/// A statement on `attempts` followed by what the attempt's event names, returned by the
/// statement that changes the attempt (`RETURNING`), so that no read follows: its task,
/// workflow, node and number, and the task's job and index. A literal, as sqlx caches
/// prepared statements by their text: no string is built per job.
macro_rules! returning_attempt_ident {
    ($sql:literal) => {
        concat!(
            $sql,
            " RETURNING task_id, workflow_id, node, number,
              (SELECT job FROM tasks t WHERE t.id = attempts.task_id) AS job,
              (SELECT idx FROM tasks t WHERE t.id = attempts.task_id) AS idx"
        )
    };
}

/// (workflow, node, task label, attempt number) from a row `returning_attempt_ident!` made.
pub(super) fn attempt_ident(r: &PgRow) -> Result<(Uuid, String, String, i64)> {
    Ok((
        uuid(r.get("workflow_id"))?,
        r.get("node"),
        task_label(r.get("job"), r.get("idx")),
        r.get("number"),
    ))
}

/// (workflow id, "job[idx]", status) of a task, for event rows.
pub(super) async fn task_ident(
    tx: &mut Transaction<'_, Postgres>,
    task_id: Uuid,
) -> Result<(Uuid, String, TaskStatus)> {
    let r = sqlx::query("SELECT workflow_id, job, idx, status FROM tasks WHERE id = $1")
        .bind(task_id.to_string())
        .fetch_optional(&mut **tx)
        .await?
        .ok_or(StoreError::NotFound)?;
    Ok((
        uuid(r.get("workflow_id"))?,
        task_label(r.get("job"), r.get("idx")),
        parse(r.get("status"))?,
    ))
}

/// Ends a task that has not ended (as [`Change::EndTask`]), with its event, in the caller's
/// transaction; a task that ended already is left as it is.
pub(super) async fn end_task(
    tx: &mut Transaction<'_, Postgres>,
    task_id: Uuid,
    status: TaskStatus,
    reason: &str,
    now: Millis,
) -> Result<()> {
    let (wf, label, old) = task_ident(tx, task_id).await?;
    if old.is_terminal() {
        return Ok(());
    }
    sqlx::query("UPDATE tasks SET status = $1, reason = $2, ended_at = $3 WHERE id = $4")
        .bind(status.as_str())
        .bind(pg_text(reason))
        .bind(now)
        .bind(task_id.to_string())
        .execute(&mut **tx)
        .await?;
    event(
        tx,
        &ev(
            Some(wf),
            None,
            Some(label),
            "task.ended",
            format!("{status}: {reason}"),
        ),
        now,
    )
    .await?;
    Ok(())
}

/// The node a placement names, as the applier re-checks it ([`NodeFit`]), read in the plan's
/// transaction.
async fn node_fit(tx: &mut Transaction<'_, Postgres>, node: &str) -> Result<NodeFit> {
    let r = sqlx::query("SELECT state, capacity FROM nodes WHERE name = $1")
        .bind(node)
        .fetch_optional(&mut **tx)
        .await?
        .ok_or_else(|| StoreError::Refused(format!("node {node} is not registered")))?;
    let mut fit = NodeFit::new(r.get("state"), r.get("capacity"));
    let live = sqlx::query(
        "SELECT millicpus, memory_bytes, devices, exclusive FROM attempts
         WHERE node = $1 AND ended_at IS NULL",
    )
    .bind(node)
    .fetch_all(&mut **tx)
    .await?;
    for a in &live {
        fit.live.add(&need_of(a)?);
    }
    Ok(fit)
}

/// Why the guarded placement moved no row: the task is gone, is past PENDING, or has a live
/// attempt. Read only after the guard refused, inside the same transaction.
async fn placement_refusal(
    tx: &mut Transaction<'_, Postgres>,
    task_id: Uuid,
    node: &str,
) -> Result<StoreError> {
    let t = sqlx::query(
        "SELECT job, idx, status,
                EXISTS (SELECT 1 FROM attempts a
                        WHERE a.task_id = tasks.id AND a.ended_at IS NULL) AS live
         FROM tasks WHERE id = $1",
    )
    .bind(task_id.to_string())
    .fetch_optional(&mut **tx)
    .await?
    .ok_or(StoreError::NotFound)?;
    let label = task_label(t.get("job"), t.get("idx"));
    Ok(not_placed(&label, parse(t.get("status"))?, node))
}

impl PgStore {
    pub(super) async fn apply(&self, changes: &[Change], now: Millis) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        // Returning early drops `tx`, which rolls back whatever the plan did before a
        // refusal: a plan is applied whole or not at all.
        let mut tx = self.write_tx().await?;
        // Each node a placement names, read once per plan and added to as it is placed on.
        let mut fits: std::collections::HashMap<&str, NodeFit> = std::collections::HashMap::new();
        // How many of each job's tasks this plan places: as many of its unborn ones get rows.
        let mut placed: std::collections::BTreeMap<(Uuid, String), u32> = Default::default();
        for c in changes {
            match c {
                Change::CreateAttempt {
                    attempt_id,
                    task_id,
                    workflow_id,
                    node,
                    assignment,
                    need,
                } => {
                    // The guard is the statement that moves the task: it matches only a
                    // PENDING task with no live attempt, so two appliers (or a stale plan)
                    // cannot both place it. The row numbers the attempt and names it for the
                    // event (tasks.live_attempt has no foreign key, so the attempt's row may
                    // follow). A refusal reads the task once more, only to say why.
                    let r = sqlx::query(
                        "UPDATE tasks SET status = 'STARTED', reason = NULL, attempts = attempts + 1,
                                          live_attempt = $1, node = $2
                         WHERE id = $3 AND status = 'PENDING' AND live_attempt IS NULL
                           AND NOT EXISTS (SELECT 1 FROM attempts a
                                           WHERE a.task_id = tasks.id AND a.ended_at IS NULL)
                         RETURNING workflow_id, job, idx, attempts",
                    )
                    .bind(attempt_id.to_string())
                    .bind(node)
                    .bind(task_id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some(r) = r else {
                        return Err(placement_refusal(&mut tx, *task_id, node).await?);
                    };
                    let label = task_label(r.get("job"), r.get("idx"));
                    let fit = match fits.entry(node.as_str()) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert(node_fit(&mut tx, node).await?)
                        }
                    };
                    if let Some(why) = fit.refusal(need) {
                        return Err(StoreError::Refused(format!(
                            "task {label} does not fit on node {node}: {why}"
                        )));
                    }
                    fit.live.add(need);
                    let wf = uuid(r.get("workflow_id"))?;
                    *placed.entry((wf, r.get("job"))).or_default() += 1;
                    let number: i64 = r.get("attempts");
                    let devices = serde_json::to_string(&need.devices)
                        .map_err(|e| StoreError::Corrupt(format!("attempt devices: {e}")))?;
                    sqlx::query(
                        "INSERT INTO attempts (id, task_id, workflow_id, number, node, status, assignment, created_at,
                                               millicpus, memory_bytes, devices, exclusive)
                         VALUES ($1, $2, $3, $4, $5, 'STARTED', $6, $7, $8, $9, $10, $11)",
                    )
                    .bind(attempt_id.to_string())
                    .bind(task_id.to_string())
                    .bind(workflow_id.to_string())
                    .bind(number)
                    .bind(node)
                    .bind(assignment)
                    .bind(now)
                    .bind(need.millicpus as i64)
                    .bind(need.memory_bytes as i64)
                    .bind(devices)
                    .bind(need.exclusive)
                    .execute(&mut *tx)
                    .await?;
                    event(
                        &mut tx,
                        &ev(
                            Some(wf),
                            Some(node),
                            Some(label),
                            "task.placed",
                            format!("attempt {number} placed on {node}"),
                        ),
                        now,
                    )
                    .await?;
                }
                Change::EndTask {
                    task_id,
                    status,
                    reason,
                } => {
                    end_task(&mut tx, *task_id, *status, reason, now).await?;
                }
                Change::EndPending {
                    workflow_id,
                    job,
                    status,
                    reason,
                } => {
                    // One event per task, as `EndTask` writes (the label is `task_label`'s,
                    // spelled in SQL), then the tasks themselves: one statement each, however
                    // many tasks wait.
                    sqlx::query(
                        "INSERT INTO events (time, workflow_id, node, task, kind, message)
                         SELECT $1, workflow_id, NULL,
                                CASE WHEN idx IS NULL THEN job ELSE job || '[' || idx || ']' END,
                                'task.ended', $2
                         FROM tasks
                         WHERE workflow_id = $3 AND job = $4 AND status = 'PENDING'
                         ORDER BY idx",
                    )
                    .bind(now)
                    .bind(pg_text(&format!("{status}: {reason}")).into_owned())
                    .bind(workflow_id.to_string())
                    .bind(job)
                    .execute(&mut *tx)
                    .await?;
                    sqlx::query(
                        "UPDATE tasks SET status = $1, reason = $2, ended_at = $3
                         WHERE workflow_id = $4 AND job = $5 AND status = 'PENDING'",
                    )
                    .bind(status.as_str())
                    .bind(pg_text(reason))
                    .bind(now)
                    .bind(workflow_id.to_string())
                    .bind(job)
                    .execute(&mut *tx)
                    .await?;
                    end_unborn(&mut tx, *workflow_id, job, *status, reason, now).await?;
                }
                Change::TaskWaiting { task_id, reason } => {
                    sqlx::query(
                        "UPDATE tasks SET reason = $1 WHERE id = $2 AND status = 'PENDING'",
                    )
                    .bind(pg_opt(reason))
                    .bind(task_id.to_string())
                    .execute(&mut *tx)
                    .await?;
                }
                Change::SetWorkflow {
                    workflow_id,
                    status,
                    reason,
                } => {
                    let ended = status.is_terminal().then_some(now);
                    let n = sqlx::query(
                        "UPDATE workflows SET status = $1, reason = $2, ended_at = $3
                         WHERE id = $4 AND status IN ('PENDING', 'RUNNING') AND status != $5",
                    )
                    .bind(status.as_str())
                    .bind(pg_opt(reason))
                    .bind(ended)
                    .bind(workflow_id.to_string())
                    .bind(status.as_str())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    if n > 0 {
                        let msg = match reason {
                            Some(r) => format!("workflow {status}: {r}"),
                            None => format!("workflow {status}"),
                        };
                        event(
                            &mut tx,
                            &ev(Some(*workflow_id), None, None, "workflow.status", msg),
                            now,
                        )
                        .await?;
                    }
                }
                Change::StopSent { attempt_id, cause } => {
                    let r = sqlx::query(returning_attempt_ident!(
                        "UPDATE attempts SET stop_sent = COALESCE(stop_sent, $1) WHERE id = $2"
                    ))
                    .bind(cause.as_str())
                    .bind(attempt_id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or(StoreError::NotFound)?;
                    let (wf, node, label, _) = attempt_ident(&r)?;
                    event(
                        &mut tx,
                        &ev(
                            Some(wf),
                            Some(&node),
                            Some(label),
                            "task.stopping",
                            stopping(&node, *cause),
                        ),
                        now,
                    )
                    .await?;
                }
                Change::Event(e) => event(&mut tx, e, now).await?,
                Change::Fence(f) => leases::check_fence(&mut tx, f).await?,
            }
        }
        for ((wf, job), n) in &placed {
            give_rows(&mut tx, *wf, job, *n, now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn attempt(&self, id: Uuid) -> Result<AttemptRow> {
        let r = sqlx::query("SELECT * FROM attempts WHERE id = $1")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        attempt_row(&r)
    }

    pub(super) async fn task(&self, id: Uuid) -> Result<TaskRow> {
        let r = sqlx::query("SELECT * FROM tasks WHERE id = $1")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        task_row(&r)
    }

    /// Several agents' "running" reports in one transaction (one commit for them all).
    pub(super) async fn attempts_running(&self, ids: &[(Uuid, Millis)]) -> Result<Vec<bool>> {
        let mut tx = self.write_tx().await?;
        let mut changed = Vec::with_capacity(ids.len());
        for &(id, now) in ids {
            changed.push(running_one(&mut tx, id, now).await?);
        }
        tx.commit().await?;
        Ok(changed)
    }

    /// Several ends in one transaction (one commit for them all): each is applied, or found
    /// stale, as it would be alone, in the order given.
    pub(super) async fn end_attempts(
        &self,
        ends: &[(AttemptEnd, Millis)],
    ) -> Result<Vec<EndOutcome>> {
        let mut tx = self.write_tx().await?;
        let mut outcomes = Vec::with_capacity(ends.len());
        for (end, now) in ends {
            outcomes.push(end_one(&mut tx, end, *now).await?);
        }
        tx.commit().await?;
        Ok(outcomes)
    }

    pub(super) async fn node_usage(&self, node: Option<&str>) -> Result<Vec<NodeUsage>> {
        // The live attempts only (a partial index holds them by node).
        let live = sqlx::query(
            "SELECT node, millicpus, memory_bytes, devices, exclusive FROM attempts
             WHERE ended_at IS NULL AND ($1 IS NULL OR node = $1)",
        )
        .bind(node)
        .fetch_all(&self.pool)
        .await?;
        let mut by_node: std::collections::BTreeMap<String, NodeUsage> = Default::default();
        for a in &live {
            let node: String = a.get("node");
            by_node
                .entry(node.clone())
                .or_insert_with(|| NodeUsage {
                    node,
                    ..Default::default()
                })
                .add(&need_of(a)?);
        }
        Ok(by_node.into_values().collect())
    }

    pub(super) async fn live_attempts_on(&self, node: &str) -> Result<Vec<AttemptRow>> {
        sqlx::query(
            "SELECT * FROM attempts WHERE node = $1 AND ended_at IS NULL ORDER BY created_at",
        )
        .bind(node)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(attempt_row)
        .collect()
    }
}

async fn running_one(tx: &mut Transaction<'_, Postgres>, id: Uuid, now: Millis) -> Result<bool> {
    let Some(r) = sqlx::query(returning_attempt_ident!(
        "UPDATE attempts SET status = 'RUNNING', running_at = $1
             WHERE id = $2 AND status = 'STARTED' AND ended_at IS NULL"
    ))
    .bind(now)
    .bind(id.to_string())
    .fetch_optional(&mut **tx)
    .await?
    else {
        return Ok(false);
    };
    let (wf, node, label, _) = attempt_ident(&r)?;
    sqlx::query("UPDATE tasks SET status = 'RUNNING' WHERE id = $1 AND live_attempt = $2 AND status = 'STARTED'")
            .bind(r.get::<&str, _>("task_id"))
            .bind(id.to_string())
            .execute(&mut **tx)
            .await?;
    event(
        tx,
        &ev(
            Some(wf),
            Some(&node),
            Some(label),
            "task.running",
            format!("running on {node}"),
        ),
        now,
    )
    .await?;
    Ok(true)
}

async fn end_one(
    tx: &mut Transaction<'_, Postgres>,
    end: &AttemptEnd,
    now: Millis,
) -> Result<EndOutcome> {
    // Only the task's current attempt ends: a stale report never moves a task another
    // attempt has taken over, and a repeated one changes nothing.
    let Some(state) = sqlx::query(
        "SELECT a.ended_at IS NOT NULL AS ended,
                    COALESCE(t.live_attempt = a.id, FALSE) AS current
             FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE a.id = $1",
    )
    .bind(end.attempt_id.to_string())
    .fetch_optional(&mut **tx)
    .await?
    else {
        return Ok(EndOutcome::Unknown);
    };
    if state.get::<bool, _>("ended") {
        return Ok(EndOutcome::AlreadyEnded);
    }
    // An attempt that is not its task's current one still ends (else it would count as
    // live on its node for ever); only its task is left alone (`live_attempt = ?` below).
    let current = state.get::<bool, _>("current");
    let Some(r) = sqlx::query(returning_attempt_ident!(
        "UPDATE attempts SET status = $1, cause = $2, exit_code = $3, reason = $4, ended_at = $5
             WHERE id = $6 AND ended_at IS NULL"
    ))
    .bind(end.status.as_str())
    .bind(end.cause.as_str())
    .bind(end.exit_code.map(i64::from))
    .bind(pg_opt(&end.reason))
    .bind(now)
    .bind(end.attempt_id.to_string())
    .fetch_optional(&mut **tx)
    .await?
    else {
        return Ok(EndOutcome::AlreadyEnded);
    };
    let task_id = uuid(r.get("task_id"))?;
    let (wf, node, label, number) = attempt_ident(&r)?;
    event(
        tx,
        &ev(
            Some(wf),
            Some(&node),
            Some(label.clone()),
            "attempt.ended",
            attempt_ended(end, number, &node),
        ),
        now,
    )
    .await?;
    let (status, reason, ended, not_before) = task_next(&end.task, now);
    let moved = sqlx::query(
            "UPDATE tasks SET status = $1, reason = $2, live_attempt = NULL, exit_code = $3, ended_at = $4,
             not_before = $5 WHERE id = $6 AND live_attempt = $7",
        )
        .bind(status.as_str())
        .bind(pg_opt(&reason))
        .bind(end.exit_code.map(i64::from))
        .bind(ended)
        .bind(not_before)
        .bind(task_id.to_string())
        .bind(end.attempt_id.to_string())
        .execute(&mut **tx)
        .await?
        .rows_affected();
    if moved > 0 {
        let msg = task_moved(&end.task, status, reason);
        event(
            tx,
            &ev(Some(wf), Some(&node), Some(label), "task.status", msg),
            now,
        )
        .await?;
    }
    Ok(if current {
        EndOutcome::Ended
    } else {
        EndOutcome::NotCurrent
    })
}

/// Gives rows to up to `n` of a job's unborn tasks, in index order (see `unborn.rs`): as
/// many as the plan placed, so the job keeps as many waiting rows as its submit stored.
async fn give_rows(
    tx: &mut Transaction<'_, Postgres>,
    workflow_id: Uuid,
    job: &str,
    n: u32,
    now: Millis,
) -> Result<()> {
    let Some(r) = sqlx::query(
        "SELECT ord, next_idx, last_idx FROM unborn_tasks
         WHERE workflow_id = $1 AND job = $2 AND status = 'PENDING' AND next_idx <= last_idx",
    )
    .bind(workflow_id.to_string())
    .bind(job)
    .fetch_optional(&mut **tx)
    .await?
    else {
        return Ok(());
    };
    let (ord, next, last): (i64, i64, i64) = (r.get("ord"), r.get("next_idx"), r.get("last_idx"));
    let upto = last.min(next + i64::from(n) - 1);
    sqlx::query("UPDATE unborn_tasks SET next_idx = $1 WHERE workflow_id = $2 AND job = $3")
        .bind(upto + 1)
        .bind(workflow_id.to_string())
        .bind(job)
        .execute(&mut **tx)
        .await?;
    // They were counted as PENDING already; the insert trigger counts them again.
    add_count(tx, workflow_id, job, TaskStatus::Pending, next - upto - 1).await?;
    let ids: Vec<String> = (next..=upto)
        .map(|i| unborn_task_id(workflow_id, ord as u32, i as u32).to_string())
        .collect();
    sqlx::query(
        "INSERT INTO tasks (id, workflow_id, job, idx, ord, status, created_at)
         SELECT t.id, $1, $2, $3 + t.n - 1, $4, 'PENDING', $5
         FROM unnest($6::text[]) WITH ORDINALITY AS t(id, n) ORDER BY t.n",
    )
    .bind(workflow_id.to_string())
    .bind(job)
    .bind(next)
    .bind(ord)
    .bind(now)
    .bind(&ids)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Ends a job's unborn tasks as a whole, as `EndPending` ends its waiting rows: moved from
/// PENDING to `status` in the counts, with one event for the range.
async fn end_unborn(
    tx: &mut Transaction<'_, Postgres>,
    workflow_id: Uuid,
    job: &str,
    status: TaskStatus,
    reason: &str,
    now: Millis,
) -> Result<()> {
    let Some(r) = sqlx::query(
        "UPDATE unborn_tasks SET status = $1, reason = $2, ended_at = $3
         WHERE workflow_id = $4 AND job = $5 AND status = 'PENDING' AND next_idx <= last_idx
         RETURNING next_idx, last_idx",
    )
    .bind(status.as_str())
    .bind(pg_text(reason))
    .bind(now)
    .bind(workflow_id.to_string())
    .bind(job)
    .fetch_optional(&mut **tx)
    .await?
    else {
        return Ok(());
    };
    let (next, last): (i64, i64) = (r.get("next_idx"), r.get("last_idx"));
    let n = last - next + 1;
    add_count(tx, workflow_id, job, TaskStatus::Pending, -n).await?;
    add_count(tx, workflow_id, job, status, n).await?;
    event(
        tx,
        &ev(
            Some(workflow_id),
            None,
            Some(format!("{job}[{next}-{last}]")),
            "task.ended",
            pg_text(&unborn_ended(status, reason, n as u64)).into_owned(),
        ),
        now,
    )
    .await
}

/// `n` more (or fewer) of a job's tasks in `status` in `task_counts`, for tasks counted
/// without rows: the triggers count those with rows.
pub(super) async fn add_count(
    tx: &mut Transaction<'_, Postgres>,
    workflow_id: Uuid,
    job: &str,
    status: TaskStatus,
    n: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO task_counts (workflow_id, job, status, n) VALUES ($1, $2, $3, $4)
         ON CONFLICT (workflow_id, job, status) DO UPDATE SET n = task_counts.n + excluded.n",
    )
    .bind(workflow_id.to_string())
    .bind(job)
    .bind(status.as_str())
    .bind(n)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
