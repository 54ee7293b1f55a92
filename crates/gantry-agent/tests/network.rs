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
use gantry_agent::net::{self, Attachment, HostPort, NetConfig, NetError, Network, Policy, Subnet};
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
    /// Subnets for the agents run whole.
    agent_subnet: String,
    restart_subnet: String,
    services_subnet: String,
    tokio: tokio::runtime::Runtime,
    /// Listeners on every host address: node a's containers may reach `allowed`
    /// (`--host-allow`), nobody's may reach `denied`.
    host_ports: HostPorts,
    outside: Outside,
}

struct HostPorts {
    allowed: u16,
    denied: u16,
}

/// A host of the outside world: a network namespace behind a veth pair routed from the host.
/// Node a's agent is told that the Gantry server is at `server:server_port`.
struct Outside {
    ns: PathBuf,
    /// Where node a's agent finds the server (its endpoint proxy).
    server: Ipv4Addr,
    /// A second address of the same host, not the server's.
    other: Ipv4Addr,
    /// A plain service out there.
    port: u16,
    server_port: u16,
    udp: std::net::UdpSocket,
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

/// A container of `workflow` that may reach the outside world.
fn policy(workflow: &str) -> Policy {
    Policy {
        workflow: workflow.into(),
        egress: true,
        peers: vec![],
        node_services: vec![],
    }
}

/// Attaches `spec` to the node's bridge and starts it there, with /etc/hosts and resolv.conf
/// as the agent writes them, as a container of workflow `wf-test`. Returns its address.
fn start_net(node: &Node, spec: ContainerSpec, hosts: &[HostEntry]) -> Ipv4Addr {
    start_in(node, spec, hosts, &policy("wf-test"))
}

/// [`start_net`] for a container with its own policy.
fn start_in(node: &Node, spec: ContainerSpec, hosts: &[HostEntry], p: &Policy) -> Ipv4Addr {
    let att = attach_for(node, &spec.id, p);
    start_attached(node, spec, hosts, &att)
}

/// The network of container `id`, made in the user namespace it will run in (as the agent
/// does).
fn attach_for(node: &Node, id: &str, p: &Policy) -> Attachment {
    let userns = node.rt.job_userns_for(id).expect("a user namespace");
    node.net.attach(id, p, userns.as_deref()).expect("attach")
}

/// Starts a container in the network [`attach_for`] made for it.
fn start_attached(
    node: &Node,
    mut spec: ContainerSpec,
    hosts: &[HostEntry],
    att: &Attachment,
) -> Ipv4Addr {
    let ip = att.address.expect("an address");
    spec.files.push((
        "/etc/hosts".into(),
        net::hosts_file(&spec.hostname, ip, hosts).unwrap(),
    ));
    spec.files
        .push(("/etc/resolv.conf".into(), net::resolv_conf()));
    let opts = StartOptions {
        netns: Some(att.netns.clone()),
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
    assert_eq!(
        firewall_members(node.net.bridge()),
        Vec::<String>::new(),
        "firewall entries left"
    );
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
        ..Default::default()
    })
    .unwrap();
    let err = fresh
        .attach("t-nosubnet", &policy("wf-test"), None)
        .unwrap_err();
    assert!(matches!(err, NetError::NoSubnet), "{err}");
    assert!(err.to_string().contains("subnet"), "{err}");
    // Plugins missing: the error says so, and the namespace made first is gone again.
    let empty = scratch.join("no-plugins");
    fs::create_dir_all(&empty).unwrap();
    let broken = Network::new(NetConfig {
        state_dir: scratch.join("broken"),
        bridge: net::bridge_name("nettest-broken"),
        plugin_dir: Some(empty),
        ..Default::default()
    })
    .unwrap();
    broken.set_subnet(&c.a.subnet.to_string()).unwrap();
    let err = broken
        .attach("t-noplugin", &policy("wf-test"), None)
        .unwrap_err();
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
    let live = a.net.attach("t-live", &policy("wf-test"), None).unwrap();
    let orphan = a.net.attach("t-orphan", &policy("wf-test"), None).unwrap();
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
    assert_eq!(
        a.net.attach("t-live", &policy("wf-test"), None).unwrap(),
        live
    );
    // A workflow id that is not a plain name is refused before anything is made.
    let err = a.net.attach("t-badwf", &policy("../x"), None).unwrap_err();
    assert!(matches!(err, NetError::BadWorkflow(_)), "{err}");
    assert!(a.net.attachment("t-badwf").is_none());
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

// --- tenant isolation -------------------------------------------------------------------------

/// `nft -j ARGS`: the objects it lists.
fn nft_json(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new("nft")
        .arg("-j")
        .args(args)
        .output()
        .expect("nft");
    assert!(
        out.status.success(),
        "nft {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["nftables"].as_array().cloned().unwrap_or_default()
}

/// The packets the counters of one chain of an agent's firewall have dropped.
fn drops(family: &str, table: &str, chain: &str) -> u64 {
    let mut n = 0;
    for item in nft_json(&["list", "chain", family, table, chain]) {
        for e in item["rule"]["expr"].as_array().into_iter().flatten() {
            n += e["counter"]["packets"].as_u64().unwrap_or(0);
        }
    }
    n
}

/// What the tables of an agent's firewall still hold of containers: elements of its sets and
/// maps, and workflow chains. Empty when no container is attached.
fn firewall_members(table: &str) -> Vec<String> {
    let mut left = vec![];
    for family in ["bridge", "inet"] {
        for item in nft_json(&["list", "table", family, table]) {
            for kind in ["set", "map"] {
                let s = &item[kind];
                let name = s["name"].as_str().unwrap_or_default();
                let fixed = ["host_allow", "server", "server_hosts"].contains(&name);
                if !fixed && s["elem"].as_array().is_some_and(|e| !e.is_empty()) {
                    left.push(format!("{family} {kind} {name}: {}", s["elem"]));
                }
                if name.starts_with("m_") {
                    left.push(format!("{family} set {name}"));
                }
            }
            if let Some(name) = item["chain"]["name"].as_str() {
                if name.starts_with('w') {
                    left.push(format!("{family} chain {name}"));
                }
            }
        }
    }
    left
}

/// Runs `script` in a fresh container of `policy` on `node` to its end; its stdout.
fn run_in_net(
    c: &Ctx,
    node: &Node,
    id: &str,
    script: &str,
    hosts: &[HostEntry],
    p: &Policy,
) -> String {
    start_in(node, c.spec(id, script), hosts, p);
    finish(node, id)
}

/// Waits for a started container's end; its stdout (stderr too on failure), then removes it.
fn finish(node: &Node, id: &str) -> String {
    let end = wait_exit(&node.rt, id);
    let (out, err) = output(&node.rt, id);
    remove(node, id);
    assert!(
        matches!(end, ContainerState::Exited { exit_code: 0, .. }),
        "{id}: {end:?}\n{out}{err}"
    );
    out
}

/// A shell script that tries a TCP connection to each target at once (3 s each at most) and
/// prints `NAME open` or `NAME closed` for each, one line a target, sorted.
fn connect_script(targets: &[(&str, Ipv4Addr, u16)]) -> String {
    let mut s = String::new();
    for (name, ip, port) in targets {
        s.push_str(&format!(
            "(if nc -w 3 {ip} {port} </dev/null >/dev/null 2>&1; then echo '{name} open'; \
             else echo '{name} closed'; fi) > /tmp/{name} &\n"
        ));
    }
    s.push_str("wait; cat /tmp/* | sort\n");
    s
}

fn expect_lines(pairs: &[(&str, bool)]) -> String {
    let mut v: Vec<String> = pairs
        .iter()
        .map(|(n, open)| format!("{n} {}", if *open { "open" } else { "closed" }))
        .collect();
    v.sort();
    v.iter().map(|l| format!("{l}\n")).collect()
}

/// Fetches `http://ADDR:8080/index.html` and prints the body, or `refused` (after 5 s at most;
/// this busybox's `wget -T` crashes).
fn fetch_script(addr: &str) -> String {
    format!(
        "if timeout 5 wget -q -O - http://{addr}:8080/index.html; then :; else echo refused; fi"
    )
}

fn gateway(node: &Node) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(node.subnet.network) + 1)
}

fn workflows_are_kept_apart_on_one_node(c: &Ctx) {
    let a = &c.a;
    let (wa, wb) = (policy("wf-a"), policy("wf-b"));
    let web = start_in(a, c.spec("t-iso-web", WEB), &[], &wa);
    let web_b = start_in(a, c.spec("t-iso-web-b", WEB), &[], &wb);
    // The agent itself (the host) reaches both: that is how it probes them.
    for ip in [web, web_b] {
        assert_eq!(
            wait_http(SocketAddr::new(ip.into(), 8080), "/index.html"),
            "hello-from-web\n"
        );
    }
    let hosts = [HostEntry {
        name: "web.svc".into(),
        address: web.to_string(),
    }];
    let pings = |ip: Ipv4Addr| {
        format!("if ping -c1 -W2 {ip} >/dev/null; then echo ping-ok; else echo ping-no; fi")
    };
    // A's job reaches A's service by name and by address.
    let script = format!(
        "{}; {}; {}",
        fetch_script("web.svc"),
        fetch_script(&web.to_string()),
        pings(web)
    );
    let out = run_in_net(c, a, "t-iso-own", &script, &hosts, &wa);
    assert_eq!(out, "hello-from-web\nhello-from-web\nping-ok\n");

    // B's job on the same bridge, even given A's name: neither by name, nor by address, nor a
    // ping; while B's own service answers it.
    let switched = drops("bridge", a.net.bridge(), "forward");
    let script = format!(
        "{}; {}; {}; {}",
        fetch_script("web.svc"),
        fetch_script(&web.to_string()),
        pings(web),
        fetch_script(&web_b.to_string())
    );
    let out = run_in_net(c, a, "t-iso-other", &script, &hosts, &wb);
    assert_eq!(out, "refused\nrefused\nping-no\nhello-from-web\n");
    // Dropped by the bridge family's forward hook: the path of traffic between two ports of
    // one bridge, which nothing else sees on a host without br_netfilter.
    assert!(
        drops("bridge", a.net.bridge(), "forward") > switched,
        "the bridge table dropped nothing"
    );
    remove(a, "t-iso-web");
    remove(a, "t-iso-web-b");
    assert_clean(a, &["t-iso-web", "t-iso-web-b", "t-iso-own", "t-iso-other"]);
}

fn workflows_are_kept_apart_across_agents(c: &Ctx) {
    let (a, b) = (&c.a, &c.b);
    let web = start_in(a, c.spec("t-x-web", WEB), &[], &policy("wf-a"));
    wait_http(SocketAddr::new(web.into(), 8080), "/index.html");
    let hosts = [HostEntry {
        name: "web.svc".into(),
        address: web.to_string(),
    }];
    let own = Policy {
        workflow: "wf-a".into(),
        egress: true,
        peers: vec![web],
        node_services: vec![],
    };
    // A's job on b, assigned with A's web among its workflow's containers: b lets it out, but
    // a has not been told of it, and a checks too.
    let out = run_in_net(c, b, "t-x-early", &fetch_script("web.svc"), &hosts, &own);
    assert_eq!(out, "refused\n");
    assert_eq!(b.net.peers("wf-a"), Vec::<Ipv4Addr>::new(), "b forgets A");

    // Once a hears of it (the server's `Peers`), A's job on b reaches A's web on a.
    let att = attach_for(b, "t-x-own", &own);
    let job = att.address.unwrap();
    assert_eq!(b.net.peers("wf-a"), vec![web]);
    a.net.set_peers("wf-a", &[job]).unwrap();
    assert_eq!(a.net.peers("wf-a"), vec![job]);
    let spec = c.spec("t-x-own", &fetch_script("web.svc"));
    start_attached(b, spec, &hosts, &att);
    assert_eq!(finish(b, "t-x-own"), "hello-from-web\n");

    // B's job on b, with the outside world allowed: A's web is not the outside world. Even
    // if b wrongly counted A's web as B's (a stale word), a refuses it.
    let intruder = Policy {
        workflow: "wf-b".into(),
        egress: true,
        peers: vec![],
        node_services: vec![],
    };
    let att = attach_for(b, "t-x-other", &intruder);
    b.net.set_peers("wf-b", &[web]).unwrap();
    let script = format!(
        "{}; {}",
        fetch_script("web.svc"),
        fetch_script(&web.to_string())
    );
    start_attached(b, c.spec("t-x-other", &script), &hosts, &att);
    assert_eq!(finish(b, "t-x-other"), "refused\nrefused\n");
    // Addresses in a node's own subnet are its records' business, never the server's.
    a.net.set_peers("wf-b", &[web]).unwrap();
    assert_eq!(a.net.peers("wf-b"), Vec::<Ipv4Addr>::new());
    a.net.set_peers("wf-a", &[]).unwrap();
    remove(a, "t-x-web");
    assert_clean(a, &["t-x-web"]);
    assert_clean(b, &["t-x-early", "t-x-own", "t-x-other"]);
    assert_eq!(
        a.net.peers("wf-a"),
        Vec::<Ipv4Addr>::new(),
        "peers outlived A"
    );
}

/// The first global IPv4 address of this host outside the test's own ranges.
fn host_address() -> Option<Ipv4Addr> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let cidr = l.split_whitespace().skip_while(|w| *w != "inet").nth(1)?;
        let ip: Ipv4Addr = cidr.split('/').next()?.parse().ok()?;
        let o = ip.octets();
        (!(o[0] == 10 && (o[1] == 231 || o[1] == 232))).then_some(ip)
    })
}

fn host_services_are_out_of_reach(c: &Ctx) {
    let (a, b) = (&c.a, &c.b);
    // Both bridges, so that both gateways are host addresses.
    attach_for(a, "t-h-bridge", &policy("wf-b"));
    attach_for(b, "t-h-bridge", &policy("wf-b"));
    let (allowed, denied) = (c.host_ports.allowed, c.host_ports.denied);
    let mut targets = vec![
        ("gw-allowed", gateway(a), allowed),
        ("gw-denied", gateway(a), denied),
        ("other-bridge-allowed", gateway(b), allowed),
        ("other-bridge-denied", gateway(b), denied),
    ];
    let mut expect = vec![
        ("gw-allowed", true),
        ("gw-denied", false),
        ("other-bridge-allowed", true),
        ("other-bridge-denied", false),
    ];
    if let Some(h) = host_address() {
        targets.extend([("host-allowed", h, allowed), ("host-denied", h, denied)]);
        expect.extend([("host-allowed", true), ("host-denied", false)]);
    }
    // The host answers on every one of these addresses and ports.
    for (name, ip, port) in &targets {
        TcpStream::connect_timeout(
            &SocketAddr::new((*ip).into(), *port),
            Duration::from_secs(3),
        )
        .unwrap_or_else(|e| panic!("{name}: the host's own listener: {e}"));
    }
    let refused = drops("inet", a.net.bridge(), "input");
    // On node a, whose agent allows one port (`--host-allow tcp/PORT`): that port only. On
    // node b, which allows none: nothing of the host at all.
    let none: Vec<(&str, bool)> = expect.iter().map(|(n, _)| (*n, false)).collect();
    for (node, id, want) in [(a, "t-h-a", &expect), (b, "t-h-b", &none)] {
        let script = connect_script(&targets);
        let out = run_in_net(c, node, id, &script, &[], &policy("wf-b"));
        assert_eq!(out, expect_lines(want), "{id}");
    }
    assert!(drops("inet", a.net.bridge(), "input") > refused);
    a.net.detach("t-h-bridge").unwrap();
    b.net.detach("t-h-bridge").unwrap();
    assert_clean(a, &["t-h-a", "t-h-bridge"]);
    assert_clean(b, &["t-h-b", "t-h-bridge"]);
}

fn egress_follows_the_setting(c: &Ctx) {
    let a = &c.a;
    let o = &c.outside;
    let targets = [
        ("world", o.server, o.port),
        ("other-address", o.other, o.port),
        ("server", o.server, o.server_port),
    ];
    let allowed = policy("wf-b");
    let out = run_in_net(
        c,
        a,
        "t-e-allowed",
        &connect_script(&targets),
        &[],
        &allowed,
    );
    assert_eq!(
        out,
        expect_lines(&[("world", true), ("other-address", true), ("server", true)])
    );
    // Egress denied: nothing outside but the Gantry server's port (its endpoint proxy).
    let denied = Policy {
        egress: false,
        ..policy("wf-b")
    };
    let out = run_in_net(c, a, "t-e-denied", &connect_script(&targets), &[], &denied);
    assert_eq!(
        out,
        expect_lines(&[("world", false), ("other-address", false), ("server", true)])
    );

    // Into a container from outside: only from the server (its proxy); nobody else, even
    // with the container's address in hand.
    let web = start_in(a, c.spec("t-e-web", WEB), &[], &denied);
    wait_http(SocketAddr::new(web.into(), 8080), "/index.html");
    let from = |src: Ipv4Addr| {
        Command::new("nsenter")
            .arg(format!("--net={}", o.ns.display()))
            .args(["curl", "-s", "-m", "4", "--interface", &src.to_string()])
            .arg(format!("http://{web}:8080/index.html"))
            .output()
            .expect("curl")
    };
    let served = from(o.server);
    assert_eq!(String::from_utf8_lossy(&served.stdout), "hello-from-web\n");
    let other = from(o.other);
    assert!(
        !other.status.success() && other.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&other.stdout)
    );
    remove(a, "t-e-web");
    assert_clean(a, &["t-e-allowed", "t-e-denied", "t-e-web"]);
}

/// The container's MAC, from its attachment's CNI result.
fn mac_of(att: &Attachment) -> [u8; 6] {
    let mac = att.result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["sandbox"].as_str().is_some_and(|s| !s.is_empty()))
        .and_then(|i| i["mac"].as_str())
        .unwrap();
    parse_mac(mac)
}

fn parse_mac(s: &str) -> [u8; 6] {
    let mut out = [0u8; 6];
    for (o, p) in out.iter_mut().zip(s.trim().split(':')) {
        *o = u8::from_str_radix(p, 16).unwrap();
    }
    out
}

/// An Ethernet frame carrying one UDP datagram (no UDP checksum, which IPv4 allows).
fn udp_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    port: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend(dst_mac);
    f.extend(src_mac);
    f.extend([0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend(src.octets());
    ip.extend(dst.octets());
    let mut sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend(ip);
    f.extend(40000u16.to_be_bytes());
    f.extend(port.to_be_bytes());
    f.extend(((8 + payload.len()) as u16).to_be_bytes());
    f.extend([0, 0]);
    f.extend(payload);
    f
}

/// Sends raw frames out of `eth0` in the namespace, as a container process with CAP_NET_RAW
/// (which Docker's default set, and so Gantry's, has) can.
fn send_frames(ns: &Path, frames: Vec<Vec<u8>>) {
    net::netns::run_in(ns, move || {
        // SAFETY: plain socket calls on a descriptor this closure owns; every pointer is to a
        // live local of the right size.
        unsafe {
            let proto = (libc::ETH_P_ALL as u16).to_be() as i32;
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto);
            assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
            let ifindex = libc::if_nametoindex(c"eth0".as_ptr());
            assert!(ifindex > 0);
            for frame in &frames {
                let mut sll: libc::sockaddr_ll = std::mem::zeroed();
                sll.sll_family = libc::AF_PACKET as u16;
                sll.sll_ifindex = ifindex as i32;
                sll.sll_halen = 6;
                sll.sll_addr[..6].copy_from_slice(&frame[..6]);
                let n = libc::sendto(
                    fd,
                    frame.as_ptr().cast(),
                    frame.len(),
                    0,
                    (&sll as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                );
                assert_eq!(
                    n,
                    frame.len() as isize,
                    "{}",
                    std::io::Error::last_os_error()
                );
            }
            libc::close(fd);
        }
    })
    .unwrap();
}

fn spoofed_sources_are_dropped(c: &Ctx) {
    let a = &c.a;
    let o = &c.outside;
    let victim = attach_for(a, "t-s-victim", &policy("wf-a"));
    start_attached(a, c.spec("t-s-victim", "sleep 60"), &[], &victim);
    let attacker = attach_for(a, "t-s-attacker", &policy("wf-b"));
    start_attached(a, c.spec("t-s-attacker", "sleep 60"), &[], &attacker);
    let (own_ip, own_mac) = (attacker.address.unwrap(), mac_of(&attacker));
    let (victim_ip, victim_mac) = (victim.address.unwrap(), mac_of(&victim));
    let unused = Ipv4Addr::from(u32::from(a.subnet.network) + 250);
    let gw_mac = parse_mac(
        &fs::read_to_string(format!("/sys/class/net/{}/address", a.net.bridge())).unwrap(),
    );
    let port = o.udp.local_addr().unwrap().port();
    let frame = |mac, ip, what: &str| udp_frame(mac, gw_mac, ip, o.server, port, what.as_bytes());
    let before = drops("bridge", a.net.bridge(), "prerouting");
    // Out to the world through the gateway: the attacker as itself, then with the victim's
    // address, the victim's MAC, and an address nobody has.
    send_frames(
        &attacker.netns,
        vec![
            frame(own_mac, own_ip, "own"),
            frame(own_mac, victim_ip, "spoofed-address"),
            frame(victim_mac, own_ip, "spoofed-mac"),
            frame(victim_mac, victim_ip, "spoofed-both"),
            frame(own_mac, unused, "spoofed-unused"),
        ],
    );
    let mut got = vec![];
    let mut buf = [0u8; 256];
    o.udp
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    while let Ok((n, _)) = o.udp.recv_from(&mut buf) {
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert_eq!(got, vec!["own".to_owned()]);
    assert!(drops("bridge", a.net.bridge(), "prerouting") >= before + 4);
    remove(a, "t-s-victim");
    remove(a, "t-s-attacker");
    assert_clean(a, &["t-s-victim", "t-s-attacker"]);
}

/// The link-local IPv6 address of `eth0` in the namespace, once duplicate address detection
/// is over (it is not tentative any more).
fn link_local(ns: &Path) -> std::net::Ipv6Addr {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = net::netns::run_in(ns, || {
            fs::read_to_string("/proc/thread-self/net/if_inet6").unwrap_or_default()
        })
        .unwrap();
        let found = text.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(4)?, 16).ok()?;
            if f.get(5) != Some(&"eth0") || !f[0].starts_with("fe80") || flags & 0x40 != 0 {
                return None;
            }
            u128::from_str_radix(f[0], 16)
                .ok()
                .map(std::net::Ipv6Addr::from)
        });
        if let Some(ip) = found {
            return ip;
        }
        assert!(Instant::now() < deadline, "no link-local address: {text}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn ipv6_link_local_is_blocked(c: &Ctx) {
    let a = &c.a;
    // Two containers of one workflow: IPv4 between them is allowed, IPv6 never.
    let one = attach_for(a, "t-v6-one", &policy("wf-a"));
    start_attached(a, c.spec("t-v6-one", "sleep 60"), &[], &one);
    let two = attach_for(a, "t-v6-two", &policy("wf-a"));
    start_attached(a, c.spec("t-v6-two", "sleep 60"), &[], &two);
    // A dual-stack listener in the first's namespace, as a process of it would open.
    let listener = net::netns::run_in(&one.netns, || std::net::TcpListener::bind("[::]:0"))
        .unwrap()
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || for _ in listener.incoming() {});
    let ll = link_local(&one.netns);
    let v4 = one.address.unwrap();
    let before = drops("bridge", a.net.bridge(), "prerouting");
    let (v6, v4) = net::netns::run_in(&two.netns, move || {
        let ifindex = unsafe { libc::if_nametoindex(c"eth0".as_ptr()) };
        let t = Duration::from_secs(3);
        let v6 = SocketAddr::V6(std::net::SocketAddrV6::new(ll, port, 0, ifindex));
        (
            TcpStream::connect_timeout(&v6, t).map(|_| ()),
            TcpStream::connect_timeout(&SocketAddr::new(v4.into(), port), t).map(|_| ()),
        )
    })
    .unwrap();
    assert!(v6.is_err(), "reached [{ll}%eth0]:{port}");
    v4.expect("IPv4 within the workflow");
    assert!(drops("bridge", a.net.bridge(), "prerouting") > before);
    remove(a, "t-v6-one");
    remove(a, "t-v6-two");
    assert_clean(a, &["t-v6-one", "t-v6-two"]);
}

// --- the whole agent against a small server -------------------------------------------------

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// What the test server saw of the agent.
#[derive(Default)]
struct Seen {
    statuses: HashMap<Uuid, Vec<AttemptPhase>>,
    /// Each attempt's stdout.
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
            AgentMessage::Log(l) if l.stream == gantry_api::agent::Stream::Stdout => {
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
            transfer_events: false,
            probe_results: false,
            ping_heartbeats: false,
        },
    )
    .await;
    send(&mut ws, &ServerMessage::Desired { attempts: desired }).await;
    (ws, attempts)
}

fn assignment(
    registry: &str,
    workflow: Uuid,
    task: &str,
    script: &str,
    hosts: &[(String, String)],
    readiness: Option<Probe>,
) -> Assignment {
    let mut v = serde_json::json!({
        "attempt_id": Uuid::new_v4(),
        "workflow_id": workflow,
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
    let (config, listener) = whole_agent(c, "agent");
    let (name, state) = (config.name.clone(), config.state_dir.clone());
    let subnet: Subnet = c.agent_subnet.parse().unwrap();
    let probe = probe_of(http_probe(8080), 1);
    // One workflow's service, job and second service; another workflow's job after the restart.
    let wf = Uuid::new_v4();
    let web = assignment(
        &c.registry,
        wf,
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
            wf,
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
            wf,
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

/// An agent to run whole (`node::run`) against a small server in this test: its
/// configuration (named `nettest-PID-TAG`, its state in `<dir>/TAG`) and the server's listener.
fn whole_agent(c: &Ctx, tag: &str) -> (AgentConfig, tokio::net::TcpListener) {
    let name = format!("nettest-{}-{tag}", std::process::id());
    let state = c.dir.join(tag);
    fs::create_dir_all(&state).unwrap();
    fs::write(state.join("cgroup_parent"), format!("gantry/{name}")).unwrap();
    let listener = c
        .tokio
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let config = AgentConfig {
        server: format!("http://{}", listener.local_addr().unwrap()),
        token: "test".into(),
        pool: "default".into(),
        name,
        capacity: Capacity {
            cpus: 2,
            memory_bytes: 1 << 30,
            devices: Default::default(),
        },
        storage_root: c.dir.join("storage"),
        state_dir: state,
        pull: PullConfig {
            insecure_hosts: vec![c.registry.clone()],
            ..Default::default()
        },
        metrics_listen: None,
        node_exporter: None,
        job_userns: Some(gantry_agent::runtime::JOB_IDS),
        host_allow: vec![],
        labels: Default::default(),
        advertise: None,
        exec_listen: None,
    };
    (config, listener)
}

/// `nft list set inet TABLE SET`.
fn members(table: &str, set: &str) -> String {
    let out = Command::new("nft")
        .args(["list", "set", "inet", table, set])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits (reading on) until the agent run whole with state `state` has removed every
/// container network.
async fn networks_gone(ws: &mut Ws, seen: &mut Seen, state: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while fs::read_dir(state.join("net/attachments")).map_or(0, |d| d.count()) > 0 {
        assert!(Instant::now() < deadline, "networks left");
        let _ = tokio::time::timeout(Duration::from_millis(200), recv(ws, seen)).await;
    }
}

/// Runs a job assignment to its end; its exit code and output.
async fn run_job(ws: &mut Ws, seen: &mut Seen, asg: &Assignment) -> (i32, String) {
    send(ws, &ServerMessage::Assign(Box::new(asg.clone()))).await;
    let end = until_status(ws, seen, asg.attempt_id, |p| {
        matches!(
            p,
            AttemptPhase::Exited { .. } | AttemptPhase::StartFailed { .. }
        )
    })
    .await;
    send(
        ws,
        &ServerMessage::Forget {
            attempt_id: asg.attempt_id,
        },
    )
    .await;
    let AttemptPhase::Exited { exit_code, .. } = end else {
        panic!("{end:?}");
    };
    let out = seen.logs.get(&asg.attempt_id).cloned().unwrap_or_default();
    (exit_code, String::from_utf8_lossy(&out).into_owned())
}

fn an_agent_restart_keeps_the_rules(c: &Ctx) {
    let (config, listener) = whole_agent(c, "restart");
    let (name, state) = (config.name.clone(), config.state_dir.clone());
    let (wf, other) = (Uuid::new_v4(), Uuid::new_v4());
    let web = assignment(&c.registry, wf, "web", WEB, &[], None);
    // A member of wf on another node, as the server says.
    let remote: Ipv4Addr = "203.0.113.7".parse().unwrap();
    let bridge = fresh_agent_net(&state, &name).bridge().to_owned();
    let set = format!("m_{}", net::firewall::tag(&wf.to_string()));

    let agent1 = tokio::runtime::Runtime::new().unwrap();
    agent1.spawn(node::run(config.clone()));
    let web_addr = c.tokio.block_on(async {
        let (mut ws, _) = welcome(&listener, &c.restart_subnet, vec![]).await;
        let mut seen = Seen::default();
        send(&mut ws, &ServerMessage::Assign(Box::new(web.clone()))).await;
        let p = until_status(&mut ws, &mut seen, web.attempt_id, |p| {
            !matches!(p, AttemptPhase::Preparing)
        })
        .await;
        let addr = running_address(&p).unwrap_or_else(|| panic!("{p:?}"));
        let peers = ServerMessage::Peers {
            workflow_id: wf,
            addresses: vec![remote.to_string(), "not an address".into()],
        };
        send(&mut ws, &peers).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !members(&bridge, &set).contains(&remote.to_string()) {
            assert!(Instant::now() < deadline, "the agent ignored Peers");
            let _ =
                tokio::time::timeout(Duration::from_millis(200), recv(&mut ws, &mut seen)).await;
        }
        addr
    });
    agent1.shutdown_background();
    assert_eq!(
        fresh_agent_net(&state, &name).peers(&wf.to_string()),
        vec![remote]
    );
    let web_ip: Ipv4Addr = web_addr.parse().unwrap();
    let members = || members(&bridge, &set);
    let before = members();
    assert!(
        before.contains(&web_addr) && before.contains(&remote.to_string()),
        "{before}"
    );
    // The kernel's copy goes while the agent is down (say someone flushed the ruleset); the
    // container lives on, and the restarted agent rebuilds its rules from its records.
    for family in ["bridge", "inet"] {
        let st = Command::new("nft")
            .args(["delete", "table", family, &bridge])
            .status()
            .unwrap();
        assert!(st.success());
    }

    let agent2 = tokio::runtime::Runtime::new().unwrap();
    agent2.spawn(node::run(config));
    c.tokio.block_on(async {
        let (mut ws, known) = welcome(&listener, &c.restart_subnet, vec![web.clone()]).await;
        assert_eq!(known, vec![web.attempt_id]);
        let mut seen = Seen::default();
        until_status(&mut ws, &mut seen, web.attempt_id, |p| {
            matches!(p, AttemptPhase::Running { .. })
        })
        .await;
        let after = members();
        assert!(
            after.contains(&web_addr) && after.contains(&remote.to_string()),
            "{after}"
        );
        let hosts = [("web.svc".to_owned(), web_addr.clone())];
        // The workflow's own job reaches its service; another workflow's does not.
        let own = assignment(
            &c.registry,
            wf,
            "own",
            &fetch_script("web.svc"),
            &hosts,
            None,
        );
        let (code, out) = run_job(&mut ws, &mut seen, &own).await;
        assert_eq!((code, out.as_str()), (0, "hello-from-web\n"));
        let intruder = assignment(
            &c.registry,
            other,
            "intruder",
            &fetch_script("web.svc"),
            &hosts,
            None,
        );
        let (code, out) = run_job(&mut ws, &mut seen, &intruder).await;
        assert_eq!((code, out.as_str()), (0, "refused\n"));
        send(
            &mut ws,
            &ServerMessage::Stop {
                attempt_id: web.attempt_id,
                grace_ms: 2000,
                cause: EndCause::Stopped,
            },
        )
        .await;
        until_status(&mut ws, &mut seen, web.attempt_id, |p| {
            matches!(p, AttemptPhase::Exited { .. })
        })
        .await;
        send(
            &mut ws,
            &ServerMessage::Forget {
                attempt_id: web.attempt_id,
            },
        )
        .await;
        networks_gone(&mut ws, &mut seen, &state).await;
    });
    agent2.shutdown_background();
    let node = Node {
        dir: state.clone(),
        rt: agent_runtime(&state),
        net: fresh_agent_net(&state, &name),
        subnet: c.restart_subnet.parse().unwrap(),
    };
    assert!(!members().contains(&web_ip.to_string()));
    assert_clean(&node, &[&web.attempt_id.to_string()]);
    assert!(node.net.peers(&wf.to_string()).is_empty());
}

/// The assignment's `node_services` reach the firewall: its job, with no egress, reaches the
/// workflow's host-network service (here a port of the outside host, standing for another
/// node's address) and nothing else there; another workflow's job reaches none of it.
fn assigned_node_services_are_reachable(c: &Ctx) {
    let (config, listener) = whole_agent(c, "services");
    let state = config.state_dir.clone();
    let o = &c.outside;
    let targets = [
        ("service", o.other, o.port),
        ("other-port", o.other, o.server_port),
        ("other-address", o.server, o.port),
    ];
    let script = connect_script(&targets);
    let job = |wf: Uuid, task: &str, services: &[String]| {
        let mut a = assignment(&c.registry, wf, task, &script, &[], None);
        let n = a.network.as_mut().unwrap();
        n.egress = false;
        n.node_services = services.to_vec();
        a
    };
    let service = format!("{}:{}", o.other, o.port);
    let own = job(Uuid::new_v4(), "own", &[service, "not an address".into()]);
    let intruder = job(Uuid::new_v4(), "intruder", &[]);
    let agent = tokio::runtime::Runtime::new().unwrap();
    agent.spawn(node::run(config));
    c.tokio.block_on(async {
        let (mut ws, _) = welcome(&listener, &c.services_subnet, vec![]).await;
        let mut seen = Seen::default();
        let (code, out) = run_job(&mut ws, &mut seen, &own).await;
        let want = [
            ("service", true),
            ("other-port", false),
            ("other-address", false),
        ];
        assert_eq!((code, out), (0, expect_lines(&want)));
        let (code, out) = run_job(&mut ws, &mut seen, &intruder).await;
        let none = [
            ("service", false),
            ("other-port", false),
            ("other-address", false),
        ];
        assert_eq!((code, out), (0, expect_lines(&none)));
        networks_gone(&mut ws, &mut seen, &state).await;
    });
    agent.shutdown_background();
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
    (
        "workflows_are_kept_apart_on_one_node",
        workflows_are_kept_apart_on_one_node,
    ),
    (
        "workflows_are_kept_apart_across_agents",
        workflows_are_kept_apart_across_agents,
    ),
    (
        "host_services_are_out_of_reach",
        host_services_are_out_of_reach,
    ),
    ("egress_follows_the_setting", egress_follows_the_setting),
    ("spoofed_sources_are_dropped", spoofed_sources_are_dropped),
    ("ipv6_link_local_is_blocked", ipv6_link_local_is_blocked),
    (
        "an_agent_restart_keeps_the_rules",
        an_agent_restart_keeps_the_rules,
    ),
    (
        "assigned_node_services_are_reachable",
        assigned_node_services_are_reachable,
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
    common::remove_agent_network(&state.join("net"));
}

/// Tears down a test process's directory.
fn teardown(dir: &Path) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        if e.path().is_dir() {
            teardown_agent(&e.path());
        }
    }
    common::unmount_beneath(dir);
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

/// A TCP listener on every host address that accepts and closes each connection; its port.
fn host_listener() -> u16 {
    let l = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || for _ in l.incoming() {});
    port
}

/// The outside world: a namespace behind a veth pair in a free /24 of 10.232.0.0/16, routed
/// from the host (as `ip netns add` and `ip link add ... type veth` would make it), with a
/// plain TCP service, the "server's" port and a UDP socket.
fn make_outside(dir: &Path) -> Outside {
    let out = Command::new("ip").args(["-4", "route"]).output().unwrap();
    let routes = String::from_utf8_lossy(&out.stdout).into_owned();
    let k = (0..250)
        .map(|i| (std::process::id() as usize + i) % 250 + 1)
        .find(|k| !routes.contains(&format!("10.232.{k}.")))
        .expect("no free subnet in 10.232.0.0/16");
    let ns_dir = dir.join("outside");
    fs::create_dir_all(&ns_dir).unwrap();
    let ns = ns_dir.join("ns");
    net::netns::create(&ns).unwrap();
    let host_side = format!("gto{:x}", std::process::id());
    let ip = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let in_ns = |args: &[&str]| {
        let out = Command::new("nsenter")
            .arg(format!("--net={}", ns.display()))
            .arg("ip")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ip {args:?} (outside): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ns_arg = ns.display().to_string();
    ip(&[
        "link", "add", &host_side, "type", "veth", "peer", "name", "eth0", "netns", &ns_arg,
    ]);
    ip(&[
        "addr",
        "add",
        &format!("10.232.{k}.1/24"),
        "dev",
        &host_side,
    ]);
    ip(&["link", "set", &host_side, "up"]);
    in_ns(&["addr", "add", &format!("10.232.{k}.2/24"), "dev", "eth0"]);
    in_ns(&["addr", "add", &format!("10.232.{k}.3/24"), "dev", "eth0"]);
    in_ns(&["link", "set", "eth0", "up"]);
    in_ns(&["link", "set", "lo", "up"]);
    in_ns(&["route", "add", "default", "via", &format!("10.232.{k}.1")]);
    let listen = |ns: &Path| {
        let l = net::netns::run_in(ns, || std::net::TcpListener::bind("0.0.0.0:0"))
            .unwrap()
            .unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || for _ in l.incoming() {});
        port
    };
    let port = listen(&ns);
    let server_port = listen(&ns);
    let udp = net::netns::run_in(&ns, || std::net::UdpSocket::bind("0.0.0.0:0"))
        .unwrap()
        .unwrap();
    Outside {
        server: format!("10.232.{k}.2").parse().unwrap(),
        other: format!("10.232.{k}.3").parse().unwrap(),
        ns,
        port,
        server_port,
        udp,
    }
}

fn make_node(
    dir: &Path,
    name: &str,
    subnet: &str,
    host_allow: Vec<HostPort>,
    server: Vec<std::net::SocketAddrV4>,
) -> Node {
    let state = dir.join(name);
    fs::create_dir_all(&state).unwrap();
    let cgroup = format!("gantry-test/network-{}-{name}", std::process::id());
    fs::write(state.join("cgroup_parent"), &cgroup).unwrap();
    let rt = agent_runtime(&state);
    let mut config =
        NetConfig::for_agent(&state, &format!("nettest-{}-{name}", std::process::id()));
    config.host_allow = host_allow;
    config.server = server;
    let net = Network::new(config).unwrap();
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
    let subnets = free_subnets(5);
    assert_eq!(subnets.len(), 5, "no free subnets in 10.231.0.0/16");
    let outside = make_outside(&dir);
    let host_ports = HostPorts {
        allowed: host_listener(),
        denied: host_listener(),
    };
    let a = make_node(
        &dir,
        "a",
        &subnets[0],
        vec![HostPort {
            proto: net::Proto::Tcp,
            port: host_ports.allowed,
        }],
        vec![std::net::SocketAddrV4::new(
            outside.server,
            outside.server_port,
        )],
    );
    let b = make_node(&dir, "b", &subnets[1], vec![], vec![]);

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
        restart_subnet: subnets[3].clone(),
        services_subnet: subnets[4].clone(),
        tokio,
        host_ports,
        outside,
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
