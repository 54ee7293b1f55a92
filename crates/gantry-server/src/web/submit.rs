//! "New workflow": a workflow file pasted or uploaded, validated with its errors shown at
//! their lines, and started as the signed-in user. Both buttons go through the use cases of
//! `POST /workflows/validate` and `POST /workflows` (`services::workflows`), so the page accepts and
//! refuses exactly what `gantry workflow validate|start` do.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use gantry_api::v1::{Diagnostic, SubmitWorkflow, ValidateWorkflow, MAX_WORKFLOW_FILE_BYTES};
use gantry_api::Channel;
use serde::Deserialize;

use super::session::{Web, WebForm};
use super::{page, Ctx, WebError};
use crate::error::ApiError;
use crate::services::workflows as svc;
use crate::state::AppState;

/// A form carrying the largest file the API takes, percent-encoded (up to 3 bytes a byte).
const NEW_FORM_LIMIT: usize = 3 * MAX_WORKFLOW_FILE_BYTES + (64 << 10);

/// One error of the file, with the line it points at.
pub struct DiagRow {
    pub line: usize,
    pub column: usize,
    pub message: String,
    /// The line's text, and spaces up to its column (for the caret under it).
    pub source: String,
    pub pad: String,
    /// Spaces as wide as the line's number, under it.
    pub gutter: String,
}

#[derive(askama::Template)]
#[template(path = "web/new.html")]
struct NewPage {
    ctx: Ctx,
    spec: String,
    name: String,
    /// The outcome of the last button: None before any.
    valid: Option<bool>,
    diagnostics: Vec<DiagRow>,
    /// A refusal with no position (too large, a retry cap, a missing image...).
    error: String,
}

fn diag_rows(spec: &str, ds: &[Diagnostic]) -> Vec<DiagRow> {
    let lines: Vec<&str> = spec.lines().collect();
    ds.iter()
        .map(|d| {
            let source = d
                .line
                .checked_sub(1)
                .and_then(|i| lines.get(i))
                .copied()
                .unwrap_or_default()
                .to_string();
            // The caret's column counts characters; tabs keep their width by staying tabs.
            let pad = source
                .chars()
                .take(d.column.saturating_sub(1))
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            DiagRow {
                gutter: " ".repeat(d.line.to_string().len()),
                line: d.line,
                column: d.column,
                message: d.message.clone(),
                source,
                pad,
            }
        })
        .collect()
}

pub async fn form(web: Web) -> Response {
    page(
        StatusCode::OK,
        &NewPage {
            ctx: web.ctx("workflows"),
            spec: String::new(),
            name: String::new(),
            valid: None,
            diagnostics: vec![],
            error: String::new(),
        },
    )
}

#[derive(Deserialize)]
pub struct NewForm {
    #[serde(default)]
    spec: String,
    #[serde(default)]
    name: String,
    /// Which button: `validate` or `start`.
    #[serde(default)]
    action: String,
}

pub async fn submit(
    State(st): State<AppState>,
    WebForm { web, form }: WebForm<NewForm, NEW_FORM_LIMIT>,
) -> Result<Response, WebError> {
    // Browsers send a textarea's line ends as CRLF; the file's positions count lines alike.
    let spec = form.spec.replace("\r\n", "\n");
    let name = form.name.trim().to_string();
    let shown = |valid, diagnostics: &[Diagnostic], error: String| {
        let status = if valid {
            StatusCode::OK
        } else {
            StatusCode::BAD_REQUEST
        };
        page(
            status,
            &NewPage {
                ctx: web.ctx("workflows"),
                diagnostics: diag_rows(&spec, diagnostics),
                spec: spec.clone(),
                name: name.clone(),
                valid: Some(valid),
                error,
            },
        )
    };
    if spec.trim().is_empty() {
        return Ok(shown(
            false,
            &[],
            "Paste a workflow file or choose one to upload first.".into(),
        ));
    }
    match form.action.as_str() {
        "validate" => {
            let r = svc::validate(&ValidateWorkflow { spec: spec.clone() });
            Ok(match r {
                Ok(v) => shown(v.valid, &v.diagnostics, String::new()),
                Err(e) => refusal(e, shown)?,
            })
        }
        "start" => {
            let req = SubmitWorkflow {
                spec: spec.clone(),
                name: (!name.is_empty()).then(|| name.clone()),
            };
            let r = svc::submit(&st, &web.caller, req, Channel::Web).await;
            Ok(match r {
                Ok(created) => {
                    Redirect::to(&format!("/workflows/{}?done=started", created.id)).into_response()
                }
                Err(e) => refusal(e, shown)?,
            })
        }
        other => Err(ApiError::BadRequest(format!(
            "the form's action must be validate or start, not {other:?}"
        ))
        .into()),
    }
}

/// A refusal of the file shown on the page, with the text kept for the next try; trouble of
/// the server is an error page.
fn refusal(
    e: ApiError,
    shown: impl Fn(bool, &[Diagnostic], String) -> Response,
) -> Result<Response, WebError> {
    match e {
        ApiError::Invalid {
            message,
            diagnostics,
        } => Ok(shown(false, &diagnostics, message)),
        e @ (ApiError::BadRequest(_)
        | ApiError::TooLarge { .. }
        | ApiError::Conflict(_)
        | ApiError::Forbidden(_)
        | ApiError::NotFound(_)) => Ok(shown(false, &[], e.to_string())),
        e => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diagnostic_points_at_its_line_and_column() {
        let spec = "version: v4\njobs:\n  a: { imag: 1 }\n";
        let rows = diag_rows(
            spec,
            &[Diagnostic {
                line: 3,
                column: 8,
                message: "unknown field".into(),
            }],
        );
        assert_eq!(rows[0].source, "  a: { imag: 1 }");
        assert_eq!(rows[0].pad, "       ");
        let past = diag_rows(
            spec,
            &[Diagnostic {
                line: 9,
                column: 1,
                message: "x".into(),
            }],
        );
        assert_eq!(past[0].source, "");
    }
}
