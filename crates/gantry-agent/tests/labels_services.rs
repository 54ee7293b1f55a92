//! A node's labels as the agent reports them, and the firewall's door to a workflow's
//! host-network services, under the real CNI plugins and the kernel's nftables. A
//! `harness = false` test like `network.rs`.
//!
//! The firewall judges a container's packets by its network namespace alone, so the
//! "containers" here are the namespaces `Network::attach` makes, connected from with the
//! test's own sockets (`netns::run_in`): the same veth, bridge, tables and hooks a runc
//! container's traffic meets, without an image.
//!
//! The node's own addresses are two addresses of a veth pair's host side (`10.234.K.1/24` and
//! `10.234.K.2/32`), whose other side is "another node" at `10.234.K.9` in a namespace of its
//! own, routed from the host. Everything lives under `$GANTRY_TEST_DIR/agent-labels/<pid>/`;
//! leftovers of killed runs are removed at start. Only addresses on this machine are contacted.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use futures_util::StreamExt;
use gantry_agent::image::PullConfig;
use gantry_agent::net::{self, NetConfig, Network, Policy};
use gantry_agent::node::{self, AgentConfig};
use gantry_api::agent::{AgentMessage, Capacity};
use tokio_tungstenite::tungstenite::Message;

struct Ctx {
    dir: PathBuf,
    net: Network,
    /// This node's addresses: the one its host-network services bind, and another.
    node: Ipv4Addr,
    node_other: Ipv4Addr,
    /// Another node's address.
    remote: Ipv4Addr,
    /// TCP and UDP listeners on every address of this node: `allowed` is a service port,
    /// `other` is not.
    allowed: u16,
    other: u16,
    udp_allowed: UdpSocket,
    udp_other: UdpSocket,
    /// TCP listeners on the other node.
    remote_allowed: u16,
    remote_other: u16,
}

fn policy(workflow: &str, egress: bool, services: Vec<SocketAddrV4>) -> Policy {
    Policy {
        workflow: workflow.into(),
        egress,
        peers: vec![],
        node_services: services,
    }
}

/// Whether a TCP connection from namespace `ns` to each target opens (3 s each at most, all at
/// once), in the targets' order.
fn connects(ns: &Path, targets: &[(Ipv4Addr, u16)]) -> Vec<bool> {
    let tries: Vec<_> = targets
        .iter()
        .map(|&(ip, port)| {
            let ns = ns.to_owned();
            std::thread::spawn(move || {
                net::netns::run_in(&ns, move || {
                    let to = SocketAddr::new(ip.into(), port);
                    TcpStream::connect_timeout(&to, Duration::from_secs(3)).is_ok()
                })
                .unwrap()
            })
        })
        .collect();
    tries.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Whether a datagram sent from namespace `ns` to `to` reaches `socket` (a host socket bound
/// to `to`'s port).
fn datagram_arrives(ns: &Path, to: SocketAddrV4, socket: &UdpSocket) -> bool {
    socket
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let token = format!("hello-{}", rand_token());
    let sent = token.clone();
    net::netns::run_in(ns, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.send_to(sent.as_bytes(), to).unwrap();
    })
    .unwrap();
    let mut buf = [0u8; 64];
    while let Ok((n, _)) = socket.recv_from(&mut buf) {
        if &buf[..n] == token.as_bytes() {
            return true;
        }
    }
    false
}

fn rand_token() -> u128 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn netns_of(c: &Ctx, id: &str, p: &Policy) -> PathBuf {
    c.net.attach(id, p, None).unwrap().netns
}

fn containers_reach_their_workflows_host_services(c: &Ctx) {
    let service = SocketAddrV4::new(c.node, c.allowed);
    let remote_service = SocketAddrV4::new(c.remote, c.remote_allowed);
    // No egress: nothing outside is open to it but what its workflow's services open.
    let own = policy("wf-a", false, vec![service, remote_service]);
    let ns = netns_of(c, "t-s-own", &own);
    let targets = [
        (c.node, c.allowed),
        (c.node, c.other),
        (c.node_other, c.allowed),
        (c.remote, c.remote_allowed),
        (c.remote, c.remote_other),
    ];
    // The host answers on all of them.
    for (ip, port) in targets {
        TcpStream::connect_timeout(&SocketAddr::new(ip.into(), port), Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("{ip}:{port}, the host's own listener: {e}"));
    }
    // Exactly the pairs: the service's port on this node, the other node's service, and not
    // another port of either node, nor the same port at another address of this node.
    assert_eq!(connects(&ns, &targets), [true, false, false, true, false]);
    assert!(datagram_arrives(&ns, service, &c.udp_allowed));
    let other = SocketAddrV4::new(c.node, c.udp_other.local_addr().unwrap().port());
    assert!(!datagram_arrives(&ns, other, &c.udp_other));

    // Another workflow's container on the same bridge, even with the outside world allowed,
    // reaches neither (nor, without egress, the other node's).
    for (id, egress) in [("t-s-intruder", true), ("t-s-intruder-ne", false)] {
        let intruder = netns_of(c, id, &policy("wf-b", egress, vec![]));
        assert_eq!(
            connects(&intruder, &targets),
            [false, false, false, egress, egress],
            "{id}"
        );
        assert!(
            !datagram_arrives(&intruder, service, &c.udp_allowed),
            "{id}"
        );
        c.net.detach(id).unwrap();
    }
    // The owner still does: the intruders changed nothing of its workflow's.
    assert_eq!(connects(&ns, &targets[..1]), [true]);
    assert_eq!(c.net.node_services("wf-a"), [service, remote_service]);
    c.net.detach("t-s-own").unwrap();
    assert_eq!(c.net.node_services("wf-a"), [], "outlived its workflow");
}

fn services_change_at_runtime(c: &Ctx) {
    let service = SocketAddrV4::new(c.node, c.allowed);
    let ns = netns_of(c, "t-s-late", &policy("wf-c", false, vec![]));
    assert_eq!(connects(&ns, &[(c.node, c.allowed)]), [false]);
    // A service that starts after its client: the server's word opens it at once.
    c.net.set_node_services("wf-c", &[service]).unwrap();
    assert_eq!(connects(&ns, &[(c.node, c.allowed)]), [true]);
    // An address of this node's bridge other than its gateway is a container's, never a
    // host-network service's; a loopback address (a node of `gantry up`) is this host, seen
    // from the bridge at its gateway.
    let network = u32::from(c.net.subnet().unwrap().network);
    let gateway = Ipv4Addr::from(network + 1);
    let container = Ipv4Addr::from(network + 9);
    c.net
        .set_node_services("wf-c", &[service, SocketAddrV4::new(container, c.allowed)])
        .unwrap();
    assert_eq!(c.net.node_services("wf-c"), [service]);
    let loopback = SocketAddrV4::new(Ipv4Addr::new(127, 0, 1, 1), c.allowed);
    c.net.set_node_services("wf-c", &[loopback]).unwrap();
    assert_eq!(
        c.net.node_services("wf-c"),
        [SocketAddrV4::new(gateway, c.allowed)]
    );
    assert_eq!(connects(&ns, &[(gateway, c.allowed)]), [true]);
    c.net.set_node_services("wf-c", &[service]).unwrap();

    // The kernel's copy goes (a flushed ruleset, a reboot with the containers kept); the
    // agent's start rebuilds the tables from its records, services included.
    let bridge = c.net.bridge().to_owned();
    for family in ["bridge", "inet"] {
        let st = Command::new("nft")
            .args(["delete", "table", family, &bridge])
            .status()
            .unwrap();
        assert!(st.success());
    }
    let restarted = Network::new(c.net.config().clone()).unwrap();
    restarted.cleanup(&["t-s-late".to_owned()]);
    assert_eq!(connects(&ns, &[(c.node, c.allowed)]), [true]);

    // And the service's end closes it again.
    restarted.set_node_services("wf-c", &[]).unwrap();
    assert_eq!(connects(&ns, &[(c.node, c.allowed)]), [false]);
    restarted.detach("t-s-late").unwrap();
}

fn hello_carries_the_labels(c: &Ctx) {
    let name = format!("labeltest-{}", std::process::id());
    let state = c.dir.join("agent");
    fs::create_dir_all(&state).unwrap();
    fs::write(state.join("cgroup_parent"), format!("gantry/{name}")).unwrap();
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let listener = tokio
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let admin = BTreeMap::from([
        ("zone".to_string(), "a".to_string()),
        ("rack".to_string(), "r1".to_string()),
        // An administrator's word wins over what the agent finds.
        ("cpu.model".to_string(), "as-the-admin-says".to_string()),
    ]);
    let config = AgentConfig {
        server: format!("http://{}", listener.local_addr().unwrap()),
        token: "test".into(),
        pool: "default".into(),
        name,
        capacity: Capacity {
            cpus: 1,
            memory_bytes: 1 << 30,
            devices: Default::default(),
        },
        storage_root: c.dir.join("storage"),
        state_dir: state,
        pull: PullConfig::default(),
        metrics_listen: None,
        node_exporter: None,
        job_userns: None,
        host_allow: vec![],
        labels: admin.clone(),
        advertise: None,
        exec_listen: None,
    };
    let agent = tokio::runtime::Runtime::new().unwrap();
    agent.spawn(node::run(config));
    let labels = tokio.block_on(async {
        let (sock, _) = tokio::time::timeout(Duration::from_secs(60), listener.accept())
            .await
            .expect("the agent did not connect")
            .unwrap();
        let mut ws = tokio_tungstenite::accept_async(sock).await.unwrap();
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(60), ws.next())
                .await
                .expect("no Hello")
                .expect("the agent hung up")
                .unwrap();
            let Message::Text(t) = msg else { continue };
            match serde_json::from_str(t.as_str()).unwrap() {
                AgentMessage::Hello { labels, .. } => break labels,
                m => panic!("the first message is not Hello: {m:?}"),
            }
        }
    });
    agent.shutdown_background();
    assert_eq!(labels, admin, "no GPU here: only the admin's and the CPU's");

    // Without the admin's word, the CPU's model as /proc/cpuinfo names it.
    let detected = gantry_agent::labels::node_labels(&BTreeMap::new());
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap();
    if let Some(model) = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
    {
        assert_eq!(detected["cpu.model"], model.1.trim());
    }
}

// --- setup and cleanup ----------------------------------------------------------------------

type Test = (&'static str, fn(&Ctx));

const TESTS: &[Test] = &[
    (
        "containers_reach_their_workflows_host_services",
        containers_reach_their_workflows_host_services,
    ),
    ("services_change_at_runtime", services_change_at_runtime),
    ("hello_carries_the_labels", hello_carries_the_labels),
];

fn run(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A /24 of `10.A.0.0/16` that the host routes nowhere yet: its third octet.
fn free_octet(a: u8) -> u8 {
    let out = Command::new("ip").args(["-4", "route"]).output().unwrap();
    let routes = String::from_utf8_lossy(&out.stdout).into_owned();
    (0..250)
        .map(|i| ((std::process::id() as usize + i) % 250 + 1) as u8)
        .find(|k| !routes.contains(&format!("10.{a}.{k}.")))
        .expect("no free subnet")
}

fn tcp_listener(ns: Option<&Path>) -> u16 {
    let bind = || TcpListener::bind("0.0.0.0:0").unwrap();
    let l = match ns {
        Some(ns) => net::netns::run_in(ns, bind).unwrap(),
        None => bind(),
    };
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || for _ in l.incoming() {});
    port
}

/// A TCP listener and a UDP socket on one port of every host address.
fn tcp_and_udp() -> (u16, UdpSocket) {
    loop {
        let port = tcp_listener(None);
        if let Ok(u) = UdpSocket::bind(("0.0.0.0", port)) {
            return (port, u);
        }
    }
}

fn teardown(dir: &Path) {
    let veth = fs::read_to_string(dir.join("veth")).unwrap_or_default();
    if !veth.is_empty() && Path::new("/sys/class/net").join(&veth).exists() {
        let _ = Command::new("ip").args(["link", "delete", &veth]).status();
    }
    common::remove_agent_network(&dir.join("node/net"));
    common::unmount_beneath(dir);
    let _ = fs::remove_dir_all(dir);
}

fn main() {
    let Some(selected) = common::select(TESTS) else {
        return;
    };
    assert!(
        net::find_plugin_dir().is_some(),
        "no CNI plugins: apt-get install containernetworking-plugins"
    );
    let root = std::env::var("GANTRY_TEST_DIR").unwrap_or_else(|_| "/tmp/gantry-test".into());
    let base = Path::new(&root).join("agent-labels");
    fs::create_dir_all(&base).unwrap();
    for e in fs::read_dir(&base).unwrap().flatten() {
        let pid = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok());
        if pid.is_some_and(|p| !common::pid_alive(p)) {
            teardown(&e.path());
        }
    }
    let dir = base.join(std::process::id().to_string());
    teardown(&dir);
    fs::create_dir_all(&dir).unwrap();
    let forwarding = common::forwarding();

    let state = dir.join("node");
    fs::create_dir_all(&state).unwrap();
    let config = NetConfig::for_agent(&state, &format!("svctest-{}", std::process::id()));
    let network = Network::new(config).unwrap();
    let k = free_octet(233);
    network.set_subnet(&format!("10.233.{k}.0/24")).unwrap();

    // This node's second pair of addresses and the other node behind them.
    let k = free_octet(234);
    let veth = format!("gts{:x}", std::process::id());
    fs::write(dir.join("veth"), &veth).unwrap();
    let remote_ns = dir.join("remote-ns");
    net::netns::create(&remote_ns).unwrap();
    let ns_arg = remote_ns.display().to_string();
    let (node, node_other, remote) = (
        format!("10.234.{k}.1"),
        format!("10.234.{k}.2"),
        format!("10.234.{k}.9"),
    );
    run(&[
        "ip", "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns_arg,
    ]);
    run(&["ip", "addr", "add", &format!("{node}/24"), "dev", &veth]);
    run(&[
        "ip",
        "addr",
        "add",
        &format!("{node_other}/32"),
        "dev",
        &veth,
    ]);
    run(&["ip", "link", "set", &veth, "up"]);
    let net_arg = format!("--net={ns_arg}");
    let in_ns = |args: &[&str]| {
        let mut v = vec!["nsenter", &net_arg, "ip"];
        v.extend_from_slice(args);
        run(&v);
    };
    let with_prefix = format!("{remote}/24");
    in_ns(&["addr", "add", &with_prefix, "dev", "eth0"]);
    in_ns(&["link", "set", "eth0", "up"]);
    in_ns(&["link", "set", "lo", "up"]);
    in_ns(&["route", "add", "default", "via", &node]);

    let (allowed, udp_allowed) = tcp_and_udp();
    let (other, udp_other) = tcp_and_udp();
    let ctx = Ctx {
        dir: dir.clone(),
        net: network,
        node: node.parse().unwrap(),
        node_other: node_other.parse().unwrap(),
        remote: remote.parse().unwrap(),
        allowed,
        other,
        udp_allowed,
        udp_other,
        remote_allowed: tcp_listener(Some(&remote_ns)),
        remote_other: tcp_listener(Some(&remote_ns)),
    };
    let tally = common::run_all(
        TESTS.len(),
        &selected,
        |t| t(&ctx),
        || {
            ctx.net.cleanup(&[]);
        },
    );
    drop(ctx);
    teardown(&dir);
    common::restore_forwarding(&forwarding);
    tally.finish();
}
