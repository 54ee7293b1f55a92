//! Wiring: builds each component from the configuration and hands it what it may use (the
//! store, the agents' hub as the `AgentLink`, the object cache's context, the router), then
//! starts the ones that run on their own (the controller). The only module that knows every
//! component; none of them imports it.

use std::sync::Arc;

use anyhow::Context;
use gantry_store::{SqliteStore, Store};

use crate::state::AppState;
use crate::{agents, control, http, private, registry, secrets, ServerConfig};

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
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&config.data_dir.join("gantry.db"))
            .await
            .context("opening the store")?,
    );
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    // Port 0 picks a free port: URLs given out must name the real one.
    let mut config = config;
    config.listen = listener.local_addr()?;
    let key = secrets::load_or_create_key(&config.data_dir).context("the secrets key")?;
    private::file(&config.data_dir.join("secret.key")).context("the secrets key's mode")?;
    for d in ["logs", "objects"] {
        let top = config.data_dir.join(d);
        private::tree(&top).with_context(|| format!("making {} private", top.display()))?;
    }
    let base = agents::subnet_base(store.as_ref())
        .await
        .context("the subnet base")?;
    // The agents' connections: the sessions register in the hub, everything else reaches
    // the agents through it as the state's link.
    let hub = Arc::new(agents::Hub::default());
    let state = AppState::new(store, config, key, base, hub.clone());
    control::spawn(state.clone());
    let images = registry::new(&state);
    let app = http::router(state.clone(), hub, images);
    Ok(Wired {
        state,
        app,
        listener,
    })
}
