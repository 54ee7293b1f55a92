//! `gantry up --monitoring`: the bundled node-health stack on one machine. Starts Debian's
//! Prometheus, Alertmanager and one Node Exporter per local agent, with the rules, routes and
//! scrape configuration of `deploy/monitoring/` (embedded in the binary) pointed at the
//! embedded server, and writes them with the Grafana dashboards into `<data-dir>/monitoring/`.
//! `gantry monitoring export DIR` writes the same files for a Prometheus, Alertmanager and
//! Grafana you already run; see that folder's README.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::process::{Child, Command};

const PROMETHEUS_YML: &str = include_str!("../../../../deploy/monitoring/prometheus.yml");
const ALERTMANAGER_YML: &str = include_str!("../../../../deploy/monitoring/alertmanager.yml");
const RULES_YML: &str = include_str!("../../../../deploy/monitoring/rules/gantry-node-health.yml");
/// The Grafana dashboards, by file name; the server needs none of them, they are here so that
/// an installed binary carries what the repo's deploy/monitoring/ has.
const DASHBOARDS: &[(&str, &str)] = &[
    (
        "gantry-cluster-health.json",
        include_str!("../../../../deploy/monitoring/dashboards/gantry-cluster-health.json"),
    ),
    (
        "gantry-holds.json",
        include_str!("../../../../deploy/monitoring/dashboards/gantry-holds.json"),
    ),
    (
        "gantry-node.json",
        include_str!("../../../../deploy/monitoring/dashboards/gantry-node.json"),
    ),
];

/// Values for the shipped files' placeholders; `None` leaves the placeholder in the file (the
/// README says what each one takes).
#[derive(Debug, Clone, Default)]
pub struct Placeholders {
    /// `host:port` of the server.
    pub server: Option<String>,
    /// The server speaks HTTPS: the discovery URLs and the server's scrape job say so.
    pub https: bool,
    pub token_file: Option<String>,
    /// `host:port` of the Alertmanager.
    pub alertmanager: Option<String>,
    pub webhook_url: Option<String>,
    pub webhook_token_file: Option<String>,
}

/// Replaces the placeholder outside comments: the files' header comments name the
/// placeholders to document them, and must keep doing so in a copy.
fn fill(text: &str, name: &str, value: &Option<String>) -> String {
    let Some(v) = value else {
        return text.to_string();
    };
    let p = format!("{{{{{name}}}}}");
    text.split_inclusive('\n')
        .map(|l| {
            if l.trim_start().starts_with('#') {
                l.to_string()
            } else {
                l.replace(&p, v)
            }
        })
        .collect()
}

/// The placeholders still in `text` outside comments.
fn placeholders_left(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| {
            l.match_indices("{{")
                .filter_map(|(i, _)| {
                    let rest = &l[i + 2..];
                    let name = &rest[..rest.find("}}")?];
                    (!name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
                        .then(|| name.to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every file of the set, by path relative to the monitoring folder (where prometheus.yml's
/// `rule_files` globs expect `rules/`), placeholders filled from `p`.
pub fn files(p: &Placeholders, interval: Option<Duration>) -> Vec<(PathBuf, String)> {
    let mut prom = PROMETHEUS_YML.to_string();
    if p.https {
        prom = prom
            .replace("\"http://{{SERVER}}", "\"https://{{SERVER}}")
            .replace(
                "    metrics_path: /metrics\n",
                "    metrics_path: /metrics\n    scheme: https\n",
            );
    }
    prom = fill(&prom, "SERVER", &p.server);
    prom = fill(&prom, "TOKEN_FILE", &p.token_file);
    prom = fill(&prom, "ALERTMANAGER", &p.alertmanager);
    if let Some(i) = interval {
        prom = set_interval(&prom, i);
    }
    let am = fill(
        &fill(ALERTMANAGER_YML, "WEBHOOK_URL", &p.webhook_url),
        "WEBHOOK_TOKEN_FILE",
        &p.webhook_token_file,
    );
    let mut out = vec![
        (PathBuf::from("prometheus.yml"), prom),
        (PathBuf::from("alertmanager.yml"), am),
        (
            PathBuf::from("rules/gantry-node-health.yml"),
            RULES_YML.to_string(),
        ),
    ];
    for (name, text) in DASHBOARDS {
        out.push((Path::new("dashboards").join(name), text.to_string()));
    }
    out
}

/// Writes `files` under `dir`, creating folders.
fn write_files(dir: &Path, files: &[(PathBuf, String)]) -> anyhow::Result<()> {
    for (rel, text) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

const PROMETHEUS: &str = "/usr/bin/prometheus";
const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";
const NODE_EXPORTER: &str = "/usr/bin/prometheus-node-exporter";

/// What `--monitoring` was asked for.
#[derive(Debug, Clone)]
pub struct MonitoringOptions {
    /// Scrape and rule evaluation interval (the shipped files say 10s).
    pub interval: Option<Duration>,
    /// More rule files, loaded beside the shipped ones.
    pub extra_rules: Vec<PathBuf>,
    /// Fixed addresses; a free loopback port each when `None`.
    pub prometheus_listen: Option<SocketAddr>,
    pub alertmanager_listen: Option<SocketAddr>,
}

/// The running stack; its processes end with it (and with `gantry up`, even on SIGKILL).
pub struct Stack {
    pub prometheus: SocketAddr,
    pub alertmanager: SocketAddr,
    /// Each agent's Node Exporter: (node name, address).
    pub node_exporters: Vec<(String, SocketAddr)>,
    /// Where the rendered files are.
    pub dir: PathBuf,
    _children: Vec<Child>,
}

/// A node exporter started for an agent, before the rest of the stack.
pub struct Exporter {
    pub node: String,
    pub addr: SocketAddr,
    pub child: Child,
}

pub fn check_installed() -> anyhow::Result<()> {
    let missing: Vec<&str> = [PROMETHEUS, ALERTMANAGER, NODE_EXPORTER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if !missing.is_empty() {
        bail!(
            "--monitoring needs {}: install Debian's prometheus, prometheus-alertmanager and \
             prometheus-node-exporter packages (`make deps` does)",
            missing.join(", ")
        );
    }
    Ok(())
}

fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// The fixed address asked for, once we know it can be bound (so that a taken port is a
/// clear error here rather than a daemon that dies into its log), or a free one.
fn listen_addr(fixed: Option<SocketAddr>, flag: &str) -> anyhow::Result<SocketAddr> {
    match fixed {
        None => free_addr(),
        Some(a) => {
            std::net::TcpListener::bind(a)
                .map_err(|e| anyhow::anyhow!("{flag} {a}: cannot listen there ({e}); choose a free port or leave {flag} out for one picked for you"))?;
            Ok(a)
        }
    }
}

/// Refuses fixed addresses that cannot be bound.
pub fn check_listen(opts: &MonitoringOptions) -> anyhow::Result<()> {
    listen_addr(opts.prometheus_listen, "--prometheus-listen")?;
    listen_addr(opts.alertmanager_listen, "--alertmanager-listen")?;
    if opts.prometheus_listen.is_some() && opts.prometheus_listen == opts.alertmanager_listen {
        return Err(crate::output::UsageError(
            "--prometheus-listen and --alertmanager-listen name the same address".into(),
        )
        .into());
    }
    Ok(())
}

/// Starts a child that dies with us: `gantry up` killed with SIGKILL must not leave a
/// Prometheus behind holding its ports.
fn spawn(program: &str, args: &[String], log: &Path) -> anyhow::Result<Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe; it only sets this child's parent-death signal.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn().with_context(|| format!("starting {program}"))
}

/// Starts one Node Exporter for an agent, with its own textfile directory (so a test or an
/// operator can raise a metric for that node alone). Returns its address.
pub fn node_exporter(node: &str, dir: &Path) -> anyhow::Result<Exporter> {
    let textfile = dir.join("textfile");
    std::fs::create_dir_all(&textfile)?;
    let addr = free_addr()?;
    let child = spawn(
        NODE_EXPORTER,
        &[
            format!("--web.listen-address={addr}"),
            // The systemd collector needs D-Bus, which a plain machine may not run.
            "--no-collector.systemd".into(),
            format!("--collector.textfile.directory={}", textfile.display()),
        ],
        &dir.join("node-exporter.log"),
    )?;
    Ok(Exporter {
        node: node.to_string(),
        addr,
        child,
    })
}

fn set_interval(config: &str, interval: Duration) -> String {
    let secs = interval.as_secs().max(1);
    let mut in_global = false;
    config
        .lines()
        .map(|l| {
            if !l.starts_with(' ') && !l.is_empty() && !l.starts_with('#') {
                in_global = l.starts_with("global:");
            }
            let t = l.trim_start();
            if in_global
                && (t.starts_with("scrape_interval:") || t.starts_with("evaluation_interval:"))
            {
                let key = t.split(':').next().unwrap_or_default();
                format!("  {key}: {secs}s")
            } else if in_global && t.starts_with("scrape_timeout:") {
                format!("  scrape_timeout: {secs}s")
            } else if t.starts_with("refresh_interval:") {
                let indent = &l[..l.len() - t.len()];
                format!("{indent}refresh_interval: {}s", (secs * 5).max(5))
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn wait_ready(addr: SocketAddr, path: &str, what: &str) -> anyhow::Result<()> {
    for _ in 0..150 {
        if let Ok(r) = reqwest::get(format!("http://{addr}{path}")).await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("{what} at {addr} did not become ready (see its log)")
}

/// Renders the configuration and dashboards into `dir` and starts Alertmanager and Prometheus.
pub async fn start(
    dir: &Path,
    server: SocketAddr,
    token: &str,
    opts: &MonitoringOptions,
    exporters: Vec<Exporter>,
) -> anyhow::Result<Stack> {
    let am = listen_addr(opts.alertmanager_listen, "--alertmanager-listen")?;
    let prom = listen_addr(opts.prometheus_listen, "--prometheus-listen")?;
    std::fs::create_dir_all(dir.join("rules"))?;
    let token_file = dir.join("token");
    crate::client::write_private(&token_file, token.as_bytes())?;
    let token_file = token_file.display().to_string();
    let rendered = files(
        &Placeholders {
            server: Some(server.to_string()),
            https: false,
            token_file: Some(token_file.clone()),
            alertmanager: Some(am.to_string()),
            webhook_url: Some(format!("http://{server}/api/v1/monitoring/alertmanager")),
            webhook_token_file: Some(token_file),
        },
        opts.interval,
    );
    write_files(dir, &rendered)?;
    for (i, extra) in opts.extra_rules.iter().enumerate() {
        let name = extra
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        std::fs::copy(extra, dir.join("rules").join(format!("extra-{i}-{name}")))
            .with_context(|| format!("copying rules {}", extra.display()))?;
    }
    let node_exporters = exporters.iter().map(|e| (e.node.clone(), e.addr)).collect();
    let mut children: Vec<Child> = exporters.into_iter().map(|e| e.child).collect();
    std::fs::create_dir_all(dir.join("alertmanager-data"))?;
    std::fs::create_dir_all(dir.join("prometheus-data"))?;
    children.push(spawn(
        ALERTMANAGER,
        &[
            format!("--config.file={}", dir.join("alertmanager.yml").display()),
            format!("--storage.path={}", dir.join("alertmanager-data").display()),
            format!("--web.listen-address={am}"),
            // Empty: no HA gossip on one machine.
            "--cluster.listen-address=".into(),
        ],
        &dir.join("alertmanager.log"),
    )?);
    children.push(spawn(
        PROMETHEUS,
        &[
            format!("--config.file={}", dir.join("prometheus.yml").display()),
            format!(
                "--storage.tsdb.path={}",
                dir.join("prometheus-data").display()
            ),
            format!("--web.listen-address={prom}"),
            "--web.enable-lifecycle".into(),
            "--rules.alert.resend-delay=1s".into(),
        ],
        &dir.join("prometheus.log"),
    )?);
    wait_ready(am, "/-/ready", "Alertmanager").await?;
    wait_ready(prom, "/-/ready", "Prometheus").await?;
    Ok(Stack {
        prometheus: prom,
        alertmanager: am,
        node_exporters,
        dir: dir.to_path_buf(),
        _children: children,
    })
}

/// `gantry monitoring ...`: the node-health files for a Prometheus, Alertmanager and Grafana
/// you run yourself.
#[derive(clap::Subcommand, Debug)]
pub enum MonitoringCmd {
    /// Write prometheus.yml, alertmanager.yml, rules/ and dashboards/ into DIR, placeholders
    /// filled from the flags (the others are left for you: see deploy/monitoring/README.md).
    Export(ExportArgs),
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Folder to write into (created if missing).
    dir: PathBuf,
    /// The Gantry server as Prometheus and Alertmanager reach it, e.g. http://10.0.0.10:7070.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// Where Alertmanager posts alerts (default: the server's /api/v1/monitoring/alertmanager).
    #[arg(long, value_name = "URL")]
    alertmanager_webhook: Option<String>,
    /// The Alertmanager Prometheus sends alerts to, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    alertmanager: Option<String>,
    /// File with the monitoring token Prometheus sends (see `gantry admin user create --monitoring`).
    #[arg(long, value_name = "PATH")]
    token_file: Option<String>,
    /// File with the monitoring token Alertmanager sends (default: --token-file).
    #[arg(long, value_name = "PATH")]
    webhook_token_file: Option<String>,
    /// Replace files that differ from what would be written.
    #[arg(long)]
    force: bool,
}

/// `--server`: scheme and `host:port`, nothing else (the shipped paths are fixed).
fn parse_server(url: &str) -> Result<(bool, String), String> {
    let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!(
            "--server {url:?}: give the server's URL, http://HOST:PORT or https://HOST:PORT"
        ));
    };
    let hostport = rest.trim_end_matches('/');
    if hostport.is_empty() || hostport.contains(['/', '?', '#', '@', ' ', '"']) {
        return Err(format!(
            "--server {url:?}: give only the scheme, host and port (no path), e.g. http://10.0.0.10:7070"
        ));
    }
    Ok((https, hostport.to_string()))
}

/// A value written into YAML between double quotes must not end the string.
fn plain_value(flag: &str, v: &str) -> Result<(), String> {
    if v.is_empty() || v.contains(['"', '\\', '\n', '\r']) {
        return Err(format!(
            "{flag} {v:?}: must be non-empty, without quotes, backslashes or line breaks"
        ));
    }
    Ok(())
}

fn export_placeholders(a: &ExportArgs) -> Result<Placeholders, String> {
    let mut p = Placeholders::default();
    if let Some(url) = &a.server {
        let (https, hostport) = parse_server(url)?;
        p.https = https;
        p.webhook_url = Some(format!(
            "{}://{hostport}/api/v1/monitoring/alertmanager",
            if https { "https" } else { "http" }
        ));
        p.server = Some(hostport);
    }
    if let Some(w) = &a.alertmanager_webhook {
        if !(w.starts_with("http://") || w.starts_with("https://")) {
            return Err(format!(
                "--alertmanager-webhook {w:?}: give an http:// or https:// URL"
            ));
        }
        plain_value("--alertmanager-webhook", w)?;
        p.webhook_url = Some(w.clone());
    }
    for (flag, v) in [
        ("--alertmanager", &a.alertmanager),
        ("--token-file", &a.token_file),
        ("--webhook-token-file", &a.webhook_token_file),
    ] {
        if let Some(v) = v {
            plain_value(flag, v)?;
        }
    }
    p.alertmanager = a.alertmanager.clone();
    p.token_file = a.token_file.clone();
    p.webhook_token_file = a.webhook_token_file.clone().or(a.token_file.clone());
    Ok(p)
}

pub fn run(cmd: MonitoringCmd) -> anyhow::Result<std::process::ExitCode> {
    let MonitoringCmd::Export(a) = cmd;
    let p = export_placeholders(&a).map_err(crate::output::UsageError)?;
    let files = files(&p, None);
    // Look at everything before writing anything: a refusal leaves DIR as it was.
    let mut differing = vec![];
    let mut status = vec![];
    for (rel, text) in &files {
        let path = a.dir.join(rel);
        match std::fs::read(&path) {
            Ok(old) if old == text.as_bytes() => status.push("unchanged"),
            Ok(_) => {
                differing.push(path.display().to_string());
                status.push("replaced");
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => status.push("written"),
            Err(e) => bail!("reading {}: {e}", path.display()),
        }
    }
    if !differing.is_empty() && !a.force {
        bail!(
            "these files exist and differ from what would be written; nothing was written \
             (compare them, then run again with --force to replace them):\n  {}",
            differing.join("\n  ")
        );
    }
    write_files(&a.dir, &files)?;
    println!("Wrote the Gantry monitoring files to {}:", a.dir.display());
    for ((rel, _), st) in files.iter().zip(&status) {
        println!("  {:<40} {st}", rel.display());
    }
    let mut left: Vec<String> = files
        .iter()
        .flat_map(|(_, t)| placeholders_left(t))
        .collect();
    left.sort();
    left.dedup();
    if !left.is_empty() {
        println!(
            "Placeholders left to fill in (deploy/monitoring/README.md, \"Placeholders\"): {}",
            left.iter()
                .map(|n| format!("{{{{{n}}}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let d = a.dir.display();
    println!("Next steps:");
    println!(
        "  Prometheus:   add the scrape jobs of {d}/prometheus.yml to yours (or use it as is),"
    );
    println!(
        "                copy {d}/rules/*.yml beside your rule files, then `promtool check config`"
    );
    println!(
        "  Alertmanager: put the gantry routes and receiver of {d}/alertmanager.yml first in your"
    );
    println!("                route tree (or use it as is), then `amtool check-config`");
    println!(
        "  Grafana:      import {d}/dashboards/*.json (Dashboards > New > Import), or point a file"
    );
    println!("                provisioning provider at {d}/dashboards");
    println!("  Gantry:       gantry admin settings set monitoring.prometheus_url=... (and");
    println!(
        "                alertmanager_url, grafana_url) to link them from the web UI's Nodes page"
    );
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_files_have_their_placeholders() {
        for p in ["{{SERVER}}", "{{TOKEN_FILE}}", "{{ALERTMANAGER}}"] {
            assert!(PROMETHEUS_YML.contains(p), "{p}");
        }
        for p in ["{{WEBHOOK_URL}}", "{{WEBHOOK_TOKEN_FILE}}"] {
            assert!(ALERTMANAGER_YML.contains(p), "{p}");
        }
    }

    #[test]
    fn every_file_is_written_and_only_given_placeholders_are_filled() {
        let all = files(&Placeholders::default(), None);
        let names: Vec<String> = all.iter().map(|(p, _)| p.display().to_string()).collect();
        assert!(names.contains(&"rules/gantry-node-health.yml".to_string()));
        assert_eq!(
            names
                .iter()
                .filter(|n| n.starts_with("dashboards/"))
                .count(),
            3
        );
        assert_eq!(all[0].1, PROMETHEUS_YML);
        let p = Placeholders {
            server: Some("10.0.0.1:7070".into()),
            https: true,
            ..Default::default()
        };
        let prom = &files(&p, None)[0].1;
        assert!(prom.contains("\"https://10.0.0.1:7070/api/v1/monitoring/targets\""));
        assert!(prom.contains("scheme: https"));
        assert!(prom.contains("{{TOKEN_FILE}}") && prom.contains("{{ALERTMANAGER}}"));
    }

    #[test]
    fn a_server_url_with_a_path_or_no_scheme_is_refused() {
        assert_eq!(
            parse_server("http://h:1/").unwrap(),
            (false, "h:1".to_string())
        );
        assert!(parse_server("h:1").is_err());
        assert!(parse_server("http://h:1/api").is_err());
        assert!(parse_server("https://").is_err());
    }

    #[test]
    fn the_interval_changes_only_global_timing_and_discovery_refresh() {
        let out = set_interval(PROMETHEUS_YML, Duration::from_secs(1));
        assert!(out.contains("  scrape_interval: 1s\n"));
        assert!(out.contains("  evaluation_interval: 1s\n"));
        assert!(out.contains("  scrape_timeout: 1s\n"));
        assert!(out.contains("refresh_interval: 5s"));
        assert!(!out.contains("scrape_interval: 10s"));
    }
}
