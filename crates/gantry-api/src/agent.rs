//! The agent <-> server protocol. One WebSocket per agent (`GET /api/v1/agent/connect`), JSON
//! text frames, one message per frame. On every (re)connect the server sends the node's full
//! desired set of attempts; every status report names its attempt, so a stale report never
//! overwrites a newer attempt.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::EndCause;

pub use crate::common::Capacity;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    /// First message on every connection.
    Hello {
        name: String,
        pool: String,
        capacity: Capacity,
        version: String,
        /// Where this agent's metrics are served (`host:port`), for service discovery.
        #[serde(default)]
        metrics_addr: Option<String>,
        /// Where this node's Prometheus Node Exporter listens (`host:port`), if it runs one.
        #[serde(default)]
        node_exporter: Option<String>,
        /// Attempts this agent still knows about (running or exited but unreported).
        #[serde(default)]
        attempts: Vec<Uuid>,
        /// The node's address as other nodes reach it (`--advertise`, else the local address
        /// of this connection): what host-network containers and multinode members are at.
        #[serde(default)]
        address: Option<String>,
        /// Where this agent's exec service listens (`host:port`): a multinode job's members
        /// start processes in each other's containers through it (never over sshd).
        #[serde(default)]
        exec_addr: Option<String>,
        /// What the node is, for `resource.annotations` constraints: GPU model and
        /// architecture (NVML), CPU model, and the administrator's `--label KEY=VALUE`.
        #[serde(default)]
        labels: std::collections::BTreeMap<String, String>,
    },
    Heartbeat,
    /// A change in an attempt's life. Sent again after a reconnect until acknowledged.
    Status(AttemptReport),
    /// A chunk of a container's output, placed by byte offset so a resend is harmless.
    Log(LogChunk),
    /// A node-local task (volume cleanup) is done.
    ChoreDone {
        id: Uuid,
        error: Option<String>,
    },
    /// One transfer of a data-transfer step ended. Sent only to a server whose `Welcome` said
    /// it takes these (an older one would refuse the unknown message and drop the connection).
    TransferEnded(TransferEnded),
    /// Where a transfer step is (about once a second while a body moves). Sent as
    /// `TransferEnded` is.
    TransferProgress {
        attempt_id: Uuid,
        progress: crate::v1::TransferProgress,
    },
    /// A check of a service's readiness probe failed (sent for each, while the service is not
    /// ready). Sent only to a server whose `Welcome` said it takes these.
    ProbeFailed {
        attempt_id: Uuid,
        /// What failed, e.g. `GET http://10.0.0.2:8080/notthere answered 404 Not Found`.
        why: String,
        /// Consecutive failed checks with this same outcome (1: the outcome just changed).
        count: u32,
    },
}

/// One item of a transfer step ended: its event on the workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferEnded {
    pub attempt_id: Uuid,
    pub source: String,
    pub destination: String,
    pub outcome: TransferOutcome,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum TransferOutcome {
    /// All of it moved, in `ms` (all tries together).
    Done { bytes: u64, ms: u64 },
    /// It failed for good (after its tries): the URL and the cause.
    Failed { message: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptReport {
    pub attempt_id: Uuid,
    pub phase: AttemptPhase,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum AttemptPhase {
    /// Accepted; pulling and unpacking the image.
    Preparing,
    /// The container's process runs.
    /// For a service: its readiness probe has passed. `address` is the container's IP on the
    /// node's bridge when it has a network of its own.
    Running {
        #[serde(default)]
        address: Option<String>,
    },
    /// The process is gone. `cause` is `Exit` when it ended on its own, or the cause the
    /// server gave when it asked for the stop (timeout, stopped, evicted).
    Exited { exit_code: i32, cause: EndCause },
    /// It could not be started at all (bad image, bad mount...).
    StartFailed { message: String },
    /// It ran and failed for the reason given (a data transfer: the URL and the cause).
    Failed { exit_code: i32, message: String },
    /// The agent does not know this attempt (reported after a restart lost it).
    Lost,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Copy)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogChunk {
    pub attempt_id: Uuid,
    pub stream: Stream,
    pub offset: u64,
    /// Base64 of the raw bytes (output need not be UTF-8).
    pub data: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    Welcome {
        node_id: Uuid,
        heartbeat_interval_ms: u64,
        /// This node's IPv4 /24 for its container bridge (e.g. `10.213.7.0/24`), given by the
        /// server so that no two nodes overlap.
        #[serde(default)]
        subnet: Option<String>,
        /// The server records `TransferEnded` messages (older servers do not send this).
        #[serde(default)]
        transfer_events: bool,
        /// The server records `ProbeFailed` messages (older servers do not send this).
        #[serde(default)]
        probe_results: bool,
        /// The server counts any frame, a WebSocket ping included, as a sign of life: the
        /// agent's heartbeat is then its ping alone (older servers need `Heartbeat` too).
        #[serde(default)]
        ping_heartbeats: bool,
    },
    /// The complete set of attempts this node should run. Anything else the agent runs is
    /// stopped; anything listed that the agent does not know is started (or reported lost if it
    /// had been started before).
    Desired { attempts: Vec<Assignment> },
    /// Start one attempt.
    Assign(Box<Assignment>),
    /// Stop one attempt: SIGTERM, `grace_ms`, then SIGKILL. The cause is echoed in the final
    /// report.
    Stop {
        attempt_id: Uuid,
        grace_ms: u64,
        cause: EndCause,
    },
    /// The server has stored this attempt's final status: the agent may forget it.
    Forget { attempt_id: Uuid },
    /// Node-local housekeeping (removing an ephemeral volume).
    Chore(Chore),
    /// The addresses of a workflow's running containers on other nodes than this one, whole,
    /// whenever they change: the node's firewall lets the workflow's containers here reach
    /// those, and be reached from them, and no others.
    Peers {
        workflow_id: Uuid,
        addresses: Vec<String>,
    },
    /// The server has stored output up to these offsets.
    LogAck {
        attempt_id: Uuid,
        stdout: u64,
        stderr: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chore {
    pub id: Uuid,
    pub kind: ChoreKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChoreKind {
    /// Remove a directory under the storage root (relative path), or under `root`, a
    /// storage provisioner's directory.
    RemoveVolume {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        root: Option<String>,
    },
}

/// Everything an agent needs to run one attempt of a task. Self-contained: the agent stores it
/// in its state directory so it survives restarts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    pub attempt_id: Uuid,
    pub workflow_id: Uuid,
    /// Job name, with `[N]` for a task-array member.
    pub task: String,
    pub attempt: u32,
    pub image: ImageSource,
    /// Full argv (command + args, or the script wrapped for `/bin/sh`). Empty: the image's own
    /// entrypoint and cmd.
    pub argv: Vec<String>,
    pub env: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub mounts: Vec<VolumeMount>,
    #[serde(default)]
    pub files: Vec<InjectedFile>,
    pub resources: Resources,
    /// A network namespace on the node's bridge (CNI). `None`: a namespace with only `lo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSpec>,
    /// Set for services: their ports and readiness probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,
    /// Set for image builds: the attempt builds this recipe instead of running a container,
    /// and pushes the result to the server's object cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildSpec>,
    /// Set for data transfers (`ingress:VOLUME`, `egress:VOLUME`): the attempt moves data
    /// into or out of a volume instead of running a container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<TransferSpec>,
    /// The container shares its node's network namespace (`network.host: true`, and every
    /// member of a multinode job): its ports are the node's. `network` then only carries its
    /// `/etc/hosts` entries.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_network: bool,
    /// Set for each member of a multinode job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multinode: Option<MultinodeSpec>,
}

/// One member of a multinode job (a gang of containers on distinct nodes, placed together).
/// The head (index 0) runs the job's command, under the image's `mpirun` for `openmpi` and
/// `mpich`; the others wait for the processes the launcher starts in them through their
/// agents' exec services.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultinodeSpec {
    /// `openmpi`, `mpich`, `gasnet` or `generic`.
    pub implementation: String,
    /// This member's index (its hostname is `<job>-<index>`).
    pub index: u32,
    /// Processes per member (its slots in the hostfile).
    pub slots: u32,
    /// Every member, in index order (this one included).
    pub members: Vec<GangMember>,
    /// A random secret of this run of the gang: an exec service runs a command in one of its
    /// containers only for a request that carries its gang's token.
    pub token: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GangMember {
    /// `<job>-<index>`.
    pub hostname: String,
    /// Its node's address (the container shares the node's network).
    pub address: String,
    /// Its agent's exec service (`host:port`).
    pub exec_addr: String,
    /// Its attempt: what the exec service is asked to run a command in.
    pub attempt_id: Uuid,
}

/// The transfers of one volume in one direction, run in order on the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferSpec {
    /// The volume's directory relative to the agent's storage root, or to `root` (as
    /// `VolumeMount.source`).
    pub volume: String,
    /// A persistent volume's storage directory (as `VolumeMount.root`); `None`: the agent's
    /// storage root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// `ingress` or `egress`.
    pub direction: String,
    pub items: Vec<TransferItem>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferItem {
    /// `s3://BUCKET/KEY`, `http(s)://...` or, for ingress, `file://NAME` (then `content`).
    pub source: String,
    pub destination: String,
    /// A `file://NAME` source's content, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The `secret://` the credential comes from; the server fills `credential` from it just
    /// before sending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<TransferCredential>,
    /// Per try (`policy.timeout.execute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Tries in all (`policy.retry.attempts`, at least 1).
    pub attempts: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TransferCredential {
    S3(crate::v1::S3Secret),
    Http(crate::v1::HttpSecret),
}

/// An image recipe to build on the node: a base image, then steps, each becoming one layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildSpec {
    /// The server's registry (`host:port`, plain HTTP), where the result is pushed with the
    /// agent's own token.
    pub registry: String,
    /// e.g. `user/alice/trainer`.
    pub repository: String,
    /// The tag to push: the last step's cache key.
    pub tag: String,
    pub base: ImageSource,
    pub steps: Vec<BuildStep>,
    /// Layers the cache already holds for the first `cached.len()` steps (already in the
    /// server's registry, in `repository`): the build pulls them and resumes after them.
    #[serde(default)]
    pub cached: Vec<CachedLayer>,
    /// Added to the image's configuration (`K=V`).
    #[serde(default)]
    pub env: Vec<String>,
    /// `none` (default): the build has only `lo`; `bridge`: a NAT'd network on the node's
    /// bridge. Never the host's network namespace.
    pub network: String,
    pub timeout_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BuildStep {
    /// Files copied into the image.
    Files { key: String, files: Vec<BuildFile> },
    /// A command run as root with `/bin/sh -c` in a confined container.
    Run {
        key: String,
        command: String,
        #[serde(default)]
        env: Vec<String>,
        #[serde(default)]
        workdir: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildFile {
    /// Absolute path in the image.
    pub target: String,
    /// Base64 of the content.
    pub content: String,
    pub mode: u32,
}

/// A layer the object cache holds for one step (annotated with the step's key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedLayer {
    pub key: String,
    pub digest: String,
    pub diff_id: String,
    pub size: u64,
    pub media_type: String,
}

/// The annotation on each layer of a built image's manifest naming the step key it caches.
pub const BUILD_KEY_ANNOTATION: &str = "io.gantry.build.key";

/// A container of its own on the node's bridge. Its workflow's containers reach each other;
/// other workflows only through the server's endpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkSpec {
    /// Extra `/etc/hosts` entries, e.g. `web.svc` -> the address of the workflow's service
    /// `web`.
    #[serde(default)]
    pub hosts: Vec<HostEntry>,
    /// Whether it may open connections to the outside world (the cluster's `network.egress`
    /// when the assignment was sent).
    #[serde(default = "yes")]
    pub egress: bool,
    /// The addresses of the workflow's running containers when this was assigned; `Peers`
    /// messages bring the changes.
    #[serde(default)]
    pub peers: Vec<String>,
    /// The workflow's host-network services, `address:port` (a node's address and a port
    /// the service binds there): the node's firewall lets this container reach those, and
    /// nothing else of any node's own.
    #[serde(default)]
    pub node_services: Vec<String>,
}

impl Default for NetworkSpec {
    fn default() -> Self {
        NetworkSpec {
            hosts: vec![],
            egress: true,
            peers: vec![],
            node_services: vec![],
        }
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostEntry {
    pub name: String,
    pub address: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ServiceSpec {
    #[serde(default)]
    pub ports: Vec<ServicePort>,
    /// Without one, a service is ready once its process runs.
    #[serde(default)]
    pub readiness: Option<Probe>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServicePort {
    pub name: String,
    pub port: u16,
    /// `tcp` or `udp`.
    pub protocol: String,
}

/// A readiness probe with Kubernetes' timing fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub check: ProbeCheck,
    pub initial_delay_seconds: u32,
    pub period_seconds: u32,
    pub timeout_seconds: u32,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProbeCheck {
    /// Runs in the container; exit 0 passes.
    Exec { command: Vec<String> },
    /// A GET to the container's address; 200-399 passes.
    HttpGet {
        path: String,
        port: u16,
        /// `http` or `https`.
        scheme: String,
        #[serde(default)]
        headers: Vec<(String, String)>,
    },
    /// A TCP connection to the container's address.
    TcpSocket { port: u16 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageSource {
    /// `docker://REF` or `oci://PATH`.
    pub uri: String,
    #[serde(default)]
    pub credential: Option<RegistryCredential>,
    /// The `secret://` the credential comes from; the server fills `credential` from it just
    /// before sending, so the store never holds the plaintext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RegistryCredential {
    Basic { username: String, password: String },
    Bearer { token: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeMount {
    /// Path inside the container.
    pub target: String,
    /// Path relative to the agent's storage root, e.g. `POOL/ephemeral/WORKFLOW`, or to `root`.
    pub source: String,
    /// A storage provisioner's directory (absolute, from an administrator), which `source` is
    /// resolved beneath; `None`: the agent's storage root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    #[serde(default)]
    pub read_only: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InjectedFile {
    /// Absolute path inside the container.
    pub target: String,
    /// Base64 of the content.
    pub content: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Resources {
    pub cpus: f64,
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    #[serde(default)]
    pub devices: std::collections::BTreeMap<String, u32>,
}
