//! The JSON API under `/api/v1`. Every route authenticates; something a caller may not see
//! answers 404, never 403, so ids of other people's work do not leak.

pub(crate) mod admin;
pub(crate) mod nodes;
pub(crate) mod workflows;
pub use crate::error::ApiError;
pub use workflows::{channel_of, visible_workflow};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use gantry_api::v1::{ErrorBody, WhoAmI};

use crate::auth::UserCaller;
use crate::state::AppState;

pub fn router(state: AppState) -> Router {
    let images = crate::registry::Registry::new(&state);
    let api = Router::new()
        .route("/whoami", get(whoami))
        .route("/workflows", get(workflows::list).post(workflows::submit))
        .route("/workflows/validate", post(workflows::validate))
        .route("/workflows/{id}", get(workflows::detail))
        .route("/workflows/{id}/events", get(workflows::events))
        .route("/workflows/{id}/stop", post(workflows::stop))
        .route("/workflows/{id}/logs/{job}", get(crate::logs::read))
        .route("/nodes", get(nodes::list))
        .route("/nodes/{name}", get(nodes::show))
        .route("/nodes/{name}/holds", post(crate::holds::place))
        .route("/nodes/{name}/release", post(crate::holds::release))
        .route("/monitoring/alertmanager", post(crate::monitoring::webhook))
        .route("/monitoring/targets", get(crate::monitoring::targets))
        .route(
            "/endpoints",
            get(crate::endpoints::list).post(crate::endpoints::create),
        )
        .route(
            "/endpoints/{name}",
            get(crate::endpoints::show).delete(crate::endpoints::delete),
        )
        .route("/endpoints/{name}/history", get(crate::endpoints::history))
        .route(
            "/endpoints/{name}/tokens",
            get(crate::endpoints::tokens).post(crate::endpoints::token),
        )
        .route("/endpoint-tokens", get(crate::endpoints::all_tokens))
        .route(
            "/endpoint-tokens/{id}",
            delete(crate::endpoints::revoke_token),
        )
        .route("/endpoints/{name}/approve", post(crate::endpoints::approve))
        .route("/endpoints/{name}/reject", post(crate::endpoints::reject))
        .route("/secrets", get(crate::secrets::list))
        .route(
            "/secrets/{scope}/{name}",
            axum::routing::put(crate::secrets::put).delete(crate::secrets::delete),
        )
        .route(
            "/volumes",
            get(crate::volumes::list).post(crate::volumes::create),
        )
        .route(
            "/volumes/{scope}/{name}",
            get(crate::volumes::show).delete(crate::volumes::delete),
        )
        .route("/storages", get(crate::volumes::usable_storages))
        .route(
            "/admin/storages",
            get(crate::volumes::list_storages).post(crate::volumes::add_storage),
        )
        .route(
            "/admin/storages/{name}",
            axum::routing::delete(crate::volumes::delete_storage),
        )
        .route(
            "/admin/users",
            get(admin::list_users).post(admin::create_user),
        )
        .route(
            "/admin/users/{name}",
            get(admin::show_user).delete(admin::delete_user),
        )
        .route("/admin/users/{name}/disable", post(admin::disable_user))
        .route("/admin/users/{name}/enable", post(admin::enable_user))
        .route("/admin/tokens", get(admin::list_tokens))
        .route("/admin/tokens/{id}", delete(admin::revoke_token))
        .route("/admin/tokens/{id}/rotate", post(admin::rotate_token))
        .route("/admin/settings", get(admin::list_settings))
        .route(
            "/admin/settings/{key}",
            get(admin::get_setting).put(admin::set_setting),
        )
        .route("/agent/connect", get(crate::agents::connect))
        .merge(crate::registry::api_routes(images.clone()))
        .layer(axum::middleware::map_response(json_errors));
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(crate::monitoring::metrics))
        .nest("/api/v1", api)
        // The web UI at `/` (its Images page lists the object cache).
        .merge(crate::web::routes(&state, images.clone()))
        // The object cache's OCI registry.
        .merge(crate::registry::v2_routes(images))
        .merge(crate::mcp::routes(state.clone()))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .with_state(state.clone())
        .layer(axum::middleware::from_fn_with_state(
            state,
            crate::gateway::endpoints_first,
        ))
}

/// Errors axum makes itself (a query string or path that does not parse, a method a route does
/// not take, a refused WebSocket handshake) are plain text; give them our `{"error": ...}` shape.
/// Only for the JSON API: what other routes serve (proxied apps, say) is theirs to shape.
async fn json_errors(resp: Response) -> Response {
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

async fn whoami(UserCaller(c): UserCaller) -> Json<WhoAmI> {
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

/// The most bytes of a JSON request body a route takes unless it says otherwise (axum's own
/// default).
pub const BODY_LIMIT: usize = 2 << 20;

/// What a workflow file's route takes: a file of the largest size the server accepts, JSON
/// escaped. Valid YAML has no control characters but tab, CR and LF, so escaping at most
/// doubles it; the rest is room for the other fields.
pub const WORKFLOW_BODY_LIMIT: usize = 2 * gantry_api::v1::MAX_WORKFLOW_FILE_BYTES + (64 << 10);

/// A JSON request body of at most `LIMIT` bytes. Bigger is 413 with the limit named (in the
/// message and as `limit_bytes`); one that does not parse is 400, in our error shape. Read
/// here rather than by axum's `Json`, whose own limit (2 MiB unless a layer says otherwise)
/// would answer first, in plain text, and as 400.
pub struct JsonBody<T, const LIMIT: usize = BODY_LIMIT>(pub T);

fn too_large(limit: usize) -> ApiError {
    ApiError::TooLarge {
        message: format!(
            "the request body is larger than this route takes: at most {}",
            crate::web::bytes(limit as u64)
        ),
        limit: limit as u64,
    }
}

fn is_json(headers: &axum::http::HeaderMap) -> bool {
    let Some(ct) = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

impl<S, T, const LIMIT: usize> axum::extract::FromRequest<S> for JsonBody<T, LIMIT>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, _: &S) -> Result<Self, ApiError> {
        use futures_util::StreamExt;
        let (parts, body) = req.into_parts();
        if !is_json(&parts.headers) {
            return Err(ApiError::BadRequest(
                "bad request body: expected a request with `Content-Type: application/json`".into(),
            ));
        }
        let declared = parts
            .headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > LIMIT as u64) {
            return Err(too_large(LIMIT));
        }
        let mut stream = body.into_data_stream();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|e| ApiError::BadRequest(format!("reading the request body: {e}")))?;
            if buf.len() + chunk.len() > LIMIT {
                return Err(too_large(LIMIT));
            }
            buf.extend_from_slice(&chunk);
        }
        match Json::<T>::from_bytes(&buf) {
            Ok(Json(v)) => Ok(JsonBody(v)),
            Err(e) => Err(ApiError::BadRequest(format!(
                "bad request body: {}",
                e.body_text()
            ))),
        }
    }
}
