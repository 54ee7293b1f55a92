//! The web UI at `/`: server-rendered pages (askama templates compiled into the binary), one
//! small stylesheet and one small script, embedded too. Pages work without the script; it adds
//! the copy buttons, live events and logs (Server-Sent Events), refreshing regions and the
//! typed confirmation of deletes.
//!
//! Every page and form calls the use cases the API's handlers call (`crate::services`) with the
//! signed-in user as the caller, so the UI shows and does exactly what the API allows that user: what they may
//! not see is 404 here too.

mod endpoints;
mod graphs;
mod images;
mod nodes;
mod session;
mod submit;
mod volumes;
mod workflows;

use std::sync::{Arc, LazyLock};

use axum::extract::Request;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use gantry_registry::Registry;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::error::ApiError;
use crate::state::AppState;

pub use session::Sessions;

/// The UI's routes; `images` is the server's object cache (the Images page lists it).
pub fn routes(st: &AppState, images: Arc<Registry>) -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/workflows") }))
        .route("/signin", get(session::sign_in_form).post(session::sign_in))
        .route("/signout", post(session::sign_out))
        .route("/workflows", get(workflows::list))
        .route("/workflows/new", get(submit::form).post(submit::submit))
        .route("/workflows/{id}", get(workflows::show))
        .route("/workflows/{id}/live", get(workflows::live))
        .route(
            "/workflows/{id}/stop",
            get(workflows::stop_confirm).post(workflows::stop),
        )
        .route("/workflows/{id}/logs/{job}", get(workflows::log))
        .route("/workflows/{id}/logs/{job}/live", get(workflows::log_live))
        .route(
            "/workflows/{id}/logs/{job}/download",
            get(workflows::log_download),
        )
        .route("/nodes", get(nodes::list))
        .route("/nodes/{name}", get(nodes::show))
        .route("/nodes/{name}/hold", post(nodes::hold))
        .route("/nodes/{name}/release", post(nodes::release))
        .route("/endpoints", get(endpoints::list).post(endpoints::create))
        .route("/endpoints/{name}", get(endpoints::show))
        .route("/endpoints/{name}/delete", post(endpoints::delete))
        .route("/endpoints/{name}/approve", post(endpoints::approve))
        .route("/endpoints/{name}/reject", post(endpoints::reject))
        .route("/images", get(images::list))
        .route("/volumes", get(volumes::list))
        .layer(axum::middleware::from_fn(page_headers))
        .layer(Extension(Arc::new(Sessions::new(st))))
        .layer(Extension(images))
        .route("/assets/{file}", get(asset))
}

/// Pages are per user and change by the second: never cached, never framed, scripts and
/// styles only from here.
async fn page_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    if !h.contains_key(CACHE_CONTROL) {
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    resp
}

struct Asset {
    body: &'static str,
    content_type: &'static str,
    /// A hash of the content: part of the URL pages use, so it may be cached for good.
    version: String,
}

fn asset_of(body: &'static str, content_type: &'static str) -> Asset {
    Asset {
        body,
        content_type,
        version: hex::encode(&Sha256::digest(body.as_bytes())[..6]),
    }
}

static CSS: LazyLock<Asset> =
    LazyLock::new(|| asset_of(include_str!("../../assets/gantry.css"), "text/css"));
static JS: LazyLock<Asset> = LazyLock::new(|| {
    asset_of(
        include_str!("../../assets/gantry.js"),
        "text/javascript; charset=utf-8",
    )
});

async fn asset(
    axum::extract::Path(file): axum::extract::Path<String>,
    headers: axum::http::HeaderMap,
) -> Response {
    let a: &Asset = match file.as_str() {
        "gantry.css" => &CSS,
        "gantry.js" => &JS,
        _ => return (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    };
    let etag = format!("\"{}\"", a.version);
    let cache = [
        (
            CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=31536000, immutable"),
        ),
        (
            ETAG,
            HeaderValue::from_str(&etag).expect("hex is a header value"),
        ),
    ];
    if headers
        .get(IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        return (StatusCode::NOT_MODIFIED, cache).into_response();
    }
    (
        cache,
        [(CONTENT_TYPE, HeaderValue::from_static(a.content_type))],
        a.body,
    )
        .into_response()
}

/// What every page's layout needs.
pub struct Ctx {
    /// The signed-in user; empty on the sign-in page.
    pub user: String,
    pub group: String,
    pub admin: bool,
    /// The session's CSRF token, for every form.
    pub csrf: String,
    /// The area the page belongs to, for the navigation's `aria-current`.
    pub nav: &'static str,
    /// A message after a form was handled (`?done=...`).
    pub notice: Option<String>,
    pub css: String,
    pub js: String,
}

impl Default for Ctx {
    fn default() -> Self {
        Ctx {
            user: String::new(),
            group: String::new(),
            admin: false,
            csrf: String::new(),
            nav: "",
            notice: None,
            css: format!("/assets/gantry.css?v={}", CSS.version),
            js: format!("/assets/gantry.js?v={}", JS.version),
        }
    }
}

impl Ctx {
    /// The message for a `?done=` code a form's redirect carried; unknown codes show nothing,
    /// so a link cannot put words on the page.
    pub fn with_notice(mut self, done: Option<&str>) -> Ctx {
        self.notice = done
            .and_then(|d| {
                Some(match d {
                    "stop" => "Stop requested: the workflow's steps are being stopped.",
                    "started" => "Workflow started.",
                    "held" => "Hold placed.",
                    "released" => "Holds released.",
                    "created" => "Endpoint created.",
                    "deleted" => "Endpoint deleted.",
                    "approved" => "Takeover approved: traffic switches once it is ready.",
                    "rejected" => "Takeover rejected: the new workflow is being stopped.",
                    _ => return None,
                })
            })
            .map(str::to_string);
        self
    }
}

/// Renders a page with a status.
fn page(status: StatusCode, t: &impl askama::Template) -> Response {
    match t.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => {
            tracing::error!("web: rendering a page: {e}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page could not be rendered\n",
            )
                .into_response()
        }
    }
}

fn ok_page(t: &impl askama::Template) -> Response {
    page(StatusCode::OK, t)
}

#[derive(askama::Template)]
#[template(path = "web/error.html")]
struct ErrorPage {
    ctx: Ctx,
    title: String,
    message: String,
}

/// Why a page or form could not be served.
#[derive(Debug)]
pub enum WebError {
    /// No session (or it ended): sign in, then come back to `next`.
    SignIn { next: String },
    /// A form without this session's CSRF token, or from another site.
    Csrf,
    /// What the API answered.
    Api(ApiError),
}

impl From<ApiError> for WebError {
    fn from(e: ApiError) -> Self {
        WebError::Api(e)
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let (status, title, message) = match self {
            WebError::SignIn { next } => {
                let q = serde_urlencoded::to_string([("next", next)]).unwrap_or_default();
                return Redirect::to(&format!("/signin?{q}")).into_response();
            }
            WebError::Csrf => (
                StatusCode::FORBIDDEN,
                "Form refused",
                "This form did not come from a page of this Gantry session (it may have \
                 expired). Go back, reload the page and try again."
                    .to_string(),
            ),
            WebError::Api(e) => {
                let message = e.to_string();
                // The status the API answers with, from the API's own mapping.
                let status = e.into_response().status();
                let title = match status {
                    StatusCode::NOT_FOUND => "Not found",
                    StatusCode::FORBIDDEN => "Not allowed",
                    StatusCode::CONFLICT => "Not possible now",
                    StatusCode::BAD_REQUEST => "Check the form",
                    _ => "Something went wrong",
                };
                (status, title, message)
            }
        };
        page(
            status,
            &ErrorPage {
                ctx: Ctx::default(),
                title: title.into(),
                message,
            },
        )
    }
}

/// A moment, for `<time>`: its RFC 3339 form and how long ago it was.
pub struct When {
    pub iso: String,
    pub ago: String,
}

pub fn when(t: OffsetDateTime) -> When {
    let secs = (OffsetDateTime::now_utc() - t).whole_seconds();
    When {
        iso: t
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
        ago: if secs < 5 {
            "just now".into()
        } else {
            format!("{} ago", span(secs))
        },
    }
}

/// A length of time, at most two units: "42 s", "3 min 5 s", "2 h 10 min", "4 d 3 h".
pub fn span(secs: i64) -> String {
    let secs = secs.max(0);
    let (d, h, m, s) = (
        secs / 86400,
        secs % 86400 / 3600,
        secs % 3600 / 60,
        secs % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) if s == 0 => format!("{m} min"),
        (0, 0, _) => format!("{m} min {s} s"),
        (0, _, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

/// Bytes in IEC units: "512 B", "1.5 KiB", "2 GiB" (the API's messages use it too).
pub use gantry_api::v1::iec_bytes as bytes;

/// A path segment with everything but unreserved characters percent-encoded.
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A `?done=` code a form's redirect carried.
#[derive(serde::Deserialize)]
pub struct Done {
    #[serde(default)]
    done: Option<String>,
}

impl Done {
    pub fn done(&self) -> Option<&str> {
        self.done.as_deref()
    }
}

/// The first 8 characters of an id, as the CLI shows it.
pub fn short(id: &uuid::Uuid) -> String {
    id.to_string()[..8].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_naturally() {
        assert_eq!(span(0), "0 s");
        assert_eq!(span(42), "42 s");
        assert_eq!(span(120), "2 min");
        assert_eq!(span(185), "3 min 5 s");
        assert_eq!(span(2 * 3600 + 600), "2 h 10 min");
        assert_eq!(span(4 * 86400 + 3 * 3600 + 5), "4 d 3 h");
        assert_eq!(span(-5), "0 s");
    }

    #[test]
    fn sizes_use_iec_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(2 << 30), "2 GiB");
        assert_eq!(bytes((5 << 20) + (100 << 10)), "5.1 MiB");
    }

    #[test]
    fn segments_are_encoded() {
        assert_eq!(segment("build:tool"), "build:tool");
        assert_eq!(segment("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn unknown_notices_show_nothing() {
        assert!(Ctx::default()
            .with_notice(Some("<b>hi</b>"))
            .notice
            .is_none());
        assert!(Ctx::default().with_notice(Some("held")).notice.is_some());
    }
}
