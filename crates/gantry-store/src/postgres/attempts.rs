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
/// The nodes among `names` not in `fits` yet, read into it: each one's state, capacity and
/// what its live attempts hold, two statements for them all.
async fn read_fits(
    tx: &mut Transaction<'_, Postgres>,
    names: Vec<String>,
    fits: &mut std::collections::HashMap<String, NodeFit>,
) -> Result<()> {
    let names: Vec<String> = names
        .into_iter()
        .filter(|n| !fits.contains_key(n))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    for r in sqlx::query("SELECT name, state, capacity FROM nodes WHERE name = ANY($1)")
        .bind(&names)
        .fetch_all(&mut **tx)
        .await?
    {
        fits.insert(
            r.get("name"),
            NodeFit::new(r.get("state"), r.get("capacity")),
        );
    }
    let live = sqlx::query(
        "SELECT node, millicpus, memory_bytes, devices, exclusive FROM attempts
         WHERE node = ANY($1) AND ended_at IS NULL",
    )
    .bind(&names)
    .fetch_all(&mut **tx)
    .await?;
    for a in &live {
        if let Some(fit) = fits.get_mut(a.get::<&str, _>("node")) {
            fit.live.add(&need_of(a)?);
        }
    }
    Ok(())
}

/// A run of placements (`Change::CreateAttempt`s), checked as each would be alone and in
/// order, in four statements: the guard over all their tasks, their nodes' fit, the attempts,
/// the events. The guard is the statement that moves the tasks: it matches only a PENDING
/// task with no live attempt, so two appliers (or a stale plan) cannot both place one; the
/// rows it returns number the attempts and name them for the events (tasks.live_attempt has
/// no foreign key, so the attempts' rows may follow). A refusal reads the task once more,
/// only to say why, and the caller's transaction is rolled back.
async fn place_all(
    tx: &mut Transaction<'_, Postgres>,
    run: &[Change],
    fits: &mut std::collections::HashMap<String, NodeFit>,
    placed: &mut std::collections::BTreeMap<(Uuid, String), u32>,
    now: Millis,
) -> Result<()> {
    struct P<'a> {
        attempt_id: Uuid,
        task_id: Uuid,
        workflow_id: Uuid,
        node: &'a str,
        assignment: &'a str,
        need: &'a AttemptNeed,
    }
    let ps: Vec<P> = run
        .iter()
        .filter_map(|c| match c {
            Change::CreateAttempt {
                attempt_id,
                task_id,
                workflow_id,
                node,
                assignment,
                need,
            } => Some(P {
                attempt_id: *attempt_id,
                task_id: *task_id,
                workflow_id: *workflow_id,
                node,
                assignment,
                need,
            }),
            _ => None,
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    let once: Vec<&P> = ps.iter().filter(|p| seen.insert(p.task_id)).collect();
    // Each batch statement reads its arrays as a MATERIALIZED CTE: driven from the table on a
    // stale estimate (a database seconds old, before autovacuum's first ANALYZE), a join with
    // `unnest` re-read the arrays for every live row, 0.1 s a batch of 256; from the CTE the
    // rows are looked up by primary key, or hashed, whatever the estimate (2-4 ms).
    let rows = sqlx::query(
        "WITH u AS MATERIALIZED (
           SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS u(task, attempt, node))
         UPDATE tasks t SET status = 'STARTED', reason = NULL, attempts = t.attempts + 1,
                            live_attempt = u.attempt, node = u.node
         FROM u
         WHERE t.id = u.task AND t.status = 'PENDING' AND t.live_attempt IS NULL
           AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = t.id AND a.ended_at IS NULL)
         RETURNING t.id, t.workflow_id, t.job, t.idx, t.attempts",
    )
    .bind(
        once.iter()
            .map(|p| p.task_id.to_string())
            .collect::<Vec<_>>(),
    )
    .bind(
        once.iter()
            .map(|p| p.attempt_id.to_string())
            .collect::<Vec<_>>(),
    )
    .bind(once.iter().map(|p| p.node.to_string()).collect::<Vec<_>>())
    .fetch_all(&mut **tx)
    .await?;
    let mut moved: std::collections::HashMap<String, (String, Option<i64>, i64)> = rows
        .iter()
        .map(|r| {
            (
                r.get::<String, _>("id"),
                (r.get("job"), r.get("idx"), r.get("attempts")),
            )
        })
        .collect();
    read_fits(tx, ps.iter().map(|p| p.node.to_string()).collect(), fits).await?;
    let mut numbers = Vec::with_capacity(ps.len());
    let mut labels = Vec::with_capacity(ps.len());
    for p in &ps {
        // A task placed twice in the run finds itself STARTED the second time, as alone.
        let Some((job, idx, number)) = moved.remove(&p.task_id.to_string()) else {
            return Err(placement_refusal(tx, p.task_id, p.node).await?);
        };
        let label = task_label(&job, idx);
        let fit = fits
            .get_mut(p.node)
            .ok_or_else(|| StoreError::Refused(format!("node {} is not registered", p.node)))?;
        if let Some(why) = fit.refusal(p.need) {
            return Err(StoreError::Refused(format!(
                "task {label} does not fit on node {}: {why}",
                p.node
            )));
        }
        fit.live.add(p.need);
        *placed.entry((p.workflow_id, job)).or_default() += 1;
        numbers.push(number);
        labels.push(label);
    }
    let devices = ps
        .iter()
        .map(|p| serde_json::to_string(&p.need.devices))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| StoreError::Corrupt(format!("attempt devices: {e}")))?;
    let text = |f: &dyn Fn(&P) -> String| ps.iter().map(f).collect::<Vec<String>>();
    sqlx::query(
        "INSERT INTO attempts (id, task_id, workflow_id, number, node, status, assignment, created_at,
                               millicpus, memory_bytes, devices, exclusive)
         SELECT id, task_id, workflow_id, number, node, 'STARTED', assignment, $1,
                millicpus, memory_bytes, devices, exclusive
         FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[],
                     $8::bigint[], $9::bigint[], $10::text[], $11::boolean[])
              AS u(id, task_id, workflow_id, number, node, assignment, millicpus, memory_bytes,
                   devices, exclusive)",
    )
    .bind(now)
    .bind(text(&|p| p.attempt_id.to_string()))
    .bind(text(&|p| p.task_id.to_string()))
    .bind(text(&|p| p.workflow_id.to_string()))
    .bind(&numbers)
    .bind(text(&|p| p.node.to_string()))
    .bind(text(&|p| p.assignment.to_string()))
    .bind(ps.iter().map(|p| p.need.millicpus as i64).collect::<Vec<_>>())
    .bind(ps.iter().map(|p| p.need.memory_bytes as i64).collect::<Vec<_>>())
    .bind(&devices)
    .bind(ps.iter().map(|p| p.need.exclusive).collect::<Vec<_>>())
    .execute(&mut **tx)
    .await?;
    let messages: Vec<String> = ps
        .iter()
        .zip(&numbers)
        .map(|(p, n)| format!("attempt {n} placed on {}", p.node))
        .collect();
    sqlx::query(
        "INSERT INTO events (time, workflow_id, node, task, kind, message)
         SELECT $1, workflow_id, node, task, 'task.placed', message
         FROM unnest($2::text[], $3::text[], $4::text[], $5::text[])
              WITH ORDINALITY AS u(workflow_id, node, task, message, n)
         ORDER BY n",
    )
    .bind(now)
    .bind(text(&|p| p.workflow_id.to_string()))
    .bind(text(&|p| p.node.to_string()))
    .bind(&labels)
    .bind(&messages)
    .execute(&mut **tx)
    .await?;
    Ok(())
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
        let mut fits: std::collections::HashMap<String, NodeFit> = std::collections::HashMap::new();
        // How many of each job's tasks this plan places: as many of its unborn ones get rows.
        let mut placed: std::collections::BTreeMap<(Uuid, String), u32> = Default::default();
        let mut rest = changes;
        while let Some(c) = rest.first() {
            // A run of placements is applied in a few statements, whatever its length (one
            // statement a placement was most of PostgreSQL's work per task).
            let run = rest
                .iter()
                .take_while(|c| matches!(c, Change::CreateAttempt { .. }))
                .count();
            if run > 0 {
                place_all(&mut tx, &rest[..run], &mut fits, &mut placed, now).await?;
                rest = &rest[run..];
                continue;
            }
            rest = &rest[1..];
            match c {
                Change::CreateAttempt { .. } => unreachable!("placements are applied as runs"),
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

    /// Several agents' "running" reports in one transaction (one commit for them all), and
    /// in one statement: the attempts, their tasks and their events move together, whatever
    /// the batch's size. A report of an attempt already given earlier in the batch changes
    /// nothing, as it would alone after the first.
    pub(super) async fn attempts_running(&self, ids: &[(Uuid, Millis)]) -> Result<Vec<bool>> {
        let mut first: std::collections::HashMap<Uuid, usize> = Default::default();
        let (mut batch_ids, mut batch_at, mut batch_n) = (vec![], vec![], vec![]);
        for (i, &(id, now)) in ids.iter().enumerate() {
            if first.insert(id, i).is_none() {
                batch_ids.push(id.to_string());
                batch_at.push(now);
                batch_n.push(i as i64);
            }
        }
        let mut tx = self.write_tx().await?;
        // The sub-statements see the rows as they were before it: `tasks` in the events'
        // join is read for the label alone.
        let moved: Vec<i64> = sqlx::query_scalar(
            "WITH u AS MATERIALIZED (
               SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u(id, at, n)),
             r AS (
               UPDATE attempts a SET status = 'RUNNING', running_at = u.at
               FROM u
               WHERE a.id = u.id AND a.status = 'STARTED' AND a.ended_at IS NULL
               RETURNING a.id, a.task_id, a.workflow_id, a.node, u.at, u.n),
             t AS (
               UPDATE tasks SET status = 'RUNNING' FROM r
               WHERE tasks.id = r.task_id AND tasks.live_attempt = r.id AND tasks.status = 'STARTED'
               RETURNING tasks.id),
             e AS (
               INSERT INTO events (time, workflow_id, node, task, kind, message)
               SELECT r.at, r.workflow_id, r.node,
                      CASE WHEN k.idx IS NULL THEN k.job ELSE k.job || '[' || k.idx || ']' END,
                      'task.running', 'running on ' || r.node
               FROM r JOIN tasks k ON k.id = r.task_id ORDER BY r.n
               RETURNING 1)
             SELECT r.n FROM r",
        )
        .bind(&batch_ids)
        .bind(&batch_at)
        .bind(&batch_n)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut changed = vec![false; ids.len()];
        for n in moved {
            changed[n as usize] = true;
        }
        Ok(changed)
    }

    /// Several ends in one transaction (one commit for them all): each is applied, or found
    /// stale, as it would be alone, in the order given.
    pub(super) async fn end_attempts(
        &self,
        ends: &[(AttemptEnd, Millis)],
    ) -> Result<Vec<EndOutcome>> {
        let mut tx = self.write_tx().await?;
        let outcomes = end_all(&mut tx, ends).await?;
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

/// Ends attempts as each would end alone, in order, in four statements for them all
/// (five when some are unknown or ended already): the attempts, their tasks, and the events
/// of both. An end repeated in the batch finds its attempt ended, as it would alone. Each
/// end's task moves only if the attempt is its current one, and no end makes another attempt
/// current, so reading "current" before the batch is what each would read alone.
async fn end_all(
    tx: &mut Transaction<'_, Postgres>,
    ends: &[(AttemptEnd, Millis)],
) -> Result<Vec<EndOutcome>> {
    // Each attempt's first end in the batch.
    let mut first: std::collections::HashMap<Uuid, usize> = Default::default();
    for (i, (e, _)) in ends.iter().enumerate() {
        first.entry(e.attempt_id).or_insert(i);
    }
    let once: Vec<usize> = (0..ends.len())
        .filter(|&i| first[&ends[i].0.attempt_id] == i)
        .collect();
    let col = |f: &dyn Fn(&AttemptEnd) -> String| -> Vec<String> {
        once.iter().map(|&i| f(&ends[i].0)).collect()
    };
    let rows = sqlx::query(
        "WITH u AS MATERIALIZED (
           SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[],
                                $6::bigint[], $7::bigint[])
                         AS u(id, status, cause, exit_code, reason, at, n))
         UPDATE attempts a SET status = u.status, cause = u.cause, exit_code = u.exit_code,
                               reason = u.reason, ended_at = u.at
         FROM u
         WHERE a.id = u.id AND a.ended_at IS NULL
         RETURNING u.n, a.task_id, a.workflow_id, a.node, a.number,
                   (SELECT t.live_attempt = a.id FROM tasks t WHERE t.id = a.task_id) AS current,
                   (SELECT t.job FROM tasks t WHERE t.id = a.task_id) AS job,
                   (SELECT t.idx FROM tasks t WHERE t.id = a.task_id) AS idx",
    )
    .bind(col(&|e| e.attempt_id.to_string()))
    .bind(col(&|e| e.status.as_str().to_string()))
    .bind(col(&|e| e.cause.as_str().to_string()))
    .bind(
        once.iter()
            .map(|&i| ends[i].0.exit_code.map(i64::from))
            .collect::<Vec<_>>(),
    )
    .bind(
        once.iter()
            .map(|&i| ends[i].0.reason.as_deref().map(|r| pg_text(r).into_owned()))
            .collect::<Vec<_>>(),
    )
    .bind(once.iter().map(|&i| ends[i].1).collect::<Vec<_>>())
    .bind(once.iter().map(|&i| i as i64).collect::<Vec<_>>())
    .fetch_all(&mut **tx)
    .await?;
    // The ends that moved no attempt: ended already, or no such attempt.
    let ended: std::collections::HashSet<usize> =
        rows.iter().map(|r| r.get::<i64, _>("n") as usize).collect();
    let missing: Vec<String> = once
        .iter()
        .filter(|i| !ended.contains(i))
        .map(|&i| ends[i].0.attempt_id.to_string())
        .collect();
    let known: std::collections::HashSet<String> = if missing.is_empty() {
        Default::default()
    } else {
        sqlx::query_scalar("SELECT id FROM attempts WHERE id = ANY($1)")
            .bind(&missing)
            .fetch_all(&mut **tx)
            .await?
            .into_iter()
            .collect()
    };
    // An end repeated in the batch finds what its first found: no such attempt, or ended.
    let mut outcomes: Vec<EndOutcome> = ends
        .iter()
        .map(|(e, _)| {
            let f = first[&e.attempt_id];
            if ended.contains(&f) || known.contains(&e.attempt_id.to_string()) {
                EndOutcome::AlreadyEnded
            } else {
                EndOutcome::Unknown
            }
        })
        .collect();
    // Each moved attempt's task, as its end says; in the batch's order.
    struct Moved {
        n: usize,
        task_id: String,
        workflow_id: String,
        node: String,
        label: String,
        number: i64,
        current: bool,
        next: (TaskStatus, Option<String>, Option<Millis>, Option<Millis>),
    }
    let mut moved: Vec<Moved> = rows
        .iter()
        .map(|r| {
            let n = r.get::<i64, _>("n") as usize;
            Moved {
                n,
                task_id: r.get("task_id"),
                workflow_id: r.get("workflow_id"),
                node: r.get("node"),
                label: task_label(r.get("job"), r.get("idx")),
                number: r.get("number"),
                current: r.get::<Option<bool>, _>("current").unwrap_or(false),
                next: task_next(&ends[n].0.task, ends[n].1),
            }
        })
        .collect();
    moved.sort_by_key(|m| m.n);
    for m in &moved {
        outcomes[m.n] = if m.current {
            EndOutcome::Ended
        } else {
            EndOutcome::NotCurrent
        };
    }
    let tasks_moved: std::collections::HashSet<String> = sqlx::query_scalar(
        "WITH u AS MATERIALIZED (
           SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[],
                                $6::bigint[], $7::bigint[])
                         AS u(id, attempt, status, reason, exit_code, ended_at, not_before))
         UPDATE tasks t SET status = u.status, reason = u.reason, live_attempt = NULL,
                            exit_code = u.exit_code, ended_at = u.ended_at, not_before = u.not_before
         FROM u
         WHERE t.id = u.id AND t.live_attempt = u.attempt
         RETURNING t.id",
    )
    .bind(moved.iter().map(|m| m.task_id.clone()).collect::<Vec<_>>())
    .bind(
        moved
            .iter()
            .map(|m| ends[m.n].0.attempt_id.to_string())
            .collect::<Vec<_>>(),
    )
    .bind(
        moved
            .iter()
            .map(|m| m.next.0.as_str().to_string())
            .collect::<Vec<_>>(),
    )
    .bind(
        moved
            .iter()
            .map(|m| m.next.1.as_deref().map(|r| pg_text(r).into_owned()))
            .collect::<Vec<_>>(),
    )
    .bind(
        moved
            .iter()
            .map(|m| ends[m.n].0.exit_code.map(i64::from))
            .collect::<Vec<_>>(),
    )
    .bind(moved.iter().map(|m| m.next.2).collect::<Vec<_>>())
    .bind(moved.iter().map(|m| m.next.3).collect::<Vec<_>>())
    .fetch_all(&mut **tx)
    .await?
    .into_iter()
    .collect();
    // The events: each end's attempt.ended, then its task.status when its task moved.
    let (mut at, mut wf, mut node, mut task, mut kind, mut msg) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for m in &moved {
        let (end, now) = &ends[m.n];
        let mut push = |k: &str, text: String| {
            at.push(*now);
            wf.push(m.workflow_id.clone());
            node.push(m.node.clone());
            task.push(m.label.clone());
            kind.push(k.to_string());
            msg.push(pg_text(&text).into_owned());
        };
        push("attempt.ended", attempt_ended(end, m.number, &m.node));
        if tasks_moved.contains(&m.task_id) && outcomes[m.n] == EndOutcome::Ended {
            let (status, reason, ..) = m.next.clone();
            push("task.status", task_moved(&end.task, status, reason));
        }
    }
    sqlx::query(
        "INSERT INTO events (time, workflow_id, node, task, kind, message)
         SELECT at, workflow_id, node, task, kind, message
         FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
              WITH ORDINALITY AS u(at, workflow_id, node, task, kind, message, n)
         ORDER BY n",
    )
    .bind(&at)
    .bind(&wf)
    .bind(&node)
    .bind(&task)
    .bind(&kind)
    .bind(&msg)
    .execute(&mut **tx)
    .await?;
    Ok(outcomes)
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
