//! A workflow file compiled into what the controller needs: per job, its graph edges, retry and
//! timeout policy, resources, and the container to run. Stored as JSON with the workflow, so the
//! controller never re-parses YAML and a server upgrade cannot change a running workflow.
//!
//! Pure, as the rest of core: the server compiles at submit and stores the plan; the controller
//! reads it back and builds what each agent is told from it ([`assign`]). The server checks
//! what the file asks for against what Gantry supports first ([`support`]).

use std::collections::BTreeMap;

use gantry_api::agent::{InjectedFile, Probe, ServicePort, TransferSpec};
use serde::{Deserialize, Serialize};

pub mod assign;
pub mod builds;
mod compile;
mod steps;
mod support;
mod view;
mod volumes;

pub use assign::{assignment, endpoint_location, task_label, Placed, Site, EXCLUSIVE};
pub use compile::compile;
pub use support::{layouts, support, Support};
pub use view::job_view_of;
pub use volumes::{volume_dir, PersistentPlan, ResolvedVolume};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkflowPlan {
    pub jobs: Vec<JobPlan>,
    /// Images built by the workflow; each is also a job named `build:NAME`.
    #[serde(default)]
    pub builds: Vec<builds::BuildPlan>,
    /// The persistent volumes, by the workflow's volume name.
    #[serde(default)]
    pub persistent: BTreeMap<String, PersistentPlan>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobPlan {
    pub name: String,
    pub depends_on: Vec<DepPlan>,
    pub task_array: Option<(u32, u32)>,
    pub concurrency: Option<u32>,
    pub attempts: u32,
    pub retry_on_failure: bool,
    pub retry_on_node: bool,
    pub timeout_ms: Option<u64>,
    pub image: String,
    /// `secret://` holding the registry credential.
    #[serde(default)]
    pub image_secret: Option<String>,
    pub argv: Vec<String>,
    pub env: Vec<String>,
    pub cwd: Option<String>,
    /// (path in the container, volume name).
    pub mounts: Vec<(String, String)>,
    pub files: Vec<InjectedFile>,
    pub cores: u32,
    pub memory_bytes: Option<u64>,
    pub devices: BTreeMap<String, u32>,
    pub exclusive: bool,
    /// Set for services.
    #[serde(default)]
    pub service: Option<ServicePlan>,
    /// The `images` recipe this step runs in (`image: {build: NAME}`).
    #[serde(default)]
    pub image_build: Option<String>,
    /// Set for a build task: the recipe it builds.
    #[serde(default)]
    pub build: Option<String>,
    /// Set for a transfer task (`ingress:VOLUME`, `egress:VOLUME`); its `volume` is the
    /// volume's name until the controller places it.
    #[serde(default)]
    pub transfer: Option<TransferSpec>,
    /// Set for a multinode job: its tasks (indexes 0..nodes) are one gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multinode: Option<MultinodePlan>,
    /// The container uses its node's network namespace (`network.host`, and every multinode
    /// member).
    #[serde(default)]
    pub host_network: bool,
    /// All of `resource.annotations`; which keys constrain placement is a cluster setting
    /// (`scheduler.constraint_annotations`), read when the task is placed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The node ports a host-network service listens on: no two such containers on one node
    /// may share one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<u16>,
}

/// A multinode job: `nodes` containers on distinct nodes, started together.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MultinodePlan {
    pub nodes: u32,
    /// `openmpi` (`ompi` too), `mpich` or `generic`; `gasnet` is refused by [`support`].
    pub implementation: String,
    /// Processes per member; `None`: the cores each container gets.
    #[serde(default)]
    pub procs_per_node: Option<u32>,
}

impl JobPlan {
    /// The tasks this step is stored as: `None` for a lone task, else each index (a task-array
    /// member's `FB_TASK_ID`, a multinode member's rank of node).
    pub fn task_indexes(&self) -> Option<std::ops::RangeInclusive<u32>> {
        match (self.task_array, &self.multinode) {
            (Some((start, end)), _) => Some(start..=end),
            (None, Some(m)) => Some(0..=m.nodes.saturating_sub(1)),
            (None, None) => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DepPlan {
    pub name: String,
    /// `status: RUNNING`: a service that is ready, rather than a step that FINISHED.
    pub running: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServicePlan {
    pub persist: bool,
    pub ports: Vec<ServicePort>,
    pub readiness: Option<Probe>,
    pub endpoints: Vec<EndpointPlan>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndpointPlan {
    pub name: String,
    /// The container port its `port-name` names.
    pub port: u16,
    /// `path` or `subdomain`.
    pub kind: String,
    pub scope: gantry_api::EndpointScope,
    /// The persistent endpoint it takes over.
    pub attach: Option<String>,
}

impl WorkflowPlan {
    /// Every `secret://` the plan refers to.
    pub fn secret_refs(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .jobs
            .iter()
            .flat_map(|j| {
                j.image_secret
                    .iter()
                    .cloned()
                    .chain(
                        j.env
                            .iter()
                            .filter_map(|kv| kv.split_once('=').map(|(_, v)| v))
                            .filter(|v| v.starts_with("secret://"))
                            .map(str::to_string),
                    )
                    .chain(
                        j.transfer
                            .iter()
                            .flat_map(|t| t.items.iter().filter_map(|i| i.secret.clone())),
                    )
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    pub fn job(&self, name: &str) -> Option<&JobPlan> {
        self.jobs.iter().find(|j| j.name == name)
    }

    /// Whether any step is a service: then every container of the workflow gets a network on
    /// its node's bridge, so jobs reach services as `<service>.svc`.
    pub fn has_services(&self) -> bool {
        self.jobs.iter().any(|j| j.service.is_some())
    }
}

impl JobPlan {
    /// A step Gantry adds itself (a build, a transfer): one try (it retries inside, as its
    /// policy says), one core, no container of the workflow's.
    pub fn internal(name: String, image: String) -> JobPlan {
        JobPlan {
            name,
            depends_on: vec![],
            task_array: None,
            concurrency: None,
            attempts: 1,
            retry_on_failure: false,
            retry_on_node: true,
            timeout_ms: None,
            image,
            image_secret: None,
            argv: vec![],
            env: vec![],
            cwd: None,
            mounts: vec![],
            files: vec![],
            cores: 1,
            memory_bytes: None,
            devices: Default::default(),
            exclusive: false,
            service: None,
            image_build: None,
            build: None,
            transfer: None,
            multinode: None,
            host_network: false,
            annotations: BTreeMap::new(),
            host_ports: vec![],
        }
    }
}

/// File contents as the agent's files carry them (a step's files, a transfer's script).
pub(crate) fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}
