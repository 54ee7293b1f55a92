//! The SQLite backend: the embedded default for `gantry up` and small clusters.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use gantry_api::{EndCause, TaskStatus};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, Sqlite, SqlitePool, Transaction};
use uuid::Uuid;

use crate::text::cap_opt;
use crate::*;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

#[derive(Clone)]
pub struct SqliteStore {
    /// Readers: WAL lets them run beside the writer.
    pool: SqlitePool,
    /// One connection for every write. SQLite has one writer at a time anyway; queueing here
    /// instead of in SQLite avoids SQLITE_BUSY when a read transaction upgrades to a write.
    writer: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and brings its schema up to date.
    /// Opens (creating if needed) the database at `path`. The file and its `-wal` and `-shm`
    /// are the owner's alone (0600): they hold every user's workflows, token hashes and
    /// sealed secrets. SQLite gives the `-wal` and `-shm` files the database file's mode, so
    /// it is made private before SQLite first opens it; files an older version left readable
    /// are made private here too.
    pub async fn open(path: &Path) -> Result<Self> {
        {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| StoreError::Db(sqlx::Error::Io(e)))?;
        }
        let private = || -> Result<()> {
            use std::os::unix::fs::PermissionsExt;
            for suffix in ["", "-wal", "-shm"] {
                let mut name = path.as_os_str().to_owned();
                name.push(suffix);
                let p = std::path::PathBuf::from(name);
                match std::fs::metadata(&p) {
                    Ok(m) if m.permissions().mode() & 0o077 != 0 => {
                        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))
                            .map_err(|e| StoreError::Db(sqlx::Error::Io(e)))?;
                    }
                    _ => {}
                }
            }
            Ok(())
        };
        private()?;
        let opts = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit is on disk before we acknowledge it, even across power loss.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts.clone())
            .await?;
        MIGRATOR.run(&writer).await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts)
            .await?;
        // An older version's `-wal` and `-shm` live on while SQLite has the database open.
        private()?;
        Ok(Self { pool, writer })
    }
}

fn uuid(s: &str) -> Result<Uuid> {
    Uuid::parse_str(s).map_err(|e| StoreError::Corrupt(format!("bad id {s:?}: {e}")))
}

fn opt_uuid(s: Option<String>) -> Result<Option<Uuid>> {
    s.map(|s| uuid(&s)).transpose()
}

fn parse<T: FromStr<Err = String>>(s: &str) -> Result<T> {
    T::from_str(s).map_err(StoreError::Corrupt)
}

fn opt_parse<T: FromStr<Err = String>>(s: Option<String>) -> Result<Option<T>> {
    s.map(|s| parse(&s)).transpose()
}

fn task_label(job: &str, idx: Option<i64>) -> String {
    match idx {
        Some(i) => format!("{job}[{i}]"),
        None => job.to_string(),
    }
}

fn user_row(r: &SqliteRow) -> Result<User> {
    Ok(User {
        id: uuid(r.get("id"))?,
        name: r.get("name"),
        group: r.get("grp"),
        role: r.get("role"),
    })
}

fn token_row(r: &SqliteRow) -> TokenRow {
    TokenRow {
        id: r.get("id"),
        user: r.get("name"),
        role: r.get("role"),
        purpose: r.get("purpose"),
        created_at: r.get("created_at"),
        expires_at: r.get("expires_at"),
    }
}

fn endpoint_token_row(r: &SqliteRow) -> EndpointTokenRow {
    EndpointTokenRow {
        id: r.get("id"),
        endpoint: r.get("endpoint"),
        created_by: r.get("created_by"),
        created_at: r.get("created_at"),
        expires_at: r.get("expires_at"),
    }
}

async fn token_by_id(tx: &mut Transaction<'_, Sqlite>, id: &str) -> Result<TokenRow> {
    let row = sqlx::query(
        "SELECT t.id, u.name, u.role, t.purpose, t.created_at, t.expires_at
         FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.id = ?",
    )
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or(StoreError::NotFound)?;
    Ok(token_row(&row))
}

async fn enabled_admins(tx: &mut Transaction<'_, Sqlite>) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT COUNT(*) FROM users WHERE role = 'admin' AND disabled_at IS NULL",
    )
    .fetch_one(&mut **tx)
    .await?)
}

fn workflow_row(r: &SqliteRow) -> Result<WorkflowRow> {
    Ok(WorkflowRow {
        id: uuid(r.get("id"))?,
        name: r.get("name"),
        owner: r.get("owner"),
        group: r.get("grp"),
        spec: r.get("spec"),
        plan: r.get("plan"),
        status: parse(r.get("status"))?,
        reason: r.get("reason"),
        stop_requested: r.get::<i64, _>("stop_requested") != 0,
        created_at: r.get("created_at"),
        ended_at: r.get("ended_at"),
    })
}

fn task_row(r: &SqliteRow) -> Result<TaskRow> {
    Ok(TaskRow {
        id: uuid(r.get("id"))?,
        workflow_id: uuid(r.get("workflow_id"))?,
        job: r.get("job"),
        index: r.get::<Option<i64>, _>("idx").map(|i| i as u32),
        ord: r.get::<i64, _>("ord") as u32,
        status: parse(r.get("status"))?,
        reason: r.get("reason"),
        attempts: r.get::<i64, _>("attempts") as u32,
        live_attempt: opt_uuid(r.get("live_attempt"))?,
        node: r.get("node"),
        exit_code: r.get::<Option<i64>, _>("exit_code").map(|c| c as i32),
        created_at: r.get("created_at"),
        ended_at: r.get("ended_at"),
        not_before: r.get("not_before"),
    })
}

fn attempt_row(r: &SqliteRow) -> Result<AttemptRow> {
    Ok(AttemptRow {
        id: uuid(r.get("id"))?,
        task_id: uuid(r.get("task_id"))?,
        workflow_id: uuid(r.get("workflow_id"))?,
        number: r.get::<i64, _>("number") as u32,
        node: r.get("node"),
        status: parse(r.get("status"))?,
        cause: opt_parse(r.get("cause"))?,
        exit_code: r.get::<Option<i64>, _>("exit_code").map(|c| c as i32),
        reason: r.get("reason"),
        stop_sent: opt_parse(r.get("stop_sent"))?,
        assignment: r.get("assignment"),
        created_at: r.get("created_at"),
        running_at: r.get("running_at"),
        ended_at: r.get("ended_at"),
        address: r.get("address"),
    })
}

fn node_row(r: &SqliteRow) -> Result<NodeRow> {
    Ok(NodeRow {
        id: uuid(r.get("id"))?,
        name: r.get("name"),
        pool: r.get("pool"),
        capacity: r.get("capacity"),
        state: r.get("state"),
        connected: r.get::<i64, _>("connected") != 0,
        last_seen: r.get("last_seen"),
        version: r.get("version"),
        metrics_addr: r.get("metrics_addr"),
        node_exporter: r.get("node_exporter"),
        seq: r.get::<Option<i64>, _>("seq").unwrap_or(0),
        address: r.get("address"),
        exec_addr: r.get("exec_addr"),
        // Written only by `register_node`, from a map: anything else is a damaged row.
        labels: serde_json::from_str(r.get("labels"))
            .map_err(|e| StoreError::Corrupt(format!("node labels: {e}")))?,
    })
}

fn event_row(r: &SqliteRow) -> Result<EventRow> {
    Ok(EventRow {
        seq: r.get("seq"),
        time: r.get("time"),
        workflow_id: opt_uuid(r.get("workflow_id"))?,
        node: r.get("node"),
        task: r.get("task"),
        kind: r.get("kind"),
        message: r.get("message"),
        workflow_name: r.try_get("workflow_name").ok().flatten(),
    })
}

fn endpoint_row(r: &SqliteRow) -> Result<EndpointRow> {
    Ok(EndpointRow {
        name: r.get("name"),
        owner: r.get("owner"),
        group: r.get("grp"),
        scope: r.get("scope"),
        mode: r.get("mode"),
        drain_timeout_ms: r.get("drain_timeout_ms"),
        confirm: r.get::<i64, _>("confirm") != 0,
        created_at: r.get("created_at"),
        workflow_id: opt_uuid(r.get("workflow_id"))?,
        service: r.get("service"),
        port: r.get::<Option<i64>, _>("port").map(|p| p as u16),
        since: r.get("since"),
    })
}

fn takeover_row(r: &SqliteRow) -> Result<TakeoverRow> {
    Ok(TakeoverRow {
        id: uuid(r.get("id"))?,
        endpoint: r.get("endpoint"),
        from_workflow: opt_uuid(r.get("from_workflow"))?,
        to_workflow: uuid(r.get("to_workflow"))?,
        to_service: r.get("to_service"),
        port: r.get::<i64, _>("port") as u16,
        requested_by: r.get("requested_by"),
        channel: r.get("channel"),
        mode: r.get("mode"),
        phase: r.get("phase"),
        reason: r.get("reason"),
        confirmed_by: r.get("confirmed_by"),
        confirmed_via: r.get("confirmed_via"),
        created_at: r.get("created_at"),
        updated_at: r.get("updated_at"),
        switched_at: r.get("switched_at"),
        ended_at: r.get("ended_at"),
    })
}

fn short(id: Uuid) -> String {
    id.to_string()[..8].to_string()
}

fn hold_row(r: &SqliteRow) -> Result<HoldRow> {
    Ok(HoldRow {
        id: uuid(r.get("id"))?,
        node: r.get("node"),
        pool: r.get("pool"),
        kind: r.get("kind"),
        source: r.get("source"),
        state: r.get("state"),
        alertname: r.get("alertname"),
        fingerprint: r.get("fingerprint"),
        episode: r.get("episode"),
        release_rule: r.get("release_rule"),
        reason: r.get("reason"),
        created_by: r.get("created_by"),
        created_at: r.get("created_at"),
        activated_at: r.get("activated_at"),
        alert_resolved_at: r.get("alert_resolved_at"),
        released_by: r.get("released_by"),
        released_at: r.get("released_at"),
        release_reason: r.get("release_reason"),
    })
}

/// A node's state follows its active holds (EVICTING over CORDONED over READY); a DOWN node
/// stays DOWN until its agent returns.
async fn refresh_node_state(
    tx: &mut Transaction<'_, Sqlite>,
    node: &str,
    now: Millis,
) -> Result<()> {
    let kinds: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT kind FROM holds WHERE node = ? AND state = 'ACTIVE'")
            .bind(node)
            .fetch_all(&mut **tx)
            .await?;
    let want = if kinds.iter().any(|k| k == "evict") {
        "EVICTING"
    } else if kinds.iter().any(|k| k == "cordon") {
        "CORDONED"
    } else {
        "READY"
    };
    let n =
        sqlx::query("UPDATE nodes SET state = ? WHERE name = ? AND state != 'DOWN' AND state != ?")
            .bind(want)
            .bind(node)
            .bind(want)
            .execute(&mut **tx)
            .await?
            .rows_affected();
    if n > 0 {
        event(
            tx,
            &ev(
                None,
                Some(node),
                None,
                "node.state",
                format!("{want}: by its holds"),
            ),
            now,
        )
        .await?;
    }
    Ok(())
}

async fn event(tx: &mut Transaction<'_, Sqlite>, ev: &NewEvent, now: Millis) -> Result<()> {
    sqlx::query(
        "INSERT INTO events (time, workflow_id, node, task, kind, message) VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(now)
    .bind(ev.workflow_id.map(|u| u.to_string()))
    .bind(&ev.node)
    .bind(&ev.task)
    .bind(&ev.kind)
    .bind(cap_text(&ev.message))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// An event row about no workflow, node or task.
async fn plain_event(
    tx: &mut Transaction<'_, Sqlite>,
    kind: &str,
    message: String,
    now: Millis,
) -> Result<()> {
    event(tx, &ev(None, None, None, kind, message), now).await
}

fn ev(
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
fn attempt_ident(r: &SqliteRow) -> Result<(Uuid, String, String, i64)> {
    Ok((
        uuid(r.get("workflow_id"))?,
        r.get("node"),
        task_label(r.get("job"), r.get("idx")),
        r.get("number"),
    ))
}

/// (workflow id, "job[idx]", status) of a task, for event rows.
async fn task_ident(
    tx: &mut Transaction<'_, Sqlite>,
    task_id: Uuid,
) -> Result<(Uuid, String, TaskStatus)> {
    let r = sqlx::query("SELECT workflow_id, job, idx, status FROM tasks WHERE id = ?")
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

#[async_trait]
impl Store for SqliteStore {
    async fn create_user(
        &self,
        user: &User,
        token_hash: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let res = sqlx::query(
            "INSERT INTO users (id, name, grp, role, created_at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(user.id.to_string())
        .bind(&user.name)
        .bind(&user.group)
        .bind(&user.role)
        .bind(now)
        .execute(&mut *tx)
        .await;
        conflict_if_taken(res.map_err(StoreError::from), || {
            format!("user {} already exists", user.name)
        })?;
        sqlx::query(
            "INSERT INTO tokens (id, hash, user_id, purpose, created_at, expires_at)
             VALUES (lower(hex(randomblob(8))), ?, ?, 'login', ?, ?)",
        )
        .bind(token_hash)
        .bind(user.id.to_string())
        .bind(now)
        .bind(expires_at)
        .execute(&mut *tx)
        .await?;
        plain_event(
            &mut tx,
            "user.created",
            format!(
                "user {} ({}, group {}) created",
                user.name, user.role, user.group
            ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn user_by_token(&self, token_hash: &str, now: Millis) -> Result<Option<User>> {
        let row = sqlx::query(
            "SELECT u.id, u.name, u.grp, u.role FROM tokens t JOIN users u ON u.id = t.user_id
             WHERE t.hash = ? AND (t.expires_at IS NULL OR t.expires_at > ?)
               AND u.disabled_at IS NULL",
        )
        .bind(token_hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(user_row).transpose()
    }

    async fn user_by_name(&self, name: &str) -> Result<Option<User>> {
        let row = sqlx::query("SELECT id, name, grp, role FROM users WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(user_row).transpose()
    }

    async fn add_token(
        &self,
        user_id: Uuid,
        token_hash: &str,
        purpose: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<String> {
        Ok(sqlx::query_scalar(
            "INSERT INTO tokens (id, hash, user_id, purpose, created_at, expires_at)
             VALUES (lower(hex(randomblob(8))), ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(token_hash)
        .bind(user_id.to_string())
        .bind(purpose)
        .bind(now)
        .bind(expires_at)
        .fetch_one(&self.writer)
        .await?)
    }

    async fn token_refusal(&self, token_hash: &str, now: Millis) -> Result<Option<TokenRefusal>> {
        let row = sqlx::query(
            "SELECT t.expires_at, u.name, u.disabled_at FROM tokens t JOIN users u ON u.id = t.user_id
             WHERE t.hash = ?
             UNION ALL
             SELECT expires_at, NULL, NULL FROM endpoint_tokens WHERE hash = ?",
        )
        .bind(token_hash)
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        let Some(r) = row else { return Ok(None) };
        let expires: Option<Millis> = r.get("expires_at");
        let disabled: Option<Millis> = r.get("disabled_at");
        Ok(match expires {
            Some(at) if at <= now => Some(TokenRefusal::Expired(at)),
            _ if disabled.is_some() => Some(TokenRefusal::UserDisabled(r.get("name"))),
            _ => None,
        })
    }

    async fn users(&self) -> Result<Vec<UserRow>> {
        let rows = sqlx::query(
            "SELECT u.id, u.name, u.grp, u.role, u.created_at, u.disabled_at,
                    (SELECT COUNT(*) FROM tokens t WHERE t.user_id = u.id) AS n
             FROM users u ORDER BY u.name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(UserRow {
                    user: user_row(r)?,
                    created_at: r.get("created_at"),
                    disabled_at: r.get("disabled_at"),
                    tokens: r.get::<i64, _>("n") as u64,
                })
            })
            .collect()
    }

    async fn set_user_disabled(
        &self,
        name: &str,
        disabled: bool,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query("SELECT role, disabled_at FROM users WHERE name = ?")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
        let role: String = row.get("role");
        if disabled && role == "admin" && enabled_admins(&mut tx).await? <= 1 {
            return Err(StoreError::Conflict(format!(
                "{name} is the last enabled administrator; make or enable another first"
            )));
        }
        sqlx::query("UPDATE users SET disabled_at = ? WHERE name = ?")
            .bind(disabled.then_some(now))
            .bind(name)
            .execute(&mut *tx)
            .await?;
        let what = if disabled { "disabled" } else { "enabled" };
        plain_event(
            &mut tx,
            &format!("user.{what}"),
            format!("user {name} {what} by {by}"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn delete_user(&self, name: &str, force: bool, by: &str, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query("SELECT id, role, disabled_at FROM users WHERE name = ?")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
        let id: String = row.get("id");
        let role: String = row.get("role");
        if role == "admin" {
            let others: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM users
                 WHERE role = 'admin' AND disabled_at IS NULL AND name != ?",
            )
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
            if others == 0 {
                return Err(StoreError::Conflict(format!(
                    "{name} is the last enabled administrator; make or enable another first"
                )));
            }
        }
        let running: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM workflows WHERE owner = ? AND ended_at IS NULL",
        )
        .bind(name)
        .fetch_one(&mut *tx)
        .await?;
        if running > 0 && !force {
            return Err(StoreError::Conflict(format!(
                "{name} owns {running} workflow(s) that have not ended; stop them first, or \
                 delete with force (they keep running, and their group can still manage them)"
            )));
        }
        sqlx::query("DELETE FROM tokens WHERE user_id = ?")
            .bind(&id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM users WHERE id = ?")
            .bind(&id)
            .execute(&mut *tx)
            .await?;
        plain_event(
            &mut tx,
            "user.deleted",
            format!("user {name} deleted by {by} ({running} workflow(s) not ended left running)"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn tokens(&self, user: Option<&str>) -> Result<Vec<TokenRow>> {
        let rows = sqlx::query(
            "SELECT t.id, u.name, u.role, t.purpose, t.created_at, t.expires_at
             FROM tokens t JOIN users u ON u.id = t.user_id
             WHERE ? IS NULL OR u.name = ? ORDER BY u.name, t.created_at, t.id",
        )
        .bind(user)
        .bind(user)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(token_row).collect())
    }

    async fn revoke_token(&self, id: &str, by: &str, now: Millis) -> Result<TokenRow> {
        let mut tx = self.writer.begin().await?;
        let t = token_by_id(&mut tx, id).await?;
        sqlx::query("DELETE FROM tokens WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        plain_event(
            &mut tx,
            "token.revoked",
            format!("token {id} of {} revoked by {by}", t.user),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(t)
    }

    async fn rotate_token(
        &self,
        id: &str,
        token_hash: &str,
        expires_at: Option<Millis>,
        by: &str,
        now: Millis,
    ) -> Result<TokenRow> {
        let mut tx = self.writer.begin().await?;
        token_by_id(&mut tx, id).await?;
        sqlx::query("UPDATE tokens SET hash = ?, created_at = ?, expires_at = ? WHERE id = ?")
            .bind(token_hash)
            .bind(now)
            .bind(expires_at)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let t = token_by_id(&mut tx, id).await?;
        plain_event(
            &mut tx,
            "token.rotated",
            format!("token {id} of {} rotated by {by}", t.user),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(t)
    }

    async fn count_users(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&self.pool)
            .await?;
        Ok(n as u64)
    }

    async fn create_workflow(&self, wf: &NewWorkflow, now: Millis) -> Result<()> {
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
        event(
            &mut tx,
            &ev(
                Some(wf.id),
                None,
                None,
                "workflow.submitted",
                format!("submitted by {} with {} task(s)", wf.owner, wf.tasks.len()),
            ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn list_workflows(&self, filter: &Visibility) -> Result<Vec<WorkflowRow>> {
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

    async fn resolve_workflow(&self, id_or_prefix: &str) -> Result<WorkflowRow> {
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

    async fn workflows_by_prefix(&self, prefix: &str, limit: u32) -> Result<Vec<WorkflowRow>> {
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

    async fn workflow(&self, id: Uuid) -> Result<WorkflowRow> {
        let r = sqlx::query("SELECT * FROM workflows WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        workflow_row(&r)
    }

    async fn tasks(&self, workflow_id: Uuid) -> Result<Vec<TaskRow>> {
        sqlx::query("SELECT * FROM tasks WHERE workflow_id = ? ORDER BY ord, idx")
            .bind(workflow_id.to_string())
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(task_row)
            .collect()
    }

    async fn job_task(&self, workflow_id: Uuid, job: &str) -> Result<Option<TaskRow>> {
        sqlx::query("SELECT * FROM tasks WHERE workflow_id = ? AND job = ? ORDER BY idx LIMIT 1")
            .bind(workflow_id.to_string())
            .bind(job)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(task_row)
            .transpose()
    }

    async fn attempts(&self, workflow_id: Uuid) -> Result<Vec<AttemptRow>> {
        sqlx::query("SELECT * FROM attempts WHERE workflow_id = ? ORDER BY created_at, number")
            .bind(workflow_id.to_string())
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(attempt_row)
            .collect()
    }

    async fn request_stop(&self, workflow_id: Uuid, by: &str, now: Millis) -> Result<bool> {
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

    async fn active(&self) -> Result<Vec<ActiveWorkflow>> {
        // One read transaction: the open tasks, the counts and the live attempts are of the
        // same moment (a task ending between two reads would be in neither or in both).
        let mut tx = self.pool.begin().await?;
        let wfs = sqlx::query(
            "SELECT * FROM workflows WHERE status IN ('PENDING', 'RUNNING') ORDER BY created_at",
        )
        .fetch_all(&mut *tx)
        .await?;
        // Every task in play, and each job's first PENDING_WINDOW waiting ones: all of them
        // when there are no more (a single task has no index), else those up to the window's
        // last index. The status lists match the partial indexes' (`tasks_live`,
        // `tasks_pending`) for SQLite to use them, and the joins' order is fixed (CROSS JOIN)
        // so that it walks from the active workflows to their counts to the first waiting
        // tasks, never over all waiting tasks.
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
               AND t.idx <= (SELECT p.idx FROM tasks p INDEXED BY tasks_pending
                             WHERE p.workflow_id = c.workflow_id AND p.job = c.job
                               AND p.status = 'PENDING'
                             ORDER BY p.idx LIMIT 1 OFFSET ?1 - 1)
             ORDER BY ord, idx",
        )
        .bind(PENDING_WINDOW as i64)
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

    async fn apply(&self, changes: &[Change], now: Millis) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut tx = self.writer.begin().await?;
        for c in changes {
            match c {
                Change::CreateAttempt {
                    attempt_id,
                    task_id,
                    workflow_id,
                    node,
                    assignment,
                } => {
                    // The task's row numbers the attempt and names it for the event, in the
                    // same statement that moves it (tasks.live_attempt has no foreign key, so
                    // the attempt's row may follow).
                    let r = sqlx::query(
                        "UPDATE tasks SET status = 'STARTED', reason = NULL, attempts = attempts + 1,
                                          live_attempt = ?, node = ?
                         WHERE id = ?
                         RETURNING workflow_id, job, idx, attempts",
                    )
                    .bind(attempt_id.to_string())
                    .bind(node)
                    .bind(task_id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or(StoreError::NotFound)?;
                    let wf = uuid(r.get("workflow_id"))?;
                    let label = task_label(r.get("job"), r.get("idx"));
                    let number: i64 = r.get("attempts");
                    sqlx::query(
                        "INSERT INTO attempts (id, task_id, workflow_id, number, node, status, assignment, created_at)
                         VALUES (?, ?, ?, ?, ?, 'STARTED', ?, ?)",
                    )
                    .bind(attempt_id.to_string())
                    .bind(task_id.to_string())
                    .bind(workflow_id.to_string())
                    .bind(number)
                    .bind(node)
                    .bind(assignment)
                    .bind(now)
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
                    let (wf, label, old) = task_ident(&mut tx, *task_id).await?;
                    if old.is_terminal() {
                        continue;
                    }
                    sqlx::query(
                        "UPDATE tasks SET status = ?, reason = ?, ended_at = ? WHERE id = ?",
                    )
                    .bind(status.as_str())
                    .bind(cap_text(reason))
                    .bind(now)
                    .bind(task_id.to_string())
                    .execute(&mut *tx)
                    .await?;
                    event(
                        &mut tx,
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
                         SELECT ?1, workflow_id, NULL,
                                CASE WHEN idx IS NULL THEN job ELSE job || '[' || idx || ']' END,
                                'task.ended', ?2
                         FROM tasks INDEXED BY tasks_pending
                         WHERE workflow_id = ?3 AND job = ?4 AND status = 'PENDING'
                         ORDER BY idx",
                    )
                    .bind(now)
                    .bind(cap_text(&format!("{status}: {reason}")).into_owned())
                    .bind(workflow_id.to_string())
                    .bind(job)
                    .execute(&mut *tx)
                    .await?;
                    sqlx::query(
                        "UPDATE tasks SET status = ?, reason = ?, ended_at = ?
                         WHERE workflow_id = ? AND job = ? AND status = 'PENDING'",
                    )
                    .bind(status.as_str())
                    .bind(cap_text(reason))
                    .bind(now)
                    .bind(workflow_id.to_string())
                    .bind(job)
                    .execute(&mut *tx)
                    .await?;
                }
                Change::TaskWaiting { task_id, reason } => {
                    sqlx::query("UPDATE tasks SET reason = ? WHERE id = ? AND status = 'PENDING'")
                        .bind(cap_opt(reason))
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
                        "UPDATE workflows SET status = ?, reason = ?, ended_at = ?
                         WHERE id = ? AND status IN ('PENDING', 'RUNNING') AND status != ?",
                    )
                    .bind(status.as_str())
                    .bind(cap_opt(reason))
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
                        "UPDATE attempts SET stop_sent = COALESCE(stop_sent, ?) WHERE id = ?"
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
                            format!(
                                "stopping on {node}: {}",
                                cause.as_str().to_lowercase().replace('_', " ")
                            ),
                        ),
                        now,
                    )
                    .await?;
                }
                Change::Event(e) => event(&mut tx, e, now).await?,
            }
        }
        tx.commit().await?;
        Ok(())
    }

    async fn attempt(&self, id: Uuid) -> Result<AttemptRow> {
        let r = sqlx::query("SELECT * FROM attempts WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        attempt_row(&r)
    }

    async fn task(&self, id: Uuid) -> Result<TaskRow> {
        let r = sqlx::query("SELECT * FROM tasks WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        task_row(&r)
    }

    async fn attempt_running(&self, id: Uuid, now: Millis) -> Result<bool> {
        let mut tx = self.writer.begin().await?;
        let Some(r) = sqlx::query(returning_attempt_ident!(
            "UPDATE attempts SET status = 'RUNNING', running_at = ?
             WHERE id = ? AND status = 'STARTED' AND ended_at IS NULL"
        ))
        .bind(now)
        .bind(id.to_string())
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(false);
        };
        let (wf, node, label, _) = attempt_ident(&r)?;
        sqlx::query("UPDATE tasks SET status = 'RUNNING' WHERE id = ? AND live_attempt = ? AND status = 'STARTED'")
            .bind(r.get::<&str, _>("task_id"))
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        event(
            &mut tx,
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
        tx.commit().await?;
        Ok(true)
    }

    async fn end_attempt(&self, end: &AttemptEnd, now: Millis) -> Result<bool> {
        let mut tx = self.writer.begin().await?;
        let Some(r) = sqlx::query(returning_attempt_ident!(
            "UPDATE attempts SET status = ?, cause = ?, exit_code = ?, reason = ?, ended_at = ?
             WHERE id = ? AND ended_at IS NULL"
        ))
        .bind(end.status.as_str())
        .bind(end.cause.as_str())
        .bind(end.exit_code.map(i64::from))
        .bind(cap_opt(&end.reason))
        .bind(now)
        .bind(end.attempt_id.to_string())
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(false);
        };
        let task_id = uuid(r.get("task_id"))?;
        let (wf, node, label, number) = attempt_ident(&r)?;
        let what = match (end.cause, end.exit_code) {
            (EndCause::Exit, Some(c)) => format!("exited with code {c}"),
            (cause, Some(c)) => format!(
                "{} (exit code {c})",
                cause.as_str().to_lowercase().replace('_', " ")
            ),
            (cause, None) => cause.as_str().to_lowercase().replace('_', " "),
        };
        let detail = end
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        event(
            &mut tx,
            &ev(
                Some(wf),
                Some(&node),
                Some(label.clone()),
                "attempt.ended",
                format!("attempt {number} on {node} {what}{detail}"),
            ),
            now,
        )
        .await?;
        // Only the task's current attempt moves the task: a stale attempt never overwrites a newer one.
        let (status, reason, ended, not_before) = match &end.task {
            TaskNext::Retry { reason, not_before } => (
                TaskStatus::Pending,
                Some(reason.clone()),
                None,
                Some(*not_before),
            ),
            TaskNext::Final { status, reason } => (*status, reason.clone(), Some(now), None),
        };
        let moved = sqlx::query(
            "UPDATE tasks SET status = ?, reason = ?, live_attempt = NULL, exit_code = ?, ended_at = ?,
             not_before = ? WHERE id = ? AND live_attempt = ?",
        )
        .bind(status.as_str())
        .bind(cap_opt(&reason))
        .bind(end.exit_code.map(i64::from))
        .bind(ended)
        .bind(not_before)
        .bind(task_id.to_string())
        .bind(end.attempt_id.to_string())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if moved > 0 {
            let msg = match (&end.task, reason) {
                (TaskNext::Retry { .. }, Some(r)) => format!("PENDING: {r}"),
                (_, Some(r)) => format!("{status}: {r}"),
                (_, None) => status.to_string(),
            };
            event(
                &mut tx,
                &ev(Some(wf), Some(&node), Some(label), "task.status", msg),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn live_attempts_on(&self, node: &str) -> Result<Vec<AttemptRow>> {
        sqlx::query(
            "SELECT * FROM attempts WHERE node = ? AND ended_at IS NULL ORDER BY created_at",
        )
        .bind(node)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(attempt_row)
        .collect()
    }

    async fn register_node(&self, reg: &NodeRegistration, now: Millis) -> Result<NodeRow> {
        let labels = serde_json::to_string(&reg.labels)
            .map_err(|e| StoreError::Corrupt(format!("node labels: {e}")))?;
        let mut tx = self.writer.begin().await?;
        let existing = sqlx::query("SELECT * FROM nodes WHERE name = ?")
            .bind(&reg.name)
            .fetch_optional(&mut *tx)
            .await?;
        let msg = match &existing {
            None => {
                sqlx::query(
                    "INSERT INTO nodes (id, name, pool, capacity, state, connected, last_seen, version, metrics_addr, created_at, node_exporter, address, exec_addr, labels, seq)
                     VALUES (?, ?, ?, ?, 'READY', 1, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM nodes))",
                )
                .bind(Uuid::new_v4().to_string())
                .bind(&reg.name)
                .bind(&reg.pool)
                .bind(&reg.capacity)
                .bind(now)
                .bind(&reg.version)
                .bind(&reg.metrics_addr)
                .bind(now)
                .bind(&reg.node_exporter)
                .bind(&reg.address)
                .bind(&reg.exec_addr)
                .bind(&labels)
                .execute(&mut *tx)
                .await?;
                format!("registered in pool {}", reg.pool)
            }
            Some(r) => {
                let was: String = r.get("state");
                // A node that was DOWN comes back as its holds say (READY without any).
                sqlx::query(
                    "UPDATE nodes SET pool = ?, capacity = ?, connected = 1, last_seen = ?, version = ?, metrics_addr = ?,
                     node_exporter = ?, address = ?, exec_addr = ?, labels = ?,
                     state = CASE WHEN state = 'DOWN' THEN 'READY' ELSE state END WHERE name = ?",
                )
                .bind(&reg.pool)
                .bind(&reg.capacity)
                .bind(now)
                .bind(&reg.version)
                .bind(&reg.metrics_addr)
                .bind(&reg.node_exporter)
                .bind(&reg.address)
                .bind(&reg.exec_addr)
                .bind(&labels)
                .bind(&reg.name)
                .execute(&mut *tx)
                .await?;
                format!("reconnected (was {was})")
            }
        };
        event(
            &mut tx,
            &ev(None, Some(&reg.name), None, "node.connected", msg),
            now,
        )
        .await?;
        refresh_node_state(&mut tx, &reg.name, now).await?;
        let r = sqlx::query("SELECT * FROM nodes WHERE name = ?")
            .bind(&reg.name)
            .fetch_one(&mut *tx)
            .await?;
        let row = node_row(&r)?;
        tx.commit().await?;
        Ok(row)
    }

    async fn node_seen(&self, name: &str, now: Millis) -> Result<()> {
        sqlx::query("UPDATE nodes SET last_seen = ? WHERE name = ?")
            .bind(now)
            .bind(name)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    async fn node_disconnected(&self, name: &str, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let n = sqlx::query("UPDATE nodes SET connected = 0 WHERE name = ? AND connected = 1")
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n > 0 {
            event(
                &mut tx,
                &ev(
                    None,
                    Some(name),
                    None,
                    "node.disconnected",
                    "agent connection closed".into(),
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn set_node_state(
        &self,
        name: &str,
        state: &str,
        reason: &str,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let n = sqlx::query("UPDATE nodes SET state = ? WHERE name = ? AND state != ?")
            .bind(state)
            .bind(name)
            .bind(state)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n > 0 {
            event(
                &mut tx,
                &ev(
                    None,
                    Some(name),
                    None,
                    "node.state",
                    format!("{state}: {reason}"),
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn nodes(&self) -> Result<Vec<NodeRow>> {
        sqlx::query("SELECT * FROM nodes ORDER BY pool, name")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(node_row)
            .collect()
    }

    async fn node(&self, name: &str) -> Result<NodeRow> {
        let r = sqlx::query("SELECT * FROM nodes WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        node_row(&r)
    }

    async fn events(&self, q: &EventQuery) -> Result<Vec<EventRow>> {
        let limit = if q.limit == 0 { 10_000 } else { q.limit } as i64;
        let rows = match (&q.workflow_id, &q.node) {
            (Some(w), _) => {
                sqlx::query(
                    "SELECT * FROM events WHERE workflow_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                )
                .bind(w.to_string())
                .bind(q.after)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?
            }
            (None, Some(n)) => {
                sqlx::query("SELECT * FROM events WHERE node = ? AND seq > ? ORDER BY seq LIMIT ?")
                    .bind(n)
                    .bind(q.after)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?
            }
            (None, None) => {
                sqlx::query("SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ?")
                    .bind(q.after)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?
            }
        };
        rows.iter().map(event_row).collect()
    }

    async fn node_events(
        &self,
        node: &str,
        since: Millis,
        limit: u32,
        vis: &Visibility,
    ) -> Result<(Vec<EventRow>, bool)> {
        let (all, user, group) = match vis {
            Visibility::All => (true, "", ""),
            Visibility::UserOrGroup { user, group } => (false, user.as_str(), group.as_str()),
        };
        // One query: the names come from the join, the page from the node index walked
        // backwards; one row past the page says whether there is more.
        let mut rows = sqlx::query(
            "SELECT e.*, w.name AS workflow_name FROM events e
             LEFT JOIN workflows w ON w.id = e.workflow_id
             WHERE e.node = ?1 AND e.time >= ?2
               AND (e.workflow_id IS NULL OR ?3 OR w.owner = ?4 OR w.grp = ?5)
             ORDER BY e.seq DESC LIMIT ?6",
        )
        .bind(node)
        .bind(since)
        .bind(all)
        .bind(user)
        .bind(group)
        .bind(limit as i64 + 1)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(event_row)
        .collect::<Result<Vec<_>>>()?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        rows.reverse();
        Ok((rows, more))
    }

    async fn record_unknown_node_alerts(
        &self,
        alerts: &[UnknownNodeAlert],
        now: Millis,
    ) -> Result<usize> {
        if alerts.is_empty() {
            return Ok(0);
        }
        let mut tx = self.writer.begin().await?;
        let mut recorded = 0;
        for a in alerts {
            let new = sqlx::query(
                "INSERT INTO unknown_node_alerts (fingerprint, episode, status, seen_at)
                 VALUES (?, ?, ?, ?) ON CONFLICT (fingerprint, episode, status) DO NOTHING",
            )
            .bind(&a.fingerprint)
            .bind(&a.episode)
            .bind(&a.status)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if new > 0 {
                event(&mut tx, &a.event, now).await?;
                recorded += 1;
            }
        }
        tx.commit().await?;
        Ok(recorded)
    }

    async fn record_event(&self, e: &NewEvent, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        event(&mut tx, e, now).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn log_size(&self, attempt_id: Uuid, stream: &str) -> Result<u64> {
        let n: Option<i64> =
            sqlx::query_scalar("SELECT bytes FROM logs WHERE attempt_id = ? AND stream = ?")
                .bind(attempt_id.to_string())
                .bind(stream)
                .fetch_optional(&self.pool)
                .await?;
        Ok(n.unwrap_or(0) as u64)
    }

    async fn set_log_size(&self, attempt_id: Uuid, stream: &str, bytes: u64) -> Result<()> {
        sqlx::query(
            "INSERT INTO logs (attempt_id, stream, bytes) VALUES (?, ?, ?)
             ON CONFLICT (attempt_id, stream) DO UPDATE SET bytes = MAX(bytes, excluded.bytes)",
        )
        .bind(attempt_id.to_string())
        .bind(stream)
        .bind(bytes as i64)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn add_chore(&self, c: &ChoreRow) -> Result<()> {
        sqlx::query("INSERT INTO chores (id, pool, kind, created_at) VALUES (?, ?, ?, ?)")
            .bind(c.id.to_string())
            .bind(&c.pool)
            .bind(&c.kind)
            .bind(c.created_at)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    async fn pending_chores(&self) -> Result<Vec<ChoreRow>> {
        sqlx::query("SELECT * FROM chores WHERE done_at IS NULL ORDER BY created_at")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                Ok(ChoreRow {
                    id: uuid(r.get("id"))?,
                    pool: r.get("pool"),
                    kind: r.get("kind"),
                    created_at: r.get("created_at"),
                    sent_to: r.get("sent_to"),
                })
            })
            .collect()
    }

    async fn chore_sent(&self, id: Uuid, node: &str) -> Result<()> {
        sqlx::query("UPDATE chores SET sent_to = ? WHERE id = ?")
            .bind(node)
            .bind(id.to_string())
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    async fn chore_done(&self, id: Uuid, error: Option<&str>, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let r = sqlx::query("UPDATE chores SET done_at = ?, error = ? WHERE id = ? AND done_at IS NULL RETURNING sent_to, kind")
            .bind(now)
            .bind(error)
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await?;
        if let (Some(r), Some(err)) = (r, error) {
            let node: Option<String> = r.get("sent_to");
            event(
                &mut tx,
                &ev(
                    None,
                    node.as_deref(),
                    None,
                    "chore.failed",
                    format!("{}: {err}", r.get::<String, _>("kind")),
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn put_secret(
        &self,
        key: &SecretKey,
        kind: &str,
        sealed: &str,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO secrets (scope, owner, name, kind, sealed, updated_by, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (scope, owner, name) DO UPDATE SET kind = excluded.kind, sealed = excluded.sealed,
             updated_by = excluded.updated_by, updated_at = excluded.updated_at",
        )
        .bind(&key.scope)
        .bind(&key.owner)
        .bind(&key.name)
        .bind(kind)
        .bind(sealed)
        .bind(by)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        plain_event(
            &mut tx,
            "secret.set",
            format!(
                "{by} set secret://{}/{} ({})",
                key.scope, key.name, key.owner
            ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn secret(&self, key: &SecretKey) -> Result<Option<SealedSecret>> {
        let row: Option<(String, String)> = sqlx::query_as(
            "SELECT kind, sealed FROM secrets WHERE scope = ? AND owner = ? AND name = ?",
        )
        .bind(&key.scope)
        .bind(&key.owner)
        .bind(&key.name)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(kind, sealed)| SealedSecret { kind, sealed }))
    }

    async fn list_secrets(&self, owners: &[(String, String)]) -> Result<Vec<SecretRow>> {
        let rows = sqlx::query("SELECT scope, owner, name, kind, updated_by, updated_at FROM secrets ORDER BY scope, owner, name")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|r| SecretRow {
                scope: r.get("scope"),
                owner: r.get("owner"),
                name: r.get("name"),
                kind: r.get("kind"),
                updated_by: r.get("updated_by"),
                updated_at: r.get("updated_at"),
            })
            .filter(|s| {
                owners
                    .iter()
                    .any(|(scope, owner)| *scope == s.scope && *owner == s.owner)
            })
            .collect())
    }

    async fn delete_secret(&self, key: &SecretKey, by: &str, now: Millis) -> Result<bool> {
        let mut tx = self.writer.begin().await?;
        let n = sqlx::query("DELETE FROM secrets WHERE scope = ? AND owner = ? AND name = ?")
            .bind(&key.scope)
            .bind(&key.owner)
            .bind(&key.name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n > 0 {
            plain_event(
                &mut tx,
                "secret.deleted",
                format!(
                    "{by} deleted secret://{}/{} ({})",
                    key.scope, key.name, key.owner
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(n > 0)
    }

    async fn holds(&self, node: Option<&str>, include_released: bool) -> Result<Vec<HoldRow>> {
        let rows = sqlx::query(
            "SELECT * FROM holds WHERE (?1 IS NULL OR node = ?1) AND (?2 OR state != 'RELEASED')
             ORDER BY created_at, id",
        )
        .bind(node)
        .bind(include_released)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(hold_row).collect()
    }

    async fn hold(&self, id: Uuid) -> Result<HoldRow> {
        let r = sqlx::query("SELECT * FROM holds WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        hold_row(&r)
    }

    async fn ended_episodes(
        &self,
        fingerprints: &[String],
    ) -> Result<std::collections::HashSet<(String, String)>> {
        let mut out = std::collections::HashSet::new();
        let mut wanted: Vec<&String> = fingerprints.iter().collect();
        wanted.sort();
        wanted.dedup();
        // SQLite caps bound parameters; ask in slices.
        for chunk in wanted.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(",");
            let sql = format!(
                "SELECT fingerprint, episode FROM alert_episodes WHERE fingerprint IN ({marks})"
            );
            let mut q = sqlx::query(&sql);
            for f in chunk {
                q = q.bind(f.as_str());
            }
            for r in q.fetch_all(&self.pool).await? {
                out.insert((r.get("fingerprint"), r.get("episode")));
            }
        }
        Ok(out)
    }

    async fn apply_holds(&self, changes: &[HoldChange], now: Millis) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut tx = self.writer.begin().await?;
        let mut touched: Vec<String> = vec![];
        for c in changes {
            match c {
                HoldChange::Place(h) => {
                    sqlx::query(
                        "INSERT INTO holds (id, node, pool, kind, source, state, alertname, fingerprint, episode,
                         release_rule, reason, created_by, created_at, activated_at)
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    )
                    .bind(h.id.to_string())
                    .bind(&h.node)
                    .bind(&h.pool)
                    .bind(&h.kind)
                    .bind(&h.source)
                    .bind(&h.state)
                    .bind(cap_opt(&h.alertname))
                    .bind(&h.fingerprint)
                    .bind(&h.episode)
                    .bind(&h.release_rule)
                    .bind(cap_text(&h.reason))
                    .bind(&h.created_by)
                    .bind(now)
                    .bind((h.state == "ACTIVE").then_some(now))
                    .execute(&mut *tx)
                    .await?;
                    let what = if h.state == "DEFERRED" {
                        "deferred (pool cap reached)"
                    } else {
                        "placed"
                    };
                    event(
                        &mut tx,
                        &ev(
                            None,
                            Some(&h.node),
                            None,
                            "hold.placed",
                            format!(
                                "{} hold {} {what} by {}: {}",
                                h.kind,
                                short(h.id),
                                h.created_by,
                                h.reason
                            ),
                        ),
                        now,
                    )
                    .await?;
                    touched.push(h.node.clone());
                }
                HoldChange::Activate { id } => {
                    let r = sqlx::query(
                        "UPDATE holds SET state = 'ACTIVE', activated_at = ? WHERE id = ? AND state = 'DEFERRED' RETURNING node, kind, reason",
                    )
                    .bind(now)
                    .bind(id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some(r) = r {
                        let node: String = r.get("node");
                        event(
                            &mut tx,
                            &ev(
                                None,
                                Some(&node),
                                None,
                                "hold.activated",
                                format!(
                                    "deferred {} hold {} applied: room freed in the pool",
                                    r.get::<String, _>("kind"),
                                    short(*id)
                                ),
                            ),
                            now,
                        )
                        .await?;
                        touched.push(node);
                    }
                }
                HoldChange::Release { id, by, reason } => {
                    let r = sqlx::query(
                        "UPDATE holds SET state = 'RELEASED', released_by = ?, released_at = ?, release_reason = ?
                         WHERE id = ? AND state != 'RELEASED' RETURNING node, kind",
                    )
                    .bind(by)
                    .bind(now)
                    .bind(cap_text(reason))
                    .bind(id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some(r) = r {
                        let node: String = r.get("node");
                        event(
                            &mut tx,
                            &ev(
                                None,
                                Some(&node),
                                None,
                                "hold.released",
                                format!(
                                    "{} hold {} released by {by}: {reason}",
                                    r.get::<String, _>("kind"),
                                    short(*id)
                                ),
                            ),
                            now,
                        )
                        .await?;
                        touched.push(node);
                    }
                }
                HoldChange::AlertResolved { id } => {
                    let r = sqlx::query(
                        "UPDATE holds SET alert_resolved_at = ? WHERE id = ? AND alert_resolved_at IS NULL RETURNING node",
                    )
                    .bind(now)
                    .bind(id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some(r) = r {
                        let node: String = r.get("node");
                        event(
                            &mut tx,
                            &ev(None, Some(&node), None, "hold.awaiting_admin", format!("the alert of hold {} resolved; an administrator must release it", short(*id))),
                            now,
                        )
                        .await?;
                    }
                }
                HoldChange::EndEpisode {
                    fingerprint,
                    episode,
                    by,
                } => {
                    sqlx::query(
                        "INSERT INTO alert_episodes (fingerprint, episode, ended_at, ended_by) VALUES (?, ?, ?, ?)
                         ON CONFLICT (fingerprint, episode) DO NOTHING",
                    )
                    .bind(fingerprint)
                    .bind(episode)
                    .bind(now)
                    .bind(by)
                    .execute(&mut *tx)
                    .await?;
                }
                HoldChange::Event(e) => event(&mut tx, e, now).await?,
            }
        }
        touched.sort();
        touched.dedup();
        for node in touched {
            refresh_node_state(&mut tx, &node, now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn set_attempt_address(&self, attempt: Uuid, address: &str) -> Result<()> {
        sqlx::query("UPDATE attempts SET address = ? WHERE id = ?")
            .bind(address)
            .bind(attempt.to_string())
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    async fn create_endpoint(&self, e: &EndpointRow, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let res = sqlx::query(
            "INSERT INTO endpoints (name, owner, grp, scope, mode, drain_timeout_ms, confirm, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&e.name)
        .bind(&e.owner)
        .bind(&e.group)
        .bind(&e.scope)
        .bind(&e.mode)
        .bind(e.drain_timeout_ms)
        .bind(e.confirm)
        .bind(now)
        .execute(&mut *tx)
        .await;
        conflict_if_taken(res.map_err(StoreError::from), || {
            format!("endpoint {} already exists", e.name)
        })?;
        plain_event(
            &mut tx,
            "endpoint.created",
            format!(
                "endpoint {} created by {} ({} scope, {})",
                e.name, e.owner, e.scope, e.mode
            ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn endpoint(&self, name: &str) -> Result<EndpointRow> {
        let r = sqlx::query("SELECT * FROM endpoints WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        endpoint_row(&r)
    }

    async fn endpoints(&self) -> Result<Vec<EndpointRow>> {
        sqlx::query("SELECT * FROM endpoints ORDER BY name")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(endpoint_row)
            .collect()
    }

    async fn delete_endpoint(&self, name: &str, by: &str, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let n = sqlx::query("DELETE FROM endpoints WHERE name = ?")
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        sqlx::query(
            "UPDATE takeovers SET phase = 'CANCELLED', reason = 'the endpoint was deleted', ended_at = ?, updated_at = ?
             WHERE endpoint = ? AND ended_at IS NULL",
        )
        .bind(now)
        .bind(now)
        .bind(name)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM endpoint_tokens WHERE endpoint = ?")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        plain_event(
            &mut tx,
            "endpoint.deleted",
            format!("endpoint {name} deleted by {by}"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn create_takeover(&self, t: &TakeoverRow, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO takeovers (id, endpoint, from_workflow, to_workflow, to_service, port, requested_by, channel, mode,
             phase, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(t.id.to_string())
        .bind(&t.endpoint)
        .bind(t.from_workflow.map(|u| u.to_string()))
        .bind(t.to_workflow.to_string())
        .bind(&t.to_service)
        .bind(t.port as i64)
        .bind(&t.requested_by)
        .bind(&t.channel)
        .bind(&t.mode)
        .bind(&t.phase)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let msg = match t.from_workflow {
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
        };
        event(
            &mut tx,
            &ev(
                Some(t.to_workflow),
                None,
                Some(t.to_service.clone()),
                "endpoint.takeover",
                msg,
            ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn takeovers(&self, endpoint: Option<&str>, open_only: bool) -> Result<Vec<TakeoverRow>> {
        sqlx::query(
            "SELECT * FROM takeovers WHERE (?1 IS NULL OR endpoint = ?1) AND (NOT ?2 OR ended_at IS NULL)
             ORDER BY created_at, id",
        )
        .bind(endpoint)
        .bind(open_only)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(takeover_row)
        .collect()
    }

    async fn takeover(&self, id: Uuid) -> Result<TakeoverRow> {
        let r = sqlx::query("SELECT * FROM takeovers WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        takeover_row(&r)
    }

    async fn apply_endpoints(&self, changes: &[EndpointChange], now: Millis) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut tx = self.writer.begin().await?;
        for c in changes {
            match c {
                EndpointChange::Phase {
                    id,
                    phase,
                    reason,
                    end,
                } => {
                    let r = sqlx::query(
                        "UPDATE takeovers SET phase = ?, reason = COALESCE(?, reason), updated_at = ?,
                         ended_at = CASE WHEN ? THEN ? ELSE ended_at END
                         WHERE id = ? AND ended_at IS NULL AND phase != ? RETURNING endpoint, to_workflow",
                    )
                    .bind(phase)
                    .bind(cap_opt(reason))
                    .bind(now)
                    .bind(end)
                    .bind(now)
                    .bind(id.to_string())
                    .bind(phase)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some(r) = r {
                        let endpoint: String = r.get("endpoint");
                        let wf = uuid(r.get("to_workflow"))?;
                        let why = reason
                            .as_deref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default();
                        event(
                            &mut tx,
                            &ev(
                                Some(wf),
                                None,
                                None,
                                "endpoint.phase",
                                format!("takeover of {endpoint}: {phase}{why}"),
                            ),
                            now,
                        )
                        .await?;
                    }
                }
                EndpointChange::Switch { takeover } => {
                    let r = sqlx::query("SELECT * FROM takeovers WHERE id = ?")
                        .bind(takeover.to_string())
                        .fetch_one(&mut *tx)
                        .await?;
                    let t = takeover_row(&r)?;
                    sqlx::query("UPDATE endpoints SET workflow_id = ?, service = ?, port = ?, since = ? WHERE name = ?")
                        .bind(t.to_workflow.to_string())
                        .bind(&t.to_service)
                        .bind(t.port as i64)
                        .bind(now)
                        .bind(&t.endpoint)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "UPDATE takeovers SET switched_at = ?, updated_at = ? WHERE id = ?",
                    )
                    .bind(now)
                    .bind(now)
                    .bind(takeover.to_string())
                    .execute(&mut *tx)
                    .await?;
                    let msg = format!(
                        "endpoint {} now served by {} of workflow {}",
                        t.endpoint, t.to_service, t.to_workflow
                    );
                    event(
                        &mut tx,
                        &ev(
                            Some(t.to_workflow),
                            None,
                            Some(t.to_service.clone()),
                            "endpoint.switched",
                            msg.clone(),
                        ),
                        now,
                    )
                    .await?;
                    if let Some(from) = t.from_workflow {
                        event(
                            &mut tx,
                            &ev(Some(from), None, None, "endpoint.switched", msg),
                            now,
                        )
                        .await?;
                    }
                }
                EndpointChange::Clear { endpoint, reason } => {
                    let n = sqlx::query(
                        "UPDATE endpoints SET workflow_id = NULL, service = NULL, port = NULL, since = ? WHERE name = ? AND workflow_id IS NOT NULL",
                    )
                    .bind(now)
                    .bind(endpoint)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    if n > 0 {
                        plain_event(
                            &mut tx,
                            "endpoint.idle",
                            format!("endpoint {endpoint} has no backend: {reason}"),
                            now,
                        )
                        .await?;
                    }
                }
                EndpointChange::Confirm { id, by, via } => {
                    sqlx::query("UPDATE takeovers SET confirmed_by = ?, confirmed_via = ?, updated_at = ? WHERE id = ? AND confirmed_by IS NULL")
                        .bind(by)
                        .bind(via)
                        .bind(now)
                        .bind(id.to_string())
                        .execute(&mut *tx)
                        .await?;
                }
                EndpointChange::Event(e) => event(&mut tx, e, now).await?,
            }
        }
        tx.commit().await?;
        Ok(())
    }

    async fn add_endpoint_token(
        &self,
        endpoint: &str,
        hash: &str,
        by: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<String> {
        let mut tx = self.writer.begin().await?;
        let id: String = sqlx::query_scalar("INSERT INTO endpoint_tokens (id, hash, endpoint, created_by, created_at, expires_at) VALUES (lower(hex(randomblob(8))), ?, ?, ?, ?, ?) RETURNING id")
            .bind(hash)
            .bind(endpoint)
            .bind(by)
            .bind(now)
            .bind(expires_at)
            .fetch_one(&mut *tx)
            .await?;
        plain_event(
            &mut tx,
            "endpoint.token",
            format!("{by} made a token for endpoint {endpoint}"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    async fn endpoint_token(&self, hash: &str, now: Millis) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT endpoint FROM endpoint_tokens WHERE hash = ? AND (expires_at IS NULL OR expires_at > ?)",
        )
        .bind(hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn endpoint_tokens(&self, endpoint: Option<&str>) -> Result<Vec<EndpointTokenRow>> {
        let rows = sqlx::query(
            "SELECT id, endpoint, created_by, created_at, expires_at FROM endpoint_tokens
             WHERE ? IS NULL OR endpoint = ? ORDER BY endpoint, created_at, id",
        )
        .bind(endpoint)
        .bind(endpoint)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(endpoint_token_row).collect())
    }

    async fn endpoint_token_by_id(&self, id: &str) -> Result<EndpointTokenRow> {
        let row = sqlx::query(
            "SELECT id, endpoint, created_by, created_at, expires_at FROM endpoint_tokens
             WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)?;
        Ok(endpoint_token_row(&row))
    }

    async fn revoke_endpoint_token(&self, id: &str, by: &str, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let endpoint: String =
            sqlx::query_scalar("DELETE FROM endpoint_tokens WHERE id = ? RETURNING endpoint")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or(StoreError::NotFound)?;
        plain_event(
            &mut tx,
            "endpoint.token_revoked",
            format!("{by} revoked token {id} of endpoint {endpoint}"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn put_blob(
        &self,
        digest: &str,
        size: i64,
        link: Option<Repository<'_>>,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO blobs (digest, size, created_at, last_used_at) VALUES (?, ?, ?, ?)
             ON CONFLICT (digest) DO UPDATE SET last_used_at = excluded.last_used_at",
        )
        .bind(digest)
        .bind(size)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if let Some(repo) = link {
            link_blob(&mut tx, repo, digest, now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn link_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
        now: Millis,
    ) -> Result<u64> {
        let mut tx = self.writer.begin().await?;
        let mut added = 0;
        for d in digests {
            added += link_blob(&mut tx, repo, d, now).await?;
        }
        tx.commit().await?;
        Ok(added)
    }

    async fn linked_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
    ) -> Result<std::collections::HashSet<String>> {
        let (scope, owner, name) = repo;
        let mut out = std::collections::HashSet::new();
        for chunk in digests.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql = format!(
                "SELECT digest FROM blob_links WHERE scope = ? AND owner = ? AND name = ?
                 AND digest IN ({marks})"
            );
            let mut q = sqlx::query_scalar::<_, String>(&sql)
                .bind(scope)
                .bind(owner)
                .bind(name);
            for d in chunk {
                q = q.bind(d);
            }
            out.extend(q.fetch_all(&self.pool).await?);
        }
        Ok(out)
    }

    async fn blob(&self, digest: &str) -> Result<Option<BlobRow>> {
        sqlx::query("SELECT * FROM blobs WHERE digest = ?")
            .bind(digest)
            .fetch_optional(&self.pool)
            .await?
            .map(|r| blob_row(&r))
            .transpose()
    }

    async fn blobs(&self) -> Result<Vec<BlobRow>> {
        sqlx::query("SELECT * FROM blobs ORDER BY digest")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(blob_row)
            .collect()
    }

    async fn touch_blob(&self, digest: &str, now: Millis) -> Result<()> {
        sqlx::query("UPDATE blobs SET last_used_at = MAX(last_used_at, ?) WHERE digest = ?")
            .bind(now)
            .bind(digest)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    async fn put_image(
        &self,
        repo: Repository<'_>,
        m: &NewManifest,
        image: Option<&ImageRow>,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        // Checked where it is written, so no other writer (another replica) can slip a
        // reference to a blob this repository does not link between a check and the push.
        let mut unlinked = vec![];
        for child in &m.refs {
            if !is_linked(&mut tx, repo, child).await? {
                unlinked.push(child.as_str());
            }
        }
        if !unlinked.is_empty() {
            return Err(StoreError::Conflict(format!(
                "{}/{}/{} does not link {}",
                repo.0,
                repo.1,
                repo.2,
                unlinked.join(", ")
            )));
        }
        sqlx::query(
            "INSERT INTO blobs (digest, size, created_at, last_used_at) VALUES (?, ?, ?, ?)
             ON CONFLICT (digest) DO UPDATE SET last_used_at = excluded.last_used_at",
        )
        .bind(&m.digest)
        .bind(m.size)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO manifests (digest, media_type, size, created_at) VALUES (?, ?, ?, ?)
             ON CONFLICT (digest) DO NOTHING",
        )
        .bind(&m.digest)
        .bind(&m.media_type)
        .bind(m.size)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        link_blob(&mut tx, repo, &m.digest, now).await?;
        for child in &m.refs {
            sqlx::query("INSERT OR IGNORE INTO manifest_refs (manifest, child) VALUES (?, ?)")
                .bind(&m.digest)
                .bind(child)
                .execute(&mut *tx)
                .await?;
        }
        if let Some(img) = image {
            let k = &img.key;
            sqlx::query(
                "INSERT INTO images (scope, owner, name, tag, digest, media_type, size, created_at,
                 last_used_at, build_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                 ON CONFLICT (scope, owner, name, tag) DO UPDATE SET digest = excluded.digest,
                 media_type = excluded.media_type, size = excluded.size,
                 created_at = excluded.created_at, last_used_at = excluded.last_used_at,
                 build_key = excluded.build_key",
            )
            .bind(&k.scope)
            .bind(&k.owner)
            .bind(&k.name)
            .bind(&k.tag)
            .bind(&img.digest)
            .bind(&img.media_type)
            .bind(img.size)
            .bind(img.created_at)
            .bind(img.last_used_at)
            .bind(&img.build_key)
            .execute(&mut *tx)
            .await?;
            // Untagged manifests this one references are reachable through it now.
            for child in &m.refs {
                if *child == k.tag {
                    continue;
                }
                sqlx::query(
                    "DELETE FROM images WHERE scope = ? AND owner = ? AND name = ? AND tag = ?",
                )
                .bind(&k.scope)
                .bind(&k.owner)
                .bind(&k.name)
                .bind(child)
                .execute(&mut *tx)
                .await?;
            }
            plain_event(
                &mut tx,
                "image.pushed",
                format!(
                    "{by} pushed {}/{}/{}:{} ({}, {} bytes)",
                    k.scope, k.owner, k.name, k.tag, img.digest, img.size
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn manifest(&self, digest: &str) -> Result<Option<ManifestRow>> {
        Ok(sqlx::query("SELECT * FROM manifests WHERE digest = ?")
            .bind(digest)
            .fetch_optional(&self.pool)
            .await?
            .map(|r| ManifestRow {
                digest: r.get("digest"),
                media_type: r.get("media_type"),
                size: r.get("size"),
                created_at: r.get("created_at"),
            }))
    }

    async fn manifest_refs(&self, manifests: Option<&[String]>) -> Result<Vec<(String, String)>> {
        let pair = |r: &SqliteRow| (r.get::<String, _>("manifest"), r.get::<String, _>("child"));
        let Some(manifests) = manifests else {
            return Ok(sqlx::query(
                "SELECT manifest, child FROM manifest_refs ORDER BY manifest, child",
            )
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(pair)
            .collect());
        };
        let mut out = vec![];
        for chunk in manifests.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql = format!(
                "SELECT manifest, child FROM manifest_refs WHERE manifest IN ({marks})
                 ORDER BY manifest, child"
            );
            let mut q = sqlx::query(&sql);
            for d in chunk {
                q = q.bind(d);
            }
            out.extend(q.fetch_all(&self.pool).await?.iter().map(pair));
        }
        Ok(out)
    }

    async fn image(&self, key: &ImageKey) -> Result<Option<ImageRow>> {
        Ok(sqlx::query(
            "SELECT * FROM images WHERE scope = ? AND owner = ? AND name = ? AND tag = ?",
        )
        .bind(&key.scope)
        .bind(&key.owner)
        .bind(&key.name)
        .bind(&key.tag)
        .fetch_optional(&self.pool)
        .await?
        .map(|r| image_row(&r)))
    }

    async fn images(&self, repo: Option<(&str, &str, &str)>) -> Result<Vec<ImageRow>> {
        let rows = match repo {
            Some((scope, owner, name)) => {
                sqlx::query(
                    "SELECT * FROM images WHERE scope = ? AND owner = ? AND name = ?
                     ORDER BY tag",
                )
                .bind(scope)
                .bind(owner)
                .bind(name)
                .fetch_all(&self.pool)
                .await?
            }
            None => {
                sqlx::query("SELECT * FROM images ORDER BY scope, owner, name, tag")
                    .fetch_all(&self.pool)
                    .await?
            }
        };
        Ok(rows.iter().map(image_row).collect())
    }

    async fn image_by_build_key(
        &self,
        scope: &str,
        owner: &str,
        build_key: &str,
    ) -> Result<Option<ImageRow>> {
        Ok(sqlx::query(
            "SELECT * FROM images WHERE scope = ? AND owner = ? AND build_key = ?
             ORDER BY created_at DESC LIMIT 1",
        )
        .bind(scope)
        .bind(owner)
        .bind(build_key)
        .fetch_optional(&self.pool)
        .await?
        .map(|r| image_row(&r)))
    }

    async fn touch_image(&self, key: &ImageKey, now: Millis) -> Result<()> {
        sqlx::query(
            "UPDATE images SET last_used_at = MAX(last_used_at, ?)
             WHERE scope = ? AND owner = ? AND name = ? AND tag = ?",
        )
        .bind(now)
        .bind(&key.scope)
        .bind(&key.owner)
        .bind(&key.name)
        .bind(&key.tag)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn delete_images(
        &self,
        keys: &[ImageKey],
        by: &str,
        why: &str,
        now: Millis,
    ) -> Result<u64> {
        let mut tx = self.writer.begin().await?;
        let mut removed = 0;
        for k in keys {
            let n = sqlx::query(
                "DELETE FROM images WHERE scope = ? AND owner = ? AND name = ? AND tag = ?",
            )
            .bind(&k.scope)
            .bind(&k.owner)
            .bind(&k.name)
            .bind(&k.tag)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 0 {
                continue;
            }
            removed += n;
            plain_event(
                &mut tx,
                "image.deleted",
                format!(
                    "{by} removed {}/{}/{}:{} ({why})",
                    k.scope, k.owner, k.name, k.tag
                ),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(removed)
    }

    async fn delete_blobs(&self, digests: &[String], now: Millis) -> Result<()> {
        if digests.is_empty() {
            return Ok(());
        }
        let mut tx = self.writer.begin().await?;
        let mut bytes: i64 = 0;
        for d in digests {
            bytes += sqlx::query_scalar::<_, i64>("SELECT size FROM blobs WHERE digest = ?")
                .bind(d)
                .fetch_optional(&mut *tx)
                .await?
                .unwrap_or(0);
            for sql in [
                "DELETE FROM blobs WHERE digest = ?",
                "DELETE FROM manifests WHERE digest = ?",
                "DELETE FROM manifest_refs WHERE manifest = ?",
                "DELETE FROM blob_links WHERE digest = ?",
            ] {
                sqlx::query(sql).bind(d).execute(&mut *tx).await?;
            }
        }
        plain_event(
            &mut tx,
            "image.blobs_deleted",
            format!(
                "the object cache deleted {} unreferenced blobs ({bytes} bytes)",
                digests.len()
            ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn set_image_build_key(&self, key: &ImageKey, build_key: Option<&str>) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE images SET build_key = ? WHERE scope = ? AND owner = ? AND name = ? AND tag = ?",
        )
        .bind(build_key)
        .bind(&key.scope)
        .bind(&key.owner)
        .bind(&key.name)
        .bind(&key.tag)
        .execute(&self.writer)
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    async fn setting(&self, key: &str) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT value FROM settings WHERE key = ?")
                .bind(key)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn set_setting(&self, key: &str, value: &str, by: &str, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value")
            .bind(key)
            .bind(value)
            .execute(&mut *tx)
            .await?;
        plain_event(&mut tx, "settings", format!("{by} set {key}={value}"), now).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn add_storage(&self, s: &StorageRow, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let groups = s
            .groups
            .as_ref()
            .map(|g| serde_json::to_string(g).expect("strings serialize"));
        let res = sqlx::query(
            "INSERT INTO storages (name, driver, path, pool, groups, created_by, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&s.name)
        .bind(&s.driver)
        .bind(&s.path)
        .bind(&s.pool)
        .bind(groups)
        .bind(&s.created_by)
        .bind(now)
        .execute(&mut *tx)
        .await;
        conflict_if_taken(res.map_err(StoreError::from), || {
            format!("storage {} already exists", s.name)
        })?;
        plain_event(
            &mut tx,
            "storage.added",
            format!(
                "{} added storage {} ({} at {})",
                s.created_by, s.name, s.driver, s.path
            ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn storages(&self) -> Result<Vec<StorageRow>> {
        let rows = sqlx::query("SELECT * FROM storages ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let groups: Option<String> = r.get("groups");
                Ok(StorageRow {
                    name: r.get("name"),
                    driver: r.get("driver"),
                    path: r.get("path"),
                    pool: r.get("pool"),
                    groups: groups
                        .map(|g| serde_json::from_str(&g))
                        .transpose()
                        .map_err(|e| StoreError::Corrupt(format!("storage groups: {e}")))?,
                    created_by: r.get("created_by"),
                    created_at: r.get("created_at"),
                })
            })
            .collect()
    }

    async fn delete_storage(&self, name: &str, by: &str, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let used: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM volumes WHERE storage = ?")
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
        let n = sqlx::query("DELETE FROM storages WHERE name = ?")
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        if used > 0 {
            return Err(StoreError::Conflict(format!(
                "storage {name} holds {used} volume(s): remove them first"
            )));
        }
        plain_event(
            &mut tx,
            "storage.removed",
            format!("{by} removed storage {name}"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn create_volume(&self, v: &VolumeRow, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let res = insert_volume(&mut tx, v, now, false).await;
        conflict_if_taken(res, || {
            format!("volume {} already exists in {} scope", v.name, v.scope)
        })?;
        tx.commit().await?;
        Ok(())
    }

    async fn ensure_volume(&self, v: &VolumeRow, now: Millis) -> Result<VolumeRow> {
        let mut tx = self.writer.begin().await?;
        insert_volume(&mut tx, v, now, true).await?;
        let r = sqlx::query("SELECT * FROM volumes WHERE scope = ? AND owner = ? AND name = ?")
            .bind(&v.scope)
            .bind(&v.owner)
            .bind(&v.name)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        volume_row(&r)
    }

    async fn volume(&self, scope: &str, owner: &str, name: &str) -> Result<Option<VolumeRow>> {
        sqlx::query("SELECT * FROM volumes WHERE scope = ? AND owner = ? AND name = ?")
            .bind(scope)
            .bind(owner)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(volume_row)
            .transpose()
    }

    async fn volumes(&self, owners: Option<&[(String, String)]>) -> Result<Vec<VolumeRow>> {
        let rows = sqlx::query("SELECT * FROM volumes ORDER BY scope, owner, name")
            .fetch_all(&self.pool)
            .await?;
        let all = rows.iter().map(volume_row).collect::<Result<Vec<_>>>()?;
        Ok(match owners {
            None => all,
            Some(owners) => all
                .into_iter()
                .filter(|v| owners.iter().any(|(s, o)| *s == v.scope && *o == v.owner))
                .collect(),
        })
    }

    async fn volume_users(&self, id: Uuid) -> Result<Vec<Uuid>> {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT u.workflow_id FROM volume_uses u JOIN workflows w ON w.id = u.workflow_id
             WHERE u.volume_id = ? AND w.status IN ('PENDING', 'RUNNING') ORDER BY w.created_at",
        )
        .bind(id.to_string())
        .fetch_all(&self.pool)
        .await?;
        ids.iter().map(|s| uuid(s)).collect()
    }

    async fn delete_volume(&self, id: Uuid, by: &str, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let users: Vec<String> = sqlx::query_scalar(
            "SELECT u.workflow_id FROM volume_uses u JOIN workflows w ON w.id = u.workflow_id
             WHERE u.volume_id = ? AND w.status IN ('PENDING', 'RUNNING') ORDER BY w.created_at",
        )
        .bind(id.to_string())
        .fetch_all(&mut *tx)
        .await?;
        if !users.is_empty() {
            return Err(StoreError::Conflict(format!(
                "the volume is mounted by workflow(s) not yet ended: {}; stop them or wait",
                users.join(", ")
            )));
        }
        sqlx::query("DELETE FROM volume_uses WHERE volume_id = ?")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        let r = sqlx::query("DELETE FROM volumes WHERE id = ? RETURNING scope, name")
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
        let (scope, name): (String, String) = (r.get("scope"), r.get("name"));
        plain_event(
            &mut tx,
            "volume.removed",
            format!("{by} removed volume {scope}/{name}"),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

async fn insert_volume(
    tx: &mut Transaction<'_, Sqlite>,
    v: &VolumeRow,
    now: Millis,
    first_use: bool,
) -> Result<()> {
    let sql = if first_use {
        "INSERT INTO volumes (id, scope, owner, name, storage, created_by, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope, owner, name) DO NOTHING"
    } else {
        "INSERT INTO volumes (id, scope, owner, name, storage, created_by, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?)"
    };
    let n = sqlx::query(sql)
        .bind(v.id.to_string())
        .bind(&v.scope)
        .bind(&v.owner)
        .bind(&v.name)
        .bind(&v.storage)
        .bind(&v.created_by)
        .bind(now)
        .execute(&mut **tx)
        .await?
        .rows_affected();
    if n > 0 {
        let how = if first_use { " on first use" } else { "" };
        plain_event(
            tx,
            "volume.created",
            format!(
                "{} created volume {}/{} ({}) on storage {}{how}",
                v.created_by, v.scope, v.name, v.owner, v.storage
            ),
            now,
        )
        .await?;
    }
    Ok(())
}

fn volume_row(r: &sqlx::sqlite::SqliteRow) -> Result<VolumeRow> {
    Ok(VolumeRow {
        id: uuid(r.get("id"))?,
        scope: r.get("scope"),
        owner: r.get("owner"),
        name: r.get("name"),
        storage: r.get("storage"),
        created_by: r.get("created_by"),
        created_at: r.get("created_at"),
    })
}

/// Links a blob that has a row into a repository; 1 when the link is new.
async fn link_blob(
    tx: &mut Transaction<'_, Sqlite>,
    (scope, owner, name): Repository<'_>,
    digest: &str,
    now: Millis,
) -> Result<u64> {
    Ok(sqlx::query(
        "INSERT OR IGNORE INTO blob_links (scope, owner, name, digest, created_at)
         SELECT ?, ?, ?, digest, ? FROM blobs WHERE digest = ?",
    )
    .bind(scope)
    .bind(owner)
    .bind(name)
    .bind(now)
    .bind(digest)
    .execute(&mut **tx)
    .await?
    .rows_affected())
}

async fn is_linked(
    tx: &mut Transaction<'_, Sqlite>,
    (scope, owner, name): Repository<'_>,
    digest: &str,
) -> Result<bool> {
    Ok(sqlx::query_scalar::<_, i64>(
        "SELECT 1 FROM blob_links WHERE scope = ? AND owner = ? AND name = ? AND digest = ?",
    )
    .bind(scope)
    .bind(owner)
    .bind(name)
    .bind(digest)
    .fetch_optional(&mut **tx)
    .await?
    .is_some())
}

fn blob_row(r: &SqliteRow) -> Result<BlobRow> {
    Ok(BlobRow {
        digest: r.get("digest"),
        size: r.get("size"),
        created_at: r.get("created_at"),
        last_used_at: r.get("last_used_at"),
    })
}

fn image_row(r: &SqliteRow) -> ImageRow {
    ImageRow {
        key: ImageKey {
            scope: r.get("scope"),
            owner: r.get("owner"),
            name: r.get("name"),
            tag: r.get("tag"),
        },
        digest: r.get("digest"),
        media_type: r.get("media_type"),
        size: r.get("size"),
        created_at: r.get("created_at"),
        last_used_at: r.get("last_used_at"),
        build_key: r.get("build_key"),
    }
}

/// `res`, with a unique-key violation turned into [`StoreError::Conflict`] with `what` (the
/// name is taken).
fn conflict_if_taken<T>(res: Result<T>, what: impl FnOnce() -> String) -> Result<T> {
    match res {
        Err(StoreError::Db(sqlx::Error::Database(d))) if d.is_unique_violation() => {
            Err(StoreError::Conflict(what()))
        }
        other => other,
    }
}
