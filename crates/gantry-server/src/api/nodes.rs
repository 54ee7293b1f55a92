use axum::extract::{Path, State};
use axum::Json;
use gantry_api::agent::{Assignment, Capacity};
use gantry_api::v1::{NodeDetail, NodeInfo};
use gantry_api::NodeState;
use gantry_store::{EventQuery, NodeRow};

use super::workflows::{event, ts};
use super::ApiError;
use crate::auth::UserCaller;
use crate::state::AppState;

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
        state: n.state.parse().unwrap_or(NodeState::Down),
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
pub async fn list(
    State(st): State<AppState>,
    UserCaller(_): UserCaller,
) -> Result<Json<Vec<NodeInfo>>, ApiError> {
    let mut out = vec![];
    for n in st.store.nodes().await? {
        out.push(info(&st, n).await?);
    }
    Ok(Json(out))
}

pub async fn show(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
) -> Result<Json<NodeDetail>, ApiError> {
    let n = st
        .store
        .node(&name)
        .await
        .map_err(|_| ApiError::NotFound(format!("no node {name}")))?;
    let events = st
        .store
        .events(&EventQuery {
            node: Some(n.name.clone()),
            ..Default::default()
        })
        .await?;
    let hold_history = st
        .store
        .holds(Some(&n.name), true)
        .await?
        .into_iter()
        .map(crate::holds::info)
        .collect();
    Ok(Json(NodeDetail {
        hold_history,
        node: info(&st, n).await?,
        // Node events about workflows name their tasks: only an admin sees other people's.
        events: events
            .into_iter()
            .filter(|e| c.is_admin() || e.workflow_id.is_none())
            .map(event)
            .collect(),
    }))
}
