//! A workflow file compiled into what the controller needs: per job, its graph edges, retry and
//! timeout policy, resources, and the container to run. Stored as JSON with the workflow, so the
//! controller never re-parses YAML and a server upgrade cannot change a running workflow.

use std::collections::BTreeMap;

use base64::Engine;
use gantry_api::agent::{InjectedFile, Probe, ProbeCheck, ServicePort, TransferItem, TransferSpec};
use gantry_spec::{
    DepStatus, Dependency, EndpointKind, EndpointProtocol, EnvValue, EnvVar, FileSource,
    HttpScheme, ImageRef, Mount, MultinodeImpl, Policy, ProbeKind, Resource, RetryOn, Scope,
    VolumeKind, Workflow,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkflowPlan {
    pub jobs: Vec<JobPlan>,
    /// Images built by the workflow; each is also a job named `build:NAME`.
    #[serde(default)]
    pub builds: Vec<crate::builds::BuildPlan>,
    /// The persistent volumes, by the workflow's volume name.
    #[serde(default)]
    pub persistent: BTreeMap<String, PersistentPlan>,
}

/// A persistent volume a workflow mounts: what the file asks for, and (filled in by the server
/// at submit) the volume it is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PersistentPlan {
    /// `user` or `group`; `None` (v4 `use: persistent`): whichever of the two holds `name`.
    pub scope: Option<String>,
    pub name: String,
    /// A storage provisioner the file names (`use: S` or `volume://SCOPE/S/NAME`).
    pub storage: Option<String>,
    /// A legacy `reference:` makes the volume on first use; v4 `use:`/`name:` needs it made.
    pub made_on_use: bool,
    #[serde(default)]
    pub resolved: Option<ResolvedVolume>,
}

/// Where a persistent volume lives, for the agents.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResolvedVolume {
    pub id: uuid::Uuid,
    /// The storage's directory; `None`: the agent's storage root.
    pub root: Option<String>,
    /// The volume's directory beneath it.
    pub dir: String,
    /// The only pool whose nodes see the storage; `None`: every pool.
    #[serde(default)]
    pub pool: Option<String>,
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
    /// `user`, `group`, `organization` or `public`.
    pub scope: String,
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
}

/// Where a script is placed in the container.
const SCRIPT_PATH: &str = "/.gantry/script";

/// The argv that runs a `script`: its `#!` line is honoured by naming the interpreter, so the
/// script file need not be executable (injected files are read-only bind mounts).
fn script_argv(script: &str) -> Vec<String> {
    let first = script.lines().next().unwrap_or("");
    let mut argv: Vec<String> = match first.strip_prefix("#!") {
        Some(rest) => rest.split_whitespace().map(str::to_string).collect(),
        None => vec![],
    };
    if argv.is_empty() {
        argv.push("/bin/sh".into());
    }
    argv.push(SCRIPT_PATH.into());
    argv
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

/// What the file asks for that Gantry cannot do yet (the submit is refused, naming each), and
/// hints it accepts but does not act on (reported as warnings).
#[derive(Debug, Default)]
pub struct Support {
    pub unsupported: Vec<String>,
    pub ignored: Vec<String>,
}

pub fn support(wf: &Workflow) -> Support {
    let mut s = Support::default();
    for (name, v) in &wf.volumes {
        match &v.kind {
            VolumeKind::Ephemeral => {}
            VolumeKind::Persistent { .. } => {}
            VolumeKind::Host { .. } => s
                .unsupported
                .push(format!("volumes.{name}: host volumes are not supported")),
        }
        // No driver here has quotas, and there is one storage to choose from per name.
        if v.size.is_some() {
            s.ignored
                .push(format!("volumes.{name}.size: not acted on (no quotas)"));
        }
        if !v.annotations.is_empty() {
            s.ignored.push(format!(
                "volumes.{name}.annotations: not acted on (storage is chosen by `use:`)"
            ));
        }
        if v.provisioner.is_some() && v.kind == VolumeKind::Ephemeral {
            s.unsupported.push(format!(
                "volumes.{name}: ephemeral volumes live beneath each node's storage root; a storage provisioner holds persistent volumes only (give the volume a `name`)"
            ));
        }
        for (i, t) in v.ingress.iter().enumerate() {
            let at = format!("volumes.{name}.ingress[{i}]");
            transfer_support(&mut s, &at, &t.source, "source", INGRESS_SOURCES);
            transfer_support(&mut s, &at, &t.destination, "destination", &["file"]);
        }
        for (i, t) in v.egress.iter().enumerate() {
            let at = format!("volumes.{name}.egress[{i}]");
            transfer_support(&mut s, &at, &t.source, "source", &["file"]);
            transfer_support(
                &mut s,
                &at,
                &t.destination,
                "destination",
                EGRESS_DESTINATIONS,
            );
        }
    }
    for st in steps(wf) {
        let at = st.at();
        match st.image {
            ImageRef::Uri {
                uri,
                secret,
                secrets,
                decryption_secret,
                ..
            } => {
                if let Some(rest) = uri.strip_prefix("oras://") {
                    // Apptainer's rule: an oras:// image has no default registry.
                    let host = rest.split('/').next().unwrap_or("");
                    if !rest.contains('/')
                        || !(host.contains('.') || host.contains(':') || host == "localhost")
                    {
                        s.unsupported.push(format!(
                            "{at}.image.uri: {uri:?}: an oras:// image names its registry (oras://REGISTRY/REPO:TAG)"
                        ));
                    }
                } else if !(uri.starts_with("docker://") || uri.starts_with("oci://")) {
                    s.unsupported.push(format!(
                        "{at}.image.uri: {uri:?}: only docker://, oras:// and oci:// images are supported"
                    ));
                }
                if !secrets.is_empty() {
                    s.unsupported.push(format!(
                        "{at}.image.secrets: `secrets` is not supported yet (`secret` is)"
                    ));
                }
                if decryption_secret.is_some() {
                    s.unsupported.push(format!(
                        "{at}.image.decryption-secret: encrypted SIF images are not supported yet"
                    ));
                }
                if let Some(sec) = secret {
                    if !sec.starts_with("secret://") {
                        s.unsupported.push(format!(
                            "{at}.image.secret: {sec:?} is not a secret:// reference"
                        ));
                    }
                }
            }
            ImageRef::Build(_) => {}
        }
        if let Some(m) = st.multinode {
            if st.service.is_some() {
                s.unsupported.push(format!(
                    "{at}.multinode: a service runs on one node; multinode is for jobs (move the step under `jobs`)"
                ));
            } else if m.implementation == MultinodeImpl::Gasnet {
                s.unsupported.push(format!(
                    "{at}.multinode.implementation: gasnet multinode jobs are not supported: Gantry \
                     launches openmpi, mpich and generic; use `implementation: generic` and \
                     GASNet's ssh spawner with GASNET_SSH_CMD=$MULTINODE_SSH_WRAPPER"
                ));
            }
        }
        if let Some(n) = st.job_network {
            if n.isolated || !n.expose_tcp.is_empty() || !n.expose_udp.is_empty() {
                s.unsupported.push(format!(
                    "{at}.network: isolated job networks and `expose-tcp`/`expose-udp` are not \
                     supported yet; `network.host: true` is (the job uses its node's network), \
                     or make the step a service with `network.ports`"
                ));
            }
        }
        if st.policy.restart.is_some() {
            s.ignored.push(format!("{at}.policy.restart: not acted on"));
        }
        let c = &st.resource.cpu;
        if c.affinity.is_some() || c.threads || c.sockets.is_some() {
            s.ignored.push(format!(
                "{at}.resource.cpu: affinity, threads and sockets are not acted on"
            ));
        }
        if st.preemptible {
            s.ignored.push(format!("{at}.preemptible: not acted on"));
        }
    }
    for (name, svc) in &wf.services {
        let at = format!("services.{name}");
        if svc.autoscaler.is_some() {
            s.unsupported
                .push(format!("{at}.autoscaler: autoscaling is not supported yet"));
        }
        if svc.dynamic_config.is_some() {
            s.unsupported.push(format!(
                "{at}.dynamic-config: dynamic configuration is not supported yet"
            ));
        }
        for e in &svc.network.endpoints {
            if e.protocol != EndpointProtocol::Http {
                s.unsupported.push(format!(
                    "{at}.network.endpoints.{}: only http endpoints are supported yet",
                    e.name
                ));
            }
        }
        if let Some(ProbeKind::Grpc { .. }) = svc.readiness_probe.as_ref().map(|p| &p.kind) {
            s.unsupported.push(format!(
                "{at}.readiness-probe.grpc: gRPC probes are not supported yet"
            ));
        }
    }
    if wf.preemptible.is_some() {
        s.ignored.push("preemptible: not acted on".into());
    }
    s
}

/// Where ingress reads from and egress writes to (the volume's side is always `file://`).
const INGRESS_SOURCES: &[&str] = &["s3", "http", "https", "file"];
const EGRESS_DESTINATIONS: &[&str] = &["s3"];

fn transfer_support(
    s: &mut Support,
    at: &str,
    u: &gantry_spec::UriSpec,
    side: &str,
    schemes: &[&str],
) {
    let scheme = u.uri.split_once("://").map_or("", |(s, _)| s);
    if !schemes.contains(&scheme) {
        let known = if schemes.is_empty() {
            "none yet".to_string()
        } else {
            schemes
                .iter()
                .map(|s| format!("{s}://"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        s.unsupported.push(format!(
            "{at}.{side}.uri: {:?}: this side of a transfer takes {known}",
            u.uri
        ));
    }
    if scheme == "s3" && u.secret.is_none() {
        s.unsupported.push(format!(
            "{at}.{side}.secret: {:?} needs an s3 secret (`secret: secret://SCOPE/NAME`, made with \
             `gantry secret set NAME --type s3`)",
            u.uri
        ));
    }
    if let Some(sec) = &u.secret {
        if !sec.starts_with("secret://") {
            s.unsupported.push(format!(
                "{at}.{side}.secret: {sec:?} is not a secret:// reference"
            ));
        }
    }
    if !u.secrets.is_empty() || u.decryption_secret.is_some() {
        s.unsupported.push(format!(
            "{at}.{side}: `secrets` and `decryption-secret` are not supported yet (`secret` is)"
        ));
    }
    if u.cache.is_some() || u.cache_ttl.is_some() {
        s.ignored.push(format!(
            "{at}.{side}: `cache` is not acted on (every run transfers again)"
        ));
    }
}

/// A transfer task: the one step that moves a volume's data in one direction.
fn transfer_job(name: String, volume: &str, direction: &str, items: Vec<TransferItem>) -> JobPlan {
    JobPlan {
        // Named so the controller places its volume, and cleans it up, like a job's.
        mounts: vec![("/".into(), volume.into())],
        transfer: Some(TransferSpec {
            volume: volume.into(),
            root: None,
            direction: direction.into(),
            items,
        }),
        ..JobPlan::internal(name, String::new())
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

fn transfer_items(
    wf: &Workflow,
    list: &[gantry_spec::Transfer],
    ingress: bool,
) -> Vec<TransferItem> {
    list.iter()
        .map(|t| {
            let remote = if ingress { &t.source } else { &t.destination };
            let content = t
                .source
                .uri
                .strip_prefix("file://")
                .filter(|_| ingress)
                .map(|name| b64(wf.files.get(name).map(String::as_str).unwrap_or_default()));
            let policy = t.policy.clone().unwrap_or_default();
            TransferItem {
                source: t.source.uri.clone(),
                destination: t.destination.uri.clone(),
                content,
                secret: remote.secret.clone(),
                credential: None,
                timeout_ms: policy.timeout_execute.map(|d| d.as_millis() as u64),
                attempts: policy.retry.attempts.max(1),
            }
        })
        .collect()
}

/// Adds a volume's transfers as steps: `ingress:VOLUME` before every step that mounts the
/// volume, `egress:VOLUME` after all of them have FINISHED.
fn attach_transfers(wf: &Workflow, jobs: &mut Vec<JobPlan>) {
    let mut first = vec![];
    for (vol, v) in &wf.volumes {
        let users: Vec<String> = jobs
            .iter()
            .filter(|j| j.mounts.iter().any(|(_, m)| m == vol))
            .map(|j| j.name.clone())
            .collect();
        if !v.ingress.is_empty() {
            let name = format!("ingress:{vol}");
            for j in jobs.iter_mut().filter(|j| users.contains(&j.name)) {
                j.depends_on.push(DepPlan {
                    name: name.clone(),
                    running: false,
                });
            }
            first.push(transfer_job(
                name,
                vol,
                "ingress",
                transfer_items(wf, &v.ingress, true),
            ));
        }
        if !v.egress.is_empty() {
            let mut job = transfer_job(
                format!("egress:{vol}"),
                vol,
                "egress",
                transfer_items(wf, &v.egress, false),
            );
            job.depends_on = users
                .into_iter()
                .map(|name| DepPlan {
                    name,
                    running: false,
                })
                .collect();
            jobs.push(job);
        }
    }
    jobs.splice(0..0, first);
}

/// The fields jobs and services share, so both compile through one path.
struct Step<'a> {
    name: &'a str,
    kind: &'static str,
    image: &'a ImageRef,
    command: &'a [String],
    script: Option<&'a str>,
    args: &'a [String],
    env: &'a [EnvVar],
    cwd: Option<&'a str>,
    mounts: &'a BTreeMap<String, Mount>,
    files: &'a BTreeMap<String, FileSource>,
    resource: &'a Resource,
    depends_on: &'a [Dependency],
    policy: &'a Policy,
    multinode: Option<&'a gantry_spec::Multinode>,
    job_network: Option<&'a gantry_spec::JobNetwork>,
    preemptible: bool,
    task_array: Option<&'a gantry_spec::TaskArray>,
    service: Option<&'a gantry_spec::Service>,
}

impl Step<'_> {
    fn at(&self) -> String {
        format!("{}.{}", self.kind, self.name)
    }

    /// Multinode members share their node's network as MPI under Apptainer does: ranks talk
    /// over the nodes' own interfaces.
    fn host_network(&self) -> bool {
        self.multinode.is_some()
            || self.job_network.is_some_and(|n| n.host)
            || self.service.is_some_and(|s| s.network.host)
    }
}

/// Every `oci://` image the workflow names, with where: steps' `image.uri` and image
/// recipes' `from`.
pub fn layouts(wf: &Workflow) -> Vec<(String, &str)> {
    let mut out: Vec<(String, &str)> = steps(wf)
        .into_iter()
        .filter_map(|st| match st.image {
            ImageRef::Uri { uri, .. } if uri.starts_with("oci://") => {
                Some((format!("{}.image.uri", st.at()), uri.as_str()))
            }
            _ => None,
        })
        .collect();
    for (name, r) in &wf.images {
        if r.from.starts_with("oci://") {
            out.push((format!("images.{name}.from"), r.from.as_str()));
        }
    }
    out
}

fn steps(wf: &Workflow) -> Vec<Step<'_>> {
    let jobs = wf.jobs.iter().map(|(name, j)| Step {
        name,
        kind: "jobs",
        image: &j.image,
        command: &j.command,
        script: j.script.as_deref(),
        args: &j.args,
        env: &j.env,
        cwd: j.cwd.as_deref(),
        mounts: &j.mounts,
        files: &j.files,
        resource: &j.resource,
        depends_on: &j.depends_on,
        policy: &j.policy,
        multinode: j.multinode.as_ref(),
        job_network: j.network.as_ref(),
        preemptible: j.preemptible.is_some(),
        task_array: j.task_array.as_ref(),
        service: None,
    });
    let services = wf.services.iter().map(|(name, s)| Step {
        name,
        kind: "services",
        image: &s.image,
        command: &s.command,
        script: s.script.as_deref(),
        args: &s.args,
        env: &s.env,
        cwd: s.cwd.as_deref(),
        mounts: &s.mounts,
        files: &s.files,
        resource: &s.resource,
        depends_on: &s.depends_on,
        policy: &s.policy,
        multinode: s.multinode.as_ref(),
        job_network: None,
        preemptible: s.preemptible.is_some(),
        task_array: None,
        service: Some(s),
    });
    jobs.chain(services).collect()
}

fn scope_str(s: Scope) -> &'static str {
    match s {
        Scope::User => "user",
        Scope::Group => "group",
        Scope::Organization => "organization",
        Scope::Public => "public",
    }
}

fn service_plan(s: &gantry_spec::Service) -> ServicePlan {
    let ports: Vec<ServicePort> = s
        .network
        .ports
        .iter()
        .map(|p| ServicePort {
            name: p.name.clone(),
            port: p.port,
            protocol: format!("{:?}", p.protocol).to_lowercase(),
        })
        .collect();
    let readiness = s.readiness_probe.as_ref().and_then(|p| {
        let check = match &p.kind {
            ProbeKind::Exec { command } => ProbeCheck::Exec {
                command: command.clone(),
            },
            ProbeKind::HttpGet {
                path,
                port,
                scheme,
                http_headers,
            } => ProbeCheck::HttpGet {
                path: path.clone(),
                port: *port,
                scheme: match scheme {
                    HttpScheme::Http => "http".into(),
                    HttpScheme::Https => "https".into(),
                },
                headers: http_headers
                    .iter()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect(),
            },
            ProbeKind::TcpSocket { port } => ProbeCheck::TcpSocket { port: *port },
            ProbeKind::Grpc { .. } => return None,
        };
        Some(Probe {
            check,
            initial_delay_seconds: p.initial_delay_seconds,
            period_seconds: p.period_seconds.max(1),
            timeout_seconds: p.timeout_seconds.max(1),
            success_threshold: p.success_threshold.max(1),
            failure_threshold: p.failure_threshold.max(1),
        })
    });
    let endpoints = s
        .network
        .endpoints
        .iter()
        .map(|e| EndpointPlan {
            name: e.name.clone(),
            port: ports
                .iter()
                .find(|p| p.name == e.port_name)
                .map(|p| p.port)
                .unwrap_or_default(),
            kind: match e.kind {
                EndpointKind::Path => "path".into(),
                EndpointKind::Subdomain => "subdomain".into(),
            },
            scope: scope_str(e.scope).into(),
            attach: e.attach.clone(),
        })
        .collect();
    ServicePlan {
        persist: s.persist,
        ports,
        readiness,
        endpoints,
    }
}

/// Compiles a validated workflow. Call [`support`] first: this assumes only supported features.
pub fn compile(wf: &Workflow) -> WorkflowPlan {
    let mut jobs = Vec::with_capacity(wf.jobs.len() + wf.services.len());
    for st in steps(wf) {
        let mut files: Vec<InjectedFile> = st
            .files
            .iter()
            .map(|(dest, src)| {
                let content = match src {
                    FileSource::File(f) => wf.files.get(f).cloned().unwrap_or_default(),
                    FileSource::Inline(c) => c.clone(),
                };
                InjectedFile {
                    target: dest.clone(),
                    content: b64(&content),
                }
            })
            .collect();
        let mut argv = st.command.to_vec();
        if let Some(script) = st.script {
            argv = script_argv(script);
            files.push(InjectedFile {
                target: SCRIPT_PATH.into(),
                content: b64(script),
            });
        }
        argv.extend(st.args.iter().cloned());
        // Secret values stay references here; they are filled in only when sent to an agent.
        let env = st
            .env
            .iter()
            .map(|e| match &e.value {
                EnvValue::Plain(v) | EnvValue::Secret(v) => format!("{}={v}", e.name),
            })
            .collect();
        let cores = st.resource.cpu.cores.max(1);
        let memory_bytes = st.resource.memory.size.map(|m| {
            if st.resource.memory.by_core {
                m.saturating_mul(cores as u64)
            } else {
                m
            }
        });
        jobs.push(JobPlan {
            name: st.name.to_string(),
            depends_on: st
                .depends_on
                .iter()
                .map(|d| DepPlan {
                    name: d.name.clone(),
                    running: d.status == DepStatus::Running,
                })
                .collect(),
            task_array: st.task_array.map(|t| (t.start, t.end)),
            concurrency: st.task_array.and_then(|t| t.concurrency),
            attempts: st.policy.retry.attempts.max(1),
            retry_on_failure: st.policy.retry.on.contains(&RetryOn::Failure),
            retry_on_node: st.policy.retry.on.contains(&RetryOn::Node),
            timeout_ms: st.policy.timeout_execute.map(|d| d.as_millis() as u64),
            image: st.image.uri().unwrap_or_default().to_string(),
            image_secret: match st.image {
                ImageRef::Uri { secret, .. } => secret.clone(),
                ImageRef::Build(_) => None,
            },
            argv,
            env,
            cwd: st.cwd.map(str::to_string),
            mounts: st
                .mounts
                .iter()
                .map(|(path, m)| (path.clone(), m.volume.clone()))
                .collect(),
            files,
            cores,
            memory_bytes,
            devices: st.resource.devices.clone(),
            exclusive: st.resource.exclusive,
            service: st.service.map(service_plan),
            image_build: st.image.build_name().map(str::to_string),
            build: None,
            transfer: None,
            multinode: st.multinode.map(|m| MultinodePlan {
                nodes: m.nodes,
                implementation: match m.implementation {
                    MultinodeImpl::OpenMpi => "openmpi",
                    MultinodeImpl::Mpich => "mpich",
                    MultinodeImpl::Gasnet => "gasnet",
                    MultinodeImpl::Generic => "generic",
                }
                .into(),
                procs_per_node: m.procs_per_node,
            }),
            host_network: st.host_network(),
            annotations: st.resource.annotations.clone(),
            host_ports: match st.service {
                Some(svc) if svc.network.host => svc.network.ports.iter().map(|p| p.port).collect(),
                _ => vec![],
            },
        });
    }
    // Scheduling order follows the graph, so earlier steps are placed first.
    let order = wf.topo_order();
    jobs.sort_by_key(|j| {
        order
            .iter()
            .position(|n| *n == j.name)
            .unwrap_or(usize::MAX)
    });
    let persistent = wf
        .volumes
        .iter()
        .filter_map(|(name, v)| match &v.kind {
            VolumeKind::Persistent { scope, name: vol } => Some((
                name.clone(),
                PersistentPlan {
                    scope: match (v.made_on_use, scope) {
                        (false, _) => None,
                        (true, Scope::Group) => Some("group".into()),
                        (true, _) => Some("user".into()),
                    },
                    name: vol.clone(),
                    storage: v.provisioner.clone(),
                    made_on_use: v.made_on_use,
                    resolved: None,
                },
            )),
            _ => None,
        })
        .collect();
    attach_transfers(wf, &mut jobs);
    WorkflowPlan {
        jobs,
        builds: vec![],
        persistent,
    }
}

impl WorkflowPlan {
    /// Whether any step is a service: then every container of the workflow gets a network on
    /// its node's bridge, so jobs reach services as `<service>.svc`.
    pub fn has_services(&self) -> bool {
        self.jobs.iter().any(|j| j.service.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_argv_honours_the_shebang() {
        assert_eq!(
            script_argv("#!/bin/bash -e\necho"),
            ["/bin/bash", "-e", SCRIPT_PATH]
        );
        assert_eq!(script_argv("#! /bin/sh\necho"), ["/bin/sh", SCRIPT_PATH]);
        assert_eq!(script_argv("echo hi"), ["/bin/sh", SCRIPT_PATH]);
        assert_eq!(script_argv(""), ["/bin/sh", SCRIPT_PATH]);
    }

    #[test]
    fn oras_images_are_supported_when_they_name_a_registry_and_are_not_encrypted() {
        let wf = |image: &str| {
            gantry_spec::parse(&format!(
                "version: v4\njobs:\n  a:\n    image: {image}\n    command: [true]\n"
            ))
            .unwrap()
        };
        assert!(support(&wf("{uri: oras://ghcr.io/org/app:1}"))
            .unsupported
            .is_empty());
        assert_eq!(
            support(&wf("{uri: oras://org/app:1}")).unsupported,
            ["jobs.a.image.uri: \"oras://org/app:1\": an oras:// image names its registry (oras://REGISTRY/REPO:TAG)"]
        );
        assert_eq!(
            support(&wf(
                "{uri: oras://ghcr.io/org/app:1, decryption-secret: secret://user/key}"
            ))
            .unsupported,
            ["jobs.a.image.decryption-secret: encrypted SIF images are not supported yet"]
        );
    }

    #[test]
    fn persistent_volumes_compile_into_what_the_server_resolves() {
        let wf = gantry_spec::parse(
            r#"version: v4
volumes:
  named: {use: persistent, name: results, size: 1GB}
  home: {reference: volume://user/persistent}
  team: {reference: volume://group/lustre/models}
  fds: {name: fds, reference: volume://user/ephemeral}
  odd: {use: lustre}
jobs:
  j:
    image: {uri: docker://alpine}
    command: ["true"]
    mounts: {/a: named, /b: home, /c: team, /d: fds}
"#,
        )
        .unwrap();
        let s = support(&wf);
        assert_eq!(
            s.unsupported,
            ["volumes.odd: ephemeral volumes live beneath each node's storage root; a storage provisioner holds persistent volumes only (give the volume a `name`)"]
        );
        assert_eq!(s.ignored, ["volumes.named.size: not acted on (no quotas)"]);
        let p = compile(&wf).persistent;
        assert_eq!(
            p.keys().collect::<Vec<_>>(),
            ["home", "named", "team"],
            "the ephemeral ones stay out"
        );
        let want =
            |scope: Option<&str>, name: &str, storage: Option<&str>, made: bool| PersistentPlan {
                scope: scope.map(str::to_string),
                name: name.into(),
                storage: storage.map(str::to_string),
                made_on_use: made,
                resolved: None,
            };
        assert_eq!(p["named"], want(None, "results", None, false));
        assert_eq!(p["home"], want(Some("user"), "default", None, true));
        assert_eq!(
            p["team"],
            want(Some("group"), "models", Some("lustre"), true)
        );
    }

    #[test]
    fn multinode_and_host_network_compile_into_the_plan() {
        let wf = gantry_spec::parse(
            r#"version: v4
jobs:
  mpi:
    image: {uri: docker://alpine}
    command: [hostname]
    multinode: {nodes: 3, implementation: ompi, procs-per-node: 2}
    resource:
      cpu: {cores: 4}
      annotations: {nvidia.com/gpu.model: T4, team: a}
  hostjob:
    image: {uri: docker://alpine}
    network: {host: true}
services:
  web:
    image: {uri: docker://alpine}
    network:
      host: true
      ports: [{name: http, port: 8080}, {name: dns, port: 5353, protocol: udp}]
  plain:
    image: {uri: docker://alpine}
    network:
      ports: [{name: http, port: 80}]
"#,
        )
        .unwrap();
        let s = support(&wf);
        assert!(s.unsupported.is_empty(), "{:?}", s.unsupported);
        assert!(
            !s.ignored.iter().any(|w| w.contains("annotations")),
            "which annotations are acted on is the cluster's setting: {:?}",
            s.ignored
        );
        let p = compile(&wf);
        let mpi = p.job("mpi").unwrap();
        assert_eq!(
            mpi.multinode,
            Some(MultinodePlan {
                nodes: 3,
                implementation: "openmpi".into(),
                procs_per_node: Some(2)
            })
        );
        assert!(mpi.host_network, "members share their node's network");
        assert_eq!(mpi.task_indexes(), Some(0..=2));
        assert_eq!(mpi.annotations.len(), 2);
        assert_eq!(mpi.annotations["nvidia.com/gpu.model"], "T4");
        assert!(mpi.host_ports.is_empty());
        let hostjob = p.job("hostjob").unwrap();
        assert!(hostjob.host_network && hostjob.multinode.is_none());
        assert_eq!(hostjob.task_indexes(), None);
        let web = p.job("web").unwrap();
        assert!(web.host_network);
        assert_eq!(web.host_ports, [8080, 5353]);
        let plain = p.job("plain").unwrap();
        assert!(!plain.host_network && plain.host_ports.is_empty());
        // A plan stored before issue 15 reads back as single-node, bridge-networked.
        let mut old = serde_json::to_value(plain).unwrap();
        for k in ["multinode", "host_network", "annotations", "host_ports"] {
            old.as_object_mut().unwrap().remove(k);
        }
        let back: JobPlan = serde_json::from_value(old).unwrap();
        assert!(!back.host_network && back.multinode.is_none());
    }

    #[test]
    fn gasnet_multinode_services_and_isolated_job_networks_are_refused_precisely() {
        let wf = gantry_spec::parse(
            r#"version: v4
jobs:
  gas:
    image: {uri: docker://alpine}
    multinode: {nodes: 2, implementation: gasnet}
  iso:
    image: {uri: docker://alpine}
    network: {isolated: true, expose-tcp: [80]}
services:
  svc:
    image: {uri: docker://alpine}
    multinode: {nodes: 2, implementation: openmpi}
"#,
        )
        .unwrap();
        let s = support(&wf).unsupported;
        assert_eq!(s.len(), 3, "{s:?}");
        assert!(s[0].starts_with("jobs.gas.multinode.implementation: gasnet multinode jobs are not supported: Gantry launches openmpi, mpich and generic; use `implementation: generic`"), "{}", s[0]);
        assert!(s[0].contains("$MULTINODE_SSH_WRAPPER"), "{}", s[0]);
        assert!(
            s[1].starts_with("jobs.iso.network: isolated job networks"),
            "{}",
            s[1]
        );
        assert!(s[1].contains("`network.host: true` is"), "{}", s[1]);
        assert!(
            s[2].starts_with("services.svc.multinode: a service runs on one node"),
            "{}",
            s[2]
        );
    }
}
