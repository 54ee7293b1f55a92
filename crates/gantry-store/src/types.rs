//! Rows and changes. States are enums (the API's where it has one); backends store them as
//! their text (`as_str`) and read them back with `FromStr`.

pub use gantry_api::v1::Role;
pub use gantry_api::NodeState;
pub use gantry_api::{
    Channel, EndpointScope, SecretScope, SecretType, StorageDriver, TakeoverMode, TakeoverPhase,
    VolumeScope,
};
use gantry_api::{EndCause, TaskStatus, WorkflowStatus};
use uuid::Uuid;

use gantry_api::text_enum;

text_enum!(
    /// What a single-use MCP confirmation stands for.
    ConfirmationKind {
        /// A token handed to a client that cannot ask the person itself.
        Token => "token",
        /// A question asked, whose answer comes back with the client's next call.
        Question => "question",
    }
);

/// A single-use confirmation, by the hash of its secret (see [`Store::put_confirmation`](crate::Store::put_confirmation)).
#[derive(Debug, Clone)]
pub struct NewConfirmation {
    pub kind: ConfirmationKind,
    /// The secret's SHA-256, hex: the secret itself is never stored.
    pub id_hash: String,
    pub user_id: Uuid,
    /// A digest of exactly what it confirms.
    pub action: String,
    pub expires_at: Millis,
}

text_enum!(
    /// What a hold does to its node.
    HoldKind {
        Cordon => "cordon",
        Evict => "evict",
    }
);

text_enum!(
    /// Who placed a hold.
    HoldSource {
        Monitoring => "monitoring",
        Admin => "admin",
    }
);

text_enum!(
    /// Where a hold is in its life.
    HoldStatus {
        Active => "ACTIVE",
        /// Waiting for the pool's cap to allow it.
        Deferred => "DEFERRED",
        Released => "RELEASED",
    }
);

text_enum!(
    /// What releases a hold.
    ReleaseRule {
        /// Its alert resolving.
        Auto => "auto",
        /// Only an administrator.
        Admin => "admin",
    }
);

/// A role as stored: the API's [`Role`]'s text.
pub fn parse_role(s: &str) -> Result<Role, String> {
    [Role::User, Role::Admin, Role::Agent, Role::Monitoring]
        .into_iter()
        .find(|r| r.as_str() == s)
        .ok_or_else(|| format!("unknown role {s:?}"))
}

pub type Millis = i64;

#[derive(Debug, Clone, PartialEq)]
pub struct User {
    pub id: Uuid,
    pub name: String,
    pub group: String,
    pub role: Role,
}

/// A user as administrators list them.
#[derive(Debug, Clone, PartialEq)]
pub struct UserRow {
    pub user: User,
    pub created_at: Millis,
    pub disabled_at: Option<Millis>,
    /// Their tokens, expired ones included (they still show in listings).
    pub tokens: u64,
}

/// A user's API token, never its secret nor its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRow {
    pub id: String,
    pub user: String,
    /// What the token may do: its user's role.
    pub role: Role,
    pub purpose: String,
    pub created_at: Millis,
    pub expires_at: Option<Millis>,
}

/// A token for one persistent endpoint, never its secret nor its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointTokenRow {
    pub id: String,
    pub endpoint: String,
    pub created_by: String,
    pub created_at: Millis,
    pub expires_at: Option<Millis>,
}

/// Why a known token does not authenticate, so the 401 can say so.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenRefusal {
    Expired(Millis),
    /// The user's name.
    UserDisabled(String),
}

/// Which workflows a caller may see.
#[derive(Debug, Clone)]
pub enum Visibility {
    All,
    /// Owned by `user` or belonging to `group`.
    UserOrGroup {
        user: String,
        group: String,
    },
}

#[derive(Debug, Clone)]
pub struct NewWorkflow {
    pub id: Uuid,
    pub name: String,
    pub owner: String,
    pub group: String,
    pub spec: String,
    pub plan: String,
    pub tasks: Vec<NewTask>,
    /// The members of its big task arrays stored as ranges, not rows (see
    /// [`BORN_AHEAD`](crate::BORN_AHEAD)): each job's after those in `tasks`.
    pub unborn: Vec<crate::NewUnborn>,
    /// The persistent volumes it mounts: each must exist when it is stored.
    pub volumes: Vec<Uuid>,
    /// The endpoint takeovers its services request, stored with it.
    pub takeovers: Vec<TakeoverRow>,
    /// Applied to those takeovers in the same transaction: the submitter's confirmation
    /// ([`EndpointChange::Confirm`] and its event), given with the submit.
    pub takeover_changes: Vec<EndpointChange>,
    /// Tasks that end as they are stored, as [`Change::EndTask`] ends them: a build whose
    /// image the object cache holds already never runs.
    pub ended: Vec<EndedTask>,
}

impl NewWorkflow {
    /// Its tasks, those stored as ranges included.
    pub fn task_count(&self) -> u64 {
        self.tasks.len() as u64 + self.unborn.iter().map(|u| u.count()).sum::<u64>()
    }
}

/// A task of a [`NewWorkflow`] that ends when it is stored.
#[derive(Debug, Clone)]
pub struct EndedTask {
    pub task_id: Uuid,
    pub status: TaskStatus,
    pub reason: String,
}

#[derive(Debug, Clone)]
pub struct NewTask {
    pub id: Uuid,
    pub job: String,
    pub index: Option<u32>,
    pub ord: u32,
}

#[derive(Debug, Clone)]
pub struct WorkflowRow {
    pub id: Uuid,
    pub name: String,
    pub owner: String,
    pub group: String,
    pub spec: String,
    pub plan: String,
    pub status: WorkflowStatus,
    pub reason: Option<String>,
    pub stop_requested: bool,
    pub created_at: Millis,
    pub ended_at: Option<Millis>,
}

#[derive(Debug, Clone)]
pub struct TaskRow {
    pub id: Uuid,
    pub workflow_id: Uuid,
    pub job: String,
    pub index: Option<u32>,
    pub ord: u32,
    pub status: TaskStatus,
    pub reason: Option<String>,
    pub attempts: u32,
    pub live_attempt: Option<Uuid>,
    pub node: Option<String>,
    pub exit_code: Option<i32>,
    pub created_at: Millis,
    pub ended_at: Option<Millis>,
    /// Set when a failed attempt sent the task back to PENDING: the next attempt waits until
    /// then (its retry backoff).
    pub not_before: Option<Millis>,
}

#[derive(Debug, Clone)]
pub struct AttemptRow {
    pub id: Uuid,
    pub task_id: Uuid,
    pub workflow_id: Uuid,
    pub number: u32,
    pub node: String,
    pub status: TaskStatus,
    pub cause: Option<EndCause>,
    pub exit_code: Option<i32>,
    pub reason: Option<String>,
    pub stop_sent: Option<EndCause>,
    /// The agent's `Assignment` as JSON.
    pub assignment: String,
    pub created_at: Millis,
    pub running_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    /// The container's address on its node's bridge, once running.
    pub address: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ActiveWorkflow {
    pub workflow: WorkflowRow,
    /// The tasks in play (STARTED, RUNNING) and, of each job's PENDING ones, the first
    /// [`PENDING_WINDOW`] (by index), in the workflow's order.
    pub tasks: Vec<TaskRow>,
    /// The tasks that have ended, counted by job and status (each count above zero). The
    /// controller needs no more of them, and a big array's finished members are most of it.
    pub ended: Vec<TaskCount>,
    /// Each job's PENDING tasks, counted (listed in `tasks` or not; counts above zero).
    pub pending: Vec<TaskCount>,
    /// Attempts not yet ended.
    pub live: Vec<AttemptRow>,
}

/// How many of a job's PENDING tasks [`Store::active`](crate::Store::active) lists at
/// least: a 10,000-task array is read 64 waiting tasks at a time, not whole on every
/// controller tick (more when the fleet has room: [`Store::active_with`](crate::Store::active_with)).
/// More than a node starts at once; the controller reads again at once while a window's
/// tasks get placed.
pub const PENDING_WINDOW: usize = 64;

/// How many of a job's tasks are in one status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCount {
    pub job: String,
    pub status: TaskStatus,
    pub count: u32,
}

/// One step of a controller plan.
#[derive(Debug, Clone)]
pub enum Change {
    /// A task was placed: a new attempt on a node; the task becomes STARTED.
    CreateAttempt {
        attempt_id: Uuid,
        task_id: Uuid,
        workflow_id: Uuid,
        node: String,
        assignment: String,
        /// What it holds on `node`: the store refuses the plan when the node's live attempts
        /// and this one would not fit its capacity.
        need: AttemptNeed,
    },
    EndTask {
        task_id: Uuid,
        status: TaskStatus,
        reason: String,
    },
    /// `EndTask` for every task of the job that is still PENDING, listed or not.
    EndPending {
        workflow_id: Uuid,
        job: String,
        status: TaskStatus,
        reason: String,
    },
    /// Why a pending task waits (no event: not a state change).
    TaskWaiting {
        task_id: Uuid,
        reason: Option<String>,
    },
    SetWorkflow {
        workflow_id: Uuid,
        status: WorkflowStatus,
        reason: Option<String>,
    },
    StopSent {
        attempt_id: Uuid,
        cause: EndCause,
    },
    /// An event with no other change.
    Event(NewEvent),
    /// The plan is the lease holder's: applied only while `token` is still the lease's (first
    /// in a plan, so that nothing before it is applied either); else the whole call is
    /// [`StoreError::Deposed`](crate::StoreError::Deposed).
    Fence(Fence),
}

/// A lease holder's fencing token, as [`Store::acquire_lease`](crate::Store::acquire_lease)
/// handed it out: a plan that carries it is refused once another holder took the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub lease: String,
    pub token: i64,
}

impl From<Fence> for Change {
    fn from(f: Fence) -> Self {
        Change::Fence(f)
    }
}

impl From<Fence> for EndpointChange {
    fn from(f: Fence) -> Self {
        EndpointChange::Fence(f)
    }
}

/// A lease as stored: who holds it, under which token, until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    pub name: String,
    pub holder: String,
    pub token: i64,
    pub acquired_at: Millis,
    pub expires_at: Millis,
}

/// What one server replica's endpoint proxy does with one persistent endpoint, as the replica
/// publishes it ([`Store::publish_proxy_views`](crate::Store::publish_proxy_views)): a
/// takeover's leader reads every replica's before it stops the old backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyView {
    pub endpoint: String,
    /// The backend new requests go to: its workflow and attempt (none: the endpoint answers
    /// 503).
    pub workflow_id: Option<Uuid>,
    pub attempt_id: Option<Uuid>,
    /// Requests still running on the backends the endpoint pointed at before this one.
    pub old_in_flight: u64,
}

/// A [`ProxyView`] as stored: whose it is and when that replica last said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyViewRow {
    pub replica: String,
    pub view: ProxyView,
    pub seen_at: Millis,
}

/// How many of each workflow's tasks are in each status ([`Store::task_counts`]).
///
/// [`Store::task_counts`]: crate::Store::task_counts
pub type StatusCounts =
    std::collections::HashMap<Uuid, std::collections::BTreeMap<TaskStatus, u64>>;

/// What the live attempts on one node hold ([`Store::node_usage`](crate::Store::node_usage)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeUsage {
    pub node: String,
    pub attempts: u32,
    pub need: AttemptNeed,
}

impl NodeUsage {
    /// One more live attempt, holding `need`.
    pub fn add(&mut self, need: &AttemptNeed) {
        self.attempts += 1;
        self.need.millicpus += need.millicpus;
        self.need.memory_bytes += need.memory_bytes;
        for (d, n) in &need.devices {
            *self.need.devices.entry(d.clone()).or_insert(0) += n;
        }
        self.need.exclusive |= need.exclusive;
    }
}

/// What an attempt holds on its node, as the scheduler counts it: cores in thousandths, bytes
/// of memory, devices by name. An exclusive attempt needs a node with nothing else live, and
/// nothing else is placed beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttemptNeed {
    pub millicpus: u64,
    pub memory_bytes: u64,
    pub devices: std::collections::BTreeMap<String, u32>,
    pub exclusive: bool,
}

/// What [`Store::end_attempt`](crate::Store::end_attempt) did. Only [`EndOutcome::Ended`]
/// moved a task; the others are stale reports, which callers drop (an agent may resend an end
/// after a reconnect, or report an attempt the server replaced).
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndOutcome {
    /// The attempt ended and its task moved on.
    Ended,
    /// The attempt had ended already: nothing changed.
    AlreadyEnded,
    /// The attempt is not its task's current one: it ended, its task was left alone.
    NotCurrent,
    /// No such attempt (only from [`Store::end_attempts`](crate::Store::end_attempts)).
    Unknown,
}

impl EndOutcome {
    pub fn is_ended(self) -> bool {
        self == EndOutcome::Ended
    }
}

#[derive(Debug, Clone)]
pub struct AttemptEnd {
    pub attempt_id: Uuid,
    pub status: TaskStatus,
    pub cause: EndCause,
    pub exit_code: Option<i32>,
    pub reason: Option<String>,
    pub task: TaskNext,
}

#[derive(Debug, Clone)]
pub enum TaskNext {
    /// Back to PENDING for another attempt, which may not start before `not_before`.
    Retry { reason: String, not_before: Millis },
    Final {
        status: TaskStatus,
        reason: Option<String>,
    },
}

#[derive(Debug, Clone, Default)]
pub struct NodeRegistration {
    pub name: String,
    pub pool: String,
    /// JSON of `gantry_api::agent::Capacity`.
    pub capacity: String,
    pub version: String,
    pub metrics_addr: Option<String>,
    pub node_exporter: Option<String>,
    /// The node's address as other nodes reach it.
    pub address: Option<String>,
    /// The agent's exec service (`host:port`).
    pub exec_addr: Option<String>,
    /// What `resource.annotations` are matched against.
    pub labels: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct NodeRow {
    pub id: Uuid,
    pub name: String,
    pub pool: String,
    pub capacity: String,
    pub state: NodeState,
    pub connected: bool,
    pub last_seen: Option<Millis>,
    pub version: Option<String>,
    pub metrics_addr: Option<String>,
    pub node_exporter: Option<String>,
    /// 1, 2, 3... in order of first registration; never reused.
    pub seq: i64,
    /// As the agent last said hello (see [`NodeRegistration`]).
    pub address: Option<String>,
    pub exec_addr: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    pub workflow_id: Option<Uuid>,
    pub node: Option<String>,
    pub after: i64,
    pub limit: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub workflow_id: Option<Uuid>,
    pub node: Option<String>,
    pub task: Option<String>,
    pub kind: String,
    pub message: String,
}

/// An alert about a node the store does not know, as the webhook saw it: its event is recorded
/// once per (fingerprint, episode, status).
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownNodeAlert {
    pub fingerprint: String,
    pub episode: String,
    pub status: String,
    pub event: NewEvent,
}

#[derive(Debug, Clone)]
pub struct EventRow {
    pub seq: i64,
    pub time: Millis,
    pub workflow_id: Option<Uuid>,
    pub node: Option<String>,
    pub task: Option<String>,
    pub kind: String,
    pub message: String,
    /// The workflow's name, where the query joined it (a node's events); `None` elsewhere.
    pub workflow_name: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ChoreRow {
    pub id: Uuid,
    pub pool: String,
    pub kind: gantry_api::agent::ChoreKind,
    pub created_at: Millis,
    pub sent_to: Option<String>,
}

/// Where a secret lives: `scope` is `user`, `group` or `organization`; `owner` the user or
/// group name (empty for organization).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretKey {
    pub scope: SecretScope,
    pub owner: String,
    pub name: String,
}

/// A stored secret: its type and its sealed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSecret {
    pub kind: SecretType,
    pub sealed: String,
}

#[derive(Debug, Clone)]
pub struct SecretRow {
    pub scope: SecretScope,
    pub owner: String,
    pub name: String,
    pub kind: SecretType,
    pub updated_by: String,
    pub updated_at: Millis,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HoldRow {
    pub id: Uuid,
    pub node: String,
    pub pool: String,
    pub kind: HoldKind,
    pub source: HoldSource,
    pub state: HoldStatus,
    pub alertname: Option<String>,
    pub fingerprint: Option<String>,
    pub episode: Option<String>,
    pub release_rule: ReleaseRule,
    pub reason: String,
    pub created_by: String,
    pub created_at: Millis,
    pub activated_at: Option<Millis>,
    pub alert_resolved_at: Option<Millis>,
    pub released_by: Option<String>,
    pub released_at: Option<Millis>,
    pub release_reason: Option<String>,
}

/// One step of a hold decision, applied with the others in one transaction. Node states
/// (READY, CORDONED, EVICTING) are recomputed from active holds in the same transaction.
#[derive(Debug, Clone)]
pub enum HoldChange {
    /// The decision was made on the holds as of this [`Store::holds_version`]: the call is
    /// [`StoreError::Refused`](crate::StoreError::Refused), whole, if another was applied
    /// since (decide again on what is there now).
    ///
    /// [`Store::holds_version`]: crate::Store::holds_version
    Expect(i64),
    Place(Box<HoldRow>),
    Activate {
        id: Uuid,
    },
    Release {
        id: Uuid,
        by: String,
        reason: String,
    },
    AlertResolved {
        id: Uuid,
    },
    EndEpisode {
        fingerprint: String,
        episode: String,
        by: String,
    },
    Event(NewEvent),
}

#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRow {
    pub name: String,
    pub owner: String,
    pub group: String,
    pub scope: EndpointScope,
    pub mode: TakeoverMode,
    pub drain_timeout_ms: i64,
    pub confirm: bool,
    pub created_at: Millis,
    pub workflow_id: Option<Uuid>,
    pub service: Option<String>,
    pub port: Option<u16>,
    pub since: Option<Millis>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TakeoverRow {
    pub id: Uuid,
    pub endpoint: String,
    pub from_workflow: Option<Uuid>,
    pub to_workflow: Uuid,
    pub to_service: String,
    pub port: u16,
    pub requested_by: String,
    pub channel: Channel,
    pub mode: TakeoverMode,
    pub phase: TakeoverPhase,
    pub reason: Option<String>,
    pub confirmed_by: Option<String>,
    /// How the person confirmed: a channel's word (`cli`, `web`...) or, from MCP, how the
    /// client asked them (`mcp-elicitation`, `mcp-token`...).
    pub confirmed_via: Option<String>,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub switched_at: Option<Millis>,
    pub ended_at: Option<Millis>,
}

/// A step of the endpoint controller's plan; applied in one transaction with events.
#[derive(Debug, Clone)]
pub enum EndpointChange {
    /// Move a takeover to a phase; `end` marks it finished (DONE, FAILED, CANCELLED).
    Phase {
        id: Uuid,
        phase: TakeoverPhase,
        reason: Option<String>,
        end: bool,
    },
    /// The endpoint is now served by this takeover's service.
    Switch {
        takeover: Uuid,
    },
    /// The endpoint has no backend any more (its workflow ended).
    Clear {
        endpoint: String,
        reason: String,
    },
    Confirm {
        id: Uuid,
        by: String,
        via: String,
    },
    Event(NewEvent),
    /// As [`Change::Fence`]: the endpoint controller's steps are the lease holder's.
    Fence(Fence),
}

/// A repository of the object cache, `(scope, owner, name)`: `("user", "alice", "tool")` is
/// `user/alice/tool`.
pub type Repository<'a> = (&'a str, &'a str, &'a str);

/// An image tag in the object cache: `<scope>/<owner>/<name>:<tag>`. `scope` is `user` or
/// `group`; a manifest kept without a tag has its digest (`sha256:...`) as `tag`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageKey {
    pub scope: String,
    pub owner: String,
    pub name: String,
    pub tag: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ImageRow {
    pub key: ImageKey,
    /// The manifest's digest.
    pub digest: String,
    pub media_type: String,
    /// Bytes of the manifest and every blob it references, each counted once.
    pub size: i64,
    pub created_at: Millis,
    pub last_used_at: Millis,
    pub build_key: Option<String>,
}

/// A blob file of the object cache.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobRow {
    pub digest: String,
    pub size: i64,
    pub created_at: Millis,
    pub last_used_at: Millis,
}

/// A blob that is a manifest or an index.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestRow {
    pub digest: String,
    pub media_type: String,
    pub size: i64,
    pub created_at: Millis,
}

/// A manifest being pushed: its blob is on disk; `refs` are the digests it names (config and
/// layers, or an index's manifests).
#[derive(Debug, Clone, PartialEq)]
pub struct NewManifest {
    pub digest: String,
    pub media_type: String,
    pub size: i64,
    pub refs: Vec<String>,
}

/// A storage provisioner an administrator added.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageRow {
    pub name: String,
    pub driver: StorageDriver,
    pub path: String,
    pub pool: Option<String>,
    /// `None`: open to every group.
    pub groups: Option<Vec<String>>,
    pub created_by: String,
    pub created_at: Millis,
}

/// A persistent volume.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeRow {
    pub id: Uuid,
    pub scope: VolumeScope,
    pub owner: String,
    pub name: String,
    pub storage: String,
    pub created_by: String,
    pub created_at: Millis,
}

/// One page of a workflow's tasks, in the workflow's order (job by job, members by index).
#[derive(Debug, Clone, Default)]
pub struct TaskPage {
    /// The tasks after this one (the previous page's last); from the first when `None`.
    pub after: Option<Uuid>,
    /// Only tasks in these statuses; every status when empty.
    pub statuses: Vec<TaskStatus>,
    pub limit: u32,
}
