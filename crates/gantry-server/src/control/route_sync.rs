//! The proxy's routes brought in line with the store each tick: which routes exist (every
//! persistent endpoint, and every running workflow's own endpoints) and where each points now;
//! then what this replica's proxy does with each persistent endpoint, published in the store
//! for the takeover driver, whichever replica runs it. Who may call a route is
//! `crate::routes`'; the middleware that sends endpoint traffic to the proxy is `http::proxy`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use gantry_proxy::Backend;
use uuid::Uuid;

use super::Ctx;
use crate::clock::now_ms;
use crate::routes::{Current, Gateway, RouteMeta, VIEW_FORGET, VIEW_HEARTBEAT};

/// Where a route should send its requests: (workflow, attempt, address, label).
type Target = (Uuid, Uuid, SocketAddr, String);

/// A desired route: where it should point.
struct Want {
    meta: RouteMeta,
    target: Option<Target>,
}

/// Brings the proxy's routes in line with the store: `endpoints` (persistent) and the running
/// workflows' own endpoints. `in_play` is the controller's snapshot of this tick, less the
/// workflows the tick has just ended, whose own endpoints go. What changed after the
/// snapshot woke the controller, whose next tick brings it here.
///
/// `draining` (a standby's) names the persistent endpoints whose takeover still lets
/// requests on the old backend finish: on every other, what still runs on an old backend is
/// cut, as the controller's holder cuts its own at the drain deadline (its own are `None`:
/// the takeover driver cuts them).
pub async fn sync_from(
    cx: &Ctx,
    endpoints: &[gantry_store::EndpointRow],
    in_play: crate::endpoints::InPlay<'_>,
    draining: Option<&BTreeSet<String>>,
) -> anyhow::Result<()> {
    let mut want: BTreeMap<String, Want> = BTreeMap::new();
    for e in endpoints {
        let mut target = None;
        if let (Some(w), Some(svc), Some(port)) = (e.workflow_id, &e.service, e.port) {
            let s = in_play.service(cx.store.as_ref(), w, svc, port).await?;
            if let (Some(addr), Some(attempt)) = (s.backend, s.attempt) {
                if let Ok(addr) = addr.parse() {
                    target = Some((w, attempt, addr, Gateway::label(w, svc)));
                }
            }
        }
        want.insert(
            e.name.clone(),
            Want {
                meta: RouteMeta {
                    scope: e.scope,
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
        let Ok(plan) = cx.cache.plan(&aw.workflow) else {
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
                                aw.workflow.id,
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
                            scope: ep.scope,
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
    let gw = &cx.gateway;
    let persistent: Vec<String> = endpoints.iter().map(|e| e.name.clone()).collect();
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
            Some((workflow, attempt, addr, label)) => {
                let generation = match current.get(&name) {
                    Some(c) if c.attempt == attempt => c.generation,
                    _ => gw.generation.fetch_add(1, Ordering::Relaxed),
                };
                current.insert(
                    name.clone(),
                    Current {
                        workflow,
                        attempt,
                        generation,
                    },
                );
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
    if let Some(draining) = draining {
        for name in persistent.iter().filter(|n| !draining.contains(*n)) {
            gw.cut_old(name);
        }
    }
    publish(cx, &persistent).await
}

/// Publishes this replica's views of the persistent endpoints when they changed since it last
/// did, else marks them seen once a heartbeat is due: the takeover driver, on whichever
/// replica, stops an old backend only once every live replica's proxy has let it go.
async fn publish(cx: &Ctx, persistent: &[String]) -> anyhow::Result<()> {
    let gw = &cx.gateway;
    let views = gw.views(persistent.iter().map(String::as_str));
    let now = now_ms();
    let (changed, due) = {
        let p = gw.published.lock().unwrap_or_else(|e| e.into_inner());
        (
            p.views.as_ref() != Some(&views),
            now - p.at >= VIEW_HEARTBEAT.as_millis() as i64,
        )
    };
    let me = cx.lease.holder.as_str();
    // Nothing to say of no endpoint: no heartbeat either (a replica with no views is not
    // waited for).
    let touched = match (changed, due && !views.is_empty()) {
        (false, false) => return Ok(()),
        (false, true) => cx.store.touch_proxy_views(me, now).await?,
        (true, _) => false,
    };
    if !touched {
        let forget = now - VIEW_FORGET.as_millis() as i64;
        cx.store
            .publish_proxy_views(me, &views, forget, now)
            .await?;
    }
    let mut p = gw.published.lock().unwrap_or_else(|e| e.into_inner());
    *p = crate::routes::Published {
        views: Some(views),
        at: now,
    };
    Ok(())
}
