//! Errors in the distribution spec's shape: `{"errors": [{"code", "message", "detail"}]}`.

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Every reply under `/v2/` says which API it speaks.
pub const API_VERSION: (&str, &str) = ("docker-distribution-api-version", "registry/2.0");

#[derive(Debug)]
pub struct OciError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub detail: Option<Value>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl OciError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        OciError {
            status,
            code,
            message: message.into(),
            detail: None,
            headers: vec![],
        }
    }

    pub fn detail(mut self, detail: Value) -> Self {
        self.detail = Some(detail);
        self
    }

    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    pub fn unauthorized() -> Self {
        OciError::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "authentication required: a Gantry token as a bearer token, or as the password of \
             basic auth (any user name)",
        )
    }

    pub fn denied(message: impl Into<String>) -> Self {
        OciError::new(StatusCode::FORBIDDEN, "DENIED", message)
    }

    pub fn name_unknown(name: &str) -> Self {
        OciError::new(
            StatusCode::NOT_FOUND,
            "NAME_UNKNOWN",
            format!("repository {name} is not known"),
        )
        .detail(json!({ "name": name }))
    }

    pub fn name_invalid(message: impl Into<String>) -> Self {
        OciError::new(StatusCode::BAD_REQUEST, "NAME_INVALID", message)
    }

    pub fn manifest_unknown(reference: &str) -> Self {
        OciError::new(
            StatusCode::NOT_FOUND,
            "MANIFEST_UNKNOWN",
            format!("manifest {reference} is not known"),
        )
        .detail(json!({ "reference": reference }))
    }

    pub fn manifest_invalid(message: impl Into<String>) -> Self {
        OciError::new(StatusCode::BAD_REQUEST, "MANIFEST_INVALID", message)
    }

    pub fn blob_unknown(digest: &str) -> Self {
        OciError::new(
            StatusCode::NOT_FOUND,
            "BLOB_UNKNOWN",
            format!("blob {digest} is not known"),
        )
        .detail(json!({ "digest": digest }))
    }

    pub fn upload_unknown() -> Self {
        OciError::new(
            StatusCode::NOT_FOUND,
            "BLOB_UPLOAD_UNKNOWN",
            "no such upload in progress: start one with POST /v2/<name>/blobs/uploads/",
        )
    }

    pub fn upload_invalid(message: impl Into<String>) -> Self {
        OciError::new(StatusCode::BAD_REQUEST, "BLOB_UPLOAD_INVALID", message)
    }

    pub fn digest_invalid(message: impl Into<String>) -> Self {
        OciError::new(StatusCode::BAD_REQUEST, "DIGEST_INVALID", message)
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        OciError::new(StatusCode::METHOD_NOT_ALLOWED, "UNSUPPORTED", message)
    }

    pub fn not_found_route() -> Self {
        OciError::new(
            StatusCode::NOT_FOUND,
            "NAME_UNKNOWN",
            "no such registry route: repositories are user/<user>/<image> or \
             group/<group>/<image>",
        )
    }

    pub fn internal(message: impl std::fmt::Display) -> Self {
        tracing::error!("object cache: {message}");
        OciError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "UNAVAILABLE",
            format!("the object cache failed: {message}"),
        )
    }
}

impl From<gantry_store::StoreError> for OciError {
    fn from(e: gantry_store::StoreError) -> Self {
        OciError::internal(format!("store: {e}"))
    }
}

impl From<std::io::Error> for OciError {
    fn from(e: std::io::Error) -> Self {
        OciError::internal(format!("disk: {e}"))
    }
}

impl IntoResponse for OciError {
    fn into_response(self) -> Response {
        let mut entry = json!({ "code": self.code, "message": self.message });
        if let Some(d) = self.detail {
            entry["detail"] = d;
        }
        let body = json!({ "errors": [entry] }).to_string();
        let mut resp = (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        let h = resp.headers_mut();
        h.insert(API_VERSION.0, HeaderValue::from_static(API_VERSION.1));
        if self.status == StatusCode::UNAUTHORIZED {
            h.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"gantry\""),
            );
        }
        for (k, v) in self.headers {
            h.insert(k, v);
        }
        resp
    }
}
