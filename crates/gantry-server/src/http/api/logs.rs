//! `/api/v1/workflows/{id}/logs/{job}`: a page of a job's output with the headers that say
//! where it is (`x-gantry-attempt`, `x-gantry-next-offset`), or the output as it is written.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::Response;

use crate::auth::UserCaller;
use crate::error::ApiError;
use crate::services::logs::{self as svc, LogBody, LogQuery};
use crate::state::AppState;

pub async fn read(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path((id, job)): Path<(String, String)>,
    Query(q): Query<LogQuery>,
) -> Result<Response, ApiError> {
    let r = svc::read(&st, &c, &id, &job, &q).await?;
    let mut resp = Response::builder()
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header("x-gantry-attempt", r.attempt.to_string());
    if let Some(next) = r.next_offset {
        resp = resp.header("x-gantry-next-offset", next.to_string());
    }
    let body = match r.body {
        LogBody::Page(bytes) => Body::from(bytes),
        LogBody::Follow(stream) => Body::from_stream(stream),
    };
    resp.body(body)
        .map_err(|e| ApiError::Internal(e.to_string()))
}
