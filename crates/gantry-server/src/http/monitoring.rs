//! The monitoring side of the server: the Alertmanager webhook, Prometheus HTTP service
//! discovery of agents and node exporters, and the server's own `/metrics`.

use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use gantry_api::v1::TargetGroup;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::auth::MonitoringCaller;
use crate::error::ApiError;
use crate::services::monitoring::{self as svc, Refusal};
use crate::state::{now_ms, AppState};

use crate::metrics::Labels;

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
    let post = match svc::read(&st, &body).await {
        Ok(post) => post,
        Err(Refusal::Never(message)) => {
            count(&st, StatusCode::BAD_REQUEST);
            st.metrics.webhook_errors.inc();
            return ApiError::BadRequest(message).into_response();
        }
        Err(Refusal::Transient(e)) => return transient(&st, e),
    };
    if post.watchdog_firing() {
        st.metrics.watchdog_at.store(now_ms(), Ordering::Relaxed);
    }
    let out = match svc::act(&st, post).await {
        Ok(out) => out,
        Err(e) => return transient(&st, e),
    };
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
    Ok(Json(svc::targets(&st).await?))
}

/// `GET /metrics`: counts only, nothing a caller could not see elsewhere.
pub async fn metrics(State(st): State<AppState>) -> Result<Response, ApiError> {
    let g = svc::gauges(&st).await?;
    let mut reg = Registry::default();
    let holds: Family<Labels, Gauge> = Family::default();
    let deferred: Family<Labels, Gauge> = Family::default();
    let nodes: Family<Labels, Gauge> = Family::default();
    let queue: Gauge = Gauge::default();
    for ((pool, state), n) in g.nodes {
        nodes
            .get_or_create(&vec![("pool", pool), ("state", state)])
            .set(n);
    }
    for ((pool, kind, source), n) in g.holds {
        holds
            .get_or_create(&vec![("pool", pool), ("type", kind), ("source", source)])
            .set(n);
    }
    for (pool, n) in g.deferred {
        deferred.get_or_create(&vec![("pool", pool)]).set(n);
    }
    queue.set(g.waiting);
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
