//! The daemons (`server`, `agent`) and the embedded default (`up`, `run`): a server and local
//! agents speaking the real protocol over loopback, in one process.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use gantry_agent::node::{detect_capacity, AgentConfig};
use gantry_agent::runtime::{IdRange, JOB_IDS};
use gantry_api::agent::Capacity;
use gantry_api::v1::Role;
use gantry_oci::PullConfig;
use gantry_server::{Server, ServerConfig};

use super::monitoring::{MonitoringOptions, Stack};

use crate::client::{
    check_context_name, default_data_dir, write_context, write_private, Client, ClientContext,
    Contexts, NamedContext,
};
use crate::output::UsageError;
use crate::Conn;

#[derive(Args, Clone, Debug)]
pub struct RegistryArgs {
    /// Pull a registry's images from a mirror instead: REGISTRY=URL, e.g.
    /// docker.io=http://127.0.0.1:5000 (repeatable).
    #[arg(long = "registry-mirror", value_name = "REGISTRY=URL")]
    pub mirrors: Vec<String>,
    /// Registries (host:port) that speak plain HTTP (repeatable).
    #[arg(long = "insecure-registry", value_name = "HOST")]
    pub insecure: Vec<String>,
    /// A directory whose OCI image layouts workflows may run as `oci://DIR/...` (repeatable,
    /// absolute). Without one, `oci://` images are refused. Give the server the same list as
    /// its agents: it refuses at submit what none allows.
    #[arg(long = "oci-root", value_name = "DIR")]
    pub oci_roots: Vec<PathBuf>,
}

impl RegistryArgs {
    fn pull_config(&self) -> anyhow::Result<PullConfig> {
        let mut mirrors = BTreeMap::new();
        for m in &self.mirrors {
            let Some((reg, url)) = m.split_once('=') else {
                return Err(
                    UsageError(format!("--registry-mirror wants REGISTRY=URL, got {m:?}")).into(),
                );
            };
            mirrors.insert(reg.to_string(), url.to_string());
        }
        gantry_oci::check_oci_roots(&self.oci_roots).map_err(|e| UsageError(e.to_string()))?;
        Ok(PullConfig {
            mirrors,
            insecure_hosts: self.insecure.clone(),
            oci_roots: self.oci_roots.clone(),
        })
    }
}

/// How a node confines its containers, beyond what every container gets.
#[derive(Args, Clone, Debug)]
pub struct ConfineArgs {
    /// Run job containers in user namespaces, so that root in a container is an unprivileged
    /// host uid (`on`, where the node supports it: Linux 5.19+ with idmapped mounts on the
    /// state directory and the storage root), or never (`off`).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    job_userns: bool,
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("expected `on` or `off`, not {s:?}")),
    }
}

/// The MCP server at `/mcp`.
#[derive(Args, Clone, Debug, Default)]
pub struct McpArgs {
    /// MCP clients may only read: tools that change anything are refused.
    #[arg(long)]
    mcp_read_only: bool,
    /// A browser origin allowed to use /mcp besides the server's own URL, e.g.
    /// https://chat.example.com (repeatable). Clients that send no Origin are not affected.
    #[arg(long = "mcp-allow-origin", value_name = "ORIGIN")]
    mcp_allow_origins: Vec<String>,
}

impl McpArgs {
    fn config(&self) -> gantry_server::mcp::McpConfig {
        gantry_server::mcp::McpConfig {
            read_only: self.mcp_read_only,
            allowed_origins: self.mcp_allow_origins.clone(),
        }
    }
}

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Where the store, logs, volumes and agent state live.
    #[arg(long, env = "GANTRY_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1:7070", value_parser = crate::parse_listen)]
    listen: SocketAddr,
    /// Local agents, each with 1/N of this machine.
    #[arg(long, default_value_t = 1)]
    agents: u32,
    /// Cores each local agent offers (default: 1/N of this machine's).
    #[arg(long)]
    cpus: Option<u32>,
    /// Also run the bundled node-health stack: Prometheus, Alertmanager and a Node Exporter
    /// per agent (Debian's packages), with deploy/monitoring's rules and routes.
    #[arg(long)]
    monitoring: bool,
    /// With --monitoring: scrape and evaluate this often (default: the shipped 10s).
    #[arg(long, value_parser = parse_duration, requires = "monitoring")]
    monitoring_interval: Option<Duration>,
    /// With --monitoring: more alert rule files to load beside the shipped ones (repeatable).
    #[arg(
        long = "monitoring-rules",
        value_name = "FILE",
        requires = "monitoring"
    )]
    monitoring_rules: Vec<PathBuf>,
    /// With --monitoring: Prometheus listens here (default: a free loopback port).
    #[arg(long, value_name = "ADDR", value_parser = crate::parse_listen, requires = "monitoring")]
    prometheus_listen: Option<SocketAddr>,
    /// With --monitoring: Alertmanager listens here (default: a free loopback port).
    #[arg(long, value_name = "ADDR", value_parser = crate::parse_listen, requires = "monitoring")]
    alertmanager_listen: Option<SocketAddr>,
    #[command(flatten)]
    confine: ConfineArgs,
    #[command(flatten)]
    registry: RegistryArgs,
    #[command(flatten)]
    mcp: McpArgs,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The workflow file to run.
    file: PathBuf,
    /// Keep the embedded cluster's data here (default: a temporary directory).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    agents: u32,
    #[command(flatten)]
    confine: ConfineArgs,
    #[command(flatten)]
    registry: RegistryArgs,
}

#[derive(Args, Debug)]
pub struct ServerArgs {
    #[arg(long, env = "GANTRY_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Keep the store in PostgreSQL: postgres://USER:PASSWORD@HOST:PORT/DATABASE (default:
    /// SQLite in the data directory, which keeps logs, images and the secrets key either way).
    #[arg(long, env = "GANTRY_STORE", value_name = "URL", hide_env_values = true)]
    store: Option<gantry_server::StoreLocation>,
    /// Keep job output and the object cache here rather than in the data directory: a
    /// filesystem every replica mounts (see the README's Replicas).
    #[arg(long, value_name = "DIR")]
    shared_dir: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1:7070", value_parser = crate::parse_listen)]
    listen: SocketAddr,
    /// An agent silent this long is lost and its steps end NODE_LOST (e.g. 30s, 2m).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    heartbeat_timeout: Duration,
    /// SIGTERM-to-SIGKILL grace for stops and timeouts.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    stop_grace: Duration,
    /// The URL users reach this server at, for endpoint URLs (default: http://<listen>).
    #[arg(long)]
    public_url: Option<String>,
    /// Endpoints are also served on `Host: NAME.<domain>`.
    #[arg(long, default_value = "endpoints.localhost")]
    endpoint_domain: String,
    /// How the server reaches registries (to pin image-build bases to digests).
    #[command(flatten)]
    registry: RegistryArgs,
    #[command(flatten)]
    mcp: McpArgs,
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// The server's URL, e.g. http://10.0.0.1:7070; for replicas, several, comma-separated
    /// (the agent connects to the one that runs the controller), or one load balancer's.
    #[arg(long, env = "GANTRY_URL", required_unless_present = "print_labels")]
    server: Option<String>,
    /// An agent (or admin) token.
    #[arg(
        long,
        env = "GANTRY_AGENT_TOKEN",
        hide_env_values = true,
        required_unless_present = "print_labels"
    )]
    token: Option<String>,
    #[arg(long, default_value = "default")]
    pool: String,
    /// This node's name (default: the host name). It is the node's identity across restarts.
    #[arg(long)]
    name: Option<String>,
    /// Cores to offer (default: all).
    #[arg(long)]
    cpus: Option<u32>,
    /// Memory to offer, e.g. 16GiB (default: all).
    #[arg(long, value_parser = parse_size)]
    memory: Option<u64>,
    /// Shared by the pool's agents: volumes live here.
    #[arg(long, default_value = "/var/lib/gantry/storage")]
    storage_root: PathBuf,
    /// This agent's own state: containers, image cache.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Where to serve Prometheus metrics (GET /metrics), or `off`. Loopback by default so
    /// nothing is exposed unasked; for a Prometheus on another host use 0.0.0.0:9464.
    #[arg(long, value_name = "ADDR", default_value = gantry_agent::metrics::DEFAULT_LISTEN, value_parser = parse_metrics_listen)]
    metrics_listen: MetricsListen,
    /// This node's Prometheus Node Exporter (host:port), announced to the server so that
    /// Prometheus' service discovery scrapes it with the node's name.
    #[arg(long, value_name = "HOST:PORT")]
    node_exporter: Option<String>,
    /// A port of this host that containers may reach, e.g. tcp/7070 or udp/53 (repeatable).
    /// Nothing else listening on the host is reachable from a container; the server named by
    /// --server needs none unless it is reached at a loopback address.
    #[arg(long = "host-allow", value_name = "PROTO/PORT")]
    host_allow: Vec<gantry_agent::net::HostPort>,
    /// A label of this node for placement, e.g. zone=a (repeatable). Keys are
    /// `[prefix/]name` as in Kubernetes; these win over the labels the agent finds
    /// (nvidia.com/gpu.model, nvidia.com/gpu.arch, nvidia.com/gpu.count, cpu.model).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = gantry_agent::labels::parse_label)]
    labels: Vec<(String, String)>,
    /// Print the labels this agent would report, as JSON, and exit.
    #[arg(long)]
    print_labels: bool,
    /// This node's address as other nodes reach it: where its host-network containers and
    /// multinode members are (default: the local address of its connection to the server).
    #[arg(long, value_name = "ADDR")]
    advertise: Option<std::net::IpAddr>,
    /// Where the exec service listens, through which a multinode job's members start
    /// processes in each other's containers (port 0: any free port), or `off`.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:0", value_parser = parse_metrics_listen)]
    exec_listen: MetricsListen,
    #[command(flatten)]
    confine: ConfineArgs,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// The loopback address of local agent `i` (from 1) of several: 127.0.1.1, 127.0.1.2, ...
fn node_address(i: u32) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(127, 0, 1, 0)) + i)
}

/// `--metrics-listen` and `--exec-listen`: an address, or `off`.
#[derive(Clone, Copy, Debug)]
struct MetricsListen(Option<SocketAddr>);

fn parse_metrics_listen(s: &str) -> Result<MetricsListen, String> {
    if s == "off" {
        return Ok(MetricsListen(None));
    }
    crate::parse_listen(s).map(|a| MetricsListen(Some(a)))
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    gantry_spec::parse_duration(s)
}

fn parse_size(s: &str) -> Result<u64, String> {
    gantry_spec::parse_size(s)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "node".into())
}

/// The agents `gantry up` and `gantry run` start in their own process: how many, the cores
/// each offers (default: its share of the machine), and how they pull and confine.
struct LocalAgents<'a> {
    count: u32,
    cpus: Option<u32>,
    registry: &'a RegistryArgs,
    confine: &'a ConfineArgs,
}

/// A server plus local agents. Returns the server and the admin client.
async fn embedded(
    data_dir: &Path,
    listen: SocketAddr,
    local: LocalAgents<'_>,
    monitoring: Option<&MonitoringOptions>,
    mcp: &McpArgs,
) -> anyhow::Result<(Server, Client, Option<Stack>, Vec<AgentConfig>)> {
    let LocalAgents {
        count: agents,
        cpus,
        registry,
        confine,
    } = local;
    if agents == 0 {
        return Err(UsageError("--agents must be at least 1".into()).into());
    }
    if let Some(m) = monitoring {
        super::monitoring::check_installed()?;
        // Before anything starts: a taken port is the user's to fix, not a half-started stack.
        super::monitoring::check_listen(m)?;
    }
    let pull = registry.pull_config()?;
    // Nobody else may list or change it: group and others keep at most the right to pass
    // through (0711), which the user namespaces of image builds and jobs (unprivileged host
    // uids) need to reach the agents' state below. What is private inside has its own modes.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
        let mode = std::fs::metadata(data_dir)?.permissions().mode() & 0o7777;
        if mode & 0o066 != 0 {
            std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(mode & 0o7711))?;
        }
    }
    let mut config = ServerConfig::new(listen, data_dir.join("server"));
    config.pull = pull.clone();
    config.read_layout = gantry_agent::image::read_layout;
    config.heartbeat_interval = Duration::from_secs(2);
    config.heartbeat_timeout = Duration::from_secs(15);
    config.mcp = mcp.config();
    let server = Server::start(config).await?;
    let url = format!("http://{}", server.addr);
    let ctx_path = data_dir.join("context.toml");
    let admin_token = if server.has_users().await? {
        let text = std::fs::read_to_string(&ctx_path)
            .with_context(|| format!("this data dir has users but no {}", ctx_path.display()))?;
        let ctx: ClientContext = toml::from_str(&text)?;
        ctx.token
    } else {
        server.create_user("admin", "admin", Role::Admin).await?
    };
    let ctx = ClientContext {
        url: url.clone(),
        token: admin_token.clone(),
    };
    write_context(&ctx_path, &ctx)?;
    // The agents' token: whoever reads it can register a node and be sent assignments, their
    // secrets filled in. Only the owner may read it (an older version wrote it 0644).
    let agent_token_path = data_dir.join("agent.token");
    let agent_token = match std::fs::read_to_string(&agent_token_path) {
        Ok(t) => {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&agent_token_path, std::fs::Permissions::from_mode(0o600))?;
            t.trim().to_string()
        }
        Err(_) => {
            let t = server
                .create_user("local-agents", "admin", Role::Agent)
                .await?;
            write_private(&agent_token_path, t.as_bytes())?;
            t
        }
    };
    let host = detect_capacity();
    let host_name = hostname();
    // The local agents reach the server over loopback, which containers cannot; they reach it
    // (its endpoint proxy) at the host's addresses when it listens on one, and need nothing
    // else of the host.
    let host_allow: Vec<gantry_agent::net::HostPort> = if listen.ip().is_loopback() {
        vec![]
    } else {
        vec![gantry_agent::net::HostPort {
            proto: gantry_agent::net::Proto::Tcp,
            port: server.addr.port(),
        }]
    };
    let mut exporters = vec![];
    let mut configs = vec![];
    for i in 1..=agents {
        let name = format!("{host_name}-{i}");
        let node_exporter = match monitoring {
            Some(_) => {
                let e =
                    super::monitoring::node_exporter(&name, &data_dir.join("agents").join(&name))?;
                let addr = e.addr.to_string();
                exporters.push(e);
                Some(addr)
            }
            None => None,
        };
        let config = AgentConfig {
            server: url.clone(),
            token: agent_token.clone(),
            pool: "default".into(),
            name: name.clone(),
            capacity: Capacity {
                cpus: cpus.unwrap_or(host.cpus / agents).max(1),
                memory_bytes: host.memory_bytes / agents as u64,
                devices: Default::default(),
            },
            storage_root: data_dir.join("storage"),
            state_dir: data_dir.join("agents").join(&name),
            pull: pull.clone(),
            // Each local agent its own port, picked by the system; Hello reports it.
            metrics_listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            node_exporter,
            // Agents of one host share its ids: each its own part of the range, so no two
            // containers of the host share host ids.
            job_userns: confine.job_userns.then(|| {
                let share = JOB_IDS.slots / agents;
                IdRange {
                    first: JOB_IDS.first + (i - 1) * share * 65536,
                    slots: share,
                }
            }),
            host_allow: host_allow.clone(),
            labels: Default::default(),
            // Each local agent is a node of its own loopback address (127.0.1.N), so that MPI
            // launchers, which run a "local" host's ranks themselves, see N nodes; its exec
            // service listens there only.
            advertise: (agents > 1).then(|| node_address(i).to_string()),
            exec_listen: Some(SocketAddr::new(
                if agents > 1 {
                    node_address(i)
                } else {
                    std::net::Ipv4Addr::LOCALHOST
                }
                .into(),
                0,
            )),
        };
        configs.push(config.clone());
        tokio::spawn(async move {
            if let Err(e) = gantry_agent::node::run(config).await {
                tracing::error!(agent = %name, "agent stopped: {e:#}");
            }
        });
    }
    let client = Client::new(&url, &admin_token)?;
    // Wait until every agent has registered, so the first workflow does not wait for nodes.
    for _ in 0..100 {
        let nodes: Vec<gantry_api::v1::NodeInfo> = client.get("/nodes").await?;
        if nodes.iter().filter(|n| n.connected).count() >= agents as usize {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stack = match monitoring {
        Some(opts) => {
            let dir = data_dir.join("monitoring");
            let token_path = dir.join("token");
            let token = match std::fs::read_to_string(&token_path) {
                Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
                _ => {
                    server
                        .create_user(
                            &format!("monitoring-{}", std::process::id()),
                            "admin",
                            Role::Monitoring,
                        )
                        .await?
                }
            };
            let stack =
                super::monitoring::start(&dir, server.addr, &token, opts, exporters).await?;
            set_links(&client, &dir, Some(&stack)).await?;
            Some(stack)
        }
        None => {
            set_links(&client, &data_dir.join("monitoring"), None).await?;
            None
        }
    };
    Ok((server, client, stack, configs))
}

/// The context `gantry up` keeps pointing at its server: `--context NAME` if given, else
/// `local` for the default data dir, else the data dir's own name (`~/lab` is `lab`), so that
/// two data dirs do not take each other's context.
fn up_context_name(conn: &Conn, data_dir: &Path) -> anyhow::Result<String> {
    if let Some(n) = &conn.context {
        check_context_name(n)?;
        return Ok(n.clone());
    }
    if data_dir == default_data_dir() {
        return Ok("local".into());
    }
    let base: String = data_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    let base = base.trim_start_matches('.');
    Ok(if base.is_empty() {
        "local".into()
    } else {
        base.into()
    })
}

/// Points the named context at this server and makes it current. Returns the lines to print:
/// where it points now, and the server it pointed at before when that was another one (the
/// user's earlier context is replaced, which they should hear).
fn remember_context(name: &str, client_url: &str, token: &str) -> anyhow::Result<Vec<String>> {
    let mut all = Contexts::load()?;
    let new = NamedContext {
        url: client_url.to_string(),
        token: token.to_string(),
        user: Some("admin".into()),
    };
    let old = all.contexts.insert(name.to_string(), new);
    let previous = all.current.replace(name.to_string());
    all.save()?;
    let mut lines = vec![format!(
        "context {name} now points at {client_url} (the current context: the other verbs use it)"
    )];
    if let Some(o) = old.filter(|o| o.url != client_url) {
        lines.push(format!(
            "  it replaced context {name}, which pointed at {}",
            o.url
        ));
    }
    if let Some(p) = previous.filter(|p| p != name) {
        lines.push(format!(
            "  the current context was {p}; go back with `gantry context use {p}`"
        ));
    }
    Ok(lines)
}

/// The web UI's Nodes page links to the stack that runs here. Without one, the links an earlier
/// `--monitoring` set would point at ports nobody serves: they are cleared, unless an
/// administrator has since changed them (then they are theirs). `<dir>/links` remembers what
/// was set.
async fn set_links(client: &Client, dir: &Path, stack: Option<&Stack>) -> anyhow::Result<()> {
    let record = dir.join("links");
    let put = |key: String, value: String| async move {
        let _: gantry_api::v1::Setting = client
            .send(
                client
                    .request(reqwest::Method::PUT, &format!("/admin/settings/{key}"))
                    .json(&gantry_api::v1::Setting {
                        key: key.clone(),
                        value,
                    }),
            )
            .await
            .with_context(|| format!("setting {key}"))?;
        anyhow::Ok(())
    };
    match stack {
        Some(s) => {
            let links = [
                (
                    "monitoring.prometheus_url",
                    format!("http://{}", s.prometheus),
                ),
                (
                    "monitoring.alertmanager_url",
                    format!("http://{}", s.alertmanager),
                ),
            ];
            let mut text = String::new();
            for (key, value) in links {
                text.push_str(&format!("{key}={value}\n"));
                put(key.into(), value).await?;
            }
            std::fs::write(&record, text)?;
        }
        None => {
            let Ok(text) = std::fs::read_to_string(&record) else {
                return Ok(());
            };
            for (key, value) in text.lines().filter_map(|l| l.split_once('=')) {
                let now: gantry_api::v1::Setting =
                    client.get(&format!("/admin/settings/{key}")).await?;
                if now.value == value {
                    put(key.into(), String::new()).await?;
                }
            }
            std::fs::remove_file(&record)?;
        }
    }
    Ok(())
}

pub async fn up(args: UpArgs, conn: &Conn) -> anyhow::Result<ExitCode> {
    let data_dir = args.data_dir.unwrap_or_else(default_data_dir);
    let context_name = up_context_name(conn, &data_dir)?;
    let opts = MonitoringOptions {
        interval: args.monitoring_interval,
        extra_rules: args.monitoring_rules.clone(),
        prometheus_listen: args.prometheus_listen,
        alertmanager_listen: args.alertmanager_listen,
    };
    let (mut server, client, stack, agents) = embedded(
        &data_dir,
        args.listen,
        LocalAgents {
            count: args.agents,
            cpus: args.cpus,
            registry: &args.registry,
            confine: &args.confine,
        },
        args.monitoring.then_some(&opts),
        &args.mcp,
    )
    .await?;
    println!("Gantry is up at {}", client.base);
    if let Some(s) = &stack {
        println!("  prometheus:   http://{}", s.prometheus);
        println!("  alertmanager: http://{}", s.alertmanager);
        for (node, addr) in &s.node_exporters {
            println!("  node exporter {node}: http://{addr}/metrics");
        }
        println!(
            "  monitoring files: {} (prometheus.yml, alertmanager.yml, rules/, dashboards/)",
            s.dir.display()
        );
    }
    println!("  data:    {}", data_dir.display());
    println!("  agents:  {}", args.agents);
    // The cluster runs either way; without a saved context the verbs need --data-dir or --url.
    match remember_context(&context_name, &client.base, &client_token(&data_dir)?) {
        Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
        Err(e) => println!(
            "  context: not saved ({e:#}); the other verbs find this server with --data-dir {}",
            data_dir.display()
        ),
    }
    println!("Try: gantry example pipeline | gantry workflow start - --watch");
    println!(
        "  (its image is docker://busybox:1 from Docker Hub; offline, run images from OCI \
         layouts with --oci-root DIR and oci://DIR/NAME, or pull through a local registry \
         with --registry-mirror docker.io=URL)"
    );
    tokio::select! {
        _ = shutdown_signal() => {}
        _ = server.wait() => {}
    }
    server.stop().await;
    release_idle(&agents);
    Ok(ExitCode::SUCCESS)
}

/// The administrator's token `embedded` wrote into the data dir's context file.
fn client_token(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join("context.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(toml::from_str::<ClientContext>(&text)?.token)
}

/// Ctrl-C, or SIGTERM from a service manager: both stop cleanly.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// On a clean stop, each agent with no container left gives back its container bridge (see
/// `gantry_agent::node::release_if_idle`); containers still running keep theirs.
fn release_idle(agents: &[AgentConfig]) {
    for a in agents {
        match gantry_agent::node::release_if_idle(a) {
            Ok(true) => tracing::info!(agent = %a.name, "removed its container bridge"),
            Ok(false) => tracing::info!(agent = %a.name, "containers remain: keeping its bridge"),
            Err(e) => tracing::warn!(agent = %a.name, "leaving its container bridge: {e:#}"),
        }
    }
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let tmp;
    let data_dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile_dir()?;
            tmp.clone()
        }
    };
    let listen: SocketAddr = "127.0.0.1:0".parse()?;
    let (_server, client, _, _) = embedded(
        &data_dir,
        listen,
        LocalAgents {
            count: args.agents,
            cpus: None,
            registry: &args.registry,
            confine: &args.confine,
        },
        None,
        &McpArgs::default(),
    )
    .await?;
    let conn = Conn {
        url: Some(client.base.clone()),
        token: None,
        data_dir: Some(data_dir.clone()),
        context: None,
    };
    let created = super::workflow::submit(&conn, &args.file, None).await?;
    let status = super::watch::watch(&client, &created.id.to_string(), true).await?;
    Ok(super::watch::exit_code(status))
}

/// A scratch data dir for `gantry run`; kept after exit for inspection (it is small).
fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("gantry-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

pub async fn server(args: ServerArgs) -> anyhow::Result<ExitCode> {
    let data_dir = args.data_dir.unwrap_or_else(default_data_dir);
    let mut config = ServerConfig::new(args.listen, data_dir.join("server"));
    config.store = args.store.unwrap_or_default();
    config.shared_dir = args.shared_dir;
    config.heartbeat_timeout = args.heartbeat_timeout;
    config.heartbeat_interval = (args.heartbeat_timeout / 6).max(Duration::from_millis(200));
    config.stop_grace = args.stop_grace;
    config.public_url = args.public_url;
    config.endpoint_domain = args.endpoint_domain;
    config.pull = args.registry.pull_config()?;
    config.read_layout = gantry_agent::image::read_layout;
    config.mcp = args.mcp.config();
    let mut server = Server::start(config).await?;
    let url = format!("http://{}", server.addr);
    if !server.has_users().await? {
        // Replicas started together on one new database may race here: the first makes the
        // administrator; the others find users and carry on.
        match server.create_user("admin", "admin", Role::Admin).await {
            Ok(token) => {
                write_context(
                    &data_dir.join("context.toml"),
                    &ClientContext {
                        url: url.clone(),
                        token,
                    },
                )?;
                eprintln!(
                    "created the first administrator; its token is in {}",
                    data_dir.join("context.toml").display()
                );
            }
            Err(_) if server.has_users().await? => {}
            Err(e) => return Err(e),
        }
    }
    tracing::info!("listening on {url}");
    tokio::select! {
        _ = shutdown_signal() => {}
        _ = server.wait() => {}
    }
    server.stop().await;
    Ok(ExitCode::SUCCESS)
}

pub async fn agent(args: AgentArgs) -> anyhow::Result<ExitCode> {
    let labels = gantry_agent::labels::admin_labels(&args.labels).map_err(anyhow::Error::msg)?;
    if args.print_labels {
        let found = gantry_agent::labels::node_labels(&labels);
        println!("{}", serde_json::to_string_pretty(&found)?);
        return Ok(ExitCode::SUCCESS);
    }
    // clap requires both unless --print-labels.
    let (Some(server), Some(token)) = (args.server, args.token) else {
        anyhow::bail!("--server and --token are required");
    };
    let urls = gantry_agent::node::servers(&server);
    if urls.is_empty() {
        anyhow::bail!("--server: no URL given");
    }
    if let Some(bad) = urls
        .iter()
        .find(|u| !u.starts_with("http://") && !u.starts_with("https://"))
    {
        anyhow::bail!("--server: {bad:?} is not an http:// or https:// URL");
    }
    let mut capacity = detect_capacity();
    if let Some(c) = args.cpus {
        capacity.cpus = c;
    }
    if let Some(m) = args.memory {
        capacity.memory_bytes = m;
    }
    let name = args.name.unwrap_or_else(hostname);
    let state_dir = args
        .state_dir
        .unwrap_or_else(|| PathBuf::from("/var/lib/gantry/agent").join(&name));
    let config = AgentConfig {
        server,
        token,
        pool: args.pool,
        name,
        capacity,
        storage_root: args.storage_root,
        state_dir,
        pull: args.registry.pull_config()?,
        node_exporter: args.node_exporter,
        metrics_listen: args.metrics_listen.0,
        job_userns: args.confine.job_userns.then_some(JOB_IDS),
        host_allow: args.host_allow,
        labels,
        advertise: args.advertise.map(|a| a.to_string()),
        exec_listen: args.exec_listen.0,
    };
    tokio::select! {
        r = gantry_agent::node::run(config.clone()) => r?,
        _ = shutdown_signal() => {}
    }
    release_idle(std::slice::from_ref(&config));
    Ok(ExitCode::SUCCESS)
}
