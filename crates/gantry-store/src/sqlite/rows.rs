//! Row decoding: a SQLite row into the store's types, and the small parsers they share.

use super::*;

pub(super) fn uuid(s: &str) -> Result<Uuid> {
    Uuid::parse_str(s).map_err(|e| StoreError::Corrupt(format!("bad id {s:?}: {e}")))
}

pub(super) fn opt_uuid(s: Option<String>) -> Result<Option<Uuid>> {
    s.map(|s| uuid(&s)).transpose()
}

pub(super) fn parse<T: FromStr<Err = String>>(s: &str) -> Result<T> {
    T::from_str(s).map_err(StoreError::Corrupt)
}

pub(super) fn opt_parse<T: FromStr<Err = String>>(s: Option<String>) -> Result<Option<T>> {
    s.map(|s| parse(&s)).transpose()
}

pub(super) fn task_label(job: &str, idx: Option<i64>) -> String {
    match idx {
        Some(i) => format!("{job}[{i}]"),
        None => job.to_string(),
    }
}

pub(super) fn user_row(r: &SqliteRow) -> Result<User> {
    Ok(User {
        id: uuid(r.get("id"))?,
        name: r.get("name"),
        group: r.get("grp"),
        role: parse_role(r.get("role")).map_err(StoreError::Corrupt)?,
    })
}

pub(super) fn token_row(r: &SqliteRow) -> Result<TokenRow> {
    Ok(TokenRow {
        id: r.get("id"),
        user: r.get("name"),
        role: parse_role(r.get("role")).map_err(StoreError::Corrupt)?,
        purpose: r.get("purpose"),
        created_at: r.get("created_at"),
        expires_at: r.get("expires_at"),
    })
}

pub(super) fn endpoint_token_row(r: &SqliteRow) -> EndpointTokenRow {
    EndpointTokenRow {
        id: r.get("id"),
        endpoint: r.get("endpoint"),
        created_by: r.get("created_by"),
        created_at: r.get("created_at"),
        expires_at: r.get("expires_at"),
    }
}

pub(super) fn workflow_row(r: &SqliteRow) -> Result<WorkflowRow> {
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

pub(super) fn task_row(r: &SqliteRow) -> Result<TaskRow> {
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

pub(super) fn attempt_row(r: &SqliteRow) -> Result<AttemptRow> {
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

pub(super) fn node_row(r: &SqliteRow) -> Result<NodeRow> {
    Ok(NodeRow {
        id: uuid(r.get("id"))?,
        name: r.get("name"),
        pool: r.get("pool"),
        capacity: r.get("capacity"),
        state: parse(r.get("state"))?,
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

pub(super) fn event_row(r: &SqliteRow) -> Result<EventRow> {
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

pub(super) fn endpoint_row(r: &SqliteRow) -> Result<EndpointRow> {
    Ok(EndpointRow {
        name: r.get("name"),
        owner: r.get("owner"),
        group: r.get("grp"),
        scope: parse(r.get("scope"))?,
        mode: parse(r.get("mode"))?,
        drain_timeout_ms: r.get("drain_timeout_ms"),
        confirm: r.get::<i64, _>("confirm") != 0,
        created_at: r.get("created_at"),
        workflow_id: opt_uuid(r.get("workflow_id"))?,
        service: r.get("service"),
        port: r.get::<Option<i64>, _>("port").map(|p| p as u16),
        since: r.get("since"),
    })
}

pub(super) fn takeover_row(r: &SqliteRow) -> Result<TakeoverRow> {
    Ok(TakeoverRow {
        id: uuid(r.get("id"))?,
        endpoint: r.get("endpoint"),
        from_workflow: opt_uuid(r.get("from_workflow"))?,
        to_workflow: uuid(r.get("to_workflow"))?,
        to_service: r.get("to_service"),
        port: r.get::<i64, _>("port") as u16,
        requested_by: r.get("requested_by"),
        channel: parse(r.get("channel"))?,
        mode: parse(r.get("mode"))?,
        phase: parse(r.get("phase"))?,
        reason: r.get("reason"),
        confirmed_by: r.get("confirmed_by"),
        confirmed_via: r.get("confirmed_via"),
        created_at: r.get("created_at"),
        updated_at: r.get("updated_at"),
        switched_at: r.get("switched_at"),
        ended_at: r.get("ended_at"),
    })
}

pub(super) fn short(id: Uuid) -> String {
    id.to_string()[..8].to_string()
}

pub(super) fn hold_row(r: &SqliteRow) -> Result<HoldRow> {
    Ok(HoldRow {
        id: uuid(r.get("id"))?,
        node: r.get("node"),
        pool: r.get("pool"),
        kind: parse(r.get("kind"))?,
        source: parse(r.get("source"))?,
        state: parse(r.get("state"))?,
        alertname: r.get("alertname"),
        fingerprint: r.get("fingerprint"),
        episode: r.get("episode"),
        release_rule: parse(r.get("release_rule"))?,
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

pub(super) fn volume_row(r: &sqlx::sqlite::SqliteRow) -> Result<VolumeRow> {
    Ok(VolumeRow {
        id: uuid(r.get("id"))?,
        scope: parse(r.get("scope"))?,
        owner: r.get("owner"),
        name: r.get("name"),
        storage: r.get("storage"),
        created_by: r.get("created_by"),
        created_at: r.get("created_at"),
    })
}

pub(super) fn blob_row(r: &SqliteRow) -> Result<BlobRow> {
    Ok(BlobRow {
        digest: r.get("digest"),
        size: r.get("size"),
        created_at: r.get("created_at"),
        last_used_at: r.get("last_used_at"),
    })
}

pub(super) fn image_row(r: &SqliteRow) -> ImageRow {
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
