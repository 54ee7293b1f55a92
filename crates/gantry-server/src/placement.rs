//! The cluster settings placement reads: which annotations constrain, and which pools take no
//! host-network containers. Read once per use from the store, so a change applies to the next
//! placement without a restart.

use std::collections::BTreeSet;

use gantry_intake::requests::{self, CONSTRAINT_ANNOTATIONS_KEY, HOST_NETWORK_FORBIDDEN_KEY};

use crate::state::AppState;

#[derive(Debug, Clone)]
pub struct PlacementSettings {
    /// `resource.annotations` keys a node's labels must match.
    pub constraint_keys: BTreeSet<String>,
    forbidden_pools: Option<String>,
}

impl PlacementSettings {
    pub async fn read(st: &AppState) -> Result<PlacementSettings, gantry_store::StoreError> {
        let keys = st.store.setting(CONSTRAINT_ANNOTATIONS_KEY).await?;
        Ok(PlacementSettings {
            constraint_keys: requests::constraint_keys(keys.as_deref()),
            forbidden_pools: st.store.setting(HOST_NETWORK_FORBIDDEN_KEY).await?,
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
pub async fn pools(st: &AppState) -> Result<BTreeSet<String>, gantry_store::StoreError> {
    Ok(st
        .store
        .nodes()
        .await?
        .into_iter()
        .map(|n| n.pool)
        .collect())
}

/// Why a step could never start on the cluster's nodes as they are, were every one of them
/// empty and ready: `None` when it could. Nodes may join and settings change, so this is a
/// warning at submit, never a refusal; the scheduler's own reasons say the rest.
pub fn never_fits(
    nodes: &[gantry_store::NodeRow],
    jp: &crate::plan::JobPlan,
    settings: &PlacementSettings,
) -> Option<String> {
    use gantry_core::scheduler::{schedule, NodeId, NodeView, Res, TaskRequest, UnplacedKind};
    if nodes.is_empty() {
        return Some("the cluster has no nodes".into());
    }
    let mut fit: Vec<&gantry_store::NodeRow> = nodes.iter().collect();
    if jp.host_network {
        fit.retain(|n| settings.host_network_allowed(&n.pool));
        if fit.is_empty() {
            return Some(format!(
                "host networking is forbidden in every pool with nodes ({HOST_NETWORK_FORBIDDEN_KEY})"
            ));
        }
    }
    for (k, v) in settings.constraints(&jp.annotations) {
        fit.retain(|n| n.labels.get(k) == Some(v));
        if fit.is_empty() {
            return Some(format!(
                "no node has the label {k}={v} (resource.annotations; see `gantry node show`)"
            ));
        }
    }
    let view = |n: &gantry_store::NodeRow| {
        NodeView::new(
            NodeId(n.name.clone()),
            n.pool.clone(),
            Res::from(&serde_json::from_str(&n.capacity).unwrap_or_default()),
        )
    };
    let request = [TaskRequest {
        exclusive: jp.exclusive,
        ..TaskRequest::new(
            (),
            None,
            Res {
                millicpus: u64::from(jp.cores) * 1000,
                memory_bytes: jp.memory_bytes.unwrap_or(0),
                devices: jp.devices.clone(),
            },
        )
    }];
    let big_enough = fit
        .iter()
        .filter(|n| schedule(&[view(n)], &request).unplaced.is_empty())
        .count();
    if big_enough == 0 {
        let views: Vec<NodeView> = fit.iter().map(|n| view(n)).collect();
        return schedule(&views, &request)
            .unplaced
            .into_iter()
            .find(|u| matches!(u.kind, UnplacedKind::TooLarge | UnplacedKind::NoNodes))
            .map(|u| u.reason);
    }
    let nodes_needed = jp.multinode.as_ref().map_or(1, |m| m.nodes) as usize;
    (big_enough < nodes_needed).then(|| {
        format!(
            "needs {nodes_needed} nodes that each fit one member ({} cores{}); {big_enough} of the \
             cluster's {} nodes do",
            jp.cores,
            jp.memory_bytes
                .map(|m| format!(", {}", gantry_api::v1::iec_bytes(m)))
                .unwrap_or_default(),
            nodes.len()
        )
    })
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
            let why = never_fits(nodes, j, settings)?;
            let kind = if j.service.is_some() {
                "services"
            } else {
                "jobs"
            };
            Some(format!(
                "{kind}.{}: cannot start on any of today's nodes: {why}; it waits until one that \
                 can joins",
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
            state: "READY".into(),
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
            node("b", "cpu", 2, &[]),
            node("c", "login", 8, &[]),
        ];
        let s = settings(None);
        assert_eq!(never_fits(&nodes, &job(4, None), &s), None);
        let big = never_fits(&nodes, &job(16, None), &s).unwrap();
        assert!(big.contains("16"), "{big}");
        // Two nodes have 4 cores; a gang of 3 such members cannot start.
        assert_eq!(never_fits(&nodes, &job(4, Some(2)), &s), None);
        let gang = never_fits(&nodes, &job(4, Some(3)), &s).unwrap();
        assert_eq!(
            gang,
            "needs 3 nodes that each fit one member (4 cores); 2 of the cluster's 3 nodes do"
        );
        let mut t4 = job(1, None);
        t4.annotations
            .insert("nvidia.com/gpu.model".into(), "T4".into());
        assert_eq!(never_fits(&nodes, &t4, &s), None);
        t4.annotations
            .insert("nvidia.com/gpu.model".into(), "NVIDIA L4".into());
        assert_eq!(
            never_fits(&nodes, &t4, &s).unwrap(),
            "no node has the label nvidia.com/gpu.model=NVIDIA L4 (resource.annotations; see `gantry node show`)"
        );
        // A key the cluster does not place by constrains nothing.
        let mut team = job(1, None);
        team.annotations.insert("team".into(), "x".into());
        assert_eq!(never_fits(&nodes, &team, &s), None);
        // Host networking forbidden where the room is.
        let forbid = settings(Some("login"));
        assert_eq!(never_fits(&nodes, &job(8, Some(1)), &s), None);
        assert!(never_fits(&nodes, &job(8, Some(1)), &forbid).is_some());
        let all = settings(Some("cpu,login"));
        assert!(never_fits(&nodes, &job(1, Some(1)), &all)
            .unwrap()
            .starts_with("host networking is forbidden in every pool"));
        assert_eq!(
            never_fits(&[], &job(1, None), &s).as_deref(),
            Some("the cluster has no nodes")
        );
    }
}
