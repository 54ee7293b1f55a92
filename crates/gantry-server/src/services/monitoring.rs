//! Alerts from the site's Alertmanager: a webhook post read, checked against the nodes there
//! are, and decided under the holds' lock (`crate::holds::apply_alerts`).

use gantry_api::v1::WebhookOutcome;
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
