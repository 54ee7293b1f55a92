//! What the use cases and their adapters (the API, the web UI, MCP) are handed. The controller,
//! the agents' sessions and the object cache have contexts of their own (`control::Ctx`,
//! `agents::Ctx`, `gantry_registry::Context`), built from the same parts in `wiring.rs`: the
//! use cases reach no agent and no controller state but the plan cache.

use std::sync::Arc;

use gantry_store::Store;
use tokio::sync::Notify;

use crate::holds::Holds;
use crate::news::News;
use crate::ServerConfig;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub config: Arc<ServerConfig>,
    /// Wakes the controller: something changed that may unblock work.
    pub(crate) wake: Arc<Notify>,
    /// Seals secrets at rest; lives in the data dir, never in the database.
    pub(crate) secret_key: Arc<[u8; 32]>,
    /// Hold decisions, one at a time (webhook posts and administrators).
    pub(crate) holds: Arc<Holds>,
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    /// The endpoint proxy and its routes.
    pub(crate) gateway: Arc<crate::routes::Gateway>,
    /// Parsed plans, shared with the controller (a plan never changes once stored).
    pub(crate) cache: Arc<crate::cache::Cache>,
    /// What agents report of running attempts: transfer progress, failing readiness probes.
    pub(crate) news: Arc<News>,
    /// This server's side of the controller's lease (whether it runs the controller).
    pub(crate) lease: Arc<crate::lease::Lease>,
}

impl AppState {
    pub fn wake_controller(&self) {
        self.wake.notify_one();
    }
}

pub use crate::clock::now_ms;
