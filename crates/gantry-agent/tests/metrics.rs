//! The agent's Prometheus exporter, for real: its HTTP server scraped over loopback, its
//! runtime check starting trial containers under real runc (a `harness = false` test like
//! `runtime.rs`), its path probes on a writable
//! directory and a read-only mount, and, where Prometheus is installed, Prometheus itself
//! scraping it. The only stand-in is a fake GPU source: no GPU exists on the machines these
//! tests run on.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_agent::image::{ImageStore, PullConfig};
use gantry_agent::metrics::gpu::{self, GpuReading, GpuSource, RemappedRows, Throttle};
use gantry_agent::metrics::health::{self, CHECK_CONTAINER};
use gantry_agent::metrics::{self, HealthConfig, Metrics, CONTENT_TYPE_OPENMETRICS};
use gantry_agent::runtime::{Runtime, RuntimeConfig};

const DEADLINE: Duration = Duration::from_secs(120);

/// One sample of the exposition.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The exposition, parsed: samples, and each family's `# TYPE`.
#[derive(Debug, Default)]
struct Exposition {
    samples: Vec<Sample>,
    types: BTreeMap<String, String>,
}

impl Exposition {
    fn parse(text: &str) -> Exposition {
        assert!(text.ends_with("# EOF\n"), "no EOF marker:\n{text}");
        let mut e = Exposition::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, typ) = rest.split_once(' ').expect("TYPE line");
                e.types.insert(name.into(), typ.into());
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            e.samples.push(parse_sample(line));
        }
        for s in &e.samples {
            let family = match s.name.strip_suffix("_total") {
                Some(f) if e.types.get(f).map(String::as_str) == Some("counter") => f,
                _ => &s.name,
            };
            assert!(e.types.contains_key(family), "{} has no # TYPE", s.name);
        }
        e
    }

    /// The samples of `name` whose labels include `labels`.
    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The one value of `name` with `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found = self.find(name, labels);
        assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
        found[0].value
    }

    fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }
}

/// `name{k="v",...} value` (values here never hold `}` or `"` unescaped).
fn parse_sample(line: &str) -> Sample {
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let close = line.rfind('}').expect("closing brace");
            (&line[..open], &line[open + 1..close], &line[close + 1..])
        }
        None => {
            let sp = line.find(' ').expect("a value");
            (&line[..sp], "", &line[sp..])
        }
    };
    let mut map = BTreeMap::new();
    for pair in labels.split("\",").filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
        map.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
    }
    let value = rest
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("value in {line:?}"));
    Sample {
        name: name.to_owned(),
        labels: map,
        value,
    }
}

/// A scratch directory, a storage root mounted read-only, and a runtime, for one test.
struct Setup {
    base: PathBuf,
    scratch: PathBuf,
    storage: PathBuf,
    config: RuntimeConfig,
    rt: Runtime,
}

impl Setup {
    fn new(name: &str, runc: Option<&str>) -> Setup {
        let base =
            std::env::temp_dir().join(format!("gantry-metrics-{}-{name}", std::process::id()));
        let scratch = base.join("state");
        let storage = base.join("storage");
        fs::create_dir_all(&scratch).unwrap();
        fs::create_dir_all(&storage).unwrap();
        mount_read_only_tmpfs(&storage);
        let mut config = RuntimeConfig::new(
            scratch.join("runtime"),
            scratch.join("runc"),
            format!("gantry-test/agent-metrics-{}", std::process::id()),
        );
        if let Some(r) = runc {
            config.runc = r.into();
        }
        let rt = Runtime::new(config.clone()).unwrap();
        Setup {
            base,
            scratch,
            storage,
            config,
            rt,
        }
    }

    fn health(&self) -> HealthConfig {
        let mut h = HealthConfig::new(&self.scratch, &self.storage);
        h.interval = Duration::from_secs(3600);
        h
    }

    /// Nothing of the trial container is left: no container directory, runc state, mount
    /// or cgroup.
    fn assert_clean(&self) {
        assert!(!self.rt.list().iter().any(|id| id == CHECK_CONTAINER));
        assert!(!self.rt.container_dir(CHECK_CONTAINER).exists());
        let out = Command::new("runc")
            .arg("--root")
            .arg(&self.config.runc_root)
            .args(["list", "-q"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "");
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let scratch = self.scratch.to_string_lossy();
        assert!(
            !mountinfo.lines().any(|l| l.contains(scratch.as_ref())),
            "a mount is left under {scratch}"
        );
        for h in fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
            let cg = h
                .path()
                .join(&self.config.cgroup_parent)
                .join(CHECK_CONTAINER);
            assert!(!cg.exists(), "cgroup {} is left", cg.display());
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = self.rt.remove(CHECK_CONTAINER);
        unmount(&self.storage);
        let _ = fs::remove_dir_all(&self.base);
    }
}

fn mount_read_only_tmpfs(dir: &Path) {
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=1m", "gantry-metrics-test"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "mounting a read-only tmpfs (are we root?)"
    );
}

fn unmount(dir: &Path) {
    let _ = Command::new("umount")
        .arg(dir)
        .stderr(Stdio::null())
        .status();
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Scrapes until `ready` holds for the exposition, and returns it.
async fn scrape_until(addr: SocketAddr, ready: impl Fn(&Exposition) -> bool) -> Exposition {
    let client = client();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let resp = client
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .expect("scraping");
        assert!(resp.status().is_success(), "{}", resp.status());
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            CONTENT_TYPE_OPENMETRICS
        );
        let e = Exposition::parse(&resp.text().await.unwrap());
        if ready(&e) {
            return e;
        }
        assert!(Instant::now() < deadline, "never ready: {e:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// An agent's exporter on this machine: runc works, the scratch dir takes writes, the
/// read-only storage root does not, and there is no NVML.
fn exporter_over_http() {
    let s = Setup::new("http", None);
    block_on(async {
        let images =
            Arc::new(ImageStore::new(s.scratch.join("images"), PullConfig::default()).unwrap());
        let m = Metrics::new("9.8.7-test", gpu::nvml_source());
        m.set_running_source(|| 3);
        m.poll_gpus();
        let checks = metrics::spawn_health_checks(&m, s.rt.clone(), Some(images), s.health());
        let (addr, server) = metrics::serve("127.0.0.1:0".parse().unwrap(), m.clone())
            .await
            .unwrap();
        assert_ne!(addr.port(), 0);
        let e = scrape_until(addr, |e| e.has("gantry_agent_runtime_healthy")).await;

        assert_eq!(
            e.value("gantry_agent_info", &[("version", "9.8.7-test")]),
            1.0
        );
        assert_eq!(e.types["gantry_agent_info"], "gauge");
        assert_eq!(e.value("gantry_agent_connected", &[]), 0.0);
        let lag = e.value("gantry_agent_heartbeat_lag_seconds", &[]);
        assert!(lag >= 0.0);
        assert_eq!(e.value("gantry_agent_runtime_healthy", &[]), 1.0, "{e:#?}");
        assert!(e.value("gantry_agent_runtime_check_duration_seconds", &[]) > 0.0);
        assert_eq!(
            e.value("gantry_agent_runtime_check_failures_total", &[]),
            0.0
        );
        assert_eq!(e.types["gantry_agent_runtime_check_failures"], "counter");
        assert_eq!(
            e.value("gantry_agent_path_writable", &[("path", "scratch")]),
            1.0
        );
        assert_eq!(
            e.value("gantry_agent_path_writable", &[("path", "storage")]),
            0.0
        );
        for path in ["scratch", "storage"] {
            let size = e.value("gantry_agent_path_size_bytes", &[("path", path)]);
            let free = e.value("gantry_agent_path_free_bytes", &[("path", path)]);
            assert!(size > 0.0 && free <= size, "{path}: {free} of {size}");
        }
        // The read-only tmpfs was mounted with size=1m.
        assert_eq!(
            e.value("gantry_agent_path_size_bytes", &[("path", "storage")]),
            1048576.0
        );
        assert!(e.value("gantry_agent_image_cache_bytes", &[]) >= 0.0);
        assert_eq!(e.value("gantry_agent_running_jobs", &[]), 3.0);

        let gpu_series: Vec<&Sample> = e
            .samples
            .iter()
            .filter(|s| s.name.starts_with("gantry_gpu_"))
            .collect();
        if gpu::nvml_available() {
            // A GPU machine: every GPU answers with its identity.
            assert!(e.value("gantry_gpu_count", &[]) >= 1.0);
            assert!(!e.find("gantry_gpu_last_xid", &[]).is_empty());
        } else {
            // No NVML here: only the count, and it is 0.
            assert_eq!(gpu_series.len(), 1, "{gpu_series:#?}");
            assert_eq!(e.value("gantry_gpu_count", &[]), 0.0);
        }

        // The node code's hooks.
        m.set_connected(true);
        let heard = Instant::now();
        m.heard_from_server();
        let later = scrape_until(addr, |e| e.value("gantry_agent_connected", &[]) == 1.0).await;
        // The lag restarted when the server was heard: it cannot exceed the time since.
        let lag = later.value("gantry_agent_heartbeat_lag_seconds", &[]);
        assert!(lag <= heard.elapsed().as_secs_f64(), "{lag}");

        checks.abort();
        server.abort();
    });
    s.assert_clean();
}

/// The runtime check through the real runtime, twice in a row, leaving nothing behind.
fn runtime_check_leaves_nothing_behind() {
    let s = Setup::new("check", None);
    let work = s.scratch.join("health");
    for _ in 0..2 {
        let how = health::check_runtime(&s.rt, &work).expect("runtime check");
        if cfg!(target_arch = "x86_64") {
            assert_eq!(how, health::RuntimeCheck::Container);
        }
        s.assert_clean();
    }
}

/// A runtime that cannot start containers (its runc is missing) reads unhealthy, and each
/// failed check is counted.
fn broken_runtime_reads_unhealthy() {
    let s = Setup::new("broken", Some("/nonexistent/runc"));
    block_on(async {
        let m = Metrics::new("test", Arc::new(gpu::NoGpus));
        let mut h = s.health();
        h.interval = Duration::from_millis(200);
        let checks = metrics::spawn_health_checks(&m, s.rt.clone(), None, h);
        let deadline = Instant::now() + DEADLINE;
        let e = loop {
            let e = Exposition::parse(&m.render());
            if e.has("gantry_agent_runtime_check_failures_total")
                && e.value("gantry_agent_runtime_check_failures_total", &[]) >= 2.0
            {
                break e;
            }
            assert!(Instant::now() < deadline, "{e:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        checks.abort();
        assert_eq!(e.value("gantry_agent_runtime_healthy", &[]), 0.0);
        // Without an image store there is no cache figure.
        assert!(!e.has("gantry_agent_image_cache_bytes"));
    });
    // Dropping the tokio runtime waited for a check still in flight to finish its cleanup.
    s.assert_clean();
}

/// A fake GPU source (no GPU exists here): two GPUs, one of which supports little.
struct FakeGpus;

impl GpuSource for FakeGpus {
    fn read(&self) -> Vec<GpuReading> {
        vec![
            GpuReading {
                index: 0,
                uuid: "GPU-fake-0".into(),
                temperature_celsius: Some(71),
                ecc_corrected: Some(5),
                ecc_uncorrected: Some(1),
                retired_pages_single: Some(2),
                retired_pages_double: Some(0),
                remapped_rows: Some(RemappedRows {
                    correctable: 4,
                    uncorrectable: 1,
                    pending: true,
                    failed: false,
                }),
                last_xid: 79,
                xid_events: 3,
                throttle: Some(Throttle {
                    hw_thermal: true,
                    ..Default::default()
                }),
            },
            GpuReading {
                index: 1,
                uuid: "GPU-fake-1".into(),
                temperature_celsius: Some(40),
                ..Default::default()
            },
        ]
    }
}

fn fake_gpus_render() {
    let m = Metrics::new("test", Arc::new(FakeGpus));
    let before = Exposition::parse(&m.render());
    assert_eq!(
        before.value("gantry_gpu_count", &[]),
        0.0,
        "nothing read yet"
    );
    m.poll_gpus();
    let text = m.render();
    let e = Exposition::parse(&text);
    let g0 = [("gpu", "0"), ("uuid", "GPU-fake-0")];
    let with = |k: &'static str, v: &'static str| {
        let mut l = g0.to_vec();
        l.push((k, v));
        l
    };
    assert_eq!(e.value("gantry_gpu_count", &[]), 2.0);
    assert_eq!(e.value("gantry_gpu_temperature_celsius", &g0), 71.0);
    assert_eq!(
        e.value("gantry_gpu_ecc_errors_total", &with("type", "single")),
        5.0
    );
    assert_eq!(
        e.value("gantry_gpu_ecc_errors_total", &with("type", "double")),
        1.0
    );
    assert_eq!(
        e.value("gantry_gpu_retired_pages", &with("cause", "single")),
        2.0
    );
    assert_eq!(
        e.value("gantry_gpu_retired_pages", &with("cause", "double")),
        0.0
    );
    for (kind, v) in [
        ("correctable", 4.0),
        ("uncorrectable", 1.0),
        ("pending", 1.0),
        ("failed", 0.0),
    ] {
        assert_eq!(e.value("gantry_gpu_remapped_rows", &with("kind", kind)), v);
    }
    assert_eq!(e.value("gantry_gpu_last_xid", &g0), 79.0);
    assert_eq!(e.value("gantry_gpu_xid_events_total", &g0), 3.0);
    for (reason, v) in [
        ("hw_slowdown", 0.0),
        ("hw_thermal", 1.0),
        ("sw_thermal", 0.0),
        ("power_brake", 0.0),
    ] {
        assert_eq!(e.value("gantry_gpu_throttled", &with("reason", reason)), v);
    }
    assert_eq!(e.types["gantry_gpu_ecc_errors"], "counter");
    assert_eq!(e.types["gantry_gpu_xid_events"], "counter");
    assert_eq!(e.types["gantry_gpu_temperature_celsius"], "gauge");
    assert!(text.contains("gantry_gpu_temperature_celsius{gpu=\"0\",uuid=\"GPU-fake-0\"} 71\n"));

    // GPU 1 supports only temperature: its unsupported series are left out, not zero.
    let g1 = [("gpu", "1"), ("uuid", "GPU-fake-1")];
    assert_eq!(e.value("gantry_gpu_temperature_celsius", &g1), 40.0);
    assert_eq!(e.value("gantry_gpu_last_xid", &g1), 0.0);
    assert_eq!(e.value("gantry_gpu_xid_events_total", &g1), 0.0);
    for name in [
        "gantry_gpu_ecc_errors_total",
        "gantry_gpu_retired_pages",
        "gantry_gpu_remapped_rows",
        "gantry_gpu_throttled",
    ] {
        assert!(e.find(name, &g1).is_empty(), "{name} for GPU 1");
    }
}

/// Prometheus itself (Debian's package) scrapes the exporter and reads the series back.
fn prometheus_scrapes_the_exporter() {
    let prometheus = Path::new("/usr/bin/prometheus");
    if !prometheus.exists() {
        println!("prometheus is not installed (apt-get install prometheus): not checked");
        return;
    }
    let s = Setup::new("prom", None);
    block_on(async {
        let m = Metrics::new("9.8.7-test", Arc::new(FakeGpus));
        m.poll_gpus();
        let checks = metrics::spawn_health_checks(&m, s.rt.clone(), None, s.health());
        let (addr, server) = metrics::serve("127.0.0.1:0".parse().unwrap(), m.clone())
            .await
            .unwrap();
        scrape_until(addr, |e| e.has("gantry_agent_runtime_healthy")).await;

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = s.base.join("prometheus");
        fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: agent\n    static_configs: [{{targets: ['{addr}']}}]\n"
            ),
        )
        .unwrap();
        let mut child = Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .unwrap();
        let client = client();
        let query = |q: &str| {
            let url = format!("http://127.0.0.1:{port}/api/v1/query?query={}", encode(q));
            let client = client.clone();
            async move {
                let body = client.get(url).send().await.ok()?.text().await.ok()?;
                let v: serde_json::Value = serde_json::from_str(&body).ok()?;
                let r = v["data"]["result"].as_array()?.first()?.clone();
                r["value"][1].as_str()?.parse::<f64>().ok()
            }
        };
        let deadline = Instant::now() + DEADLINE;
        let result = loop {
            if query("up{job=\"agent\"}").await == Some(1.0)
                && query("gantry_agent_runtime_healthy").await.is_some()
            {
                break Ok(());
            }
            if Instant::now() > deadline {
                break Err(fs::read_to_string(dir.join("log")).unwrap_or_default());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let checks_seen = [
            ("gantry_agent_runtime_healthy", 1.0),
            ("gantry_agent_runtime_check_failures_total", 0.0),
            ("gantry_agent_info{version=\"9.8.7-test\"}", 1.0),
            ("gantry_agent_path_writable{path=\"storage\"}", 0.0),
            ("gantry_gpu_count", 2.0),
            (
                "gantry_gpu_ecc_errors_total{gpu=\"0\",type=\"double\"}",
                1.0,
            ),
            ("gantry_gpu_remapped_rows{gpu=\"0\",kind=\"pending\"}", 1.0),
        ];
        let mut seen = Vec::new();
        if result.is_ok() {
            for (q, _) in &checks_seen {
                seen.push(query(q).await);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        checks.abort();
        server.abort();
        if let Err(log) = result {
            panic!("Prometheus never scraped the exporter:\n{log}");
        }
        for ((q, want), got) in checks_seen.iter().zip(seen) {
            assert_eq!(got, Some(*want), "{q}");
        }
    });
}

/// Percent-encodes a PromQL query for a URL.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

type Test = (&'static str, fn());

const TESTS: &[Test] = &[
    ("exporter_over_http", exporter_over_http),
    (
        "runtime_check_leaves_nothing_behind",
        runtime_check_leaves_nothing_behind,
    ),
    (
        "broken_runtime_reads_unhealthy",
        broken_runtime_reads_unhealthy,
    ),
    ("fake_gpus_render", fake_gpus_render),
    (
        "prometheus_scrapes_the_exporter",
        prometheus_scrapes_the_exporter,
    ),
];

fn main() {
    let Some(selected) = common::select(TESTS) else {
        return;
    };
    // reqwest is built without a bundled crypto provider, even for plain HTTP.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tally = common::run_all(TESTS.len(), &selected, |t| t(), || {});
    tally.finish();
}
