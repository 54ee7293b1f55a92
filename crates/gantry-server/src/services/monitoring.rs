//! Monitoring: alerts from the site's Alertmanager (a webhook post read, checked against the
//! nodes there are, and decided under the holds' lock, `crate::holds::apply_alerts`), what
//! Prometheus discovers, and the counts the server's `/metrics` shows.

use std::collections::BTreeMap;

use gantry_api::v1::{TargetGroup, WebhookOutcome};
use gantry_core::holds::HoldState;
use gantry_intake::alertmanager;

use crate::error::ApiError;
use crate::holds::{apply_alerts, Applied};
use crate::state::{now_ms, AppState};

/// A post read and checked, nothing acted on yet.
pub struct Post {
    alerts: usize,
    reading: alertmanager::Reading,
}

impl Post {
    /// The post carries the watchdog, firing: monitoring is alive.
    pub fn watchdog_firing(&self) -> bool {
        self.reading.watchdog_firing
    }
}

/// Why a post was not acted on.
pub enum Refusal {
    /// Nothing of it can ever be accepted (Alertmanager must not send it again).
    Never(String),
    /// The store's trouble: the whole post may be sent again, each entry is idempotent.
    Transient(ApiError),
}

/// Reads a post's body and checks its alerts against the nodes there are.
pub async fn read(st: &AppState, body: &[u8]) -> Result<Post, Refusal> {
    let payload = alertmanager::decode(body).map_err(Refusal::Never)?;
    let known: std::collections::BTreeSet<String> = match st.store.nodes().await {
        Ok(nodes) => nodes.into_iter().map(|n| n.name).collect(),
        Err(e) => return Err(Refusal::Transient(e.into())),
    };
    let reading = alertmanager::read(&payload, |node| known.contains(node));
    if !reading.refused.is_empty() && reading.refused.len() == payload.alerts.len() {
        return Err(Refusal::Never(format!(
            "no alert of this post can be accepted: {}",
            reading.refused.join("; ")
        )));
    }
    Ok(Post {
        alerts: payload.alerts.len(),
        reading,
    })
}

/// Acts on each alert of a post; returns once every result is durable. An error is the
/// store's trouble: the whole post may be sent again, each entry is idempotent.
pub async fn act(st: &AppState, post: Post) -> Result<WebhookOutcome, ApiError> {
    let Post { alerts, reading } = post;
    let mut out = WebhookOutcome {
        alerts,
        unchanged: reading.watchdogs,
        ignored: reading.ignored,
        refused: reading.refused,
        ..Default::default()
    };
    let unknown: Vec<gantry_store::UnknownNodeAlert> = reading
        .unknown
        .into_iter()
        .map(|u| gantry_store::UnknownNodeAlert {
            fingerprint: u.fingerprint,
            episode: u.episode,
            status: u.status,
            event: gantry_store::NewEvent {
                workflow_id: None,
                node: Some(u.node),
                task: None,
                kind: "alert.unknown_node".into(),
                message: u.message,
            },
        })
        .collect();
    // Repeats of an episode (Alertmanager re-sends every group interval, HA peers each send
    // it) record nothing more.
    st.store
        .record_unknown_node_alerts(&unknown, now_ms())
        .await?;
    let applied = apply_alerts(&st.holds, &reading.entries).await?;
    for a in applied {
        match a {
            Applied::Placed(HoldState::Deferred) => out.deferred += 1,
            Applied::Placed(_) => out.placed += 1,
            Applied::Released => out.released += 1,
            Applied::AwaitingAdmin => out.awaiting_admin += 1,
            Applied::Unchanged => out.unchanged += 1,
        }
    }
    Ok(out)
}

/// What Prometheus discovers (HTTP service discovery): every agent's metrics and every node
/// exporter, labelled with the node's name and pool.
pub async fn targets(st: &AppState) -> Result<Vec<TargetGroup>, ApiError> {
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
    Ok(out)
}

/// The cluster's counts that `/metrics` shows: nothing a caller could not see elsewhere.
#[derive(Default)]
pub struct Gauges {
    /// Nodes by (pool, state).
    pub nodes: BTreeMap<(String, String), i64>,
    /// Active holds by (pool, type, source).
    pub holds: BTreeMap<(String, String, String), i64>,
    /// Deferred holds by pool: every pool with a node, zero included.
    pub deferred: BTreeMap<String, i64>,
    /// Tasks waiting to be placed.
    pub waiting: i64,
}

pub async fn gauges(st: &AppState) -> Result<Gauges, ApiError> {
    let mut g = Gauges::default();
    for n in st.store.nodes().await? {
        *g.nodes
            .entry((n.pool.clone(), n.state.to_string()))
            .or_default() += 1;
        g.deferred.entry(n.pool).or_default();
    }
    for h in st.store.holds(None, false).await? {
        match h.state {
            gantry_store::HoldStatus::Active => {
                let key = (h.pool, h.kind.to_string(), h.source.to_string());
                *g.holds.entry(key).or_default() += 1;
            }
            gantry_store::HoldStatus::Deferred => *g.deferred.entry(h.pool).or_default() += 1,
            _ => {}
        }
    }
    // Each job's waiting tasks, counted by the store (listed or not in the snapshot's window).
    g.waiting = st
        .store
        .active()
        .await?
        .iter()
        .flat_map(|w| &w.pending)
        .map(|c| i64::from(c.count))
        .sum();
    Ok(g)
}
