//! Workflows and their tasks: submit, listings, stop requests, the controller's snapshot.

use super::*;
use crate::unborn::{self, unborn_row};

impl SqliteStore {
    pub(super) async fn create_workflow(&self, wf: &NewWorkflow, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO workflows (id, name, owner, grp, spec, plan, status, created_at)
             VALUES (?, ?, ?, ?, ?, ?, 'PENDING', ?)",
        )
        .bind(wf.id.to_string())
        .bind(&wf.name)
        .bind(&wf.owner)
        .bind(&wf.group)
        .bind(&wf.spec)
        .bind(&wf.plan)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        for v in &wf.volumes {
            let n = sqlx::query(
                "INSERT INTO volume_uses (volume_id, workflow_id)
                 SELECT id, ? FROM volumes WHERE id = ?",
            )
            .bind(wf.id.to_string())
            .bind(v.to_string())
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 0 {
                return Err(StoreError::Conflict(
                    "a persistent volume the workflow mounts was removed meanwhile".into(),
                ));
            }
        }
        for t in &wf.tasks {
            sqlx::query(
                "INSERT INTO tasks (id, workflow_id, job, idx, ord, status, created_at)
                 VALUES (?, ?, ?, ?, ?, 'PENDING', ?)",
            )
            .bind(t.id.to_string())
            .bind(wf.id.to_string())
            .bind(&t.job)
            .bind(t.index.map(i64::from))
            .bind(t.ord as i64)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        for u in &wf.unborn {
            insert_unborn(&mut tx, wf.id, u, now).await?;
        }
        event(
            &mut tx,
            &ev(
                Some(wf.id),
                None,
                None,
                "workflow.submitted",
                format!("submitted by {} with {} task(s)", wf.owner, wf.task_count()),
            ),
            now,
        )
        .await?;
        // What else a submit writes goes in the same transaction: a submit is stored whole
        // or not at all.
        for t in &wf.takeovers {
            super::endpoints::insert_takeover(&mut tx, t, now).await?;
        }
        super::endpoints::apply_endpoint_changes(&mut tx, &wf.takeover_changes, now).await?;
        for e in &wf.ended {
            if !wf.tasks.iter().any(|t| t.id == e.task_id) {
                return Err(StoreError::Conflict(format!(
                    "task {} to end is not one of the workflow's",
                    e.task_id
                )));
            }
            super::attempts::end_task(&mut tx, e.task_id, e.status, &e.reason, now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn list_workflows(&self, filter: &Visibility) -> Result<Vec<WorkflowRow>> {
        let rows =
            match filter {
                Visibility::All => {
                    sqlx::query("SELECT * FROM workflows ORDER BY created_at DESC")
                        .fetch_all(&self.pool)
                        .await?
                }
                Visibility::UserOrGroup { user, group } => sqlx::query(
                    "SELECT * FROM workflows WHERE owner = ? OR grp = ? ORDER BY created_at DESC",
                )
                .bind(user)
                .bind(group)
                .fetch_all(&self.pool)
                .await?,
            };
        rows.iter().map(workflow_row).collect()
    }

    pub(super) async fn resolve_workflow(&self, id_or_prefix: &str) -> Result<WorkflowRow> {
        let p = id_or_prefix.to_ascii_lowercase();
        if p.len() < 8 || !p.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(StoreError::NotFound);
        }
        let rows = sqlx::query("SELECT * FROM workflows WHERE id >= ? AND id < ? LIMIT 2")
            .bind(&p)
            .bind(format!("{p}\u{7f}"))
            .fetch_all(&self.pool)
            .await?;
        match rows.len() {
            0 => Err(StoreError::NotFound),
            1 => workflow_row(&rows[0]),
            _ => Err(StoreError::Ambiguous(id_or_prefix.to_string())),
        }
    }

    pub(super) async fn workflows_by_prefix(
        &self,
        prefix: &str,
        limit: u32,
    ) -> Result<Vec<WorkflowRow>> {
        sqlx::query("SELECT * FROM workflows WHERE id >= ? AND id < ? ORDER BY id LIMIT ?")
            .bind(prefix)
            .bind(format!("{prefix}\u{7f}"))
            .bind(limit as i64)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(workflow_row)
            .collect()
    }

    pub(super) async fn workflow(&self, id: Uuid) -> Result<WorkflowRow> {
        let r = sqlx::query("SELECT * FROM workflows WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        workflow_row(&r)
    }

    pub(super) async fn tasks(&self, workflow_id: Uuid) -> Result<Vec<TaskRow>> {
        sqlx::query("SELECT * FROM tasks WHERE workflow_id = ? ORDER BY ord, idx")
            .bind(workflow_id.to_string())
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(task_row)
            .collect()
    }

    pub(super) async fn tasks_page(
        &self,
        workflow_id: Uuid,
        page: &TaskPage,
    ) -> Result<Vec<TaskRow>> {
        // One read transaction: a task born between reading the rows and the ranges would be
        // in both or in neither.
        let mut tx = self.pool.begin().await?;
        let wf = workflow_id.to_string();
        let unborn = sqlx::query(
            "SELECT * FROM unborn_tasks WHERE workflow_id = ? AND next_idx <= last_idx",
        )
        .bind(&wf)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(unborn_row)
        .collect::<Result<Vec<_>>>()?;
        let born = match page.after {
            Some(a) => sqlx::query(
                "SELECT ord, COALESCE(idx, -1) AS idx FROM tasks WHERE id = ? AND workflow_id = ?",
            )
            .bind(a.to_string())
            .bind(&wf)
            .fetch_optional(&mut *tx)
            .await?
            .map(|r| (r.get::<i64, _>("ord") as u32, r.get::<i64, _>("idx"))),
            None => None,
        };
        let start = unborn::page_start(workflow_id, page.after, born, &unborn)
            .ok_or(StoreError::NotFound)?;
        // A range of the `tasks_page` index: the position is (ord, idx) with a job's one task
        // (no index) first.
        let statuses =
            serde_json::to_string(&page.statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>())
                .map_err(|e| StoreError::Backend(Box::new(e)))?;
        let rows = sqlx::query(
            "SELECT * FROM tasks WHERE workflow_id = ?1
               AND (ord, COALESCE(idx, -1)) > (?2, ?3)
               AND (json_array_length(?4) = 0 OR status IN (SELECT value FROM json_each(?4)))
             ORDER BY ord, COALESCE(idx, -1) LIMIT ?5",
        )
        .bind(&wf)
        .bind(i64::from(start.0))
        .bind(start.1)
        .bind(statuses)
        .bind(i64::from(page.limit))
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(task_row)
        .collect::<Result<Vec<_>>>()?;
        tx.commit().await?;
        Ok(unborn::page(
            rows,
            &unborn,
            start,
            &page.statuses,
            page.limit as usize,
        ))
    }

    pub(super) async fn task_counts(&self, workflow_ids: &[Uuid]) -> Result<StatusCounts> {
        let ids = serde_json::to_string(
            &workflow_ids
                .iter()
                .map(|u| u.to_string())
                .collect::<Vec<_>>(),
        )
        .map_err(|e| StoreError::Backend(Box::new(e)))?;
        let rows = sqlx::query(
            "SELECT workflow_id, status, SUM(n) AS n FROM task_counts
             WHERE workflow_id IN (SELECT value FROM json_each(?)) AND n > 0
             GROUP BY workflow_id, status",
        )
        .bind(ids)
        .fetch_all(&self.pool)
        .await?;
        status_counts(&rows)
    }

    pub(super) async fn attempts_of(&self, task_ids: &[Uuid]) -> Result<Vec<AttemptRow>> {
        let ids =
            serde_json::to_string(&task_ids.iter().map(|u| u.to_string()).collect::<Vec<_>>())
                .map_err(|e| StoreError::Backend(Box::new(e)))?;
        sqlx::query(
            "SELECT * FROM attempts WHERE task_id IN (SELECT value FROM json_each(?))
             ORDER BY task_id, number",
        )
        .bind(ids)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(attempt_row)
        .collect()
    }

    pub(super) async fn job_task(&self, workflow_id: Uuid, job: &str) -> Result<Option<TaskRow>> {
        sqlx::query("SELECT * FROM tasks WHERE workflow_id = ? AND job = ? ORDER BY idx LIMIT 1")
            .bind(workflow_id.to_string())
            .bind(job)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(task_row)
            .transpose()
    }

    pub(super) async fn job_tasks(
        &self,
        workflow_id: Uuid,
        job: &str,
        from: Option<u32>,
        limit: u32,
    ) -> Result<Vec<TaskRow>> {
        sqlx::query(
            "SELECT * FROM tasks WHERE workflow_id = ? AND job = ? AND COALESCE(idx, -1) >= ?
             ORDER BY idx LIMIT ?",
        )
        .bind(workflow_id.to_string())
        .bind(job)
        .bind(from.map_or(-1, i64::from))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(task_row)
        .collect()
    }

    pub(super) async fn attempt_nodes(&self, workflow_id: Uuid) -> Result<Vec<String>> {
        Ok(
            sqlx::query("SELECT DISTINCT node FROM attempts WHERE workflow_id = ? ORDER BY node")
                .bind(workflow_id.to_string())
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(|r| r.get("node"))
                .collect(),
        )
    }

    pub(super) async fn attempts(&self, workflow_id: Uuid) -> Result<Vec<AttemptRow>> {
        sqlx::query("SELECT * FROM attempts WHERE workflow_id = ? ORDER BY created_at, number")
            .bind(workflow_id.to_string())
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(attempt_row)
            .collect()
    }

    pub(super) async fn request_stop(
        &self,
        workflow_id: Uuid,
        by: &str,
        now: Millis,
    ) -> Result<bool> {
        let mut tx = self.writer.begin().await?;
        let n = sqlx::query(
            "UPDATE workflows SET stop_requested = 1
             WHERE id = ? AND stop_requested = 0 AND status IN ('PENDING', 'RUNNING')",
        )
        .bind(workflow_id.to_string())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n > 0 {
            event(
                &mut tx,
                &ev(
                    Some(workflow_id),
                    None,
                    None,
                    "workflow.stop",
                    format!("stop requested by {by}"),
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(n > 0)
    }

    pub(super) async fn active_with(&self, window: usize) -> Result<Vec<ActiveWorkflow>> {
        let window = window.max(PENDING_WINDOW);
        // One read transaction: the open tasks, the counts and the live attempts are of the
        // same moment (a task ending between two reads would be in neither or in both).
        let mut tx = self.pool.begin().await?;
        let wfs = sqlx::query(
            "SELECT * FROM workflows WHERE status IN ('PENDING', 'RUNNING') ORDER BY created_at",
        )
        .fetch_all(&mut *tx)
        .await?;
        // Every task in play, and each job's first `window` waiting ones: all of them
        // when there are no more (a single task has no index), else those up to the window's
        // last index. The status lists match the partial indexes' (`tasks_live`,
        // `tasks_pending`) for SQLite to use them, and the joins' order is fixed (CROSS JOIN)
        // so that it walks from the active workflows to their counts to the first waiting
        // tasks, never over all waiting tasks. A count with a big array's unborn members in
        // it may pass the window with fewer rows than that: then it lists every row.
        let tasks = sqlx::query(
            "SELECT t.* FROM workflows w JOIN tasks t ON t.workflow_id = w.id
             WHERE w.status IN ('PENDING', 'RUNNING') AND t.status IN ('STARTED', 'RUNNING')
             UNION ALL
             SELECT t.* FROM workflows w
               CROSS JOIN task_counts c
               CROSS JOIN tasks t INDEXED BY tasks_pending
             WHERE w.status IN ('PENDING', 'RUNNING')
               AND c.workflow_id = w.id AND c.status = 'PENDING' AND c.n > 0 AND c.n <= ?1
               AND t.workflow_id = c.workflow_id AND t.job = c.job AND t.status = 'PENDING'
             UNION ALL
             SELECT t.* FROM workflows w
               CROSS JOIN task_counts c
               CROSS JOIN tasks t INDEXED BY tasks_pending
             WHERE w.status IN ('PENDING', 'RUNNING')
               AND c.workflow_id = w.id AND c.status = 'PENDING' AND c.n > ?1
               AND t.workflow_id = c.workflow_id AND t.job = c.job AND t.status = 'PENDING'
               AND t.idx <= COALESCE((SELECT p.idx FROM tasks p INDEXED BY tasks_pending
                             WHERE p.workflow_id = c.workflow_id AND p.job = c.job
                               AND p.status = 'PENDING'
                             ORDER BY p.idx LIMIT 1 OFFSET ?1 - 1), t.idx)
             ORDER BY ord, idx",
        )
        .bind(window as i64)
        .fetch_all(&mut *tx)
        .await?;
        let counts = sqlx::query(
            "SELECT c.workflow_id, c.job, c.status, c.n FROM workflows w
             JOIN task_counts c ON c.workflow_id = w.id
             WHERE w.status IN ('PENDING', 'RUNNING')
               AND c.status IN ('PENDING', 'FINISHED', 'FAILED', 'STOPPED') AND c.n > 0
             ORDER BY c.job, c.status",
        )
        .fetch_all(&mut *tx)
        .await?;
        let live = sqlx::query("SELECT * FROM attempts WHERE ended_at IS NULL")
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        let mut out: Vec<ActiveWorkflow> = Vec::with_capacity(wfs.len());
        let mut index = std::collections::HashMap::new();
        for r in &wfs {
            let w = workflow_row(r)?;
            index.insert(w.id, out.len());
            out.push(ActiveWorkflow {
                workflow: w,
                tasks: vec![],
                ended: vec![],
                pending: vec![],
                live: vec![],
            });
        }
        for r in &tasks {
            let t = task_row(r)?;
            if let Some(&i) = index.get(&t.workflow_id) {
                out[i].tasks.push(t);
            }
        }
        for r in &counts {
            if let Some(&i) = index.get(&uuid(r.get("workflow_id"))?) {
                let c = TaskCount {
                    job: r.get("job"),
                    status: parse(r.get("status"))?,
                    count: r.get::<i64, _>("n") as u32,
                };
                let aw = &mut out[i];
                match c.status {
                    TaskStatus::Pending => aw.pending.push(c),
                    _ => aw.ended.push(c),
                }
            }
        }
        for r in &live {
            let a = attempt_row(r)?;
            if let Some(&i) = index.get(&a.workflow_id) {
                out[i].live.push(a);
            }
        }
        Ok(out)
    }
}

/// A job's unborn range, counted as PENDING with the job's tasks that have rows.
async fn insert_unborn(
    tx: &mut Transaction<'_, Sqlite>,
    workflow_id: Uuid,
    u: &NewUnborn,
    now: Millis,
) -> Result<()> {
    if u.first > u.last {
        return Err(StoreError::Conflict(format!(
            "job {}: an empty range of tasks to store",
            u.job
        )));
    }
    sqlx::query(
        "INSERT INTO unborn_tasks (workflow_id, job, ord, next_idx, last_idx, status, created_at)
         VALUES (?, ?, ?, ?, ?, 'PENDING', ?)",
    )
    .bind(workflow_id.to_string())
    .bind(&u.job)
    .bind(i64::from(u.ord))
    .bind(i64::from(u.first))
    .bind(i64::from(u.last))
    .bind(now)
    .execute(&mut **tx)
    .await?;
    super::attempts::add_count(
        tx,
        workflow_id,
        &u.job,
        TaskStatus::Pending,
        u.count() as i64,
    )
    .await
}
