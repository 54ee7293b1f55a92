//! `/api/v1/workflows`: each route reads its request and calls `services::workflows`.

use axum::extract::{Path, Query, State};
use axum::Json;
use gantry_api::v1::{
    Event, SubmitWorkflow, ValidateWorkflow, Validation, WorkflowCreated, WorkflowDetail,
    WorkflowSummary,
};
use serde::Deserialize;

use crate::auth::UserCaller;
use crate::error::ApiError;
use crate::http::extract::{channel_of, JsonBody, WORKFLOW_BODY_LIMIT};
use crate::services::workflows as svc;
use crate::state::AppState;

pub async fn validate(
    UserCaller(_): UserCaller,
    JsonBody(req): JsonBody<ValidateWorkflow, WORKFLOW_BODY_LIMIT>,
) -> Result<Json<Validation>, ApiError> {
    svc::validate(&req).map(Json)
}

pub async fn submit(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    headers: axum::http::HeaderMap,
    JsonBody(req): JsonBody<SubmitWorkflow, WORKFLOW_BODY_LIMIT>,
) -> Result<Json<WorkflowCreated>, ApiError> {
    svc::submit(&st, &c, req, channel_of(&headers))
        .await
        .map(Json)
}

#[derive(Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    status: Option<String>,
}

pub async fn list(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Query(q): Query<ListQuery>,
) -> Result<Json<Vec<WorkflowSummary>>, ApiError> {
    svc::list(&st, &c, q.status.as_deref()).await.map(Json)
}

#[derive(Deserialize)]
pub struct DetailQuery {
    limit: Option<u32>,
    after: Option<uuid::Uuid>,
    status: Option<String>,
}

pub async fn detail(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(id): Path<String>,
    Query(q): Query<DetailQuery>,
) -> Result<Json<WorkflowDetail>, ApiError> {
    let (limit, statuses) = gantry_intake::requests::task_page(q.limit, q.status.as_deref())
        .map_err(ApiError::BadRequest)?;
    let q = svc::TaskQuery {
        after: q.after,
        statuses,
        limit,
    };
    svc::detail(&st, &c, &id, &q).await.map(Json)
}

#[derive(Deserialize)]
pub struct EventsQuery {
    #[serde(default)]
    after: i64,
}

pub async fn events(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Result<Json<Vec<Event>>, ApiError> {
    svc::events(&st, &c, &id, q.after).await.map(Json)
}

pub async fn stop(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(id): Path<String>,
) -> Result<Json<WorkflowSummary>, ApiError> {
    svc::stop(&st, &c, &id).await.map(Json)
}
