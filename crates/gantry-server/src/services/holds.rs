//! Administrators' holds on nodes and their releases. Each is decided under the holds' one
//! lock, as the webhook's are (`crate::holds`).

use gantry_api::v1::{HoldInfo, PlaceHold, ReleaseHolds};
use gantry_intake::requests;
use gantry_store::{HoldChange, HoldRow, HoldSource, HoldStatus, ReleaseRule};
use uuid::Uuid;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::holds::{hold_kind, info, promote_locked};
use crate::state::{now_ms, AppState};

/// An administrator's hold on a node (cordon, drain or evict), with their reason.
pub async fn place(
    st: &AppState,
    c: &Caller,
    name: &str,
    req: &PlaceHold,
) -> Result<HoldInfo, ApiError> {
    c.require_admin()?;
    let (kind, reason) = requests::place_hold(req).map_err(ApiError::BadRequest)?;
    let _guard = st.holds.decide().await;
    let node = st
        .store
        .node(name)
        .await
        .map_err(|_| ApiError::NotFound(format!("no node {name}")))?;
    let row = HoldRow {
        id: Uuid::new_v4(),
        node: node.name.clone(),
        pool: node.pool.clone(),
        kind: hold_kind(kind),
        source: HoldSource::Admin,
        state: HoldStatus::Active,
        alertname: None,
        fingerprint: None,
        episode: None,
        release_rule: ReleaseRule::Admin,
        reason,
        created_by: c.user.name.clone(),
        created_at: now_ms(),
        activated_at: None,
        alert_resolved_at: None,
        released_by: None,
        released_at: None,
        release_reason: None,
    };
    let id = row.id;
    st.store
        .apply_holds(&[HoldChange::Place(Box::new(row))], now_ms())
        .await?;
    st.wake_controller();
    Ok(info(st.store.hold(id).await?))
}

/// An administrator's release of a node's holds (one, or all), with their reason; the room
/// it frees goes to deferred holds in the same decision.
pub async fn release(
    st: &AppState,
    c: &Caller,
    name: &str,
    req: ReleaseHolds,
) -> Result<Vec<HoldInfo>, ApiError> {
    c.require_admin()?;
    let requests::Release { hold, reason } =
        requests::release_holds(req).map_err(ApiError::BadRequest)?;
    {
        let _guard = st.holds.decide().await;
        let node = st
            .store
            .node(name)
            .await
            .map_err(|_| ApiError::NotFound(format!("no node {name}")))?;
        let holds = st.store.holds(Some(&node.name), false).await?;
        let chosen: Vec<&HoldRow> = match &hold {
            Some(p) => {
                let m: Vec<&HoldRow> = holds
                    .iter()
                    .filter(|h| h.id.to_string().starts_with(p.as_str()))
                    .collect();
                match m.len() {
                    0 => {
                        return Err(ApiError::NotFound(format!(
                            "node {name} has no unreleased hold {p}"
                        )))
                    }
                    1 => m,
                    _ => {
                        return Err(ApiError::BadRequest(format!(
                            "{p} matches more than one hold: give more characters"
                        )))
                    }
                }
            }
            None => holds.iter().collect(),
        };
        if chosen.is_empty() {
            return Err(ApiError::Conflict(format!(
                "node {name} has no holds to release"
            )));
        }
        let mut changes = vec![];
        for h in &chosen {
            changes.push(HoldChange::Release {
                id: h.id,
                by: c.user.name.clone(),
                reason: reason.clone(),
            });
            // An admin's release stands until the alert's next episode.
            if let (Some(fp), Some(ep)) = (&h.fingerprint, &h.episode) {
                changes.push(HoldChange::EndEpisode {
                    fingerprint: fp.clone(),
                    episode: ep.clone(),
                    by: c.user.name.clone(),
                });
            }
        }
        st.store.apply_holds(&changes, now_ms()).await?;
        // The room this frees goes to deferred holds in the same decision.
        promote_locked(&st.holds, &node.pool).await?;
    }
    st.wake_controller();
    let after = st.store.holds(Some(name), true).await?;
    Ok(after
        .into_iter()
        .filter(|h| {
            h.state == HoldStatus::Released
                && h.released_by.as_deref() == Some(c.user.name.as_str())
        })
        .map(info)
        .collect())
}
