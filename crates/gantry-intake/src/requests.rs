//! The checks of each `/api/v1` request body (and the path parameters that go with it), in the
//! order the handlers make them, before anything touches the store. A handler authenticates
//! first, calls one of these, and stores what it returns; a refusal changes nothing.

use std::time::Duration;

use gantry_api::v1::{
    CreateEndpoint, CreateUser, Diagnostic, HttpSecret, ImageSecret, PlaceHold, PutSecret,
    ReleaseHolds, Role, S3Secret, Setting, SubmitWorkflow,
};
use gantry_api::{EndpointScope, StorageDriver, TakeoverMode, VolumeScope};
use gantry_api::{NodeState, TaskStatus, WorkflowStatus};
use gantry_core::holds::HoldType;
use gantry_core::plan::{self, WorkflowPlan};
use gantry_spec::Workflow;

/// Why a workflow file or a submit is refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Never acceptable as sent (400).
    Bad(String),
    /// The workflow file has problems, each at its position (400 with diagnostics).
    Invalid {
        message: String,
        diagnostics: Vec<Diagnostic>,
    },
    /// The workflow file is `size` bytes, more than the `limit` the server takes (413, naming
    /// the limit).
    TooLarge { size: u64, limit: u64 },
}

// --- workflows -----------------------------------------------------------------------------

/// Workflow files larger than this are refused before parsing: the parser's work grows with
/// the file.
pub const MAX_SPEC_BYTES: usize = gantry_api::v1::MAX_WORKFLOW_FILE_BYTES;

/// Longest workflow name: it is shown in every listing.
pub const MAX_WORKFLOW_NAME: usize = 256;

/// The workflow file's diagnostics as the API carries them.
pub fn diagnostics(ds: Vec<gantry_spec::Diagnostic>) -> Vec<Diagnostic> {
    ds.into_iter()
        .map(|d| Diagnostic {
            line: d.line,
            column: d.column,
            message: d.message,
        })
        .collect()
}

/// Parses and validates a workflow file (`POST /workflows/validate`, and the first step of a
/// submit).
pub fn parse_spec(spec: &str) -> Result<Workflow, Refusal> {
    if spec.len() > MAX_SPEC_BYTES {
        return Err(Refusal::TooLarge {
            size: spec.len() as u64,
            limit: MAX_SPEC_BYTES as u64,
        });
    }
    gantry_spec::parse(spec).map_err(|ds| Refusal::Invalid {
        message: format!("the workflow file has {} problem(s)", ds.len()),
        diagnostics: diagnostics(ds),
    })
}

/// A workflow's name for listings: `None` (blank or absent) takes the default. Names are
/// printed in other people's terminals (the group's members list them), so control characters,
/// which could rewrite what they see, are refused.
pub fn workflow_name(name: Option<&str>) -> Result<Option<String>, String> {
    let Some(name) = name.filter(|n| !n.trim().is_empty()) else {
        return Ok(None);
    };
    if name.len() > MAX_WORKFLOW_NAME {
        return Err(format!(
            "the workflow name is {} bytes; the limit is {MAX_WORKFLOW_NAME}",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(format!(
            "the workflow name {name:?} has control characters; use printable text"
        ));
    }
    Ok(Some(name.to_string()))
}

/// A submit that passed every check that needs no store: the file parses, Gantry can run all
/// of it, and its plan is compiled (builds, secrets and endpoints are checked against the
/// store next).
#[derive(Debug)]
pub struct Submission {
    pub workflow: Workflow,
    pub plan: WorkflowPlan,
    pub name: Option<String>,
    /// Parts of the file Gantry accepts but does not act on.
    pub warnings: Vec<String>,
}

/// `POST /workflows` (and MCP's `start_workflow`) up to the store.
pub fn submission(req: &SubmitWorkflow) -> Result<Submission, Refusal> {
    let workflow = parse_spec(&req.spec)?;
    let name = workflow_name(req.name.as_deref()).map_err(Refusal::Bad)?;
    let support = plan::support(&workflow);
    if !support.unsupported.is_empty() {
        return Err(Refusal::Bad(format!(
            "this workflow uses what Gantry cannot run yet:\n  {}",
            support.unsupported.join("\n  ")
        )));
    }
    let plan = plan::compile(&workflow);
    let warnings = gantry_spec::upgrade_warning(&workflow)
        .into_iter()
        .chain(support.ignored)
        .collect();
    Ok(Submission {
        workflow,
        plan,
        name,
        warnings,
    })
}

/// What `retry.max_attempts` allows: the file format's own maximum unless an administrator set
/// a lower one (a value `check_setting` took; anything else reads as the maximum).
pub fn retry_cap(setting: Option<&str>) -> u32 {
    setting
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| (1..=gantry_spec::MAX_RETRY_ATTEMPTS).contains(n))
        .unwrap_or(gantry_spec::MAX_RETRY_ATTEMPTS)
}

/// Refuses a workflow whose steps ask for more than `cap` attempts (see [`retry_cap`]), naming
/// them: `validate` checks the file format's own maximum, a cluster may allow fewer.
pub fn check_retries(wf: &Workflow, cap: u32) -> Result<(), String> {
    let steps = wf
        .jobs
        .iter()
        .map(|(n, j)| (format!("jobs.{n}"), &j.policy.retry))
        .chain(
            wf.services
                .iter()
                .map(|(n, s)| (format!("services.{n}"), &s.policy.retry)),
        );
    let over: Vec<String> = steps
        .filter(|(_, r)| r.attempts > cap)
        .map(|(at, r)| format!("{at}.policy.retry.attempts: {}", r.attempts))
        .collect();
    if over.is_empty() {
        return Ok(());
    }
    Err(format!(
        "this cluster starts a step at most {cap} times (an administrator set \
         {RETRY_MAX_ATTEMPTS_KEY}={cap}); ask for fewer attempts:\n  {}",
        over.join("\n  ")
    ))
}

/// The largest task array the cluster's setting allows ([`MAX_ARRAY_SIZE_KEY`]); the file
/// format's own maximum ([`gantry_spec::MAX_TASKS`]) when unset or not a number in range.
pub fn array_cap(setting: Option<&str>) -> u64 {
    setting
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| (1..=gantry_spec::MAX_TASKS).contains(n))
        .unwrap_or(gantry_spec::MAX_TASKS)
}

/// Refuses a workflow with a task array of more than `cap` tasks (see [`array_cap`]), naming
/// each with its position, as Slurm refuses an array past its `MaxArraySize`.
pub fn check_arrays(wf: &Workflow, cap: u64) -> Result<(), String> {
    let over: Vec<String> = wf
        .jobs
        .iter()
        .filter_map(|(n, j)| {
            let len = j.task_array.as_ref()?.len();
            (len > cap).then(|| format!("jobs.{n}.task-array (job at {}): {len} tasks", j.pos))
        })
        .collect();
    if over.is_empty() {
        return Ok(());
    }
    Err(format!(
        "this cluster runs task arrays of at most {cap} tasks (an administrator set \
         {MAX_ARRAY_SIZE_KEY}={cap}); split the array into smaller ones:\n  {}",
        over.join("\n  ")
    ))
}

/// The tasks a page of `describe` holds unless asked (`?limit=`), and the most it may.
pub const TASK_PAGE_DEFAULT: u32 = 1000;
pub const TASK_PAGE_MAX: u32 = 10_000;

/// `GET /workflows/{id}?limit=&status=`: the page size (0: the counts alone) and the task
/// statuses, comma-separated, in any case.
pub fn task_page(
    limit: Option<u32>,
    status: Option<&str>,
) -> Result<(u32, Vec<TaskStatus>), String> {
    let limit = limit.unwrap_or(TASK_PAGE_DEFAULT);
    if limit > TASK_PAGE_MAX {
        return Err(format!(
            "limit is at most {TASK_PAGE_MAX} tasks a page, not {limit}: page on with `after`"
        ));
    }
    let statuses = status
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<TaskStatus>().map_err(|_| {
                let all: Vec<&str> = TaskStatus::ALL.iter().map(|t| t.as_str()).collect();
                format!("unknown task status {s:?}: use {}", all.join(", "))
            })
        })
        .collect::<Result<_, _>>()?;
    Ok((limit, statuses))
}

/// `GET /workflows?status=` (and MCP's `list_workflows`).
pub fn status_filter(status: Option<&str>) -> Result<Option<WorkflowStatus>, String> {
    status
        .map(|s| {
            s.parse::<WorkflowStatus>().map_err(|_| {
                format!("unknown status {s:?}: use PENDING, RUNNING, FINISHED, FAILED or STOPPED")
            })
        })
        .transpose()
}

/// `node list --state S`: one of the node states, in any case.
pub fn node_state_filter(state: Option<&str>) -> Result<Option<NodeState>, String> {
    state
        .map(|s| {
            s.parse::<NodeState>().map_err(|_| {
                let all: Vec<&str> = NodeState::ALL.iter().map(|s| s.as_str()).collect();
                format!("state must be one of {}, not {s:?}", all.join(", "))
            })
        })
        .transpose()
}

// --- users and settings --------------------------------------------------------------------

/// 1 to `max` ASCII letters, digits, '-', '_' or '.'.
fn plain_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// User and group names.
pub fn valid_account_name(s: &str) -> bool {
    plain_name(s, 64)
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewUser {
    pub name: String,
    pub group: String,
    pub role: Role,
}

/// `POST /admin/users`: a user's group is their own name unless given.
pub fn create_user(req: CreateUser) -> Result<NewUser, String> {
    if !valid_account_name(&req.name) {
        return Err(format!(
            "user name {:?} is not valid: use 1-64 letters, digits, '-', '_' or '.'",
            req.name
        ));
    }
    let group = req.group.unwrap_or_else(|| req.name.clone());
    if !valid_account_name(&group) {
        return Err(format!("group name {group:?} is not valid"));
    }
    Ok(NewUser {
        name: req.name,
        group,
        role: req.role.unwrap_or(Role::User),
    })
}

/// The object cache's size limit.
pub const CACHE_BYTES_KEY: &str = "images.cache_bytes";

/// The fraction of a pool's nodes monitoring may hold; `monitoring.hold_fraction.<pool>` sets
/// it for one pool.
pub const HOLD_FRACTION_KEY: &str = "monitoring.hold_fraction";

/// Whether containers of networked workflows may reach outside the cluster: `allow` (the
/// default) or `deny` (see the server's `netpolicy`).
pub const EGRESS_KEY: &str = "network.egress";

/// A site's cap on `policy.retry.attempts`, at most the file format's own.
pub const RETRY_MAX_ATTEMPTS_KEY: &str = "retry.max_attempts";

/// The most tasks one task array may have on this cluster (Slurm's `MaxArraySize`).
pub const MAX_ARRAY_SIZE_KEY: &str = "workflows.max_array_size";

/// Which `resource.annotations` keys constrain placement (a node must carry the label with
/// that value); the others are only recorded.
pub const CONSTRAINT_ANNOTATIONS_KEY: &str = "scheduler.constraint_annotations";
const CONSTRAINT_ANNOTATIONS_DEFAULT: &str = "nvidia.com/gpu.model,nvidia.com/gpu.arch";

/// Pools whose nodes run no host-network container (`network.host`, multinode members).
pub const HOST_NETWORK_FORBIDDEN_KEY: &str = "network.host.forbidden_pools";

/// How long new API and endpoint tokens live unless their creator says (`--expires`).
pub const TOKEN_EXPIRY_KEY: &str = "tokens.default_expiry";

/// Where the web UI's Nodes page links for monitoring: http(s) URLs, empty for no link.
/// `gantry up --monitoring` sets the first two to its bundled stack.
pub const MONITORING_URL_KEYS: [&str; 3] = [
    PROMETHEUS_URL_KEY,
    "monitoring.alertmanager_url",
    "monitoring.grafana_url",
];

/// Where the web UI reads node graphs (Prometheus' HTTP API); empty: no graphs.
pub const PROMETHEUS_URL_KEY: &str = "monitoring.prometheus_url";

/// Settings an administrator may change: (key, default, what it does).
pub const SETTINGS: &[(&str, &str, &str)] = &[
    (
        TOKEN_EXPIRY_KEY,
        "90d",
        "how long new user and endpoint tokens live unless created with --expires: days (90d), a duration (12h) or never",
    ),
    (
        "builds.enabled",
        "true",
        "whether workflows may build images (true|false)",
    ),
    (
        "builds.network",
        "none",
        "the network of image build steps: none (only lo) or bridge (NAT'd on the node's bridge; never the host's)",
    ),
    (
        EGRESS_KEY,
        "allow",
        "whether containers of workflows with services may open connections outside the cluster: allow or deny (other workflows are never reachable but through endpoints)",
    ),
    (
        RETRY_MAX_ATTEMPTS_KEY,
        "100",
        "the most starts of one step a workflow may ask for (policy.retry.attempts), 1-100",
    ),
    (
        MAX_ARRAY_SIZE_KEY,
        "1000000",
        "the most tasks one task array may have (jobs.NAME.task-array), 1-1000000",
    ),
    (
        CACHE_BYTES_KEY,
        "10737418240",
        "the object cache's size limit in bytes; least recently used images are evicted beyond it",
    ),
    (
        CONSTRAINT_ANNOTATIONS_KEY,
        CONSTRAINT_ANNOTATIONS_DEFAULT,
        "the resource.annotations keys that constrain placement, comma-separated (a node must have the label with that value); empty: none",
    ),
    (
        HOST_NETWORK_FORBIDDEN_KEY,
        "",
        "pools whose nodes run no host-network containers (network.host, multinode jobs), comma-separated; empty: every pool allows them",
    ),
    (
        HOLD_FRACTION_KEY,
        "0.2",
        "the fraction of a pool's nodes monitoring may hold at once, from 0 to 1 (it always may hold one); monitoring.hold_fraction.<pool> for one pool",
    ),
    (
        MONITORING_URL_KEYS[0],
        "",
        "the Prometheus the web UI's Nodes page links to and its node graphs query (http:// or https:// URL, its HTTP API); empty: no link, no graphs",
    ),
    (
        MONITORING_URL_KEYS[1],
        "",
        "the Alertmanager the web UI's Nodes page links to (http:// or https:// URL); empty: no link",
    ),
    (
        MONITORING_URL_KEYS[2],
        "",
        "the Grafana the web UI's Nodes page links to (http:// or https:// URL); empty: no link",
    ),
];

/// A link target an administrator may set: an absolute http(s) URL (never `javascript:`).
pub fn link_url(v: &str) -> bool {
    let rest = v
        .strip_prefix("https://")
        .or_else(|| v.strip_prefix("http://"));
    rest.is_some_and(|r| {
        !r.is_empty()
            && !r.starts_with('/')
            && v.len() <= 2048
            && v.chars().all(|c| c.is_ascii_graphic())
    })
}

pub type SettingDef = (&'static str, &'static str, &'static str);

/// The setting a URL names; an unknown one is refused as not found. A key that refines a
/// setting for one pool (`monitoring.hold_fraction.<pool>`) names that setting's definition.
pub fn setting_def(key: &str) -> Result<&'static SettingDef, String> {
    let base = match key.strip_prefix(HOLD_FRACTION_KEY) {
        Some(pool) if pool.len() > 1 && pool.starts_with('.') => HOLD_FRACTION_KEY,
        _ => key,
    };
    SETTINGS.iter().find(|(k, _, _)| *k == base).ok_or_else(|| {
        let known: Vec<&str> = SETTINGS.iter().map(|(k, _, _)| *k).collect();
        format!("no setting {key:?}; known settings: {}", known.join(", "))
    })
}

/// `PUT /admin/settings/{key}`: the body must name the URL's setting and hold a value it takes.
pub fn check_setting(def: &SettingDef, key: &str, body: &Setting) -> Result<(), String> {
    let (k, _, help) = *def;
    if body.key != key {
        return Err(format!(
            "the body names {:?} but the URL names {key:?}",
            body.key
        ));
    }
    if k == "builds.network" && !matches!(body.value.as_str(), "none" | "bridge") {
        return Err(format!(
            "builds.network must be none or bridge ({help}), not {:?}",
            body.value
        ));
    }
    if k == EGRESS_KEY && !matches!(body.value.as_str(), "allow" | "deny") {
        return Err(format!(
            "{key} must be allow or deny ({help}), not {:?}",
            body.value
        ));
    }
    if k.ends_with(".enabled") && !matches!(body.value.as_str(), "true" | "false") {
        return Err(format!(
            "{key} must be true or false ({help}), not {:?}",
            body.value
        ));
    }
    if k == HOLD_FRACTION_KEY
        && !body
            .value
            .parse::<f64>()
            .is_ok_and(|f| (0.0..=1.0).contains(&f))
    {
        return Err(format!(
            "{key} must be a fraction from 0 to 1 ({help}), not {:?}",
            body.value
        ));
    }
    if k == TOKEN_EXPIRY_KEY {
        parse_expiry(&body.value).map_err(|e| format!("{key} ({help}): {e}"))?;
    }
    if MONITORING_URL_KEYS.contains(&k) && !body.value.is_empty() && !link_url(&body.value) {
        return Err(format!(
            "{key} must be an http:// or https:// URL, or empty for no link ({help}), not {:?}",
            body.value
        ));
    }
    if k == CACHE_BYTES_KEY && !body.value.parse::<u64>().is_ok_and(|n| n > 0) {
        return Err(format!(
            "{key} must be a positive whole number of bytes ({help}), not {:?}",
            body.value
        ));
    }
    if k == CONSTRAINT_ANNOTATIONS_KEY {
        if let Some(bad) = comma_list(&body.value).find(|a| !annotation_key(a)) {
            return Err(format!(
                "{key}: {bad:?} is not an annotation key (an optional DNS prefix and `/`, then 1-63 \
                 letters, digits, '-', '_' or '.', as nvidia.com/gpu.model)"
            ));
        }
    }
    if k == HOST_NETWORK_FORBIDDEN_KEY {
        if let Some((pool, e)) =
            comma_list(&body.value).find_map(|p| Some((p, gantry_spec::names::name_error(p)?)))
        {
            return Err(format!("{key}: pool {pool:?}: {e}"));
        }
    }
    let most = gantry_spec::MAX_TASKS;
    if k == MAX_ARRAY_SIZE_KEY
        && !body
            .value
            .parse::<u64>()
            .is_ok_and(|n| (1..=most).contains(&n))
    {
        return Err(format!(
            "{key} must be a whole number from 1 to {most} ({help}), not {:?}",
            body.value
        ));
    }
    let max = gantry_spec::MAX_RETRY_ATTEMPTS;
    if k == RETRY_MAX_ATTEMPTS_KEY
        && !body
            .value
            .parse::<u32>()
            .is_ok_and(|n| (1..=max).contains(&n))
    {
        return Err(format!(
            "{key} must be a whole number from 1 to {max} ({help}), not {:?}",
            body.value
        ));
    }
    Ok(())
}

/// The items of a comma-separated setting, trimmed, empty ones dropped.
fn comma_list(v: &str) -> impl Iterator<Item = &str> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// A Kubernetes-style label key: `[prefix/]name`, the prefix a DNS subdomain.
fn annotation_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
    });
    prefix_ok && plain_name(name, 63)
}

/// The annotation keys that constrain placement under `scheduler.constraint_annotations`
/// (`None`: not set, the two GPU keys).
pub fn constraint_keys(setting: Option<&str>) -> std::collections::BTreeSet<String> {
    comma_list(setting.unwrap_or(CONSTRAINT_ANNOTATIONS_DEFAULT))
        .map(str::to_string)
        .collect()
}

/// Whether `pool`'s nodes may run host-network containers under
/// `network.host.forbidden_pools`.
pub fn host_network_allowed(setting: Option<&str>, pool: &str) -> bool {
    !comma_list(setting.unwrap_or("")).any(|p| p == pool)
}

/// What a submit is told of the annotations that will not constrain placement on this
/// cluster (they are kept in the plan, and act once an administrator lists their key).
pub fn annotation_warnings(
    wf: &Workflow,
    constraints: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    let steps = wf
        .jobs
        .iter()
        .map(|(n, j)| (format!("jobs.{n}"), &j.resource))
        .chain(
            wf.services
                .iter()
                .map(|(n, s)| (format!("services.{n}"), &s.resource)),
        );
    let mut out = vec![];
    for (at, r) in steps {
        let loose: Vec<&str> = r
            .annotations
            .keys()
            .filter(|k| !constraints.contains(*k))
            .map(String::as_str)
            .collect();
        if !loose.is_empty() {
            out.push(format!(
                "{at}.resource.annotations: {} not acted on (this cluster places by {}; \
                 an administrator sets {CONSTRAINT_ANNOTATIONS_KEY})",
                loose.join(", "),
                if constraints.is_empty() {
                    "no annotations".to_string()
                } else {
                    constraints.iter().cloned().collect::<Vec<_>>().join(", ")
                }
            ));
        }
    }
    out
}

// --- holds ---------------------------------------------------------------------------------

/// `POST /nodes/{name}/holds`: the hold's type, and its reason trimmed.
pub fn place_hold(req: &PlaceHold) -> Result<(HoldType, String), String> {
    // `drain` is Slurm's word for the same thing as a cordon: no new work, running work
    // finishes. Slurm users type it; it is accepted here, not stored, so holds read one way.
    let kind = match req.kind.as_str() {
        "drain" => Some(HoldType::Cordon),
        k => HoldType::parse(k),
    }
    .ok_or_else(|| {
        format!(
            "hold type must be cordon (or drain, as Slurm says), or evict, not {:?}",
            req.kind
        )
    })?;
    let reason = req.reason.trim();
    if reason.is_empty() {
        return Err("a hold needs a reason (--reason)".into());
    }
    Ok((kind, reason.into()))
}

/// `POST /nodes/{name}/release`, read: which hold (an id prefix, lower-cased as ids are
/// printed; every hold of the node when absent) and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Release {
    pub hold: Option<String>,
    pub reason: String,
}

pub fn release_holds(req: ReleaseHolds) -> Result<Release, String> {
    // Asked for as a hold's reason is: who put a node back and why is what the next person
    // to look at it needs.
    let reason = req.reason.as_deref().map(str::trim).unwrap_or_default();
    if reason.is_empty() {
        return Err("a release needs a reason (--reason), as a hold does".into());
    }
    Ok(Release {
        hold: req.hold.map(|p| p.to_ascii_lowercase()),
        reason: reason.into(),
    })
}

// --- endpoints -----------------------------------------------------------------------------

/// How long requests on the old backend may finish after a switch, unless the endpoint says.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(300);

/// An endpoint's name becomes a host name (`NAME.<endpoint domain>`): one DNS label, the
/// grammar a workflow file's `attach:` is checked against too.
pub fn valid_endpoint_name(name: &str) -> bool {
    gantry_spec::names::endpoint_name_error(name).is_none()
}

/// Why `name` cannot be an endpoint's. The server answers a name held by an endpoint the
/// caller may not see with this too (400, the same words), since a 409 would confirm that a
/// name they cannot see is someone's endpoint.
pub fn unusable_endpoint_name(name: &str) -> String {
    format!(
        "endpoint name {name:?} cannot be used: names are 1-63 lower-case letters, digits or '-' \
         (it becomes a host name), and must not be taken; choose another"
    )
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewEndpoint {
    pub name: String,
    pub scope: EndpointScope,
    pub mode: TakeoverMode,
    pub drain_timeout_ms: i64,
    pub confirm: bool,
}

/// `POST /endpoints` (and MCP's `create_endpoint`).
pub fn create_endpoint(req: CreateEndpoint) -> Result<NewEndpoint, String> {
    if !valid_endpoint_name(&req.name) {
        return Err(unusable_endpoint_name(&req.name));
    }
    let scope = match req.scope.as_deref() {
        None => EndpointScope::User,
        Some(s) => s
            .parse()
            .map_err(|_| format!("scope must be user, group, organization or public, not {s:?}"))?,
    };
    let mode = match req.mode.as_deref() {
        None => TakeoverMode::WhenReady,
        Some(m) => m
            .parse()
            .map_err(|_| format!("mode must be when-ready or stop-first, not {m:?}"))?,
    };
    let drain = match &req.drain_timeout {
        Some(d) => {
            gantry_spec::parse_duration(d).map_err(|e| format!("drain timeout {d:?}: {e}"))?
        }
        None => DEFAULT_DRAIN,
    };
    Ok(NewEndpoint {
        name: req.name,
        scope,
        mode,
        drain_timeout_ms: millis(drain),
        confirm: req.confirm,
    })
}

/// `POST /endpoints/{name}/tokens`: when the token expires (ms since the epoch), from `now_ms`;
/// never when no expiry is given.
/// When a new token expires: `expires` as asked (`30d`, a Go duration, or `never`), else the
/// `tokens.default_expiry` setting's value. `None`: never.
pub fn token_expiry(
    expires: Option<&str>,
    default: &str,
    now_ms: i64,
) -> Result<Option<i64>, String> {
    let (text, what) = match expires {
        Some(e) => (e, "expiry"),
        None => (default, TOKEN_EXPIRY_KEY),
    };
    Ok(parse_expiry(text)
        .map_err(|e| format!("{what} {text:?}: {e}"))?
        .map(|after| now_ms.saturating_add(millis(after))))
}

/// `never`, whole days (`90d`), or a Go duration; zero is refused (a token dead at birth).
pub fn parse_expiry(text: &str) -> Result<Option<Duration>, String> {
    let t = text.trim();
    if t == "never" {
        return Ok(None);
    }
    let d = match t.strip_suffix('d') {
        Some(days) if !days.is_empty() && days.bytes().all(|b| b.is_ascii_digit()) => {
            let n: u64 = days.parse().map_err(|_| "too many days".to_string())?;
            Duration::from_secs(n.checked_mul(86_400).ok_or("too many days")?)
        }
        _ => gantry_spec::parse_duration(t)
            .map_err(|e| format!("{e}; or write days (90d) or never"))?,
    };
    if d.is_zero() {
        return Err("a token must live longer than zero; write never for no expiry".into());
    }
    Ok(Some(d))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

// --- secrets -------------------------------------------------------------------------------

pub use gantry_api::{SecretScope, SecretType};

/// A secret's scope as a person writes it: `account` is the vendor format's word for the
/// group; `org` is short for organization.
pub fn secret_scope(s: &str) -> Result<SecretScope, String> {
    match s {
        "account" => Ok(SecretScope::Group),
        "org" => Ok(SecretScope::Organization),
        other => other
            .parse()
            .map_err(|_| format!("unknown scope {other:?}; use user, group or organization")),
    }
}

/// Largest secret value accepted.
pub const MAX_SECRET: usize = 64 << 10;

pub fn valid_secret_name(name: &str) -> Result<(), String> {
    if !plain_name(name, 128) {
        return Err(format!(
            "secret name {name:?} must be 1-128 letters, digits, '-', '_' or '.'"
        ));
    }
    Ok(())
}

/// A secret's type as a person writes it. A credential's fields (a JSON object) are checked
/// by [`TypedSecret::parse`], so a typo is refused at `secret set`, not discovered when a
/// transfer runs.
pub fn secret_type(s: &str) -> Result<SecretType, String> {
    s.parse()
        .map_err(|_| format!("unknown secret type {s:?}; use value, s3, http or image"))
}

/// The fields of a typed secret, read from its JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypedSecret {
    Value(String),
    S3(S3Secret),
    Http(HttpSecret),
    Image(ImageSecret),
}

fn fields<T: serde::de::DeserializeOwned>(kind: SecretType, value: &str) -> Result<T, String> {
    // serde's messages name the field: "missing field `region`", "unknown field `regoin`".
    serde_json::from_str(value).map_err(|e| {
        let e = e.to_string();
        let e = e.split(" at line ").next().unwrap_or(&e);
        format!("{} secret: {e}", kind.as_str())
    })
}

fn required(kind: SecretType, field: &str, v: &str) -> Result<(), String> {
    if v.trim().is_empty() {
        return Err(format!(
            "{} secret: field `{field}` is empty",
            kind.as_str()
        ));
    }
    Ok(())
}

fn domains(kind: SecretType, list: &[String]) -> Result<(), String> {
    for d in list {
        if d.is_empty() || d.contains(['/', ' ', '@']) {
            return Err(format!(
                "{} secret: `trustedDomains` entry {d:?} is not a host name",
                kind.as_str()
            ));
        }
    }
    Ok(())
}

impl TypedSecret {
    /// A stored secret's value as its type reads it.
    pub fn parse(kind: SecretType, value: &str) -> Result<TypedSecret, String> {
        Ok(match kind {
            SecretType::Value => TypedSecret::Value(value.to_string()),
            SecretType::S3 => {
                let t = SecretType::S3;
                let s: S3Secret = fields(t, value)?;
                required(t, "accessKeyId", &s.access_key_id)?;
                required(t, "secretAccessKey", &s.secret_access_key)?;
                required(t, "region", &s.region)?;
                required(t, "endpoint", &s.endpoint)?;
                if !(s.endpoint.starts_with("http://") || s.endpoint.starts_with("https://")) {
                    return Err(format!(
                        "s3 secret: field `endpoint` {:?} must be an http:// or https:// URL",
                        s.endpoint
                    ));
                }
                TypedSecret::S3(s)
            }
            SecretType::Http => {
                let t = SecretType::Http;
                let h: HttpSecret = fields(t, value)?;
                match (&h.username, &h.password, &h.token) {
                    (Some(u), Some(_), None) => required(t, "username", u)?,
                    (None, None, Some(tok)) => required(t, "token", tok)?,
                    (Some(_), None, None) => {
                        return Err("http secret: field `password` is missing (basic authentication needs `username` and `password`)".into())
                    }
                    (None, Some(_), None) => {
                        return Err("http secret: field `username` is missing (basic authentication needs `username` and `password`)".into())
                    }
                    (None, None, None) => {
                        return Err("http secret: give `username` and `password` (basic) or `token` (bearer)".into())
                    }
                    _ => {
                        return Err("http secret: field `token` cannot be given with `username`/`password`: choose basic or bearer".into())
                    }
                }
                domains(t, &h.trusted_domains)?;
                TypedSecret::Http(h)
            }
            SecretType::Image => {
                let t = SecretType::Image;
                let i: ImageSecret = fields(t, value)?;
                required(t, "username", &i.username)?;
                required(t, "password", &i.password)?;
                domains(t, &i.trusted_domains)?;
                TypedSecret::Image(i)
            }
        })
    }
}

pub use gantry_api::v1::trusted_host;

/// The registry host of a `docker://` image reference, by the rule Docker uses: a first
/// component with a `.` or `:`, or `localhost`, is a host; otherwise it is Docker Hub.
pub fn image_registry_host(uri: &str) -> String {
    let r = uri.strip_prefix("docker://").unwrap_or(uri);
    match r.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first.to_string(),
        _ => "docker.io".into(),
    }
}

/// `PUT /secrets/{scope}/{name}`: the scope it is written to and its type (whether the
/// caller may write that scope is the server's to say).
pub fn put_secret(
    scope: &str,
    name: &str,
    body: &PutSecret,
) -> Result<(SecretScope, SecretType), String> {
    let scope = secret_scope(scope)?;
    valid_secret_name(name)?;
    let kind = secret_type(body.kind.as_deref().unwrap_or("value"))?;
    if body.value.is_empty() || body.value.len() > MAX_SECRET {
        return Err(format!("a secret's value must be 1 to {MAX_SECRET} bytes"));
    }
    TypedSecret::parse(kind, &body.value)?;
    Ok((scope, kind))
}

/// `secret://SCOPE/NAME`, as workflow files refer to secrets (the owner is the workflow's).
pub fn secret_ref(uri: &str) -> Result<(SecretScope, &str), String> {
    let rest = uri
        .strip_prefix("secret://")
        .ok_or_else(|| format!("{uri:?} is not a secret:// reference"))?;
    let (scope, name) = rest
        .split_once('/')
        .ok_or_else(|| format!("{uri:?}: expected secret://SCOPE/NAME"))?;
    valid_secret_name(name).map_err(|e| format!("{uri:?}: {e}"))?;
    let scope = secret_scope(scope).map_err(|e| format!("{uri:?}: {e}"))?;
    Ok((scope, name))
}

/// The built-in storage provisioner: `hostpath` beneath each agent's storage root.
pub const DEFAULT_STORAGE: &str = "default";

/// `POST /volumes`, checked: (scope, name, storage).
pub fn create_volume(
    req: &gantry_api::v1::CreateVolume,
) -> Result<(VolumeScope, String, String), String> {
    if let Some(e) = gantry_spec::names::name_error(&req.name) {
        return Err(format!("volume name: {e}"));
    }
    let scope = match req.scope.as_deref() {
        None => VolumeScope::User,
        Some(s) => s
            .parse()
            .map_err(|_| format!("scope must be user or group, not {s:?}"))?,
    };
    let storage = req
        .storage
        .clone()
        .unwrap_or_else(|| DEFAULT_STORAGE.into());
    if let Some(e) = gantry_spec::names::name_error(&storage) {
        return Err(format!("storage name: {e}"));
    }
    Ok((scope, req.name.clone(), storage))
}

/// `POST /admin/storages`, checked: the driver it names.
pub fn add_storage(req: &gantry_api::v1::AddStorage) -> Result<StorageDriver, String> {
    if let Some(e) = gantry_spec::names::name_error(&req.name) {
        return Err(format!("storage name: {e}"));
    }
    if req.name == DEFAULT_STORAGE {
        return Err(format!(
            "`{DEFAULT_STORAGE}` is the built-in storage (beneath each agent's storage root); pick another name"
        ));
    }
    let Ok(driver) = req.driver.parse::<StorageDriver>() else {
        return Err(format!(
            "driver {:?} is not known: `hostpath` (a directory every node of the pool sees) is the only one",
            req.driver
        ));
    };
    let p = std::path::Path::new(&req.path);
    let plain = p.components().all(|c| {
        matches!(
            c,
            std::path::Component::RootDir | std::path::Component::Normal(_)
        )
    });
    if !p.is_absolute() || !plain || req.path.len() > 4096 {
        return Err(format!(
            "path {:?} must be an absolute directory without `.` or `..`",
            req.path
        ));
    }
    if let Some(pool) = &req.pool {
        if let Some(e) = gantry_spec::names::name_error(pool) {
            return Err(format!("pool: {e}"));
        }
    }
    if let Some(groups) = &req.groups {
        if groups.is_empty() {
            return Err(
                "--groups names no group; leave it out to open the storage to every group".into(),
            );
        }
        if let Some(g) = groups.iter().find(|g| !valid_account_name(g)) {
            return Err(format!("group name {g:?} is not valid"));
        }
    }
    Ok(driver)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_secrets_name_the_field_that_is_wrong() {
        let put = |kind: &str, value: &str| {
            put_secret(
                "user",
                "s",
                &PutSecret {
                    value: value.into(),
                    kind: Some(kind.into()),
                },
            )
        };
        let s3 = r#"{"accessKeyId":"A","secretAccessKey":"S","region":"us-east-1","endpoint":"http://127.0.0.1:9000"}"#;
        assert_eq!(put("s3", s3).unwrap().1, SecretType::S3);
        for (kind, value, field) in [
            (
                "s3",
                r#"{"accessKeyId":"A","secretAccessKey":"S","endpoint":"http://x"}"#,
                "region",
            ),
            (
                "s3",
                r#"{"accessKeyId":"A","secretAccessKey":"S","region":"r","endpoint":"http://x","regoin":"r"}"#,
                "regoin",
            ),
            (
                "s3",
                r#"{"accessKeyId":"","secretAccessKey":"S","region":"r","endpoint":"http://x"}"#,
                "accessKeyId",
            ),
            (
                "s3",
                r#"{"accessKeyId":"A","secretAccessKey":"S","region":"r","endpoint":"minio:9000"}"#,
                "endpoint",
            ),
            ("s3", "not json", "s3 secret"),
            ("http", r#"{"username":"u"}"#, "password"),
            (
                "http",
                r#"{"username":"u","password":"p","token":"t"}"#,
                "token",
            ),
            (
                "http",
                r#"{"token":"t","trustedDomains":["a/b"]}"#,
                "trustedDomains",
            ),
            ("image", r#"{"username":"u"}"#, "password"),
            (
                "image",
                r#"{"username":"u","password":"p","extra":1}"#,
                "extra",
            ),
        ] {
            let e = put(kind, value).unwrap_err();
            assert!(e.contains(field), "{kind} {value}: {e}");
        }
        assert!(put("http", r#"{"token":"t"}"#).is_ok());
        assert!(put("http", r#"{"username":"u","password":"p"}"#).is_ok());
        assert!(put(
            "image",
            r#"{"username":"u","password":"p","trustedDomains":["reg.example"]}"#
        )
        .is_ok());
        assert!(put("value", "{not json is fine}").is_ok());
        assert!(put("ssh", "x").unwrap_err().contains("ssh"));
    }

    #[test]
    fn credentials_go_only_to_trusted_hosts() {
        let t = vec!["example.org".to_string()];
        assert!(trusted_host(&t, "example.org"));
        assert!(trusted_host(&t, "reg.example.org:5000"));
        assert!(!trusted_host(&t, "badexample.org"));
        assert!(!trusted_host(&t, "example.org.evil"));
        assert!(trusted_host(&[], "anything"));
        assert_eq!(image_registry_host("docker://busybox:1"), "docker.io");
        assert_eq!(image_registry_host("docker://localhost/a"), "localhost");
        assert_eq!(
            image_registry_host("docker://127.0.0.1:5056/p/b:1"),
            "127.0.0.1:5056"
        );
    }

    #[test]
    fn secret_references_name_a_scope_and_a_plain_name() {
        assert_eq!(
            secret_ref("secret://account/T").unwrap(),
            (SecretScope::Group, "T")
        );
        assert_eq!(
            secret_ref("secret://org/a.b").unwrap(),
            (SecretScope::Organization, "a.b")
        );
        for bad in [
            "secret://user/../x",
            "secret://user/a/b",
            "secret://nope/x",
            "secret://user/",
            "https://x",
        ] {
            assert!(secret_ref(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn workflow_names_are_printable() {
        assert_eq!(workflow_name(None), Ok(None));
        assert_eq!(workflow_name(Some("  ")), Ok(None));
        assert_eq!(
            workflow_name(Some("train résumé")),
            Ok(Some("train résumé".into()))
        );
        assert!(workflow_name(Some("ok\u{1b}[2J")).is_err());
        assert!(workflow_name(Some("a\nb")).is_err());
        assert!(workflow_name(Some(&"x".repeat(MAX_WORKFLOW_NAME + 1))).is_err());
    }

    #[test]
    fn token_expiry_never_overflows_and_falls_back_to_the_setting() {
        assert_eq!(
            token_expiry(Some("2562047h"), "90d", i64::MAX - 1),
            Ok(Some(i64::MAX))
        );
        assert_eq!(token_expiry(Some("never"), "90d", 5), Ok(None));
        assert_eq!(token_expiry(None, "never", 5), Ok(None));
        assert_eq!(token_expiry(None, "2d", 5), Ok(Some(5 + 2 * 86_400_000)));
        assert_eq!(
            token_expiry(Some("30d"), "never", 0),
            Ok(Some(30 * 86_400_000))
        );
        assert_eq!(token_expiry(Some("1h30m"), "never", 0), Ok(Some(5_400_000)));
        for bad in ["-1h", "0", "0d", "d", "soon", "1.5d", ""] {
            assert!(token_expiry(Some(bad), "90d", 5).is_err(), "{bad}");
        }
        let e = token_expiry(None, "soon", 5).unwrap_err();
        assert!(e.contains(TOKEN_EXPIRY_KEY), "{e}");
    }

    #[test]
    fn settings_take_only_their_values() {
        let def = setting_def("builds.network").unwrap();
        let set = |key: &str, value: &str| Setting {
            key: key.into(),
            value: value.into(),
        };
        assert!(check_setting(def, "builds.network", &set("builds.network", "bridge")).is_ok());
        assert!(check_setting(def, "builds.network", &set("builds.network", "host")).is_err());
        assert!(check_setting(def, "builds.network", &set("builds.enabled", "none")).is_err());
        let cache = setting_def(CACHE_BYTES_KEY).unwrap();
        assert!(check_setting(cache, CACHE_BYTES_KEY, &set(CACHE_BYTES_KEY, "0")).is_err());
        assert!(setting_def("no.such").is_err());
        let pool = "monitoring.hold_fraction.gpu";
        let fraction = setting_def(pool).unwrap();
        assert_eq!(fraction.0, HOLD_FRACTION_KEY);
        assert!(check_setting(fraction, pool, &set(pool, "0.5")).is_ok());
        for bad in ["1.5", "-0.1", "NaN", "inf", "", "20%"] {
            assert!(
                check_setting(fraction, pool, &set(pool, bad)).is_err(),
                "{bad}"
            );
        }
        assert!(setting_def("monitoring.hold_fraction.").is_err());
        assert!(setting_def("monitoring.hold_fractions").is_err());
        let retry = setting_def(RETRY_MAX_ATTEMPTS_KEY).unwrap();
        let key = RETRY_MAX_ATTEMPTS_KEY;
        for good in ["1", "3", "100"] {
            assert!(check_setting(retry, key, &set(key, good)).is_ok(), "{good}");
        }
        for bad in ["0", "101", "4294967295", "-1", "", "3.5"] {
            assert!(check_setting(retry, key, &set(key, bad)).is_err(), "{bad}");
        }
        let arrays = setting_def(MAX_ARRAY_SIZE_KEY).unwrap();
        let key = MAX_ARRAY_SIZE_KEY;
        for good in ["1", "10000", "1000000"] {
            assert!(
                check_setting(arrays, key, &set(key, good)).is_ok(),
                "{good}"
            );
        }
        for bad in ["0", "1000001", "-5", "", "1e6", "ten"] {
            assert!(check_setting(arrays, key, &set(key, bad)).is_err(), "{bad}");
        }
        let prom = setting_def(PROMETHEUS_URL_KEY).unwrap();
        let key = PROMETHEUS_URL_KEY;
        for good in ["", "http://127.0.0.1:9090", "https://prom.example.org"] {
            assert!(check_setting(prom, key, &set(key, good)).is_ok(), "{good}");
        }
        for bad in ["127.0.0.1:9090", "ftp://x", "javascript:alert(1)"] {
            assert!(check_setting(prom, key, &set(key, bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn monitoring_links_take_only_http_urls_or_nothing() {
        for key in MONITORING_URL_KEYS {
            let def = setting_def(key).unwrap();
            let set = |value: &str| Setting {
                key: key.into(),
                value: value.into(),
            };
            for good in [
                "",
                "http://127.0.0.1:9090",
                "https://grafana.example.org/d/x?a=1",
            ] {
                assert!(check_setting(def, key, &set(good)).is_ok(), "{good}");
            }
            for bad in [
                "javascript:alert(1)",
                "ftp://h",
                "http://",
                "https:///x",
                "http://a b",
                "127.0.0.1:9090",
            ] {
                assert!(check_setting(def, key, &set(bad)).is_err(), "{bad}");
            }
        }
    }

    #[test]
    fn placement_settings_take_annotation_keys_and_pool_names() {
        let set = |key: &str, value: &str| Setting {
            key: key.into(),
            value: value.into(),
        };
        let ck = CONSTRAINT_ANNOTATIONS_KEY;
        let def = setting_def(ck).unwrap();
        for good in [
            "",
            "nvidia.com/gpu.model",
            " rack , nvidia.com/gpu.arch,",
            "a.b-c/x_y.z",
        ] {
            assert!(check_setting(def, ck, &set(ck, good)).is_ok(), "{good:?}");
        }
        for bad in [
            "nvidia.com/",
            "/model",
            "a b",
            "x/y/z",
            "bad_prefix!/k",
            &"k".repeat(64),
        ] {
            assert!(check_setting(def, ck, &set(ck, bad)).is_err(), "{bad:?}");
        }
        assert_eq!(
            constraint_keys(None).into_iter().collect::<Vec<_>>(),
            ["nvidia.com/gpu.arch", "nvidia.com/gpu.model"]
        );
        assert!(constraint_keys(Some("")).is_empty());
        assert_eq!(
            constraint_keys(Some(" rack ,zone"))
                .into_iter()
                .collect::<Vec<_>>(),
            ["rack", "zone"]
        );
        let hk = HOST_NETWORK_FORBIDDEN_KEY;
        let def = setting_def(hk).unwrap();
        assert!(check_setting(def, hk, &set(hk, "gpu, login")).is_ok());
        let why = check_setting(def, hk, &set(hk, "gpu,../etc")).unwrap_err();
        assert!(why.contains("\"../etc\""), "{why}");
        assert!(host_network_allowed(None, "gpu"));
        assert!(!host_network_allowed(Some("login, gpu"), "gpu"));
        assert!(host_network_allowed(Some("login"), "gpu"));
        assert!(host_network_allowed(Some("gpu-big"), "gpu"));
    }

    #[test]
    fn only_annotations_that_do_not_constrain_are_warned_about() {
        let wf = gantry_spec::parse(
            "version: v4\njobs:\n  a:\n    image: {uri: docker://alpine}\n    resource:\n      annotations: {nvidia.com/gpu.model: T4, team: x}\n  b:\n    image: {uri: docker://alpine}\n    resource:\n      annotations: {nvidia.com/gpu.arch: hopper}\n",
        )
        .unwrap();
        let w = annotation_warnings(&wf, &constraint_keys(None));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("jobs.a.resource.annotations: team not acted on (this cluster places by nvidia.com/gpu.arch, nvidia.com/gpu.model;"), "{}", w[0]);
        assert_eq!(
            annotation_warnings(
                &wf,
                &constraint_keys(Some("team,nvidia.com/gpu.model,nvidia.com/gpu.arch"))
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            annotation_warnings(&wf, &constraint_keys(Some(""))).len(),
            2
        );
    }

    #[test]
    fn a_cluster_may_allow_fewer_retry_attempts_than_the_format() {
        assert_eq!(retry_cap(None), gantry_spec::MAX_RETRY_ATTEMPTS);
        assert_eq!(retry_cap(Some("3")), 3);
        assert_eq!(retry_cap(Some("0")), gantry_spec::MAX_RETRY_ATTEMPTS);
        let wf = gantry_spec::parse(
            "version: v4\njobs:\n  few:\n    image: {uri: docker://alpine}\n    policy:\n      retry: {attempts: 3}\n  many:\n    image: {uri: docker://alpine}\n    policy:\n      retry: {attempts: 4}\n",
        )
        .unwrap();
        assert!(check_retries(&wf, 4).is_ok());
        let why = check_retries(&wf, 3).unwrap_err();
        assert!(why.contains("at most 3 times"), "{why}");
        assert!(why.contains("jobs.many.policy.retry.attempts: 4"), "{why}");
        assert!(!why.contains("jobs.few"), "{why}");
    }

    #[test]
    fn a_cluster_may_allow_smaller_task_arrays_than_the_format() {
        assert_eq!(array_cap(None), gantry_spec::MAX_TASKS);
        assert_eq!(array_cap(Some("1000")), 1000);
        assert_eq!(array_cap(Some("0")), gantry_spec::MAX_TASKS);
        let wf = gantry_spec::parse(
            "version: v4\njobs:\n  small:\n    image: {uri: docker://alpine}\n    task-array: {start: 1, end: 1000}\n  big:\n    image: {uri: docker://alpine}\n    task-array: {start: 0, end: 1000}\n  one:\n    image: {uri: docker://alpine}\n",
        )
        .unwrap();
        assert!(check_arrays(&wf, 1001).is_ok());
        let why = check_arrays(&wf, 1000).unwrap_err();
        assert!(why.contains("at most 1000 tasks"), "{why}");
        assert!(why.contains("workflows.max_array_size=1000"), "{why}");
        assert!(
            why.contains("jobs.big.task-array (job at 6:3): 1001 tasks"),
            "{why}"
        );
        assert!(
            !why.contains("jobs.small") && !why.contains("jobs.one"),
            "{why}"
        );
    }

    #[test]
    fn a_v1_file_is_accepted_for_submit_with_a_warning() {
        // The same checks the server runs on `POST /workflows`, before the store.
        let req = SubmitWorkflow {
            spec: include_str!("../../gantry-spec/tests/fixtures/rclone_server_v1.yaml").into(),
            name: None,
        };
        let sub = submission(&req).unwrap_or_else(|r| panic!("{r:?}"));
        assert_eq!(sub.workflow.upgraded_from.as_deref(), Some("v1"));
        assert!(
            sub.warnings.iter().any(|w| w.contains("version: v1")),
            "{:?}",
            sub.warnings
        );
        assert_eq!(
            sub.workflow.jobs["rclone-server"].mounts["/data"].volume,
            "vol-i"
        );
    }

    #[test]
    fn storages_and_volumes_are_checked_before_the_store() {
        use gantry_api::v1::{AddStorage, CreateVolume};
        let st = |name: &str, path: &str, groups: Option<Vec<String>>| AddStorage {
            name: name.into(),
            driver: "hostpath".into(),
            path: path.into(),
            pool: None,
            groups,
        };
        assert!(add_storage(&st("nfs", "/mnt/nfs", None)).is_ok());
        assert!(add_storage(&st("nfs", "mnt/nfs", None))
            .unwrap_err()
            .contains("absolute"));
        assert!(add_storage(&st("nfs", "/mnt/../etc", None)).is_err());
        assert!(add_storage(&st("default", "/mnt", None))
            .unwrap_err()
            .contains("built-in"));
        assert!(add_storage(&st("../x", "/mnt", None)).is_err());
        assert!(add_storage(&st("nfs", "/mnt", Some(vec![]))).is_err());
        let mut other = st("nfs", "/mnt", None);
        other.driver = "nfs".into();
        assert!(add_storage(&other).unwrap_err().contains("hostpath"));
        let v = |name: &str, scope: Option<&str>| CreateVolume {
            name: name.into(),
            scope: scope.map(str::to_string),
            storage: None,
        };
        assert_eq!(
            create_volume(&v("data", None)).unwrap(),
            (VolumeScope::User, "data".into(), "default".into())
        );
        assert!(create_volume(&v("../data", None)).is_err());
        assert!(create_volume(&v("a/b", None)).is_err());
        assert!(create_volume(&v("data", Some("organization"))).is_err());
    }
}
