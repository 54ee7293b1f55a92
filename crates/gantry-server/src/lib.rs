//! Gantry's control plane: the HTTP API, authentication, the agent protocol, and the controller
//! loop that applies `gantry-core`'s decisions. Thin by design: every decision is a call into
//! core; this crate only gathers snapshots, applies plans through the store and talks to agents.

mod agents;
pub mod auth;
mod builds;
mod cache;
mod caller;
mod clock;
mod control;
pub mod endpoints;
pub mod error;
pub mod examples;
mod group;
mod holds;
mod http;
mod lease;
mod link;
mod logs;
pub mod mcp;
mod metrics;
mod netpolicy;
mod news;
pub mod placement;
mod private;
mod registry;
mod routes;
mod secrets;
mod services;
mod state;
mod views;
mod volumes;
mod web;
mod wiring;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use gantry_core::plan;
pub use link::{AgentLink, Unlinked};
pub use state::AppState;

/// A controller over a store, reaching no agent, whose ticks a caller runs. For
/// `benches/controller.rs` only: a server runs its own loop from [`Server::start`].
#[doc(hidden)]
pub struct Controller(std::sync::Arc<control::Ctx>);

impl Controller {
    pub fn new(store: std::sync::Arc<dyn gantry_store::Store>, config: ServerConfig) -> Self {
        let parts = wiring::Parts::new(store, config, [7; 32]);
        Controller(parts.controller(std::sync::Arc::new(Unlinked)))
    }

    /// One tick, as the server's loop runs it.
    pub async fn tick(&self) -> anyhow::Result<()> {
        control::tick(&self.0).await
    }
}

/// Where the store lives: SQLite's file in the data directory (the default), or a PostgreSQL
/// database. Logs and the object cache stay in the data directory (or `shared_dir`), the
/// secrets key in the data directory, either way.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum StoreLocation {
    #[default]
    DataDir,
    /// A `postgres://` or `postgresql://` URL.
    Postgres(String),
}

impl std::str::FromStr for StoreLocation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            Ok(StoreLocation::Postgres(s.to_string()))
        } else {
            Err(
                "not a postgres:// or postgresql:// URL (without it the store is SQLite's \
                 file in the data directory)"
                    .into(),
            )
        }
    }
}

// A URL may carry a password: it is never printed.
impl std::fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::DataDir => f.write_str("DataDir"),
            StoreLocation::Postgres(_) => f.write_str("Postgres(..)"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Where job output (`logs/`) and the object cache (`objects/`) live, when not in the data
    /// directory: a filesystem every replica mounts, so that each serves what another wrote.
    pub shared_dir: Option<PathBuf>,
    pub store: StoreLocation,
    /// An agent whose heartbeats stop for this long is lost; its attempts end NODE_LOST.
    pub heartbeat_timeout: Duration,
    pub heartbeat_interval: Duration,
    /// SIGTERM-to-SIGKILL grace for stops and timeouts.
    pub stop_grace: Duration,
    /// The URL users reach this server at (for endpoint URLs); default `http://<listen>`.
    pub public_url: Option<String>,
    /// Endpoints are also served on `Host: NAME.<endpoint_domain>`.
    pub endpoint_domain: String,
    /// How the server reaches registries (to pin build bases to digests): the agents' mirrors
    /// and plain-HTTP hosts.
    pub pull: gantry_oci::PullConfig,
    /// Reads an `oci://` build base's digest beneath `pull.oci_roots`. Reading a layout on disk
    /// safely is node code (`openat2`, no symlinks) that this crate does not link, so the
    /// binary passes the agent's; the default reads none (and with no `oci_roots`, submit
    /// refuses every layout before one is asked for).
    pub read_layout: gantry_oci::ReadLayout,
    /// The MCP server at `/mcp`: read-only mode, allowed browser origins.
    pub mcp: mcp::McpConfig,
}

impl ServerConfig {
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> Self {
        Self {
            listen,
            data_dir,
            shared_dir: None,
            store: StoreLocation::DataDir,
            heartbeat_timeout: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(5),
            stop_grace: Duration::from_secs(10),
            public_url: None,
            endpoint_domain: "endpoints.localhost".into(),
            pull: Default::default(),
            read_layout: gantry_oci::read_no_layouts,
            mcp: Default::default(),
        }
    }

    /// The directory of `logs/` and `objects/`: the shared one, else the data directory.
    pub fn files_dir(&self) -> &std::path::Path {
        self.shared_dir.as_deref().unwrap_or(&self.data_dir)
    }

    /// The URL users reach this server at, without a trailing `/`.
    pub fn url(&self) -> String {
        self.public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.listen))
            .trim_end_matches('/')
            .to_string()
    }

    /// `host:port` of this server's OCI registry, as agents reach it.
    pub fn registry_host(&self) -> String {
        let url = self.url();
        url.split_once("://")
            .map_or(url.as_str(), |(_, rest)| rest)
            .to_string()
    }
}

pub struct Server {
    pub state: AppState,
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Opens the store, starts the controller and serves the API. Returns once listening.
    pub async fn start(config: ServerConfig) -> anyhow::Result<Server> {
        let wiring::Wired {
            state,
            app,
            listener,
        } = wiring::wire(config).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            // Without TCP_NODELAY a keep-alive client's delayed ACK holds each small response
            // back by 40 ms (Nagle): measured by bench/proxy.sh as a 45 ms p99 on the proxy.
            use axum::serve::ListenerExt;
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!("server stopped: {e}");
            }
        });
        Ok(Server { state, addr, task })
    }

    /// Creates a user and returns their token (shown once; only its hash is kept). It never
    /// expires: these are the tokens `gantry up` makes for itself (the first administrator,
    /// the local agents), which a cluster must not lose to a calendar.
    pub async fn create_user(
        &self,
        name: &str,
        group: &str,
        role: gantry_api::v1::Role,
    ) -> anyhow::Result<String> {
        let token = caller::new_token();
        let user = gantry_store::User {
            id: uuid::Uuid::new_v4(),
            name: name.into(),
            group: group.into(),
            role,
        };
        self.state
            .store
            .create_user(&user, &caller::hash_token(&token), None, state::now_ms())
            .await?;
        Ok(token)
    }

    /// Whether any user exists yet (a new cluster needs its first administrator).
    pub async fn has_users(&self) -> anyhow::Result<bool> {
        Ok(self.state.store.count_users().await? > 0)
    }

    pub async fn wait(&mut self) {
        let _ = (&mut self.task).await;
    }

    /// Before a clean exit: gives the controller's lease up, so that a standby replica takes
    /// over at once rather than when the lease runs out.
    pub async fn stop(&self) {
        self.state
            .lease
            .release(self.state.store.as_ref(), state::now_ms())
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::StoreLocation;

    #[test]
    fn a_store_is_a_postgres_url_and_its_password_is_never_printed() {
        for url in [
            "postgres://u:secret@db/gantry",
            "postgresql://db/gantry?sslmode=require",
        ] {
            let at: StoreLocation = url.parse().unwrap();
            assert_eq!(at, StoreLocation::Postgres(url.into()));
            assert!(!format!("{at:?}").contains("secret"));
        }
        for bad in [
            "",
            "sqlite:///var/lib/gantry.db",
            "mysql://db/gantry",
            "/var/lib/gantry.db",
        ] {
            assert!(bad.parse::<StoreLocation>().is_err(), "{bad}");
        }
    }
}
