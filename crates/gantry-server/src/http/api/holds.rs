//! `/api/v1/nodes/{name}/holds` and `/release`: each route reads its request and calls
//! `services::holds`.

use axum::extract::{Path, State};
use axum::Json;
use gantry_api::v1::{HoldInfo, PlaceHold, ReleaseHolds};

use crate::auth::UserCaller;
use crate::error::ApiError;
use crate::http::extract::JsonBody;
use crate::services::holds as svc;
use crate::state::AppState;

pub async fn place(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
    JsonBody(req): JsonBody<PlaceHold>,
) -> Result<Json<HoldInfo>, ApiError> {
    svc::place(&st, &c, &name, &req).await.map(Json)
}

pub async fn release(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
    JsonBody(req): JsonBody<ReleaseHolds>,
) -> Result<Json<Vec<HoldInfo>>, ApiError> {
    svc::release(&st, &c, &name, req).await.map(Json)
}
