//! Row decoding shared by both backends: a row of either into the store's types, and the small
//! parsers they share. A backend's row gives its columns through [`Cols`]; the columns'
//! types are the same in both schemas (BIGINT for SQLite's INTEGER, TEXT for TEXT, BOOLEAN for
//! the flags SQLite keeps as 0 or 1, which sqlx reads as `bool` from either).

use std::str::FromStr;

use sqlx::postgres::{PgRow, Postgres};
use sqlx::sqlite::{Sqlite, SqliteRow};
use sqlx::{Decode, Row, Type};
use uuid::Uuid;

use crate::*;

/// A value that a column of either backend decodes into.
pub(crate) trait Col: Sized {
    fn from_sqlite(r: &SqliteRow, col: &str) -> Result<Self, sqlx::Error>;
    fn from_pg(r: &PgRow, col: &str) -> Result<Self, sqlx::Error>;
}

impl<T> Col for T
where
    T: for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>,
{
    fn from_sqlite(r: &SqliteRow, col: &str) -> Result<Self, sqlx::Error> {
        r.try_get(col)
    }
    fn from_pg(r: &PgRow, col: &str) -> Result<Self, sqlx::Error> {
        r.try_get(col)
    }
}

/// A row's columns by name, whichever backend read it.
pub(crate) trait Cols {
    fn try_col<T: Col>(&self, col: &str) -> Result<T, sqlx::Error>;

    /// The column's value; panics (as sqlx's `Row::get` does) when the query did not select
    /// it or its type is not `T`: a bug in the query, not in the data.
    #[track_caller]
    fn col<T: Col>(&self, col: &str) -> T {
        self.try_col(col)
            .unwrap_or_else(|e| panic!("column {col:?}: {e}"))
    }
}

impl Cols for SqliteRow {
    fn try_col<T: Col>(&self, col: &str) -> Result<T, sqlx::Error> {
        T::from_sqlite(self, col)
    }
}

impl Cols for PgRow {
    fn try_col<T: Col>(&self, col: &str) -> Result<T, sqlx::Error> {
        T::from_pg(self, col)
    }
}

pub(crate) fn uuid(s: &str) -> Result<Uuid> {
    Uuid::parse_str(s).map_err(|e| StoreError::Corrupt(format!("bad id {s:?}: {e}")))
}

pub(crate) fn opt_uuid(s: Option<String>) -> Result<Option<Uuid>> {
    s.map(|s| uuid(&s)).transpose()
}

pub(crate) fn parse<T: FromStr<Err = String>>(s: &str) -> Result<T> {
    T::from_str(s).map_err(StoreError::Corrupt)
}

pub(crate) fn opt_parse<T: FromStr<Err = String>>(s: Option<String>) -> Result<Option<T>> {
    s.map(|s| parse(&s)).transpose()
}

/// `task_counts` rows summed by (workflow_id, status) into `n`.
pub(crate) fn status_counts(rows: &[impl Cols]) -> Result<StatusCounts> {
    let mut out = StatusCounts::default();
    for r in rows {
        out.entry(uuid(&r.col::<String>("workflow_id"))?)
            .or_default()
            .insert(parse(&r.col::<String>("status"))?, r.col::<i64>("n") as u64);
    }
    Ok(out)
}

pub(crate) fn task_label(job: &str, idx: Option<i64>) -> String {
    match idx {
        Some(i) => format!("{job}[{i}]"),
        None => job.to_string(),
    }
}

/// What an attempt row holds, from its resource columns.
pub(crate) fn need_of(a: &impl Cols) -> Result<AttemptNeed> {
    Ok(AttemptNeed {
        millicpus: a.col::<i64>("millicpus") as u64,
        memory_bytes: a.col::<i64>("memory_bytes") as u64,
        devices: serde_json::from_str(&a.col::<String>("devices"))
            .map_err(|e| StoreError::Corrupt(format!("attempt devices: {e}")))?,
        exclusive: a.col("exclusive"),
    })
}

pub(crate) fn user_row(r: &impl Cols) -> Result<User> {
    Ok(User {
        id: uuid(&r.col::<String>("id"))?,
        name: r.col("name"),
        group: r.col("grp"),
        role: parse_role(&r.col::<String>("role")).map_err(StoreError::Corrupt)?,
    })
}

pub(crate) fn token_row(r: &impl Cols) -> Result<TokenRow> {
    Ok(TokenRow {
        id: r.col("id"),
        user: r.col("name"),
        role: parse_role(&r.col::<String>("role")).map_err(StoreError::Corrupt)?,
        purpose: r.col("purpose"),
        created_at: r.col("created_at"),
        expires_at: r.col("expires_at"),
    })
}

pub(crate) fn endpoint_token_row(r: &impl Cols) -> EndpointTokenRow {
    EndpointTokenRow {
        id: r.col("id"),
        endpoint: r.col("endpoint"),
        created_by: r.col("created_by"),
        created_at: r.col("created_at"),
        expires_at: r.col("expires_at"),
    }
}

pub(crate) fn workflow_row(r: &impl Cols) -> Result<WorkflowRow> {
    Ok(WorkflowRow {
        id: uuid(&r.col::<String>("id"))?,
        name: r.col("name"),
        owner: r.col("owner"),
        group: r.col("grp"),
        spec: r.col("spec"),
        plan: r.col("plan"),
        status: parse(&r.col::<String>("status"))?,
        reason: r.col("reason"),
        stop_requested: r.col("stop_requested"),
        created_at: r.col("created_at"),
        ended_at: r.col("ended_at"),
    })
}

pub(crate) fn task_row(r: &impl Cols) -> Result<TaskRow> {
    Ok(TaskRow {
        id: uuid(&r.col::<String>("id"))?,
        workflow_id: uuid(&r.col::<String>("workflow_id"))?,
        job: r.col("job"),
        index: r.col::<Option<i64>>("idx").map(|i| i as u32),
        ord: r.col::<i64>("ord") as u32,
        status: parse(&r.col::<String>("status"))?,
        reason: r.col("reason"),
        attempts: r.col::<i64>("attempts") as u32,
        live_attempt: opt_uuid(r.col("live_attempt"))?,
        node: r.col("node"),
        exit_code: r.col::<Option<i64>>("exit_code").map(|c| c as i32),
        created_at: r.col("created_at"),
        ended_at: r.col("ended_at"),
        not_before: r.col("not_before"),
    })
}

pub(crate) fn attempt_row(r: &impl Cols) -> Result<AttemptRow> {
    Ok(AttemptRow {
        id: uuid(&r.col::<String>("id"))?,
        task_id: uuid(&r.col::<String>("task_id"))?,
        workflow_id: uuid(&r.col::<String>("workflow_id"))?,
        number: r.col::<i64>("number") as u32,
        node: r.col("node"),
        status: parse(&r.col::<String>("status"))?,
        cause: opt_parse(r.col("cause"))?,
        exit_code: r.col::<Option<i64>>("exit_code").map(|c| c as i32),
        reason: r.col("reason"),
        stop_sent: opt_parse(r.col("stop_sent"))?,
        assignment: r.col("assignment"),
        created_at: r.col("created_at"),
        running_at: r.col("running_at"),
        ended_at: r.col("ended_at"),
        address: r.col("address"),
    })
}

pub(crate) fn node_row(r: &impl Cols) -> Result<NodeRow> {
    Ok(NodeRow {
        id: uuid(&r.col::<String>("id"))?,
        name: r.col("name"),
        pool: r.col("pool"),
        capacity: r.col("capacity"),
        state: parse(&r.col::<String>("state"))?,
        connected: r.col("connected"),
        last_seen: r.col("last_seen"),
        version: r.col("version"),
        metrics_addr: r.col("metrics_addr"),
        node_exporter: r.col("node_exporter"),
        seq: r.col::<Option<i64>>("seq").unwrap_or(0),
        address: r.col("address"),
        exec_addr: r.col("exec_addr"),
        // Written only by `register_node`, from a map: anything else is a damaged row.
        labels: serde_json::from_str(&r.col::<String>("labels"))
            .map_err(|e| StoreError::Corrupt(format!("node labels: {e}")))?,
    })
}

pub(crate) fn event_row(r: &impl Cols) -> Result<EventRow> {
    Ok(EventRow {
        seq: r.col("seq"),
        time: r.col("time"),
        workflow_id: opt_uuid(r.col("workflow_id"))?,
        node: r.col("node"),
        task: r.col("task"),
        kind: r.col("kind"),
        message: r.col("message"),
        workflow_name: r.try_col("workflow_name").ok().flatten(),
    })
}

pub(crate) fn endpoint_row(r: &impl Cols) -> Result<EndpointRow> {
    Ok(EndpointRow {
        name: r.col("name"),
        owner: r.col("owner"),
        group: r.col("grp"),
        scope: parse(&r.col::<String>("scope"))?,
        mode: parse(&r.col::<String>("mode"))?,
        drain_timeout_ms: r.col("drain_timeout_ms"),
        confirm: r.col("confirm"),
        created_at: r.col("created_at"),
        workflow_id: opt_uuid(r.col("workflow_id"))?,
        service: r.col("service"),
        port: r.col::<Option<i64>>("port").map(|p| p as u16),
        since: r.col("since"),
    })
}

pub(crate) fn proxy_view_row(r: &impl Cols) -> Result<ProxyViewRow> {
    Ok(ProxyViewRow {
        replica: r.col("replica"),
        view: ProxyView {
            endpoint: r.col("endpoint"),
            workflow_id: opt_uuid(r.col("workflow_id"))?,
            attempt_id: opt_uuid(r.col("attempt_id"))?,
            old_in_flight: r.col::<i64>("old_in_flight").max(0) as u64,
        },
        seen_at: r.col("seen_at"),
    })
}

pub(crate) fn takeover_row(r: &impl Cols) -> Result<TakeoverRow> {
    Ok(TakeoverRow {
        id: uuid(&r.col::<String>("id"))?,
        endpoint: r.col("endpoint"),
        from_workflow: opt_uuid(r.col("from_workflow"))?,
        to_workflow: uuid(&r.col::<String>("to_workflow"))?,
        to_service: r.col("to_service"),
        port: r.col::<i64>("port") as u16,
        requested_by: r.col("requested_by"),
        channel: parse(&r.col::<String>("channel"))?,
        mode: parse(&r.col::<String>("mode"))?,
        phase: parse(&r.col::<String>("phase"))?,
        reason: r.col("reason"),
        confirmed_by: r.col("confirmed_by"),
        confirmed_via: r.col("confirmed_via"),
        created_at: r.col("created_at"),
        updated_at: r.col("updated_at"),
        switched_at: r.col("switched_at"),
        ended_at: r.col("ended_at"),
    })
}

pub(crate) fn short(id: Uuid) -> String {
    id.to_string()[..8].to_string()
}

pub(crate) fn hold_row(r: &impl Cols) -> Result<HoldRow> {
    Ok(HoldRow {
        id: uuid(&r.col::<String>("id"))?,
        node: r.col("node"),
        pool: r.col("pool"),
        kind: parse(&r.col::<String>("kind"))?,
        source: parse(&r.col::<String>("source"))?,
        state: parse(&r.col::<String>("state"))?,
        alertname: r.col("alertname"),
        fingerprint: r.col("fingerprint"),
        episode: r.col("episode"),
        release_rule: parse(&r.col::<String>("release_rule"))?,
        reason: r.col("reason"),
        created_by: r.col("created_by"),
        created_at: r.col("created_at"),
        activated_at: r.col("activated_at"),
        alert_resolved_at: r.col("alert_resolved_at"),
        released_by: r.col("released_by"),
        released_at: r.col("released_at"),
        release_reason: r.col("release_reason"),
    })
}

pub(crate) fn volume_row(r: &impl Cols) -> Result<VolumeRow> {
    Ok(VolumeRow {
        id: uuid(&r.col::<String>("id"))?,
        scope: parse(&r.col::<String>("scope"))?,
        owner: r.col("owner"),
        name: r.col("name"),
        storage: r.col("storage"),
        created_by: r.col("created_by"),
        created_at: r.col("created_at"),
    })
}

pub(crate) fn blob_row(r: &impl Cols) -> Result<BlobRow> {
    Ok(BlobRow {
        digest: r.col("digest"),
        size: r.col("size"),
        created_at: r.col("created_at"),
        last_used_at: r.col("last_used_at"),
    })
}

pub(crate) fn image_row(r: &impl Cols) -> ImageRow {
    ImageRow {
        key: ImageKey {
            scope: r.col("scope"),
            owner: r.col("owner"),
            name: r.col("name"),
            tag: r.col("tag"),
        },
        digest: r.col("digest"),
        media_type: r.col("media_type"),
        size: r.col("size"),
        created_at: r.col("created_at"),
        last_used_at: r.col("last_used_at"),
        build_key: r.col("build_key"),
    }
}

pub(crate) fn manifest_row(r: &impl Cols) -> ManifestRow {
    ManifestRow {
        digest: r.col("digest"),
        media_type: r.col("media_type"),
        size: r.col("size"),
        created_at: r.col("created_at"),
    }
}

pub(crate) fn chore_row(r: &impl Cols) -> Result<ChoreRow> {
    Ok(ChoreRow {
        id: uuid(&r.col::<String>("id"))?,
        pool: r.col("pool"),
        kind: serde_json::from_str(&r.col::<String>("kind"))
            .map_err(|e| StoreError::Corrupt(format!("chore kind: {e}")))?,
        created_at: r.col("created_at"),
        sent_to: r.col("sent_to"),
    })
}

pub(crate) fn storage_row(r: &impl Cols) -> Result<StorageRow> {
    let groups: Option<String> = r.col("groups");
    Ok(StorageRow {
        name: r.col("name"),
        driver: parse(&r.col::<String>("driver"))?,
        path: r.col("path"),
        pool: r.col("pool"),
        groups: groups
            .map(|g| serde_json::from_str(&g))
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("storage groups: {e}")))?,
        created_by: r.col("created_by"),
        created_at: r.col("created_at"),
    })
}

/// A secret's listing row (its sealed value is not selected).
pub(crate) fn secret_row(r: &impl Cols) -> Result<SecretRow> {
    Ok(SecretRow {
        scope: parse(&r.col::<String>("scope"))?,
        owner: r.col("owner"),
        name: r.col("name"),
        kind: parse(&r.col::<String>("kind"))?,
        updated_by: r.col("updated_by"),
        updated_at: r.col("updated_at"),
    })
}
