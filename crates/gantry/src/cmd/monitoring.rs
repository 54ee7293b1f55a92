//! `gantry up --monitoring`: the bundled node-health stack on one machine. Starts Debian's
//! Prometheus, Alertmanager and one Node Exporter per local agent, with the rules, routes and
//! scrape configuration of `deploy/monitoring/` (embedded in the binary) pointed at the
//! embedded server. The same files load into an existing Prometheus; see that folder's README.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::process::{Child, Command};

const PROMETHEUS_YML: &str = include_str!("../../../../deploy/monitoring/prometheus.yml");
const ALERTMANAGER_YML: &str = include_str!("../../../../deploy/monitoring/alertmanager.yml");
const RULES_YML: &str = include_str!("../../../../deploy/monitoring/rules/gantry-node-health.yml");

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
}

/// The running stack; its processes end with it (and with `gantry up`, even on SIGKILL).
pub struct Stack {
    pub prometheus: SocketAddr,
    pub alertmanager: SocketAddr,
    _children: Vec<Child>,
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
pub fn node_exporter(dir: &Path) -> anyhow::Result<(SocketAddr, Child)> {
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
    Ok((addr, child))
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

/// Renders the configuration into `dir` and starts Alertmanager and Prometheus.
pub async fn start(
    dir: &Path,
    server: SocketAddr,
    token: &str,
    opts: &MonitoringOptions,
    mut children: Vec<Child>,
) -> anyhow::Result<Stack> {
    std::fs::create_dir_all(dir.join("rules"))?;
    let token_file = dir.join("token");
    crate::client::write_private(&token_file, token.as_bytes())?;
    let am = free_addr()?;
    let prom = free_addr()?;
    let am_yml = ALERTMANAGER_YML
        .replace(
            "{{WEBHOOK_URL}}",
            &format!("http://{server}/api/v1/monitoring/alertmanager"),
        )
        .replace("{{WEBHOOK_TOKEN_FILE}}", &token_file.display().to_string());
    std::fs::write(dir.join("alertmanager.yml"), am_yml)?;
    let mut prom_yml = PROMETHEUS_YML
        .replace("{{SERVER}}", &server.to_string())
        .replace("{{TOKEN_FILE}}", &token_file.display().to_string())
        .replace("{{ALERTMANAGER}}", &am.to_string());
    if let Some(i) = opts.interval {
        prom_yml = set_interval(&prom_yml, i);
    }
    std::fs::write(dir.join("prometheus.yml"), prom_yml)?;
    std::fs::write(dir.join("rules/gantry-node-health.yml"), RULES_YML)?;
    for (i, extra) in opts.extra_rules.iter().enumerate() {
        let name = extra
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        std::fs::copy(extra, dir.join("rules").join(format!("extra-{i}-{name}")))
            .with_context(|| format!("copying rules {}", extra.display()))?;
    }
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
        _children: children,
    })
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
    fn the_interval_changes_only_global_timing_and_discovery_refresh() {
        let out = set_interval(PROMETHEUS_YML, Duration::from_secs(1));
        assert!(out.contains("  scrape_interval: 1s\n"));
        assert!(out.contains("  evaluation_interval: 1s\n"));
        assert!(out.contains("  scrape_timeout: 1s\n"));
        assert!(out.contains("refresh_interval: 5s"));
        assert!(!out.contains("scrape_interval: 10s"));
    }
}
