//! `/api/v1/volumes`, `/api/v1/storages` and `/api/v1/admin/storages`: each route reads its
//! request and calls `services::volumes`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use gantry_api::v1::{AddStorage, CreateVolume, StorageInfo, VolumeInfo};

use crate::auth::UserCaller;
use crate::error::ApiError;
use crate::http::extract::JsonBody;
use crate::services::volumes as svc;
use crate::state::AppState;

pub async fn list(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
) -> Result<Json<Vec<VolumeInfo>>, ApiError> {
    svc::list(&st, &c).await.map(Json)
}

pub async fn create(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    JsonBody(req): JsonBody<CreateVolume>,
) -> Result<(StatusCode, Json<VolumeInfo>), ApiError> {
    let v = svc::create(&st, &c, req).await?;
    Ok((StatusCode::CREATED, Json(v)))
}

pub async fn show(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path((scope, name)): Path<(String, String)>,
) -> Result<Json<VolumeInfo>, ApiError> {
    svc::show(&st, &c, &scope, &name).await.map(Json)
}

pub async fn delete(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path((scope, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    svc::delete(&st, &c, &scope, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn usable_storages(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
) -> Result<Json<Vec<StorageInfo>>, ApiError> {
    svc::usable_storages(&st, &c).await.map(Json)
}

pub async fn list_storages(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
) -> Result<Json<Vec<StorageInfo>>, ApiError> {
    svc::list_storages(&st, &c).await.map(Json)
}

pub async fn add_storage(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    JsonBody(req): JsonBody<AddStorage>,
) -> Result<(StatusCode, Json<StorageInfo>), ApiError> {
    let s = svc::add_storage(&st, &c, req).await?;
    Ok((StatusCode::CREATED, Json(s)))
}

pub async fn delete_storage(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    svc::delete_storage(&st, &c, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
