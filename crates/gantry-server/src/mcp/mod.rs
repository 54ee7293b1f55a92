//! The MCP server: AI agents start and watch workflows over the Model Context Protocol, with
//! the rights of the user whose token they hold and nothing more.
//!
//! Served with the official Rust SDK (`rmcp`) as Streamable HTTP at `/mcp`; `gantry mcp`
//! relays stdio clients to it. Every request is authenticated by [`guard`] (the same bearer
//! tokens and role rules as `/api/v1`), and every tool calls the use cases the API's handlers
//! call (`crate::services`) with that caller, so visibility (404 for what one may not see), scopes and checks are the API's.
//! Both protocol forms are served: sessions with server-sent requests for clients on revisions
//! before 2026-07-28, and stateless requests from 2026-07-28 on (the SDK routes each request by
//! the version it names). What needs a person's confirmation is decided in [`confirm`].

mod confirm;
mod resources;
mod tools;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use uuid::Uuid;

use crate::auth::UserCaller;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// How the MCP server behaves; from `gantry server`/`gantry up` flags.
#[derive(Debug, Clone, Default)]
pub struct McpConfig {
    /// `--mcp-read-only`: tools that change anything are refused where tools are dispatched
    /// (and left out of the list).
    pub read_only: bool,
    /// `--mcp-allow-origin`: browser origins allowed besides the server's own URL, e.g.
    /// `https://chat.example.com`. Requests without an `Origin` (every non-browser client)
    /// pass; any other origin is refused, so a web page cannot drive a local server.
    pub allowed_origins: Vec<String>,
}

/// What every MCP session of this server shares.
pub(crate) struct Shared {
    st: AppState,
    config: McpConfig,
    confirmations: confirm::Confirmations,
}

/// The routes: `/mcp` behind [`guard`].
pub fn routes(st: AppState) -> Router<AppState> {
    let shared = Arc::new(Shared {
        config: st.config.mcp.clone(),
        confirmations: confirm::Confirmations::new(st.store.clone()),
        st: st.clone(),
    });
    let mut origins = vec![st.config.url()];
    let listen = st.config.listen;
    if listen.ip().is_loopback() {
        origins.push(format!("http://localhost:{}", listen.port()));
        origins.push(format!("http://127.0.0.1:{}", listen.port()));
    }
    origins.extend(st.config.mcp.allowed_origins.iter().cloned());
    let origins: Vec<String> = origins.iter().map(|o| with_port(o)).collect();
    // Host checks guard unauthenticated local servers against DNS rebinding; here every
    // request needs a token and the Origin check stops browser pages, and the server is
    // reached under whatever name its users give it.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY);
    let mut sessions = LocalSessionManager::default();
    // An agent watching a long workflow may be quiet for a while between calls.
    sessions.session_config.keep_alive = Some(Duration::from_secs(30 * 60));
    let factory = {
        let shared = shared.clone();
        move || {
            Ok(GantryMcp {
                shared: shared.clone(),
            })
        }
    };
    let service = StreamableHttpService::new(factory, Arc::new(sessions), config);
    let owners = Arc::new(SessionOwners::default());
    Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn(move |req, next| {
            guard(st.clone(), owners.clone(), req, next)
        }))
}

/// `scheme://host:port`, the scheme's port made explicit: an allowed origin without one would
/// match any port.
fn with_port(origin: &str) -> String {
    let origin = origin.trim_end_matches('/');
    let Some((scheme, host)) = origin.split_once("://") else {
        return origin.to_string();
    };
    let has_port = host
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok());
    match (has_port, scheme) {
        (false, "https") => format!("{origin}:443"),
        (false, "http") => format!("{origin}:80"),
        _ => origin.to_string(),
    }
}

/// Which user opened each legacy session, so that nobody else's token can use it (answer its
/// elicitations, say).
#[derive(Default)]
struct SessionOwners(Mutex<HashMap<String, (Uuid, Instant)>>);

const SESSION_HEADER: &str = "mcp-session-id";

/// Authenticates every MCP request as a user (agent and monitoring tokens get nothing) and
/// hands the caller to the tools through the request's extensions.
async fn guard(st: AppState, owners: Arc<SessionOwners>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let caller = match UserCaller::from_request_parts(&mut parts, &st).await {
        Ok(UserCaller(c)) => c,
        // The body is left unread, so the connection cannot carry another request: say so,
        // or a client reusing it races the close and sees a dropped connection.
        Err(e) => return closing(e.into_response()),
    };
    // Read whole here (the SDK reads a POST whole anyway, at most this much): an answer the
    // SDK gives before reading it (a refused Origin) would otherwise end the connection
    // under a client that reuses it.
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => axum::body::Body::from(b),
        Err(_) => {
            return closing(
                ApiError::TooLarge {
                    message: format!(
                        "the request could not be read whole: an MCP request may be at most {} MiB",
                        MAX_BODY >> 20
                    ),
                    limit: MAX_BODY as u64,
                }
                .into_response(),
            )
        }
    };
    let session = parts
        .headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Some(s) = &session {
        let owner = owners.0.lock().expect("not poisoned").get(s).map(|o| o.0);
        if owner.is_some_and(|o| o != caller.user.id) {
            // As if it did not exist: another user's session is not theirs to see.
            return ApiError::NotFound("no such MCP session".into()).into_response();
        }
    }
    let user = caller.user.id;
    let delete = parts.method == axum::http::Method::DELETE;
    parts.extensions.insert(caller);
    let resp = next.run(Request::from_parts(parts, body)).await;
    let mut map = owners.0.lock().expect("not poisoned");
    match (&session, resp.headers().get(SESSION_HEADER)) {
        (None, Some(new)) => {
            if let Ok(new) = new.to_str() {
                // The SDK ends sessions idle past its keep-alive; forget those a day old.
                if map.len() > 1000 {
                    map.retain(|_, (_, at)| at.elapsed() < Duration::from_secs(86_400));
                }
                map.insert(new.to_string(), (user, Instant::now()));
            }
        }
        (Some(s), _) if delete => {
            map.remove(s);
        }
        _ => {}
    }
    drop(map);
    resp
}

/// A workflow file may be 4 MiB; JSON escaping makes it larger.
const MAX_BODY: usize = 8 << 20;

fn closing(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    resp
}

/// One MCP session's handler; sessions share everything through [`Shared`].
#[derive(Clone)]
pub(crate) struct GantryMcp {
    shared: Arc<Shared>,
}

/// The user a request was authenticated as by [`guard`].
fn caller_of(ctx: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| ErrorData::invalid_request("the request is not authenticated", None))
}

const INSTRUCTIONS: &str = "Gantry runs HPC and AI workflows described in YAML workflow files \
(Fuzzfile v4). Read the resource gantry://docs/workflow-file (and the examples) before writing \
one, check it with validate_workflow, then start_workflow. Follow a workflow with \
workflow_status until it is FINISHED, FAILED or STOPPED, and read each job's output with \
job_logs. Taking over a persistent endpoint, stopping a workflow that serves one and deleting \
an endpoint need the person's confirmation: Gantry asks them through your client when it can; \
otherwise the tool refuses and says how the person confirms.";

impl ServerHandler for GantryMcp {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_instructions(INSTRUCTIONS);
        info.server_info = rmcp::model::Implementation::new("gantry", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let read_only = self.shared.config.read_only;
        Ok(ListToolsResult::with_all_items(
            tools::TOOLS
                .iter()
                .filter(|t| !read_only || t.read_only)
                .map(tools::ToolDef::tool)
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller_of(&ctx)?;
        let Some(def) = tools::TOOLS.iter().find(|t| t.name == request.name) else {
            return Err(ErrorData::invalid_params(
                format!("no tool {:?}", request.name),
                None,
            ));
        };
        // Enforced here, where every call passes, not only by leaving tools out of the list:
        // a client may call a tool it was never shown.
        if self.shared.config.read_only && !def.read_only {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "{} is refused: this Gantry server's MCP interface is read-only (--mcp-read-only)",
                def.name
            ))])
            .into());
        }
        tools::call(&self.shared, def, &caller, &request, &ctx).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(resources::list()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        caller_of(&ctx)?;
        resources::read(&request.uri).map(Into::into)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn origins_name_their_port() {
        use super::with_port;
        assert_eq!(
            with_port("https://chat.example.com/"),
            "https://chat.example.com:443"
        );
        assert_eq!(with_port("http://gantry"), "http://gantry:80");
        assert_eq!(with_port("http://127.0.0.1:7070"), "http://127.0.0.1:7070");
        assert_eq!(with_port("http://[::1]:7070"), "http://[::1]:7070");
        assert_eq!(with_port("http://[::1]"), "http://[::1]:80");
    }
}
