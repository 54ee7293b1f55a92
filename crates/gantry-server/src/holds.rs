//! Holds on nodes: the Alertmanager webhook's decisions and administrators' holds and
//! releases. Every decision is `gantry_core::holds`'; this module gathers the state, applies
//! the result in one transaction, and promotes deferred holds when room frees. One lock
//! serialises this process's hold decisions, and each decision names the holds' version it
//! read (`HoldChange::Expect`), so that neither two posts nor two servers' posts can both take
//! the pool's last free slot: the later is decided again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gantry_api::v1::HoldInfo;
use gantry_core::holds::{self, Decision, Hold, HoldState, HoldType, PoolView, Release};
use gantry_intake::alertmanager::AlertEntry;
use gantry_intake::requests;
use gantry_store::{
    HoldChange, HoldKind, HoldRow, HoldSource, HoldStatus, NewEvent, ReleaseRule, Store,
};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::clock::now_ms;
use crate::clock::ts;
use crate::error::ApiError;

/// Hold decisions, one at a time: the store, the lock that serialises every decision
/// (webhook posts, administrators' holds and releases, promotions), and the controller's
/// wake notifier (a decision takes room away or frees it).
pub struct Holds {
    pub(crate) store: Arc<dyn Store>,
    lock: tokio::sync::Mutex<()>,
    wake: Arc<Notify>,
}

impl Holds {
    pub fn new(store: Arc<dyn Store>, wake: Arc<Notify>) -> Self {
        Holds {
            store,
            lock: tokio::sync::Mutex::new(()),
            wake,
        }
    }

    /// Waits for the decision in flight: hold the guard while deciding.
    pub async fn decide(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.lock.lock().await
    }

    fn wake_controller(&self) {
        self.wake.notify_one();
    }

    /// Decides with `decide` (given the time) and applies its changes, made on the holds as of
    /// the version read first; when another decision (another server's: the lock above is
    /// this process's) was applied in between, nothing is applied and it decides again, up to
    /// [`DECISION_TRIES`] times. Returns what the applied decision returned with its changes.
    async fn until_applied<T, F, Fut>(&self, mut decide: F) -> Result<T, ApiError>
    where
        F: FnMut(i64) -> Fut,
        Fut: std::future::Future<Output = Result<(Vec<HoldChange>, T), ApiError>>,
    {
        for _ in 0..DECISION_TRIES {
            let now = now_ms();
            let version = self.store.holds_version().await?;
            let (mut changes, out) = decide(now).await?;
            if changes.is_empty() {
                return Ok(out);
            }
            changes.insert(0, HoldChange::Expect(version));
            match self.store.apply_holds(&changes, now).await {
                Ok(()) => return Ok(out),
                Err(gantry_store::StoreError::Refused(why)) => {
                    tracing::info!("hold decision made again: {why}");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::Conflict(
            "other servers' hold decisions kept changing the holds under this one: try again"
                .into(),
        ))
    }
}

/// How often a decision is made again when another server's decision came first.
const DECISION_TRIES: usize = 8;

pub fn info(h: HoldRow) -> HoldInfo {
    HoldInfo {
        id: h.id,
        node: h.node,
        pool: h.pool,
        kind: h.kind.to_string(),
        source: h.source.to_string(),
        state: h.state.to_string(),
        alertname: h.alertname,
        fingerprint: h.fingerprint,
        reason: h.reason,
        release: h.release_rule.to_string(),
        created_by: h.created_by,
        created_at: ts(h.created_at),
        alert_resolved_at: h.alert_resolved_at.map(ts),
        released_by: h.released_by,
        released_at: h.released_at.map(ts),
        release_reason: h.release_reason,
    }
}

/// The store's kind of a core hold type.
pub(crate) fn hold_kind(t: HoldType) -> HoldKind {
    match t {
        HoldType::Cordon => HoldKind::Cordon,
        HoldType::Evict => HoldKind::Evict,
    }
}

fn core_hold(h: &HoldRow) -> Hold {
    Hold {
        id: h.id.as_u128(),
        node: h.node.clone(),
        kind: match h.kind {
            HoldKind::Cordon => HoldType::Cordon,
            HoldKind::Evict => HoldType::Evict,
        },
        admin: (h.source == HoldSource::Admin).then(|| h.created_by.clone()),
        state: match h.state {
            HoldStatus::Active => HoldState::Active,
            HoldStatus::Deferred => HoldState::Deferred,
            HoldStatus::Released => HoldState::Released,
        },
        fingerprint: h.fingerprint.clone(),
        episode: h.episode.clone(),
        release: match h.release_rule {
            ReleaseRule::Admin => Release::Admin,
            ReleaseRule::Auto => Release::Auto,
        },
        created_at: h.created_at,
    }
}

/// The fraction of a pool monitoring may hold: `monitoring.hold_fraction.<pool>`, else
/// `monitoring.hold_fraction`, else 0.20.
pub async fn fraction(st: &Holds, pool: &str) -> Result<f64, ApiError> {
    use requests::HOLD_FRACTION_KEY;
    for key in [
        format!("{HOLD_FRACTION_KEY}.{pool}"),
        HOLD_FRACTION_KEY.into(),
    ] {
        if let Some(v) = st.store.setting(&key).await? {
            if let Ok(f) = v.parse::<f64>() {
                return Ok(f);
            }
        }
    }
    Ok(0.2)
}

/// The pool's nodes, and its unreleased holds.
async fn pool_state(st: &Holds, pool: &str) -> Result<(PoolView, Vec<Hold>), ApiError> {
    let nodes = st.store.nodes().await?;
    let names: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| n.pool == pool)
        .map(|n| n.name.as_str())
        .collect();
    let holds: Vec<Hold> = st
        .store
        .holds(None, false)
        .await?
        .iter()
        .filter(|h| names.contains(h.node.as_str()))
        .map(core_hold)
        .collect();
    Ok((
        PoolView {
            nodes: names.len() as u32,
            held: holds::held_nodes(&holds),
            fraction: fraction(st, pool).await?,
        },
        holds,
    ))
}

/// Applies deferred holds of a pool while its cap allows. The caller holds the decision lock,
/// as for every hold decision: a promotion read outside it could take the pool's last slot
/// under the cap while an alert's decision, reading the same count, takes it too.
pub(crate) async fn promote_locked(st: &Holds, pool: &str) -> Result<usize, ApiError> {
    let n = st
        .until_applied(|_| async move {
            let (view, holds) = pool_state(st, pool).await?;
            let changes: Vec<HoldChange> = holds::promotions(&holds, &view)
                .iter()
                .map(|id| HoldChange::Activate {
                    id: Uuid::from_u128(*id),
                })
                .collect();
            let n = changes.len();
            Ok((changes, n))
        })
        .await?;
    if n > 0 {
        st.wake_controller();
    }
    Ok(n)
}

/// Promotes in every pool (room frees when holds are released or nodes join), under the
/// decision lock.
pub async fn promote_all(st: &Holds) -> Result<(), ApiError> {
    let _guard = st.decide().await;
    // Only a pool with a deferred hold has anything to promote: a join (thousands of them
    // when a fleet starts) mostly finds none, and reads no pool's nodes.
    let deferred: BTreeSet<String> = st
        .store
        .holds(None, false)
        .await?
        .into_iter()
        .filter(|h| h.state == HoldStatus::Deferred)
        .map(|h| h.pool)
        .collect();
    for p in deferred {
        promote_locked(st, &p).await?;
    }
    Ok(())
}

#[derive(Debug, PartialEq)]
pub enum Applied {
    Placed(HoldState),
    Released,
    AwaitingAdmin,
    Unchanged,
}

/// Decides and applies a post's alert entries, in order, as one transaction. Idempotent.
/// The state is read once and updated in memory as each entry is decided, so a post of a
/// thousand alerts costs a few queries, not thousands.
pub async fn apply_alerts(st: &Holds, entries: &[AlertEntry]) -> Result<Vec<Applied>, ApiError> {
    if entries.is_empty() {
        return Ok(vec![]);
    }
    let _guard = st.decide().await;
    let out = st
        .until_applied(|now| decide_alerts(st, entries, now))
        .await?;
    if out.iter().any(|a| *a != Applied::Unchanged) {
        st.wake_controller();
    }
    Ok(out)
}

/// `apply_alerts`' decision on the holds as they are now: the changes and what each entry
/// came to.
async fn decide_alerts(
    st: &Holds,
    entries: &[AlertEntry],
    now: i64,
) -> Result<(Vec<HoldChange>, Vec<Applied>), ApiError> {
    let nodes = st.store.nodes().await?;
    let pool_of: BTreeMap<&str, &str> = nodes
        .iter()
        .map(|n| (n.name.as_str(), n.pool.as_str()))
        .collect();
    let mut sizes: BTreeMap<&str, u32> = BTreeMap::new();
    for n in &nodes {
        *sizes.entry(n.pool.as_str()).or_default() += 1;
    }
    let mut fractions: BTreeMap<&str, f64> = BTreeMap::new();
    for p in sizes.keys() {
        fractions.insert(p, fraction(st, p).await?);
    }
    let mut holds: Vec<Hold> = st
        .store
        .holds(None, false)
        .await?
        .iter()
        .map(core_hold)
        .collect();
    let fingerprints: Vec<String> = entries
        .iter()
        .map(|e| e.alert.fingerprint.clone())
        .collect();
    let mut ended = st.store.ended_episodes(&fingerprints).await?;
    let mut changes: Vec<HoldChange> = vec![];
    let mut out = Vec::with_capacity(entries.len());
    let mut released_pools: BTreeSet<String> = BTreeSet::new();
    for e in entries {
        let a = &e.alert;
        let Some(pool) = pool_of.get(a.node.as_str()).copied() else {
            out.push(Applied::Unchanged);
            continue;
        };
        let view = PoolView {
            nodes: sizes.get(pool).copied().unwrap_or(0),
            held: holds::held_nodes(
                holds
                    .iter()
                    .filter(|h| pool_of.get(h.node.as_str()) == Some(&pool)),
            ),
            fraction: fractions.get(pool).copied().unwrap_or(0.2),
        };
        let on_node: Vec<Hold> = holds.iter().filter(|h| h.node == a.node).cloned().collect();
        let episode = (a.fingerprint.clone(), a.starts_at.clone());
        let end_episode = |changes: &mut Vec<HoldChange>| {
            changes.push(HoldChange::EndEpisode {
                fingerprint: a.fingerprint.clone(),
                episode: a.starts_at.clone(),
                by: "monitoring".into(),
            })
        };
        match holds::decide(a, &on_node, ended.contains(&episode), &view) {
            Decision::Nothing { .. } => {
                if !a.firing {
                    end_episode(&mut changes);
                    ended.insert(episode);
                }
                out.push(Applied::Unchanged);
            }
            Decision::Place { state } => {
                let row = HoldRow {
                    id: Uuid::new_v4(),
                    node: a.node.clone(),
                    pool: pool.to_string(),
                    kind: hold_kind(a.kind),
                    source: HoldSource::Monitoring,
                    state: if state == HoldState::Active {
                        HoldStatus::Active
                    } else {
                        HoldStatus::Deferred
                    },
                    alertname: Some(e.alertname.clone()),
                    fingerprint: Some(a.fingerprint.clone()),
                    episode: Some(a.starts_at.clone()),
                    release_rule: if a.release == Release::Admin {
                        ReleaseRule::Admin
                    } else {
                        ReleaseRule::Auto
                    },
                    reason: e.summary.clone(),
                    created_by: "monitoring".into(),
                    created_at: now,
                    activated_at: None,
                    alert_resolved_at: None,
                    released_by: None,
                    released_at: None,
                    release_reason: None,
                };
                holds.push(core_hold(&row));
                changes.push(HoldChange::Place(Box::new(row)));
                if state == HoldState::Deferred {
                    changes.push(HoldChange::Event(NewEvent {
                        workflow_id: None,
                        node: Some(a.node.clone()),
                        task: None,
                        kind: "hold.deferred".into(),
                        message: format!(
                            "{} ({}) deferred: monitoring already holds {} of {} node(s) in pool {pool} (cap {})",
                            e.alertname,
                            a.kind.as_str(),
                            view.held.len(),
                            view.nodes,
                            view.cap()
                        ),
                    }));
                }
                out.push(Applied::Placed(state));
            }
            Decision::Release { holds: ids } => {
                for id in &ids {
                    changes.push(HoldChange::Release {
                        id: Uuid::from_u128(*id),
                        by: "monitoring".into(),
                        reason: format!("{} resolved", e.alertname),
                    });
                }
                holds.retain(|h| !ids.contains(&h.id));
                end_episode(&mut changes);
                ended.insert(episode);
                released_pools.insert(pool.to_string());
                out.push(Applied::Released);
            }
            Decision::AwaitAdmin { holds: ids } => {
                for id in ids {
                    changes.push(HoldChange::AlertResolved {
                        id: Uuid::from_u128(id),
                    });
                }
                end_episode(&mut changes);
                ended.insert(episode);
                out.push(Applied::AwaitingAdmin);
            }
        }
    }
    // Room freed by releases goes to deferred holds whose alerts still fire.
    for pool in &released_pools {
        let in_pool: Vec<Hold> = holds
            .iter()
            .filter(|h| pool_of.get(h.node.as_str()).copied() == Some(pool.as_str()))
            .cloned()
            .collect();
        let view = PoolView {
            nodes: sizes.get(pool.as_str()).copied().unwrap_or(0),
            held: holds::held_nodes(&in_pool),
            fraction: fractions.get(pool.as_str()).copied().unwrap_or(0.2),
        };
        for id in holds::promotions(&in_pool, &view) {
            changes.push(HoldChange::Activate {
                id: Uuid::from_u128(id),
            });
        }
    }
    Ok((changes, out))
}

/// Active holds by node, for the scheduler's reasons and the eviction pass.
pub async fn active_by_node(store: &dyn Store) -> Result<BTreeMap<String, Vec<HoldRow>>, ApiError> {
    let mut m: BTreeMap<String, Vec<HoldRow>> = BTreeMap::new();
    for h in store.holds(None, false).await? {
        if h.state == HoldStatus::Active {
            m.entry(h.node.clone()).or_default().push(h);
        }
    }
    Ok(m)
}

/// A short description of a hold for people: "hold 1a2b3c4d by monitoring (DiskFull): ...".
pub fn describe(h: &HoldRow) -> String {
    let who = match (h.source, &h.alertname) {
        (HoldSource::Monitoring, Some(a)) => format!("monitoring ({a})"),
        _ => h.created_by.clone(),
    };
    format!(
        "{} hold {} by {who}: {}",
        h.kind,
        &h.id.to_string()[..8],
        h.reason
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use gantry_store::{
        HoldChange, HoldKind, HoldRow, HoldSource, HoldStatus, NodeRegistration, ReleaseRule,
        SqliteStore, Store,
    };
    use uuid::Uuid;

    use super::{promote_all, Holds};

    fn hold(node: &str, state: HoldStatus) -> HoldRow {
        HoldRow {
            id: Uuid::new_v4(),
            node: node.into(),
            pool: "default".into(),
            kind: HoldKind::Cordon,
            source: HoldSource::Monitoring,
            state,
            alertname: Some("DiskFull".into()),
            fingerprint: Some(format!("fp-{node}")),
            episode: Some("2026-12-02T00:00:00Z".into()),
            release_rule: ReleaseRule::Auto,
            reason: "disk full".into(),
            created_by: "monitoring".into(),
            created_at: 1,
            activated_at: None,
            alert_resolved_at: None,
            released_by: None,
            released_at: None,
            release_reason: None,
        }
    }

    /// A promotion (here an agent's connect; a release's is in its own decision) and an alert's decision race
    /// for a pool's last slot under the cap. The promotion must wait for the decision in
    /// flight and then see the slot taken; read outside the lock, it would take the slot too
    /// and the pool would be held past its cap.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_promotion_waits_for_an_alert_decision_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(&dir.path().join("g.db")).await.unwrap());
        // Five nodes: the default cap of 20 % lets monitoring hold one.
        for i in 0..5 {
            let reg = NodeRegistration {
                name: format!("n{i}"),
                pool: "default".into(),
                capacity: r#"{"cpus":2,"memory_bytes":1073741824}"#.into(),
                version: "test".into(),
                ..Default::default()
            };
            store.register_node(&reg, 1).await.unwrap();
        }
        let st = Arc::new(Holds::new(store.clone(), Arc::default()));
        // n0's hold waits for room.
        let deferred = hold("n0", HoldStatus::Deferred);
        store
            .apply_holds(&[HoldChange::Place(Box::new(deferred.clone()))], 2)
            .await
            .unwrap();

        // An alert's decision is in flight: it holds the lock, has read that nothing is held,
        // and is about to place an active hold on n1.
        let decision = st.decide().await;
        let promoting = tokio::spawn({
            let st = st.clone();
            async move { promote_all(&st).await.unwrap() }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        store
            .apply_holds(
                &[HoldChange::Place(Box::new(hold("n1", HoldStatus::Active)))],
                3,
            )
            .await
            .unwrap();
        drop(decision);

        promoting.await.unwrap();
        let holds = store.holds(None, false).await.unwrap();
        let active: Vec<&str> = holds
            .iter()
            .filter(|h| h.state == HoldStatus::Active)
            .map(|h| h.node.as_str())
            .collect();
        assert_eq!(active, vec!["n1"], "the pool is held within its cap");
        assert_eq!(
            store.hold(deferred.id).await.unwrap().state,
            HoldStatus::Deferred
        );
    }
}
