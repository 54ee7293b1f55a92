//! Nodes: every pool and node with its state, resources in use and holds; administrators
//! place and release holds here, through the same functions as `gantry node hold|release`.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use gantry_api::agent::Capacity;
use gantry_api::v1::{HoldInfo, NodeInfo, PlaceHold, ReleaseHolds};
use serde::Deserialize;

use super::session::{Web, WebForm};
use super::{bytes, ok_page, segment, short, when, Ctx, Done, WebError, When};
use crate::error::ApiError;
use crate::services::nodes as svc;
use crate::state::AppState;

pub struct HoldRow {
    pub id: String,
    pub short: String,
    pub kind: String,
    pub state: String,
    /// "monitoring (AlertName)" or "administrator".
    pub source: String,
    pub reason: String,
    pub who: String,
    pub placed: When,
    pub released: Option<String>,
}

fn hold_row(h: &HoldInfo) -> HoldRow {
    HoldRow {
        id: h.id.to_string(),
        short: short(&h.id),
        kind: h.kind.clone(),
        state: h.state.clone(),
        source: match &h.alertname {
            Some(a) if h.source == "monitoring" => format!("monitoring ({a})"),
            _ if h.source == "admin" => "administrator".into(),
            _ => h.source.clone(),
        },
        reason: h.reason.clone(),
        who: h.created_by.clone(),
        placed: when(h.created_at),
        released: h.released_at.map(|t| {
            format!(
                "{} by {}{}",
                when(t).ago,
                h.released_by.as_deref().unwrap_or("?"),
                h.release_reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            )
        }),
    }
}

pub struct NodeRow {
    pub name: String,
    pub url: String,
    pub anchor: String,
    pub state: String,
    pub connected: bool,
    pub cpus: String,
    pub memory: String,
    pub devices: String,
    pub running: u32,
    pub last_seen: Option<When>,
    pub holds: Vec<HoldRow>,
    pub address: Option<String>,
    /// `KEY=VALUE`, what `resource.annotations` constraints match.
    pub labels: Vec<String>,
}

fn devices(used: &Capacity, total: &Capacity) -> String {
    total
        .devices
        .iter()
        .map(|(d, n)| format!("{d}: {} / {n}", used.devices.get(d).unwrap_or(&0)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The id of a node's row on the list, which the list's forms come back to.
fn anchor(name: &str) -> String {
    format!("node-{}", segment(name).replace('%', "_"))
}

fn node_row(n: &NodeInfo) -> NodeRow {
    NodeRow {
        url: format!("/nodes/{}", segment(&n.name)),
        anchor: anchor(&n.name),
        name: n.name.clone(),
        state: n.state.to_string(),
        connected: n.connected,
        cpus: format!("{} / {} cores", n.allocated.cpus, n.capacity.cpus),
        memory: format!(
            "{} / {}",
            bytes(n.allocated.memory_bytes),
            bytes(n.capacity.memory_bytes)
        ),
        devices: devices(&n.allocated, &n.capacity),
        running: n.running,
        last_seen: n.last_seen.map(when),
        holds: n.holds.iter().map(hold_row).collect(),
        address: n.address.clone(),
        labels: n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect(),
    }
}

pub struct Pool {
    pub name: String,
    pub nodes: Vec<NodeRow>,
    pub held: usize,
}

#[derive(askama::Template)]
#[template(path = "web/nodes.html")]
struct ListPage {
    ctx: Ctx,
    pools: Vec<Pool>,
    /// (name, URL) of each monitoring tool an administrator configured.
    monitoring: Vec<(&'static str, String)>,
}

pub async fn list(
    State(st): State<AppState>,
    web: Web,
    Query(done): Query<Done>,
) -> Result<Response, WebError> {
    let monitoring = svc::monitoring_links(&st).await?;
    let nodes = svc::list(&st, &Default::default()).await?;
    let mut pools: BTreeMap<String, Vec<NodeRow>> = BTreeMap::new();
    for n in &nodes {
        pools.entry(n.pool.clone()).or_default().push(node_row(n));
    }
    let pools = pools
        .into_iter()
        .map(|(name, mut nodes)| {
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
            Pool {
                held: nodes.iter().filter(|n| !n.holds.is_empty()).count(),
                name,
                nodes,
            }
        })
        .collect();
    Ok(ok_page(&ListPage {
        ctx: web.ctx("nodes").with_notice(done.done()),
        pools,
        monitoring,
    }))
}

pub struct EventRow {
    pub time: When,
    pub kind: String,
    pub message: String,
    /// The workflow it concerns: (id, "name (short id)").
    pub workflow: Option<(String, String)>,
    /// The task it concerns, as `job[index]`.
    pub task: Option<String>,
}

/// How many of a node's newest events the page shows; "more" doubles it.
const PAGE_EVENTS: u32 = 50;

#[derive(Deserialize)]
pub struct EventsPage {
    #[serde(default)]
    events: Option<u32>,
}

#[derive(askama::Template)]
#[template(path = "web/node.html")]
struct ShowPage {
    ctx: Ctx,
    pool: String,
    node: NodeRow,
    history: Vec<HoldRow>,
    events: Vec<EventRow>,
    /// The link to a longer page, when older events exist.
    more: Option<String>,
    graphs: Option<super::graphs::NodeGraphs>,
}

pub async fn show(
    State(st): State<AppState>,
    web: Web,
    Path(name): Path<String>,
    Query(done): Query<Done>,
    Query(page): Query<EventsPage>,
) -> Result<Response, WebError> {
    let limit = page.events.unwrap_or(PAGE_EVENTS).clamp(1, 10_000);
    let d = svc::detail(&st, &web.caller, &name, Some(limit), None).await?;
    let graphs = super::graphs::for_node(&st, &d.node.name).await;
    // Newest first: a person opening the page wants what just happened.
    let events: Vec<EventRow> = d
        .events
        .iter()
        .rev()
        .map(|e| EventRow {
            time: when(e.time),
            kind: e.kind.clone(),
            message: e.message.clone(),
            workflow: e.workflow_id.map(|id| {
                let short = short(&id);
                let label = match &e.workflow_name {
                    Some(n) => format!("{n} ({short})"),
                    None => short,
                };
                (id.to_string(), label)
            }),
            task: e.task.clone(),
        })
        .collect();
    let more = d.more_events.then(|| {
        format!(
            "/nodes/{}?events={}",
            segment(&d.node.name),
            limit.saturating_mul(2).min(10_000)
        )
    });
    Ok(ok_page(&ShowPage {
        ctx: web.ctx("nodes").with_notice(done.done()),
        pool: d.node.pool.clone(),
        history: d.hold_history.iter().rev().map(hold_row).collect(),
        node: node_row(&d.node),
        events,
        more,
        graphs,
    }))
}

#[derive(Deserialize)]
pub struct HoldForm {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    reason: String,
    /// Where the form was: the node's page or the list.
    #[serde(default)]
    back: Option<String>,
}

/// Back to the page the form was on.
fn back(name: &str, to: Option<&str>, done: &str) -> Response {
    let url = match to {
        Some("node") => format!("/nodes/{}?done={done}", segment(name)),
        _ => format!("/nodes?done={done}#{}", anchor(name)),
    };
    Redirect::to(&url).into_response()
}

pub async fn hold(
    State(st): State<AppState>,
    Path(name): Path<String>,
    WebForm { web, form }: WebForm<HoldForm>,
) -> Result<Response, WebError> {
    let req = PlaceHold {
        kind: form.kind,
        reason: form.reason,
    };
    crate::services::holds::place(&st, &web.caller, &name, &req).await?;
    Ok(back(&name, form.back.as_deref(), "held"))
}

#[derive(Deserialize)]
pub struct ReleaseForm {
    /// One hold's id; every hold of the node when empty.
    #[serde(default)]
    hold: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    back: Option<String>,
}

pub async fn release(
    State(st): State<AppState>,
    Path(name): Path<String>,
    WebForm { web, form }: WebForm<ReleaseForm>,
) -> Result<Response, WebError> {
    // Said here too, in the form's own words, before the API's check.
    if form.reason.trim().is_empty() {
        return Err(ApiError::BadRequest("say why the node is released (a reason)".into()).into());
    }
    let req = ReleaseHolds {
        hold: (!form.hold.is_empty()).then_some(form.hold),
        reason: Some(form.reason.trim().to_string()),
    };
    crate::services::holds::release(&st, &web.caller, &name, req).await?;
    Ok(back(&name, form.back.as_deref(), "released"))
}
