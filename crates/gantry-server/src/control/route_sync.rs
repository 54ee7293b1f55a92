//! The proxy's routes brought in line with the store each tick: which routes exist (every
//! persistent endpoint, and every running workflow's own endpoints) and where each points now.
//! Who may call a route is `crate::routes`'; the middleware that sends endpoint traffic to the
//! proxy is `http::proxy`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use gantry_proxy::Backend;
use uuid::Uuid;

use super::Ctx;
use crate::routes::{Gateway, RouteMeta};

/// A desired route: where it should point.
struct Want {
    meta: RouteMeta,
    target: Option<(Uuid, SocketAddr, String)>,
}

/// Brings the proxy's routes in line with the store: `endpoints` (persistent) and the running
/// workflows' own endpoints. `in_play` is the controller's snapshot of this tick, less the
/// workflows the tick has just ended, whose own endpoints go. What changed after the
/// snapshot woke the controller, whose next tick brings it here.
pub async fn sync_from(
    cx: &Ctx,
    endpoints: &[gantry_store::EndpointRow],
    in_play: crate::endpoints::InPlay<'_>,
) -> anyhow::Result<()> {
    let mut want: BTreeMap<String, Want> = BTreeMap::new();
    for e in endpoints {
        let mut target = None;
        if let (Some(w), Some(svc), Some(port)) = (e.workflow_id, &e.service, e.port) {
            let s = in_play.service(cx.store.as_ref(), w, svc, port).await?;
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
