//! Container networking and readiness probes under real runc and the real CNI plugins
//! (`containernetworking-plugins`). A `harness = false` test like `runtime.rs`.
//!
//! Everything lives under `$GANTRY_TEST_DIR/agent-network/<pid>/`: two agents' runtimes and
//! networks (each with its own bridge and subnet, as under `gantry up --agents 2`), and a third
//! agent run whole (`node::run`) against a small WebSocket server in this test. Subnets are
//! taken from 10.231.0.0/16, skipping any the host already routes. Only addresses on this
//! machine are ever contacted. Leftovers of killed runs (containers, namespaces, addresses,
//! bridges) are removed at start.

mod common;

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use gantry_agent::image::{ImageStore, PullConfig};
use gantry_agent::net::{self, NetConfig, NetError, Network, Subnet};
use gantry_agent::node::{self, AgentConfig};
use gantry_agent::probe::{self, Readiness, Target};
use gantry_agent::runtime::{ContainerSpec, ContainerState, Runtime, RuntimeConfig, StartOptions};
use gantry_api::agent::{
    AgentMessage, Assignment, AttemptPhase, Capacity, HostEntry, ImageSource, Probe, ProbeCheck,
    ServerMessage,
};
use gantry_api::EndCause;
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

/// One agent's runtime and network, driven directly.
struct Node {
    dir: PathBuf,
    rt: Runtime,
    net: Network,
    subnet: Subnet,
}

struct Ctx {
    a: Node,
    b: Node,
    layers: Vec<PathBuf>,
    /// This process's directory.
    dir: PathBuf,
    registry: String,
    /// A subnet for the whole agent of the last test.
    agent_subnet: String,
    tokio: tokio::runtime::Runtime,
}

/// Every container's metadata names the test process that owns it.
fn meta() -> serde_json::Value {
    serde_json::json!({ "test_pid": std::process::id() })
}

const WEB: &str =
    "mkdir -p /www && echo hello-from-web > /www/index.html && exec httpd -f -p 8080 -h /www";

impl Ctx {
    fn spec(&self, id: &str, script: &str) -> ContainerSpec {
        ContainerSpec {
            id: id.to_owned(),
            layers: self.layers.clone(),
            args: vec!["/bin/sh".into(), "-c".into(), script.into()],
            env: vec!["PATH=/bin:/usr/bin".into()],
            cwd: "/".into(),
            user: None,
            mounts: vec![],
            files: vec![],
            cpus: 0.5,
            memory_bytes: Some(128 << 20),
            pids_limit: Some(gantry_agent::runtime::DEFAULT_PIDS_LIMIT),
            hostname: id.to_owned(),
            host_network: false,
        }
    }
}

/// Attaches `spec` to the node's bridge and starts it there, with /etc/hosts and resolv.conf
/// as the agent writes them. Returns its address.
fn start_net(node: &Node, mut spec: ContainerSpec, hosts: &[HostEntry]) -> Ipv4Addr {
    let userns = node.rt.job_userns_for(&spec.id).expect("a user namespace");
    let att = node
        .net
        .attach_in(&spec.id, userns.as_deref())
        .expect("attach");
    let ip = att.address.expect("an address");
    spec.files.push((
        "/etc/hosts".into(),
        net::hosts_file(&spec.hostname, ip, hosts).unwrap(),
    ));
    spec.files
        .push(("/etc/resolv.conf".into(), net::resolv_conf()));
    let opts = StartOptions {
        netns: Some(att.netns),
    };
    if let Err(e) = node.rt.start_with(&spec, &meta(), &opts) {
        let _ = node.net.detach(&spec.id);
        panic!("starting {}: {e}", spec.id);
    }
    ip
}

fn remove(node: &Node, id: &str) {
    node.rt.remove(id).unwrap();
    node.net.detach(id).unwrap();
}

fn wait_exit(rt: &Runtime, id: &str) -> ContainerState {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = rt.status(id);
        if s != ContainerState::Running || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn output(rt: &Runtime, id: &str) -> (String, String) {
    let (out, err) = rt.log_paths(id);
    (
        fs::read_to_string(out).unwrap_or_default(),
        fs::read_to_string(err).unwrap_or_default(),
    )
}

/// A plain HTTP GET from the host; the body.
fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let ok = text.starts_with("HTTP/1.") && text.split_whitespace().nth(1) == Some("200");
    if !ok {
        return Err(std::io::Error::other(format!("answer: {text}")));
    }
    Ok(text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned())
}

fn wait_http(addr: SocketAddr, path: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match http_get(addr, path) {
            Ok(body) => return body,
            Err(e) if Instant::now() > deadline => panic!("GET http://{addr}{path}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The interfaces enslaved to a bridge.
fn bridge_ports(bridge: &str) -> Vec<String> {
    fs::read_dir(Path::new("/sys/class/net").join(bridge).join("brif"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Addresses host-local still has allocated.
fn allocations(net_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for n in fs::read_dir(net_dir.join("ipam"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for f in fs::read_dir(n.path()).into_iter().flatten().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.parse::<Ipv4Addr>().is_ok() {
                out.push(name);
            }
        }
    }
    out
}

fn nat_rules() -> String {
    let out = Command::new("iptables")
        .args(["-w", "-t", "nat", "-S"])
        .output()
        .expect("iptables");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Nothing of these containers' networks is left: namespace files and mounts, records, veths
/// on the bridge, address allocations, masquerading rules.
fn assert_clean(node: &Node, ids: &[&str]) {
    let net_dir = &node.net.config().state_dir;
    for id in ids {
        assert!(node.net.attachment(id).is_none(), "{id}: record left");
        assert!(!net_dir.join("netns").join(id).exists(), "{id}: netns left");
        let rule = format!(
            "name: \\\"gantry-{}\\\" id: \\\"{id}\\\"",
            node.net.bridge()
        );
        assert!(
            !nat_rules().contains(&rule),
            "{id}: masquerading rule left:\n{}",
            nat_rules()
        );
    }
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let ns_dir = net_dir.join("netns");
    assert!(
        !mounts.lines().any(|l| l
            .split(' ')
            .nth(4)
            .is_some_and(|m| Path::new(m).starts_with(&ns_dir))),
        "a namespace is still mounted"
    );
    assert_eq!(
        bridge_ports(node.net.bridge()),
        Vec::<String>::new(),
        "veths left"
    );
    assert_eq!(allocations(net_dir), Vec::<String>::new(), "addresses left");
}

fn two_containers_share_a_bridge(c: &Ctx) {
    let a = &c.a;
    let web_ip = start_net(a, c.spec("t-web", WEB), &[]);
    // The host reaches it at its address.
    let body = wait_http(SocketAddr::new(web_ip.into(), 8080), "/index.html");
    assert_eq!(body, "hello-from-web\n");
    let mut client = c.spec(
        "t-client",
        "cat /etc/hosts; echo --; ip -4 -o addr show eth0; echo --; \
         wget -q -O - http://web.svc:8080/index.html; echo --; \
         wget -q -O - http://$WEB_IP:8080/index.html; echo --; \
         if ping -c1 -W5 web.svc >/dev/null; then echo ping-ok; fi; echo --; \
         ip link show lo | grep -q UP && echo lo-up; echo --; cat /etc/resolv.conf",
    );
    client.env.push(format!("WEB_IP={web_ip}"));
    let hosts = [HostEntry {
        name: "web.svc".into(),
        address: web_ip.to_string(),
    }];
    let client_ip = start_net(a, client, &hosts);
    assert_ne!(web_ip, client_ip);
    assert!(a.subnet.contains(web_ip) && a.subnet.contains(client_ip));
    let end = wait_exit(&a.rt, "t-client");
    let (out, err) = output(&a.rt, "t-client");
    assert_eq!(
        end,
        ContainerState::Exited {
            exit_code: 0,
            signal: None
        },
        "{out}{err}"
    );
    let parts: Vec<&str> = out.split("--\n").collect();
    assert_eq!(parts.len(), 7, "{out}{err}");
    assert!(parts[0].starts_with("127.0.0.1\tlocalhost\n"), "{out}");
    assert!(
        parts[0].contains(&format!("{client_ip}\tt-client\n")),
        "{out}"
    );
    assert!(parts[0].contains(&format!("{web_ip}\tweb.svc\n")), "{out}");
    assert!(
        parts[1].contains(&format!("inet {client_ip}/{}", a.subnet.prefix)),
        "{out}"
    );
    assert_eq!(parts[2], "hello-from-web\n", "{out}{err}");
    assert_eq!(parts[3], "hello-from-web\n", "{out}{err}");
    assert_eq!(parts[4], "ping-ok\n", "{out}{err}");
    assert_eq!(parts[5], "lo-up\n", "{out}{err}");
    assert_eq!(parts[6].as_bytes(), net::resolv_conf(), "{out}");
    // Both are on this agent's bridge while they exist.
    assert_eq!(bridge_ports(a.net.bridge()).len(), 2);
    remove(a, "t-web");
    remove(a, "t-client");
    assert_clean(a, &["t-web", "t-client"]);
}

fn agents_on_one_host_get_their_own_bridges(c: &Ctx) {
    assert_ne!(c.a.net.bridge(), c.b.net.bridge());
    assert!(c.a.net.bridge().len() <= 15 && c.b.net.bridge().len() <= 15);
    // The same container id on both: nothing of one agent's network may touch the other's.
    let id = "t-same";
    let ip_a = start_net(&c.a, c.spec(id, WEB), &[]);
    let ip_b = start_net(&c.b, c.spec(id, WEB), &[]);
    assert!(c.a.subnet.contains(ip_a), "{ip_a} in {}", c.a.subnet);
    assert!(c.b.subnet.contains(ip_b), "{ip_b} in {}", c.b.subnet);
    for (node, ip) in [(&c.a, ip_a), (&c.b, ip_b)] {
        let body = wait_http(SocketAddr::new(ip.into(), 8080), "/index.html");
        assert_eq!(body, "hello-from-web\n");
        assert_eq!(bridge_ports(node.net.bridge()).len(), 1);
        // The bridge holds the subnet's gateway address.
        let out = Command::new("ip")
            .args(["-4", "-o", "addr", "show", "dev", node.net.bridge()])
            .output()
            .unwrap();
        let gw = Ipv4Addr::from(u32::from(node.subnet.network) + 1);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("inet {gw}/")), "{text}");
    }
    remove(&c.a, id);
    // B's container is untouched by A's removal.
    let body = http_get(SocketAddr::new(ip_b.into(), 8080), "/index.html").unwrap();
    assert_eq!(body, "hello-from-web\n");
    assert_clean(&c.a, &[id]);
    remove(&c.b, id);
    assert_clean(&c.b, &[id]);
}

fn failures_and_leftovers_are_cleaned(c: &Ctx) {
    let scratch = c.dir.join("failures");
    // No subnet yet: a clear error, nothing made.
    let fresh = Network::new(NetConfig {
        state_dir: scratch.join("fresh"),
        bridge: net::bridge_name("nettest-fresh"),
        plugin_dir: None,
    })
    .unwrap();
    let err = fresh.attach("t-nosubnet").unwrap_err();
    assert!(matches!(err, NetError::NoSubnet), "{err}");
    assert!(err.to_string().contains("subnet"), "{err}");
    // Plugins missing: the error says so, and the namespace made first is gone again.
    let empty = scratch.join("no-plugins");
    fs::create_dir_all(&empty).unwrap();
    let broken = Network::new(NetConfig {
        state_dir: scratch.join("broken"),
        bridge: net::bridge_name("nettest-broken"),
        plugin_dir: Some(empty),
    })
    .unwrap();
    broken.set_subnet(&c.a.subnet.to_string()).unwrap();
    let err = broken.attach("t-noplugin").unwrap_err();
    assert!(
        err.to_string().contains("containernetworking-plugins"),
        "{err}"
    );
    assert_eq!(
        fs::read_dir(scratch.join("broken/netns")).unwrap().count(),
        0
    );
    assert!(broken.attachments().is_empty());
    assert!(!Path::new("/sys/class/net").join(broken.bridge()).exists());
    // A namespace that does not exist is refused by the runtime.
    let err =
        c.a.rt
            .start_with(
                &c.spec("t-nons", "true"),
                &meta(),
                &StartOptions {
                    netns: Some(scratch.join("nope")),
                },
            )
            .unwrap_err();
    assert!(err.to_string().contains("network namespace"), "{err}");
    assert!(!c.a.rt.list().contains(&"t-nons".to_owned()));
    // Leftovers of a crash: an attachment whose container is gone, a namespace file nothing
    // records, an address nothing owns. `cleanup` keeps what is live.
    let a = &c.a;
    let live = a.net.attach("t-live").unwrap();
    let orphan = a.net.attach("t-orphan").unwrap();
    assert_ne!(live.address, orphan.address);
    let stray_ns = a.net.config().state_dir.join("netns/t-stray");
    net::netns::create(&stray_ns).unwrap();
    assert!(net::netns::is_mounted(&stray_ns));
    let ipam_net = fs::read_dir(a.net.config().state_dir.join("ipam"))
        .unwrap()
        .flatten()
        .find(|e| e.path().is_dir())
        .unwrap()
        .path();
    let stray_ip = Ipv4Addr::from(u32::from(a.subnet.network) + 200);
    fs::write(ipam_net.join(stray_ip.to_string()), "t-dead\r\neth0").unwrap();
    let gone = a.net.cleanup(&["t-live".to_owned()]);
    assert!(gone.contains(&"t-orphan".to_owned()), "{gone:?}");
    assert!(gone.contains(&"t-stray".to_owned()), "{gone:?}");
    assert!(!stray_ns.exists());
    assert_eq!(
        allocations(&a.net.config().state_dir),
        vec![live.address.unwrap().to_string()]
    );
    assert!(a.net.attachment("t-live").is_some());
    // Attaching again returns what is there; detaching twice is harmless.
    assert_eq!(a.net.attach("t-live").unwrap(), live);
    a.net.detach("t-live").unwrap();
    a.net.detach("t-live").unwrap();
    assert_clean(a, &["t-live", "t-orphan", "t-stray"]);
}

fn probe_of(check: ProbeCheck, success_threshold: u32) -> Probe {
    Probe {
        check,
        initial_delay_seconds: 0,
        period_seconds: 1,
        timeout_seconds: 1,
        success_threshold,
        failure_threshold: 3,
    }
}

fn http_probe(port: u16) -> ProbeCheck {
    ProbeCheck::HttpGet {
        path: "/index.html".into(),
        port,
        scheme: "http".into(),
        headers: vec![("X-Probe".into(), "gantry".into())],
    }
}

fn http_probe_waits_for_the_server(c: &Ctx) {
    let a = &c.a;
    let script = format!("sleep 2; {WEB}");
    let ip = start_net(a, c.spec("t-slow", &script), &[]);
    let target = Target {
        runtime: a.rt.clone(),
        id: "t-slow".into(),
        address: Some(ip.into()),
    };
    let t = Duration::from_secs(1);
    // The server is not up yet: the check fails.
    let first = c
        .tokio
        .block_on(probe::check(&http_probe(8080), &target, t));
    assert!(first.is_err(), "passed before httpd started");
    let ready = c.tokio.block_on(probe::wait_ready(
        &probe_of(http_probe(8080), 2),
        &target,
        || true,
    ));
    assert_eq!(ready, Readiness::Ready);
    // Ready means it serves.
    let body = http_get(SocketAddr::new(ip.into(), 8080), "/index.html").unwrap();
    assert_eq!(body, "hello-from-web\n");
    // A status outside 200-399 fails.
    let missing = ProbeCheck::HttpGet {
        path: "/missing".into(),
        port: 8080,
        scheme: "http".into(),
        headers: vec![],
    };
    let err = c
        .tokio
        .block_on(probe::check(&missing, &target, t))
        .unwrap_err();
    assert!(err.contains("404"), "{err}");
    remove(a, "t-slow");
    assert_clean(a, &["t-slow"]);
}

fn probe_on_a_wrong_port_never_passes(c: &Ctx) {
    let a = &c.a;
    let ip = start_net(a, c.spec("t-wrong", WEB), &[]);
    wait_http(SocketAddr::new(ip.into(), 8080), "/index.html");
    let target = Target {
        runtime: a.rt.clone(),
        id: "t-wrong".into(),
        address: Some(ip.into()),
    };
    for check in [http_probe(8081), ProbeCheck::TcpSocket { port: 8081 }] {
        let until = Instant::now() + Duration::from_secs(4);
        let ready = c
            .tokio
            .block_on(probe::wait_ready(&probe_of(check, 1), &target, || {
                Instant::now() < until
            }));
        assert_eq!(ready, Readiness::Gone);
    }
    remove(a, "t-wrong");
    // A container that exits before its probe passes ends the wait.
    let ip = start_net(a, c.spec("t-exits", "sleep 2; exit 3"), &[]);
    let target = Target {
        runtime: a.rt.clone(),
        id: "t-exits".into(),
        address: Some(ip.into()),
    };
    let ready = c.tokio.block_on(probe::wait_ready(
        &probe_of(http_probe(8080), 1),
        &target,
        || true,
    ));
    assert_eq!(ready, Readiness::Gone);
    assert!(matches!(
        wait_exit(&a.rt, "t-exits"),
        ContainerState::Exited { exit_code: 3, .. }
    ));
    remove(a, "t-exits");
    assert_clean(a, &["t-wrong", "t-exits"]);
}

fn tcp_and_exec_probes_pass(c: &Ctx) {
    let a = &c.a;
    let ip = start_net(a, c.spec("t-probes", WEB), &[]);
    let target = Target {
        runtime: a.rt.clone(),
        id: "t-probes".into(),
        address: Some(ip.into()),
    };
    let t = Duration::from_secs(1);
    let tcp = ProbeCheck::TcpSocket { port: 8080 };
    let ready = c
        .tokio
        .block_on(probe::wait_ready(&probe_of(tcp, 2), &target, || true));
    assert_eq!(ready, Readiness::Ready);
    let exec = |argv: &[&str], timeout: Duration| {
        let check = ProbeCheck::Exec {
            command: argv.iter().map(|s| s.to_string()).collect(),
        };
        c.tokio.block_on(probe::check(&check, &target, timeout))
    };
    exec(&["test", "-f", "/www/index.html"], t).unwrap();
    let ready = c.tokio.block_on(probe::wait_ready(
        &probe_of(
            ProbeCheck::Exec {
                command: vec!["cat".into(), "/www/index.html".into()],
            },
            1,
        ),
        &target,
        || true,
    ));
    assert_eq!(ready, Readiness::Ready);
    let err = exec(&["sh", "-c", "echo nope; exit 3"], t).unwrap_err();
    assert!(
        err.contains("exited with 3") && err.contains("nope"),
        "{err}"
    );
    let err = exec(&["sleep", "60"], t).unwrap_err();
    assert!(err.contains("did not finish"), "{err}");
    // The timed-out command was killed, not left running in the container.
    let ps = || {
        a.rt.exec(
            "t-probes",
            &["ps".into(), "-o".into(), "pid,stat,comm".into()],
            Duration::from_secs(10),
        )
        .unwrap()
        .output
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = ps();
    while out.contains("sleep") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        out = ps();
    }
    assert!(!out.contains("sleep"), "{out}");
    // What runc execs into the container is confined like the container itself.
    let status =
        a.rt.exec(
            "t-probes",
            &[
                "grep".into(),
                "^Seccomp:".into(),
                "/proc/self/status".into(),
            ],
            Duration::from_secs(10),
        )
        .unwrap()
        .output;
    assert_eq!(status.trim(), "Seccomp:\t2");
    remove(a, "t-probes");
    assert_clean(a, &["t-probes"]);

    // Without a network of its own, the service is probed at 127.0.0.1 in its namespace.
    let spec = c.spec("t-lo", WEB);
    a.rt.start(&spec, &meta()).unwrap();
    let target = Target {
        runtime: a.rt.clone(),
        id: "t-lo".into(),
        address: None,
    };
    for check in [ProbeCheck::TcpSocket { port: 8080 }, http_probe(8080)] {
        let ready = c
            .tokio
            .block_on(probe::wait_ready(&probe_of(check, 1), &target, || true));
        assert_eq!(ready, Readiness::Ready);
    }
    a.rt.remove("t-lo").unwrap();
}

// --- the whole agent against a small server -------------------------------------------------

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// What the test server saw of the agent.
#[derive(Default)]
struct Seen {
    statuses: HashMap<Uuid, Vec<AttemptPhase>>,
    logs: HashMap<Uuid, Vec<u8>>,
}

async fn send(ws: &mut Ws, m: &ServerMessage) {
    let text = serde_json::to_string(m).unwrap();
    ws.send(Message::Text(text.into())).await.unwrap();
}

async fn recv(ws: &mut Ws, seen: &mut Seen) -> AgentMessage {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(120), ws.next())
            .await
            .expect("the agent said nothing for two minutes")
            .expect("the agent hung up")
            .expect("websocket");
        let Message::Text(t) = msg else { continue };
        let m: AgentMessage = serde_json::from_str(t.as_str()).unwrap();
        match &m {
            AgentMessage::Status(r) => seen
                .statuses
                .entry(r.attempt_id)
                .or_default()
                .push(r.phase.clone()),
            AgentMessage::Log(l) => {
                let data = base64::engine::general_purpose::STANDARD
                    .decode(&l.data)
                    .unwrap();
                let buf = seen.logs.entry(l.attempt_id).or_default();
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
async fn until_status(
    ws: &mut Ws,
    seen: &mut Seen,
    id: Uuid,
    pred: impl Fn(&AttemptPhase) -> bool,
) -> AttemptPhase {
    loop {
        if let AgentMessage::Status(r) = recv(ws, seen).await {
            if r.attempt_id == id && pred(&r.phase) {
                return r.phase;
            }
        }
    }
}

/// Accepts the agent's connection, reads its Hello and welcomes it.
async fn welcome(
    listener: &tokio::net::TcpListener,
    subnet: &str,
    desired: Vec<Assignment>,
) -> (Ws, Vec<Uuid>) {
    let (sock, _) = tokio::time::timeout(Duration::from_secs(60), listener.accept())
        .await
        .expect("the agent did not connect")
        .unwrap();
    let mut ws = tokio_tungstenite::accept_async(sock).await.unwrap();
    let mut seen = Seen::default();
    let AgentMessage::Hello { attempts, .. } = recv(&mut ws, &mut seen).await else {
        panic!("the first message is not Hello");
    };
    send(
        &mut ws,
        &ServerMessage::Welcome {
            node_id: Uuid::new_v4(),
            heartbeat_interval_ms: 1000,
            subnet: Some(subnet.to_owned()),
        },
    )
    .await;
    send(&mut ws, &ServerMessage::Desired { attempts: desired }).await;
    (ws, attempts)
}

fn assignment(
    registry: &str,
    task: &str,
    script: &str,
    hosts: &[(String, String)],
    readiness: Option<Probe>,
) -> Assignment {
    let mut v = serde_json::json!({
        "attempt_id": Uuid::new_v4(),
        "workflow_id": Uuid::new_v4(),
        "task": task,
        "attempt": 1,
        "image": { "uri": format!("docker://{registry}/library/busybox:1") },
        "argv": ["/bin/sh", "-c", script],
        "env": [],
        "resources": { "cpus": 0.5, "memory_bytes": 128u64 << 20 },
        "network": {
            "hosts": hosts
                .iter()
                .map(|(n, a)| serde_json::json!({ "name": n, "address": a }))
                .collect::<Vec<_>>(),
        },
    });
    if let Some(p) = readiness {
        v["service"] = serde_json::json!({
            "ports": [{ "name": "http", "port": 8080, "protocol": "tcp" }],
            "readiness": p,
        });
    }
    serde_json::from_value(v).unwrap()
}

fn running_address(p: &AttemptPhase) -> Option<String> {
    match p {
        AttemptPhase::Running { address } => address.clone(),
        _ => None,
    }
}

fn agent_reports_running_after_readiness(c: &Ctx) {
    let pid = std::process::id();
    let name = format!("nettest-{pid}-agent");
    let state = c.dir.join("agent");
    fs::create_dir_all(&state).unwrap();
    fs::write(state.join("cgroup_parent"), format!("gantry/{name}")).unwrap();
    let listener = c
        .tokio
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let config = AgentConfig {
        server: format!("http://{addr}"),
        token: "test".into(),
        pool: "default".into(),
        name: name.clone(),
        capacity: Capacity {
            cpus: 2,
            memory_bytes: 1 << 30,
            devices: Default::default(),
        },
        storage_root: c.dir.join("storage"),
        state_dir: state.clone(),
        pull: PullConfig {
            insecure_hosts: vec![c.registry.clone()],
            ..Default::default()
        },
        metrics_listen: None,
        node_exporter: None,
        job_userns: Some(gantry_agent::runtime::JOB_IDS),
    };
    let subnet: Subnet = c.agent_subnet.parse().unwrap();
    let probe = probe_of(http_probe(8080), 1);
    let web = assignment(
        &c.registry,
        "web",
        &format!("sleep 3; {WEB}"),
        &[],
        Some(probe.clone()),
    );
    // The agent's first life.
    let agent1 = tokio::runtime::Runtime::new().unwrap();
    agent1.spawn(node::run(config.clone()));
    let (web_addr, client, slow) = c.tokio.block_on(async {
        let (mut ws, known) = welcome(&listener, &c.agent_subnet, vec![]).await;
        assert!(known.is_empty());
        let mut seen = Seen::default();
        send(&mut ws, &ServerMessage::Assign(Box::new(web.clone()))).await;
        let p = until_status(&mut ws, &mut seen, web.attempt_id, |p| {
            !matches!(p, AttemptPhase::Preparing)
        })
        .await;
        let web_addr = running_address(&p).unwrap_or_else(|| panic!("{p:?}"));
        // RUNNING comes only once the probe passes: the server answers right away.
        let ip: Ipv4Addr = web_addr.parse().unwrap();
        assert!(subnet.contains(ip), "{ip} in {subnet}");
        let body = http_get(SocketAddr::new(ip.into(), 8080), "/index.html")
            .expect("RUNNING was reported before the service was ready");
        assert_eq!(body, "hello-from-web\n");
        assert_eq!(seen.statuses[&web.attempt_id][0], AttemptPhase::Preparing);

        // A networked job: RUNNING with its own address at once; web.svc resolves.
        let client = assignment(
            &c.registry,
            "client",
            "wget -q -O - http://web.svc:8080/index.html",
            &[("web.svc".into(), web_addr.clone())],
            None,
        );
        send(&mut ws, &ServerMessage::Assign(Box::new(client.clone()))).await;
        let p = until_status(&mut ws, &mut seen, client.attempt_id, |p| {
            !matches!(p, AttemptPhase::Preparing)
        })
        .await;
        let client_addr = running_address(&p).unwrap_or_else(|| panic!("{p:?}"));
        assert_ne!(client_addr, web_addr);
        let end = until_status(&mut ws, &mut seen, client.attempt_id, |p| {
            matches!(p, AttemptPhase::Exited { .. })
        })
        .await;
        assert_eq!(
            end,
            AttemptPhase::Exited {
                exit_code: 0,
                cause: EndCause::Exit
            }
        );
        assert_eq!(seen.logs[&client.attempt_id], b"hello-from-web\n");

        // A service whose probe has not passed when the agent goes away.
        let slow = assignment(
            &c.registry,
            "slow",
            &format!("sleep 8; {WEB}"),
            &[],
            Some(probe.clone()),
        );
        send(&mut ws, &ServerMessage::Assign(Box::new(slow.clone()))).await;
        let pid_file = state
            .join("runtime/containers")
            .join(slow.attempt_id.to_string())
            .join("container.pid");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !pid_file.exists() {
            assert!(Instant::now() < deadline, "slow never started");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (web_addr, client, slow)
    });
    agent1.shutdown_background();
    let slow_addr = fresh_agent_net(&state, &name)
        .attachment(&slow.attempt_id.to_string())
        .and_then(|a| a.address)
        .expect("slow has an address")
        .to_string();

    // The agent's second life: it re-adopts all three, forgets the job the server no longer
    // wants, reports web RUNNING again without probing, and resumes slow's probe.
    let agent2 = tokio::runtime::Runtime::new().unwrap();
    agent2.spawn(node::run(config));
    c.tokio.block_on(async {
        let desired = vec![web.clone(), slow.clone()];
        let (mut ws, mut known) = welcome(&listener, &c.agent_subnet, desired).await;
        known.sort();
        let mut expected = vec![web.attempt_id, client.attempt_id, slow.attempt_id];
        expected.sort();
        assert_eq!(known, expected);
        let mut seen = Seen::default();
        let p = until_status(&mut ws, &mut seen, web.attempt_id, |p| {
            matches!(p, AttemptPhase::Running { .. })
        })
        .await;
        assert_eq!(running_address(&p), Some(web_addr.clone()));
        let p = until_status(&mut ws, &mut seen, slow.attempt_id, |p| {
            !matches!(p, AttemptPhase::Preparing)
        })
        .await;
        assert_eq!(running_address(&p), Some(slow_addr.clone()), "{p:?}");
        let ip: Ipv4Addr = slow_addr.parse().unwrap();
        http_get(SocketAddr::new(ip.into(), 8080), "/index.html")
            .expect("RUNNING was reported before the service was ready");

        for id in [web.attempt_id, slow.attempt_id] {
            send(
                &mut ws,
                &ServerMessage::Stop {
                    attempt_id: id,
                    grace_ms: 2000,
                    cause: EndCause::Stopped,
                },
            )
            .await;
            let end = until_status(&mut ws, &mut seen, id, |p| {
                matches!(p, AttemptPhase::Exited { .. })
            })
            .await;
            assert!(
                matches!(
                    end,
                    AttemptPhase::Exited {
                        cause: EndCause::Stopped,
                        ..
                    }
                ),
                "{end:?}"
            );
            send(&mut ws, &ServerMessage::Forget { attempt_id: id }).await;
        }
        // Everything goes: containers, namespaces, addresses.
        let containers = state.join("runtime/containers");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = fs::read_dir(&containers).map(|d| d.count()).unwrap_or(0)
                + fs::read_dir(state.join("net/attachments"))
                    .map(|d| d.count())
                    .unwrap_or(0);
            if left == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{left} containers or networks left"
            );
            // Keep reading so the agent's messages never back up.
            let _ =
                tokio::time::timeout(Duration::from_millis(200), recv(&mut ws, &mut seen)).await;
        }
    });
    agent2.shutdown_background();
    let net = fresh_agent_net(&state, &name);
    let node = Node {
        dir: state.clone(),
        rt: agent_runtime(&state),
        net,
        subnet,
    };
    assert_clean(
        &node,
        &[
            &web.attempt_id.to_string(),
            &client.attempt_id.to_string(),
            &slow.attempt_id.to_string(),
        ],
    );
    assert!(node.dir.join("net").is_dir());
}

/// The network of the agent run whole, seen from outside it.
fn fresh_agent_net(state: &Path, name: &str) -> Network {
    Network::new(NetConfig::for_agent(state, name)).unwrap()
}

/// The runtime of an agent laid out as `node::run` lays it out.
fn agent_runtime(state: &Path) -> Runtime {
    let cgroup = fs::read_to_string(state.join("cgroup_parent"))
        .unwrap_or_else(|_| "gantry-test/network-leftover".into());
    Runtime::new(RuntimeConfig::new(
        state.join("runtime"),
        state.join("runc"),
        cgroup.trim(),
    ))
    .unwrap()
}

// --- setup and cleanup ----------------------------------------------------------------------

type Test = (&'static str, fn(&Ctx));

const TESTS: &[Test] = &[
    (
        "two_containers_share_a_bridge",
        two_containers_share_a_bridge,
    ),
    (
        "agents_on_one_host_get_their_own_bridges",
        agents_on_one_host_get_their_own_bridges,
    ),
    (
        "failures_and_leftovers_are_cleaned",
        failures_and_leftovers_are_cleaned,
    ),
    (
        "http_probe_waits_for_the_server",
        http_probe_waits_for_the_server,
    ),
    (
        "probe_on_a_wrong_port_never_passes",
        probe_on_a_wrong_port_never_passes,
    ),
    ("tcp_and_exec_probes_pass", tcp_and_exec_probes_pass),
    (
        "agent_reports_running_after_readiness",
        agent_reports_running_after_readiness,
    ),
];

/// Subnets of 10.231.0.0/16 that the host routes nowhere yet.
fn free_subnets(n: usize) -> Vec<String> {
    let out = Command::new("ip").args(["-4", "route"]).output().unwrap();
    let routes = String::from_utf8_lossy(&out.stdout).into_owned();
    let start = std::process::id() as usize % 200;
    (0..250)
        .map(|i| (start + i) % 250 + 1)
        .filter(|k| !routes.contains(&format!("10.231.{k}.")))
        .take(n)
        .map(|k| format!("10.231.{k}.0/24"))
        .collect()
}

/// Tears down one agent's state directory: containers, networks, bridge, then the files.
fn teardown_agent(state: &Path) {
    if state.join("runtime").is_dir() {
        let rt = agent_runtime(state);
        for id in rt.list() {
            if let Err(e) = rt.remove(&id) {
                eprintln!("removing leftover container {id}: {e}");
            }
        }
    }
    if state.join("net").is_dir() {
        let bridge = fs::read_to_string(state.join("net/bridge"))
            .map(|b| b.trim().to_owned())
            .unwrap_or_else(|_| "gtrnone".into());
        if let Ok(net) = Network::new(NetConfig {
            state_dir: state.join("net"),
            bridge,
            plugin_dir: None,
        }) {
            net.cleanup(&[]);
            if let Err(e) = net.remove_bridge() {
                eprintln!("removing a leftover bridge: {e}");
            }
        }
    }
}

/// Tears down a test process's directory.
fn teardown(dir: &Path) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        if e.path().is_dir() {
            teardown_agent(&e.path());
        }
    }
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for m in info.lines().filter_map(|l| l.split(' ').nth(4)) {
        if Path::new(m).starts_with(dir) {
            let c = std::ffi::CString::new(m).unwrap();
            // SAFETY: valid NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
    if let Err(e) = fs::remove_dir_all(dir) {
        eprintln!("removing {}: {e}", dir.display());
    }
}

/// Removes what killed earlier runs left (their pid is gone).
fn clean_dead(base: &Path) {
    let Ok(rd) = fs::read_dir(base) else { return };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if !common::pid_alive(pid) {
            teardown(&e.path());
        }
    }
}

/// Removes containers and networks a failed test left in the two directly driven agents.
fn clean_between(c: &Ctx) {
    for node in [&c.a, &c.b] {
        for id in node.rt.list() {
            let _ = node.rt.remove(&id);
        }
        node.net.cleanup(&[]);
    }
}

fn make_node(dir: &Path, name: &str, subnet: &str) -> Node {
    let state = dir.join(name);
    fs::create_dir_all(&state).unwrap();
    let cgroup = format!("gantry-test/network-{}-{name}", std::process::id());
    fs::write(state.join("cgroup_parent"), &cgroup).unwrap();
    let rt = agent_runtime(&state);
    let net = Network::new(NetConfig::for_agent(
        &state,
        &format!("nettest-{}-{name}", std::process::id()),
    ))
    .unwrap();
    let subnet = net.set_subnet(subnet).unwrap();
    Node {
        dir: state,
        rt,
        net,
        subnet,
    }
}

fn main() {
    let Some(selected) = common::select(TESTS) else {
        return;
    };
    assert!(
        net::find_plugin_dir().is_some(),
        "no CNI plugins: apt-get install containernetworking-plugins"
    );

    let env = common::env();
    let base = env.dir.join("agent-network");
    fs::create_dir_all(&base).unwrap();
    clean_dead(&base);
    let dir = base.join(std::process::id().to_string());
    teardown(&dir);
    fs::create_dir_all(&dir).unwrap();

    // The bridge plugin turns IPv4 forwarding on (isGateway); put it back if nothing else
    // on this host needs it when we are done.
    let forwarding = common::forwarding();
    let subnets = free_subnets(3);
    assert_eq!(subnets.len(), 3, "no free subnets in 10.231.0.0/16");
    let a = make_node(&dir, "a", &subnets[0]);
    let b = make_node(&dir, "b", &subnets[1]);

    let tokio = tokio::runtime::Runtime::new().unwrap();
    let images = ImageStore::new(
        base.join("images"),
        PullConfig {
            insecure_hosts: vec![env.registry.clone()],
            ..Default::default()
        },
    )
    .expect("image store");
    let source: ImageSource = serde_json::from_value(serde_json::json!({
        "uri": format!("docker://{}/library/busybox:1", env.registry)
    }))
    .unwrap();
    let image = tokio
        .block_on(images.prepare(&source))
        .expect("pulling busybox");
    let ctx = Ctx {
        a,
        b,
        layers: image.layers,
        dir: dir.clone(),
        registry: env.registry.clone(),
        agent_subnet: subnets[2].clone(),
        tokio,
    };

    let tally = common::run_all(
        TESTS.len(),
        &selected,
        |t| t(&ctx),
        || {
            clean_between(&ctx);
        },
    );
    drop(ctx);
    // Bridges, namespaces, addresses and files: nothing of this run stays.
    teardown(&dir);
    common::restore_forwarding(&forwarding);
    tally.finish();
}
