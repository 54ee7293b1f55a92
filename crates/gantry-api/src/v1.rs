//! The JSON API under `/api/v1`. Times are RFC 3339 in UTC.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{common::Capacity, EndCause, NodeState, TaskStatus, WorkflowStatus};

/// The largest workflow file the server takes, in bytes (4 MiB).
pub const MAX_WORKFLOW_FILE_BYTES: usize = 4 << 20;

/// Every error body: `{"error": "..."}` plus positions for workflow-file problems, and for a
/// 413 the limit that was passed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Diagnostic>,
    /// With 413: the most bytes the server takes of what was too large.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WhoAmI {
    pub user: String,
    pub group: String,
    pub role: Role,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Admin,
    /// May only connect as a node agent.
    Agent,
    /// Alertmanager's webhook and Prometheus' service discovery.
    Monitoring,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Admin => "admin",
            Role::Agent => "agent",
            Role::Monitoring => "monitoring",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateUser {
    pub name: String,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub role: Option<Role>,
    /// When the token expires: `30d`, a Go duration, or `never`; absent, the
    /// `tokens.default_expiry` setting.
    #[serde(default)]
    pub expires: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserCreated {
    pub name: String,
    pub group: String,
    pub role: Role,
    /// Shown once; only its hash is stored.
    pub token: String,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub expires_at: Option<OffsetDateTime>,
}

/// A user as administrators see them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserInfo {
    pub name: String,
    pub group: String,
    pub role: String,
    pub disabled: bool,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub disabled_at: Option<OffsetDateTime>,
    /// How many tokens they have (expired ones included).
    pub tokens: u64,
}

/// `admin controller`: which server runs the controller, under which lease token, since and
/// until when (the lease is renewed every second), and whether the answering server is it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControllerInfo {
    /// None before any server took the lease.
    pub holder: Option<String>,
    pub token: Option<i64>,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub since: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub expires_at: Option<OffsetDateTime>,
    /// The server that answered, as the lease names it, and whether it runs the controller.
    pub this_server: String,
    pub this_server_leads: bool,
}

/// `admin user show`: the user and their tokens (never a secret).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserDetail {
    pub user: UserInfo,
    pub tokens: Vec<TokenInfo>,
}

/// A user's API token: its id, never its secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenInfo {
    pub id: String,
    pub user: String,
    /// What it may do: its user's role.
    pub role: String,
    pub purpose: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub expires_at: Option<OffsetDateTime>,
    pub expired: bool,
}

/// Options of `POST /admin/tokens/{id}/rotate`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RotateToken {
    /// As [`CreateUser::expires`].
    #[serde(default)]
    pub expires: Option<String>,
}

/// A rotated token: same id, user and role, a new secret shown once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenRotated {
    pub info: TokenInfo,
    pub token: String,
}

/// A token of a persistent endpoint: its id, never its secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndpointTokenInfo {
    pub id: String,
    pub endpoint: String,
    pub created_by: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub expires_at: Option<OffsetDateTime>,
    pub expired: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubmitWorkflow {
    /// The workflow file's text.
    pub spec: String,
    /// A name for listings; defaults to the file name the CLI read.
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ValidateWorkflow {
    pub spec: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Validation {
    pub valid: bool,
    pub diagnostics: Vec<Diagnostic>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkflowSummary {
    pub id: Uuid,
    pub name: String,
    pub owner: String,
    pub group: String,
    pub status: WorkflowStatus,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub ended_at: Option<OffsetDateTime>,
    /// Tasks by status, e.g. {"FINISHED": 3, "RUNNING": 1}.
    #[serde(default)]
    pub counts: BTreeMap<TaskStatus, u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkflowDetail {
    #[serde(flatten)]
    pub summary: WorkflowSummary,
    /// One page of the tasks (`?limit=`, default 1,000; `?status=` only those statuses), in
    /// the workflow's order.
    pub tasks: Vec<TaskInfo>,
    /// How many tasks match the request's `status` (every task when none asked).
    #[serde(default)]
    pub tasks_total: u64,
    /// The page's last task when more follow: the next page is `?after=<it>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<Uuid>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskInfo {
    pub id: Uuid,
    /// The job's name.
    pub job: String,
    /// Task-array index.
    #[serde(default)]
    pub index: Option<u32>,
    pub status: TaskStatus,
    /// Why it waits or why it ended.
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    pub attempts: Vec<AttemptInfo>,
    /// A running transfer step's progress, as its agent last reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<TransferProgress>,
    /// Why a started service is not ready yet: its readiness probe's latest failed check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeFailing>,
}

/// A readiness probe failing, as its agent last reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeFailing {
    /// What failed, e.g. `GET http://10.0.0.2:8080/notthere answered 404 Not Found`.
    pub why: String,
    /// Consecutive failed checks with this outcome.
    pub count: u32,
}

/// Where a transfer step is: the item moving now, its bytes done (of its total, when known)
/// and the rate so far. Kept in the server's memory only, while the step runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferProgress {
    pub source: String,
    pub destination: String,
    pub done_bytes: u64,
    #[serde(default)]
    pub total_bytes: Option<u64>,
    pub bytes_per_second: u64,
}

/// `SRC -> DST: 12 MiB / 100 MiB (12 %), 4.5 MiB/s`: what the CLI and the web UI show.
impl std::fmt::Display for TransferProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} -> {}: {}",
            self.source,
            self.destination,
            iec_bytes(self.done_bytes)
        )?;
        if let Some(t) = self.total_bytes.filter(|t| *t > 0) {
            write!(
                f,
                " / {} ({} %)",
                iec_bytes(t),
                self.done_bytes.saturating_mul(100) / t
            )?;
        }
        write!(f, ", {}/s", iec_bytes(self.bytes_per_second))
    }
}

/// `n` bytes in binary units, one decimal: `512 B`, `1.5 KiB`, `12 MiB`.
pub fn iec_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        return format!("{n} B");
    }
    let text = format!("{v:.1}");
    format!("{} {}", text.strip_suffix(".0").unwrap_or(&text), UNITS[u])
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptInfo {
    pub id: Uuid,
    pub number: u32,
    pub node: String,
    pub status: TaskStatus,
    #[serde(default)]
    pub cause: Option<EndCause>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub ended_at: Option<OffsetDateTime>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    pub seq: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub time: OffsetDateTime,
    #[serde(default)]
    pub workflow_id: Option<Uuid>,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub task: Option<String>,
    pub kind: String,
    pub message: String,
    /// The name of the workflow it concerns, in a node's events (a workflow's own events leave
    /// it out: they all concern that one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: Uuid,
    pub name: String,
    pub pool: String,
    pub state: NodeState,
    pub connected: bool,
    pub capacity: Capacity,
    /// Resources held by running attempts.
    pub allocated: Capacity,
    pub running: u32,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub last_seen: Option<OffsetDateTime>,
    #[serde(default)]
    pub version: Option<String>,
    /// Active and deferred holds.
    #[serde(default)]
    pub holds: Vec<HoldInfo>,
    /// The node's address as other nodes reach it (where its host-network containers are).
    #[serde(default)]
    pub address: Option<String>,
    /// What `resource.annotations` constraints are matched against: GPU model and
    /// architecture, CPU model, and the administrator's `--label KEY=VALUE`.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeDetail {
    #[serde(flatten)]
    pub node: NodeInfo,
    /// Every hold this node has carried, released ones included.
    #[serde(default)]
    pub hold_history: Vec<HoldInfo>,
    /// The newest events asked for (`limit`, default 20; `since`), oldest first.
    pub events: Vec<Event>,
    /// Older events exist beyond this page.
    #[serde(default)]
    pub more_events: bool,
}

/// A hold on a node: who took it out of service, why, and when; later who released it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HoldInfo {
    pub id: Uuid,
    pub node: String,
    pub pool: String,
    /// `cordon` or `evict`.
    pub kind: String,
    /// `monitoring` or `admin`.
    pub source: String,
    /// `ACTIVE`, `DEFERRED` (past the pool cap, applied when room frees) or `RELEASED`.
    pub state: String,
    #[serde(default)]
    pub alertname: Option<String>,
    #[serde(default)]
    pub fingerprint: Option<String>,
    pub reason: String,
    /// `auto` (its alert's resolve releases it) or `admin`.
    pub release: String,
    pub created_by: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub alert_resolved_at: Option<OffsetDateTime>,
    #[serde(default)]
    pub released_by: Option<String>,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub released_at: Option<OffsetDateTime>,
    #[serde(default)]
    pub release_reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlaceHold {
    /// `cordon` or `evict`.
    pub kind: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct ReleaseHolds {
    /// One hold (id or a unique prefix); every hold of the node when absent.
    #[serde(default)]
    pub hold: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// What the Alertmanager webhook did with each entry of a post.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct WebhookOutcome {
    pub alerts: usize,
    pub placed: usize,
    pub deferred: usize,
    pub released: usize,
    pub awaiting_admin: usize,
    pub unchanged: usize,
    /// Entries Gantry could not act on, with why (missing labels, unknown nodes).
    #[serde(default)]
    pub ignored: Vec<String>,
    /// Entries that can never be accepted (no valid `startsAt`, a malformed fingerprint),
    /// with why: nothing of them was stored, and sending them again changes nothing.
    #[serde(default)]
    pub refused: Vec<String>,
}

/// One target group of Prometheus HTTP service discovery.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetGroup {
    pub targets: Vec<String>,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Setting {
    pub key: String,
    pub value: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkflowCreated {
    pub id: Uuid,
    /// Parts of the file Gantry accepts but does not act on.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// A secret as listed: never its value.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SecretInfo {
    /// `secret://SCOPE/NAME`, as workflow files refer to it.
    pub uri: String,
    pub scope: String,
    pub owner: String,
    pub name: String,
    /// `value`, `s3`, `http` or `image`.
    #[serde(rename = "type", default = "value_type")]
    pub kind: String,
    pub updated_by: String,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

fn value_type() -> String {
    "value".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PutSecret {
    /// For a typed secret, the JSON object of its fields ([`S3Secret`], [`HttpSecret`],
    /// [`ImageSecret`]); for `value`, the value itself.
    pub value: String,
    /// `value` (the default: an opaque string), `s3`, `http` or `image`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// An `s3` secret: credentials and where the S3-compatible store is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct S3Secret {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub region: String,
    /// `https://s3.REGION.amazonaws.com` for AWS, or any S3-compatible server's URL (addressed
    /// path-style).
    pub endpoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token: Option<String>,
}

/// An `http` secret: basic (`username` + `password`) or bearer (`token`) authentication,
/// sent only to `trustedDomains` when that is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpSecret {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_domains: Vec<String>,
}

/// Whether a credential limited to `trusted` (empty: any host) may be sent to `host`: the
/// domain itself or a subdomain of it. Agents and the server decide alike.
pub fn trusted_host(trusted: &[String], host: &str) -> bool {
    let host = host.split(':').next().unwrap_or(host).to_ascii_lowercase();
    trusted.is_empty()
        || trusted.iter().any(|d| {
            let d = d.split(':').next().unwrap_or(d).to_ascii_lowercase();
            host == d || host.ends_with(&format!(".{d}"))
        })
}

/// An `image` secret: registry credentials, sent only to `trustedDomains` when given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageSecret {
    pub username: String,
    pub password: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_domains: Vec<String>,
}

/// A persistent endpoint: a named URL that outlives the workflows serving it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndpointInfo {
    pub name: String,
    /// `<server>/e/NAME/`.
    pub url: String,
    /// `NAME.<endpoint domain>` (send it as the Host header).
    pub host: String,
    pub scope: String,
    pub mode: String,
    pub drain_timeout_secs: u64,
    pub confirm: bool,
    pub owner: String,
    pub group: String,
    /// SERVING, SWITCHING, DRAINING, IDLE (no backend) or FAILED.
    pub status: String,
    /// Why it is IDLE or FAILED: which workflow served it last and how that ended.
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub workflow_id: Option<Uuid>,
    #[serde(default)]
    pub service: Option<String>,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub since: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// A takeover in progress.
    #[serde(default)]
    pub takeover: Option<TakeoverInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TakeoverInfo {
    pub id: Uuid,
    pub endpoint: String,
    #[serde(default)]
    pub from_workflow: Option<Uuid>,
    pub to_workflow: Uuid,
    pub to_service: String,
    pub requested_by: String,
    /// How it was asked for: `cli`, `api` or `mcp`.
    pub channel: String,
    pub mode: String,
    /// WAITING_READY, AWAITING_CONFIRMATION, SWITCHING, DRAINING, DONE, FAILED, CANCELLED.
    pub phase: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub confirmed_by: Option<String>,
    #[serde(default)]
    pub confirmed_via: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub switched_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub ended_at: Option<OffsetDateTime>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateEndpoint {
    pub name: String,
    /// user (default), group, organization or public.
    #[serde(default)]
    pub scope: Option<String>,
    /// when-ready (default) or stop-first.
    #[serde(default)]
    pub mode: Option<String>,
    /// How long requests in flight may finish on the old backend after a switch (Go duration,
    /// default 5m).
    #[serde(default)]
    pub drain_timeout: Option<String>,
    /// Takeovers wait for a person's approval.
    #[serde(default)]
    pub confirm: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct CreateEndpointToken {
    /// `30d`, a Go duration, or `never`; absent, the `tokens.default_expiry` setting.
    #[serde(default)]
    pub expires: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndpointToken {
    pub endpoint: String,
    #[serde(default)]
    pub id: String,
    /// Shown once; only its hash is stored.
    pub token: String,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub expires_at: Option<OffsetDateTime>,
}

/// A persistent volume.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VolumeInfo {
    pub id: Uuid,
    /// `volume://SCOPE/persistent/NAME`, as workflow files refer to it.
    pub uri: String,
    pub scope: String,
    pub owner: String,
    pub name: String,
    pub storage: String,
    pub created_by: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Workflows not yet ended that mount it (only `volume show` fills it in).
    #[serde(default)]
    pub mounted_by: Vec<Uuid>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateVolume {
    pub name: String,
    /// user (default) or group.
    #[serde(default)]
    pub scope: Option<String>,
    /// A storage provisioner; the built-in `default` when absent.
    #[serde(default)]
    pub storage: Option<String>,
}

/// A storage provisioner persistent volumes live on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StorageInfo {
    pub name: String,
    pub driver: String,
    /// The directory on the nodes; the built-in one's is relative to each agent's
    /// `--storage-root`.
    pub path: String,
    #[serde(default)]
    pub pool: Option<String>,
    /// `None`: open to every group.
    #[serde(default)]
    pub groups: Option<Vec<String>>,
    pub builtin: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddStorage {
    pub name: String,
    /// `hostpath`, the only driver so far.
    pub driver: String,
    pub path: String,
    #[serde(default)]
    pub pool: Option<String>,
    #[serde(default)]
    pub groups: Option<Vec<String>>,
}
