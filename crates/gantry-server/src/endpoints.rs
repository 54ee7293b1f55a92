//! Persistent endpoints: who may call and manage one, how one is shown, the attach check at
//! submit, and the takeover driver the controller runs each tick (the use cases are in
//! `services::endpoints`).
//! Every takeover decision is `gantry_core::takeover`'s; this module gathers facts (the new
//! service's readiness, the old workflow's end, the old backend's in-flight requests on every
//! replica's proxy) and applies the steps.

use gantry_api::v1::{EndpointInfo, TakeoverInfo};
use gantry_api::TaskStatus;
use gantry_core::takeover::{self, NewService, Phase, Step};
use gantry_store::{
    Channel, EndpointChange, EndpointRow, EndpointScope, Millis, NewEvent, ProxyViewRow, Store,
    TakeoverRow,
};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::caller::Caller;
use crate::clock::now_ms;
use crate::clock::ts;
use crate::error::ApiError;
use crate::news::News;
use crate::plan::WorkflowPlan;
use crate::ServerConfig;

/// Who may call an endpoint (and see it): its scope decides.
pub fn may_call(e: &EndpointRow, c: Option<&Caller>) -> bool {
    e.scope == EndpointScope::Public
        || c.is_some_and(|c| crate::caller::scope_admits(e.scope, &e.owner, &e.group, c))
}

/// Who may manage an endpoint and take it over: its owner, a member of its group when it is
/// group-scoped, or an administrator.
pub fn may_manage(e: &EndpointRow, c: &Caller) -> bool {
    manages(c, &e.owner, e.scope == EndpointScope::Group, &e.group)
}

/// [`may_manage`] for an endpoint as the API shows it (it carries the same three fields).
pub fn may_manage_info(e: &EndpointInfo, c: &Caller) -> bool {
    manages(
        c,
        &e.owner,
        e.scope == EndpointScope::Group.as_str(),
        &e.group,
    )
}

fn manages(c: &Caller, owner: &str, group_scoped: bool, group: &str) -> bool {
    c.is_admin() || c.user.name == owner || (group_scoped && c.user.group == group)
}

pub(crate) fn takeover_info(t: TakeoverRow) -> TakeoverInfo {
    TakeoverInfo {
        id: t.id,
        endpoint: t.endpoint,
        from_workflow: t.from_workflow,
        to_workflow: t.to_workflow,
        to_service: t.to_service,
        requested_by: t.requested_by,
        channel: t.channel.to_string(),
        mode: t.mode.to_string(),
        phase: t.phase.to_string(),
        reason: t.reason,
        confirmed_by: t.confirmed_by,
        confirmed_via: t.confirmed_via,
        created_at: ts(t.created_at),
        switched_at: t.switched_at.map(ts),
        ended_at: t.ended_at.map(ts),
    }
}

/// An endpoint as the API shows it: its URLs from the configuration, why a takeover waits
/// from the agents' news.
pub(crate) async fn info(
    store: &dyn Store,
    config: &ServerConfig,
    news: &News,
    e: EndpointRow,
) -> Result<EndpointInfo, ApiError> {
    let all = store.takeovers(Some(&e.name), false).await?;
    let open = all.iter().rev().find(|t| t.ended_at.is_none()).cloned();
    let last = all.last();
    let (status, reason) = match (open.as_ref().map(|t| t.phase), &e.workflow_id) {
        (Some(Phase::Switching), _) => ("SWITCHING", None),
        (Some(Phase::Draining), _) => ("DRAINING", None),
        (_, Some(_)) => ("SERVING", None),
        _ => {
            let (failed, why) = idle_reason(store, last).await;
            (if failed { "FAILED" } else { "IDLE" }, Some(why))
        }
    };
    Ok(EndpointInfo {
        url: format!("{}/e/{}/", config.url(), e.name),
        host: format!("{}.{}", e.name, config.endpoint_domain),
        name: e.name,
        scope: e.scope.to_string(),
        mode: e.mode.to_string(),
        drain_timeout_secs: (e.drain_timeout_ms / 1000) as u64,
        confirm: e.confirm,
        owner: e.owner,
        group: e.group,
        status: status.into(),
        reason,
        workflow_id: e.workflow_id,
        service: e.service,
        since: e.since.map(ts),
        created_at: ts(e.created_at),
        takeover: open.map(|t| {
            let waiting = t.phase == Phase::WaitingReady && t.reason.is_none();
            let (workflow, service) = (t.to_workflow, t.to_service.clone());
            let mut info = takeover_info(t);
            if waiting {
                // Why the new service is not ready yet, while its probe fails.
                let all = news.probes();
                info.reason = all
                    .values()
                    .find(|f| f.workflow == workflow && f.service == service)
                    .map(|f| f.reason());
            }
            info
        }),
    })
}

/// Why an endpoint has no backend, from its last takeover's workflow and how it ended; true
/// only for a real failure (the workflow FAILED), not for one stopped or finished.
async fn idle_reason(store: &dyn Store, last: Option<&TakeoverRow>) -> (bool, String) {
    let Some(t) = last else {
        return (false, "nothing has attached to it yet".into());
    };
    let Ok(w) = store.workflow(t.to_workflow).await else {
        return (false, format!("workflow {} is gone", t.to_workflow));
    };
    let who = format!("workflow {} ({})", &w.id.to_string()[..8], w.name);
    let at = w
        .ended_at
        .map(|m| {
            let t = ts(m);
            format!(
                " at {:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second()
            )
        })
        .unwrap_or_default();
    let before_ready = if t.phase == Phase::Failed {
        " before it was ready"
    } else {
        ""
    };
    let why = w.reason.map(|r| format!(": {r}")).unwrap_or_default();
    match w.status {
        gantry_api::WorkflowStatus::Failed => {
            (true, format!("{who} failed{at}{before_ready}{why}"))
        }
        gantry_api::WorkflowStatus::Stopped => {
            (false, format!("{who} was stopped{at}{before_ready}"))
        }
        gantry_api::WorkflowStatus::Finished => (false, format!("{who} finished{at}")),
        _ if t.phase == Phase::Failed => (
            false,
            format!(
                "{who}: {}",
                t.reason
                    .clone()
                    .unwrap_or_else(|| "its takeover failed".into())
            ),
        ),
        _ => (false, format!("{who} is ending")),
    }
}

pub(crate) async fn visible(
    store: &dyn Store,
    c: &Caller,
    name: &str,
) -> Result<EndpointRow, ApiError> {
    let e = store
        .endpoint(name)
        .await
        .map_err(|_| ApiError::NotFound(format!("no endpoint {name}")))?;
    if !(may_call(&e, Some(c)) || may_manage(&e, c)) {
        return Err(ApiError::NotFound(format!("no endpoint {name}")));
    }
    Ok(e)
}

/// An endpoint the caller may manage; `what` they want to do names the refusal. One they may
/// not even see is 404.
pub(crate) async fn managed(
    store: &dyn Store,
    c: &Caller,
    name: &str,
    what: &str,
) -> Result<EndpointRow, ApiError> {
    let e = visible(store, c, name).await?;
    if !may_manage(&e, c) {
        return Err(ApiError::Forbidden(format!(
            "only {}'s owner, its group (when group-scoped) or an administrator may {what}",
            e.name
        )));
    }
    Ok(e)
}

/// Who confirmed a takeover and through which channel, on the takeover and in the new
/// workflow's events.
pub(crate) fn confirm_changes(
    t: &TakeoverRow,
    c: &Caller,
    via: &str,
    verb: &str,
) -> [EndpointChange; 2] {
    [
        EndpointChange::Confirm {
            id: t.id,
            by: c.user.name.clone(),
            via: via.into(),
        },
        EndpointChange::Event(NewEvent {
            workflow_id: Some(t.to_workflow),
            node: None,
            task: Some(t.to_service.clone()),
            kind: "endpoint.approved".into(),
            message: format!(
                "takeover of {} {verb} by {} via {via}",
                t.endpoint, c.user.name
            ),
        }),
    ]
}

/// At submit: every `attach:` must name an endpoint the submitter may take over, with no other
/// takeover in progress. Returns the takeovers to create once the workflow is stored.
pub async fn check_attach(
    store: &dyn Store,
    c: &Caller,
    plan: &WorkflowPlan,
    workflow: Uuid,
    channel: Channel,
) -> Result<Vec<TakeoverRow>, ApiError> {
    let mut out = vec![];
    for j in &plan.jobs {
        let Some(svc) = &j.service else { continue };
        for ep in &svc.endpoints {
            let Some(name) = &ep.attach else { continue };
            let not_found = || {
                ApiError::BadRequest(format!(
                    "services.{}: no persistent endpoint {name:?} that you may attach to; create it with `gantry endpoint create {name}`",
                    j.name
                ))
            };
            let e = store.endpoint(name).await.map_err(|_| not_found())?;
            if !may_manage(&e, c) {
                return Err(if may_call(&e, Some(c)) {
                    ApiError::BadRequest(format!(
                        "services.{}: you may not take over endpoint {name}: it belongs to {}{}",
                        j.name,
                        e.owner,
                        if e.scope == EndpointScope::Group {
                            format!(" and group {}", e.group)
                        } else {
                            String::new()
                        }
                    ))
                } else {
                    not_found()
                });
            }
            if let Some(t) = store.takeovers(Some(name), true).await?.first() {
                return Err(ApiError::Conflict(format!(
                    "endpoint {name} already has a takeover in progress (workflow {}, {}); wait for it, or reject or stop it",
                    t.to_workflow, t.phase
                )));
            }
            out.push(TakeoverRow {
                id: Uuid::new_v4(),
                endpoint: name.clone(),
                from_workflow: e.workflow_id,
                to_workflow: workflow,
                to_service: j.name.clone(),
                port: ep.port,
                requested_by: c.user.name.clone(),
                channel,
                mode: e.mode,
                phase: Phase::WaitingReady,
                reason: None,
                confirmed_by: None,
                confirmed_via: None,
                created_at: now_ms(),
                updated_at: now_ms(),
                switched_at: None,
                ended_at: None,
            });
        }
    }
    Ok(out)
}

/// Facts about one workflow's service, for takeovers and routing.
pub struct ServiceState {
    pub status: TaskStatus,
    pub workflow_ended: bool,
    /// `ip:port` once ready.
    pub backend: Option<String>,
    pub attempt: Option<Uuid>,
}

/// The workflows a controller tick has in hand: its snapshot of those in play, less those the
/// tick has just ended. Endpoint upkeep runs on every tick, so it answers from here and reads
/// the store only for a workflow the snapshot lacks (ended, or submitted since).
#[derive(Clone, Copy)]
pub struct InPlay<'a> {
    pub active: &'a [gantry_store::ActiveWorkflow],
    pub ended: &'a [Uuid],
}

impl<'a> InPlay<'a> {
    fn workflow(&self, id: Uuid) -> Option<&'a gantry_store::ActiveWorkflow> {
        if self.ended.contains(&id) {
            return None;
        }
        self.active.iter().find(|aw| aw.workflow.id == id)
    }

    /// Whether workflow `id` has ended.
    async fn ended(&self, store: &dyn Store, id: Uuid) -> bool {
        if self.workflow(id).is_some() {
            return false;
        }
        store
            .workflow(id)
            .await
            .map(|w| w.status.is_terminal())
            .unwrap_or(true)
    }

    /// The state of workflow `wf`'s service.
    pub async fn service(
        &self,
        store: &dyn Store,
        wf: Uuid,
        service: &str,
        port: u16,
    ) -> anyhow::Result<ServiceState> {
        // The snapshot holds only tasks that have not ended: an ended service is read.
        let open = self
            .workflow(wf)
            .and_then(|aw| Some((aw, aw.tasks.iter().find(|t| t.job == service)?)));
        let Some((aw, task)) = open else {
            return service_state(store, wf, service, port).await;
        };
        let address = task
            .live_attempt
            .and_then(|a| aw.live.iter().find(|l| l.id == a))
            .and_then(|l| l.address.as_ref());
        Ok(ServiceState {
            status: task.status,
            workflow_ended: aw.workflow.stop_requested,
            backend: match (task.status, address) {
                (TaskStatus::Running, Some(addr)) => Some(format!("{addr}:{port}")),
                _ => None,
            },
            attempt: task.live_attempt,
        })
    }
}

async fn service_state(
    store: &dyn Store,
    wf: Uuid,
    service: &str,
    port: u16,
) -> anyhow::Result<ServiceState> {
    let w = store.workflow(wf).await?;
    let Some(task) = store.job_task(wf, service).await? else {
        return Ok(ServiceState {
            status: TaskStatus::Failed,
            workflow_ended: true,
            backend: None,
            attempt: None,
        });
    };
    let mut backend = None;
    if let (TaskStatus::Running, Some(a)) = (task.status, task.live_attempt) {
        if let Some(addr) = store.attempt(a).await?.address {
            backend = Some(format!("{addr}:{port}"));
        }
    }
    Ok(ServiceState {
        status: task.status,
        workflow_ended: w.status.is_terminal() || w.stop_requested,
        backend,
        attempt: task.live_attempt,
    })
}

/// Whether every other server replica seen lately has let the old backend of `endpoint` go:
/// it sends new requests to workflow `new`'s backend and has nothing left in flight on any
/// before. A request through any replica may still run on the old backend, so the takeover
/// stops it only once this holds too. `views` are those seen within [`VIEW_TTL`]: a replica
/// not seen since is gone, and its requests with it. `me` answers for itself through its own
/// proxy, which is exact (its published view may be a tick behind).
///
/// [`VIEW_TTL`]: crate::routes::VIEW_TTL
pub fn others_drained(views: &[ProxyViewRow], endpoint: &str, new: Uuid, me: &str) -> bool {
    let replicas: std::collections::BTreeSet<&str> = views
        .iter()
        .map(|v| v.replica.as_str())
        .filter(|r| *r != me)
        .collect();
    // A replica that lists other endpoints but not this one has not synced since it was
    // made: it is waited for as one that still routes to the old backend.
    replicas.into_iter().all(|r| {
        views
            .iter()
            .find(|v| v.replica == r && v.view.endpoint == endpoint)
            .is_some_and(|v| v.view.workflow_id == Some(new) && v.view.old_in_flight == 0)
    })
}

/// The persistent endpoints whose takeover still lets requests on the old backend finish at
/// `now`: DRAINING, before its deadline. On any other, what an old backend still runs is
/// cut.
pub fn draining(
    endpoints: &[EndpointRow],
    takeovers: &[TakeoverRow],
    now: Millis,
) -> std::collections::BTreeSet<String> {
    takeovers
        .iter()
        .filter(|t| t.phase == Phase::Draining)
        .filter(|t| {
            let timeout = endpoints
                .iter()
                .find(|e| e.name == t.endpoint)
                .map_or(0, |e| e.drain_timeout_ms);
            t.switched_at.is_none_or(|s| now - s < timeout)
        })
        .map(|t| t.endpoint.clone())
        .collect()
}

/// One controller pass over open takeovers. `routes` answers this process's proxy's side:
/// which backend an endpoint has now, whether an old one has drained here; the other
/// replicas' proxies answer through the store (their views, published by each replica's
/// route sync), `me` being this replica's name there. Returns the endpoints as they are after
/// the pass.
pub async fn drive(
    store: &dyn Store,
    wake: &Notify,
    routes: &dyn crate::routes::Routes,
    me: &str,
    in_play: InPlay<'_>,
    fence: Option<gantry_store::Fence>,
) -> anyhow::Result<Vec<EndpointRow>> {
    // The controller's steps carry its lease's fence.
    let fenced = |changes| crate::lease::fenced(fence.clone(), changes);
    let now = now_ms();
    let mut endpoints = store.endpoints().await?;
    // A takeover belongs to an endpoint: with none, there is nothing to read.
    let takeovers = if endpoints.is_empty() {
        vec![]
    } else {
        store.takeovers(None, true).await?
    };
    let mut changed = false;
    // Read once a pass, and only while some takeover drains.
    let mut views: Option<Vec<ProxyViewRow>> = None;
    for t in takeovers {
        let Some(e) = endpoints.iter().find(|e| e.name == t.endpoint) else {
            continue;
        };
        let phase = t.phase;
        let new = in_play
            .service(store, t.to_workflow, &t.to_service, t.port)
            .await?;
        let new_state = match (new.status, new.backend.is_some()) {
            (TaskStatus::Running, true) => NewService::Ready,
            (s, _) if s.is_terminal() => NewService::Gone,
            _ if new.workflow_ended => NewService::Gone,
            _ => NewService::Starting,
        };
        let old = t
            .from_workflow
            .filter(|w| e.workflow_id == Some(*w) || phase == Phase::Draining);
        let old_ended = match old {
            Some(w) => in_play.ended(store, w).await,
            None => true,
        };
        let deadline_passed = t.switched_at.is_some_and(|s| now - s >= e.drain_timeout_ms);
        let drained = phase == Phase::Draining
            && routes.drained(&e.name, t.from_workflow)
            && (t.from_workflow.is_none() || {
                if views.is_none() {
                    let since = now - crate::routes::VIEW_TTL.as_millis() as i64;
                    views = Some(store.proxy_views(since).await?);
                }
                let views = views.as_deref().unwrap_or_default();
                others_drained(views, &e.name, t.to_workflow, me)
            });
        let view = takeover::View {
            phase,
            mode: t.mode,
            needs_confirmation: e.confirm || t.channel == Channel::Mcp,
            confirmed: t.confirmed_by.is_some(),
            rejected: false,
            has_old: old.is_some(),
            old_ended,
            new: new_state,
            drained,
            drain_deadline_passed: deadline_passed,
        };
        let mut changes = vec![];
        for s in takeover::step(&view) {
            match s {
                Step::Enter(p, reason) => changes.push(EndpointChange::Phase {
                    id: t.id,
                    phase: p,
                    reason,
                    end: p.is_terminal(),
                }),
                Step::Switch => {
                    changes.push(EndpointChange::Switch { takeover: t.id });
                }
                Step::StopOld => {
                    if let Some(w) = t.from_workflow {
                        store
                            .request_stop(w, &format!("the takeover of endpoint {}", e.name), now)
                            .await?;
                    }
                }
                Step::StopNew => {
                    store
                        .request_stop(
                            t.to_workflow,
                            &format!("the takeover of endpoint {}", e.name),
                            now,
                        )
                        .await?;
                }
                Step::Cut => routes.cut(&e.name, t.from_workflow),
            }
        }
        if !changes.is_empty() {
            store.apply_endpoints(&fenced(changes), now).await?;
            wake.notify_one();
            changed = true;
        }
    }
    if changed {
        endpoints = store.endpoints().await?;
    }
    // An endpoint whose workflow has ended has no backend (and answers 503) until the next
    // takeover.
    let mut cleared = false;
    for e in &endpoints {
        let Some(w) = e.workflow_id else { continue };
        if in_play.ended(store, w).await {
            cleared = true;
            let clear = EndpointChange::Clear {
                endpoint: e.name.clone(),
                reason: format!("workflow {w} ended"),
            };
            store.apply_endpoints(&fenced(vec![clear]), now).await?;
        }
    }
    if cleared {
        endpoints = store.endpoints().await?;
    }
    Ok(endpoints)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_store::ProxyView;

    fn row(replica: &str, endpoint: &str, workflow: Option<Uuid>, old: u64) -> ProxyViewRow {
        ProxyViewRow {
            replica: replica.into(),
            view: ProxyView {
                endpoint: endpoint.into(),
                workflow_id: workflow,
                attempt_id: workflow.map(|_| Uuid::nil()),
                old_in_flight: old,
            },
            seen_at: 0,
        }
    }

    #[test]
    fn a_replica_with_requests_left_on_the_old_backend_holds_the_drain() {
        let (old, new) = (Uuid::new_v4(), Uuid::new_v4());
        let drained = |views: &[ProxyViewRow]| others_drained(views, "chat", new, "me");
        assert!(drained(&[]), "no other replica seen");
        assert!(drained(&[
            row("b", "chat", Some(new), 0),
            row("c", "chat", Some(new), 0),
            row("c", "other", Some(old), 3),
        ]));
        // One replica still has a request running on the old backend.
        assert!(!drained(&[
            row("b", "chat", Some(new), 0),
            row("c", "chat", Some(new), 1),
        ]));
        // One has not switched yet: new requests through it still go to the old backend.
        assert!(!drained(&[row("b", "chat", Some(old), 0)]));
        assert!(!drained(&[row("b", "chat", None, 0)]), "not on the new one");
        // One that has not synced since the endpoint was made is waited for.
        assert!(!drained(&[row("b", "other", Some(old), 0)]));
        // This replica answers through its own proxy: its published view, perhaps a tick
        // old, does not hold the drain.
        assert!(drained(&[row("me", "chat", Some(new), 4)]));
    }

    #[test]
    fn only_a_takeover_draining_before_its_deadline_spares_the_old_backend() {
        let endpoint = |name: &str| EndpointRow {
            name: name.into(),
            owner: "alice".into(),
            group: "physics".into(),
            scope: EndpointScope::Public,
            mode: takeover::Mode::WhenReady,
            drain_timeout_ms: 1000,
            confirm: false,
            created_at: 0,
            workflow_id: None,
            service: None,
            port: None,
            since: None,
        };
        let takeover = |name: &str, phase: Phase| TakeoverRow {
            id: Uuid::new_v4(),
            endpoint: name.into(),
            from_workflow: Some(Uuid::new_v4()),
            to_workflow: Uuid::new_v4(),
            to_service: "llm".into(),
            port: 8080,
            requested_by: "alice".into(),
            channel: Channel::Cli,
            mode: takeover::Mode::WhenReady,
            phase,
            reason: None,
            confirmed_by: None,
            confirmed_via: None,
            created_at: 0,
            updated_at: 0,
            switched_at: Some(100),
            ended_at: None,
        };
        let endpoints = [endpoint("a"), endpoint("b"), endpoint("c")];
        let takeovers = [
            takeover("a", Phase::Draining),
            takeover("b", Phase::WaitingReady),
        ];
        let at = |now| draining(&endpoints, &takeovers, now);
        assert_eq!(at(500).into_iter().collect::<Vec<_>>(), ["a"]);
        assert!(at(1100).is_empty(), "past its deadline");
    }
}
