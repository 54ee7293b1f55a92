//! HTTP: every route of the server in one table (the JSON API under `/api/v1` in `api/`, the
//! agents' socket, the web UI, the object cache's registry, MCP, monitoring's webhook and
//! discovery in `monitoring.rs`), and the endpoint proxy in front of them all (`proxy.rs`).

pub(crate) mod api;
mod extract;
mod monitoring;
mod proxy;

use axum::routing::{delete, get, post};
use axum::Router;

use crate::error::ApiError;
use crate::state::AppState;
use api::{
    admin, endpoints, holds, images, json_errors, logs, nodes, secrets, volumes, whoami, workflows,
};

pub fn router(
    state: AppState,
    agents: std::sync::Arc<crate::agents::Ctx>,
    registry: std::sync::Arc<gantry_registry::Registry>,
) -> Router {
    let api = Router::new()
        .route("/whoami", get(whoami))
        .route("/workflows", get(workflows::list).post(workflows::submit))
        .route("/workflows/validate", post(workflows::validate))
        .route("/workflows/{id}", get(workflows::detail))
        .route("/workflows/{id}/events", get(workflows::events))
        .route("/workflows/{id}/stop", post(workflows::stop))
        .route("/workflows/{id}/logs/{job}", get(logs::read))
        .route("/nodes", get(nodes::list))
        .route("/nodes/{name}", get(nodes::show))
        .route("/nodes/{name}/holds", post(holds::place))
        .route("/nodes/{name}/release", post(holds::release))
        .route(
            "/monitoring/alertmanager",
            post(crate::http::monitoring::webhook),
        )
        .route("/monitoring/targets", get(crate::http::monitoring::targets))
        .route("/endpoints", get(endpoints::list).post(endpoints::create))
        .route(
            "/endpoints/{name}",
            get(endpoints::show).delete(endpoints::delete),
        )
        .route("/endpoints/{name}/history", get(endpoints::history))
        .route(
            "/endpoints/{name}/tokens",
            get(endpoints::tokens).post(endpoints::token),
        )
        .route("/endpoint-tokens", get(endpoints::all_tokens))
        .route("/endpoint-tokens/{id}", delete(endpoints::revoke_token))
        .route("/endpoints/{name}/approve", post(endpoints::approve))
        .route("/endpoints/{name}/reject", post(endpoints::reject))
        .route("/secrets", get(secrets::list))
        .route(
            "/secrets/{scope}/{name}",
            axum::routing::put(secrets::put).delete(secrets::delete),
        )
        .route("/volumes", get(volumes::list).post(volumes::create))
        .route(
            "/volumes/{scope}/{name}",
            get(volumes::show).delete(volumes::delete),
        )
        .route("/storages", get(volumes::usable_storages))
        .route(
            "/admin/storages",
            get(volumes::list_storages).post(volumes::add_storage),
        )
        .route(
            "/admin/storages/{name}",
            axum::routing::delete(volumes::delete_storage),
        )
        .route(
            "/admin/users",
            get(admin::list_users).post(admin::create_user),
        )
        .route(
            "/admin/users/{name}",
            get(admin::show_user).delete(admin::delete_user),
        )
        .route("/admin/users/{name}/disable", post(admin::disable_user))
        .route("/admin/users/{name}/enable", post(admin::enable_user))
        .route("/admin/tokens", get(admin::list_tokens))
        .route("/admin/tokens/{id}", delete(admin::revoke_token))
        .route("/admin/tokens/{id}/rotate", post(admin::rotate_token))
        .route("/admin/settings", get(admin::list_settings))
        .route("/admin/controller", get(admin::controller))
        .route(
            "/admin/settings/{key}",
            get(admin::get_setting).put(admin::set_setting),
        )
        .route(
            "/agent/connect",
            get(crate::agents::connect).layer(axum::Extension(agents)),
        )
        .route(
            "/images",
            get(images::list).layer(axum::Extension(registry.clone())),
        )
        .route(
            "/images/{scope}/{owner}/{*name}",
            get(images::show)
                .delete(images::delete)
                .layer(axum::Extension(registry.clone())),
        )
        .layer(axum::middleware::map_response(json_errors));
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        // For a load balancer's check of the agents' backend: 200 on the replica that runs the
        // controller (agents connect there), 503 on a standby. Says nothing else.
        .route("/healthz/controller", get(controller_health))
        .route("/metrics", get(crate::http::monitoring::metrics))
        .nest("/api/v1", api)
        // The web UI at `/` (its Images page lists the object cache).
        .merge(crate::web::routes(&state, registry.clone()))
        // The object cache's OCI registry.
        .merge(gantry_registry::v2_routes(registry))
        .merge(crate::mcp::routes(state.clone()))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .with_state(state.clone())
        .layer(axum::middleware::from_fn_with_state(
            state,
            crate::http::proxy::endpoints_first,
        ))
}

async fn controller_health(
    axum::extract::State(st): axum::extract::State<AppState>,
) -> (axum::http::StatusCode, &'static str) {
    if st.lease.held() {
        (axum::http::StatusCode::OK, "controller\n")
    } else {
        (axum::http::StatusCode::SERVICE_UNAVAILABLE, "standby\n")
    }
}
