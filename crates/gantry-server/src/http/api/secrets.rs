//! `/api/v1/secrets`: each route reads its request and calls `services::secrets`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use gantry_api::v1::{PutSecret, SecretInfo};

use crate::auth::UserCaller;
use crate::error::ApiError;
use crate::http::extract::JsonBody;
use crate::services::secrets as svc;
use crate::state::AppState;

pub async fn list(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
) -> Result<Json<Vec<SecretInfo>>, ApiError> {
    svc::list(&st, &c).await.map(Json)
}

pub async fn put(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path((scope, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<PutSecret>,
) -> Result<StatusCode, ApiError> {
    svc::put(&st, &c, &scope, &name, body).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn delete(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path((scope, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    svc::delete(&st, &c, &scope, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
