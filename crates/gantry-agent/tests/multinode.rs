//! Multinode members and host-network containers under real runc: two agents run whole
//! (`node::run`) on this host, each against a small WebSocket server in this test that sends
//! them the assignments a server would (the gang's `MultinodeSpec` made here, as the server's
//! placement makes it). They advertise two loopback addresses (127.0.0.2 and 127.0.0.3), so
//! that MPI launchers take them for two nodes. A `harness = false` test like `network.rs`.
//!
//! The MPI image is built by `scripts/make-mpi-image.sh` (offline from Debian's mirror, cached
//! by the script's hash) and pushed to the tests' registry.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use gantry_agent::image::PullConfig;
use gantry_agent::multinode::exec;
use gantry_agent::node::{self, AgentConfig};
use gantry_api::agent::{AgentMessage, Assignment, AttemptPhase, Capacity, ServerMessage};
use gantry_api::EndCause;
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// One agent and the test's server side of its connection.
struct Node {
    ws: Ws,
    /// Its `Hello`: the node's address and its exec service.
    address: String,
    exec_addr: String,
    statuses: HashMap<Uuid, Vec<AttemptPhase>>,
    logs: HashMap<Uuid, Vec<u8>>,
    errs: HashMap<Uuid, Vec<u8>>,
    agent: Option<tokio::runtime::Runtime>,
    config: AgentConfig,
    listener: tokio::net::TcpListener,
}

struct Ctx {
    tokio: tokio::runtime::Runtime,
    nodes: Vec<Node>,
    registry: String,
    mpi_image: String,
    dir: PathBuf,
}

const ADDRESSES: [&str; 2] = ["127.0.0.2", "127.0.0.3"];

impl Node {
    async fn send(&mut self, m: &ServerMessage) {
        let text = serde_json::to_string(m).unwrap();
        self.ws.send(Message::Text(text.into())).await.unwrap();
    }

    async fn recv(&mut self) -> AgentMessage {
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(180), self.ws.next())
                .await
                .expect("the agent said nothing for three minutes")
                .expect("the agent hung up")
                .expect("websocket");
            let Message::Text(t) = msg else { continue };
            let m: AgentMessage = serde_json::from_str(t.as_str()).unwrap();
            match &m {
                AgentMessage::Status(r) => self
                    .statuses
                    .entry(r.attempt_id)
                    .or_default()
                    .push(r.phase.clone()),
                AgentMessage::Log(l) => {
                    let data = base64::engine::general_purpose::STANDARD
                        .decode(&l.data)
                        .unwrap();
                    let logs = match l.stream {
                        gantry_api::agent::Stream::Stdout => &mut self.logs,
                        gantry_api::agent::Stream::Stderr => &mut self.errs,
                    };
                    let buf = logs.entry(l.attempt_id).or_default();
                    let end = l.offset as usize + data.len();
                    if buf.len() < end {
                        buf.resize(end, 0);
                    }
                    buf[l.offset as usize..end].copy_from_slice(&data);
                }
                _ => {}
            }
            return m;
        }
    }

    /// Reads until attempt `id` reports a phase that `pred` accepts.
    async fn until(&mut self, id: Uuid, pred: impl Fn(&AttemptPhase) -> bool) -> AttemptPhase {
        loop {
            if let AgentMessage::Status(r) = self.recv().await {
                if r.attempt_id == id && pred(&r.phase) {
                    return r.phase;
                }
            }
        }
    }

    /// Reads whatever comes for a while (so the agent's messages never back up).
    async fn pump(&mut self, d: Duration) {
        let _ = tokio::time::timeout(d, async {
            loop {
                self.recv().await;
            }
        })
        .await;
    }

    fn output(&self, id: Uuid) -> String {
        String::from_utf8_lossy(self.logs.get(&id).map_or(&[][..], |v| v)).into_owned()
    }

    fn errors(&self, id: Uuid) -> String {
        String::from_utf8_lossy(self.errs.get(&id).map_or(&[][..], |v| v)).into_owned()
    }
}

fn is_running(p: &AttemptPhase) -> bool {
    matches!(p, AttemptPhase::Running { .. })
}

fn has_ended(p: &AttemptPhase) -> bool {
    !matches!(p, AttemptPhase::Preparing | AttemptPhase::Running { .. })
}

fn start_agent(c_dir: &Path, registry: &str, i: usize, tokio: &tokio::runtime::Runtime) -> Node {
    let name = format!("mntest-{}-{i}", std::process::id());
    let state = c_dir.join(format!("node{i}"));
    std::fs::create_dir_all(&state).unwrap();
    let listener = tokio
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let config = AgentConfig {
        server: format!("http://{}", listener.local_addr().unwrap()),
        token: "test".into(),
        pool: "default".into(),
        name,
        capacity: Capacity {
            cpus: 2,
            memory_bytes: 2 << 30,
            devices: Default::default(),
        },
        storage_root: c_dir.join("storage"),
        state_dir: state,
        pull: PullConfig {
            insecure_hosts: vec![registry.to_owned()],
            ..Default::default()
        },
        metrics_listen: None,
        node_exporter: None,
        // Agents of one host: each its own part of the id range (as `gantry up` splits it).
        job_userns: Some(gantry_agent::runtime::IdRange {
            first: gantry_agent::runtime::JOB_IDS.first + (i as u32 + 2) * 64 * 65536,
            slots: 64,
        }),
        host_allow: vec![],
        labels: Default::default(),
        advertise: Some(ADDRESSES[i].into()),
        exec_listen: Some(format!("{}:0", ADDRESSES[i]).parse().unwrap()),
    };
    let agent = tokio::runtime::Runtime::new().unwrap();
    agent.spawn(node::run(config.clone()));
    tokio.block_on(async {
        let (sock, _) = tokio::time::timeout(Duration::from_secs(60), listener.accept())
            .await
            .expect("the agent did not connect")
            .unwrap();
        let ws = tokio_tungstenite::accept_async(sock).await.unwrap();
        let mut node = Node {
            ws,
            address: String::new(),
            exec_addr: String::new(),
            statuses: HashMap::new(),
            logs: HashMap::new(),
            errs: HashMap::new(),
            agent: Some(agent),
            config,
            listener,
        };
        node.welcome(vec![]).await;
        node
    })
}

impl Node {
    /// Reads the agent's Hello and welcomes it with the attempts it should run.
    async fn welcome(&mut self, desired: Vec<Assignment>) -> Vec<Uuid> {
        let AgentMessage::Hello {
            address,
            exec_addr,
            attempts,
            ..
        } = self.recv().await
        else {
            panic!("the first message is not Hello");
        };
        self.address = address.expect("Hello has the node's address");
        self.exec_addr = exec_addr.expect("Hello has the exec service's address");
        self.send(&ServerMessage::Welcome {
            node_id: Uuid::new_v4(),
            heartbeat_interval_ms: 1000,
            subnet: None,
            transfer_events: false,
            probe_results: false,
            ping_heartbeats: false,
        })
        .await;
        self.send(&ServerMessage::Desired { attempts: desired })
            .await;
        attempts
    }

    /// Stops the agent's process (its containers go on) and starts it again; the attempts it
    /// reports knowing.
    async fn restart(&mut self, desired: Vec<Assignment>) -> Vec<Uuid> {
        if let Some(old) = self.agent.take() {
            old.shutdown_background();
        }
        let agent = tokio::runtime::Runtime::new().unwrap();
        agent.spawn(node::run(self.config.clone()));
        self.agent = Some(agent);
        let (sock, _) = tokio::time::timeout(Duration::from_secs(60), self.listener.accept())
            .await
            .expect("the agent did not connect again")
            .unwrap();
        self.ws = tokio_tungstenite::accept_async(sock).await.unwrap();
        self.welcome(desired).await
    }
}

/// A gang of `n` members of job `job` (one per node, slot `slots` each), as the server's
/// placement assigns it: every member's assignment.
fn gang(
    c: &Ctx,
    image: &str,
    job: &str,
    implementation: &str,
    argv: &[&str],
    env: &[&str],
    n: usize,
) -> Vec<Assignment> {
    let wf = Uuid::new_v4();
    let ids: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    let token = format!("{:032x}", rand_u128());
    let members: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "hostname": format!("{job}-{i}"),
                "address": c.nodes[i].address,
                "exec_addr": c.nodes[i].exec_addr,
                "attempt_id": ids[i],
            })
        })
        .collect();
    (0..n)
        .map(|i| {
            serde_json::from_value(serde_json::json!({
                "attempt_id": ids[i],
                "workflow_id": wf,
                "task": job,
                "attempt": 1,
                "image": { "uri": format!("docker://{image}") },
                "argv": argv,
                "env": env,
                "resources": { "cpus": 1.0, "memory_bytes": 1u64 << 30 },
                "host_network": true,
                "multinode": {
                    "implementation": implementation,
                    "index": i,
                    "slots": 1,
                    "members": members,
                    "token": token,
                },
            }))
            .unwrap()
        })
        .collect()
}

fn rand_u128() -> u128 {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    u128::from_le_bytes(b)
}

/// Starts a gang (the others first, then the head, as they become RUNNING) and returns once
/// all run.
fn start_gang(c: &mut Ctx, members: &[Assignment]) {
    c.tokio.block_on(async {
        for (i, m) in members.iter().enumerate().rev() {
            let node = &mut c.nodes[i];
            node.send(&ServerMessage::Assign(Box::new(m.clone()))).await;
            let p = node
                .until(m.attempt_id, |p| !matches!(p, AttemptPhase::Preparing))
                .await;
            assert_eq!(
                p,
                AttemptPhase::Running {
                    address: Some(node.address.clone())
                },
                "member {i} runs at its node's address ({:?})",
                node.errors(m.attempt_id)
            );
        }
    });
}

/// Waits for the head's end (for at most `within`, when given: `None` if it did not end by
/// then); then stops and forgets every member. The head's end and output.
fn finish_gang(
    c: &mut Ctx,
    members: &[Assignment],
    within: Option<Duration>,
) -> (Option<AttemptPhase>, String, String) {
    c.tokio.block_on(async {
        let head = &mut c.nodes[0];
        let id = members[0].attempt_id;
        let end = match within {
            Some(d) => tokio::time::timeout(d, head.until(id, has_ended))
                .await
                .ok(),
            None => Some(head.until(id, has_ended).await),
        };
        head.pump(Duration::from_millis(500)).await;
        let (out, err) = (head.output(id), head.errors(id));
        for (i, m) in members.iter().enumerate() {
            stop(&mut c.nodes[i], m.attempt_id).await;
        }
        (end, out, err)
    })
}

async fn stop(node: &mut Node, id: Uuid) {
    node.send(&ServerMessage::Stop {
        attempt_id: id,
        grace_ms: 1000,
        cause: EndCause::Stopped,
    })
    .await;
    if !node
        .statuses
        .get(&id)
        .is_some_and(|s| s.iter().any(has_ended))
    {
        node.until(id, has_ended).await;
    }
    node.send(&ServerMessage::Forget { attempt_id: id }).await;
}

const EXIT0: AttemptPhase = AttemptPhase::Exited {
    exit_code: 0,
    cause: EndCause::Exit,
};

/// An MPI allreduce across two nodes: both ranks' hostnames and the sum on the head's log.
/// With `may_hang`, a gang that has printed its result but not ended within two minutes is
/// stopped (stopping it is checked) and its result is checked: Debian 12's MPICH can deadlock
/// in `MPI_Finalize` after the work is done (see `Finalize::MayHang` in the gantry crate's
/// `tests/mpi.rs`), which is the image's MPI, not the launch under test.
fn mpi_allreduce(c: &mut Ctx, implementation: &str, program: &str, may_hang: bool) {
    let job = format!("{implementation}{}", std::process::id() % 1000);
    let image = c.mpi_image.clone();
    let members = gang(c, &image, &job, implementation, &[program], &[], 2);
    start_gang(c, &members);
    let within = may_hang.then_some(Duration::from_secs(120));
    let (end, out, err) = finish_gang(c, &members, within);
    println!("--- {implementation}: what the ranks printed (the head's log) ---\n{out}{err}---");
    match end {
        Some(end) => assert_eq!(end, EXIT0, "stdout: {out}\nstderr: {err}"),
        None => println!(
            "the {implementation} gang hung in MPI_Finalize after its work and was stopped"
        ),
    }
    assert!(out.contains(&format!("rank 0 of 2 on {job}-0\n")), "{out}");
    assert!(out.contains(&format!("rank 1 of 2 on {job}-1\n")), "{out}");
    assert!(out.contains("sum 3 (expected 3)\n"), "{out}");
    // Each rank's own output reaches the head's log through the launcher (not the wrapper,
    // which drops the remote streams by default).
    assert!(
        out.contains(&format!("hello from rank 1 on {job}-1\n")),
        "{out}"
    );
    assert!(
        out.contains(&format!("hello from rank 0 on {job}-0\n")),
        "{out}"
    );
}

fn openmpi_allreduce_spans_two_nodes(c: &mut Ctx) {
    mpi_allreduce(c, "openmpi", "allreduce-openmpi", false);
}

fn mpich_allreduce_spans_two_nodes(c: &mut Ctx) {
    mpi_allreduce(c, "mpich", "allreduce-mpich", true);
}

/// The benchmark's mode of the program: latency and bandwidth between the two nodes' ranks.
fn openmpi_pingpong_reports_latency_and_bandwidth(c: &mut Ctx) {
    let job = format!("pp{}", std::process::id() % 1000);
    let image = c.mpi_image.clone();
    let argv = ["allreduce-openmpi", "pingpong", "200"];
    let members = gang(c, &image, &job, "openmpi", &argv, &[], 2);
    start_gang(c, &members);
    let (end, out, err) = finish_gang(c, &members, None);
    println!("--- pingpong ---\n{out}---");
    assert_eq!(end, Some(EXIT0), "stdout: {out}\nstderr: {err}");
    assert!(out.contains("latency 8 B: "), "{out}");
    assert!(out.contains("bandwidth 1048576 B: "), "{out}");
}

fn openmpi_runs_mpi4py(c: &mut Ctx) {
    let job = format!("py{}", std::process::id() % 1000);
    let image = c.mpi_image.clone();
    let script = "from mpi4py import MPI; import socket; c = MPI.COMM_WORLD; \
                  s = c.allreduce(c.rank + 1); h = c.gather(socket.gethostname()); \
                  print('sum', s, 'hosts', ','.join(h) if h else '') if c.rank == 0 else None";
    let members = gang(c, &image, &job, "ompi", &["python3", "-c", script], &[], 2);
    start_gang(c, &members);
    let (end, out, err) = finish_gang(c, &members, None);
    assert_eq!(end, Some(EXIT0), "stdout: {out}\nstderr: {err}");
    assert!(
        out.contains(&format!("sum 3 hosts {job}-0,{job}-1")),
        "{out}"
    );
}

fn generic_runs_commands_in_members(c: &mut Ctx) {
    let job = format!("gen{}", std::process::id() % 1000);
    let image = format!("{}/library/busybox:1", c.registry);
    let script = format!(
        "echo quiet:; $MULTINODE_SSH_WRAPPER {job}-1 hostname; \
         echo loud:; MULTINODE_WRAPPER_FORWARD_STREAMS=1 ${{MULTINODE_RSH_WRAPPER}} {job}-1 \
         'hostname; echo to-stderr >&2; cat /etc/hosts | grep -c {job}-'; \
         echo stdin: $(echo piped | MULTINODE_WRAPPER_FORWARD_STREAMS=1 $MULTINODE_SSH_WRAPPER {job}-1 cat); \
         $MULTINODE_SSH_WRAPPER -n -o BatchMode=yes {job}-1 exit 7; echo code: $?; \
         $MULTINODE_SSH_WRAPPER nobody-9 true; echo unknown: $?; \
         echo list: $MULTINODE_HOSTLIST $MULTINODE_TOTAL_SLOTS $MULTINODE_NODE_IP; hostname; \
         echo userns: $(cat /proc/self/uid_map)"
    );
    let members = gang(
        c,
        &image,
        &job,
        "generic",
        &["/bin/sh", "-c", &script],
        &[],
        2,
    );
    start_gang(c, &members);
    let (end, out, err) = finish_gang(c, &members, None);
    assert_eq!(end, Some(EXIT0), "stdout: {out}\nstderr: {err}");
    let want = format!(
        "quiet:\nloud:\n[{job}-1] {job}-1\n[{job}-1] 2\nstdin: [{job}-1] piped\ncode: 7\nunknown: 255\n\
         list: {job}-0:1,{job}-1:1 2 {}\n{job}-0\n",
        ADDRESSES[0]
    );
    let (out, userns) = out.split_once("userns: ").expect("the uid map");
    assert_eq!(out, want, "stderr: {err}");
    // Still in a user namespace of its own with the node's network: root is no host root.
    let map: Vec<u64> = userns
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(map.len() == 3 && map[0] == 0 && map[1] != 0, "{userns}");
    assert!(err.contains(&format!("[{job}-1] to-stderr\n")), "{err}");
    assert!(
        err.contains("nobody-9 is not a member of this job"),
        "{err}"
    );
}

fn gasnet_is_refused(c: &mut Ctx) {
    let image = format!("{}/library/busybox:1", c.registry);
    let members = gang(c, &image, "gas", "gasnet", &["true"], &[], 1);
    c.tokio.block_on(async {
        let node = &mut c.nodes[0];
        node.send(&ServerMessage::Assign(Box::new(members[0].clone())))
            .await;
        let p = node.until(members[0].attempt_id, has_ended).await;
        let AttemptPhase::StartFailed { message } = &p else {
            panic!("{p:?}")
        };
        assert!(message.contains("`gasnet` is not supported"), "{message}");
        node.send(&ServerMessage::Forget {
            attempt_id: members[0].attempt_id,
        })
        .await;
    });
}

/// A free TCP port on the host.
fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn host_network_service_is_at_the_node_address(c: &mut Ctx) {
    let port = free_port();
    let id = Uuid::new_v4();
    let asg: Assignment = serde_json::from_value(serde_json::json!({
        "attempt_id": id,
        "workflow_id": Uuid::new_v4(),
        "task": "web",
        "attempt": 1,
        "image": { "uri": format!("docker://{}/library/busybox:1", c.registry) },
        "argv": ["/bin/sh", "-c", format!(
            "mkdir -p /www && hostname > /www/index.html && grep -c web.svc /etc/hosts >> /www/index.html && exec httpd -f -p {port} -h /www")],
        "env": [],
        "resources": { "cpus": 0.5, "memory_bytes": 128u64 << 20 },
        "host_network": true,
        "network": { "hosts": [{ "name": "web.svc", "address": ADDRESSES[1] }] },
        "service": {
            "ports": [{ "name": "http", "port": port, "protocol": "tcp" }],
            "readiness": {
                "check": { "kind": "tcp_socket", "port": port },
                "initial_delay_seconds": 0, "period_seconds": 1, "timeout_seconds": 1,
                "success_threshold": 1, "failure_threshold": 30,
            },
        },
    }))
    .unwrap();
    c.tokio.block_on(async {
        let node = &mut c.nodes[1];
        node.send(&ServerMessage::Assign(Box::new(asg.clone())))
            .await;
        let p = node
            .until(id, |p| !matches!(p, AttemptPhase::Preparing))
            .await;
        assert_eq!(
            p,
            AttemptPhase::Running {
                address: Some(ADDRESSES[1].into())
            },
            "{}",
            node.errors(id)
        );
        // RUNNING came after the readiness probe at the node's address passed.
        let addr: SocketAddr = format!("{}:{port}", ADDRESSES[1]).parse().unwrap();
        let body = tokio::task::spawn_blocking(move || http_get(addr))
            .await
            .unwrap()
            .expect("the service answers at the node's address");
        assert_eq!(body, "web\n1\n");
        // A restarted agent re-adopts it and reports it at the same address; its exec
        // service keeps its port (gangs' members know it by it).
        let exec_before = node.exec_addr.clone();
        let known = node.restart(vec![asg.clone()]).await;
        assert_eq!(known, vec![id]);
        assert_eq!(node.exec_addr, exec_before);
        let p = node.until(id, is_running).await;
        assert_eq!(
            p,
            AttemptPhase::Running {
                address: Some(ADDRESSES[1].into())
            }
        );
        stop(node, id).await;
    });
}

fn http_get(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok(text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned())
}

/// A client of the exec service, as the wrapper speaks to it.
struct ExecClient {
    s: TcpStream,
}

#[derive(Debug, PartialEq)]
enum Answer {
    Refused(String),
    Ran { code: i32, out: String },
}

impl ExecClient {
    fn connect(addr: &str) -> Self {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        ExecClient { s }
    }

    fn frame(&mut self, kind: u8, data: &[u8]) -> std::io::Result<()> {
        let mut f = vec![kind];
        f.extend_from_slice(&(data.len() as u32).to_be_bytes());
        f.extend_from_slice(data);
        self.s.write_all(&f)
    }

    fn read(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut head = [0u8; 5];
        self.s.read_exact(&mut head).ok()?;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut d = vec![0u8; len];
        self.s.read_exact(&mut d).ok()?;
        Some((head[0], d))
    }

    fn request(&mut self, token: &str, attempt: Uuid, cmd: &str) {
        self.frame(
            exec::REQUEST,
            format!("{token}\n{attempt}\n{cmd}").as_bytes(),
        )
        .unwrap();
    }

    /// Everything until the end: EXIT or ERROR.
    fn answer(&mut self) -> Answer {
        let mut out = String::new();
        loop {
            match self.read() {
                Some((exec::STARTED, _)) => self.frame(exec::STDIN, b"").unwrap(),
                Some((exec::STDOUT, d)) => out.push_str(&String::from_utf8_lossy(&d)),
                Some((exec::STDERR, _)) => {}
                Some((exec::EXIT, d)) => {
                    return Answer::Ran {
                        code: i32::from_be_bytes(d.try_into().unwrap()),
                        out,
                    }
                }
                Some((exec::ERROR, d)) => {
                    return Answer::Refused(String::from_utf8_lossy(&d).into_owned())
                }
                other => panic!("unexpected answer {other:?}"),
            }
        }
    }

    fn run(addr: &str, token: &str, attempt: Uuid, cmd: &str) -> Answer {
        let mut c = ExecClient::connect(addr);
        c.request(token, attempt, cmd);
        c.answer()
    }
}

fn refused() -> Answer {
    Answer::Refused("refused".into())
}

fn exec_service_refuses_what_is_not_its_gangs(c: &mut Ctx) {
    let image = format!("{}/library/busybox:1", c.registry);
    let job = format!("atk{}", std::process::id() % 1000);
    let ours = gang(c, &image, &job, "generic", &["sleep", "600"], &[], 2);
    let theirs = gang(c, &image, "other", "generic", &["sleep", "600"], &[], 1);
    start_gang(c, &ours);
    // Another gang's head and a plain container on node 1 (index 0 of its own gang).
    let mut plain = theirs[0].clone();
    plain.attempt_id = Uuid::new_v4();
    plain.multinode = None;
    plain.host_network = false;
    let theirs: Vec<Assignment> = theirs
        .into_iter()
        .map(|mut a| {
            if let Some(m) = a.multinode.as_mut() {
                m.members[0].address = c.nodes[1].address.clone();
                m.members[0].exec_addr = c.nodes[1].exec_addr.clone();
            }
            a
        })
        .collect();
    c.tokio.block_on(async {
        let node = &mut c.nodes[1];
        for a in [&theirs[0], &plain] {
            node.send(&ServerMessage::Assign(Box::new(a.clone()))).await;
            let p = node
                .until(a.attempt_id, |p| !matches!(p, AttemptPhase::Preparing))
                .await;
            assert!(is_running(&p), "{p:?}");
        }
    });
    let addr = c.nodes[1].exec_addr.clone();
    let token = ours[0].multinode.as_ref().unwrap().token.clone();
    let their_token = theirs[0].multinode.as_ref().unwrap().token.clone();
    let member = ours[1].attempt_id;
    let job2 = job.clone();
    let pump = |c: &mut Ctx| {
        c.tokio.block_on(async {
            for n in &mut c.nodes {
                n.pump(Duration::from_millis(50)).await;
            }
        })
    };
    // The legitimate use: the gang's token, its member's container.
    assert_eq!(
        ExecClient::run(&addr, &token, member, "hostname"),
        Answer::Ran {
            code: 0,
            out: format!("{job2}-1\n")
        }
    );
    // A wrong token; another gang's token for this gang's container; this gang's token for
    // the other gang's container; a container that is no member; an attempt that is none.
    let wrong = format!("{}x", &token[..token.len() - 1]);
    assert_eq!(
        ExecClient::run(&addr, &wrong, member, "hostname"),
        refused()
    );
    assert_eq!(ExecClient::run(&addr, "", member, "hostname"), refused());
    assert_eq!(
        ExecClient::run(&addr, &their_token, member, "hostname"),
        refused()
    );
    assert_eq!(
        ExecClient::run(&addr, &token, theirs[0].attempt_id, "hostname"),
        refused()
    );
    assert_eq!(
        ExecClient::run(&addr, &token, plain.attempt_id, "hostname"),
        refused()
    );
    assert_eq!(
        ExecClient::run(&addr, &token, Uuid::new_v4(), "hostname"),
        refused()
    );
    // The head runs on node 0: node 1's service has no such container.
    assert_eq!(
        ExecClient::run(&addr, &token, ours[0].attempt_id, "hostname"),
        refused()
    );
    // An oversized request is refused before it is read.
    let mut big = ExecClient::connect(&addr);
    let _ = big.frame(exec::REQUEST, &vec![b'a'; exec::MAX_FRAME + 1]);
    assert_eq!(big.answer(), refused());
    // Garbage first.
    let mut g = ExecClient::connect(&addr);
    g.frame(exec::STDIN, b"hello").unwrap();
    assert_eq!(g.answer(), refused());
    pump(c);

    // A command is killed when its connection drops.
    let mut dropped = ExecClient::connect(&addr);
    dropped.request(&token, member, "sleep 4242");
    assert_eq!(dropped.read().map(|f| f.0), Some(exec::STARTED));
    let count = "ps -o args | grep -c '^sleep 4242'";
    // Until `runs(n)`: the command's processes in the container, as `ps` there counts them.
    let until = |runs: &str| {
        let want = Answer::Ran {
            code: if runs == "0" { 1 } else { 0 },
            out: format!("{runs}\n"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let a = ExecClient::run(&addr, &token, member, count);
            if a == want {
                break;
            }
            assert!(Instant::now() < deadline, "want {want:?}, have {a:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    until("1");
    drop(dropped);
    until("0");

    // At most MAX_PER_CONTAINER at once in one container.
    let mut held = Vec::new();
    for _ in 0..exec::MAX_PER_CONTAINER {
        let mut h = ExecClient::connect(&addr);
        h.request(&token, member, "sleep 600");
        assert_eq!(h.read().map(|f| f.0), Some(exec::STARTED));
        held.push(h);
    }
    assert_eq!(ExecClient::run(&addr, &token, member, "true"), refused());
    drop(held);
    // Their places are given back as the service sees the connections go.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ExecClient::run(&addr, &token, member, "true")
        != (Answer::Ran {
            code: 0,
            out: String::new(),
        })
    {
        assert!(
            Instant::now() < deadline,
            "the dropped commands' places are still taken"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    pump(c);

    // A member stopped mid-run ends its execs (and refuses new ones).
    let mut running = ExecClient::connect(&addr);
    running.request(&token, member, "sleep 600");
    assert_eq!(running.read().map(|f| f.0), Some(exec::STARTED));
    let (ours2, theirs2, plain2) = (ours.clone(), theirs.clone(), plain.clone());
    c.tokio.block_on(async {
        stop(&mut c.nodes[1], ours2[1].attempt_id).await;
    });
    let t0 = Instant::now();
    let a = running.answer();
    assert!(
        matches!(a, Answer::Ran { code, .. } if code != 0),
        "the exec ends with its container: {a:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert_eq!(ExecClient::run(&addr, &token, member, "true"), refused());
    c.tokio.block_on(async {
        stop(&mut c.nodes[0], ours2[0].attempt_id).await;
        stop(&mut c.nodes[1], theirs2[0].attempt_id).await;
        stop(&mut c.nodes[1], plain2.attempt_id).await;
    });
}

type Test = fn(&mut Ctx);

const TESTS: &[(&str, Test)] = &[
    (
        "openmpi_allreduce_spans_two_nodes",
        openmpi_allreduce_spans_two_nodes,
    ),
    (
        "mpich_allreduce_spans_two_nodes",
        mpich_allreduce_spans_two_nodes,
    ),
    ("openmpi_runs_mpi4py", openmpi_runs_mpi4py),
    (
        "openmpi_pingpong_reports_latency_and_bandwidth",
        openmpi_pingpong_reports_latency_and_bandwidth,
    ),
    (
        "generic_runs_commands_in_members",
        generic_runs_commands_in_members,
    ),
    ("gasnet_is_refused", gasnet_is_refused),
    (
        "host_network_service_is_at_the_node_address",
        host_network_service_is_at_the_node_address,
    ),
    (
        "exec_service_refuses_what_is_not_its_gangs",
        exec_service_refuses_what_is_not_its_gangs,
    ),
];

fn main() {
    let Some(selected) = common::select(TESTS) else {
        return;
    };
    let env = common::env();
    let out = Command::new(common::repo_root().join("scripts/make-mpi-image.sh"))
        .arg(&env.registry)
        .env("GANTRY_TEST_DIR", &env.dir)
        .output()
        .expect("running scripts/make-mpi-image.sh");
    assert!(
        out.status.success(),
        "scripts/make-mpi-image.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mpi_image = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let dir = env
        .dir
        .join("agent-multinode")
        .join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let nodes = (0..2)
        .map(|i| start_agent(&dir, &env.registry, i, &tokio))
        .collect();
    let mut c = Ctx {
        tokio,
        nodes,
        registry: env.registry.clone(),
        mpi_image,
        dir,
    };
    let tally = common::run_all(TESTS.len(), &selected, |t| t(&mut c), || {});
    let dir = c.dir.clone();
    drop(c);
    // What a failed test left running goes with the agents' state (as `node.rs` lays it out).
    for i in 0..2 {
        let state = dir.join(format!("node{i}"));
        let rc = gantry_agent::runtime::RuntimeConfig::new(
            state.join("runtime"),
            state.join("runc"),
            format!("gantry/mntest-{}-{i}", std::process::id()),
        );
        if let Ok(rt) = gantry_agent::runtime::Runtime::new(rc) {
            for id in rt.list() {
                if let Err(e) = rt.remove(&id) {
                    eprintln!("removing leftover container {id}: {e}");
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    tally.finish();
}
