//! `/api/v1/nodes`: each route reads its request and calls `services::nodes`.

use axum::extract::{Path, Query, State};
use axum::Json;
use gantry_api::v1::{NodeDetail, NodeInfo};
use gantry_intake::requests;
use serde::Deserialize;

use crate::auth::UserCaller;
use crate::error::ApiError;
use crate::services::nodes as svc;
use crate::state::AppState;

/// `GET /nodes?pool=P&state=S&limit=N`: the nodes (by name), filtered on the server.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    pool: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

pub async fn list(
    State(st): State<AppState>,
    UserCaller(_): UserCaller,
    Query(q): Query<ListQuery>,
) -> Result<Json<Vec<NodeInfo>>, ApiError> {
    let state = requests::node_state_filter(q.state.as_deref()).map_err(ApiError::BadRequest)?;
    if q.limit == Some(0) {
        return Err(ApiError::BadRequest("limit must be at least 1".into()));
    }
    let f = svc::NodeFilter {
        pool: q.pool,
        state,
        limit: q.limit,
    };
    svc::list(&st, &f).await.map(Json)
}

/// `GET /nodes/{name}?limit=N&since=WHEN`: a page of the node's newest events.
#[derive(Debug, Default, Deserialize)]
pub struct ShowQuery {
    #[serde(default)]
    limit: Option<u32>,
    /// RFC 3339, or a duration back from now (`1h`, `30m`).
    #[serde(default)]
    since: Option<String>,
}

pub async fn show(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Result<Json<NodeDetail>, ApiError> {
    svc::detail(&st, &c, &name, q.limit, q.since.as_deref())
        .await
        .map(Json)
}
