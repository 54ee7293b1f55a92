//! The proxy as the server uses it: which routes exist (every persistent endpoint, and every
//! running workflow's own endpoints), where each points now, who may call it, and the
//! fallback handler that sends `/e/NAME/...`, `/w/WORKFLOW/NAME/...` and endpoint host names
//! through the proxy.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use crate::caller::{hash_token, Caller};
use crate::endpoints::Routes;
use crate::error::ApiError;
use crate::state::{now_ms, AppState};
use gantry_proxy::{Access, Authorize, Backend, Proxy, ProxyConfig};

/// What a route needs for access decisions.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteMeta {
    pub scope: String,
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
        if meta.scope == "public" {
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
            let allowed = crate::caller::scope_admits(&meta.scope, &meta.owner, &meta.group, &c);
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
    /// Route name -> (attempt serving it, its generation).
    current: Mutex<HashMap<String, (Uuid, u64)>>,
    generation: AtomicU64,
}

impl Gateway {
    pub fn new(store: std::sync::Arc<dyn gantry_store::Store>) -> Gateway {
        Gateway {
            proxy: Proxy::new(ProxyConfig::default(), EndpointAuth { store }),
            current: Mutex::default(),
            generation: AtomicU64::new(1),
        }
    }

    fn label(workflow: Uuid, service: &str) -> String {
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

/// A desired route: where it should point.
struct Want {
    meta: RouteMeta,
    target: Option<(Uuid, SocketAddr, String)>,
}

/// Brings the proxy's routes in line with the store now, outside a controller tick.
pub async fn sync(st: &AppState) -> anyhow::Result<()> {
    let active = st.store.active().await?;
    let endpoints = st.store.endpoints().await?;
    let in_play = crate::endpoints::InPlay {
        active: &active,
        ended: &[],
    };
    sync_from(st, &endpoints, in_play).await
}

/// Brings the proxy's routes in line with the store: `endpoints` (persistent) and the running
/// workflows' own endpoints. `in_play` is the controller's snapshot of this tick, less the
/// workflows the tick has just ended, whose own endpoints go. What changed after the
/// snapshot woke the controller, whose next tick brings it here.
pub async fn sync_from(
    st: &AppState,
    endpoints: &[gantry_store::EndpointRow],
    in_play: crate::endpoints::InPlay<'_>,
) -> anyhow::Result<()> {
    let mut want: BTreeMap<String, Want> = BTreeMap::new();
    for e in endpoints {
        let mut target = None;
        if let (Some(w), Some(svc), Some(port)) = (e.workflow_id, &e.service, e.port) {
            let s = in_play.service(st, w, svc, port).await?;
            if let (Some(addr), Some(attempt)) = (s.backend, s.attempt) {
                if let Ok(addr) = addr.parse() {
                    target = Some((attempt, addr, Gateway::label(w, svc)));
                }
            }
        }
        want.insert(
            e.name.clone(),
            Want {
                meta: RouteMeta {
                    scope: e.scope.clone(),
                    owner: e.owner.clone(),
                    group: e.group.clone(),
                    persistent: Some(e.name.clone()),
                },
                target,
            },
        );
    }
    for aw in in_play
        .active
        .iter()
        .filter(|aw| !in_play.ended.contains(&aw.workflow.id))
    {
        let Ok(plan) = st.cache.plan(&aw.workflow) else {
            continue;
        };
        for j in &plan.jobs {
            let Some(svc) = &j.service else { continue };
            for ep in svc.endpoints.iter().filter(|e| e.attach.is_none()) {
                let key = if ep.kind == "subdomain" {
                    format!("{}-{}", ep.name, &aw.workflow.id.to_string()[..8])
                } else {
                    format!("w/{}/{}", aw.workflow.id, ep.name)
                };
                let task = aw.tasks.iter().find(|t| t.job == j.name);
                let live = task
                    .and_then(|t| t.live_attempt)
                    .and_then(|a| aw.live.iter().find(|l| l.id == a));
                let target = match (
                    task.map(|t| t.status),
                    live.and_then(|l| l.address.as_ref()),
                ) {
                    (Some(gantry_api::TaskStatus::Running), Some(addr)) => {
                        format!("{addr}:{}", ep.port).parse().ok().map(|a| {
                            (
                                live.map(|l| l.id).unwrap_or_default(),
                                a,
                                Gateway::label(aw.workflow.id, &j.name),
                            )
                        })
                    }
                    _ => None,
                };
                want.insert(
                    key,
                    Want {
                        meta: RouteMeta {
                            scope: ep.scope.clone(),
                            owner: aw.workflow.owner.clone(),
                            group: aw.workflow.group.clone(),
                            persistent: None,
                        },
                        target,
                    },
                );
            }
        }
    }
    let gw = &st.gateway;
    for name in gw.proxy.names() {
        if !want.contains_key(&name) {
            gw.proxy.remove(&name);
            gw.current
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&name);
        }
    }
    for (name, w) in want {
        gw.proxy.insert(&name, w.meta);
        let mut current = gw.current.lock().unwrap_or_else(|e| e.into_inner());
        match w.target {
            Some((attempt, addr, label)) => {
                let generation = match current.get(&name) {
                    Some((a, g)) if *a == attempt => *g,
                    _ => gw.generation.fetch_add(1, Ordering::Relaxed),
                };
                current.insert(name.clone(), (attempt, generation));
                let _ = gw.proxy.switch(
                    &name,
                    Some(Backend {
                        addr,
                        generation,
                        label,
                    }),
                );
            }
            None => {
                if current.remove(&name).is_some() || gw.proxy.backend(&name).is_some() {
                    let _ = gw.proxy.switch(&name, None);
                }
            }
        }
    }
    Ok(())
}

/// In front of every route: endpoint traffic (`Host: NAME.<domain>`, which wins over any
/// path, `/e/NAME/...`, `/w/WORKFLOW/NAME/...`) goes through the proxy, untouched by the API's
/// error wrapping; everything else goes on to the API.
pub async fn endpoints_first(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let domain = st.config.endpoint_domain.clone();
    let req = match st.gateway.proxy.dispatch(req, Some(&domain)).await {
        Ok(resp) => return resp,
        Err(req) => req,
    };
    // Per-workflow path endpoints keep their full path: `/w/WORKFLOW/NAME/...`.
    let path = req.uri().path().to_string();
    if let Some(rest) = path.strip_prefix("/w/") {
        let mut parts = rest.splitn(3, '/');
        if let (Some(wf), Some(name)) = (parts.next(), parts.next()) {
            let key = format!("w/{wf}/{name}");
            return st.gateway.proxy.handle(&key, req, None).await;
        }
    }
    next.run(req).await
}
