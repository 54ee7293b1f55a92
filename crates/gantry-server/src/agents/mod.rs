//! The agent side of the server: one WebSocket per agent. Registration, heartbeats, status
//! reports and log chunks come in; assignments, stops and chores go out. Messages of one
//! connection are handled in order, so an attempt's log chunks are stored before its end.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures_util::{SinkExt, StreamExt};
use gantry_api::agent::{
    AgentMessage, Assignment, AttemptPhase, AttemptReport, ServerMessage, TransferEnded,
    TransferOutcome,
};
use gantry_api::EndCause;
use gantry_store::{Millis, NodeRegistration, Store};
use tokio::sync::mpsc;
use tokio::sync::Notify;
use uuid::Uuid;

mod hub;
mod reports;
mod seen;

pub use hub::Hub;
pub use reports::Ends;
pub use seen::{spawn_writer as spawn_seen_writer, Seen};

/// Messages read from one agent and not yet handled; beyond this its reading waits (an agent
/// sends a few per attempt, so only a flood of its own fills it).
const HANDLING_QUEUE: usize = 1024;

/// At most this many "running" reports share one transaction.
const RUNNING_PER_COMMIT: usize = 256;

/// The group that commits the agents' "running" reports (see [`Group`]).
pub fn running_reports(store: Arc<dyn Store>) -> Group<(Uuid, Millis), bool> {
    Group::new(RUNNING_PER_COMMIT, move |batch: Vec<(Uuid, Millis)>| {
        let store = store.clone();
        async move { Ok(store.attempts_running(&batch).await?) }
    })
}

use crate::auth::AgentCaller;
use crate::clock::now_ms;
use crate::group::Group;
use crate::holds::Holds;
use crate::link::AgentLink;
use crate::news::News;
use crate::ServerConfig;

/// What the agents' sessions may use: the store, the hub (their connections, and the link
/// they answer on), the attempt-end applier, the agents' news, hold decisions (a node joining
/// may make room under its pool's cap), the sealing key (an assignment's secrets are opened
/// as it is sent again), the subnet base and the configuration (heartbeats, stop grace).
pub struct Ctx {
    pub store: Arc<dyn Store>,
    pub hub: Arc<Hub>,
    pub wake: Arc<Notify>,
    pub news: Arc<News>,
    pub ends: Arc<Ends>,
    pub holds: Arc<Holds>,
    /// When each node was last heard from, until the next flush to the store.
    pub seen: Arc<Seen>,
    /// The agents' "running" reports, committed as a group.
    pub running: Group<(Uuid, Millis), bool>,
    pub secret_key: Arc<[u8; 32]>,
    /// The second octet of this cluster's container subnets.
    pub subnet_base: u8,
    pub config: Arc<ServerConfig>,
    /// Agents connect to the server that runs the controller (the one holding the lease):
    /// it alone sends them work.
    pub lease: Arc<crate::lease::Lease>,
}

pub async fn connect(
    Extension(cx): Extension<Arc<Ctx>>,
    AgentCaller(_): AgentCaller,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    if !cx.lease.held() {
        // The agent tries its next server URL (or the load balancer's next replica).
        let why = "this server is a standby replica: another runs the controller";
        return (axum::http::StatusCode::SERVICE_UNAVAILABLE, why).into_response();
    }
    let ws = match ws {
        Ok(ws) => ws,
        Err(e) => return e.into_response(),
    };
    // Small buffers: a connection mostly carries heartbeats, and there is one per node (the
    // default 128 KiB read buffer was most of an idle node's cost). Larger messages still
    // arrive whole, up to the limit.
    ws.max_message_size(16 << 20)
        .read_buffer_size(8 << 10)
        .write_buffer_size(8 << 10)
        .on_upgrade(move |socket| async move {
            if let Err(e) = session(&cx, socket).await {
                tracing::warn!("agent session ended: {e:#}");
            }
        })
}

async fn recv(socket: &mut WebSocket) -> anyhow::Result<Option<AgentMessage>> {
    while let Some(msg) = socket.next().await {
        match msg? {
            Message::Text(t) => return Ok(Some(serde_json::from_str(t.as_str())?)),
            Message::Close(_) => return Ok(None),
            _ => continue,
        }
    }
    Ok(None)
}

async fn session(cx: &Ctx, mut socket: WebSocket) -> anyhow::Result<()> {
    let Some(AgentMessage::Hello {
        name,
        pool,
        capacity,
        version,
        metrics_addr,
        node_exporter,
        attempts: _,
        address,
        exec_addr,
        labels,
    }) = recv(&mut socket).await?
    else {
        anyhow::bail!("the first message must be hello");
    };
    let node = cx
        .store
        .register_node(
            &NodeRegistration {
                name: name.clone(),
                pool,
                capacity: serde_json::to_string(&capacity)?,
                version,
                metrics_addr,
                node_exporter,
                address,
                exec_addr,
                labels,
            },
            now_ms(),
        )
        .await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let conn_id = Uuid::new_v4();
    // The desired set goes first, before anything the controller sends on the new channel.
    let mut desired: Vec<Assignment> = Vec::new();
    // Stops the controller sent while no connection of the node's was there to take them (a
    // workflow stopped while its agent restarted) go again right after the desired set.
    let mut stops: Vec<ServerMessage> = Vec::new();
    let mut told: HashSet<Uuid> = HashSet::new();
    let mut stopped: HashSet<Uuid> = HashSet::new();
    for a in cx.store.live_attempts_on(&name).await? {
        told.insert(a.id);
        if let Some(stop) = stop_of(cx, &a) {
            stopped.insert(a.id);
            stops.push(stop);
        }
        if let Some(asg) = assignment_of(cx, &a).await? {
            desired.push(asg);
        }
    }
    tx.send(ServerMessage::Welcome {
        node_id: node.id,
        heartbeat_interval_ms: cx.config.heartbeat_interval.as_millis() as u64,
        subnet: Some(subnet_of(cx.subnet_base, node.seq)),
        transfer_events: true,
        probe_results: true,
        ping_heartbeats: true,
    })?;
    tx.send(ServerMessage::Desired { attempts: desired })?;
    for stop in stops {
        tx.send(stop)?;
    }
    cx.hub.insert(&name, conn_id, tx);
    // What the controller placed or stopped on this node between the read above and the
    // insert went to no connection (and the store already says it was sent): tell it now.
    // Anything the controller sends from here on reaches this connection too; the agent
    // ignores an assignment it knows, and a second stop of an attempt changes nothing.
    for a in cx.store.live_attempts_on(&name).await? {
        if !told.contains(&a.id) {
            if let Some(asg) = assignment_of(cx, &a).await? {
                cx.hub.send(&name, ServerMessage::Assign(Box::new(asg)));
            }
        }
        if !stopped.contains(&a.id) {
            if let Some(stop) = stop_of(cx, &a) {
                cx.hub.send(&name, stop);
            }
        }
    }
    // A node joining may make room under its pool's hold cap.
    if let Err(e) = crate::holds::promote_all(&cx.holds).await {
        tracing::warn!("promoting deferred holds: {e}");
    }
    tracing::info!(node = %name, "agent connected");
    cx.wake.notify_one();

    let (mut sink, mut stream) = socket.split();
    let mut writer = tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            let text = match serde_json::to_string(&msg) {
                Ok(t) => t,
                Err(_) => continue,
            };
            if sink.send(Message::Text(text.into())).await.is_err() {
                break;
            }
        }
        // The hub let go of this connection (the controller found the node silent and marked
        // it DOWN), or writing failed: close it, so that the agent reconnects and registers
        // again instead of talking to a server that no longer counts it.
        let _ = sink.close().await;
    });

    // Reading and handling are apart: the reader notes every frame and answers pings as they
    // arrive, while the messages are handled in order behind it. A report waits for its
    // commit (behind a long placement, say) without holding up the connection's pings and
    // heartbeats, which once waited seconds behind it.
    // The queue holds the frames' text, parsed by the handler: a slot is a pointer's size
    // (tokio allocates a queue's slots 32 at a time; 32 parsed messages were 10 KB a node).
    let (work, mut queued) = mpsc::channel::<axum::extract::ws::Utf8Bytes>(HANDLING_QUEUE);
    let reading = async {
        loop {
            let msg = tokio::select! {
                m = stream.next() => m,
                _ = &mut writer => break,
            };
            let Some(msg) = msg else { break };
            let msg = msg?;
            // Any frame is a sign of life, the agent's heartbeat ping included (its pong is
            // written by the WebSocket layer as it reads the ping, behind nothing we queue).
            cx.seen.note(&name, now_ms());
            let text = match msg {
                Message::Text(t) => t,
                Message::Close(_) => break,
                _ => continue,
            };
            if work.send(text).await.is_err() {
                break;
            }
        }
        // What was read is still handled: the queue drains, then the handler ends.
        drop(work);
        anyhow::Ok(())
    };
    let handling = async {
        while let Some(text) = queued.recv().await {
            let msg: AgentMessage = serde_json::from_str(text.as_str())?;
            handle(cx, &name, msg).await?;
        }
        anyhow::Ok(())
    };
    let result = {
        tokio::pin!(reading, handling);
        tokio::select! {
            r = &mut handling => r,
            r = &mut reading => match r {
                Ok(()) => handling.await,
                Err(e) => Err(e),
            },
        }
    };
    writer.abort();
    if cx.hub.remove(&name, conn_id) {
        cx.store.node_disconnected(&name, now_ms()).await?;
        tracing::info!(node = %name, "agent disconnected");
    }
    result
}

/// The stop the controller sent for a live attempt, if it did.
fn stop_of(cx: &Ctx, a: &gantry_store::AttemptRow) -> Option<ServerMessage> {
    a.stop_sent.map(|cause| ServerMessage::Stop {
        attempt_id: a.id,
        grace_ms: cx.config.stop_grace.as_millis() as u64,
        cause,
    })
}

/// A live attempt's assignment as its agent is given it: with the cached build layers, the
/// network's peers and its secrets filled in. `None` when it cannot be: one whose assignment
/// does not parse is left out, one whose secrets cannot be resolved ends (`START_ERROR`).
async fn assignment_of(
    cx: &Ctx,
    a: &gantry_store::AttemptRow,
) -> anyhow::Result<Option<Assignment>> {
    let Ok(mut asg) = serde_json::from_str::<Assignment>(&a.assignment) else {
        return Ok(None);
    };
    let wf = cx.store.workflow(a.workflow_id).await?;
    let store = cx.store.as_ref();
    match outfit(
        store,
        cx.config.files_dir(),
        &cx.secret_key,
        &mut asg,
        &wf.owner,
        &wf.group,
    )
    .await
    {
        Ok(()) => Ok(Some(asg)),
        Err(e) => {
            cx.ends
                .end(a.id, None, EndCause::StartError, Some(e))
                .await?;
            Ok(None)
        }
    }
}

/// Completes an assignment as it goes to its agent (placed by the controller, or sent again
/// to a reconnecting agent): the build layers the object cache holds now, the egress setting
/// as it is now, and its secrets opened. Err: why its secrets cannot be resolved (the attempt
/// then ends `START_ERROR`).
pub async fn outfit(
    store: &dyn Store,
    data_dir: &Path,
    sealing_key: &[u8; 32],
    asg: &mut Assignment,
    owner: &str,
    group: &str,
) -> Result<(), String> {
    crate::builds::fill_cached(store, data_dir, asg).await;
    crate::netpolicy::fill(store, asg).await;
    crate::secrets::resolve(store, sealing_key, asg, owner, group).await
}

async fn handle(cx: &Ctx, node: &str, msg: AgentMessage) -> anyhow::Result<()> {
    match msg {
        AgentMessage::Hello { .. } => anyhow::bail!("hello sent twice"),
        // Noted with every frame, as it was read.
        AgentMessage::Heartbeat => {}
        AgentMessage::Status(report) => status(cx, node, report).await?,
        AgentMessage::Log(chunk) => {
            let (stdout, stderr) =
                crate::logs::append(cx.store.as_ref(), cx.config.files_dir(), &chunk).await?;
            cx.hub.send(
                node,
                ServerMessage::LogAck {
                    attempt_id: chunk.attempt_id,
                    stdout,
                    stderr,
                },
            );
        }
        AgentMessage::ChoreDone { id, error } => {
            cx.store.chore_done(id, error.as_deref(), now_ms()).await?;
        }
        AgentMessage::TransferEnded(t) => transfer_ended(cx, node, t).await?,
        AgentMessage::TransferProgress {
            attempt_id,
            progress,
        } => {
            let a = cx.store.attempt(attempt_id).await;
            if a.is_ok_and(|a| a.node == node && a.ended_at.is_none()) {
                cx.news.transfers().insert(attempt_id, progress);
            }
        }
        AgentMessage::ProbeFailed {
            attempt_id,
            why,
            count,
        } => probe_failed(cx, node, attempt_id, why, count).await?,
    }
    Ok(())
}

/// Keeps a service's latest failed readiness check for its task's reason, and records an event
/// when the outcome changes (not for every check: a probe failing each second for an hour is
/// one event, not 3,600).
async fn probe_failed(
    cx: &Ctx,
    node: &str,
    attempt_id: Uuid,
    why: String,
    count: u32,
) -> anyhow::Result<()> {
    let attempt = match cx.store.attempt(attempt_id).await {
        Ok(a) if a.node == node && a.ended_at.is_none() => a,
        Ok(_) | Err(gantry_store::StoreError::NotFound) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let step = serde_json::from_str::<Assignment>(&attempt.assignment)
        .map(|a| a.task)
        .unwrap_or_default();
    let failure = crate::news::ProbeFailure {
        workflow: attempt.workflow_id,
        service: step.clone(),
        why,
        count: count.max(1),
    };
    let new = {
        let mut all = cx.news.probes();
        let new = all.get(&attempt_id).is_none_or(|f| f.why != failure.why);
        all.insert(attempt_id, failure.clone());
        new
    };
    if new {
        let event = gantry_store::NewEvent {
            workflow_id: Some(attempt.workflow_id),
            node: Some(node.to_string()),
            task: Some(step),
            kind: "probe.failed".into(),
            message: format!("readiness probe: {} (not ready yet)", failure.why),
        };
        cx.store.record_event(&event, now_ms()).await?;
    }
    Ok(())
}

/// Records a transfer's end as an event of its workflow, naming the step (`ingress:VOLUME`),
/// the source and the destination.
async fn transfer_ended(cx: &Ctx, node: &str, t: TransferEnded) -> anyhow::Result<()> {
    let attempt = match cx.store.attempt(t.attempt_id).await {
        Ok(a) if a.node == node => a,
        // Not this node's (or no longer known): nothing to record against.
        Ok(_) | Err(gantry_store::StoreError::NotFound) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let step = serde_json::from_str::<Assignment>(&attempt.assignment)
        .map(|a| a.task)
        .ok();
    let what = format!("{} -> {}", t.source, t.destination);
    let (kind, message) = match t.outcome {
        TransferOutcome::Done { bytes, ms } => (
            "transfer.done",
            format!("{what}: {bytes} bytes in {:.2} s", ms as f64 / 1000.0),
        ),
        TransferOutcome::Failed { message } => ("transfer.failed", format!("{what}: {message}")),
    };
    let event = gantry_store::NewEvent {
        workflow_id: Some(attempt.workflow_id),
        node: Some(node.to_string()),
        task: step,
        kind: kind.into(),
        message,
    };
    cx.store.record_event(&event, now_ms()).await?;
    Ok(())
}

async fn status(cx: &Ctx, node: &str, report: AttemptReport) -> anyhow::Result<()> {
    let id = report.attempt_id;
    let attempt = match cx.store.attempt(id).await {
        Ok(a) => a,
        Err(gantry_store::StoreError::NotFound) => {
            // Not ours (a database restored from backup?): the agent may drop it.
            cx.hub.send(node, ServerMessage::Forget { attempt_id: id });
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    if attempt.node != node {
        anyhow::bail!(
            "node {node} reported attempt {id}, which belongs to {}",
            attempt.node
        );
    }
    let (exit_code, cause, reason) = match report.phase {
        AttemptPhase::Preparing => return Ok(()),
        AttemptPhase::Running { address } => {
            cx.news.probes().remove(&id);
            let networked = address.is_some();
            if let Some(addr) = address {
                cx.store.set_attempt_address(id, &addr).await?;
            }
            // Only a service's start can change a decision: jobs that wait for it to run, its
            // routes, a takeover. A job's start changes none (its timeout is served by the
            // controller's timer), so it costs no tick: the next end report's tick sees it.
            // A networked container's address is news for its workflow's other nodes' firewalls.
            if cx.running.write((id, now_ms())).await?
                && (networked || is_service(&attempt.assignment))
            {
                cx.wake.notify_one();
            }
            return Ok(());
        }
        AttemptPhase::Exited { exit_code, cause } => (Some(exit_code), cause, None),
        AttemptPhase::StartFailed { message } => (None, EndCause::StartError, Some(message)),
        AttemptPhase::Failed { exit_code, message } => {
            (Some(exit_code), EndCause::Exit, Some(message))
        }
        AttemptPhase::Lost => (
            None,
            EndCause::NodeLost,
            Some("the agent no longer knows this attempt".to_string()),
        ),
    };
    if attempt.ended_at.is_none() {
        reports::end_read_attempt(&cx.ends, attempt, exit_code, cause, reason).await?;
    }
    cx.hub.send(node, ServerMessage::Forget { attempt_id: id });
    Ok(())
}

/// Whether an assignment (JSON) runs a service. When in doubt, yes: a spare tick costs less
/// than a missed one.
fn is_service(assignment: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Kind {
        #[serde(default)]
        service: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Kind>(assignment).map_or(true, |k| k.service.is_some())
}

/// A node's container subnet from the cluster's base and the node's sequence number:
/// 10.B.0.0/24, 10.B.1.0/24, ..., so a cluster's nodes never overlap. The base is chosen at
/// random when the cluster is made and kept, so that two clusters on one host (tests, a
/// developer's machine) are unlikely to route the same addresses.
pub fn subnet_of(base: u8, seq: i64) -> String {
    let i = (seq.max(1) - 1) as u64;
    let second = (base as u64 + i / 256).min(255);
    format!("10.{second}.{}.0/24", i % 256)
}

/// The cluster's subnet base (64-239), made on first use.
pub async fn subnet_base(store: &dyn gantry_store::Store) -> anyhow::Result<u8> {
    if let Some(v) = store.setting("network.subnet_base").await? {
        if let Ok(b) = v.parse() {
            return Ok(b);
        }
    }
    let mut r = [0u8; 1];
    getrandom::fill(&mut r).map_err(|e| anyhow::anyhow!("random: {e}"))?;
    let base = 64 + r[0] % 176;
    store
        .set_setting("network.subnet_base", &base.to_string(), "gantry", now_ms())
        .await?;
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::is_service;

    #[test]
    fn only_a_service_start_wakes_the_controller() {
        assert!(is_service(r#"{"task":"web","service":{"ports":[8080]}}"#));
        assert!(!is_service(r#"{"task":"member[3]"}"#));
        assert!(!is_service(r#"{"task":"member[3]","service":null}"#));
        assert!(is_service("not json"), "in doubt, wake");
    }
}
