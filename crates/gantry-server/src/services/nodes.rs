//! Nodes as users see them: capacity, what is allocated, holds, and a page of events.

use std::collections::HashMap;

use gantry_api::agent::Capacity;
use gantry_api::v1::{NodeDetail, NodeInfo};
use gantry_api::NodeState;
use gantry_store::{HoldRow, NodeRow, NodeUsage};
use time::OffsetDateTime;

use crate::caller::Caller;
use crate::clock::ts;
use crate::error::ApiError;
use crate::services::workflows::event;
use crate::state::{now_ms, AppState};

/// A node as users see it, from what its live attempts hold and its holds.
fn info(n: NodeRow, usage: Option<&NodeUsage>, holds: Vec<HoldRow>) -> NodeInfo {
    let capacity: Capacity = serde_json::from_str(&n.capacity).unwrap_or_default();
    let mut allocated = Capacity::default();
    let mut running = 0;
    if let Some(u) = usage {
        running = u.attempts;
        allocated.cpus = u.need.millicpus.div_ceil(1000) as u32;
        allocated.memory_bytes = u.need.memory_bytes;
        allocated.devices = u.need.devices.clone();
        // An exclusive attempt's assignment carries its marker as a device: shown as such.
        if u.need.exclusive {
            allocated
                .devices
                .insert(crate::plan::EXCLUSIVE.to_string(), 1);
        }
    }
    NodeInfo {
        id: n.id,
        state: n.state,
        name: n.name,
        pool: n.pool,
        connected: n.connected,
        capacity,
        allocated,
        running,
        last_seen: n.last_seen.map(ts),
        version: n.version,
        holds: holds.into_iter().map(crate::holds::info).collect(),
        // Not its exec service: only agents of a gang's nodes are told where that is.
        address: n.address,
        labels: n.labels,
    }
}

/// Which nodes `node list` shows: those of a pool, in a state, at most so many (by name).
#[derive(Debug, Default, Clone)]
pub struct NodeFilter {
    pub pool: Option<String>,
    pub state: Option<NodeState>,
    pub limit: Option<usize>,
}

/// Every signed-in user may see the nodes: a cluster's shape is not secret, and users need it
/// to understand why their work waits. Three reads whatever the fleet's size (the nodes, what
/// their live attempts hold, the holds), not two per node.
pub async fn list(st: &AppState, f: &NodeFilter) -> Result<Vec<NodeInfo>, ApiError> {
    let mut nodes: Vec<NodeRow> = st
        .store
        .nodes()
        .await?
        .into_iter()
        .filter(|n| f.pool.as_ref().is_none_or(|p| &n.pool == p))
        .filter(|n| f.state.is_none_or(|s| n.state == s))
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    nodes.truncate(f.limit.unwrap_or(usize::MAX));
    let usage: HashMap<String, NodeUsage> = st
        .store
        .node_usage(None)
        .await?
        .into_iter()
        .map(|u| (u.node.clone(), u))
        .collect();
    let mut holds: HashMap<String, Vec<HoldRow>> = HashMap::new();
    for h in st.store.holds(None, false).await? {
        holds.entry(h.node.clone()).or_default().push(h);
    }
    Ok(nodes
        .into_iter()
        .map(|n| {
            let hs = holds.remove(&n.name).unwrap_or_default();
            let u = usage.get(&n.name);
            info(n, u, hs)
        })
        .collect())
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
        node: {
            let usage = st.store.node_usage(Some(&n.name)).await?;
            let holds = st.store.holds(Some(&n.name), false).await?;
            info(n, usage.first(), holds)
        },
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
