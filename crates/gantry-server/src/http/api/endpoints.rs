//! `/api/v1/endpoints` and `/api/v1/endpoint-tokens`: each route reads its request and calls
//! `services::endpoints`.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use gantry_api::v1::{
    CreateEndpoint, CreateEndpointToken, EndpointInfo, EndpointToken, EndpointTokenInfo,
    TakeoverInfo,
};

use crate::auth::UserCaller;
use crate::error::ApiError;
use crate::http::extract::{channel_of, JsonBody};
use crate::services::endpoints as svc;
use crate::state::AppState;

pub async fn create(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    JsonBody(req): JsonBody<CreateEndpoint>,
) -> Result<Json<EndpointInfo>, ApiError> {
    svc::create(&st, &c, req).await.map(Json)
}

pub async fn list(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
) -> Result<Json<Vec<EndpointInfo>>, ApiError> {
    svc::list(&st, &c).await.map(Json)
}

pub async fn show(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
) -> Result<Json<EndpointInfo>, ApiError> {
    svc::show(&st, &c, &name).await.map(Json)
}

pub async fn history(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
) -> Result<Json<Vec<TakeoverInfo>>, ApiError> {
    svc::history(&st, &c, &name).await.map(Json)
}

pub async fn delete(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    svc::delete(&st, &c, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn token(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
    JsonBody(req): JsonBody<CreateEndpointToken>,
) -> Result<Json<EndpointToken>, ApiError> {
    svc::token(&st, &c, &name, req).await.map(Json)
}

pub async fn tokens(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
) -> Result<Json<Vec<EndpointTokenInfo>>, ApiError> {
    svc::tokens(&st, &c, &name).await.map(Json)
}

pub async fn all_tokens(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
) -> Result<Json<Vec<EndpointTokenInfo>>, ApiError> {
    svc::all_tokens(&st, &c).await.map(Json)
}

pub async fn revoke_token(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(id): Path<String>,
) -> Result<Json<EndpointTokenInfo>, ApiError> {
    svc::revoke_token(&st, &c, &id).await.map(Json)
}

pub async fn approve(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<TakeoverInfo>, ApiError> {
    svc::approve(&st, &c, &name, channel_of(&headers).as_str())
        .await
        .map(Json)
}

pub async fn reject(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<TakeoverInfo>, ApiError> {
    svc::reject(&st, &c, &name, channel_of(&headers).as_str())
        .await
        .map(Json)
}
