//! The JSON API under `/api/v1`. Every route authenticates; something a caller may not see
//! answers 404, never 403, so ids of other people's work do not leak.

pub(crate) mod admin;
pub(crate) mod endpoints;
pub(crate) mod holds;
pub(crate) mod images;
pub(crate) mod logs;
pub(crate) mod nodes;
pub(crate) mod secrets;
pub(crate) mod volumes;
pub(crate) mod workflows;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use gantry_api::v1::{ErrorBody, WhoAmI};

use crate::auth::UserCaller;
use crate::error::ApiError;

/// Errors axum makes itself (a query string or path that does not parse, a method a route does
/// not take, a refused WebSocket handshake) are plain text; give them our `{"error": ...}` shape.
/// Only for the JSON API: what other routes serve (proxied apps, say) is theirs to shape.
pub(crate) async fn json_errors(resp: Response) -> Response {
    use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if is_json || !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let error = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let body = serde_json::to_vec(&ErrorBody {
        error,
        ..Default::default()
    })
    .unwrap_or_default();
    parts.headers.remove(CONTENT_LENGTH);
    parts.headers.insert(
        CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(body))
}

pub(crate) async fn whoami(UserCaller(c): UserCaller) -> Json<WhoAmI> {
    Json(WhoAmI {
        user: c.user.name,
        group: c.user.group,
        role: c.role,
    })
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self {
            ApiError::Unauthorized | ApiError::TokenRefused(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::BadRequest(_) | ApiError::Invalid { .. } => StatusCode::BAD_REQUEST,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Internal(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        let diagnostics = match &self {
            ApiError::Invalid { diagnostics, .. } => diagnostics.clone(),
            _ => vec![],
        };
        let limit_bytes = match &self {
            ApiError::TooLarge { limit, .. } => Some(*limit),
            _ => None,
        };
        let mut resp = (
            status,
            Json(ErrorBody {
                error: self.to_string(),
                diagnostics,
                limit_bytes,
            }),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}
