//! The agent's life: connect to the server over one WebSocket, register, heartbeat, and run
//! what the server assigns. Containers outlive the agent (each runs under its own shim), so on
//! start the agent re-adopts every container in its state directory, and on every reconnect it
//! reports everything it knows again: the server ignores what it already has.
//!
//! Networked attempts (`Assignment.network`) get a network namespace on this node's bridge
//! (`crate::net`, with the subnet from `Welcome`), an `/etc/hosts` and an `/etc/resolv.conf`.
//! An attempt is reported RUNNING with its address once its process runs, and for a service
//! with a readiness probe only once the probe passes (`crate::probe`); a restarted agent resumes
//! the probes of services it had not yet found ready.
//!
//! An assignment with a `build` is an image build (`crate::build`): PREPARING while its base is
//! pulled, RUNNING while its steps run, and its end reported from its exit code like a
//! container's. Its output is shipped from the same files. A build runs inside the agent, so a
//! restarted agent reports it lost (the server may retry it).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use gantry_api::agent::{
    AgentMessage, Assignment, AttemptPhase, AttemptReport, Capacity, ChoreKind, LogChunk, Probe,
    ServerMessage, Stream, TransferEnded, TransferItem, TransferOutcome,
};
use gantry_api::v1::TransferProgress;
use gantry_api::EndCause;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};
use uuid::Uuid;

use crate::beneath::{self, Dir, Owner, Rel, Resolve};
use crate::build::{BuildEnv, Builder, StopSignal};
use crate::image::{ImageStore, PullConfig};
use crate::lock;
use crate::metrics::{self, HealthConfig, Metrics};
use crate::multinode;
use crate::net::{self, NetConfig, Network};
use crate::probe;
use crate::runtime::{self, ContainerSpec, ContainerState, Runtime, RuntimeConfig, StartOptions};

/// How long a networked attempt waits for the server to give this node its subnet.
const SUBNET_WAIT: Duration = Duration::from_secs(10);
/// Written in a service's container directory once its readiness probe has passed, so a
/// restarted agent does not probe it again.
const READY_MARKER: &str = "ready";
/// Written in a host-network container's directory: the node's address it was started at (and
/// is reported at), for a restarted agent to report it again.
const ADDRESS_MARKER: &str = "node-address";
/// How often (ms) a monitor looks at a running attempt: new output is shipped at this pace.
/// Ends and readiness wake it at once.
const MONITOR_BEAT: u64 = 200;
/// How long the agent waits for a server to take its connection (TCP, TLS and the WebSocket
/// handshake).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// `http://host:port` of the server; several, comma-separated, for replicas without a
    /// load balancer in front (the agent moves to the next when one refuses or fails).
    pub server: String,
    pub token: String,
    pub pool: String,
    pub name: String,
    pub capacity: Capacity,
    /// Shared by all agents of a pool (a shared filesystem in a cluster).
    pub storage_root: PathBuf,
    /// This agent's own: containers, image cache, runc root.
    pub state_dir: PathBuf,
    pub pull: PullConfig,
    /// Where to serve Prometheus metrics (`GET /metrics`); port 0 picks a free one. `None`
    /// serves none (and runs no health checks).
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The node's Node Exporter (`host:port`), announced for Prometheus' service discovery.
    pub node_exporter: Option<String>,
    /// The host ids of job containers' user namespaces, where the node can run them so (see
    /// `runtime::RuntimeConfig::job_userns`); `None` runs them without.
    pub job_userns: Option<runtime::IdRange>,
    /// Ports of the host that containers may reach (`--host-allow tcp/7070`); the server's
    /// own port needs none when the agent reaches the server at a host address.
    pub host_allow: Vec<net::HostPort>,
    /// The administrator's labels (`--label KEY=VALUE`), over those the agent finds.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The node's address as other nodes reach it (`--advertise`); `None`: the local address
    /// of the connection to the server.
    pub advertise: Option<String>,
    /// Where the exec service listens (`--exec-listen`, port 0: any free one): multinode
    /// members start processes in each other's containers through it. `None`: no service, and
    /// this node cannot run multinode members.
    pub exec_listen: Option<std::net::SocketAddr>,
}

impl AgentConfig {
    /// The server URLs, in the order they are tried.
    pub fn servers(&self) -> Vec<&str> {
        servers(&self.server)
    }
}

/// A `--server` value's URLs: comma-separated, blanks ignored.
pub fn servers(list: &str) -> Vec<&str> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Detects this machine's cores and memory.
pub fn detect_capacity() -> Capacity {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    let memory_bytes = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0);
    Capacity {
        cpus,
        memory_bytes,
        devices: Default::default(),
    }
}

/// What the agent knows of one attempt.
struct Tracked {
    /// The cause the server gave when it asked for a stop.
    stop_cause: Option<EndCause>,
    /// The grace it gave with it.
    stop_grace: Duration,
    /// The final report, once the process is gone.
    done: Option<AttemptPhase>,
    /// Reported to the server on the current connection.
    running_sent: bool,
    final_sent: bool,
    /// Bytes of (stdout, stderr) sent on this connection and acknowledged as stored.
    sent: (u64, u64),
    acked: (u64, u64),
    started: bool,
    /// The container's address on the node's bridge, when it has a network.
    address: Option<String>,
    /// RUNNING may be reported: always for jobs and for services without a probe; for the
    /// others once their readiness probe has passed.
    ready: bool,
    /// Set for an image build run by this process: how to stop it.
    build: Option<StopSignal>,
    /// Wakes the attempt's monitor when something it reports changed (ready, ended).
    wake: Arc<tokio::sync::Notify>,
}

impl Tracked {
    fn new(started: bool) -> Self {
        Tracked {
            stop_cause: None,
            stop_grace: Duration::ZERO,
            done: None,
            running_sent: false,
            final_sent: false,
            sent: (0, 0),
            acked: (0, 0),
            started,
            address: None,
            ready: false,
            build: None,
            wake: Arc::new(tokio::sync::Notify::new()),
        }
    }
}

type Tracker = Arc<Mutex<HashMap<Uuid, Tracked>>>;

#[derive(Clone)]
struct Agent {
    config: Arc<AgentConfig>,
    runtime: Arc<Runtime>,
    net: Arc<Network>,
    images: Arc<ImageStore>,
    builder: Builder,
    tracked: Tracker,
    /// The current connection's outbound queue; replaced on every reconnect.
    out: Arc<Mutex<Option<mpsc::UnboundedSender<AgentMessage>>>>,
    metrics: Metrics,
    /// Where metrics are served, once bound.
    metrics_addr: Option<std::net::SocketAddr>,
    /// Container starts in progress at once: see [`start_permits`].
    starts: Arc<tokio::sync::Semaphore>,
    /// The server's `Peers`, applied in the order they came (each is whole: a late older one
    /// must not undo a newer one).
    peers: std::sync::mpsc::Sender<(Uuid, Vec<String>)>,
    /// The current server records `TransferEnded` (its `Welcome` said so).
    transfer_events: Arc<AtomicBool>,
    /// The current server records `ProbeFailed` (its `Welcome` said so).
    probe_results: Arc<AtomicBool>,
    /// Where the exec service listens, once bound.
    exec_addr: Option<std::net::SocketAddr>,
    /// The node's address as other nodes reach it: `--advertise`, else learnt from the
    /// connection to the server (what host-network containers are reached at).
    address: Arc<Mutex<Option<std::net::IpAddr>>>,
}

impl Agent {
    fn send(&self, msg: AgentMessage) -> bool {
        lock(&self.out)
            .as_ref()
            .is_some_and(|tx| tx.send(msg).is_ok())
    }

    fn report(&self, attempt_id: Uuid, phase: AttemptPhase) -> bool {
        self.send(AgentMessage::Status(AttemptReport { attempt_id, phase }))
    }
}

/// Runs the agent until the process is stopped. Reconnects with backoff.
fn runtime_config(config: &AgentConfig) -> RuntimeConfig {
    RuntimeConfig::new(
        config.state_dir.join("runtime"),
        config.state_dir.join("runc"),
        format!("gantry/{}", config.name),
    )
}

/// For an agent that stopped cleanly: with no container of its own left, its container bridge
/// goes, and the /24 route with it. Left behind, that route would catch the traffic of a later
/// cluster on this host given an overlapping subnet (its services would never turn ready).
/// Containers outlive their agent, so a node that still has some keeps its bridge. Returns
/// whether the bridge was removed (or there was none).
pub fn release_if_idle(config: &AgentConfig) -> anyhow::Result<bool> {
    if !runtime_config(config).containers().is_empty() {
        return Ok(false);
    }
    let net = Network::new(NetConfig::for_agent(&config.state_dir, &config.name))?;
    if !net.attachments().is_empty() {
        return Ok(false);
    }
    net.remove_bridge()?;
    Ok(true)
}

pub async fn run(config: AgentConfig) -> anyhow::Result<()> {
    crate::labels::check(&config.labels).map_err(anyhow::Error::msg)?;
    for (dir, keep) in [
        (&config.state_dir, crate::PASS_THROUGH),
        // Volumes are bind-mounted by path: nothing needs to list the root they live in.
        (&config.storage_root, crate::PASS_THROUGH),
    ] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        crate::restrict_dir(dir, keep).with_context(|| format!("restricting {}", dir.display()))?;
    }
    let mut rc = runtime_config(&config);
    rc.job_userns = config.job_userns;
    // Local agents of one `gantry up` share the storage root and the pid, and each removes
    // its probe when done: each probes in a directory of its own, or one removes another's
    // mid-probe and that agent runs its jobs without a user namespace.
    static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let probe = config.storage_root.join(format!(
        ".userns-probe.{}.{}",
        std::process::id(),
        PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    if let Some(Err(why)) = rc
        .job_userns
        .map(|range| runtime::userns::probe_idmapped_dir(range.slot(0), &probe))
    {
        // Volumes are mounted through the container's mapping, so their filesystem must
        // take idmapped mounts too (NFS does not).
        tracing::warn!(
            "job containers run without a user namespace: the storage root {} cannot be \
             mounted with shifted owners ({why})",
            config.storage_root.display()
        );
        rc.job_userns = None;
    }
    // It compiles the seccomp profile and probes user namespaces (forking): blocking work.
    let runtime = tokio::task::spawn_blocking(move || Runtime::new(rc)).await??;
    // The server's object cache is a registry too: plain HTTP when the server is.
    let mut pull = config.pull.clone();
    for server in config.servers() {
        let Some(host) = server_registry(server).filter(|_| server.starts_with("http://")) else {
            continue;
        };
        if !pull.insecure_hosts.contains(&host) {
            pull.insecure_hosts.push(host);
        }
    }
    let images = Arc::new(ImageStore::new(config.state_dir.join("images"), pull)?);
    let mut net_config = NetConfig::for_agent(&config.state_dir, &config.name);
    net_config.host_allow = config.host_allow.clone();
    net_config.server = config
        .servers()
        .into_iter()
        .flat_map(server_addrs)
        .collect();
    let net = Network::new(net_config).context("container networking")?;
    let metrics = Metrics::new(env!("CARGO_PKG_VERSION"), metrics::gpu::nvml_source());
    let mut metrics_addr = None;
    if let Some(listen) = config.metrics_listen {
        let (bound, _) = metrics::serve(listen, metrics.clone())
            .await
            .with_context(|| format!("serving metrics on {listen}"))?;
        metrics_addr = Some(bound);
        metrics.start_gpu_polling(metrics::DEFAULT_GPU_INTERVAL);
        metrics::spawn_health_checks(
            &metrics,
            runtime.clone(),
            Some(images.clone()),
            HealthConfig::new(&config.state_dir, &config.storage_root),
        );
    }
    let tracked: Tracker = Arc::default();
    let t = tracked.clone();
    metrics.set_running_source(move || {
        lock(&t)
            .values()
            .filter(|t| t.started && t.done.is_none())
            .count() as u64
    });
    let net = Arc::new(net);
    let runtime = Arc::new(runtime);
    let exec_addr = match config.exec_listen {
        Some(listen) => Some(serve_execs(listen, &config.state_dir, &runtime).await?),
        None => None,
    };
    let advertised = match &config.advertise {
        Some(a) => Some(
            a.parse::<std::net::IpAddr>()
                .with_context(|| format!("--advertise {a}: not an IP address"))?,
        ),
        None => None,
    };
    let builder = Builder::new(BuildEnv {
        runtime: (*runtime).clone(),
        images: images.clone(),
        net: Some(net.clone()),
        pull: config.pull.clone(),
        token: Some(config.token.clone()),
        userns: Some(runtime::userns::BUILD_MAP),
    });
    let agent = Agent {
        config: Arc::new(config),
        runtime,
        peers: peers_worker(net.clone()),
        net,
        images,
        builder,
        tracked,
        out: Arc::default(),
        metrics,
        metrics_addr,
        starts: Arc::new(tokio::sync::Semaphore::new(start_permits())),
        transfer_events: Arc::default(),
        probe_results: Arc::default(),
        exec_addr,
        address: Arc::new(Mutex::new(advertised)),
    };
    adopt(&agent);
    let servers = agent.config.servers();
    anyhow::ensure!(!servers.is_empty(), "no server URL");
    let mut backoff = Duration::from_millis(200);
    // The server that last answered is tried again; one that fails passes to the next at
    // once, and only a whole round of failures waits (longer each round).
    let (mut at, mut failed) = (0usize, 0usize);
    loop {
        let server = servers[at];
        let ended = session(&agent, server).await;
        *lock(&agent.out) = None;
        agent.metrics.set_connected(false);
        let round_failed = match ended {
            Ok(()) => {
                backoff = Duration::from_millis(200);
                failed = 0;
                false
            }
            Err(e) => {
                tracing::warn!("connection to {server}: {e:#}");
                at = (at + 1) % servers.len();
                failed += 1;
                if failed < servers.len() {
                    continue;
                }
                failed = 0;
                true
            }
        };
        tokio::time::sleep(backoff).await;
        if round_failed {
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }
}

/// Starts the exec service. A free port (`listen` with port 0) is remembered in the state
/// directory and taken again by a restarted agent when it can: running gangs' members know
/// this node's exec service by its address.
async fn serve_execs(
    listen: std::net::SocketAddr,
    state_dir: &Path,
    runtime: &Arc<Runtime>,
) -> anyhow::Result<std::net::SocketAddr> {
    use crate::multinode::exec::serve;
    let remembered = state_dir.join("exec-port");
    let before = std::fs::read_to_string(&remembered)
        .ok()
        .and_then(|p| p.trim().parse::<u16>().ok())
        .filter(|_| listen.port() == 0);
    let mut again = None;
    if let Some(port) = before {
        // The previous process may take a moment to let go of it.
        for _ in 0..20 {
            let at = std::net::SocketAddr::new(listen.ip(), port);
            if let Ok(b) = serve(at, runtime.clone()).await {
                again = Some(b);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let bound = match again {
        Some(b) => b,
        None => serve(listen, runtime.clone())
            .await
            .with_context(|| format!("serving multinode execs on {listen}"))?,
    };
    if listen.port() == 0 {
        if let Err(e) = std::fs::write(&remembered, bound.port().to_string()) {
            tracing::warn!("writing {}: {e}", remembered.display());
        }
    }
    Ok(bound)
}

/// Re-adopts the containers a previous run of this agent left running (or finished).
fn adopt(agent: &Agent) {
    for id in agent.runtime.list() {
        let Ok(attempt_id) = Uuid::parse_str(&id) else {
            continue;
        };
        let Some(assignment) = agent
            .runtime
            .meta(&id)
            .ok()
            .and_then(|m| serde_json::from_value::<Assignment>(m).ok())
        else {
            tracing::warn!(container = %id, "no assignment recorded: removing");
            let _ = agent.runtime.remove(&id);
            let _ = agent.net.detach(&id);
            continue;
        };
        tracing::info!(attempt = %attempt_id, task = %assignment.task, "re-adopted");
        let address = agent
            .net
            .attachment(&id)
            .and_then(|a| a.address)
            .map(|a| a.to_string())
            .or_else(|| {
                let marker = agent.runtime.container_dir(&id).join(ADDRESS_MARKER);
                std::fs::read_to_string(marker).ok()
            });
        let probe = readiness_probe(&assignment)
            .filter(|_| !agent.runtime.container_dir(&id).join(READY_MARKER).exists());
        let mut t = Tracked::new(true);
        t.address = address.clone();
        t.ready = probe.is_none();
        lock(&agent.tracked).insert(attempt_id, t);
        if let Some(p) = probe {
            spawn_probe(agent.clone(), attempt_id, p, address);
        }
        spawn_monitor(agent.clone(), attempt_id);
    }
    // Namespaces and addresses of containers that are gone (a removal cut short by a crash).
    let live = agent.runtime.list();
    for id in agent.net.cleanup(&live) {
        tracing::info!(container = %id, "removed a leftover network namespace");
    }
}

/// The readiness probe an assignment's process must pass before it counts as running.
fn readiness_probe(asg: &Assignment) -> Option<Probe> {
    asg.service.as_ref().and_then(|s| s.readiness.clone())
}

/// Probes a service until it is ready (then RUNNING is reported by its monitor), it ends, or
/// the attempt is stopped or forgotten.
fn spawn_probe(agent: Agent, id: Uuid, probe: Probe, address: Option<String>) {
    tokio::spawn(async move {
        let target = probe::Target {
            runtime: (*agent.runtime).clone(),
            id: id.to_string(),
            address: address.and_then(|a| a.parse().ok()),
        };
        let tracked = agent.tracked.clone();
        let wanted = move || {
            lock(&tracked)
                .get(&id)
                .is_some_and(|t| t.stop_cause.is_none() && t.done.is_none())
        };
        let reporter = agent.clone();
        let failed = move |why: &str, count: u32| {
            if reporter.probe_results.load(Ordering::Relaxed) {
                reporter.send(AgentMessage::ProbeFailed {
                    attempt_id: id,
                    why: why.to_string(),
                    count,
                });
            }
        };
        if probe::wait_ready_reporting(&probe, &target, wanted, failed).await
            == probe::Readiness::Ready
        {
            let marker = agent.runtime.container_dir(&target.id).join(READY_MARKER);
            if let Err(e) = std::fs::write(&marker, b"") {
                tracing::warn!(attempt = %id, "writing {}: {e}", marker.display());
            }
            tracing::info!(attempt = %id, "readiness probe passed");
            if let Some(t) = lock(&agent.tracked).get_mut(&id) {
                t.ready = true;
                t.wake.notify_one();
            }
        }
    });
}

/// Applies the server's `Peers` to the firewall, one after the other, on a thread of its own.
fn peers_worker(net: Arc<Network>) -> std::sync::mpsc::Sender<(Uuid, Vec<String>)> {
    let (tx, rx) = std::sync::mpsc::channel::<(Uuid, Vec<String>)>();
    std::thread::spawn(move || {
        for (workflow, addresses) in rx {
            let addrs: Vec<std::net::Ipv4Addr> =
                addresses.iter().filter_map(|a| a.parse().ok()).collect();
            if let Err(e) = net.set_peers(&workflow.to_string(), &addrs) {
                tracing::warn!(workflow = %workflow, "its containers on other nodes: {e}");
            }
        }
    });
    tx
}

/// The server's IPv4 addresses and port as this agent reaches it, for the firewall: its
/// containers may reach the server's endpoint proxy. Loopback ones are left out (containers
/// never reach the host's loopback).
fn server_addrs(server: &str) -> Vec<std::net::SocketAddrV4> {
    use std::net::ToSocketAddrs;
    let Some(hostport) = server_registry(server) else {
        return vec![];
    };
    let default_port = if server.starts_with("https://") {
        443
    } else {
        80
    };
    let with_port = if hostport
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        hostport
    } else {
        format!("{hostport}:{default_port}")
    };
    let mut out: Vec<std::net::SocketAddrV4> = with_port
        .to_socket_addrs()
        .map(|it| {
            it.filter_map(|a| match a {
                std::net::SocketAddr::V4(v4)
                    if !v4.ip().is_loopback() && !v4.ip().is_unspecified() =>
                {
                    Some(v4)
                }
                _ => None,
            })
            .collect()
        })
        .unwrap_or_default();
    out.sort();
    out.dedup();
    out
}

/// `host:port` of the server, where its object cache serves images.
fn server_registry(server: &str) -> Option<String> {
    let rest = server.split("://").nth(1)?;
    let host = rest.split('/').next()?.trim();
    (!host.is_empty()).then(|| host.to_string())
}

fn ws_url(server: &str) -> String {
    let base = server.trim_end_matches('/');
    let base = if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        base.to_string()
    };
    format!("{base}/api/v1/agent/connect")
}

async fn session(agent: &Agent, server: &str) -> anyhow::Result<()> {
    let mut req = ws_url(server).into_client_request()?;
    req.headers_mut().insert(
        "Authorization",
        format!("Bearer {}", agent.config.token).parse()?,
    );
    // A server that accepts the connection but never answers (paused) is given up on, so
    // that the next URL is tried while the node still counts as alive.
    let (ws, _) = tokio::time::timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(req))
        .await
        .map_err(|_| anyhow::anyhow!("no answer in {}s", CONNECT_TIMEOUT.as_secs()))?
        .context("connecting")?;
    agent.metrics.heard_from_server();
    let local = ws.get_ref().get_ref().local_addr().ok();
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<AgentMessage>();
    let known: Vec<Uuid> = lock(&agent.tracked).keys().copied().collect();
    let address = {
        let mut a = lock(&agent.address);
        if agent.config.advertise.is_none() {
            if let Some(l) = local {
                *a = Some(l.ip());
            }
        }
        *a
    };
    let exec_addr = agent
        .exec_addr
        .zip(address)
        .map(|(bound, ip)| std::net::SocketAddr::new(ip, bound.port()).to_string());
    tx.send(AgentMessage::Hello {
        name: agent.config.name.clone(),
        pool: agent.config.pool.clone(),
        capacity: agent.config.capacity.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
        metrics_addr: agent
            .metrics_addr
            .map(|bound| metrics::advertised_addr(bound, local)),
        node_exporter: agent.config.node_exporter.clone(),
        attempts: known,
        address: address.map(|a| a.to_string()),
        exec_addr,
        labels: crate::labels::node_labels(&agent.config.labels),
    })?;
    // A new connection: everything not acknowledged is sent again.
    for t in lock(&agent.tracked).values_mut() {
        t.sent = t.acked;
        t.running_sent = false;
        t.final_sent = false;
    }
    *lock(&agent.out) = Some(tx.clone());
    for t in lock(&agent.tracked).values() {
        t.wake.notify_one();
    }
    agent.metrics.set_connected(true);
    tracing::info!(server = %server, "connected");

    // Whether this connection's server counts a ping as a heartbeat (its `Welcome` says).
    let ping_heartbeats = Arc::new(AtomicBool::new(false));
    let ping_only = ping_heartbeats.clone();
    let writer = tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            let heartbeat = matches!(msg, AgentMessage::Heartbeat);
            if !(heartbeat && ping_only.load(Ordering::Relaxed)) {
                let Ok(text) = serde_json::to_string(&msg) else {
                    continue;
                };
                if sink.send(Message::Text(text.into())).await.is_err() {
                    break;
                }
            }
            // The server's WebSocket layer answers a ping by itself while it reads this
            // connection; its pong is what keeps `gantry_agent_heartbeat_lag_seconds` low.
            // A server that counts any frame needs nothing more: one frame each way per
            // heartbeat, at 10,000 nodes a third of the server's idle reads saved.
            if heartbeat && sink.send(Message::Ping(Default::default())).await.is_err() {
                break;
            }
        }
    });
    let mut interval = Duration::from_secs(5);
    let mut heartbeat = tokio::time::interval(interval);
    // A server that stops answering (paused, cut off, a half-open connection) is left for the
    // next one after three heartbeats without a word, its pongs included: half the server's
    // heartbeat timeout (six intervals), so that the node is back on a live server before
    // any server counts it lost. Only a server that counts pings as heartbeats is judged so:
    // it reads each connection apart from handling its messages, so its pongs are prompt; an
    // older one's could wait behind a report.
    let mut heard = std::time::Instant::now();
    let result = loop {
        tokio::select! {
            _ = heartbeat.tick() => {
                if ping_heartbeats.load(Ordering::Relaxed) && heard.elapsed() > interval * 3 {
                    break Err(anyhow::anyhow!(
                        "no word from the server for {}s: connecting again",
                        heard.elapsed().as_secs()
                    ));
                }
                if tx.send(AgentMessage::Heartbeat).is_err() {
                    break Ok(());
                }
            }
            msg = stream.next() => {
                if matches!(msg, Some(Ok(_))) {
                    agent.metrics.heard_from_server();
                    heard = std::time::Instant::now();
                }
                let msg = match msg {
                    None => break Ok(()),
                    Some(Err(e)) => break Err(e.into()),
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(Message::Close(_))) => break Ok(()),
                    Some(Ok(_)) => continue,
                };
                let msg: ServerMessage = match serde_json::from_str(msg.as_str()) {
                    Ok(m) => m,
                    Err(e) => { tracing::warn!("bad message from server: {e}"); continue; }
                };
                if let ServerMessage::Welcome { heartbeat_interval_ms, ping_heartbeats: ping, .. } = &msg {
                    ping_heartbeats.store(*ping, Ordering::Relaxed);
                    let want = Duration::from_millis((*heartbeat_interval_ms).max(100));
                    if want != interval {
                        interval = want;
                        heartbeat = tokio::time::interval(interval);
                    }
                }
                handle(agent, msg);
            }
        }
    };
    writer.abort();
    result
}

fn handle(agent: &Agent, msg: ServerMessage) {
    match msg {
        ServerMessage::Welcome {
            subnet,
            transfer_events,
            probe_results,
            ..
        } => {
            agent
                .transfer_events
                .store(transfer_events, Ordering::Relaxed);
            agent.probe_results.store(probe_results, Ordering::Relaxed);
            match subnet {
                Some(s) => match agent.net.set_subnet(&s) {
                    Ok(s) => {
                        tracing::info!(subnet = %s, bridge = agent.net.bridge(), "container subnet")
                    }
                    Err(e) => tracing::warn!("the server's subnet: {e}"),
                },
                None => tracing::debug!("the server gave no container subnet"),
            }
        }
        ServerMessage::Desired { attempts } => {
            let wanted: HashMap<Uuid, Assignment> =
                attempts.into_iter().map(|a| (a.attempt_id, a)).collect();
            let known: Vec<Uuid> = lock(&agent.tracked).keys().copied().collect();
            for id in &known {
                if !wanted.contains_key(id) {
                    // The server no longer wants it (it was ended while we were away).
                    let a = agent.clone();
                    let id = *id;
                    tokio::spawn(async move { forget(&a, id, Duration::from_secs(10)).await });
                }
            }
            for (id, asg) in wanted {
                if !known.contains(&id) {
                    start(agent, asg);
                }
            }
        }
        ServerMessage::Assign(asg) => {
            if !lock(&agent.tracked).contains_key(&asg.attempt_id) {
                start(agent, *asg);
            }
        }
        ServerMessage::Stop {
            attempt_id,
            grace_ms,
            cause,
        } => {
            let (started, build) = {
                let mut map = lock(&agent.tracked);
                let Some(t) = map.get_mut(&attempt_id) else {
                    drop(map);
                    agent.report(attempt_id, AttemptPhase::Lost);
                    return;
                };
                t.stop_cause.get_or_insert(cause);
                t.stop_grace = Duration::from_millis(grace_ms);
                (t.started, t.build.clone())
            };
            if let Some(b) = build {
                b.stop(Duration::from_millis(grace_ms));
            } else if started {
                let rt = agent.runtime.clone();
                tokio::task::spawn_blocking(move || {
                    if let Err(e) =
                        rt.stop(&attempt_id.to_string(), Duration::from_millis(grace_ms))
                    {
                        tracing::warn!(attempt = %attempt_id, "stop: {e}");
                    }
                });
            }
        }
        ServerMessage::Peers {
            workflow_id,
            addresses,
        } => {
            let _ = agent.peers.send((workflow_id, addresses));
        }
        ServerMessage::Forget { attempt_id } => {
            let a = agent.clone();
            tokio::spawn(async move { forget(&a, attempt_id, Duration::from_secs(10)).await });
        }
        ServerMessage::LogAck {
            attempt_id,
            stdout,
            stderr,
        } => {
            if let Some(t) = lock(&agent.tracked).get_mut(&attempt_id) {
                t.acked = (t.acked.0.max(stdout), t.acked.1.max(stderr));
                // The server has less than we sent (a gap after a reconnect): resend from there.
                if stdout < t.sent.0 || stderr < t.sent.1 {
                    t.sent = (stdout.min(t.sent.0), stderr.min(t.sent.1));
                }
            }
        }
        ServerMessage::Chore(chore) => {
            let a = agent.clone();
            tokio::task::spawn_blocking(move || {
                let error = match &chore.kind {
                    ChoreKind::RemoveVolume { path, root } => {
                        let root = root
                            .as_deref()
                            .map_or(a.config.storage_root.as_path(), Path::new);
                        remove_volume(root, path).err()
                    }
                };
                a.send(AgentMessage::ChoreDone {
                    id: chore.id,
                    error: error.map(|e| format!("{e:#}")),
                });
            });
        }
    }
}

/// A volume of an assignment, opened beneath the storage root.
struct OpenVolume {
    dir: Dir,
    /// Where it is mounted in the container, and that path relative to the container's `/`.
    target: String,
    at: Rel,
    read_only: bool,
}

/// Opens (making what is missing) each mounted volume's directory beneath the storage root,
/// never through a symlink.
fn open_volumes(
    storage_root: &Path,
    mounts: &[gantry_api::agent::VolumeMount],
) -> anyhow::Result<Vec<OpenVolume>> {
    if mounts.is_empty() {
        return Ok(Vec::new());
    }
    let root = Dir::open_root(storage_root)
        .with_context(|| format!("opening the storage root {}", storage_root.display()))?;
    mounts
        .iter()
        .map(|m| {
            let rel = Rel::new(&m.source)
                .map_err(|e| anyhow::anyhow!("refusing volume path {:?}: {e}", m.source))?;
            let at = Rel::container(&m.target).map_err(|e| anyhow::anyhow!("mount target {e}"))?;
            // A storage provisioner's directory is an administrator's (a site's shared
            // filesystem): trusted as given, and only the volume's part is resolved beneath it.
            let storage = match &m.root {
                Some(r) => &Dir::open_root(Path::new(r)).with_context(|| {
                    format!("opening the storage directory {r} (is it mounted on this node?)")
                })?,
                None => &root,
            };
            let dir = storage
                .create_dirs(&rel, Resolve::Beneath, 0o755, Owner::ROOT)
                .map_err(|e| volume_error(e, "its directory", &m.target))?;
            Ok(OpenVolume {
                dir,
                target: m.target.clone(),
                at,
                read_only: m.read_only,
            })
        })
        .collect()
}

/// What went wrong writing `what` into the volume mounted at `volume`, in the user's terms.
fn volume_error(e: std::io::Error, what: &str, volume: &str) -> anyhow::Error {
    if beneath::is_symlink_error(&e) {
        anyhow::anyhow!(
            "{what}: a symlink is in the way in the volume at {volume}: Gantry never follows \
             symlinks in volumes (a link means what it says only inside a container)"
        )
    } else {
        anyhow::anyhow!("{what} in the volume at {volume}: {e}")
    }
}

fn remove_volume(root: &Path, rel: &str) -> anyhow::Result<()> {
    let rel = Rel::new(rel).map_err(|e| anyhow::anyhow!("refusing volume path {rel:?}: {e}"))?;
    let storage = Dir::open_root(root)
        .with_context(|| format!("opening the storage root {}", root.display()))?;
    storage
        .remove_all(&rel)
        .with_context(|| format!("removing {rel} under {}", root.display()))
}

async fn forget(agent: &Agent, id: Uuid, grace: Duration) {
    let (started, build) = lock(&agent.tracked)
        .get(&id)
        .map(|t| (t.started, t.build.clone()))
        .unzip();
    if let Some(b) = build.flatten() {
        // A build still running here ends first (it cleans up after itself).
        b.stop(grace);
        let rt = agent.runtime.clone();
        let cid = id.to_string();
        let deadline = tokio::time::Instant::now() + grace + Duration::from_secs(60);
        while tokio::time::Instant::now() < deadline {
            let (rt, cid) = (rt.clone(), cid.clone());
            let state = tokio::task::spawn_blocking(move || rt.status(&cid))
                .await
                .unwrap_or(ContainerState::Unknown);
            if state != ContainerState::Running {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    if started == Some(true) {
        let rt = agent.runtime.clone();
        let net = agent.net.clone();
        let cid = id.to_string();
        let state_dir = agent.config.state_dir.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if matches!(rt.status(&cid), ContainerState::Running) {
                let _ = rt.stop(&cid, grace);
            }
            match rt.remove(&cid) {
                // Its network goes only with the container: a removal that failed is retried
                // (and its network cleaned) when the agent next starts.
                Ok(()) => {
                    let _ = std::fs::remove_dir_all(multinode::files_dir(&state_dir, &cid));
                    if let Err(e) = net.detach(&cid) {
                        tracing::warn!(container = %cid, "removing its network: {e}");
                    }
                }
                Err(e) => tracing::warn!(container = %cid, "removing: {e}"),
            }
        })
        .await;
    }
    lock(&agent.tracked).remove(&id);
}

fn start(agent: &Agent, asg: Assignment) {
    let id = asg.attempt_id;
    lock(&agent.tracked).insert(id, Tracked::new(false));
    agent.report(id, AttemptPhase::Preparing);
    let agent = agent.clone();
    if asg.build.is_some() {
        tokio::spawn(run_build(agent, asg));
        return;
    }
    if asg.transfer.is_some() {
        tokio::spawn(run_transfer(agent, asg));
        return;
    }
    tokio::spawn(async move {
        match launch(&agent, &asg).await {
            Ok(address) => {
                let address = address.map(|a| a.to_string());
                let probe = readiness_probe(&asg);
                let stop_asked = lock(&agent.tracked).get_mut(&id).and_then(|t| {
                    t.started = true;
                    t.address = address.clone();
                    t.ready = probe.is_none();
                    t.stop_cause.map(|_| t.stop_grace)
                });
                // A stop that came while the container was being made found nothing to stop
                // (it is not `started` until now), and would be lost: a gang's member whose
                // gang failed meanwhile would run on forever.
                if let Some(grace) = stop_asked {
                    let rt = agent.runtime.clone();
                    tokio::task::spawn_blocking(move || {
                        if let Err(e) = rt.stop(&id.to_string(), grace) {
                            tracing::warn!(attempt = %id, "stop: {e}");
                        }
                    });
                }
                if let Some(p) = probe {
                    spawn_probe(agent.clone(), id, p, address);
                }
                spawn_monitor(agent, id);
            }
            Err(e) => {
                tracing::warn!(attempt = %id, task = %asg.task, "could not start: {e:#}");
                let dir = multinode::files_dir(&agent.config.state_dir, &id.to_string());
                let _ = std::fs::remove_dir_all(dir);
                start_failed(&agent, id, format!("{e:#}"));
            }
        }
    });
}

/// Records and reports an attempt that never started: it is done, its end is the report.
fn start_failed(agent: &Agent, id: Uuid, message: String) {
    let phase = AttemptPhase::StartFailed { message };
    if let Some(t) = lock(&agent.tracked).get_mut(&id) {
        t.done = Some(phase.clone());
        t.final_sent = true;
        t.build = None;
    }
    agent.report(id, phase);
}

/// Runs an image build: its base is prepared (a failure is a start failure, as for a job's
/// image), then it runs as a task whose output and end the monitor reports like a container's.
async fn run_build(agent: Agent, asg: Assignment) {
    let id = asg.attempt_id;
    let stop = StopSignal::new();
    if let Some(t) = lock(&agent.tracked).get_mut(&id) {
        t.build = Some(stop.clone());
    }
    match agent.builder.prepare(&asg).await {
        Ok(prepared) => {
            // A stop asked for while the base was pulled ends the build before its first
            // step (the build sees the signal).
            monitor_task(&agent, id);
            let code = prepared.run(stop).await;
            tracing::info!(attempt = %id, task = %asg.task, "build ended with {code}");
            task_ended(&agent, id).await;
        }
        Err(e) => {
            tracing::warn!(attempt = %id, task = %asg.task, "could not start the build: {e:#}");
            start_failed(&agent, id, format!("{e:#}"));
        }
    }
}

/// Runs a volume's data transfers (`crate::transfer`) as a task of the runtime, as a build
/// runs: its progress is the task's log, its end the task's exit, and a failure's URL and
/// cause the attempt's reason.
async fn run_transfer(agent: Agent, asg: Assignment) {
    let id = asg.attempt_id;
    let Some(spec) = asg.transfer.clone() else {
        return;
    };
    let stop = StopSignal::new();
    if let Some(t) = lock(&agent.tracked).get_mut(&id) {
        t.build = Some(stop.clone());
    }
    // The task's record on disk never holds the credentials.
    let mut recorded = asg.clone();
    if let Some(t) = recorded.transfer.as_mut() {
        t.items.iter_mut().for_each(|i| i.credential = None);
    }
    let meta = serde_json::to_value(&recorded).unwrap_or_default();
    let rt = agent.runtime.clone();
    let cid = id.to_string();
    let created = tokio::task::spawn_blocking(move || rt.create_task(&cid, &meta)).await;
    if !matches!(created, Ok(Ok(()))) {
        start_failed(
            &agent,
            id,
            format!("creating the transfer's task: {created:?}"),
        );
        return;
    }
    monitor_task(&agent, id);
    let (out, err) = agent.runtime.log_paths(&id.to_string());
    let append = |p: &Path| std::fs::OpenOptions::new().append(true).open(p).ok();
    let (out, err) = (Mutex::new(append(&out)), Mutex::new(append(&err)));
    let write = |f: &Mutex<Option<std::fs::File>>, line: &str| {
        if let Some(f) = lock(f).as_mut() {
            let _ = std::io::Write::write_all(f, format!("{line}\n").as_bytes());
        }
    };
    let log = StepLog {
        agent: &agent,
        id,
        line: &|line: &str| write(&out, line),
    };
    let result = crate::transfer::run(&agent.config.storage_root, &spec, &log, &stop).await;
    let code = match &result {
        Ok(summary) => {
            write(&out, &format!("{} finished: {summary}", asg.task));
            0
        }
        Err(e) => {
            write(&err, &e.message);
            if let Some(t) = lock(&agent.tracked).get_mut(&id) {
                // The monitor reports this, with the reason, once the log is shipped.
                t.done = Some(AttemptPhase::Failed {
                    exit_code: e.code,
                    message: e.message.clone(),
                });
            }
            e.code
        }
    };
    tracing::info!(attempt = %id, task = %asg.task, "transfer ended with {code}");
    let rt = agent.runtime.clone();
    let cid = id.to_string();
    let _ = tokio::task::spawn_blocking(move || rt.finish_task(&cid, code)).await;
    task_ended(&agent, id).await;
}

/// A transfer step's log, and its items' ends reported to a server that records them as events.
/// An end that finds no connection is not resent: the log and the step's end still say it.
struct StepLog<'a> {
    agent: &'a Agent,
    id: Uuid,
    line: &'a (dyn Fn(&str) + Sync),
}

impl crate::transfer::Log for StepLog<'_> {
    fn line(&self, line: &str) {
        (self.line)(line)
    }

    fn ended(&self, item: &TransferItem, outcome: TransferOutcome) {
        if self.agent.transfer_events.load(Ordering::Relaxed) {
            self.agent.send(AgentMessage::TransferEnded(TransferEnded {
                attempt_id: self.id,
                source: item.source.clone(),
                destination: item.destination.clone(),
                outcome,
            }));
        }
    }

    fn progress(&self, _item: &TransferItem, progress: TransferProgress) {
        if self.agent.transfer_events.load(Ordering::Relaxed) {
            self.agent.send(AgentMessage::TransferProgress {
                attempt_id: self.id,
                progress,
            });
        }
    }
}

/// A runtime task of the agent's own (a build, a transfer) has started: it is ready, and the
/// monitor ships its log and reports its end like a container's. A stop asked for before this
/// has forgotten it already; it then sees the stop signal and ends at once.
fn monitor_task(agent: &Agent, id: Uuid) {
    let tracked = match lock(&agent.tracked).get_mut(&id) {
        Some(t) => {
            t.started = true;
            t.ready = true;
            true
        }
        None => false,
    };
    if tracked {
        spawn_monitor(agent.clone(), id);
    }
}

/// A runtime task of the agent's own has recorded its end.
async fn task_ended(agent: &Agent, id: Uuid) {
    if let Some(t) = lock(&agent.tracked).get(&id) {
        t.wake.notify_one();
    }
    if !lock(&agent.tracked).contains_key(&id) {
        // Forgotten before it ended (it was stopped then): nobody else will remove its
        // record.
        let rt = agent.runtime.clone();
        let cid = id.to_string();
        let _ = tokio::task::spawn_blocking(move || rt.remove(&cid)).await;
    }
}

/// How many containers may be starting at once. Starting one is CPU work on the host (overlay
/// mount, the shim, runc and its init: ~35 ms of CPU) with short waits between its steps; when
/// more start at once than the host has cores for, they only slow each other down (cache and
/// scheduler churn: 43-45 ms of CPU per job with 16 starting at once on 2 cores, 36-40 ms
/// bounded; bench/README.md). Three times the host's cores keeps them busy through the waits:
/// on 2 cores, 6 at once ran a 500-job array at 52.3-53.9 jobs/s, 4 at 49.3-50.5 and 8 at
/// 48.9-51.3 (bench/README.md). Only the start is bounded: the containers then run as many at
/// once as the node's resources fit.
fn start_permits() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()) * 3
}

/// Pulls the image, prepares volumes, files and network, and starts the container under its
/// shim. Returns the container's address when it has a network.
async fn launch(agent: &Agent, asg: &Assignment) -> anyhow::Result<Option<std::net::Ipv4Addr>> {
    // Images from the server's object cache (built ones) are pulled with this agent's token.
    let mut source = asg.image.clone();
    if source.credential.is_none() {
        let ours = agent
            .config
            .servers()
            .into_iter()
            .filter_map(server_registry)
            .find(|host| source.uri.starts_with(&format!("docker://{host}/")));
        if ours.is_some() {
            source.credential = Some(gantry_api::agent::RegistryCredential::Bearer {
                token: agent.config.token.clone(),
            });
        }
    }
    let image = agent
        .images
        .prepare(&source)
        .await
        .with_context(|| format!("image {}", asg.image.uri))?;
    if lock(&agent.tracked)
        .get(&asg.attempt_id)
        .and_then(|t| t.stop_cause)
        .is_some()
    {
        anyhow::bail!("stopped before it started");
    }
    // Volumes, and the files written into them, are resolved beneath the storage root without
    // following symlinks (a workflow's containers write there), and mounted through the
    // descriptors held in `volumes` until the container has started.
    let volumes = open_volumes(&agent.config.storage_root, &asg.mounts)?;
    let mut binds: Vec<runtime::Bind> = volumes
        .iter()
        .map(|v| runtime::Bind {
            source: v.dir.mount_source(),
            target: v.target.clone(),
            read_only: v.read_only,
        })
        .collect();
    // A file whose destination lies in a mounted volume is written into the volume, so the
    // workflow's other steps see it too; the rest are bind-mounted read-only.
    let mut files = Vec::new();
    for f in &asg.files {
        let content = base64::engine::general_purpose::STANDARD
            .decode(&f.content)
            .context("file content is not base64")?;
        let target = Rel::container(&f.target).map_err(|e| anyhow::anyhow!("file {e}"))?;
        // The innermost volume holding it, when volumes are mounted inside each other.
        let in_volume = volumes
            .iter()
            .filter_map(|v| Some((v, target.below(&v.at)?)))
            .max_by_key(|(v, _)| v.at.as_path().components().count());
        match in_volume {
            Some((v, rest)) => v
                .dir
                .write_file(&rest, &content, 0o644, Owner::ROOT, Resolve::Beneath)
                .map_err(|e| volume_error(e, &f.target, &v.target))?,
            None => files.push((f.target.clone(), content)),
        }
    }
    let gang = match &asg.multinode {
        Some(mn) => {
            multinode::validate(mn).map_err(|e| anyhow::anyhow!("multinode: {e}"))?;
            let imp =
                multinode::Implementation::parse(&mn.implementation).map_err(anyhow::Error::msg)?;
            Some((mn, imp))
        }
        None => None,
    };
    // Multinode members share their node's network, as MPI under Apptainer does.
    let node_ip = match asg.host_network || gang.is_some() {
        true => match *lock(&agent.address) {
            Some(std::net::IpAddr::V4(ip)) => Some(ip),
            Some(ip) => anyhow::bail!("host networking needs an IPv4 node address, not {ip}"),
            None => anyhow::bail!("host networking: the node's address is not known yet"),
        },
        false => None,
    };
    let mut env = asg.env.clone();
    if let (Some((mn, imp)), Some(ip)) = (gang, node_ip) {
        let (defaults, facts) = multinode::environment(mn, imp, &ip.to_string());
        env = defaults.into_iter().chain(env).chain(facts).collect();
    }
    let mut process =
        runtime::merge_image_config(&image.config, &asg.argv, &env, asg.cwd.as_deref())?;
    let job = asg.task.replace(['[', ']'], "-");
    let job = job.trim_end_matches('-');
    let hostname = match (gang, node_ip) {
        (Some((mn, _)), _) => multinode::hostname(mn).to_owned(),
        (None, Some(_)) => job.to_owned(),
        (None, None) => format!("{job}-{}", asg.attempt),
    };
    let files_dir = multinode::files_dir(&agent.config.state_dir, &asg.attempt_id.to_string());
    if let Some((mn, imp)) = gang {
        process.args = multinode::process(mn, imp, &asg.image.uri, process.args, &process.env);
        multinode::write_files(&files_dir, mn).context("writing the multinode files")?;
        for (source, target) in [
            (files_dir.clone(), multinode::DIR),
            (agent.runtime.rsh_path(), multinode::RSH),
        ] {
            binds.push(runtime::Bind {
                source,
                target: target.into(),
                read_only: true,
            });
        }
    }
    let mut spec = ContainerSpec {
        id: asg.attempt_id.to_string(),
        layers: image.layers.clone(),
        args: process.args,
        env: process.env,
        cwd: process.cwd,
        user: process.user,
        mounts: binds,
        files,
        cpus: asg.resources.cpus,
        memory_bytes: asg.resources.memory_bytes,
        pids_limit: Some(4096),
        hostname,
        host_network: false,
    };
    let meta = serde_json::to_value(asg)?;
    let _permit = agent.starts.acquire().await?;
    // runc mounts the volumes through these descriptors: they stay open until it has.
    let _volumes = volumes;
    if let Some(ip) = node_ip {
        let mut hosts = asg
            .network
            .as_ref()
            .map(|n| n.hosts.clone())
            .unwrap_or_default();
        if let Some((mn, _)) = gang {
            hosts.extend(multinode::hosts(mn));
        }
        spec.host_network = true;
        // The task's own /etc/hosts or resolv.conf, if it injects one, wins. The node's
        // resolvers are the container's (its loopback ones included: it shares the loopback).
        let given = |files: &[(String, Vec<u8>)], t: &str| files.iter().any(|(f, _)| f == t);
        if !given(&spec.files, "/etc/hosts") {
            let hosts = net::hosts_file(&spec.hostname, ip, &hosts)?;
            spec.files.push(("/etc/hosts".into(), hosts));
        }
        if !given(&spec.files, "/etc/resolv.conf") {
            let resolv = std::fs::read("/etc/resolv.conf").unwrap_or_default();
            spec.files.push(("/etc/resolv.conf".into(), resolv));
        }
        let rt = agent.runtime.clone();
        let started = tokio::task::spawn_blocking(move || rt.start(&spec, &meta)).await?;
        if started.is_err() {
            let _ = std::fs::remove_dir_all(&files_dir);
        }
        started?;
        let marker = agent
            .runtime
            .container_dir(&asg.attempt_id.to_string())
            .join(ADDRESS_MARKER);
        if let Err(e) = std::fs::write(&marker, ip.to_string()) {
            tracing::warn!(attempt = %asg.attempt_id, "writing {}: {e}", marker.display());
        }
        return Ok(Some(ip));
    }
    let Some(network) = &asg.network else {
        let rt = agent.runtime.clone();
        tokio::task::spawn_blocking(move || rt.start(&spec, &meta)).await??;
        return Ok(None);
    };
    let deadline = tokio::time::Instant::now() + SUBNET_WAIT;
    while agent.net.subnet().is_none() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if agent.net.subnet().is_none() {
        return Err(net::NetError::NoSubnet).context("this task asks for a network");
    }
    let cid = spec.id.clone();
    let (rt, nw) = (agent.runtime.clone(), agent.net.clone());
    // A host-network service's name leads to its node's address, which for a node on a
    // loopback address is this host's, seen from here at the bridge's gateway.
    let mut hosts = network.hosts.clone();
    for h in &mut hosts {
        if let Ok(ip) = h.address.parse::<std::net::Ipv4Addr>() {
            h.address = agent.net.as_seen_from_bridge(ip).to_string();
        }
    }
    let policy = net::Policy {
        workflow: asg.workflow_id.to_string(),
        egress: network.egress,
        peers: network
            .peers
            .iter()
            .filter_map(|a| a.parse().ok())
            .collect(),
        node_services: network
            .node_services
            .iter()
            .filter_map(|a| a.parse().ok())
            .collect(),
    };
    let started = tokio::task::spawn_blocking(move || -> anyhow::Result<std::net::Ipv4Addr> {
        // Made in the user namespace the container will run in, so that its root holds its
        // capabilities over its own network.
        let userns = rt.job_userns_for(&spec.id)?;
        let att = nw
            .attach(&spec.id, &policy, userns.as_deref())
            .context("network")?;
        let address = att.address.ok_or(net::NetError::NoAddress(String::new()))?;
        // The task's own /etc/hosts or resolv.conf, if it injects one, wins.
        let given = |files: &[(String, Vec<u8>)], t: &str| files.iter().any(|(f, _)| f == t);
        if !given(&spec.files, "/etc/hosts") {
            let hosts = net::hosts_file(&spec.hostname, address, &hosts)?;
            spec.files.push(("/etc/hosts".into(), hosts));
        }
        if !given(&spec.files, "/etc/resolv.conf") {
            spec.files
                .push(("/etc/resolv.conf".into(), net::resolv_conf()));
        }
        let opts = StartOptions {
            netns: Some(att.netns.clone()),
        };
        rt.start_with(&spec, &meta, &opts)?;
        Ok(address)
    })
    .await?;
    if started.is_err() {
        let (nw, rt) = (agent.net.clone(), agent.runtime.clone());
        let _ = tokio::task::spawn_blocking(move || {
            let _ = nw.detach(&cid);
            // Gives back what the attempt took before its container existed (its user
            // namespace's ids); harmless where the failed start already removed it.
            let _ = rt.remove(&cid);
        })
        .await;
    }
    started.map(Some)
}

const CHUNK: u64 = 256 << 10;

/// Follows one container: ships its output by offset, reports RUNNING, and reports its end
/// after the last byte of output. Repeats what the server has not acknowledged after a
/// reconnect. Ends when the server says to forget the attempt.
fn spawn_monitor(agent: Agent, id: Uuid) {
    tokio::spawn(async move {
        let cid = id.to_string();
        let (out_path, err_path) = agent.runtime.log_paths(&cid);
        let Some(wake) = lock(&agent.tracked).get(&id).map(|t| t.wake.clone()) else {
            return;
        };
        // Readable when the shim exits: the end is reported at once instead of at the next
        // look. Taken once; `None` after it fired (or for a task, which has no shim).
        let mut exit_fd: Option<AsyncFd<OwnedFd>> = None;
        let mut exit_fd_taken = false;
        loop {
            let state = {
                let rt = agent.runtime.clone();
                let cid = cid.clone();
                tokio::task::spawn_blocking(move || rt.status(&cid))
                    .await
                    .unwrap_or(ContainerState::Unknown)
            };
            let connected = lock(&agent.out).is_some();
            let (sent, running_sent, stop_cause, done, final_sent, ready, address) = {
                let map = lock(&agent.tracked);
                let Some(t) = map.get(&id) else { return };
                (
                    t.sent,
                    t.running_sent,
                    t.stop_cause,
                    t.done.clone(),
                    t.final_sent,
                    t.ready,
                    t.address.clone(),
                )
            };
            // Also for a process that has exited since, on a new connection: a running report
            // the last server never committed is made good before the end (the server ignores
            // it when it already knew), so the attempt's events stay whole.
            let ran = matches!(done, None | Some(AttemptPhase::Exited { .. }));
            if connected
                && !running_sent
                && ran
                && ready
                && agent.report(id, AttemptPhase::Running { address })
            {
                if let Some(t) = lock(&agent.tracked).get_mut(&id) {
                    t.running_sent = true;
                }
            }
            // Output first, so the server holds every byte before it hears of the end.
            let mut caught_up = true;
            if connected {
                for (stream, path, offset) in [
                    (Stream::Stdout, &out_path, sent.0),
                    (Stream::Stderr, &err_path, sent.1),
                ] {
                    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                    if len <= offset {
                        continue;
                    }
                    caught_up = false;
                    let Ok(data) = read_at(path, offset, CHUNK) else {
                        continue;
                    };
                    let n = data.len() as u64;
                    let sent_ok = agent.send(AgentMessage::Log(LogChunk {
                        attempt_id: id,
                        stream,
                        offset,
                        data: base64::engine::general_purpose::STANDARD.encode(&data),
                    }));
                    if sent_ok {
                        if let Some(t) = lock(&agent.tracked).get_mut(&id) {
                            match stream {
                                Stream::Stdout => t.sent.0 = offset + n,
                                Stream::Stderr => t.sent.1 = offset + n,
                            }
                        }
                    }
                }
            }
            let finished = match (&done, &state) {
                (Some(p), _) => Some(p.clone()),
                (None, ContainerState::Exited { exit_code, .. }) => Some(AttemptPhase::Exited {
                    exit_code: *exit_code,
                    cause: stop_cause.unwrap_or(EndCause::Exit),
                }),
                (None, ContainerState::Unknown) => Some(AttemptPhase::Lost),
                _ => None,
            };
            if let Some(phase) = finished {
                if let Some(t) = lock(&agent.tracked).get_mut(&id) {
                    t.done = Some(phase.clone());
                }
                if connected && caught_up && !final_sent && agent.report(id, phase) {
                    if let Some(t) = lock(&agent.tracked).get_mut(&id) {
                        t.final_sent = true;
                    }
                }
            }
            let running = state == ContainerState::Running;
            if running && !exit_fd_taken {
                exit_fd_taken = true;
                exit_fd = agent
                    .runtime
                    .exit_fd(&cid)
                    // SAFETY: the AsyncFd owns the descriptor and nothing else closes it.
                    .and_then(|fd| unsafe {
                        AsyncFd::register_with_interest(fd, Interest::READABLE).ok()
                    });
            }
            // Output is shipped on this beat while the process runs; the end needs no beat.
            let pause = if caught_up { MONITOR_BEAT } else { 10 };
            let exited = async {
                match exit_fd.as_ref().filter(|_| running) {
                    Some(fd) => drop(fd.readable().await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = exited => exit_fd = None,
                _ = wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(pause)) => {}
            }
        }
    });
}

fn read_at(path: &Path, offset: u64, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    f.take(limit).read_to_end(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_may_reach_the_server_where_the_agent_does() {
        let v4 = |s: &str| s.parse::<std::net::SocketAddrV4>().unwrap();
        assert_eq!(
            server_addrs("http://192.0.2.10:7070"),
            vec![v4("192.0.2.10:7070")]
        );
        assert_eq!(
            server_addrs("https://192.0.2.10/"),
            vec![v4("192.0.2.10:443")]
        );
        assert_eq!(server_addrs("http://192.0.2.10"), vec![v4("192.0.2.10:80")]);
        // Containers never reach the host's loopback, and 0.0.0.0 is no address to reach.
        assert!(server_addrs("http://127.0.0.1:7070").is_empty());
        assert!(server_addrs("http://0.0.0.0:7070").is_empty());
        assert!(server_addrs("not a url").is_empty());
    }

    #[test]
    fn websocket_url_follows_the_scheme() {
        assert_eq!(ws_url("http://h:1/"), "ws://h:1/api/v1/agent/connect");
        assert_eq!(ws_url("https://h"), "wss://h/api/v1/agent/connect");
    }
}
