//! The typed workflow, after parsing, validation and the merge of `defaults`.

use crate::diag::Pos;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// A whole workflow file. Every map is keyed by the name the file gives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    /// Always `v4` once parsed.
    pub version: String,
    /// `v1` when the file was written in v1 and read as v4 (the CLI and
    /// the server warn about it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgraded_from: Option<String>,
    pub annotations: BTreeMap<String, String>,
    /// Workflow-wide `preemptible`; jobs and services may override it.
    pub preemptible: Option<bool>,
    /// Top-level `files`: name -> inline content.
    pub files: BTreeMap<String, String>,
    pub volumes: BTreeMap<String, Volume>,
    /// Jobs with `defaults` (`defaults.env`/`mounts`/`resource` and
    /// `defaults.job`) already merged in.
    pub jobs: BTreeMap<String, Job>,
    /// Services with `defaults` (`defaults.env`/`mounts`/`resource` and
    /// `defaults.service`) already merged in.
    pub services: BTreeMap<String, Service>,
    /// Gantry addition: images built inside the workflow.
    pub images: BTreeMap<String, ImageRecipe>,
}

/// Where a step's container image comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ImageRef {
    /// `image: {uri: docker://...}` (also `oras://`, and Gantry's `oci://PATH`
    /// for a local OCI layout).
    Uri {
        uri: String,
        /// `secret://...` holding registry credentials.
        secret: Option<String>,
        /// `secrets`: key -> value or `secret://` template.
        secrets: BTreeMap<String, String>,
        /// `decryption-secret`: a `secret://` for encrypted images.
        decryption_secret: Option<String>,
        cache: Option<CachePolicy>,
        /// `cache-ttl`, in seconds.
        cache_ttl: Option<u64>,
    },
    /// Gantry addition: `image: {build: NAME}` names an `images` entry.
    Build(String),
}

impl ImageRef {
    pub fn uri(&self) -> Option<&str> {
        match self {
            ImageRef::Uri { uri, .. } => Some(uri),
            ImageRef::Build(_) => None,
        }
    }

    pub fn build_name(&self) -> Option<&str> {
        match self {
            ImageRef::Build(name) => Some(name),
            ImageRef::Uri { .. } => None,
        }
    }
}

/// `cache` of a URI: when an ingress or image download is fetched again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CachePolicy {
    Once,
    Changed,
    Never,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub value: EnvValue,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnvValue {
    Plain(String),
    /// The whole `secret://...` URI.
    Secret(String),
}

/// A volume mounted into a container; the container path is the map key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    pub volume: String,
    /// Where the volume name is written.
    pub pos: Pos,
}

/// A value of a step's `files` map (keyed by destination path).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileSource {
    /// `file://NAME`: a top-level `files` entry.
    File(String),
    /// Content written inline (the catalog does this for desktop files).
    Inline(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Affinity {
    Core,
    Socket,
    Numa,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    /// Default 1.
    pub cores: u32,
    pub threads: bool,
    /// Unset means the platform default (`CORE`).
    pub affinity: Option<Affinity>,
    pub sockets: Option<u32>,
}

impl Default for Cpu {
    fn default() -> Cpu {
        Cpu {
            cores: 1,
            threads: false,
            affinity: None,
            sockets: None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// Bytes.
    pub size: Option<u64>,
    /// `size` is per allocated core.
    pub by_core: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    pub cpu: Cpu,
    pub memory: Memory,
    /// Device name (`nvidia.com/gpu`) -> count.
    pub devices: BTreeMap<String, u32>,
    pub exclusive: bool,
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DepStatus {
    /// The dependency has finished successfully.
    Finished,
    /// The dependency (a service) is running and ready.
    Running,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    pub name: String,
    pub status: DepStatus,
    pub description: Option<String>,
    /// Where the dependency's name is written.
    pub pos: Pos,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskArray {
    pub start: u32,
    /// Inclusive.
    pub end: u32,
    pub concurrency: Option<u32>,
}

impl TaskArray {
    /// Number of tasks (`start..=end`).
    pub fn len(&self) -> u64 {
        if self.end < self.start {
            return 0;
        }
        u64::from(self.end - self.start) + 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `FB_TASK_ID` values, in order.
    pub fn ids(&self) -> std::ops::RangeInclusive<u32> {
        self.start..=self.end
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MultinodeImpl {
    /// `openmpi` (or `ompi`).
    OpenMpi,
    Mpich,
    Gasnet,
    Generic,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Multinode {
    pub nodes: u32,
    pub implementation: MultinodeImpl,
    pub procs_per_node: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RetryOn {
    /// The process exited non-zero on its own, or timed out.
    Failure,
    /// Its node was lost, or evicted by a hold.
    Node,
}

/// The most starts of one step a workflow file may ask for (`policy.retry.attempts`). A site
/// may allow fewer (the `retry.max_attempts` setting), never more.
pub const MAX_RETRY_ATTEMPTS: u32 = 100;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retry {
    /// Most starts in all; default 1 (no retry), at most [`MAX_RETRY_ATTEMPTS`].
    pub attempts: u32,
    /// Default `[Failure]`.
    pub on: Vec<RetryOn>,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            attempts: 1,
            on: vec![RetryOn::Failure],
        }
    }
}

/// `policy.restart` of the vendor format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartPolicy {
    OnNodeFault,
    Never,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub timeout_execute: Option<Duration>,
    pub retry: Retry,
    pub restart: Option<RestartPolicy>,
}

/// A job's `network`: the node's own network namespace (`host`), or an isolated one with
/// exposed ports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobNetwork {
    #[serde(default)]
    pub host: bool,
    pub isolated: bool,
    pub expose_tcp: Vec<u16>,
    pub expose_udp: Vec<u16>,
}

/// A batch step: runs to completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// The map key.
    pub name: String,
    /// The optional `name:` inside the job.
    pub display_name: Option<String>,
    pub image: ImageRef,
    pub command: Vec<String>,
    pub script: Option<String>,
    pub args: Vec<String>,
    pub env: Vec<EnvVar>,
    pub cwd: Option<String>,
    /// Container path -> mount.
    pub mounts: BTreeMap<String, Mount>,
    /// Destination path -> source.
    pub files: BTreeMap<String, FileSource>,
    pub resource: Resource,
    pub depends_on: Vec<Dependency>,
    pub task_array: Option<TaskArray>,
    pub multinode: Option<Multinode>,
    pub policy: Policy,
    pub network: Option<JobNetwork>,
    pub preemptible: Option<bool>,
    /// Where the job's name is written.
    pub pos: Pos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PortProtocol {
    Tcp,
    Udp,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Port {
    pub name: String,
    pub port: u16,
    pub protocol: PortProtocol,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndpointProtocol {
    Http,
    Https,
    Grpc,
    Grpcs,
    Tcp,
    Tls,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndpointKind {
    /// `type: path`: `/endpoints/...` on the shared host.
    Path,
    /// `type: subdomain`: its own host name.
    Subdomain,
}

/// Who may call an endpoint or see a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scope {
    User,
    Group,
    Organization,
    Public,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub name: String,
    pub port_name: String,
    /// Default `http`.
    pub protocol: EndpointProtocol,
    /// `type`; default `path`.
    pub kind: EndpointKind,
    /// Default `group`, as in the vendor format.
    pub scope: Scope,
    pub annotations: BTreeMap<String, String>,
    /// Gantry addition: the persistent endpoint this one takes over.
    pub attach: Option<String>,
    pub pos: Pos,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Network {
    pub host: bool,
    pub ports: Vec<Port>,
    pub endpoints: Vec<Endpoint>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HttpScheme {
    Http,
    Https,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpHeader {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProbeKind {
    Exec {
        command: Vec<String>,
    },
    HttpGet {
        /// Default `/`.
        path: String,
        port: u16,
        /// Default HTTP.
        scheme: HttpScheme,
        http_headers: Vec<HttpHeader>,
    },
    TcpSocket {
        port: u16,
    },
    Grpc {
        port: u16,
        service: Option<String>,
    },
}

/// A readiness probe with Kubernetes' timing fields; unset ones take
/// Kubernetes' defaults (0, 10, 1, 1, 3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    pub kind: ProbeKind,
    pub initial_delay_seconds: u32,
    pub period_seconds: u32,
    pub timeout_seconds: u32,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replicas {
    pub min: u32,
    pub max: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoscalerMetrics {
    pub enabled: bool,
    pub path: Option<String>,
    pub port: Option<u16>,
    /// Scrape interval in seconds.
    pub interval: Option<u64>,
    pub includes: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalePolicy {
    /// PromQL; non-zero fires the action.
    pub metrics_query: Option<String>,
    /// Seconds between scaling actions.
    pub cooldown_period: Option<u64>,
    /// Services scaled instead of the owner (scale-up triggers only).
    pub services: Vec<String>,
    /// Seconds a retiring replica keeps serving (scale-down only).
    pub drain_period: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Autoscaler {
    pub replicas: Option<Replicas>,
    pub metrics: Option<AutoscalerMetrics>,
    /// `scale-up.triggers`.
    pub scale_up: Vec<ScalePolicy>,
    pub scale_down: Option<ScalePolicy>,
}

/// A config file rendered from the addresses of other services.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DynamicConfig {
    pub path: String,
    pub services: Vec<String>,
    pub script: String,
}

/// A long-running step: every job field but `task-array`, plus the service
/// fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Service {
    pub name: String,
    pub display_name: Option<String>,
    pub image: ImageRef,
    pub command: Vec<String>,
    pub script: Option<String>,
    pub args: Vec<String>,
    pub env: Vec<EnvVar>,
    pub cwd: Option<String>,
    pub mounts: BTreeMap<String, Mount>,
    pub files: BTreeMap<String, FileSource>,
    pub resource: Resource,
    pub depends_on: Vec<Dependency>,
    pub multinode: Option<Multinode>,
    pub policy: Policy,
    pub preemptible: Option<bool>,
    pub persist: bool,
    pub readiness_probe: Option<Probe>,
    pub network: Network,
    pub autoscaler: Option<Autoscaler>,
    pub dynamic_config: Option<DynamicConfig>,
    pub pos: Pos,
}

/// A URI of a data transfer, with what is needed to reach it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UriSpec {
    pub uri: String,
    pub secret: Option<String>,
    pub secrets: BTreeMap<String, String>,
    pub decryption_secret: Option<String>,
    pub cache: Option<CachePolicy>,
    pub cache_ttl: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    pub source: UriSpec,
    pub destination: UriSpec,
    pub policy: Option<Policy>,
    pub pos: Pos,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VolumeKind {
    /// Made for the workflow, shared by its steps, removed at its end.
    Ephemeral,
    /// Outlives the workflow. `name` is `default` for a legacy
    /// `volume://SCOPE/persistent` reference without a name.
    Persistent { scope: Scope, name: String },
    /// Deprecated `type: HOST` with `path`.
    Host { path: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub name: String,
    pub kind: VolumeKind,
    /// A storage provisioner named by `use:` (or the class of a legacy
    /// reference) other than `ephemeral` and `persistent`.
    pub provisioner: Option<String>,
    /// Requested capacity in bytes.
    pub size: Option<u64>,
    pub annotations: BTreeMap<String, String>,
    /// A persistent volume named by a legacy `reference:`, made on its first use as Fuzzball
    /// v3 did; one named by v4 `use:`/`name:` must exist already.
    pub made_on_use: bool,
    pub ingress: Vec<Transfer>,
    pub egress: Vec<Transfer>,
    pub pos: Pos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ImageScope {
    /// Only the submitter reuses the cached image.
    User,
    /// The submitter's group reuses it.
    Group,
}

/// Gantry addition: an image built on a compute node before the steps that
/// use it start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecipe {
    pub name: String,
    /// `docker://...` or `oci://PATH`.
    pub from: String,
    /// Destination path -> top-level file name.
    pub files: BTreeMap<String, String>,
    pub run: Vec<String>,
    /// `K=V` entries.
    pub env: Vec<String>,
    pub scope: ImageScope,
    pub pos: Pos,
}

/// Whether a step of the graph is a job or a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepKind {
    Job,
    Service,
}
