//! The one error of the server's use cases, in words a caller can act on. Free of HTTP: the
//! API gives each kind its status (`api::IntoResponse`), the web UI its page, MCP its tool error.

use gantry_api::v1::Diagnostic;
use gantry_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// 401 for a token we know but refuse (expired, its user disabled), saying why.
    #[error("{0}")]
    TokenRefused(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{message}")]
    Invalid {
        message: String,
        diagnostics: Vec<Diagnostic>,
    },
    #[error("{0}")]
    Conflict(String),
    /// 413: what was sent is larger than the server takes; `limit` is that size in bytes.
    #[error("{message}")]
    TooLarge { message: String, limit: u64 },
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => ApiError::NotFound("not found".into()),
            StoreError::Ambiguous(p) => ApiError::BadRequest(format!(
                "{p} matches more than one id: give more characters"
            )),
            StoreError::Conflict(m) => ApiError::Conflict(m),
            other => {
                tracing::error!("store: {other}");
                // 503: the store's trouble is usually transient (busy, disk); callers may retry.
                ApiError::Internal(other.to_string())
            }
        }
    }
}
