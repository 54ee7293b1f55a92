//! The controller: the one plan applier. Each tick gathers a snapshot from the store, asks `gantry-core` what
//! to do (the workflow state machine, then the scheduler), commits the result as one
//! transaction, and only then tells agents. A crash between commit and send loses nothing: a
//! reconnecting agent receives its full desired set.
//!
//! A tick's cost follows the work in play, not the workflows' size: the store hands over only
//! the tasks that have not ended (the rest as counts per job), and what never changes once
//! written (plans, assignments) is parsed once and kept in [`Cache`].

mod route_sync;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gantry_api::agent::{
    Assignment, Capacity, ChoreKind, GangMember, MultinodeSpec, ServerMessage,
};
use gantry_api::{EndCause, NodeState, TaskStatus};
use gantry_core::engine::{self, Action};
use gantry_core::scheduler::{self, NodeId, NodeView, Res, TaskRequest};
use gantry_store::{ActiveWorkflow, Change, ChoreRow, NewEvent, Store, TaskRow};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::agents::Ends;
use crate::cache::Cache;
use crate::clock::now_ms;
use crate::lease::{self, Keep, Lease};
use crate::link::AgentLink;
use crate::placement::request_of;
use crate::plan::{self, WorkflowPlan};
use crate::routes::Gateway;
use crate::ServerConfig;

/// What the controller may use: the store, the agents (through the link), its own cache,
/// the proxy's routes, the attempt-end applier, the sealing key (an assignment's secrets are
/// opened as it is sent), its wake notifier and the configuration. No hold lock, no metrics,
/// no agents' news: those belong to others.
pub struct Ctx {
    pub store: Arc<dyn Store>,
    pub link: Arc<dyn AgentLink>,
    pub wake: Arc<Notify>,
    pub cache: Arc<Cache>,
    pub gateway: Arc<Gateway>,
    pub ends: Arc<Ends>,
    pub secret_key: Arc<[u8; 32]>,
    pub config: Arc<ServerConfig>,
    /// When the tick last looked for lost nodes (ms): a scan of the fleet, so at most once a
    /// heartbeat interval (at most a second), not on every wake.
    pub liveness_at: AtomicI64,
    /// The fleet as last read, with its capacities parsed: read again only when the store's
    /// `nodes_version` moved (10,000 rows were most of a placing tick's cost).
    pub fleet: std::sync::Mutex<Option<Arc<Fleet>>>,
    /// How many waiting tasks of each job the next snapshot lists: the cores the fleet had
    /// free at the last placement, within [`PENDING_WINDOW`, `MAX_WINDOW`]. A big array on
    /// an empty fleet is placed hundreds a tick, not 64; on a full fleet a tick reads 64.
    pub window: std::sync::atomic::AtomicUsize,
    /// The controller's lease: ticks run while this process holds it, and their plans carry
    /// its fence.
    pub lease: Arc<Lease>,
}

/// The widest snapshot window: a tick places at most this many of a job's tasks (one
/// transaction that long holds the store's writer for a while).
const MAX_WINDOW: usize = 1024;
// A big array keeps this many waiting tasks with rows: a window never wants more.
const _: () = assert!(MAX_WINDOW <= gantry_store::BORN_AHEAD);

/// The nodes' rows as of `version`, and each one's capacity.
pub struct Fleet {
    version: i64,
    nodes: Vec<gantry_store::NodeRow>,
    capacity: Vec<Res>,
}

/// The fleet, read again only if a node changed since the copy was made. The version is read
/// first: a change that lands between the two reads moves it again, so the copy is read anew
/// at the next tick (and the store's guard refuses a placement on a node no longer READY).
async fn fleet(cx: &Ctx) -> anyhow::Result<Arc<Fleet>> {
    let version = cx.store.nodes_version().await?;
    let kept = cx.fleet.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(f) = kept.filter(|f| f.version == version) {
        return Ok(f);
    }
    let nodes = cx.store.nodes().await?;
    let capacity = nodes
        .iter()
        .map(|n| capacity_res(&serde_json::from_str(&n.capacity).unwrap_or_default()))
        .collect();
    let f = Arc::new(Fleet {
        version,
        nodes,
        capacity,
    });
    *cx.fleet.lock().unwrap_or_else(|e| e.into_inner()) = Some(f.clone());
    Ok(f)
}
use crate::views::{task_label, view_of};

pub fn spawn(cx: Arc<Ctx>) {
    // Other servers' announcements wake this one's controller while it leads (a standby's own
    // wakes are announced, not taken).
    let heard = cx.clone();
    tokio::spawn(async move {
        match heard.store.announcements().await {
            Ok(Some(mut rx)) => {
                while rx.recv().await.is_some() {
                    if heard.lease.held() {
                        heard.wake.notify_one();
                    }
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("listening for other servers' changes: {e}"),
        }
    });
    tokio::spawn(async move {
        // How busy the controller is, for `GANTRY_LOG=gantry_server=debug`: ticks and their
        // time, every ten seconds.
        let (mut ticks, mut busy, mut since) = (0u32, Duration::ZERO, std::time::Instant::now());
        loop {
            let t0 = std::time::Instant::now();
            let led = cx.lease.held();
            let keep = cx.lease.keep(cx.store.as_ref(), now_ms()).await;
            if keep == Keep::Standby {
                if led {
                    // Its agents reconnect, to the server that runs the controller now.
                    cx.link.drop_all();
                }
                // Another server runs the controller; this one serves the API and the
                // endpoint proxy, whose routes it keeps in line with the store.
                if let Err(e) = follow(&cx).await {
                    tracing::warn!("following the store: {e:#}");
                }
                // What would wake a controller here (a submit, a stop) is news for the
                // leader's: it is told through the store.
                tokio::select! {
                    _ = cx.wake.notified() => {
                        if let Err(e) = cx.store.announce_change().await {
                            tracing::warn!("telling the controller's server of a change: {e}");
                        }
                    }
                    _ = tokio::time::sleep(lease::RENEW) => {}
                }
                continue;
            }
            if keep == Keep::Taken {
                // Whatever was kept as a standby (or before a lease was lost) is stale.
                *cx.fleet.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
            if let Err(e) = tick(&cx).await {
                match lease::deposed(&e) {
                    Some(why) => {
                        cx.lease.deposed(why);
                        cx.link.drop_all();
                    }
                    None => tracing::warn!("controller: {e:#}"),
                }
            }
            ticks += 1;
            busy += t0.elapsed();
            if since.elapsed() >= Duration::from_secs(10) {
                tracing::debug!(ticks, busy_ms = busy.as_millis() as u64, "controller load");
                (ticks, busy, since) = (0, Duration::ZERO, std::time::Instant::now());
            }
            // Woken by any change; the timer only serves timeouts and lost heartbeats.
            tokio::select! {
                _ = cx.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    });
}

/// A standby's pass: the proxy's routes from the store, as the leader's ticks change it (the
/// snapshot with no waiting task listed: routes need only what runs).
async fn follow(cx: &Ctx) -> anyhow::Result<()> {
    let active = cx.store.active_with(1).await?;
    cx.cache.retain(&active);
    let endpoints = cx.store.endpoints().await?;
    // Read after the endpoints: a switch and its takeover's DRAINING are one commit, so an
    // endpoint seen switched is seen draining (or past it), never not yet.
    let takeovers = match endpoints.is_empty() {
        true => vec![],
        false => cx.store.takeovers(None, true).await?,
    };
    let draining = crate::endpoints::draining(&endpoints, &takeovers, now_ms());
    let in_play = crate::endpoints::InPlay {
        active: &active,
        ended: &[],
    };
    route_sync::sync_from(cx, &endpoints, in_play, Some(&draining)).await
}

/// An egress step that will never run (a step before it failed, or the workflow was stopped)
/// says so in its own event, naming what it would have uploaded: nothing left the volume.
fn egress_skipped(workflow: Uuid, plan: &WorkflowPlan, job: &str, reason: &str) -> Option<Change> {
    let spec = plan.job(job)?.transfer.as_ref()?;
    if spec.direction != "egress" {
        return None;
    }
    let items: Vec<String> = spec
        .items
        .iter()
        .map(|i| format!("{} -> {}", i.source, i.destination))
        .collect();
    Some(Change::Event(NewEvent {
        workflow_id: Some(workflow),
        node: None,
        task: Some(job.to_string()),
        kind: "transfer.skipped".into(),
        message: format!("not uploaded ({reason}): {}", items.join(", ")),
    }))
}

fn capacity_res(c: &Capacity) -> Res {
    Res {
        millicpus: c.cpus as u64 * 1000,
        memory_bytes: c.memory_bytes,
        devices: c.devices.clone(),
    }
}

fn add_res(used: &mut Res, r: &Res) {
    used.millicpus += r.millicpus;
    used.memory_bytes += r.memory_bytes;
    for (d, n) in &r.devices {
        *used.devices.entry(d.clone()).or_insert(0) += n;
    }
}

struct Placing<'a> {
    aw: &'a ActiveWorkflow,
    plan: &'a WorkflowPlan,
    task: &'a TaskRow,
    /// A gang's members after the head (`task`), in index order.
    others: Vec<&'a TaskRow>,
}

/// What every member of a gang is told of the others (its own `index` is filled in per
/// member): hostnames `<job>-<i>`, their nodes' addresses and exec services, their attempts.
fn gang_spec(
    p: &Placing,
    tasks: &[&TaskRow],
    nodes: &[&NodeId],
    ids: &[Uuid],
    rows: &HashMap<&str, &gantry_store::NodeRow>,
) -> MultinodeSpec {
    let jp = p.plan.job(&p.task.job);
    let m = jp.and_then(|j| j.multinode.as_ref());
    let cores = jp.map_or(1, |j| j.cores).max(1);
    MultinodeSpec {
        implementation: m.map_or("generic".into(), |m| m.implementation.clone()),
        index: 0,
        slots: m.and_then(|m| m.procs_per_node).unwrap_or(cores).max(1),
        members: tasks
            .iter()
            .zip(nodes)
            .zip(ids)
            .map(|((t, n), id)| {
                let row = rows.get(n.as_str());
                GangMember {
                    hostname: format!("{}-{}", t.job, t.index.unwrap_or(0)),
                    address: row.and_then(|r| r.address.clone()).unwrap_or_default(),
                    exec_addr: row.and_then(|r| r.exec_addr.clone()).unwrap_or_default(),
                    attempt_id: *id,
                }
            })
            .collect(),
        token: gang_token(),
    }
}

/// A gang's shared secret for one run: 32 random bytes, hex.
fn gang_token() -> String {
    let mut b = [0u8; 32];
    // Without randomness there is no safe token: an empty one is refused by every agent.
    if getrandom::fill(&mut b).is_err() {
        return String::new();
    }
    hex::encode(b)
}

pub(crate) async fn tick(cx: &Ctx) -> anyhow::Result<()> {
    // The fleet is read whole only when something is to be placed (below): an idle tick of
    // 10,000 nodes reads only the silent ones.
    lose_silent_nodes(cx, now_ms()).await?;

    let window = cx.window.load(Ordering::Relaxed);
    let active = cx.store.active_with(window).await?;
    // Read after the snapshot: a placement is stamped no earlier than the ends it saw, so
    // attempts' times never show more in flight than there were.
    let now = now_ms();
    cx.cache.retain(&active);
    let mut plans = Vec::with_capacity(active.len());
    for aw in &active {
        plans.push(cx.cache.plan(&aw.workflow)?);
    }

    let mut changes: Vec<Change> = Vec::new();
    let mut sends: Vec<(String, ServerMessage)> = Vec::new();
    // (node, assignment, workflow owner, group): sent after the commit, with secrets filled in.
    let mut assigns: Vec<(String, Assignment, String, String)> = Vec::new();
    let mut placing: Vec<Placing> = Vec::new();
    let mut finished: Vec<Uuid> = Vec::new();
    let grace = cx.config.stop_grace.as_millis() as u64;
    // Few or none: holds are read whole, nodes are not.
    let held = crate::holds::active_by_node(cx.store.as_ref()).await?;
    let mut stopping: std::collections::HashSet<Uuid> = std::collections::HashSet::new();
    // Jobs with waiting tasks the snapshot did not list (see `PENDING_WINDOW`), and how
    // many it did: once those are all placed, the next ones are read at once.
    let mut windowed: HashMap<(Uuid, &str), usize> = HashMap::new();
    let mut window_placed = false;

    for (aw, plan) in active.iter().zip(&plans) {
        let tasks: HashMap<Uuid, &TaskRow> = aw.tasks.iter().map(|t| (t.id, t)).collect();
        let view = view_of(aw, plan);
        // The view has a job for each of the plan's, in its order; keyed by the plan's name,
        // which outlives the view.
        for (jp, j) in plan.jobs.iter().zip(&view.jobs) {
            if j.pending_unlisted > 0 {
                let listed = j.tasks.iter().filter(|t| t.status == TaskStatus::Pending);
                windowed.insert((aw.workflow.id, jp.name.as_str()), listed.count());
            }
        }
        for action in engine::reconcile(&view, now) {
            match action {
                Action::Place { task } => {
                    let Some(t) = tasks.get(&task) else { continue };
                    if plan.job(&t.job).is_none() {
                        continue;
                    }
                    placing.push(Placing {
                        aw,
                        plan,
                        task: t,
                        others: vec![],
                    });
                }
                Action::PlaceGang { tasks: members } => {
                    let rows: Option<Vec<&TaskRow>> =
                        members.iter().map(|id| tasks.get(id).copied()).collect();
                    let Some(rows) = rows.filter(|r| !r.is_empty()) else {
                        continue;
                    };
                    if plan.job(&rows[0].job).is_none() {
                        continue;
                    }
                    placing.push(Placing {
                        aw,
                        plan,
                        task: rows[0],
                        others: rows[1..].to_vec(),
                    });
                }
                Action::EndTask {
                    task,
                    status,
                    reason,
                } => {
                    if let Some(t) = tasks.get(&task) {
                        changes.extend(egress_skipped(aw.workflow.id, plan, &t.job, &reason));
                    }
                    changes.push(Change::EndTask {
                        task_id: task,
                        status,
                        reason,
                    })
                }
                Action::EndPending {
                    job,
                    status,
                    reason,
                } => {
                    changes.extend(egress_skipped(aw.workflow.id, plan, &job, &reason));
                    changes.push(Change::EndPending {
                        workflow_id: aw.workflow.id,
                        job,
                        status,
                        reason,
                    })
                }
                Action::StopAttempt { attempt, cause } => {
                    stopping.insert(attempt);
                    if let Some(a) = aw.live.iter().find(|a| a.id == attempt) {
                        stop(&mut changes, &mut sends, &a.node, attempt, grace, cause);
                    }
                }
                Action::SetWorkflow { status, reason } => {
                    if status.is_terminal() {
                        finished.push(aw.workflow.id);
                    }
                    changes.push(Change::SetWorkflow {
                        workflow_id: aw.workflow.id,
                        status,
                        reason,
                    });
                }
            }
        }
    }

    // Evict holds take running work off their nodes, through the same stop path.
    for aw in &active {
        for a in &aw.live {
            let Some(h) = held
                .get(&a.node)
                .and_then(|hs| hs.iter().find(|h| h.kind == gantry_store::HoldKind::Evict))
            else {
                continue;
            };
            if a.stop_sent.is_some() || !stopping.insert(a.id) {
                continue;
            }
            let label = aw.tasks.iter().find(|t| t.id == a.task_id).map(task_label);
            changes.push(Change::Event(gantry_store::NewEvent {
                workflow_id: Some(a.workflow_id),
                node: Some(a.node.clone()),
                task: label,
                kind: "task.evicting".into(),
                message: format!("evicting from {}: {}", a.node, crate::holds::describe(h)),
            }));
            stop(
                &mut changes,
                &mut sends,
                &a.node,
                a.id,
                grace,
                EndCause::Evicted,
            );
        }
    }

    if !placing.is_empty() {
        // Read only when something is to be placed: most ticks place nothing.
        let settings = crate::placement::PlacementSettings::read(cx.store.as_ref()).await?;
        let fleet = fleet(cx).await?;
        let nodes = &fleet.nodes;
        let requests: Vec<TaskRequest<usize>> = placing
            .iter()
            .enumerate()
            .filter_map(|(key, p)| {
                let jp = p.plan.job(&p.task.job)?;
                let members = 1 + p.others.len() as u32;
                Some(request_of(key, p.plan, jp, members, &settings))
            })
            .collect();
        let mut used: HashMap<&str, (Res, u32, bool)> = HashMap::new();
        for aw in &active {
            for a in &aw.live {
                let e = used.entry(a.node.as_str()).or_default();
                if let Some(u) = cx.cache.usage(a) {
                    add_res(&mut e.0, &u.res);
                    e.2 |= u.exclusive;
                }
                e.1 += 1;
            }
        }
        // Host ports are a node's: those its host-network containers bind now.
        let mut ports: HashMap<&str, std::collections::BTreeSet<u16>> = HashMap::new();
        for (aw, plan) in active.iter().zip(&plans) {
            for a in &aw.live {
                let Some(t) = aw.tasks.iter().find(|t| t.id == a.task_id) else {
                    continue;
                };
                if let Some(jp) = plan.job(&t.job) {
                    ports
                        .entry(a.node.as_str())
                        .or_default()
                        .extend(jp.host_ports.iter().copied());
                }
            }
        }
        let views: Vec<NodeView> = nodes
            .iter()
            .zip(&fleet.capacity)
            .map(|(n, cap)| {
                let (u, running, excl) = used.remove(n.name.as_str()).unwrap_or_default();
                let connected = cx.link.is_connected(&n.name);
                let ready = n.state == NodeState::Ready;
                NodeView {
                    used: u,
                    schedulable: connected && ready,
                    unschedulable_reason: if !connected {
                        Some("agent not connected".into())
                    } else if !ready {
                        Some(match held.get(&n.name).and_then(|hs| hs.first()) {
                            Some(h) => {
                                format!(
                                    "{}: {}",
                                    n.state.as_str().to_lowercase(),
                                    crate::holds::describe(h)
                                )
                            }
                            None => n.state.as_str().to_lowercase(),
                        })
                    } else {
                        None
                    },
                    exclusive_taken: excl,
                    running,
                    labels: n.labels.clone(),
                    host_ports: ports.remove(n.name.as_str()).unwrap_or_default(),
                    // An agent that says no address or exec service (an older one) cannot
                    // run host-network containers or multinode members.
                    host_network: settings.host_network_allowed(&n.pool)
                        && n.address.is_some()
                        && n.exec_addr.is_some(),
                    ..NodeView::new(n.name.clone(), n.pool.clone(), cap.clone())
                }
            })
            .collect();
        let free_cores: u64 = views
            .iter()
            .filter(|v| v.schedulable)
            .map(|v| v.total.millicpus.saturating_sub(v.used.millicpus) / 1000)
            .sum();
        cx.window.store(
            (free_cores as usize).clamp(gantry_store::PENDING_WINDOW, MAX_WINDOW),
            Ordering::Relaxed,
        );
        let rows: HashMap<&str, &gantry_store::NodeRow> =
            nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let (public_url, registry_host) = (cx.config.url(), cx.config.registry_host());
        let site = plan::Site {
            public_url: &public_url,
            endpoint_domain: &cx.config.endpoint_domain,
            registry_host: &registry_host,
        };
        let plan = scheduler::schedule(&views, &requests);
        for placed in plan.placements {
            let p = &placing[placed.key];
            if let Some(left) = windowed.get_mut(&(p.aw.workflow.id, p.task.job.as_str())) {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    window_placed = true;
                }
            }
            // One attempt per member (a single container is a gang of one without a spec).
            let tasks: Vec<&TaskRow> = std::iter::once(p.task)
                .chain(p.others.iter().copied())
                .collect();
            let nodes: Vec<&NodeId> = placed.nodes().collect();
            let ids: Vec<Uuid> = tasks.iter().map(|_| Uuid::new_v4()).collect();
            // Only a multinode job's placement has other members; a one-node gang has none.
            let gang = p
                .plan
                .job(&p.task.job)
                .is_some_and(|j| j.multinode.is_some())
                .then(|| gang_spec(p, &tasks, &nodes, &ids, &rows));
            let services = service_addresses(p.aw, p.plan);
            let peers = crate::netpolicy::addresses(p.aw);
            for (i, ((task, node), attempt_id)) in tasks.iter().zip(&nodes).zip(&ids).enumerate() {
                let member = plan::Placed {
                    plan: p.plan,
                    workflow: p.aw.workflow.id,
                    group: &p.aw.workflow.group,
                    job: &task.job,
                    index: task.index,
                    attempts_made: task.attempts,
                    services: &services,
                    peers: &peers,
                };
                let pool = rows
                    .get(node.as_str())
                    .map_or("default", |n| n.pool.as_str());
                let mut asg = plan::assignment(&site, &member, *attempt_id, pool);
                if let Some(spec) = &gang {
                    asg.multinode = Some(MultinodeSpec {
                        index: i as u32,
                        ..spec.clone()
                    });
                }
                changes.push(Change::CreateAttempt {
                    attempt_id: *attempt_id,
                    task_id: task.id,
                    workflow_id: p.aw.workflow.id,
                    node: node.0.clone(),
                    assignment: serde_json::to_string(&asg)?,
                    need: crate::cache::Usage::of(&asg.resources).need(),
                });
                let wf = &p.aw.workflow;
                assigns.push((node.0.clone(), asg, wf.owner.clone(), wf.group.clone()));
            }
        }
        for u in plan.unplaced {
            let t = placing[u.key].task;
            if t.reason.as_deref() != Some(u.reason.as_str()) {
                changes.push(Change::TaskWaiting {
                    task_id: t.id,
                    reason: Some(u.reason),
                });
            }
        }
    }

    let mut changes = lease::fenced(cx.lease.fence(), changes);
    match cx.store.apply(&changes, now).await {
        // The snapshot this plan was decided on went stale (a task moved on, a node was held
        // or filled): nothing of it was applied. The rest of the plan (ends, stops, workflows'
        // moves) does not depend on the placements, so it is applied and sent without them;
        // the placements are decided again at the next tick, on the timer rather than at once,
        // so a store and a scheduler that disagree cannot spin.
        Err(gantry_store::StoreError::Refused(why)) => {
            tracing::info!("controller: placements refused, deciding them again: {why}");
            changes.retain(|c| !matches!(c, Change::CreateAttempt { .. }));
            cx.store.apply(&changes, now).await?;
            for (node, msg) in sends {
                cx.link.send(&node, msg);
            }
            return Ok(());
        }
        r => r?,
    }
    if window_placed {
        cx.wake.notify_one();
    }
    for (node, msg) in sends {
        cx.link.send(&node, msg);
    }
    for (node, mut asg, owner, group) in assigns {
        let outfit = crate::agents::outfit(
            cx.store.as_ref(),
            cx.config.files_dir(),
            &cx.secret_key,
            &mut asg,
            &owner,
            &group,
        );
        match outfit.await {
            Ok(()) => {
                cx.link.send(&node, ServerMessage::Assign(Box::new(asg)));
            }
            Err(e) => {
                let id = asg.attempt_id;
                cx.ends.end(id, None, EndCause::StartError, Some(e)).await?;
            }
        }
    }
    crate::netpolicy::sync(cx.link.as_ref(), &active, &plans);
    for &wf in &finished {
        schedule_cleanup(cx, wf, now).await?;
    }
    send_chores(cx).await?;
    let in_play = crate::endpoints::InPlay {
        active: &active,
        ended: &finished,
    };
    let endpoints = crate::endpoints::drive(
        cx.store.as_ref(),
        &cx.wake,
        cx.gateway.as_ref(),
        &cx.lease.holder,
        in_play,
        cx.lease.fence(),
    )
    .await?;
    route_sync::sync_from(cx, &endpoints, in_play, None).await?;
    Ok(())
}

/// Records that an attempt is being stopped and queues the stop for its node (sent after commit).
fn stop(
    changes: &mut Vec<Change>,
    sends: &mut Vec<(String, ServerMessage)>,
    node: &str,
    attempt_id: Uuid,
    grace_ms: u64,
    cause: EndCause,
) {
    changes.push(Change::StopSent { attempt_id, cause });
    sends.push((
        node.to_string(),
        ServerMessage::Stop {
            attempt_id,
            grace_ms,
            cause,
        },
    ));
}

/// (service job, address) of each of the workflow's services whose task has a live attempt
/// with an address: what its other containers reach it at.
fn service_addresses<'a>(
    aw: &'a ActiveWorkflow,
    plan: &'a WorkflowPlan,
) -> Vec<(&'a str, &'a str)> {
    plan.jobs
        .iter()
        .filter(|j| j.service.is_some())
        .filter_map(|j| {
            let task = aw.tasks.iter().find(|t| t.job == j.name)?;
            let live = aw.live.iter().find(|a| Some(a.id) == task.live_attempt)?;
            Some((j.name.as_str(), live.address.as_deref()?))
        })
        .collect()
}

/// A node whose agent has been silent past the heartbeat timeout is DOWN; its attempts end
/// NODE_LOST, and core decides whether each is retried elsewhere. Looked for at most once a
/// heartbeat interval (at most a second): a scan of the fleet, not for every wake.
async fn lose_silent_nodes(cx: &Ctx, now: i64) -> anyhow::Result<()> {
    let every = cx.config.heartbeat_interval.min(Duration::from_secs(1));
    if now - cx.liveness_at.load(Ordering::Relaxed) < every.as_millis() as i64 {
        return Ok(());
    }
    cx.liveness_at.store(now, Ordering::Relaxed);
    let timeout = cx.config.heartbeat_timeout.as_millis() as i64;
    // Nodes whose agents were connected to the previous leader get a heartbeat timeout from
    // this one's takeover to find it before any is lost.
    if now - cx.lease.taken_at() < timeout {
        return Ok(());
    }
    for n in cx.store.silent_nodes(now - timeout).await? {
        let why = format!("no heartbeat for {}s", timeout / 1000);
        cx.store
            .set_node_state(&n.name, NodeState::Down, &why, now)
            .await?;
        cx.link.drop_node(&n.name);
        for a in cx.store.live_attempts_on(&n.name).await? {
            cx.ends
                .end(
                    a.id,
                    None,
                    EndCause::NodeLost,
                    Some(format!("node {} lost: {why}", n.name)),
                )
                .await?;
        }
    }
    Ok(())
}

/// Ephemeral volumes are removed when their workflow ends, by a live agent of each pool the
/// workflow ran in; persistent ones stay.
async fn schedule_cleanup(cx: &Ctx, wf: Uuid, now: i64) -> anyhow::Result<()> {
    let row = cx.store.workflow(wf).await?;
    let plan: WorkflowPlan = serde_json::from_str(&row.plan)?;
    let ephemeral = plan.jobs.iter().any(|j| {
        j.mounts
            .iter()
            .any(|(_, v)| !plan.persistent.contains_key(v))
    });
    if !ephemeral {
        return Ok(());
    }
    let nodes = cx.store.nodes().await?;
    let pool_of: HashMap<&str, &str> = nodes
        .iter()
        .map(|n| (n.name.as_str(), n.pool.as_str()))
        .collect();
    let pools: BTreeSet<&str> = cx
        .store
        .attempt_nodes(wf)
        .await?
        .iter()
        .filter_map(|n| pool_of.get(n.as_str()).copied())
        .collect();
    for pool in pools {
        let kind = ChoreKind::RemoveVolume {
            path: format!("{pool}/ephemeral/{wf}"),
            root: None,
        };
        cx.store
            .add_chore(&ChoreRow {
                id: Uuid::new_v4(),
                pool: pool.to_string(),
                kind,
                created_at: now,
                sent_to: None,
            })
            .await?;
    }
    Ok(())
}

async fn send_chores(cx: &Ctx) -> anyhow::Result<()> {
    let chores = cx.store.pending_chores().await?;
    // Read only for a chore to send: most ticks have none.
    let nodes = match chores.is_empty() {
        true => vec![],
        false => cx.store.nodes().await?,
    };
    for c in chores {
        if c.sent_to
            .as_deref()
            .is_some_and(|n| cx.link.is_connected(n))
        {
            continue;
        }
        let Some(node) = nodes
            .iter()
            .find(|n| n.pool == c.pool && cx.link.is_connected(&n.name))
        else {
            continue;
        };
        if cx.link.send(
            &node.name,
            ServerMessage::Chore(gantry_api::agent::Chore {
                id: c.id,
                kind: c.kind,
            }),
        ) {
            cx.store.chore_sent(c.id, &node.name).await?;
        }
    }
    Ok(())
}
