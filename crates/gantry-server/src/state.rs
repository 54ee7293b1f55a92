use std::collections::HashMap;
use std::sync::Arc;

use gantry_api::v1::TransferProgress;
use gantry_store::Store;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::link::AgentLink;
use crate::ServerConfig;

/// Shared by every request handler and background loop.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub config: Arc<ServerConfig>,
    /// The agents, as the controller and the areas reach them.
    pub(crate) link: Arc<dyn AgentLink>,
    /// Wakes the controller: something changed that may unblock work.
    pub(crate) wake: Arc<Notify>,
    /// Seals secrets at rest; lives in the data dir, never in the database.
    pub(crate) secret_key: Arc<[u8; 32]>,
    /// Serialises hold decisions (webhook posts and administrators).
    pub(crate) hold_lock: Arc<tokio::sync::Mutex<()>>,
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    /// The endpoint proxy and its routes.
    pub(crate) gateway: Arc<crate::routes::Gateway>,
    /// The second octet of this cluster's container subnets.
    pub(crate) subnet_base: u8,
    /// Parsed plans and live attempts' resources, kept between controller ticks.
    pub(crate) cache: Arc<crate::cache::Cache>,
    /// Running transfer steps' latest progress, by attempt, as their agents report it: news
    /// for `describe`, not worth a write (a restarted server shows it again from the next
    /// report).
    pub(crate) transfer_progress: Arc<std::sync::Mutex<HashMap<Uuid, TransferProgress>>>,
    /// Why services that are not ready yet fail their readiness probe, by attempt: shown as
    /// their task's reason and on their endpoint's takeover; in memory for the same reason as
    /// `transfer_progress` (the change of outcome is an event, which is stored).
    pub(crate) probe_failures: Arc<std::sync::Mutex<HashMap<Uuid, ProbeFailure>>>,
}

/// The latest failed check of a service's readiness probe.
#[derive(Debug, Clone)]
pub struct ProbeFailure {
    pub workflow: Uuid,
    /// The service's name.
    pub service: String,
    pub why: String,
    /// Consecutive failed checks with this outcome.
    pub count: u32,
}

impl ProbeFailure {
    /// The task's reason while it waits to be ready, e.g. `readiness probe: GET
    /// http://10.0.0.2:8080/notthere answered 404 Not Found, 30 times in a row`.
    pub fn reason(&self) -> String {
        match self.count {
            1 => format!("readiness probe: {}", self.why),
            n => format!("readiness probe: {}, {n} times in a row", self.why),
        }
    }
}

impl AppState {
    pub fn new(
        store: Arc<dyn Store>,
        config: ServerConfig,
        secret_key: [u8; 32],
        subnet_base: u8,
        link: Arc<dyn AgentLink>,
    ) -> Self {
        Self {
            store: store.clone(),
            config: Arc::new(config),
            link,
            wake: Arc::new(Notify::new()),
            secret_key: Arc::new(secret_key),
            hold_lock: Arc::default(),
            metrics: Arc::default(),
            gateway: Arc::new(crate::routes::Gateway::new(store.clone())),
            subnet_base,
            cache: Arc::default(),
            transfer_progress: Arc::default(),
            probe_failures: Arc::default(),
        }
    }

    /// The URL users reach this server at.
    pub fn public_url(&self) -> String {
        self.config
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.config.listen))
            .trim_end_matches('/')
            .to_string()
    }

    /// `host:port` of this server's OCI registry, as agents reach it.
    pub fn registry_host(&self) -> String {
        let url = self.public_url();
        url.split("://")
            .nth(1)
            .unwrap_or(&url)
            .trim_end_matches('/')
            .to_string()
    }

    pub fn wake_controller(&self) {
        self.wake.notify_one();
    }
}

pub use crate::clock::now_ms;
