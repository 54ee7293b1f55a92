//! Simulated agents: `--nodes N` connections to a real `gantry server`, each speaking the
//! agent protocol as `gantry agent` does (hello, heartbeats, status reports, chores, the desired
//! set on reconnect) but running nothing: an assignment "runs" for the seconds its argv's
//! `sleep S` names (else `--run-ms`) and exits 0. One process can so be thousands of nodes,
//! which is what `bench/scale.sh` and the scale test need of the agents' side.
//!
//! The binary prints one JSON object per line on stdout every `--report-secs` ([`report`]),
//! and a last one with `"final": true` when `--duration-secs` is up or on SIGINT/SIGTERM:
//! connections, when every node had been welcomed, assignments (and any assigned twice to the
//! same node), ends reported and acknowledged, reconnects, and the round trip of a WebSocket
//! ping (answered as the server reads the connection, so it is the delay a heartbeat or report
//! sees there).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use gantry_api::agent::{
    AgentMessage, Assignment, AttemptPhase, AttemptReport, Capacity, ServerMessage,
};
use gantry_api::EndCause;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "gantry-simagent",
    about = "Simulated Gantry agents: many nodes over the real protocol, nothing run"
)]
pub struct Args {
    /// The server's URL, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    pub server: String,
    /// An agent token (`gantry admin user create NAME --role agent`).
    #[arg(long, env = "GANTRY_TOKEN", hide_env_values = true)]
    pub token: String,
    #[arg(long, default_value_t = 100)]
    pub nodes: usize,
    /// Each node's cores.
    #[arg(long, default_value_t = 8)]
    pub cores: u32,
    #[arg(long, default_value_t = 32)]
    pub memory_gib: u64,
    #[arg(long, default_value = "default")]
    pub pool: String,
    /// Node names are PREFIX-0 .. PREFIX-(N-1).
    #[arg(long, default_value = "sim")]
    pub prefix: String,
    /// How long an assignment whose argv names no `sleep S` runs.
    #[arg(long, default_value_t = 1000)]
    pub run_ms: u64,
    /// Connections being opened at once (a fleet booting is not one instant either).
    #[arg(long, default_value_t = 256)]
    pub connect_concurrency: usize,
    #[arg(long, default_value_t = 5)]
    pub report_secs: u64,
    /// Stop after this long (default: run until SIGINT/SIGTERM).
    #[arg(long)]
    pub duration_secs: Option<u64>,
}

/// What every node adds to. Round trips are kept per report window (and all of them for the
/// last line) in milliseconds.
#[derive(Default)]
pub struct Stats {
    connected: AtomicUsize,
    welcomed_nodes: Mutex<HashSet<usize>>,
    all_welcomed_ms: AtomicU64,
    assigned: AtomicU64,
    assigned_twice: AtomicU64,
    exited: AtomicU64,
    forgotten: AtomicU64,
    stopped: AtomicU64,
    reconnects: AtomicU64,
    rtt_window: Mutex<Vec<u64>>,
    rtt_all: Mutex<Vec<u64>>,
}

/// A node's attempts, kept across its reconnects as an agent keeps them in its state
/// directory: running ones with when they end, ended ones until the server says `Forget`.
#[derive(Default)]
struct Attempts {
    running: HashMap<Uuid, Instant>,
    ended: HashMap<Uuid, AttemptPhase>,
    /// Every attempt this node was ever given, to count one given twice.
    seen: HashSet<Uuid>,
}

/// One report line: counters now, and the round trips of the window since the last one (of
/// the whole run when `last`).
pub fn report(s: &Stats, start: Instant, last: bool) -> serde_json::Value {
    let rtt = if last {
        s.rtt_all.lock().unwrap().clone()
    } else {
        std::mem::take(&mut *s.rtt_window.lock().unwrap())
    };
    let all = s.all_welcomed_ms.load(Ordering::Relaxed);
    serde_json::json!({
        "t_s": start.elapsed().as_secs_f64(),
        "final": last,
        "connected": s.connected.load(Ordering::Relaxed),
        "welcomed_nodes": s.welcomed_nodes.lock().unwrap().len(),
        "all_welcomed_s": (all > 0).then(|| all as f64 / 1000.0),
        "assigned": s.assigned.load(Ordering::Relaxed),
        "assigned_twice": s.assigned_twice.load(Ordering::Relaxed),
        "exited": s.exited.load(Ordering::Relaxed),
        "forgotten": s.forgotten.load(Ordering::Relaxed),
        "stopped": s.stopped.load(Ordering::Relaxed),
        "reconnects": s.reconnects.load(Ordering::Relaxed),
        "rtt_ms": quantiles(rtt),
    })
}

fn quantiles(mut v: Vec<u64>) -> serde_json::Value {
    if v.is_empty() {
        return serde_json::json!({"n": 0});
    }
    v.sort_unstable();
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    serde_json::json!({"n": v.len(), "p50": q(0.5), "p99": q(0.99), "max": v[v.len() - 1]})
}

/// One node for the life of the process: a session, and a new one a second after it ends.
async fn node(i: usize, args: Args, stats: Arc<Stats>, gate: Arc<Semaphore>, start: Instant) {
    let mut attempts = Attempts::default();
    loop {
        if let Err(e) = session(i, &args, &stats, &gate, start, &mut attempts).await {
            eprintln!("{}-{i}: {e:#}", args.prefix);
        }
        stats.reconnects.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(1000 + (i as u64 * 7919) % 1000)).await;
    }
}

/// How long an assignment runs: the seconds of a `sleep S` in its argv, else `--run-ms`.
fn run_time(asg: &Assignment, default_ms: u64) -> Duration {
    let words: Vec<&str> = asg.argv.iter().flat_map(|a| a.split_whitespace()).collect();
    words
        .windows(2)
        .find(|w| w[0] == "sleep" || w[0].ends_with("/sleep"))
        .and_then(|w| w[1].parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_millis(default_ms))
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn send(ws: &mut Ws, m: &AgentMessage) -> anyhow::Result<()> {
    ws.send(Message::text(serde_json::to_string(m)?)).await?;
    Ok(())
}

fn status(attempt_id: Uuid, phase: AttemptPhase) -> AgentMessage {
    AgentMessage::Status(AttemptReport { attempt_id, phase })
}

async fn session(
    i: usize,
    args: &Args,
    stats: &Stats,
    gate: &Semaphore,
    start: Instant,
    attempts: &mut Attempts,
) -> anyhow::Result<()> {
    let name = format!("{}-{i}", args.prefix);
    let base = args.server.trim_end_matches('/');
    let url = format!(
        "{}/api/v1/agent/connect",
        base.replacen("http://", "ws://", 1)
            .replacen("https://", "wss://", 1)
    );
    let mut req = url.into_client_request()?;
    req.headers_mut()
        .insert("Authorization", format!("Bearer {}", args.token).parse()?);
    // Small buffers: thousands of connections in one process.
    let config = WebSocketConfig::default()
        .read_buffer_size(8 << 10)
        .write_buffer_size(0);
    let heartbeat_ms;
    let ping_heartbeats;
    let mut ws = {
        let _permit = gate.acquire().await?;
        let (mut ws, _) = tokio_tungstenite::connect_async_with_config(req, Some(config), true)
            .await
            .context("connecting")?;
        let hello = AgentMessage::Hello {
            name: name.clone(),
            pool: args.pool.clone(),
            capacity: Capacity {
                cpus: args.cores,
                memory_bytes: args.memory_gib << 30,
                devices: Default::default(),
            },
            version: format!("simagent {}", env!("CARGO_PKG_VERSION")),
            metrics_addr: None,
            node_exporter: None,
            attempts: attempts
                .running
                .keys()
                .chain(attempts.ended.keys())
                .copied()
                .collect(),
            address: Some("127.0.0.1".into()),
            exec_addr: None,
            labels: Default::default(),
        };
        send(&mut ws, &hello).await?;
        loop {
            match ws.next().await.context("closed before the welcome")?? {
                Message::Text(t) => match serde_json::from_str::<ServerMessage>(t.as_str())? {
                    ServerMessage::Welcome {
                        heartbeat_interval_ms,
                        ping_heartbeats: ping,
                        ..
                    } => {
                        heartbeat_ms = heartbeat_interval_ms.max(100);
                        ping_heartbeats = ping;
                        break;
                    }
                    other => anyhow::bail!("expected the welcome, got {other:?}"),
                },
                Message::Close(c) => anyhow::bail!("closed before the welcome: {c:?}"),
                _ => continue,
            }
        }
        ws
    };
    stats.connected.fetch_add(1, Ordering::Relaxed);
    {
        let mut w = stats.welcomed_nodes.lock().unwrap();
        w.insert(i);
        if w.len() == args.nodes {
            let ms = start.elapsed().as_millis().max(1) as u64;
            let _ =
                stats
                    .all_welcomed_ms
                    .compare_exchange(0, ms, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
    let result = serve(
        &mut ws,
        args,
        stats,
        heartbeat_ms,
        ping_heartbeats,
        attempts,
    )
    .await;
    stats.connected.fetch_sub(1, Ordering::Relaxed);
    result
}

/// The welcomed connection: reports ends as they come due, heartbeats, pings, and answers what
/// the server sends.
async fn serve(
    ws: &mut Ws,
    args: &Args,
    stats: &Stats,
    heartbeat_ms: u64,
    ping_heartbeats: bool,
    attempts: &mut Attempts,
) -> anyhow::Result<()> {
    // Ends not yet acknowledged are reported again on a new connection, as an agent does.
    for (id, phase) in attempts.ended.clone() {
        send(ws, &status(id, phase)).await?;
    }
    // The fleet's heartbeats are spread over their period, as agents started at different
    // times are.
    let period = Duration::from_millis(heartbeat_ms);
    let offset = Duration::from_millis(rand_below(heartbeat_ms));
    let mut heartbeat = tokio::time::interval_at(Instant::now() + offset, period);
    let mut pinged: Option<Instant> = None;
    loop {
        // A node runs a few attempts at once (its cores): the earliest end is a short scan.
        let next_end = attempts
            .running
            .values()
            .min()
            .copied()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            msg = ws.next() => {
                let msg = match msg {
                    None => anyhow::bail!("the server closed the connection"),
                    Some(m) => m?,
                };
                match msg {
                    Message::Text(t) => {
                        let m: ServerMessage = serde_json::from_str(t.as_str())?;
                        answer(ws, m, args, stats, attempts).await?;
                    }
                    Message::Pong(_) => {
                        if let Some(at) = pinged.take() {
                            let ms = at.elapsed().as_millis() as u64;
                            stats.rtt_window.lock().unwrap().push(ms);
                            stats.rtt_all.lock().unwrap().push(ms);
                        }
                    }
                    Message::Close(c) => anyhow::bail!("the server closed the connection: {c:?}"),
                    _ => {}
                }
            }
            // As `gantry agent`: a ping with every heartbeat, and the heartbeat message too
            // unless the server counts the ping.
            _ = heartbeat.tick() => {
                if !ping_heartbeats {
                    send(ws, &AgentMessage::Heartbeat).await?;
                }
                if pinged.is_none() {
                    pinged = Some(Instant::now());
                }
                ws.send(Message::Ping(Vec::new().into())).await?;
            }
            _ = tokio::time::sleep_until(next_end) => {
                let now = Instant::now();
                let done: Vec<Uuid> = attempts
                    .running
                    .iter()
                    .filter(|(_, at)| **at <= now)
                    .map(|(id, _)| *id)
                    .collect();
                for id in done {
                    let phase = AttemptPhase::Exited { exit_code: 0, cause: EndCause::Exit };
                    end(ws, attempts, id, phase, &stats.exited).await?;
                }
            }
        }
    }
}

/// Reports an attempt's end and keeps it until the server says `Forget`; counted in `count`.
/// Nothing for an attempt not running here.
async fn end(
    ws: &mut Ws,
    attempts: &mut Attempts,
    id: Uuid,
    phase: AttemptPhase,
    count: &AtomicU64,
) -> anyhow::Result<()> {
    if attempts.running.remove(&id).is_none() {
        return Ok(());
    }
    attempts.ended.insert(id, phase.clone());
    count.fetch_add(1, Ordering::Relaxed);
    send(ws, &status(id, phase)).await
}

async fn answer(
    ws: &mut Ws,
    m: ServerMessage,
    args: &Args,
    stats: &Stats,
    attempts: &mut Attempts,
) -> anyhow::Result<()> {
    match m {
        ServerMessage::Desired { attempts: want } => {
            // What the server no longer wants is dropped, as the agent stops it.
            let wanted: HashSet<Uuid> = want.iter().map(|a| a.attempt_id).collect();
            attempts.running.retain(|id, _| wanted.contains(id));
            for a in want {
                if !attempts.running.contains_key(&a.attempt_id)
                    && !attempts.ended.contains_key(&a.attempt_id)
                {
                    start(ws, a, args, stats, attempts).await?;
                }
            }
        }
        ServerMessage::Assign(a) => {
            if attempts.seen.contains(&a.attempt_id) {
                stats.assigned_twice.fetch_add(1, Ordering::Relaxed);
            } else {
                start(ws, *a, args, stats, attempts).await?;
            }
        }
        ServerMessage::Stop {
            attempt_id, cause, ..
        } => {
            let phase = AttemptPhase::Exited {
                exit_code: 143,
                cause,
            };
            end(ws, attempts, attempt_id, phase, &stats.stopped).await?;
        }
        ServerMessage::Forget { attempt_id } => {
            if attempts.ended.remove(&attempt_id).is_some() {
                stats.forgotten.fetch_add(1, Ordering::Relaxed);
            }
        }
        ServerMessage::Chore(c) => {
            send(
                ws,
                &AgentMessage::ChoreDone {
                    id: c.id,
                    error: None,
                },
            )
            .await?;
        }
        ServerMessage::Welcome { .. }
        | ServerMessage::Peers { .. }
        | ServerMessage::LogAck { .. } => {}
    }
    Ok(())
}

async fn start(
    ws: &mut Ws,
    a: Assignment,
    args: &Args,
    stats: &Stats,
    attempts: &mut Attempts,
) -> anyhow::Result<()> {
    stats.assigned.fetch_add(1, Ordering::Relaxed);
    attempts.seen.insert(a.attempt_id);
    let at = Instant::now() + run_time(&a, args.run_ms);
    attempts.running.insert(a.attempt_id, at);
    send(
        ws,
        &status(a.attempt_id, AttemptPhase::Running { address: None }),
    )
    .await
}

/// A number below `n` (0 for 0), from the clock: spreading pings needs no better randomness.
fn rand_below(n: u64) -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    if n == 0 {
        0
    } else {
        t % n
    }
}

/// Starts `args.nodes` simulated nodes on the current runtime; they run until the runtime
/// ends. Returns what they count, and the instant they started.
pub fn spawn(args: Args) -> (Arc<Stats>, Instant) {
    let stats = Arc::new(Stats::default());
    let start = Instant::now();
    let gate = Arc::new(Semaphore::new(args.connect_concurrency.max(1)));
    for i in 0..args.nodes {
        let (args, stats, gate) = (args.clone(), stats.clone(), gate.clone());
        tokio::spawn(async move { node(i, args, stats, gate, start).await });
    }
    (stats, start)
}

impl Stats {
    /// How many of the nodes are connected and welcomed now.
    pub fn connected(&self) -> usize {
        self.connected.load(Ordering::Relaxed)
    }

    /// Assignments started, and those given twice to the same node.
    pub fn assigned(&self) -> (u64, u64) {
        (
            self.assigned.load(Ordering::Relaxed),
            self.assigned_twice.load(Ordering::Relaxed),
        )
    }

    /// Ends reported, and those the server acknowledged (`Forget`).
    pub fn ended(&self) -> (u64, u64) {
        (
            self.exited.load(Ordering::Relaxed) + self.stopped.load(Ordering::Relaxed),
            self.forgotten.load(Ordering::Relaxed),
        )
    }

    /// Sessions that ended (each is followed by a reconnect).
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }
}
