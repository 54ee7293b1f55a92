//! The endpoint proxy as the server runs it: each route's metadata and access check
//! (`EndpointAuth`: the caller's token against the endpoint's scope), and what the server
//! remembers of each route's backend (`Gateway`). Kept in line with the store by
//! `control/route_sync.rs`, which also publishes what this replica's proxy does with each
//! persistent endpoint ([`Gateway::views`]), so that a takeover drains across replicas.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use axum::http::request::Parts;
use axum::response::IntoResponse;
use gantry_proxy::{Access, Authorize, Proxy, ProxyConfig};
use gantry_store::{EndpointScope, Millis, ProxyView};
use uuid::Uuid;

use crate::caller::{hash_token, Caller};
use crate::clock::now_ms;
use crate::error::ApiError;

/// What the takeover driver needs from this process's proxy (the other replicas' proxies
/// answer through the store: [`Gateway::views`]).
pub trait Routes: Send + Sync {
    /// Requests begun here on the backend of workflow `old` have all finished.
    fn drained(&self, endpoint: &str, old: Option<Uuid>) -> bool;
    /// End what still streams from the backend of workflow `old` here.
    fn cut(&self, endpoint: &str, old: Option<Uuid>);
}

/// A replica whose proxy views have not changed marks them seen this often (a standby syncs
/// its routes every second, the controller's holder on every tick).
pub const VIEW_HEARTBEAT: Duration = Duration::from_secs(2);
/// A replica's views count this long after it was last seen: one that missed two heartbeats
/// is taken for dead, and no takeover waits for its proxy (a killed replica's requests went
/// with it). Generous against a live replica's slow heartbeat, which would be taken for dead
/// while it may still carry requests on an old backend.
pub const VIEW_TTL: Duration = Duration::from_secs(3 * VIEW_HEARTBEAT.as_secs());
/// Views not seen for this long are dropped from the store (replicas long gone: on
/// PostgreSQL each server process is a replica of its own).
pub const VIEW_FORGET: Duration = Duration::from_secs(600);

/// Where this process's proxy sends one route's new requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Current {
    pub workflow: Uuid,
    pub attempt: Uuid,
    pub generation: u64,
}

/// What this replica last published of its proxy's views, and when (ms).
#[derive(Default)]
pub(crate) struct Published {
    pub views: Option<Vec<ProxyView>>,
    pub at: Millis,
}

/// What a route needs for access decisions.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteMeta {
    pub scope: EndpointScope,
    pub owner: String,
    pub group: String,
    /// Set for persistent endpoints: their tokens are accepted too.
    pub persistent: Option<String>,
}

pub struct EndpointAuth {
    store: std::sync::Arc<dyn gantry_store::Store>,
}

fn deny(status: axum::http::StatusCode, msg: &str) -> Access {
    let mut resp = ApiError::Forbidden(msg.into()).into_response();
    *resp.status_mut() = status;
    if status == axum::http::StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer"),
        );
    }
    Access::Deny(resp)
}

impl Authorize<RouteMeta> for EndpointAuth {
    async fn authorize(&self, endpoint: &str, meta: &RouteMeta, req: &Parts) -> Access {
        // Public endpoints are the application's own business, its Authorization header too.
        if meta.scope == EndpointScope::Public {
            return Access::Allow {
                strip_authorization: false,
            };
        }
        let token = req
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            return deny(
                axum::http::StatusCode::UNAUTHORIZED,
                &format!("{endpoint} needs a bearer token: a user token or one from `gantry endpoint token`"),
            );
        };
        let hash = hash_token(token);
        let now = now_ms();
        if let Ok(Some(user)) = self.store.user_by_token(&hash, now).await {
            let role = match user.role {
                gantry_api::v1::Role::Admin | gantry_api::v1::Role::User => user.role,
                _ => {
                    return deny(
                        axum::http::StatusCode::FORBIDDEN,
                        "this token cannot call endpoints",
                    );
                }
            };
            let c = Caller { user, role };
            let allowed = crate::caller::scope_admits(meta.scope, &meta.owner, &meta.group, &c);
            return if allowed {
                Access::Allow {
                    strip_authorization: true,
                }
            } else {
                // Something a caller may not see answers 404.
                deny(
                    axum::http::StatusCode::NOT_FOUND,
                    &format!("no endpoint named {endpoint}"),
                )
            };
        }
        if let (Some(name), Ok(Some(granted))) = (
            &meta.persistent,
            self.store.endpoint_token(&hash, now).await,
        ) {
            if *name == granted {
                return Access::Allow {
                    strip_authorization: true,
                };
            }
        }
        let why = match self.store.token_refusal(&hash, now).await {
            Ok(Some(r)) => crate::caller::refusal_text(&r),
            _ => "invalid or expired token".into(),
        };
        deny(axum::http::StatusCode::UNAUTHORIZED, &why)
    }
}

/// The proxy plus what the server remembers of each route's backend.
pub struct Gateway {
    pub proxy: Proxy<RouteMeta, EndpointAuth>,
    /// Route name -> the backend serving it.
    pub(crate) current: Mutex<HashMap<String, Current>>,
    pub(crate) generation: AtomicU64,
    /// Taken only by the route sync, never on a request.
    pub(crate) published: Mutex<Published>,
}

impl Gateway {
    pub fn new(store: std::sync::Arc<dyn gantry_store::Store>) -> Gateway {
        Gateway {
            proxy: Proxy::new(ProxyConfig::default(), EndpointAuth { store }),
            current: Mutex::default(),
            generation: AtomicU64::new(1),
            published: Mutex::default(),
        }
    }

    /// What this proxy does with each of `endpoints` now: the backend new requests go to, and
    /// how many requests still run on those it pointed at before.
    pub(crate) fn views<'a>(&self, endpoints: impl IntoIterator<Item = &'a str>) -> Vec<ProxyView> {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        endpoints
            .into_iter()
            .map(|name| {
                let now = current.get(name).copied();
                let old_in_flight = self
                    .proxy
                    .generations(name)
                    .iter()
                    .filter(|(b, _)| now.is_none_or(|c| c.generation != b.generation))
                    .map(|(_, n)| *n as u64)
                    .sum();
                ProxyView {
                    endpoint: name.to_string(),
                    workflow_id: now.map(|c| c.workflow),
                    attempt_id: now.map(|c| c.attempt),
                    old_in_flight,
                }
            })
            .collect()
    }

    /// Ends what still runs on the backends `endpoint` pointed at before its current one
    /// (another replica's takeover drained without this proxy, or past its deadline).
    pub(crate) fn cut_old(&self, endpoint: &str) {
        let now = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(endpoint)
            .map(|c| c.generation);
        for (b, n) in self.proxy.generations(endpoint) {
            if n > 0 && Some(b.generation) != now {
                self.proxy.begin_cut(endpoint, b.generation);
            }
        }
    }

    /// Takes a route away at once (the controller's next sync would too).
    pub(crate) fn remove_route(&self, name: &str) {
        self.proxy.remove(name);
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
    }

    pub(crate) fn label(workflow: Uuid, service: &str) -> String {
        format!("{service} of workflow {workflow}")
    }
}

impl Routes for Gateway {
    fn drained(&self, endpoint: &str, old: Option<Uuid>) -> bool {
        let Some(old) = old else { return true };
        let tag = old.to_string();
        self.proxy
            .generations(endpoint)
            .iter()
            .filter(|(b, _)| b.label.contains(&tag))
            .all(|(_, n)| *n == 0)
    }

    fn cut(&self, endpoint: &str, old: Option<Uuid>) {
        let Some(old) = old else { return };
        let tag = old.to_string();
        for (b, _) in self.proxy.generations(endpoint) {
            if b.label.contains(&tag) {
                self.proxy.begin_cut(endpoint, b.generation);
            }
        }
    }
}
