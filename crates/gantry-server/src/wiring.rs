//! Wiring: builds each component from the configuration and hands it what it may use (the
//! store, the agents' hub as the `AgentLink`, the object cache's context, the router), then
//! starts the ones that run on their own (the controller). The only module that knows every
//! component; none of them imports it.

use std::sync::Arc;

use anyhow::Context;
use gantry_store::{PgStore, SqliteStore, Store};

use tokio::sync::Notify;

use crate::cache::Cache;
use crate::holds::Holds;
use crate::lease::Lease;
use crate::link::AgentLink;
use crate::news::News;
use crate::routes::Gateway;
use crate::state::AppState;
use crate::{agents, control, http, private, registry, secrets, ServerConfig, StoreLocation};

/// What [`wire`] built: the state the server hands out, its routes, and the socket they are
/// served on (bound, so port 0 has become a real port).
pub(crate) struct Wired {
    pub state: AppState,
    pub app: axum::Router,
    pub listener: tokio::net::TcpListener,
}

/// Opens the store and the data directory's files, builds the components and starts the
/// controller. Nothing is served yet.
pub(crate) async fn wire(config: ServerConfig) -> anyhow::Result<Wired> {
    private::dir(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    let store: Arc<dyn Store> = match &config.store {
        StoreLocation::DataDir => Arc::new(
            SqliteStore::open(&config.data_dir.join("gantry.db"))
                .await
                .context("opening the store")?,
        ),
        StoreLocation::Postgres(url) => Arc::new(
            PgStore::connect(url)
                .await
                .context("opening the store on PostgreSQL")?,
        ),
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    // Port 0 picks a free port: URLs given out must name the real one.
    let mut config = config;
    config.listen = listener.local_addr()?;
    let key = secrets::load_or_create_key(&config.data_dir).context("the secrets key")?;
    private::file(&config.data_dir.join("secret.key")).context("the secrets key's mode")?;
    if let Some(shared) = &config.shared_dir {
        private::dir(shared).with_context(|| format!("creating {}", shared.display()))?;
    }
    for d in ["logs", "objects"] {
        let top = config.files_dir().join(d);
        private::tree(&top).with_context(|| format!("making {} private", top.display()))?;
    }
    let base = agents::subnet_base(store.as_ref())
        .await
        .context("the subnet base")?;
    let parts = Parts::new(store, config, key);
    // The agents' connections: the sessions register in the hub, the controller reaches the
    // agents through it as its link.
    let hub = Arc::new(agents::Hub::default());
    control::spawn(parts.controller(hub.clone()));
    // Heartbeats are stored in batches, at least once per heartbeat interval.
    let seen = Arc::new(agents::Seen::default());
    let every = parts
        .config
        .heartbeat_interval
        .min(std::time::Duration::from_secs(1));
    agents::spawn_seen_writer(seen.clone(), parts.store.clone(), every);
    let agents = Arc::new(agents::Ctx {
        store: parts.store.clone(),
        hub,
        wake: parts.wake.clone(),
        news: parts.news.clone(),
        ends: parts.ends.clone(),
        holds: parts.holds.clone(),
        seen,
        running: agents::running_reports(parts.store.clone()),
        secret_key: parts.secret_key.clone(),
        subnet_base: base,
        config: parts.config.clone(),
        lease: parts.lease.clone(),
    });
    let state = parts.state();
    let images = registry::new(&state);
    let app = http::router(state.clone(), agents, images);
    Ok(Wired {
        state,
        app,
        listener,
    })
}

/// The pieces of process-local state that more than one component holds, each made once:
/// every context below is cut from these (ARCHITECTURE.md, "Process-local state", says who
/// owns each).
pub(crate) struct Parts {
    store: Arc<dyn Store>,
    config: Arc<ServerConfig>,
    wake: Arc<Notify>,
    secret_key: Arc<[u8; 32]>,
    cache: Arc<Cache>,
    gateway: Arc<Gateway>,
    news: Arc<News>,
    holds: Arc<Holds>,
    ends: Arc<agents::Ends>,
    lease: Arc<Lease>,
}

/// Who this server is to the controller's lease. On SQLite, whose file one server opens, the
/// data directory: a restarted server takes its lease back at once. On PostgreSQL, where
/// replicas share the store, this process: its URL and pid, so a restarted replica is a new
/// holder and never resumes a token a process it replaced may still be using.
fn holder(config: &ServerConfig) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    match config.store {
        StoreLocation::DataDir => format!("{host}:{}", config.data_dir.display()),
        StoreLocation::Postgres(_) => {
            format!("{} on {host} (pid {})", config.url(), std::process::id())
        }
    }
}

impl Parts {
    pub(crate) fn new(store: Arc<dyn Store>, config: ServerConfig, secret_key: [u8; 32]) -> Self {
        let config = Arc::new(config);
        let wake = Arc::new(Notify::new());
        let cache = Arc::new(Cache::default());
        let news = Arc::new(News::default());
        Parts {
            lease: Arc::new(Lease::new(holder(&config))),
            holds: Arc::new(Holds::new(store.clone(), wake.clone())),
            ends: Arc::new(agents::Ends::new(
                store.clone(),
                cache.clone(),
                news.clone(),
                config.files_dir().to_path_buf(),
                wake.clone(),
            )),
            gateway: Arc::new(Gateway::new(store.clone())),
            secret_key: Arc::new(secret_key),
            store,
            config,
            wake,
            cache,
            news,
        }
    }

    /// The controller's context, reaching the agents through `link`.
    pub(crate) fn controller(&self, link: Arc<dyn AgentLink>) -> Arc<control::Ctx> {
        Arc::new(control::Ctx {
            store: self.store.clone(),
            link,
            wake: self.wake.clone(),
            cache: self.cache.clone(),
            gateway: self.gateway.clone(),
            ends: self.ends.clone(),
            secret_key: self.secret_key.clone(),
            config: self.config.clone(),
            liveness_at: Default::default(),
            fleet: Default::default(),
            window: Default::default(),
            lease: self.lease.clone(),
        })
    }

    /// The use cases' and adapters' state.
    pub(crate) fn state(&self) -> AppState {
        AppState {
            store: self.store.clone(),
            config: self.config.clone(),
            wake: self.wake.clone(),
            secret_key: self.secret_key.clone(),
            holds: self.holds.clone(),
            metrics: Arc::default(),
            gateway: self.gateway.clone(),
            cache: self.cache.clone(),
            news: self.news.clone(),
            lease: self.lease.clone(),
        }
    }
}
