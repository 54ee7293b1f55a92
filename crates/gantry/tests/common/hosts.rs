//! Several hosts on one machine: each a network namespace of its own, joined to a test bridge
//! in the root namespace by a veth pair, with its own address and its own `gantry agent`; the
//! `gantry server` listens on the bridge's address. What crosses between hosts crosses that
//! bridge, as it would a switch, so a host's link can be taken down as a cable pulled out.
//! The pool's storage root is one directory, bind-mounted at each host's own path, as an NFS
//! export is mounted on each node. Needs root and iproute2 (`ip`, `nsenter`, `unshare`).

use super::{registry, Cluster, GANTRY};
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Names of everything a fixture makes in the kernel start with this (`scripts/cleanup.sh`
/// removes what a killed run left: links and namespaces matching `gmh<N>` and `gmh<N>h<I>`).
pub const PREFIX: &str = "gmh";

/// One host: its namespace, the root namespace's end of its link, its address, and its agent.
pub struct Host {
    /// The node's name, as `node list` shows it.
    pub name: String,
    /// The network namespace (`ip netns`), and also the name of the link's end on the bridge.
    pub ns: String,
    pub addr: Ipv4Addr,
    agent: Option<Child>,
    /// More flags for its agent.
    extra: Vec<String>,
}

pub struct Hosts {
    /// The server's data dir and the client verbs (which reach the server on the bridge).
    pub cluster: Cluster,
    pub hosts: Vec<Host>,
    /// The bridge, and its address: the server's, and each host's default route.
    pub bridge: String,
    pub gateway: Ipv4Addr,
    server: Option<Child>,
    relay: Option<Relay>,
    /// The test's own relays ([`Hosts::reach`]).
    relays: Vec<Relay>,
    /// The shared storage root that each host's bind mounts show.
    storage: PathBuf,
}

/// A TCP relay from the bridge's address to a service on the root namespace's loopback (the
/// local registry, a test's HTTP or S3 server), which no host reaches: each namespace has a
/// loopback of its own.
/// Forwarding the bridge's address to 127.0.0.1 in the kernel would need `route_localnet` and
/// a DNAT rule beside the agents' own nftables tables, and would outlive a killed run; this
/// thread dies with the test.
struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    fn start(ip: Ipv4Addr, target: String) -> Relay {
        let listener = TcpListener::bind((ip, 0)).expect("binding the registry relay");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        if let Ok(upstream) = TcpStream::connect(&target) {
                            pipe(client, upstream);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        });
        Relay {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

/// Copies both ways until each side closes, passing each half-close on.
fn pipe(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let one = |mut from: TcpStream, mut to: TcpStream| {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(std::net::Shutdown::Write);
        });
    };
    one(a, b2);
    one(b, a2);
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `ip ARGS`, which must succeed.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ip_quiet(args: &[&str]) {
    let _ = Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Kills the child when the test's thread ends, as when the test process is killed (a
/// timeout, Ctrl-C): a server and agents left running there would keep the namespaces and
/// retry a dead bridge forever, and `scripts/cleanup.sh` cannot tell them from a real
/// cluster's processes. The signal survives the `nsenter`, `unshare` and `sh` that exec the
/// agent.
fn dies_with_test(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: only prctl, which is async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Makes a bridge `gmh<N>` with address 10.77.N.1/24 for an N that neither a link nor an
/// address of this machine uses yet: tests of one binary run in parallel, and a killed run
/// may have left its bridge. Returns the bridge and N.
fn new_bridge() -> (String, u8) {
    // One at a time: between the check and `ip link add` another test could take the same N.
    static ALLOC: Mutex<()> = Mutex::new(());
    let _one = ALLOC.lock().unwrap_or_else(|e| e.into_inner());
    let addrs = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .expect("running ip");
    let addrs = String::from_utf8_lossy(&addrs.stdout).into_owned();
    let start = std::process::id() % 200;
    for k in 0..200 {
        let n = (20 + (start + k * 7) % 200) as u8;
        let name = format!("{PREFIX}{n}");
        if std::path::Path::new("/sys/class/net").join(&name).exists()
            || addrs.contains(&format!(" 10.77.{n}."))
        {
            continue;
        }
        let made = Command::new("ip")
            .args(["link", "add", &name, "type", "bridge"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if made {
            return (name, n);
        }
    }
    panic!("no free 10.77.N.0/24 for a test bridge");
}

/// Run inside a host's namespace, before its agent: a fresh sysfs (so that `/sys/class/net`
/// lists the namespace's links, as the agent and the CNI plugins expect) with the machine's
/// cgroup hierarchy kept beneath it. `ip netns exec` mounts the fresh sysfs too, but drops
/// `/sys/fs/cgroup` with the old one, and runc cannot start a container without it.
const SYSFS: &str = r#"set -e
cg=$1; shift
mount --rbind /sys/fs/cgroup "$cg"
umount -l /sys
mount -t sysfs sysfs /sys
mount --rbind "$cg" /sys/fs/cgroup
umount -l "$cg"
exec "$@""#;

impl Hosts {
    /// A server with heartbeat timeout `heartbeat_timeout` and `n` hosts, each with an agent
    /// of one core named `host-<i>`, all READY.
    pub fn start(n: usize, heartbeat_timeout: &str) -> Hosts {
        Hosts::start_with(n, heartbeat_timeout, |_| vec![])
    }

    /// As [`Hosts::start`], with more flags for host `i`'s agent from `extra(i)`.
    pub fn start_with(
        n: usize,
        heartbeat_timeout: &str,
        extra: impl Fn(usize) -> Vec<String>,
    ) -> Hosts {
        let dir = tempfile::Builder::new()
            .prefix("gantry-e2e-")
            .tempdir()
            .unwrap();
        // A job's root is an unprivileged host uid (a user namespace), which must pass through
        // the data dir to its container's files.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let (bridge, net) = new_bridge();
        let gateway = Ipv4Addr::new(10, 77, net, 1);
        let storage = dir.path().join("storage");
        std::fs::create_dir_all(&storage).unwrap();
        let cluster = Cluster {
            dir,
            port: super::free_port(),
            agents: n as u32,
            child: None,
            extra: vec![],
            listen_ip: gateway.to_string(),
        };
        // From here on, whatever fails is undone by Drop.
        let mut h = Hosts {
            cluster,
            hosts: vec![],
            bridge,
            gateway,
            server: None,
            relay: None,
            relays: vec![],
            storage,
        };
        ip(&["addr", "add", &format!("{gateway}/24"), "dev", &h.bridge]);
        ip(&["link", "set", &h.bridge, "up"]);
        h.relay = Some(Relay::start(gateway, registry().to_owned()));
        for i in 0..n {
            h.add_host(i, net, extra(i));
        }
        h.start_server(heartbeat_timeout);
        for i in 0..n {
            h.start_agent(i);
        }
        h
    }

    /// Host `i`'s namespace and link (10.77.net.(10+i)), and its storage root's bind mount.
    fn add_host(&mut self, i: usize, net: u8, extra: Vec<String>) {
        let ns = format!("{}h{i}", self.bridge);
        let addr = Ipv4Addr::new(10, 77, net, 10 + i as u8);
        ip(&["netns", "add", &ns]);
        self.hosts.push(Host {
            name: format!("host-{i}"),
            ns: ns.clone(),
            addr,
            agent: None,
            extra,
        });
        ip(&[
            "link", "add", &ns, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ]);
        ip(&["link", "set", &ns, "master", &self.bridge, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        ip(&[
            "-n",
            &ns,
            "route",
            "add",
            "default",
            "via",
            &self.gateway.to_string(),
        ]);
        let root = self.storage_root(i);
        std::fs::create_dir_all(&root).unwrap();
        let st = Command::new("mount")
            .arg("--bind")
            .arg(&self.storage)
            .arg(&root)
            .status()
            .unwrap();
        assert!(st.success(), "bind-mounting the storage root at {root:?}");
        std::fs::create_dir_all(self.host_dir(i).join("cgroup")).unwrap();
    }

    fn host_dir(&self, i: usize) -> PathBuf {
        self.cluster
            .data_dir()
            .join("hosts")
            .join(&self.hosts[i].name)
    }

    /// Host `i`'s view of the shared storage root (its agent's `--storage-root`).
    pub fn storage_root(&self, i: usize) -> PathBuf {
        self.host_dir(i).join("storage")
    }

    /// The storage root's one directory, which every host's mount shows.
    pub fn shared_storage(&self) -> &std::path::Path {
        &self.storage
    }

    /// Host `i`'s agent state directory (where the cluster's drop finds its containers).
    pub fn state_dir(&self, i: usize) -> PathBuf {
        self.cluster
            .data_dir()
            .join("agents")
            .join(&self.hosts[i].name)
    }

    fn start_server(&mut self, heartbeat_timeout: &str) {
        let c = &self.cluster;
        let log = c.log_file();
        let server = dies_with_test(&mut Command::new(GANTRY))
            .args([
                "server",
                "--listen",
                &format!("{}:{}", self.gateway, c.port),
            ])
            .arg("--data-dir")
            .arg(c.data_dir())
            .args([
                "--heartbeat-timeout",
                heartbeat_timeout,
                "--stop-grace",
                "2s",
            ])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting gantry server");
        self.server = Some(server);
        let ctx = c.data_dir().join("context.toml");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(ctx.exists() && c.gantry(&["node", "list"]).status.success()) {
            assert!(
                Instant::now() < deadline,
                "server did not start: {}",
                c.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts host `i`'s agent in its namespace and waits until its node is READY at the
    /// host's address.
    pub fn start_agent(&mut self, i: usize) {
        let c = &self.cluster;
        let host = &self.hosts[i];
        let log = c.log_file();
        let mirror = self.relay.as_ref().unwrap().addr;
        let child = dies_with_test(&mut Command::new("nsenter"))
            .arg(format!("--net=/run/netns/{}", host.ns))
            .args(["--", "unshare", "--mount", "--propagation", "slave", "--"])
            .args(["sh", "-c", SYSFS, "sh"])
            .arg(self.host_dir(i).join("cgroup"))
            .arg(GANTRY)
            .args([
                "agent",
                "--server",
                &format!("http://{}:{}", self.gateway, c.port),
                "--token",
                &c.admin_token(),
                "--pool",
                "default",
                "--name",
                &host.name,
                "--cpus",
                "1",
                "--memory",
                "2GiB",
                "--metrics-listen",
                "127.0.0.1:0",
                "--advertise",
                &host.addr.to_string(),
                "--registry-mirror",
                &format!("docker.io=http://{mirror}"),
            ])
            .arg("--storage-root")
            .arg(self.storage_root(i))
            .arg("--state-dir")
            .arg(self.state_dir(i))
            .args(&host.extra)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting gantry agent in its namespace");
        self.hosts[i].agent = Some(child);
        let name = self.hosts[i].name.clone();
        let addr = self.hosts[i].addr.to_string();
        self.wait_node(&name, &format!("{name} READY at {addr}"), |n| {
            n["connected"] == true && n["state"] == "READY" && n["address"] == addr.as_str()
        });
    }

    /// An address on the bridge, where the hosts reach `target` (a `host:port` on this
    /// machine's loopback, which they cannot reach), for as long as these hosts live.
    pub fn reach(&mut self, target: &str) -> SocketAddr {
        let relay = Relay::start(self.gateway, target.to_owned());
        let addr = relay.addr;
        self.relays.push(relay);
        addr
    }

    /// Kills host `i`'s agent (its containers live on).
    pub fn kill_agent(&mut self, i: usize) {
        if let Some(mut a) = self.hosts[i].agent.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
    }

    /// Takes host `i`'s link down (or up again) at the bridge, as a cable pulled out.
    pub fn link(&self, i: usize, up: bool) {
        ip(&[
            "link",
            "set",
            &self.hosts[i].ns,
            if up { "up" } else { "down" },
        ]);
    }

    /// The node `name` as `node list` shows it.
    pub fn node(&self, name: &str) -> serde_json::Value {
        self.cluster
            .json(&["node", "list"])
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .cloned()
            .unwrap_or(serde_json::Value::Null)
    }

    /// Waits (up to two minutes) until `pred` holds for node `name`.
    pub fn wait_node(
        &self,
        name: &str,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        super::poll(
            || self.node(name),
            pred,
            |n| {
                format!(
                    "timed out waiting for {what}: {n:#}\n{}",
                    self.cluster.log()
                )
            },
        )
    }

    /// The index of the host whose node is `name`.
    pub fn index(&self, name: &str) -> usize {
        self.hosts
            .iter()
            .position(|h| h.name == name)
            .unwrap_or_else(|| panic!("no host runs node {name}"))
    }

    /// The containers runc lists in host `i`'s agent's root.
    pub fn containers(&self, i: usize) -> Vec<String> {
        let out = Command::new("runc")
            .arg("--root")
            .arg(self.state_dir(i).join("runc"))
            .args(["list", "-q"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Runs `cmd` in host `i`'s network namespace; its output.
    pub fn exec(&self, i: usize, cmd: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.hosts[i].ns])
            .args(cmd)
            .output()
            .unwrap()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for i in 0..self.hosts.len() {
            self.kill_agent(i);
        }
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        self.relay.take();
        self.relays.clear();
        // Deleting one end of a veth pair deletes both, even while a container still holds the
        // namespace (the cluster's drop, after this, kills the containers); the namespace, its
        // container bridge and its nftables tables go with its last process.
        for h in &self.hosts {
            ip_quiet(&["link", "del", &h.ns]);
            ip_quiet(&["netns", "del", &h.ns]);
        }
        ip_quiet(&["link", "del", &self.bridge]);
    }
}
