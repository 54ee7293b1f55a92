//! The cluster settings placement reads: which annotations constrain, and which pools take no
//! host-network containers. Read once per use from the store, so a change applies to the next
//! placement without a restart.

use std::collections::BTreeSet;

use gantry_core::scheduler::{Res, TaskRequest};
use gantry_intake::requests::{self, CONSTRAINT_ANNOTATIONS_KEY, HOST_NETWORK_FORBIDDEN_KEY};

use gantry_store::Store;

#[derive(Debug, Clone)]
pub struct PlacementSettings {
    /// `resource.annotations` keys a node's labels must match.
    pub constraint_keys: BTreeSet<String>,
    forbidden_pools: Option<String>,
}

impl PlacementSettings {
    pub async fn read(store: &dyn Store) -> Result<PlacementSettings, gantry_store::StoreError> {
        let keys = store.setting(CONSTRAINT_ANNOTATIONS_KEY).await?;
        Ok(PlacementSettings {
            constraint_keys: requests::constraint_keys(keys.as_deref()),
            forbidden_pools: store.setting(HOST_NETWORK_FORBIDDEN_KEY).await?,
        })
    }

    /// Whether `pool`'s nodes may run a host-network container.
    pub fn host_network_allowed(&self, pool: &str) -> bool {
        requests::host_network_allowed(self.forbidden_pools.as_deref(), pool)
    }

    /// The annotations of a step that constrain its placement here.
    pub fn constraints<'a>(
        &self,
        annotations: &'a std::collections::BTreeMap<String, String>,
    ) -> impl Iterator<Item = (&'a String, &'a String)> + use<'a, '_> {
        annotations
            .iter()
            .filter(|(k, _)| self.constraint_keys.contains(*k))
    }
}

/// The pools that have nodes now.
pub async fn pools(store: &dyn Store) -> Result<BTreeSet<String>, gantry_store::StoreError> {
    Ok(store.nodes().await?.into_iter().map(|n| n.pool).collect())
}

/// What the scheduler is asked for one of `jp`'s containers (each member of a gang).
pub fn request_of<K>(
    key: K,
    plan: &crate::plan::WorkflowPlan,
    jp: &crate::plan::JobPlan,
    members: u32,
    settings: &PlacementSettings,
) -> TaskRequest<K> {
    // A volume on a storage only one pool sees holds its jobs to that pool.
    let pool = jp
        .mounts
        .iter()
        .find_map(|(_, vol)| plan.persistent.get(vol)?.resolved.as_ref()?.pool.clone());
    TaskRequest {
        exclusive: jp.exclusive,
        members,
        labels: settings
            .constraints(&jp.annotations)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        host_ports: jp.host_ports.clone(),
        host_network: jp.host_network,
        ..TaskRequest::new(
            key,
            pool,
            Res {
                millicpus: jp.cores as u64 * 1000,
                memory_bytes: jp.memory_bytes.unwrap_or(0),
                devices: jp.devices.clone(),
            },
        )
    }
}

/// Why a step could never start on the cluster's nodes as they are, were every one of them
/// empty and ready: the scheduler's own reason when it is larger than every node (or every
/// pool's nodes, for a gang) that could take it, or there are none; `None` when it could
/// start. Nodes may join and settings change, so this is a warning at submit, never a refusal.
pub fn never_fits(
    nodes: &[gantry_store::NodeRow],
    plan: &crate::plan::WorkflowPlan,
    jp: &crate::plan::JobPlan,
    settings: &PlacementSettings,
) -> Option<String> {
    use gantry_core::scheduler::{schedule, NodeId, NodeView, UnplacedKind};
    let views: Vec<NodeView> = nodes
        .iter()
        .map(|n| NodeView {
            labels: n.labels.clone(),
            host_network: settings.host_network_allowed(&n.pool),
            ..NodeView::new(
                NodeId(n.name.clone()),
                n.pool.clone(),
                Res::from(&serde_json::from_str(&n.capacity).unwrap_or_default()),
            )
        })
        .collect();
    let request = [request_of(
        (),
        plan,
        jp,
        jp.multinode.as_ref().map_or(1, |m| m.nodes),
        settings,
    )];
    schedule(&views, &request)
        .unplaced
        .into_iter()
        .find(|u| matches!(u.kind, UnplacedKind::TooLarge | UnplacedKind::NoNodes))
        .map(|u| u.reason)
}

/// [`never_fits`] for each step of a plan, as submit warnings.
pub fn fit_warnings(
    nodes: &[gantry_store::NodeRow],
    plan: &crate::plan::WorkflowPlan,
    settings: &PlacementSettings,
) -> Vec<String> {
    plan.jobs
        .iter()
        // Builds and transfers are Gantry's own one-core steps.
        .filter(|j| j.build.is_none() && j.transfer.is_none())
        .filter_map(|j| {
            let why = never_fits(nodes, plan, j, settings)?;
            let kind = if j.service.is_some() {
                "services"
            } else {
                "jobs"
            };
            Some(format!(
                "{kind}.{}: cannot start on any of today's nodes ({why}); it waits until one \
                 that can joins",
                j.name
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{JobPlan, MultinodePlan};

    fn node(name: &str, pool: &str, cpus: u32, labels: &[(&str, &str)]) -> gantry_store::NodeRow {
        gantry_store::NodeRow {
            id: uuid::Uuid::new_v4(),
            name: name.into(),
            pool: pool.into(),
            capacity: format!(r#"{{"cpus":{cpus},"memory_bytes":8589934592,"devices":{{}}}}"#),
            state: gantry_api::NodeState::Ready,
            connected: true,
            last_seen: None,
            version: None,
            metrics_addr: None,
            node_exporter: None,
            seq: 1,
            address: None,
            exec_addr: None,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn settings(forbidden: Option<&str>) -> PlacementSettings {
        PlacementSettings {
            constraint_keys: requests::constraint_keys(None),
            forbidden_pools: forbidden.map(str::to_string),
        }
    }

    fn job(cores: u32, nodes: Option<u32>) -> JobPlan {
        JobPlan {
            cores,
            multinode: nodes.map(|nodes| MultinodePlan {
                nodes,
                implementation: "openmpi".into(),
                procs_per_node: None,
            }),
            host_network: nodes.is_some(),
            ..JobPlan::internal("mpi".into(), "docker://alpine".into())
        }
    }

    #[test]
    fn a_step_that_can_never_start_today_says_why() {
        let nodes = [
            node("a", "cpu", 4, &[("nvidia.com/gpu.model", "T4")]),
            node("b", "cpu", 4, &[]),
            node("c", "login", 8, &[]),
        ];
        let s = settings(None);
        let plan = crate::plan::WorkflowPlan {
            jobs: vec![],
            builds: vec![],
            persistent: Default::default(),
        };
        let say = |j: &JobPlan, s: &PlacementSettings| never_fits(&nodes, &plan, j, s);
        assert_eq!(say(&job(4, None), &s), None);
        assert_eq!(
            say(&job(16, None), &s).as_deref(),
            Some("never fits: needs more than any node has: 16 cores (most: 8)")
        );
        // Three members of 4 cores need three such nodes of one pool.
        assert_eq!(
            say(&job(4, Some(3)), &s).as_deref(),
            Some("never fits: needs 3 nodes with 4 cores each of one pool, and no pool has more than 2 that could ever take one (pool \"cpu\": 2 of its 2 nodes)")
        );
        assert_eq!(say(&job(4, Some(2)), &s), None, "a and b, one pool");
        let mut t4 = job(1, None);
        t4.annotations
            .insert("nvidia.com/gpu.model".into(), "T4".into());
        assert_eq!(say(&t4, &s), None);
        t4.annotations
            .insert("nvidia.com/gpu.model".into(), "NVIDIA L4".into());
        assert_eq!(
            say(&t4, &s).as_deref(),
            Some("never fits: no node has label nvidia.com/gpu.model=NVIDIA L4")
        );
        // A key the cluster does not place by constrains nothing.
        let mut team = job(1, None);
        team.annotations.insert("team".into(), "x".into());
        assert_eq!(say(&team, &s), None);
        // Host networking forbidden where the room is, then everywhere.
        assert_eq!(say(&job(8, Some(1)), &s), None);
        assert_eq!(
            say(&job(8, Some(1)), &settings(Some("login"))).as_deref(),
            Some("never fits: needs more than any node that allows host networking has: 8 cores (most: 4)")
        );
        assert_eq!(
            say(&job(1, Some(1)), &settings(Some("cpu,login"))).as_deref(),
            Some("never fits: no pool allows host networking")
        );
        assert_eq!(
            never_fits(&[], &plan, &job(1, None), &s).as_deref(),
            Some("never fits: there are no nodes")
        );
    }
}
