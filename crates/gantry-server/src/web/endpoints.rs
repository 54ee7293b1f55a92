//! Persistent endpoints: status, URL, who serves it and since when, a takeover in progress
//! (approve or reject it here), the switch history; create and delete.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use gantry_api::v1::{CreateEndpoint, EndpointInfo, TakeoverInfo};
use serde::Deserialize;
use time::OffsetDateTime;

use super::session::{Nothing, Web, WebForm};
use super::{ok_page, segment, short, span, when, Ctx, Done, WebError, When};
use crate::error::ApiError;
use crate::services::endpoints as svc;
use crate::state::AppState;

/// The words the page uses for an endpoint's status.
fn status_words(status: &str) -> &'static str {
    match status {
        "SERVING" => "serving",
        "SWITCHING" => "switching",
        "DRAINING" => "draining",
        "IDLE" => "no backend",
        "FAILED" => "failed",
        _ => "unknown",
    }
}

/// Who asked for a takeover, and through what: a person at the CLI or the web page, or an
/// MCP client (an agent) acting for them.
fn asked_by(user: &str, channel: &str) -> String {
    match channel {
        "mcp" => format!("{user}'s MCP client (an agent)"),
        "cli" => format!("{user} (CLI)"),
        "web" => format!("{user} (web)"),
        _ => format!("{user} (API)"),
    }
}

pub struct TakeoverRow {
    pub phase: String,
    pub from: Option<(String, String)>,
    pub to: (String, String),
    pub service: String,
    pub asked_by: String,
    pub mode: String,
    pub started: When,
    pub elapsed: String,
    pub confirmed: String,
    pub reason: String,
    pub awaiting: bool,
}

fn wf_link(id: &uuid::Uuid) -> (String, String) {
    (format!("/workflows/{id}"), short(id))
}

fn takeover_row(t: &TakeoverInfo) -> TakeoverRow {
    let end = t.ended_at.unwrap_or_else(OffsetDateTime::now_utc);
    TakeoverRow {
        phase: t.phase.clone(),
        from: t.from_workflow.as_ref().map(wf_link),
        to: wf_link(&t.to_workflow),
        service: t.to_service.clone(),
        asked_by: asked_by(&t.requested_by, &t.channel),
        mode: t.mode.clone(),
        started: when(t.created_at),
        elapsed: span((end - t.created_at).whole_seconds()),
        confirmed: match (&t.confirmed_by, &t.confirmed_via) {
            (Some(by), Some(via)) => format!("{by} via {via}"),
            (Some(by), None) => by.clone(),
            _ => String::new(),
        },
        reason: t.reason.clone().unwrap_or_default(),
        awaiting: t.phase == "AWAITING_CONFIRMATION",
    }
}

pub struct EndpointRow {
    pub name: String,
    pub page: String,
    pub url: String,
    pub host: String,
    pub scope: String,
    pub mode: String,
    pub confirm: bool,
    pub owner: String,
    pub status: String,
    pub status_words: &'static str,
    /// Why it is IDLE or FAILED (empty when serving).
    pub reason: String,
    pub workflow: Option<(String, String)>,
    pub service: String,
    pub since: Option<When>,
    pub takeover: Option<TakeoverRow>,
    /// The signed-in user may approve, reject and delete.
    pub manage: bool,
}

fn endpoint_row(web: &Web, e: &EndpointInfo) -> EndpointRow {
    // Whether the user may manage it is the API's own rule.
    let manage = crate::endpoints::may_manage_info(e, &web.caller);
    EndpointRow {
        page: format!("/endpoints/{}", segment(&e.name)),
        name: e.name.clone(),
        url: e.url.clone(),
        host: e.host.clone(),
        scope: e.scope.clone(),
        mode: e.mode.clone(),
        confirm: e.confirm,
        owner: e.owner.clone(),
        status: e.status.clone(),
        status_words: status_words(&e.status),
        reason: e.reason.clone().unwrap_or_default(),
        workflow: e.workflow_id.as_ref().map(wf_link),
        service: e.service.clone().unwrap_or_default(),
        since: e.since.map(when),
        takeover: e.takeover.as_ref().map(takeover_row),
        manage,
    }
}

#[derive(askama::Template)]
#[template(path = "web/endpoints.html")]
struct ListPage {
    ctx: Ctx,
    endpoints: Vec<EndpointRow>,
}

pub async fn list(
    State(st): State<AppState>,
    web: Web,
    Query(done): Query<Done>,
) -> Result<Response, WebError> {
    let all = svc::list(&st, &web.caller).await?;
    let endpoints = all.iter().map(|e| endpoint_row(&web, e)).collect();
    Ok(ok_page(&ListPage {
        ctx: web.ctx("endpoints").with_notice(done.done()),
        endpoints,
    }))
}

#[derive(askama::Template)]
#[template(path = "web/endpoint.html")]
struct ShowPage {
    ctx: Ctx,
    e: EndpointRow,
    drain: String,
    history: Vec<TakeoverRow>,
}

pub async fn show(
    State(st): State<AppState>,
    web: Web,
    Path(name): Path<String>,
    Query(done): Query<Done>,
) -> Result<Response, WebError> {
    let e = svc::show(&st, &web.caller, &name).await?;
    let history = svc::history(&st, &web.caller, &name).await?;
    Ok(ok_page(&ShowPage {
        ctx: web.ctx("endpoints").with_notice(done.done()),
        drain: span(e.drain_timeout_secs as i64),
        history: history.iter().rev().map(takeover_row).collect(),
        e: endpoint_row(&web, &e),
    }))
}

#[derive(Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    drain_timeout: Option<String>,
    /// A checkbox: present when ticked.
    #[serde(default)]
    confirm: Option<String>,
}

pub async fn create(
    State(st): State<AppState>,
    WebForm { web, form }: WebForm<CreateForm>,
) -> Result<Response, WebError> {
    let nonempty = |s: Option<String>| s.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    let req = CreateEndpoint {
        name: form.name.trim().to_string(),
        scope: nonempty(form.scope),
        mode: nonempty(form.mode),
        drain_timeout: nonempty(form.drain_timeout),
        confirm: form.confirm.is_some(),
    };
    let e = svc::create(&st, &web.caller, req).await?;
    Ok(Redirect::to(&format!("/endpoints/{}?done=created", segment(&e.name))).into_response())
}

#[derive(Deserialize)]
pub struct DeleteForm {
    /// The endpoint's name, typed again.
    #[serde(default)]
    confirm: String,
}

pub async fn delete(
    State(st): State<AppState>,
    Path(name): Path<String>,
    WebForm { web, form }: WebForm<DeleteForm>,
) -> Result<Response, WebError> {
    // The page's script keeps the button disabled until the name is typed; without the
    // script, this is the check.
    if form.confirm.trim() != name {
        return Err(ApiError::BadRequest(format!(
            "type the endpoint's name, {name}, to delete it"
        ))
        .into());
    }
    svc::delete(&st, &web.caller, &name).await?;
    Ok(Redirect::to("/endpoints?done=deleted").into_response())
}

pub async fn approve(
    State(st): State<AppState>,
    Path(name): Path<String>,
    WebForm { web, .. }: WebForm<Nothing>,
) -> Result<Response, WebError> {
    svc::approve(&st, &web.caller, &name, "web").await?;
    Ok(Redirect::to(&format!("/endpoints/{}?done=approved", segment(&name))).into_response())
}

pub async fn reject(
    State(st): State<AppState>,
    Path(name): Path<String>,
    WebForm { web, .. }: WebForm<Nothing>,
) -> Result<Response, WebError> {
    svc::reject(&st, &web.caller, &name, "web").await?;
    Ok(Redirect::to(&format!("/endpoints/{}?done=rejected", segment(&name))).into_response())
}
