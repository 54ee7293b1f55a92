//! Hold policy: what an alert, a resolve or an administrator's action does to a node's holds,
//! and how many nodes of a pool monitoring may hold at once. Pure: the server gathers the
//! state, calls these functions, and stores what they return in one transaction.
//!
//! Rules (see DESIGN.md):
//! - An alert *episode* is (fingerprint, startsAt). Each is acted on once: duplicates, repeats
//!   and out-of-order posts change nothing twice, and a firing post for an episode that has
//!   already resolved (or that an administrator released) is ignored.
//! - Monitoring holds at most `max(1, floor(fraction × nodes in pool))` nodes of a pool. Every
//!   node with an active hold (from anyone) counts. A new hold past the cap is *deferred*:
//!   visible, but not applied until room frees while its alert still fires. A node already
//!   held takes more holds without counting twice.
//! - A resolve releases its episode's monitoring hold when the rule says `auto`; with `admin`
//!   the hold stays until an administrator releases it. A deferred hold is dropped on resolve
//!   either way: it never took effect. Monitoring never releases an administrator's hold.

use std::collections::BTreeSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HoldType {
    Cordon,
    Evict,
}

impl HoldType {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldType::Cordon => "cordon",
            HoldType::Evict => "evict",
        }
    }

    pub fn parse(s: &str) -> Option<HoldType> {
        match s {
            "cordon" => Some(HoldType::Cordon),
            "evict" => Some(HoldType::Evict),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    Auto,
    Admin,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldState {
    Active,
    Deferred,
    Released,
}

/// A hold as the policy sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    pub id: u128,
    pub node: String,
    pub kind: HoldType,
    /// `None`: monitoring; `Some(name)`: an administrator.
    pub admin: Option<String>,
    pub state: HoldState,
    /// Monitoring holds: the alert's fingerprint and episode start.
    pub fingerprint: Option<String>,
    pub episode: Option<String>,
    pub release: Release,
    /// Order of creation, for promoting deferred holds fairly.
    pub created_at: i64,
}

/// One entry of an Alertmanager post, already checked for the labels Gantry needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub fingerprint: String,
    pub starts_at: String,
    pub firing: bool,
    pub node: String,
    pub kind: HoldType,
    pub release: Release,
}

/// What is true of a pool when an alert is decided.
#[derive(Debug, Clone, Default)]
pub struct PoolView {
    pub nodes: u32,
    /// Nodes of the pool with at least one active hold.
    pub held: BTreeSet<String>,
    /// Fraction of the pool monitoring may hold.
    pub fraction: f64,
}

impl PoolView {
    pub fn cap(&self) -> u32 {
        cap(self.nodes, self.fraction)
    }
}

pub fn cap(nodes: u32, fraction: f64) -> u32 {
    let f = if fraction.is_finite() {
        fraction.clamp(0.0, 1.0)
    } else {
        0.2
    };
    ((f * nodes as f64).floor() as u32).max(1)
}

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Nothing to do (a duplicate, a repeat, or a post about a finished episode).
    Nothing { why: &'static str },
    /// Place a hold, active or deferred.
    Place { state: HoldState },
    /// Release these holds (monitoring's own, for this alert).
    Release { holds: Vec<u128> },
    /// The alert resolved but the rule wants an administrator to release the node.
    AwaitAdmin { holds: Vec<u128> },
}

/// Decides one alert entry. `holds` are every hold of the alert's node; `finished` says whether
/// this episode already ended (resolved, or released by an administrator).
pub fn decide(alert: &Alert, holds: &[Hold], finished: bool, pool: &PoolView) -> Decision {
    let mine: Vec<&Hold> = holds
        .iter()
        .filter(|h| {
            h.admin.is_none() && h.fingerprint.as_deref() == Some(alert.fingerprint.as_str())
        })
        .filter(|h| h.state != HoldState::Released)
        .collect();
    if alert.firing {
        if finished {
            return Decision::Nothing {
                why: "this alert episode already ended",
            };
        }
        if !mine.is_empty() {
            return Decision::Nothing {
                why: "the node already carries this alert's hold",
            };
        }
        let node_held = pool.held.contains(&alert.node);
        let state = if node_held || (pool.held.len() as u32) < pool.cap() {
            HoldState::Active
        } else {
            HoldState::Deferred
        };
        return Decision::Place { state };
    }
    // Resolved: only this episode's holds. An older episode's hold that an admin must release
    // stays; a newer episode's is not ours to touch.
    let episode: Vec<&Hold> = mine
        .into_iter()
        .filter(|h| h.episode.as_deref() == Some(alert.starts_at.as_str()))
        .collect();
    if episode.is_empty() {
        return Decision::Nothing {
            why: "no hold of this alert episode is in place",
        };
    }
    let (deferred, active): (Vec<&Hold>, Vec<&Hold>) = episode
        .into_iter()
        .partition(|h| h.state == HoldState::Deferred);
    let mut release: Vec<u128> = deferred.iter().map(|h| h.id).collect();
    let mut wait = vec![];
    for h in active {
        match h.release {
            Release::Auto => release.push(h.id),
            Release::Admin => wait.push(h.id),
        }
    }
    if !release.is_empty() {
        Decision::Release { holds: release }
    } else {
        Decision::AwaitAdmin { holds: wait }
    }
}

/// Deferred holds to apply now that room may have freed, oldest first, while the cap allows.
/// `holds` are all unreleased holds of the pool's nodes.
pub fn promotions(holds: &[Hold], pool: &PoolView) -> Vec<u128> {
    let mut held = pool.held.clone();
    let mut deferred: Vec<&Hold> = holds
        .iter()
        .filter(|h| h.state == HoldState::Deferred)
        .collect();
    deferred.sort_by_key(|h| (h.created_at, h.id));
    let mut out = vec![];
    for h in deferred {
        if held.contains(&h.node) || (held.len() as u32) < pool.cap() {
            held.insert(h.node.clone());
            out.push(h.id);
        }
    }
    out
}

/// A node's state from its active holds: any evict makes it EVICTING, else any cordon
/// CORDONED, else READY. (DOWN comes from heartbeats, not holds.)
pub fn node_state(holds: &[Hold]) -> Option<HoldType> {
    holds
        .iter()
        .filter(|h| h.state == HoldState::Active)
        .map(|h| h.kind)
        .max()
}

/// Nodes with at least one active hold, by pool.
pub fn held_nodes<'a>(holds: impl IntoIterator<Item = &'a Hold>) -> BTreeSet<String> {
    holds
        .into_iter()
        .filter(|h| h.state == HoldState::Active)
        .map(|h| h.node.clone())
        .collect()
}

#[cfg(test)]
mod tests;
