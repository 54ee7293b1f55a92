//! The endpoint proxy: forwards `/e/NAME/...` and `Host: NAME.<domain>` requests to the service
//! currently attached to endpoint NAME, and lets that service be switched without cutting anything.
//!
//! - **Routes.** One route per endpoint name, with caller-given metadata (scope, owner, group:
//!   whatever [`Authorize`] needs) and its current [`Backend`]. The route table and each route's
//!   backend live behind `ArcSwap`s: the request path takes no lock.
//! - **Streaming.** Request and response bodies are streamed frame by frame in both directions
//!   (no buffering, no whole-request timeout, no compression); Server-Sent Events and chunked
//!   responses flow as they come. Upgrades (WebSocket) are passed through and the two upgraded
//!   connections copied into each other.
//! - **Generations and draining.** Every request is counted against the backend *generation* it
//!   started on until its response body has finished (or the client went away), an upgraded
//!   connection until it closes. [`Proxy::switch`] is one atomic swap: nothing new reaches the old
//!   generation after it returns. [`Proxy::drained`] waits for a generation's count to reach zero;
//!   [`Proxy::cut`] ends what is left at the drain deadline: an SSE body is finished cleanly, a
//!   WebSocket closed with code 1001 (going away), anything else aborted so that the client sees
//!   it was cut short.
//! - **Auth** is the caller's: [`Authorize`] is asked about every request before it is counted
//!   or forwarded, and says whether the `Authorization` header must be removed (endpoint tokens
//!   must never reach the backend).

mod drain;
mod forward;
mod routing;
mod tunnel;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use drain::{Generation, InFlight};
pub use routing::{host_endpoint, split_path, PATH_PREFIX};

/// Where an endpoint's traffic goes now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub addr: SocketAddr,
    /// Increases with every switch of an endpoint; requests are counted per generation.
    pub generation: u64,
    /// For people: which workflow and service this is (shown in error bodies and logs).
    pub label: String,
}

/// What [`Authorize`] decided about one request.
pub enum Access {
    /// Forward it. `strip_authorization` removes the `Authorization` header first.
    Allow { strip_authorization: bool },
    /// Answer with this instead (404 for a caller who may not see the endpoint, 401, ...).
    Deny(Response<Body>),
}

/// The caller's access decision for a request to an endpoint, made before the request is
/// counted or forwarded. `meta` is what [`Proxy::insert`] was given for the endpoint.
pub trait Authorize<M>: Send + Sync + 'static {
    fn authorize(
        &self,
        endpoint: &str,
        meta: &M,
        request: &axum::http::request::Parts,
    ) -> impl Future<Output = Access> + Send;
}

/// Lets every request through and leaves its headers alone (tests, per-workflow endpoints the
/// caller has already checked).
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl<M: Send + Sync> Authorize<M> for AllowAll {
    async fn authorize(&self, _: &str, _: &M, _: &axum::http::request::Parts) -> Access {
        Access::Allow {
            strip_authorization: false,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Connecting to a backend gives up after this long (502). Nothing else has a timeout.
    pub connect_timeout: Duration,
    /// Idle pooled connections to a backend are closed after this long.
    pub pool_idle_timeout: Duration,
    pub pool_max_idle_per_host: usize,
    /// Keep `X-Forwarded-*` headers that arrive with a request (append to `X-Forwarded-For`)
    /// instead of replacing them. Only when another proxy that sets them stands in front.
    pub trust_forwarded: bool,
    /// `X-Forwarded-Proto` for requests whose URI carries no scheme: what clients used.
    pub forwarded_proto: HeaderValue,
    /// How long [`Proxy::cut`] waits for the streams it ended to finish (a WebSocket frame in
    /// progress, the close handshake) before it drops their connections.
    pub cut_grace: Duration,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            pool_idle_timeout: Duration::from_secs(60),
            pool_max_idle_per_host: 256,
            trust_forwarded: false,
            forwarded_proto: HeaderValue::from_static("http"),
            cut_grace: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("no endpoint named {0}")]
pub struct UnknownEndpoint(pub String);

type Routes<M> = HashMap<Box<str>, Arc<Route<M>>>;

struct Route<M> {
    meta: ArcSwap<M>,
    current: ArcSwapOption<Generation>,
    /// Said in the 503 body while there is no backend.
    idle_reason: ArcSwap<String>,
    /// `X-Forwarded-Prefix` for the prefix last stripped, so path routes do not build it anew.
    prefix: ArcSwapOption<(Box<str>, HeaderValue)>,
}

const DEFAULT_IDLE_REASON: &str = "no service is attached to it";

/// The endpoint proxy. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Proxy<M = (), A = AllowAll> {
    routes: ArcSwap<Routes<M>>,
    /// Every generation that may still have requests, by endpoint name, including endpoints
    /// removed since. Only route changes and drain queries take this lock, never a request.
    generations: Mutex<HashMap<Box<str>, Vec<Weak<Generation>>>>,
    client: Client<HttpConnector, Body>,
    auth: A,
    config: ProxyConfig,
}

impl<M, A> Proxy<M, A>
where
    M: Send + Sync + 'static,
    A: Authorize<M>,
{
    pub fn new(config: ProxyConfig, auth: A) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(config.pool_idle_timeout)
            .pool_max_idle_per_host(config.pool_max_idle_per_host)
            .build(connector);
        Self {
            routes: ArcSwap::from_pointee(HashMap::new()),
            generations: Mutex::new(HashMap::new()),
            client,
            auth,
            config,
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Vec<Weak<Generation>>>> {
        // Nothing panics while holding it; a poisoned map is still consistent.
        self.generations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn route(&self, name: &str) -> Option<Arc<Route<M>>> {
        self.routes.load().get(name).cloned()
    }

    /// Adds endpoint `name` (without a backend: 503 until [`switch`](Self::switch)), or replaces
    /// its metadata, keeping its backend. Returns whether it was new.
    pub fn insert(&self, name: &str, meta: M) -> bool {
        let _registry = self.registry(); // serialises changes to the table
        let meta = Arc::new(meta);
        if let Some(route) = self.route(name) {
            route.meta.store(meta);
            return false;
        }
        let route = Arc::new(Route {
            meta: ArcSwap::new(meta),
            current: ArcSwapOption::empty(),
            idle_reason: ArcSwap::from_pointee(DEFAULT_IDLE_REASON.to_string()),
            prefix: ArcSwapOption::empty(),
        });
        let mut table = Routes::clone(&self.routes.load());
        table.insert(name.into(), route);
        self.routes.store(Arc::new(table));
        true
    }

    /// Removes endpoint `name`: new requests get 404. Requests in flight finish on their
    /// generation, which [`in_flight`](Self::in_flight), [`drained`](Self::drained) and
    /// [`cut`](Self::cut) still know. Returns the backend it had.
    pub fn remove(&self, name: &str) -> Option<Backend> {
        let _registry = self.registry();
        let route = self.route(name)?;
        let mut table = Routes::clone(&self.routes.load());
        table.remove(name);
        self.routes.store(Arc::new(table));
        let old = route.current.swap(None)?;
        old.retire();
        Some(old.backend.clone())
    }

    /// Points endpoint `name` at `backend` (or at nothing: 503). One atomic swap: once this
    /// returns, no new request reaches the previous generation, while those already in flight
    /// carry on there. Returns the previous backend. Switching to the generation and address
    /// already current changes nothing.
    pub fn switch(
        &self,
        name: &str,
        backend: Option<Backend>,
    ) -> Result<Option<Backend>, UnknownEndpoint> {
        let mut registry = self.registry();
        let route = self
            .route(name)
            .ok_or_else(|| UnknownEndpoint(name.to_string()))?;
        if let (Some(current), Some(new)) = (route.current.load().as_ref(), backend.as_ref()) {
            if current.backend.generation == new.generation && current.backend.addr == new.addr {
                return Ok(Some(current.backend.clone()));
            }
        }
        let new = backend.map(Generation::new);
        let old = route.current.swap(new.clone());
        if let Some(old) = &old {
            old.retire();
        }
        let generations = registry.entry(name.into()).or_default();
        generations.retain(|g| g.strong_count() > 0);
        if let Some(new) = &new {
            generations.push(Arc::downgrade(new));
        }
        Ok(old.map(|g| g.backend.clone()))
    }

    /// What the 503 body says while endpoint `name` has no backend ("the takeover failed", ...).
    pub fn set_idle_reason(&self, name: &str, reason: impl Into<String>) {
        if let Some(route) = self.route(name) {
            route.idle_reason.store(Arc::new(reason.into()));
        }
    }

    /// The backend endpoint `name` sends new requests to.
    pub fn backend(&self, name: &str) -> Option<Backend> {
        let route = self.route(name)?;
        let current = route.current.load();
        current.as_ref().map(|g| g.backend.clone())
    }

    /// The metadata endpoint `name` was inserted with.
    pub fn meta(&self, name: &str) -> Option<Arc<M>> {
        Some(self.route(name)?.meta.load_full())
    }

    /// The endpoints the proxy knows, in no particular order.
    pub fn names(&self) -> Vec<String> {
        self.routes.load().keys().map(|k| k.to_string()).collect()
    }

    fn generations_of(&self, name: &str, generation: u64) -> Vec<Arc<Generation>> {
        let mut registry = self.registry();
        let Some(list) = registry.get_mut(name) else {
            return Vec::new();
        };
        list.retain(|g| g.strong_count() > 0);
        let found = list
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|g| g.backend.generation == generation)
            .collect();
        if list.is_empty() && self.route(name).is_none() {
            registry.remove(name);
        }
        found
    }

    /// Requests (and upgraded connections) of endpoint `name` still running on `generation`.
    pub fn in_flight(&self, name: &str, generation: u64) -> usize {
        self.generations_of(name, generation)
            .iter()
            .map(|g| g.in_flight())
            .sum()
    }

    /// Waits until nothing runs on `generation` of endpoint `name` any more, or `deadline` has
    /// passed; says whether it drained. Wakes on the last request's end, no polling. Call it
    /// after [`switch`](Self::switch); before, new requests keep arriving.
    pub async fn drained(&self, name: &str, generation: u64, deadline: Duration) -> bool {
        let until = tokio::time::Instant::now() + deadline;
        for g in self.generations_of(name, generation) {
            if !g.wait_idle(until).await {
                return false;
            }
        }
        true
    }

    /// Every generation of endpoint `name` that is current or still has requests running,
    /// with its count of requests in flight (oldest first).
    pub fn generations(&self, name: &str) -> Vec<(Backend, usize)> {
        let mut registry = self.registry();
        let Some(list) = registry.get_mut(name) else {
            return Vec::new();
        };
        list.retain(|g| g.strong_count() > 0);
        list.iter()
            .filter_map(Weak::upgrade)
            .map(|g| (g.backend.clone(), g.in_flight()))
            .collect()
    }

    /// Starts cutting `generation` of endpoint `name` and returns at once (for callers that
    /// cannot wait): see [`cut`](Self::cut). Returns how many were still in flight.
    pub fn begin_cut(&self, name: &str, generation: u64) -> usize {
        self.generations_of(name, generation)
            .iter()
            .map(|g| {
                g.cancel.cancel();
                g.in_flight()
            })
            .sum()
    }

    /// Ends everything still running on `generation` of endpoint `name` (at the drain
    /// deadline): SSE bodies finish cleanly, WebSockets close with 1001 (going away) after the
    /// frame in progress, other bodies are aborted so that the client sees they were cut short,
    /// requests still waiting for their response answer 503. Waits up to `cut_grace` for them
    /// to be gone and returns how many are left (0 normally). Meant for a generation that has
    /// been switched away from: the current one would keep cutting its new requests.
    pub async fn cut(&self, name: &str, generation: u64) -> usize {
        let generations = self.generations_of(name, generation);
        for g in &generations {
            g.cancel.cancel();
        }
        let until = tokio::time::Instant::now() + self.config.cut_grace;
        for g in &generations {
            g.wait_idle(until).await;
        }
        generations.iter().map(|g| g.in_flight()).sum()
    }

    /// Routes a request that belongs to an endpoint: `Host: NAME.<domain>` first (the full path
    /// goes to the backend), then `/e/NAME/...` (the prefix is stripped). Gives the request back
    /// when it is neither, for the rest of the router.
    pub async fn dispatch(
        &self,
        req: Request<Body>,
        domain: Option<&str>,
    ) -> Result<Response<Body>, Request<Body>> {
        // Clones of the URI and the Host header share their bytes: the name borrowed from them
        // costs no copy.
        let uri = req.uri().clone();
        if let Some(domain) = domain {
            let host_header = req.headers().get(header::HOST).cloned();
            let host = match &host_header {
                Some(h) => h.to_str().ok(),
                None => uri.authority().map(|a| a.as_str()),
            };
            if let Some(name) = host.and_then(|h| host_endpoint(h, domain)) {
                return Ok(self.handle(&name, req, None).await);
            }
        }
        if let Some((name, _)) = split_path(uri.path()) {
            let prefix = &uri.path()[..PATH_PREFIX.len() + name.len()];
            return Ok(self.handle(name, req, Some(prefix)).await);
        }
        Err(req)
    }

    /// Forwards `req` to the current backend of endpoint `name` and streams the answer back.
    /// `strip_prefix` (`/e/NAME` for path routes) is removed from the path, the query kept, and
    /// sent as `X-Forwarded-Prefix`; `None` sends the path as it came (Host routes, per-workflow
    /// endpoints). Sets `X-Forwarded-For` (from axum's `ConnectInfo<SocketAddr>` when the server
    /// provides it), `-Proto` and `-Host`; removes hop-by-hop headers.
    ///
    /// 404 for an unknown endpoint, 503 while it has no backend, 502 when the backend cannot be
    /// reached; each with a JSON body `{"error": "..."}`.
    pub async fn handle(
        &self,
        name: &str,
        req: Request<Body>,
        strip_prefix: Option<&str>,
    ) -> Response<Body> {
        let Some(route) = self.route(name) else {
            return error(StatusCode::NOT_FOUND, &format!("no endpoint named {name}"));
        };
        let (mut parts, body) = req.into_parts();
        let meta = route.meta.load_full();
        let strip_authorization = match self.auth.authorize(name, &meta, &parts).await {
            Access::Allow {
                strip_authorization,
            } => strip_authorization,
            Access::Deny(resp) => return resp,
        };
        drop(meta);

        let prefix_header = match strip_prefix {
            None => None,
            Some(prefix) => match forward::strip_prefix(&parts.uri, prefix) {
                Some(pq) => {
                    parts.uri = axum::http::Uri::from(pq);
                    Some(prefix_header(&route, prefix))
                }
                None => {
                    return error(
                        StatusCode::NOT_FOUND,
                        &format!("{} is not under {prefix}", parts.uri.path()),
                    )
                }
            },
        };

        let Some(guard) = enter(&route) else {
            let reason = route.idle_reason.load();
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("endpoint {name} has no backend: {reason}"),
            );
        };
        let generation = guard.generation();

        let upgrade = forward::prepare_request(
            &mut parts,
            &forward::Forwarding {
                authority: &generation.authority,
                strip_authorization,
                prefix: prefix_header,
                trust_forwarded: self.config.trust_forwarded,
                default_proto: &self.config.forwarded_proto,
            },
        );
        let req = Request::from_parts(parts, body);

        let sent = tokio::select! {
            biased;
            resp = self.client.request(req) => resp,
            _ = generation.cancel.cancelled() => {
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!(
                        "endpoint {name}: its previous backend {} was stopped before it answered; \
                         retry to reach the new one",
                        generation.backend.label
                    ),
                );
            }
        };
        let mut resp = match sent {
            Ok(resp) => resp,
            Err(e) => {
                let b = &generation.backend;
                let what = if e.is_connect() {
                    "cannot be reached"
                } else {
                    "failed"
                };
                tracing::debug!("endpoint {name}: backend {} at {}: {e:?}", b.label, b.addr);
                return error(
                    StatusCode::BAD_GATEWAY,
                    &format!(
                        "endpoint {name}: backend {} at {} {what}: {}",
                        b.label,
                        b.addr,
                        forward::error_chain(&e)
                    ),
                );
            }
        };

        let switched = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
        forward::prepare_response(resp.headers_mut(), switched);
        match upgrade {
            Some(client_side) if switched => {
                let websocket = resp
                    .headers()
                    .get(header::UPGRADE)
                    .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
                let backend_side = hyper::upgrade::on(&mut resp);
                tokio::spawn(tunnel::run(
                    client_side,
                    backend_side,
                    guard,
                    websocket,
                    self.config.cut_grace,
                ));
                let (parts, _) = resp.into_parts();
                Response::from_parts(parts, Body::empty())
            }
            _ if switched => error(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "endpoint {name}: backend {} switched protocols without being asked to",
                    generation.backend.label
                ),
            ),
            _ => {
                let sse = resp
                    .headers()
                    .get(header::CONTENT_TYPE)
                    .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
                let (parts, incoming) = resp.into_parts();
                Response::from_parts(parts, Body::new(drain::Counted::new(incoming, guard, sse)))
            }
        }
    }
}

/// Counts a request against the route's current generation. A switch between loading the
/// generation and counting the request retires it; the request then takes the new one, so
/// nothing new reaches a generation once `switch` has returned.
fn enter<M>(route: &Route<M>) -> Option<InFlight> {
    loop {
        let generation = route.current.load_full()?;
        if let Some(guard) = InFlight::enter(generation) {
            return Some(guard);
        }
    }
}

fn prefix_header<M>(route: &Route<M>, prefix: &str) -> HeaderValue {
    if let Some(cached) = route.prefix.load().as_ref() {
        if &*cached.0 == prefix {
            return cached.1.clone();
        }
    }
    let value = HeaderValue::from_str(prefix).unwrap_or_else(|_| HeaderValue::from_static("/"));
    route
        .prefix
        .store(Some(Arc::new((prefix.into(), value.clone()))));
    value
}

/// A JSON error answer in the API's shape.
fn error(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}
