//! What each node's container firewall is told (the agent's `net::firewall` enforces it): a
//! workflow's containers reach each other, on one node or several, and no other workflow's;
//! whether they reach the outside world is the cluster's `network.egress` setting.
//!
//! A new container learns its workflow's running containers from its assignment
//! (`NetworkSpec.peers`); every node that runs some of a workflow's containers is then sent
//! `Peers` whenever the addresses of the workflow's containers on other nodes change. The
//! firewall checks both ends, so a stale list only ever refuses, never grants: an address
//! that passed to another workflow is in neither of its two nodes' lists for the other.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use gantry_api::agent::Assignment;
use gantry_store::{ActiveWorkflow, Store};
use uuid::Uuid;

use crate::link::AgentLink;
use crate::plan::WorkflowPlan;

pub use gantry_intake::requests::EGRESS_KEY;

/// The addresses of a workflow's running containers.
pub fn addresses(aw: &ActiveWorkflow) -> Vec<String> {
    let mut v: Vec<String> = aw.live.iter().filter_map(|a| a.address.clone()).collect();
    v.sort();
    v.dedup();
    v
}

/// Tells every node what it should know of the workflows it runs containers of, where that
/// changed since its connection began (a reconnecting agent hears everything again).
pub fn sync(link: &dyn AgentLink, active: &[ActiveWorkflow], plans: &[Arc<WorkflowPlan>]) {
    let mut want: HashMap<String, HashMap<Uuid, Vec<String>>> = HashMap::new();
    for (aw, plan) in active.iter().zip(plans) {
        if aw.live.is_empty() || !plan.has_services() {
            continue;
        }
        let nodes: BTreeSet<&str> = aw.live.iter().map(|a| a.node.as_str()).collect();
        for node in nodes {
            let mut elsewhere: Vec<String> = aw
                .live
                .iter()
                .filter(|a| a.node != node)
                .filter_map(|a| a.address.clone())
                .collect();
            elsewhere.sort();
            elsewhere.dedup();
            want.entry(node.to_owned())
                .or_default()
                .insert(aw.workflow.id, elsewhere);
        }
    }
    link.sync_peers(&want);
}

/// Fills in the egress decision as an assignment is sent, so a changed setting applies to
/// every container started after it. Unreadable means denied.
pub async fn fill(store: &dyn Store, asg: &mut Assignment) {
    let Some(net) = asg.network.as_mut() else {
        return;
    };
    net.egress = match store.setting(EGRESS_KEY).await {
        Ok(v) => v.as_deref().unwrap_or("allow") == "allow",
        Err(e) => {
            tracing::warn!("reading {EGRESS_KEY}: {e}");
            false
        }
    };
}
