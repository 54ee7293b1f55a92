//! `/api/v1/admin/...`: each route reads its request and calls `services::admin`.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use gantry_api::v1::{
    CreateUser, RotateToken, Setting, TokenInfo, TokenRotated, UserCreated, UserDetail, UserInfo,
};
use serde::Deserialize;

use crate::auth::UserCaller;
use crate::error::ApiError;
use crate::http::extract::JsonBody;
use crate::services::admin as svc;
use crate::state::AppState;

pub async fn create_user(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    JsonBody(req): JsonBody<CreateUser>,
) -> Result<Json<UserCreated>, ApiError> {
    svc::create_user(&st, &c, req).await.map(Json)
}

pub async fn controller(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
) -> Result<Json<gantry_api::v1::ControllerInfo>, ApiError> {
    svc::controller(&st, &c).await.map(Json)
}

pub async fn list_settings(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
) -> Result<Json<Vec<Setting>>, ApiError> {
    svc::list_settings(&st, &c).await.map(Json)
}

pub async fn get_setting(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(key): Path<String>,
) -> Result<Json<Setting>, ApiError> {
    svc::get_setting(&st, &c, &key).await.map(Json)
}

pub async fn set_setting(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(key): Path<String>,
    JsonBody(body): JsonBody<Setting>,
) -> Result<Json<Setting>, ApiError> {
    svc::set_setting(&st, &c, &key, body).await.map(Json)
}

pub async fn list_users(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
) -> Result<Json<Vec<UserInfo>>, ApiError> {
    svc::list_users(&st, &c).await.map(Json)
}

pub async fn show_user(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
) -> Result<Json<UserDetail>, ApiError> {
    svc::show_user(&st, &c, &name).await.map(Json)
}

pub async fn disable_user(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
) -> Result<Json<UserInfo>, ApiError> {
    svc::disable_user(&st, &c, &name).await.map(Json)
}

pub async fn enable_user(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
) -> Result<Json<UserInfo>, ApiError> {
    svc::enable_user(&st, &c, &name).await.map(Json)
}

#[derive(Debug, Deserialize)]
pub struct DeleteQuery {
    #[serde(default)]
    force: bool,
}

pub async fn delete_user(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
    Query(q): Query<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    svc::delete_user(&st, &c, &name, q.force).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
pub struct TokensQuery {
    #[serde(default)]
    user: Option<String>,
}

pub async fn list_tokens(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Query(q): Query<TokensQuery>,
) -> Result<Json<Vec<TokenInfo>>, ApiError> {
    svc::list_tokens(&st, &c, q.user.as_deref()).await.map(Json)
}

pub async fn revoke_token(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(id): Path<String>,
) -> Result<Json<TokenInfo>, ApiError> {
    svc::revoke_token(&st, &c, &id).await.map(Json)
}

pub async fn rotate_token(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<RotateToken>,
) -> Result<Json<TokenRotated>, ApiError> {
    svc::rotate_token(&st, &c, &id, req).await.map(Json)
}
