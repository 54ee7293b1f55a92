//! Nodes as users see them: capacity, what is allocated, holds, and a page of events.

use gantry_api::agent::{Assignment, Capacity};
use gantry_api::v1::{NodeDetail, NodeInfo};
use gantry_store::NodeRow;
use time::OffsetDateTime;

use crate::caller::Caller;
use crate::clock::ts;
use crate::error::ApiError;
use crate::services::workflows::event;
use crate::state::{now_ms, AppState};

async fn info(st: &AppState, n: NodeRow) -> Result<NodeInfo, ApiError> {
    let capacity: Capacity = serde_json::from_str(&n.capacity).unwrap_or_default();
    let live = st.store.live_attempts_on(&n.name).await?;
    let mut allocated = Capacity::default();
    let mut millicpus = 0u64;
    for a in &live {
        if let Ok(asg) = serde_json::from_str::<Assignment>(&a.assignment) {
            millicpus += (asg.resources.cpus * 1000.0) as u64;
            allocated.memory_bytes += asg.resources.memory_bytes.unwrap_or(0);
            for (d, c) in asg.resources.devices {
                *allocated.devices.entry(d).or_insert(0) += c;
            }
        }
    }
    allocated.cpus = millicpus.div_ceil(1000) as u32;
    let holds = st
        .store
        .holds(Some(&n.name), false)
        .await?
        .into_iter()
        .map(crate::holds::info)
        .collect();
    Ok(NodeInfo {
        id: n.id,
        state: n.state,
        name: n.name,
        pool: n.pool,
        connected: n.connected,
        capacity,
        allocated,
        running: live.len() as u32,
        last_seen: n.last_seen.map(ts),
        version: n.version,
        holds,
        // Not its exec service: only agents of a gang's nodes are told where that is.
        address: n.address,
        labels: n.labels,
    })
}

/// Every signed-in user may see the nodes: a cluster's shape is not secret, and users need it
/// to understand why their work waits.
pub async fn list(st: &AppState) -> Result<Vec<NodeInfo>, ApiError> {
    let mut out = vec![];
    for n in st.store.nodes().await? {
        out.push(info(st, n).await?);
    }
    Ok(out)
}

pub const DEFAULT_EVENT_LIMIT: u32 = 20;
const MAX_EVENT_LIMIT: u32 = 10_000;

/// `since` as milliseconds: a timestamp, or a duration before `now`.
pub fn parse_since(s: &str, now: i64) -> Result<i64, String> {
    let s = s.trim();
    if let Ok(t) = OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339) {
        return Ok((t.unix_timestamp_nanos() / 1_000_000) as i64);
    }
    match gantry_spec::parse_duration(s) {
        Ok(d) => Ok(now.saturating_sub(d.as_millis() as i64)),
        Err(_) => Err(format!(
            "since must be a duration back from now (1h, 30m, 2h30m) or an RFC 3339 time \
             (2026-12-02T10:00:00Z), not {s:?}"
        )),
    }
}

/// One node with a page of its events (`limit` newest, from `since`: a time or a duration
/// back from now).
pub async fn detail(
    st: &AppState,
    c: &Caller,
    name: &str,
    limit: Option<u32>,
    since: Option<&str>,
) -> Result<NodeDetail, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_EVENT_LIMIT);
    if limit == 0 || limit > MAX_EVENT_LIMIT {
        return Err(ApiError::BadRequest(format!(
            "limit must be 1 to {MAX_EVENT_LIMIT}, not {limit}"
        )));
    }
    let since = match since {
        Some(s) => parse_since(s, now_ms()).map_err(ApiError::BadRequest)?,
        None => 0,
    };
    let n = st
        .store
        .node(name)
        .await
        .map_err(|_| ApiError::NotFound(format!("no node {name}")))?;
    // Node events about workflows name their tasks: a user sees those of their own and their
    // group's workflows, an administrator everyone's.
    let (events, more_events) = st
        .store
        .node_events(&n.name, since, limit, &c.visibility())
        .await?;
    let hold_history = st
        .store
        .holds(Some(&n.name), true)
        .await?
        .into_iter()
        .map(crate::holds::info)
        .collect();
    Ok(NodeDetail {
        hold_history,
        node: info(st, n).await?,
        events: events.into_iter().map(event).collect(),
        more_events,
    })
}

/// The Prometheus the node pages draw their graphs from (`monitoring.prometheus_url`), when
/// one is set; unreadable counts as none.
pub async fn prometheus_url(st: &AppState) -> Option<String> {
    st.store
        .setting(gantry_intake::requests::PROMETHEUS_URL_KEY)
        .await
        .ok()
        .flatten()
        .filter(|u| !u.trim().is_empty())
}

/// The monitoring tools an administrator linked (`monitoring.*_url` settings that hold a link),
/// as (name, URL); a value that is not an http(s) URL (set
/// before the check existed, or straight in the store) is left out rather than linked.
pub async fn monitoring_links(st: &AppState) -> Result<Vec<(&'static str, String)>, ApiError> {
    let names = ["Prometheus", "Alertmanager", "Grafana"];
    let mut out = vec![];
    for (key, name) in gantry_intake::requests::MONITORING_URL_KEYS
        .iter()
        .zip(names)
    {
        if let Some(v) = st.store.setting(key).await? {
            if gantry_intake::requests::link_url(&v) {
                out.push((name, v));
            }
        }
    }
    Ok(out)
}
