//! The agent's Prometheus exporter: what Node Exporter cannot see about this node.
//!
//! `GET /metrics` on the metrics address answers in the OpenMetrics text format
//! (prometheus-client). A scrape only reads: the agent's own state (connection, heartbeat lag,
//! running jobs) is read where it lives, and everything slow (a trial container start through
//! runc, probe writes, `statvfs`, the image cache's size, NVML) is done by background tasks
//! whose latest results the scrape renders.
//!
//! | series | meaning |
//! |---|---|
//! | `gantry_agent_info{version}` | always 1 |
//! | `gantry_agent_connected` | 1 while the agent's WebSocket to the server is up |
//! | `gantry_agent_heartbeat_lag_seconds` | since the agent last heard anything from the server (since it started, if never) |
//! | `gantry_agent_runtime_healthy` | 1 if the last trial container ran and was cleaned up (see [`health`]) |
//! | `gantry_agent_runtime_check_duration_seconds` | how long the last runtime check took |
//! | `gantry_agent_runtime_check_failures_total` | runtime checks that failed since the agent started |
//! | `gantry_agent_path_writable{path}` | 1 if a probe file could be created, written, fsynced and removed |
//! | `gantry_agent_path_free_bytes{path}`, `gantry_agent_path_size_bytes{path}` | `statvfs`: bytes available to unprivileged writers (what containers can use), and the filesystem's size |
//! | `gantry_agent_image_cache_bytes` | the image cache on disk |
//! | `gantry_agent_running_jobs` | containers this agent runs now |
//! | `gantry_gpu_count` | GPUs NVML lists and that answer; 0 without NVML |
//! | `gantry_gpu_*{gpu,uuid}` | per GPU: temperature, ECC errors, retired pages, remapped rows, XIDs, throttling (see [`gpu`]) |
//!
//! `path` is `scratch` (the agent's state directory) or `storage` (the pool's storage root).
//! Health series appear once their first check has run (the first check starts at once).

pub mod gpu;
pub mod health;

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::lock;
use gpu::{GpuReading, GpuSource};
pub use health::{spawn_health_checks, HealthConfig};

/// Where `gantry agent` serves metrics unless told otherwise: loopback only, so nothing is
/// exposed by default. Prometheus on another host needs `--metrics-listen 0.0.0.0:9464`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";
/// How often GPUs are read through NVML (and waiting XID events taken).
pub const DEFAULT_GPU_INTERVAL: Duration = Duration::from_secs(10);
/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE_OPENMETRICS: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// One path's health, as [`health::probe_path`] found it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathHealth {
    pub writable: bool,
    /// `None` when `statvfs` failed (e.g. the path is missing).
    pub free_bytes: Option<u64>,
    pub size_bytes: Option<u64>,
}

/// The latest results of the background checks.
#[derive(Debug, Clone, Default)]
struct Checks {
    /// (healthy, duration) of the last runtime check.
    runtime: Option<(bool, Duration)>,
    runtime_failures: u64,
    paths: Vec<(&'static str, PathHealth)>,
    image_cache_bytes: Option<u64>,
}

type RunningFn = Box<dyn Fn() -> u64 + Send + Sync>;

struct Inner {
    version: String,
    connected: std::sync::atomic::AtomicBool,
    last_heard: Mutex<Instant>,
    running: Mutex<Option<RunningFn>>,
    checks: Mutex<Checks>,
    gpu_source: Arc<dyn GpuSource>,
    gpus: Mutex<Vec<GpuReading>>,
}

/// The agent's metrics: a cheap, shareable handle. The node code reports into it; the
/// background checks fill it; the HTTP server renders it.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
    registry: Arc<Registry>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("version", &self.inner.version)
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics for an agent of this `version`, with GPUs read from `gpus` (see
    /// [`gpu::nvml_source`]). Nothing runs in the background until [`Metrics::start_gpu_polling`]
    /// and [`spawn_health_checks`].
    pub fn new(version: impl Into<String>, gpus: Arc<dyn GpuSource>) -> Self {
        let inner = Arc::new(Inner {
            version: version.into(),
            connected: Default::default(),
            last_heard: Mutex::new(Instant::now()),
            running: Mutex::new(None),
            checks: Mutex::default(),
            gpu_source: gpus,
            gpus: Mutex::default(),
        });
        let mut registry = Registry::default();
        registry.register_collector(Box::new(AgentCollector(inner.clone())));
        Metrics {
            inner,
            registry: Arc::new(registry),
        }
    }

    /// Whether the agent's connection to the server is up.
    pub fn set_connected(&self, up: bool) {
        self.inner
            .connected
            .store(up, std::sync::atomic::Ordering::Relaxed);
    }

    /// The agent just received something from the server.
    pub fn heard_from_server(&self) {
        *lock(&self.inner.last_heard) = Instant::now();
    }

    /// How `gantry_agent_running_jobs` is counted, at scrape time.
    pub fn set_running_source(&self, count: impl Fn() -> u64 + Send + Sync + 'static) {
        *lock(&self.inner.running) = Some(Box::new(count));
    }

    /// Reads the GPUs once (blocking: NVML may be slow) and keeps the result for scrapes.
    pub fn poll_gpus(&self) {
        let readings = self.inner.gpu_source.read();
        *lock(&self.inner.gpus) = readings;
    }

    /// Reads the GPUs now and then every `interval` on a thread of its own (an NVML call
    /// that hangs holds up nothing else). The thread ends when the metrics are dropped.
    pub fn start_gpu_polling(&self, interval: Duration) {
        let weak = Arc::downgrade(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("gantry-gpu-metrics".into())
            .spawn(move || {
                while let Some(inner) = weak.upgrade() {
                    let readings = inner.gpu_source.read();
                    *lock(&inner.gpus) = readings;
                    drop(inner);
                    std::thread::sleep(interval);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("no GPU metrics: could not start their thread: {e}");
        }
    }

    /// The exposition, as `GET /metrics` answers it (OpenMetrics text, ending in `# EOF`).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("encoding metrics: {e}");
        }
        out
    }

    fn downgrade(&self) -> Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    fn update_checks(inner: &Inner, f: impl FnOnce(&mut Checks)) {
        f(&mut lock(&inner.checks));
    }
}

/// Serves `GET /metrics` on `listen` until the process ends. Returns the bound address (the
/// real port when `listen` asked for port 0).
pub async fn serve(
    listen: SocketAddr,
    metrics: Metrics,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(scrape))
        .with_state(metrics);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("metrics server on {bound} stopped: {e}");
        }
    });
    tracing::info!("metrics on http://{bound}/metrics");
    Ok((bound, task))
}

async fn scrape(State(metrics): State<Metrics>) -> impl IntoResponse {
    ([(CONTENT_TYPE, CONTENT_TYPE_OPENMETRICS)], metrics.render())
}

/// The address to tell the server (for Prometheus service discovery): the bound one, except
/// that an unspecified IP (`0.0.0.0`, `::`) is replaced by `local`, this end's address of the
/// connection to the server, which is how the server's side reaches this node.
pub fn advertised_addr(bound: SocketAddr, local: Option<SocketAddr>) -> String {
    match local {
        Some(l) if bound.ip().is_unspecified() => SocketAddr::new(l.ip(), bound.port()).to_string(),
        _ => bound.to_string(),
    }
}

/// A sample's value: integers print as integers.
#[derive(Debug, Clone, Copy)]
enum Value {
    Int(i64),
    Float(f64),
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Int(b.into())
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

type Labels = Vec<(&'static str, String)>;

/// Writes one labelled gauge family; a family without samples is left out entirely.
fn gauges(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: &[(Labels, Value)],
) -> fmt::Result {
    if samples.is_empty() {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (labels, v) in samples {
        write_gauge(*v, family.encode_family(labels)?)?;
    }
    Ok(())
}

fn write_gauge(v: Value, enc: prometheus_client::encoding::MetricEncoder) -> fmt::Result {
    match v {
        Value::Int(i) => ConstGauge::new(i).encode(enc),
        Value::Float(f) => ConstGauge::new(f).encode(enc),
    }
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: Value,
) -> fmt::Result {
    let family = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    write_gauge(v, family)
}

/// Writes an unlabelled counter (`name` without `_total`: the encoder adds it).
fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(v).encode(family)
}

/// Writes one labelled counter family (`name` without `_total`: the encoder adds it).
fn counters(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: &[(Labels, u64)],
) -> fmt::Result {
    if samples.is_empty() {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in samples {
        ConstCounter::new(*v).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

/// Renders [`Inner`] at each scrape.
struct AgentCollector(Arc<Inner>);

impl fmt::Debug for AgentCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AgentCollector")
    }
}

impl Collector for AgentCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let inner = &self.0;
        let e = &mut enc;
        gauges(
            e,
            "gantry_agent_info",
            "The Gantry agent's version; always 1.",
            None,
            &[(vec![("version", inner.version.clone())], Value::Int(1))],
        )?;
        let connected = inner.connected.load(std::sync::atomic::Ordering::Relaxed);
        gauge(
            e,
            "gantry_agent_connected",
            "1 while the agent's connection to the server is up.",
            None,
            connected.into(),
        )?;
        let lag = lock(&inner.last_heard).elapsed();
        gauge(
            e,
            "gantry_agent_heartbeat_lag",
            "Seconds since the agent last heard from the server (since it started, if never).",
            Some(&Unit::Seconds),
            Value::Float(lag.as_secs_f64()),
        )?;

        let checks = lock(&inner.checks).clone();
        if let Some((healthy, took)) = checks.runtime {
            gauge(
                e,
                "gantry_agent_runtime_healthy",
                "1 if the last trial container started, ran and was removed through runc.",
                None,
                healthy.into(),
            )?;
            gauge(
                e,
                "gantry_agent_runtime_check_duration",
                "How long the last runtime check took.",
                Some(&Unit::Seconds),
                Value::Float(took.as_secs_f64()),
            )?;
            counter(
                e,
                "gantry_agent_runtime_check_failures",
                "Runtime checks that failed since the agent started.",
                checks.runtime_failures,
            )?;
        }
        let path = |name: &'static str| vec![("path", name.to_owned())];
        let by_path = |f: &dyn Fn(&PathHealth) -> Option<Value>| -> Vec<(Labels, Value)> {
            checks
                .paths
                .iter()
                .filter_map(|(n, h)| f(h).map(|v| (path(n), v)))
                .collect()
        };
        gauges(
            e,
            "gantry_agent_path_writable",
            "1 if a probe file could be created, written, fsynced and removed (scratch: the agent's state directory; storage: the storage root).",
            None,
            &by_path(&|h| Some(h.writable.into())),
        )?;
        gauges(
            e,
            "gantry_agent_path_free",
            "Bytes available to unprivileged writers on the path's filesystem (statvfs f_bavail).",
            Some(&Unit::Bytes),
            &by_path(&|h| h.free_bytes.map(Value::from)),
        )?;
        gauges(
            e,
            "gantry_agent_path_size",
            "Size of the path's filesystem in bytes (statvfs).",
            Some(&Unit::Bytes),
            &by_path(&|h| h.size_bytes.map(Value::from)),
        )?;
        if let Some(bytes) = checks.image_cache_bytes {
            gauge(
                e,
                "gantry_agent_image_cache",
                "Bytes the node's image cache uses on disk.",
                Some(&Unit::Bytes),
                bytes.into(),
            )?;
        }
        let running = lock(&inner.running).as_ref().map_or(0, |f| f());
        gauge(
            e,
            "gantry_agent_running_jobs",
            "Containers this agent runs now.",
            None,
            running.into(),
        )?;

        let gpus = lock(&inner.gpus).clone();
        encode_gpus(e, &gpus)
    }
}

/// The `gantry_gpu_*` families. Unsupported readings leave their series out.
fn encode_gpus(e: &mut DescriptorEncoder, gpus: &[GpuReading]) -> fmt::Result {
    gauge(
        e,
        "gantry_gpu_count",
        "GPUs that NVML lists and that answer; 0 without NVML.",
        None,
        (gpus.len() as u64).into(),
    )?;
    let id = |g: &GpuReading| vec![("gpu", g.index.to_string()), ("uuid", g.uuid.clone())];
    let with = |g: &GpuReading, k: &'static str, v: &str| {
        let mut l = id(g);
        l.push((k, v.to_owned()));
        l
    };
    let mut temp = Vec::new();
    let mut ecc = Vec::new();
    let mut retired = Vec::new();
    let mut remapped = Vec::new();
    let mut last_xid = Vec::new();
    let mut xids = Vec::new();
    let mut throttled = Vec::new();
    for g in gpus {
        if let Some(t) = g.temperature_celsius {
            temp.push((id(g), u64::from(t).into()));
        }
        for (kind, v) in [("single", g.ecc_corrected), ("double", g.ecc_uncorrected)] {
            if let Some(v) = v {
                ecc.push((with(g, "type", kind), v));
            }
        }
        for (cause, v) in [
            ("single", g.retired_pages_single),
            ("double", g.retired_pages_double),
        ] {
            if let Some(v) = v {
                retired.push((with(g, "cause", cause), v.into()));
            }
        }
        if let Some(r) = g.remapped_rows {
            for (kind, v) in [
                ("correctable", r.correctable.into()),
                ("uncorrectable", r.uncorrectable.into()),
                ("pending", r.pending.into()),
                ("failed", r.failed.into()),
            ] {
                remapped.push((with(g, "kind", kind), v));
            }
        }
        last_xid.push((id(g), g.last_xid.into()));
        xids.push((id(g), g.xid_events));
        if let Some(t) = g.throttle {
            for (reason, on) in [
                ("hw_slowdown", t.hw_slowdown),
                ("hw_thermal", t.hw_thermal),
                ("sw_thermal", t.sw_thermal),
                ("power_brake", t.power_brake),
            ] {
                throttled.push((with(g, "reason", reason), on.into()));
            }
        }
    }
    gauges(
        e,
        "gantry_gpu_temperature",
        "GPU core temperature.",
        Some(&Unit::Celsius),
        &temp,
    )?;
    counters(
        e,
        "gantry_gpu_ecc_errors",
        "Aggregate (lifetime) ECC errors: single = corrected, double = uncorrected.",
        &ecc,
    )?;
    gauges(
        e,
        "gantry_gpu_retired_pages",
        "Retired memory pages by cause (single: multiple single-bit errors; double: a double-bit error).",
        None,
        &retired,
    )?;
    gauges(
        e,
        "gantry_gpu_remapped_rows",
        "Remapped memory rows (correctable, uncorrectable), and 1 if a remapping is pending (reset needed) or failed.",
        None,
        &remapped,
    )?;
    gauges(
        e,
        "gantry_gpu_last_xid",
        "The last XID error the agent saw on the GPU; 0 if none.",
        None,
        &last_xid,
    )?;
    counters(
        e,
        "gantry_gpu_xid_events",
        "XID error events the agent saw on the GPU since it started.",
        &xids,
    )?;
    gauges(
        e,
        "gantry_gpu_throttled",
        "1 while the GPU's clocks are held down for this reason.",
        None,
        &throttled,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_addresses_are_advertised_as_the_connection_s() {
        let local: SocketAddr = "10.1.2.3:51000".parse().unwrap();
        assert_eq!(
            advertised_addr("0.0.0.0:9464".parse().unwrap(), Some(local)),
            "10.1.2.3:9464"
        );
        assert_eq!(
            advertised_addr("127.0.0.1:9464".parse().unwrap(), Some(local)),
            "127.0.0.1:9464"
        );
        assert_eq!(
            advertised_addr("[::]:9464".parse().unwrap(), None),
            "[::]:9464"
        );
    }
}
