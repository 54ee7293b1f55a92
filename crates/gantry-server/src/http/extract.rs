//! What a handler reads from a request besides its caller (`auth.rs`): a JSON body within a
//! route's limit, and which client sent it.

use axum::Json;
use gantry_api::Channel;

use crate::error::ApiError;

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
            gantry_api::v1::iec_bytes(limit as u64)
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

/// Which client asked (`x-gantry-channel`): recorded on takeovers and their confirmations.
pub fn channel_of(headers: &axum::http::HeaderMap) -> Channel {
    headers
        .get("x-gantry-channel")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(Channel::Api)
}
