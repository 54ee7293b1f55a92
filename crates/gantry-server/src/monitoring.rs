//! The monitoring side of the server: the Alertmanager webhook, Prometheus HTTP service
//! discovery of agents and node exporters, and the server's own `/metrics`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use gantry_api::v1::{TargetGroup, WebhookOutcome};
use gantry_core::holds::{Alert, HoldState, HoldType, Release};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::api::ApiError;
use crate::auth::MonitoringCaller;
use crate::holds::{apply_alerts, AlertEntry, Applied};
use crate::state::{now_ms, AppState};

type Labels = Vec<(&'static str, String)>;

/// Counters kept across scrapes; gauges are computed from the store at scrape time.
#[derive(Default)]
pub struct Metrics {
    webhook_requests: Family<Labels, Counter>,
    webhook_errors: Counter,
    webhook_alerts: Family<Labels, Counter>,
    /// When the last watchdog alert arrived (ms since the epoch; 0: never).
    watchdog_at: AtomicI64,
}

#[derive(Deserialize)]
struct Payload {
    alerts: Vec<AmAlert>,
}

#[derive(Deserialize)]
struct AmAlert {
    status: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(rename = "startsAt", default)]
    starts_at: String,
    #[serde(default)]
    fingerprint: Option<String>,
}

/// An episode's `startsAt` as a key: it must be an RFC 3339 time after the Unix epoch. An
/// empty or zero one (Go's `0001-01-01T00:00:00Z`, what a sender leaves unset) would make every
/// episode of its fingerprint one and the same, so one bad post could hold a node for good or
/// end every later episode before it began.
fn episode_start(starts_at: &str) -> Result<(), String> {
    use time::format_description::well_known::Rfc3339;
    match time::OffsetDateTime::parse(starts_at, &Rfc3339) {
        Ok(t) if t.unix_timestamp() > 0 => Ok(()),
        Ok(_) => Err(format!(
            "startsAt {starts_at:?} is not a real start (zero or before 1970)"
        )),
        Err(_) if starts_at.is_empty() => Err("no startsAt".into()),
        Err(e) => Err(format!(
            "startsAt {:?} is not an RFC 3339 time ({e})",
            cut(starts_at)
        )),
    }
}

/// Alertmanager's fingerprints are 16 hex digits; anything short, plain and printable is taken.
fn valid_fingerprint(f: &str) -> bool {
    !f.is_empty()
        && f.len() <= 64
        && f.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// At most 64 characters of what a sender sent, for a reply.
fn cut(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Alertmanager's fingerprint is stable per label set; derive one the same way when a sender
/// leaves it out.
fn fingerprint(labels: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    for (k, v) in labels {
        h.update(k.as_bytes());
        h.update([0xff]);
        h.update(v.as_bytes());
        h.update([0xff]);
    }
    hex::encode(&h.finalize()[..8])
}

fn count(st: &AppState, code: StatusCode) {
    st.metrics
        .webhook_requests
        .get_or_create(&vec![("code", code.as_u16().to_string())])
        .inc();
}

/// `POST /api/v1/monitoring/alertmanager`. Each entry is handled on its own and idempotently;
/// the reply is 2xx only once every result is durable, 5xx for transient trouble (Alertmanager
/// retries at once), and 4xx only for a payload that can never be accepted.
pub async fn webhook(
    State(st): State<AppState>,
    MonitoringCaller(_): MonitoringCaller,
    body: Bytes,
) -> Response {
    let payload: Payload = match serde_json::from_slice(&body) {
        Ok(p) => p,
        Err(e) => {
            count(&st, StatusCode::BAD_REQUEST);
            st.metrics.webhook_errors.inc();
            return ApiError::BadRequest(format!(
                "not an Alertmanager webhook payload (version 4, with an `alerts` list): {e}"
            ))
            .into_response();
        }
    };
    let mut out = WebhookOutcome {
        alerts: payload.alerts.len(),
        ..Default::default()
    };
    let known: std::collections::BTreeSet<String> = match st.store.nodes().await {
        Ok(nodes) => nodes.into_iter().map(|n| n.name).collect(),
        Err(e) => return transient(&st, e.into()),
    };
    let mut unknown = vec![];
    let mut entries = vec![];
    for a in &payload.alerts {
        let name = a
            .labels
            .get("alertname")
            .cloned()
            .unwrap_or_else(|| "unnamed alert".into());
        if a.labels.get("gantry_watchdog").is_some_and(|v| v == "true") {
            if a.status == "firing" {
                st.metrics.watchdog_at.store(now_ms(), Ordering::Relaxed);
            }
            out.unchanged += 1;
            continue;
        }
        let firing = match a.status.as_str() {
            "firing" => true,
            "resolved" => false,
            other => {
                out.ignored
                    .push(format!("{name}: unknown status {other:?}"));
                continue;
            }
        };
        let Some(node) = a.labels.get("node").filter(|n| !n.is_empty()) else {
            out.ignored.push(format!("{name}: no `node` label"));
            continue;
        };
        let kind = match a.labels.get("gantry_hold").map(String::as_str) {
            Some("cordon") => HoldType::Cordon,
            Some("evict") => HoldType::Evict,
            Some(other) => {
                out.ignored.push(format!(
                    "{name} on {node}: gantry_hold must be cordon or evict, not {other:?}"
                ));
                continue;
            }
            None => {
                out.ignored.push(format!(
                    "{name} on {node}: no `gantry_hold` label, so Gantry does not act on it"
                ));
                continue;
            }
        };
        let release = match a.labels.get("gantry_release").map(String::as_str) {
            Some("admin") => Release::Admin,
            None | Some("auto") => Release::Auto,
            Some(other) => {
                out.ignored.push(format!(
                    "{name} on {node}: gantry_release must be auto or admin, not {other:?}"
                ));
                continue;
            }
        };
        let fp = match a.fingerprint.as_deref().filter(|f| !f.is_empty()) {
            Some(f) if valid_fingerprint(f) => f.to_string(),
            Some(f) => {
                out.refused.push(format!(
                    "{} on {}: fingerprint {:?} is not 1-64 letters, digits, '-' or '_'",
                    cut(&name),
                    cut(node),
                    cut(f)
                ));
                continue;
            }
            None => fingerprint(&a.labels),
        };
        if let Err(why) = episode_start(&a.starts_at) {
            out.refused
                .push(format!("{} on {}: {why}", cut(&name), cut(node)));
            continue;
        }
        if !known.contains(node.as_str()) {
            let msg = format!("{name}: node {node} is not known to Gantry");
            unknown.push(gantry_store::UnknownNodeAlert {
                fingerprint: fp,
                episode: a.starts_at.clone(),
                status: a.status.clone(),
                event: gantry_store::NewEvent {
                    workflow_id: None,
                    node: Some(node.clone()),
                    task: None,
                    kind: "alert.unknown_node".into(),
                    message: format!(
                        "{name} ({}) names node {node}, which Gantry does not know",
                        a.status
                    ),
                },
            });
            out.ignored.push(msg);
            continue;
        }
        let entry = AlertEntry {
            alert: Alert {
                fingerprint: fp,
                starts_at: a.starts_at.clone(),
                firing,
                node: node.clone(),
                kind,
                release,
            },
            summary: a
                .annotations
                .get("summary")
                .cloned()
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| format!("{name} on {node}")),
            alertname: name,
        };
        entries.push(entry);
    }
    if !out.refused.is_empty() && out.refused.len() == out.alerts {
        // Nothing of this post can ever be accepted: a 4xx, which Alertmanager does not retry.
        count(&st, StatusCode::BAD_REQUEST);
        st.metrics.webhook_errors.inc();
        return ApiError::BadRequest(format!(
            "no alert of this post can be accepted: {}",
            out.refused.join("; ")
        ))
        .into_response();
    }
    // Repeats of an episode (Alertmanager re-sends every group interval, HA peers each send
    // it) record nothing more.
    if let Err(e) = st
        .store
        .record_unknown_node_alerts(&unknown, now_ms())
        .await
    {
        return transient(&st, e.into());
    }
    match apply_alerts(&st, &entries).await {
        Ok(applied) => {
            for a in applied {
                match a {
                    Applied::Placed(HoldState::Deferred) => out.deferred += 1,
                    Applied::Placed(_) => out.placed += 1,
                    Applied::Released => out.released += 1,
                    Applied::AwaitingAdmin => out.awaiting_admin += 1,
                    Applied::Unchanged => out.unchanged += 1,
                }
            }
        }
        Err(e) => return transient(&st, e),
    }
    for (outcome, n) in [
        ("placed", out.placed),
        ("deferred", out.deferred),
        ("released", out.released),
        ("awaiting_admin", out.awaiting_admin),
        ("unchanged", out.unchanged),
        ("ignored", out.ignored.len()),
        ("refused", out.refused.len()),
    ] {
        if n > 0 {
            st.metrics
                .webhook_alerts
                .get_or_create(&vec![("outcome", outcome.to_string())])
                .inc_by(n as u64);
        }
    }
    count(&st, StatusCode::OK);
    (StatusCode::OK, Json(out)).into_response()
}

fn transient(st: &AppState, e: ApiError) -> Response {
    st.metrics.webhook_errors.inc();
    tracing::warn!("webhook: {e}");
    count(st, StatusCode::SERVICE_UNAVAILABLE);
    // 503 whatever the cause: Alertmanager retries the whole post, and each entry is idempotent.
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(gantry_api::v1::ErrorBody {
            error: format!("try again: {e}"),
            ..Default::default()
        }),
    )
        .into_response()
}

/// `GET /api/v1/monitoring/targets`: Prometheus HTTP service discovery. Every agent's metrics
/// and every node exporter, labelled with the node's name and pool.
pub async fn targets(
    State(st): State<AppState>,
    MonitoringCaller(_): MonitoringCaller,
) -> Result<Json<Vec<TargetGroup>>, ApiError> {
    let mut out = vec![];
    for n in st.store.nodes().await? {
        for (kind, addr) in [
            ("agent", &n.metrics_addr),
            ("node-exporter", &n.node_exporter),
        ] {
            if let Some(addr) = addr.as_ref().filter(|a| !a.is_empty()) {
                out.push(TargetGroup {
                    targets: vec![addr.clone()],
                    labels: BTreeMap::from([
                        ("node".to_string(), n.name.clone()),
                        ("pool".to_string(), n.pool.clone()),
                        ("__meta_gantry_kind".to_string(), kind.to_string()),
                    ]),
                });
            }
        }
    }
    Ok(Json(out))
}

/// `GET /metrics`: counts only, nothing a caller could not see elsewhere.
pub async fn metrics(State(st): State<AppState>) -> Result<Response, ApiError> {
    let mut reg = Registry::default();
    let holds: Family<Labels, Gauge> = Family::default();
    let deferred: Family<Labels, Gauge> = Family::default();
    let nodes: Family<Labels, Gauge> = Family::default();
    let queue: Gauge = Gauge::default();
    let all_nodes = st.store.nodes().await?;
    for n in &all_nodes {
        nodes
            .get_or_create(&vec![("pool", n.pool.clone()), ("state", n.state.clone())])
            .inc();
        // Every pool reports its deferred count, zero included.
        let _ = deferred.get_or_create(&vec![("pool", n.pool.clone())]);
    }
    for h in st.store.holds(None, false).await? {
        match h.state.as_str() {
            "ACTIVE" => {
                holds
                    .get_or_create(&vec![
                        ("pool", h.pool),
                        ("type", h.kind),
                        ("source", h.source),
                    ])
                    .inc();
            }
            "DEFERRED" => {
                deferred.get_or_create(&vec![("pool", h.pool)]).inc();
            }
            _ => {}
        }
    }
    let pending: usize = st
        .store
        .active()
        .await?
        .iter()
        .map(|w| {
            w.tasks
                .iter()
                .filter(|t| t.status == gantry_api::TaskStatus::Pending)
                .count()
        })
        .sum();
    queue.set(pending as i64);
    reg.register(
        "gantry_holds",
        "Active holds by pool, type and source",
        holds,
    );
    reg.register(
        "gantry_holds_deferred",
        "Holds past the pool cap, waiting for room",
        deferred,
    );
    reg.register("gantry_nodes", "Nodes by pool and state", nodes);
    reg.register("gantry_queue_depth", "Tasks waiting to be placed", queue);
    reg.register(
        "gantry_webhook_requests",
        "Alertmanager webhook posts by reply code",
        st.metrics.webhook_requests.clone(),
    );
    reg.register(
        "gantry_webhook_errors",
        "Webhook posts refused or failed",
        st.metrics.webhook_errors.clone(),
    );
    reg.register(
        "gantry_webhook_alerts",
        "Alert entries by what Gantry did with them",
        st.metrics.webhook_alerts.clone(),
    );
    let at = st.metrics.watchdog_at.load(Ordering::Relaxed);
    if at > 0 {
        let age: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        age.set((now_ms() - at) as f64 / 1000.0);
        reg.register(
            "gantry_watchdog_age_seconds",
            "Seconds since the last watchdog alert",
            age,
        );
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &reg)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}
