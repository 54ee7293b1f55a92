//! Container networking: each networked container gets a network namespace of its own,
//! attached to this node's bridge by the standard CNI `bridge` plugin with `host-local`
//! addresses from the node's subnet (which the server hands out in `Welcome`), plus the
//! `loopback` plugin for `lo`.
//!
//! Everything lives under the agent's own directory (`<state>/net/`), so several agents on one
//! host (`gantry up --agents N`) never collide: each has its own bridge (named from the agent's
//! name, see [`bridge_name`]), its own address allocations and its own namespaces.
//!
//! ```text
//! netns/<id>          the container's namespace, a bind mount of nsfs (like `ip netns add`)
//! attachments/<id>    what was done for it (JSON): namespace, configuration, CNI result,
//!                     address; written before the plugins run, so a crash leaves a record
//! ipam/               host-local's data directory
//! peers/<workflow>    the workflow's containers on other nodes, as the server last said
//! services/<workflow> the workflow's host-network services, as the server last said
//! bridge              the bridge's name, once one may have been made
//! ```
//!
//! The namespace outlives the container's processes: it is removed (after a CNI DEL) only by
//! [`Network::detach`], when the container itself is removed. A restarted agent therefore finds
//! every container's namespace and address where it left them.
//!
//! Every container belongs to a workflow, and the node's firewall ([`firewall`]) lets it reach
//! only its own workflow's containers and host-network services, the Gantry server, the host
//! ports the site allows, and the outside world when its egress is allowed. The firewall's tables are made with the
//! first attachment, changed by one batch per attach and detach, removed with the bridge, and
//! rebuilt from the records when the agent starts (containers outlive the agent).

mod cni;
pub mod firewall;
pub mod netns;

use crate::lock;
use crate::runtime::valid_id;
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use gantry_api::agent::HostEntry;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Digest;

pub use cni::find_plugin_dir;
pub use firewall::{HostPort, Proto};

/// The interface name inside containers.
pub const IFNAME: &str = "eth0";

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error(
        "this node has no container subnet yet (the server gives one when the agent connects)"
    )]
    NoSubnet,
    #[error("bad subnet `{0}`: expected an IPv4 network like 10.200.3.0/24 (prefix 8 to 28)")]
    BadSubnet(String),
    #[error("bad /etc/hosts entry `{name}` -> `{address}`: {why}")]
    BadHost {
        name: String,
        address: String,
        why: String,
    },
    #[error("bad container id `{0}`")]
    BadId(String),
    #[error("no CNI plugins found in /usr/lib/cni or /opt/cni/bin (install containernetworking-plugins)")]
    NoPlugins,
    #[error("CNI {plugin} {command}: {message}")]
    Plugin {
        plugin: String,
        command: String,
        message: String,
    },
    #[error("the CNI result names no IPv4 address: {0}")]
    NoAddress(String),
    #[error("the CNI result names no host-side interface and MAC for the container: {0}")]
    NoPort(String),
    #[error("bad workflow id `{0}`")]
    BadWorkflow(String),
    #[error("the node's firewall (nftables): {0}")]
    Firewall(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> NetError {
    let context = context.into();
    move |source| NetError::Io { context, source }
}

/// A bridge name of at most 15 characters (the kernel's limit) that is the same for an agent
/// across restarts and different for agents of different names: `gtr` + 8 hex digits of a
/// hash of the name.
pub fn bridge_name(agent: &str) -> String {
    let h = sha2::Sha256::digest(agent.as_bytes());
    format!("gtr{}", &hex::encode(h)[..8])
}

/// An IPv4 network, e.g. `10.200.3.0/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Subnet {
    pub network: Ipv4Addr,
    pub prefix: u8,
}

impl Subnet {
    /// The bridge's own address (host-local's default gateway: the subnet's first address),
    /// where the node is seen from its containers.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network).wrapping_add(1))
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = u32::MAX << (32 - u32::from(self.prefix));
        u32::from(ip) & mask == u32::from(self.network)
    }
}

impl std::str::FromStr for Subnet {
    type Err = NetError;
    fn from_str(s: &str) -> Result<Self, NetError> {
        let bad = || NetError::BadSubnet(s.to_owned());
        let (addr, prefix) = s.trim().split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        // Room for the gateway and a few containers; a /8 is already absurdly large.
        if !(8..=28).contains(&prefix) {
            return Err(bad());
        }
        let mask = u32::MAX << (32 - u32::from(prefix));
        Ok(Subnet {
            network: Ipv4Addr::from(u32::from(addr) & mask),
            prefix,
        })
    }
}

impl std::fmt::Display for Subnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl TryFrom<String> for Subnet {
    type Error = NetError;
    fn try_from(s: String) -> Result<Self, NetError> {
        s.parse()
    }
}

impl From<Subnet> for String {
    fn from(s: Subnet) -> String {
        s.to_string()
    }
}

/// Where one agent's networking lives, and what its containers may reach of the host.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetConfig {
    /// `<agent state>/net`.
    pub state_dir: PathBuf,
    /// The bridge (see [`bridge_name`]).
    pub bridge: String,
    /// The CNI plugin directory; `None` looks in the usual places when first needed.
    pub plugin_dir: Option<PathBuf>,
    /// Ports of the host's own addresses that containers may reach (`--host-allow`); nothing
    /// else listening on the host is reachable from a container.
    pub host_allow: Vec<HostPort>,
    /// The Gantry server as this agent reaches it: containers may always reach it (its
    /// endpoint proxy is how one workflow reaches another's services), and it may reach them.
    pub server: Vec<SocketAddrV4>,
}

impl NetConfig {
    /// The configuration of the agent named `agent` with state under `agent_state`.
    pub fn for_agent(agent_state: &Path, agent: &str) -> Self {
        NetConfig {
            state_dir: agent_state.join("net"),
            // Keyed by the state dir too: two clusters on one host (tests, a developer's
            // machine) may both have an agent called `host-1`, and must not share a bridge.
            bridge: bridge_name(&format!("{agent}@{}", agent_state.display())),
            ..Default::default()
        }
    }
}

/// What a container's network may reach, given when it is attached.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    /// Its workflow's id: containers of one workflow reach each other, and no other
    /// workflow's (those only through the server's endpoints).
    pub workflow: String,
    /// Whether it may open connections to the outside world.
    pub egress: bool,
    /// Its workflow's containers on other nodes, as the server knew them when it assigned this
    /// one; the server's `Peers` messages keep them current.
    pub peers: Vec<Ipv4Addr>,
    /// Its workflow's host-network services (`NetworkSpec::node_services`): on a node's own
    /// address, so only these pairs of all the nodes' addresses and ports are open to it.
    pub node_services: Vec<SocketAddrV4>,
}

/// What the server says of a workflow beyond its containers here, each kept in a directory
/// of its own (a file per workflow).
#[derive(Debug, Clone, Copy)]
enum Known {
    Peers,
    Services,
}

impl Known {
    fn dir(self) -> &'static str {
        match self {
            Known::Peers => "peers",
            Known::Services => "services",
        }
    }
}

fn yes() -> bool {
    true
}

/// What was done to give one container its network. Stored as JSON in `attachments/<id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attachment {
    pub id: String,
    /// The namespace file the container joins.
    pub netns: PathBuf,
    /// The bridge plugin's configuration, needed again for the DEL.
    pub config: serde_json::Value,
    /// The ADD result (`null` until the ADD succeeded).
    #[serde(default)]
    pub result: serde_json::Value,
    /// The container's address on the bridge.
    #[serde(default)]
    pub address: Option<Ipv4Addr>,
    /// Its workflow ([`Policy::workflow`]). Records without one (made before workflows were
    /// kept apart) count as a workflow of their own.
    #[serde(default)]
    pub workflow: Option<String>,
    /// [`Policy::egress`]; records without one keep what they had, the outside world.
    #[serde(default = "yes")]
    pub egress: bool,
}

impl Attachment {
    /// The container as the firewall knows it, once it has an address.
    fn member(&self, bridge: &str) -> Option<firewall::Member> {
        Some(firewall::Member {
            port: cni::result_port(&self.result, bridge),
            address: self.address?,
            workflow: self.workflow.clone().unwrap_or_else(|| self.id.clone()),
            egress: self.egress,
        })
    }
}

/// One agent's container networking. Blocking: call it from blocking tasks.
#[derive(Debug)]
pub struct Network {
    cfg: NetConfig,
    subnet: Mutex<Option<Subnet>>,
    /// Held for every firewall change, so records and tables change in one order.
    firewall: Mutex<FwState>,
}

#[derive(Debug, Default)]
struct FwState {
    /// This process has built the tables whole: until then, a change rebuilds them.
    ready: bool,
    /// What the tables hold (when `ready`): each workflow's containers here.
    members: BTreeMap<String, std::collections::BTreeSet<String>>,
    /// Containers out of the firewall whose records are not removed yet: they count for
    /// nothing (not as members of their workflow, not in a rebuild).
    withdrawn: std::collections::BTreeSet<String>,
}

impl Network {
    pub fn new(cfg: NetConfig) -> Result<Self, NetError> {
        if cfg.bridge.is_empty()
            || cfg.bridge.len() > 15
            || !cfg.bridge.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return Err(NetError::Io {
                context: format!("bridge name `{}`", cfg.bridge),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "1-15 letters and digits are allowed",
                ),
            });
        }
        for d in [
            "netns",
            "attachments",
            "ipam",
            Known::Peers.dir(),
            Known::Services.dir(),
        ] {
            let p = cfg.state_dir.join(d);
            fs::create_dir_all(&p).map_err(io_err(format!("creating {}", p.display())))?;
        }
        Ok(Network {
            cfg,
            subnet: Mutex::new(None),
            firewall: Mutex::default(),
        })
    }

    pub fn config(&self) -> &NetConfig {
        &self.cfg
    }

    pub fn bridge(&self) -> &str {
        &self.cfg.bridge
    }

    /// Sets the node's subnet (from the server's `Welcome`). Containers attached before keep
    /// their addresses.
    pub fn set_subnet(&self, subnet: &str) -> Result<Subnet, NetError> {
        let s: Subnet = subnet.parse()?;
        *lock(&self.subnet) = Some(s);
        Ok(s)
    }

    pub fn subnet(&self) -> Option<Subnet> {
        *lock(&self.subnet)
    }

    fn netns_path(&self, id: &str) -> PathBuf {
        self.cfg.state_dir.join("netns").join(id)
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.cfg.state_dir.join("attachments").join(id)
    }

    fn ipam_dir(&self) -> PathBuf {
        self.cfg.state_dir.join("ipam")
    }

    /// The CNI network name: host-local keeps its allocations under it, and the bridge plugin
    /// names its masquerading rules after it.
    fn network_name(&self) -> String {
        format!("gantry-{}", self.cfg.bridge)
    }

    fn plugin_dir(&self) -> Result<PathBuf, NetError> {
        self.cfg
            .plugin_dir
            .clone()
            .or_else(find_plugin_dir)
            .ok_or(NetError::NoPlugins)
    }

    fn bridge_config(&self, subnet: Subnet) -> serde_json::Value {
        serde_json::json!({
            "cniVersion": cni::CNI_VERSION,
            "name": self.network_name(),
            "type": "bridge",
            "bridge": self.cfg.bridge,
            "isGateway": true,
            "ipMasq": true,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{ "subnet": subnet.to_string() }]],
                "routes": [{ "dst": "0.0.0.0/0" }],
                "dataDir": self.ipam_dir(),
            },
        })
    }

    fn loopback_config() -> serde_json::Value {
        serde_json::json!({
            "cniVersion": cni::CNI_VERSION,
            "name": "gantry-loopback",
            "type": "loopback",
        })
    }

    fn write_record(&self, a: &Attachment) -> Result<(), NetError> {
        let p = self.record_path(&a.id);
        let json = serde_json::to_vec_pretty(a).map_err(|e| io_err("attachment")(e.into()))?;
        // Hidden, so a half-written record is never listed as an attachment.
        let tmp = p.with_file_name(format!(".{}.tmp", a.id));
        fs::write(&tmp, json)
            .and_then(|()| fs::rename(&tmp, &p))
            .map_err(io_err(format!("writing {}", p.display())))
    }

    /// What was recorded for a container, if it has a network.
    pub fn attachment(&self, id: &str) -> Option<Attachment> {
        if !valid_id(id) {
            return None;
        }
        serde_json::from_slice(&fs::read(self.record_path(id)).ok()?).ok()
    }

    /// The containers with a record, sorted.
    pub fn attachments(&self) -> Vec<String> {
        let mut ids: Vec<String> = fs::read_dir(self.cfg.state_dir.join("attachments"))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| valid_id(n))
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids
    }

    /// Makes a network namespace for container `id` (owned by `userns`, the user namespace
    /// the container will run in, see `Runtime::job_userns_for`; else by the host's), attaches
    /// it to the bridge (creating the bridge on first use) and admits it to the firewall as
    /// `policy` says. Returns what to give the runtime (the namespace path) and the address. If
    /// `id` is attached already, returns that attachment. On error nothing is left.
    pub fn attach(
        &self,
        id: &str,
        policy: &Policy,
        userns: Option<&crate::runtime::userns::UserNs>,
    ) -> Result<Attachment, NetError> {
        if !valid_id(id) {
            return Err(NetError::BadId(id.to_owned()));
        }
        if !valid_id(&policy.workflow) {
            return Err(NetError::BadWorkflow(policy.workflow.clone()));
        }
        if let Some(a) = self.attachment(id).filter(|a| a.address.is_some()) {
            if netns::is_mounted(&a.netns) {
                return Ok(a);
            }
        }
        let subnet = self.subnet().ok_or(NetError::NoSubnet)?;
        let dir = self.plugin_dir()?;
        // Whatever an earlier try left for this id goes first.
        if let Err(e) = self.detach(id) {
            tracing::warn!(container = id, "cleaning up an earlier attach: {e}");
        }
        let ns = self.netns_path(id);
        netns::create_in(&ns, userns).map_err(io_err(format!(
            "creating network namespace {}",
            ns.display()
        )))?;
        let mut record = Attachment {
            id: id.to_owned(),
            netns: ns.clone(),
            config: self.bridge_config(subnet),
            result: serde_json::Value::Null,
            address: None,
            workflow: Some(policy.workflow.clone()),
            egress: policy.egress,
        };
        let bridge_file = self.cfg.state_dir.join("bridge");
        let added = fs::write(&bridge_file, &self.cfg.bridge)
            .map_err(io_err(format!("writing {}", bridge_file.display())))
            .and_then(|()| self.write_record(&record))
            .and_then(|()| {
                let lo = Self::loopback_config();
                cni::Call {
                    dir: &dir,
                    command: "ADD",
                    container_id: id,
                    netns: &ns,
                    ifname: "lo",
                    config: &lo,
                }
                .run()?;
                cni::Call {
                    dir: &dir,
                    command: "ADD",
                    container_id: id,
                    netns: &ns,
                    ifname: IFNAME,
                    config: &record.config,
                }
                .run()
            })
            .and_then(|result| {
                let (address, _) = cni::result_address(&result)
                    .ok_or_else(|| NetError::NoAddress(result.to_string()))?;
                // Without its port the firewall could not bind the container to its address.
                if cni::result_port(&result, &self.cfg.bridge).is_none() {
                    return Err(NetError::NoPort(result.to_string()));
                }
                record.result = result;
                record.address = Some(address);
                self.write_record(&record)
            })
            .and_then(|()| self.admit(&record, policy));
        match added {
            Ok(()) => Ok(record),
            Err(e) => {
                if let Err(e2) = self.detach(id) {
                    tracing::warn!(container = id, "cleaning up a failed attach: {e2}");
                }
                Err(e)
            }
        }
    }

    /// Undoes [`Network::attach`]: out of the firewall, CNI DEL (which removes the veth pair
    /// and the masquerading rule, and releases the address), then the namespace. Harmless when there is nothing to
    /// undo. Everything is removed even when a plugin fails; the first error is returned.
    pub fn detach(&self, id: &str) -> Result<(), NetError> {
        if !valid_id(id) {
            return Err(NetError::BadId(id.to_owned()));
        }
        let ns = self.netns_path(id);
        let record = self.attachment(id);
        let mut first: Option<NetError> = None;
        // Out of the firewall before its address is released: a container that gets the
        // address next must not inherit what this one could reach.
        if let Some(rec) = &record {
            if let Err(e) = self.withdraw(rec) {
                first.get_or_insert(e);
            }
        }
        if let Some(rec) = &record {
            match self.plugin_dir() {
                Ok(dir) => {
                    // The bridge plugin finds the addresses to unmasquerade on the interface
                    // in the namespace: it must still be there.
                    let in_ns = netns::is_mounted(&rec.netns);
                    let netns_arg = if in_ns {
                        rec.netns.as_path()
                    } else {
                        Path::new("")
                    };
                    let mut config = rec.config.clone();
                    if !rec.result.is_null() {
                        config["prevResult"] = rec.result.clone();
                    }
                    let calls = [(config, IFNAME), (Self::loopback_config(), "lo")];
                    for (config, ifname) in &calls {
                        let del = cni::Call {
                            dir: &dir,
                            command: "DEL",
                            container_id: id,
                            netns: netns_arg,
                            ifname,
                            config,
                        }
                        .run();
                        if let Err(e) = del {
                            first.get_or_insert(e);
                        }
                    }
                }
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        if let Err(e) = netns::remove(&ns) {
            first.get_or_insert(io_err(format!("removing {}", ns.display()))(e));
        }
        // host-local forgets the address on DEL; if that failed, the allocation goes here.
        self.release_addresses(|owner| owner == id);
        if record.is_some() {
            let p = self.record_path(id);
            match fs::remove_file(&p) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    first.get_or_insert(io_err(format!("removing {}", p.display()))(e));
                }
                _ => {
                    lock(&self.firewall).withdrawn.remove(id);
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Removes host-local allocations whose owner matches. Its files are
    /// `<dataDir>/<network>/<ip>` holding `<container id>\r\n<ifname>`.
    fn release_addresses(&self, remove: impl Fn(&str) -> bool) {
        let Ok(nets) = fs::read_dir(self.ipam_dir()) else {
            return;
        };
        for net in nets.flatten() {
            let Ok(files) = fs::read_dir(net.path()) else {
                continue;
            };
            for f in files.flatten() {
                let is_ip = f
                    .file_name()
                    .to_str()
                    .is_some_and(|n| n.parse::<IpAddr>().is_ok());
                if !is_ip {
                    continue;
                }
                let owner = fs::read_to_string(f.path()).unwrap_or_default();
                let owner = owner.lines().next().unwrap_or("").trim();
                if remove(owner) {
                    let _ = fs::remove_file(f.path());
                }
            }
        }
    }

    /// At agent start: detaches every container not in `live` (a crash or a removal that did
    /// not finish), removes namespace files nothing records, and address allocations nothing
    /// owns. Returns the ids it detached.
    pub fn cleanup(&self, live: &[String]) -> Vec<String> {
        let mut gone = Vec::new();
        for id in self.attachments() {
            if live.contains(&id) {
                continue;
            }
            if let Err(e) = self.detach(&id) {
                tracing::warn!(container = %id, "removing a leftover network: {e}");
            }
            gone.push(id);
        }
        let recorded = self.attachments();
        if let Ok(rd) = fs::read_dir(self.cfg.state_dir.join("netns")) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if recorded.contains(&name) || live.contains(&name) {
                    continue;
                }
                if let Err(err) = netns::remove(&e.path()) {
                    tracing::warn!("removing {}: {err}", e.path().display());
                }
                if !gone.contains(&name) {
                    gone.push(name);
                }
            }
        }
        self.release_addresses(|owner| !recorded.iter().any(|r| r == owner));
        // What the server said of workflows with no container here any more.
        let mut fw = lock(&self.firewall);
        let workflows = self.local_workflows(&fw);
        for k in [Known::Peers, Known::Services] {
            let Ok(rd) = fs::read_dir(self.known_dir(k)) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !workflows.contains(&name) {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        // The tables as the records say: kept, or rebuilt if the kernel lost them. An agent
        // with nothing attached and no bridge has none.
        let result = if recorded.is_empty() && !self.bridge_exists() {
            fw.ready = false;
            fw.members.clear();
            match firewall::available() {
                true => firewall::apply(&self.tables().delete()).map_err(NetError::Firewall),
                false => Ok(()),
            }
        } else {
            self.rebuild(&mut fw)
        };
        if let Err(e) = result {
            tracing::warn!(bridge = self.bridge(), "the container firewall: {e}");
        }
        gone
    }

    fn tables(&self) -> firewall::Tables<'_> {
        firewall::Tables {
            name: &self.cfg.bridge,
            host_allow: &self.cfg.host_allow,
            server: &self.cfg.server,
        }
    }

    fn bridge_exists(&self) -> bool {
        Path::new("/sys/class/net").join(&self.cfg.bridge).exists()
    }

    fn known_dir(&self, k: Known) -> PathBuf {
        self.cfg.state_dir.join(k.dir())
    }

    /// Every record of a container in the firewall (or to be).
    fn records(&self, fw: &FwState) -> Vec<Attachment> {
        self.attachments()
            .iter()
            .filter(|id| !fw.withdrawn.contains(*id))
            .filter_map(|id| self.attachment(id))
            .collect()
    }

    /// The workflows with a container attached here.
    fn local_workflows(&self, fw: &FwState) -> std::collections::BTreeSet<String> {
        self.records(fw)
            .iter()
            .filter_map(|a| a.member(&self.cfg.bridge))
            .map(|m| m.workflow)
            .collect()
    }

    /// The subnet of this node's containers: the server's, or before it has said, the one the
    /// records were attached in.
    fn own_subnet(&self) -> Option<Subnet> {
        self.subnet().or_else(|| {
            let ids = self.attachments();
            ids.iter()
                .filter_map(|id| self.attachment(id))
                .find_map(|a| {
                    a.config["ipam"]["ranges"][0][0]["subnet"]
                        .as_str()?
                        .parse()
                        .ok()
                })
        })
    }

    /// The items whose address is not in this node's subnet, sorted. Those in it are this
    /// node's containers, known from the records alone, so a stale word from the server
    /// never grants one (and no container passes for a host-network service).
    fn off_bridge<T: Copy + Ord>(&self, items: &[T], ip: impl Fn(&T) -> Ipv4Addr) -> Vec<T> {
        let own = self.own_subnet();
        let mut v: Vec<T> = items
            .iter()
            .copied()
            .filter(|a| !own.is_some_and(|s| s.contains(ip(a))))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Where a container on the bridge reaches a host-network service at `address`: a
    /// loopback address (a node of `gantry up`, which advertises 127.x) is this host's, which
    /// the container reaches at its bridge's gateway; anything else as it is.
    pub fn as_seen_from_bridge(&self, address: Ipv4Addr) -> Ipv4Addr {
        match self.own_subnet() {
            Some(s) if address.is_loopback() => s.gateway(),
            _ => address,
        }
    }

    /// A workflow's host-network services as the firewall takes them: seen from the bridge,
    /// without addresses of the bridge's containers (the gateway is the node, not one).
    fn services_on_bridge(&self, services: &[SocketAddrV4]) -> Vec<SocketAddrV4> {
        let own = self.own_subnet();
        let mut v: Vec<SocketAddrV4> = services
            .iter()
            .map(|s| SocketAddrV4::new(self.as_seen_from_bridge(*s.ip()), s.port()))
            .filter(|s| !own.is_some_and(|o| o.contains(*s.ip()) && *s.ip() != o.gateway()))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    fn read_known<T: DeserializeOwned>(&self, k: Known, workflow: &str) -> Option<Vec<T>> {
        let bytes = fs::read(self.known_dir(k).join(workflow)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn write_known<T: Serialize>(
        &self,
        k: Known,
        workflow: &str,
        items: &[T],
    ) -> Result<(), NetError> {
        let p = self.known_dir(k).join(workflow);
        let tmp = self.known_dir(k).join(format!(".{workflow}.tmp"));
        let json = serde_json::to_vec(items).map_err(|e| io_err(k.dir())(e.into()))?;
        fs::write(&tmp, json)
            .and_then(|()| fs::rename(&tmp, &p))
            .map_err(io_err(format!("writing {}", p.display())))
    }

    /// What the server last said a workflow may reach.
    fn reach(&self, workflow: &str) -> firewall::Reach {
        firewall::Reach {
            peers: self.read_known(Known::Peers, workflow).unwrap_or_default(),
            services: self
                .read_known(Known::Services, workflow)
                .unwrap_or_default(),
        }
    }

    /// The server's word at assignment, for what it has not said more of since.
    fn seed<T: Serialize + DeserializeOwned>(
        &self,
        k: Known,
        workflow: &str,
        given: impl FnOnce() -> Vec<T>,
    ) -> Result<(), NetError> {
        if self.read_known::<T>(k, workflow).is_none() {
            self.write_known(k, workflow, &given())?;
        }
        Ok(())
    }

    /// Builds both tables whole from the records and the stored peers.
    fn rebuild(&self, fw: &mut FwState) -> Result<(), NetError> {
        let members: Vec<firewall::Member> = self
            .records(fw)
            .iter()
            .filter_map(|a| a.member(&self.cfg.bridge))
            .collect();
        let reach: BTreeMap<String, firewall::Reach> = members
            .iter()
            .map(|m| (m.workflow.clone(), self.reach(&m.workflow)))
            .collect();
        firewall::apply(&self.tables().full(&members, &reach)).map_err(NetError::Firewall)?;
        fw.ready = true;
        fw.members.clear();
        for a in self.records(fw) {
            if let Some(m) = a.member(&self.cfg.bridge) {
                fw.members.entry(m.workflow).or_default().insert(a.id);
            }
        }
        Ok(())
    }

    /// One batch when the tables are known to be whole; otherwise, or if the batch fails (the
    /// kernel's tables are not what the records say), the tables rebuilt from the records.
    fn change(&self, fw: &mut FwState, script: &str) -> Result<(), NetError> {
        if fw.ready {
            match firewall::apply(script) {
                Ok(()) => return Ok(()),
                Err(e) => tracing::warn!(bridge = self.bridge(), "rebuilding the firewall: {e}"),
            }
        }
        self.rebuild(fw)
    }

    /// Lets a newly attached container into the firewall. The policy's peers and services
    /// (the server's word at assignment) seed its workflow's unless the server has said more
    /// since.
    fn admit(&self, rec: &Attachment, policy: &Policy) -> Result<(), NetError> {
        let Some(m) = rec.member(&self.cfg.bridge) else {
            return Err(NetError::NoAddress(rec.result.to_string()));
        };
        let mut fw = lock(&self.firewall);
        fw.withdrawn.remove(&rec.id);
        let first = fw.members.get(&m.workflow).is_none_or(|ids| ids.is_empty());
        self.seed(Known::Peers, &m.workflow, || {
            self.off_bridge(&policy.peers, |a| *a)
        })?;
        self.seed(Known::Services, &m.workflow, || {
            self.services_on_bridge(&policy.node_services)
        })?;
        let reach = self.reach(&m.workflow);
        self.change(&mut fw, &self.tables().add(&m, &reach, first))?;
        fw.members
            .entry(m.workflow)
            .or_default()
            .insert(rec.id.clone());
        Ok(())
    }

    /// Takes a container out of the firewall; the last of its workflow here takes the
    /// workflow's chain, set and peers along.
    fn withdraw(&self, rec: &Attachment) -> Result<(), NetError> {
        let Some(m) = rec.member(&self.cfg.bridge) else {
            return Ok(());
        };
        let mut fw = lock(&self.firewall);
        fw.withdrawn.insert(rec.id.clone());
        let ids = fw.members.entry(m.workflow.clone()).or_default();
        ids.remove(&rec.id);
        let last = ids.is_empty();
        if last {
            fw.members.remove(&m.workflow);
        }
        let done = self.change(&mut fw, &self.tables().remove(&m, last));
        // Known again after a rebuild, if it came to that.
        if done.is_ok() && !fw.members.contains_key(&m.workflow) {
            for k in [Known::Peers, Known::Services] {
                let _ = fs::remove_file(self.known_dir(k).join(&m.workflow));
            }
        }
        done
    }

    /// The server's word on a workflow's containers on other nodes (addresses in this node's
    /// subnet are ignored: the records know those). Kept for containers of the workflow that
    /// attach later; the firewall changes at once for those already here.
    pub fn set_peers(&self, workflow: &str, addrs: &[Ipv4Addr]) -> Result<(), NetError> {
        let new = self.off_bridge(addrs, |a| *a);
        self.set_known(Known::Peers, workflow, new, |t, old, new| {
            t.replace_peers(workflow, old, new)
        })
    }

    /// The server's word on a workflow's host-network services, whole (addresses of this
    /// node's containers are ignored; loopback ones are the host's, at the gateway). Kept for containers of the workflow
    /// that attach later; the firewall changes at once for those already here.
    pub fn set_node_services(
        &self,
        workflow: &str,
        services: &[SocketAddrV4],
    ) -> Result<(), NetError> {
        let new = self.services_on_bridge(services);
        self.set_known(Known::Services, workflow, new, |t, old, new| {
            t.replace_services(workflow, old, new)
        })
    }

    /// Stores `new` as what the server said of `workflow`, and changes the tables by
    /// `script(tables, old, new)` if they hold the workflow.
    fn set_known<T: Serialize + DeserializeOwned + PartialEq>(
        &self,
        k: Known,
        workflow: &str,
        new: Vec<T>,
        script: impl FnOnce(&firewall::Tables<'_>, &[T], &[T]) -> String,
    ) -> Result<(), NetError> {
        if !valid_id(workflow) {
            return Err(NetError::BadWorkflow(workflow.to_owned()));
        }
        let mut fw = lock(&self.firewall);
        let old = self.read_known::<T>(k, workflow);
        if old.as_ref() == Some(&new) {
            return Ok(());
        }
        // Whether the tables hold the workflow's sets; before they are built, the records say.
        let here = match fw.ready {
            true => fw.members.contains_key(workflow),
            false => self.local_workflows(&fw).contains(workflow),
        };
        if !here && new.is_empty() {
            let _ = fs::remove_file(self.known_dir(k).join(workflow));
            return Ok(());
        }
        self.write_known(k, workflow, &new)?;
        if !here {
            return Ok(());
        }
        let script = script(&self.tables(), &old.unwrap_or_default(), &new);
        self.change(&mut fw, &script)
    }

    /// The workflow's containers on other nodes that the firewall lets its containers here
    /// reach, as last stored.
    pub fn peers(&self, workflow: &str) -> Vec<Ipv4Addr> {
        if !valid_id(workflow) {
            return vec![];
        }
        self.reach(workflow).peers
    }

    /// The workflow's host-network services that the firewall lets its containers here
    /// reach, as last stored.
    pub fn node_services(&self, workflow: &str) -> Vec<SocketAddrV4> {
        if !valid_id(workflow) {
            return vec![];
        }
        self.reach(workflow).services
    }

    /// Deletes the bridge, if any was made, and the firewall's tables with it. Only sensible
    /// once nothing is attached: for tests and for decommissioning a node.
    pub fn remove_bridge(&self) -> Result<(), NetError> {
        {
            let mut fw = lock(&self.firewall);
            fw.ready = false;
            fw.members.clear();
            if firewall::available() {
                firewall::apply(&self.tables().delete()).map_err(NetError::Firewall)?;
            }
        }
        let bridge_file = self.cfg.state_dir.join("bridge");
        let name = fs::read_to_string(&bridge_file)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.cfg.bridge.clone());
        if !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Ok(());
        }
        if Path::new("/sys/class/net").join(&name).exists() {
            let out = std::process::Command::new("ip")
                .args(["link", "delete", &name, "type", "bridge"])
                .output()
                .map_err(io_err("running ip link delete"))?;
            if !out.status.success() && Path::new("/sys/class/net").join(&name).exists() {
                return Err(NetError::Io {
                    context: format!("deleting bridge {name}"),
                    source: io::Error::other(
                        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                    ),
                });
            }
        }
        let _ = fs::remove_file(bridge_file);
        Ok(())
    }
}

/// `/etc/hosts` for a networked container: localhost, the container's own name, and the
/// entries the server gave (a workflow's services, `web.svc`).
pub fn hosts_file(
    hostname: &str,
    address: Ipv4Addr,
    extra: &[HostEntry],
) -> Result<Vec<u8>, NetError> {
    let mut out = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    let mut line = |name: &str, addr: &str| -> Result<(), NetError> {
        let bad = |why: &str| NetError::BadHost {
            name: name.to_owned(),
            address: addr.to_owned(),
            why: why.to_owned(),
        };
        let valid_name = !name.is_empty()
            && name.len() <= 253
            && !name.starts_with(['-', '.'])
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !valid_name {
            return Err(bad("a host name is letters, digits, `-`, `.` and `_`"));
        }
        let ip: IpAddr = addr.parse().map_err(|_| bad("not an IP address"))?;
        out.push_str(&format!("{ip}\t{name}\n"));
        Ok(())
    };
    if !hostname.is_empty() {
        line(hostname, &address.to_string())?;
    }
    for h in extra {
        line(&h.name, &h.address)?;
    }
    Ok(out.into_bytes())
}

/// `/etc/resolv.conf` for a networked container: the host's, without loopback name servers
/// (a resolver on the host's 127.0.0.53 is not reachable from a container). Empty if the host
/// has none.
pub fn resolv_conf() -> Vec<u8> {
    resolv_conf_from(&fs::read_to_string("/etc/resolv.conf").unwrap_or_default())
}

fn resolv_conf_from(host: &str) -> Vec<u8> {
    let mut out = String::new();
    for l in host.lines() {
        let mut words = l.split_whitespace();
        if words.next() == Some("nameserver")
            && words
                .next()
                .and_then(|a| a.parse::<IpAddr>().ok())
                .is_some_and(|a| a.is_loopback())
        {
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_names_fit_and_differ() {
        let a = bridge_name("host-1");
        let b = bridge_name("host-2");
        assert!(a.len() <= 15 && a.starts_with("gtr"), "{a}");
        assert_ne!(a, b);
        assert_eq!(a, bridge_name("host-1"));
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn subnets_parse_and_normalise() {
        let s: Subnet = "10.200.3.0/24".parse().unwrap();
        assert_eq!(s.to_string(), "10.200.3.0/24");
        assert!(s.contains("10.200.3.77".parse().unwrap()));
        assert!(!s.contains("10.200.4.1".parse().unwrap()));
        let s: Subnet = "10.200.3.9/24".parse().unwrap();
        assert_eq!(s.to_string(), "10.200.3.0/24");
        for bad in [
            "10.200.3.0",
            "10.200.3.0/33",
            "10.200.3.0/30",
            "fd00::/64",
            "x/24",
            "",
        ] {
            assert!(bad.parse::<Subnet>().is_err(), "{bad}");
        }
        let json = serde_json::to_string(&"10.1.2.0/24".parse::<Subnet>().unwrap()).unwrap();
        assert_eq!(json, "\"10.1.2.0/24\"");
    }

    #[test]
    fn hosts_file_lists_self_and_services() {
        let extra = vec![HostEntry {
            name: "web.svc".into(),
            address: "10.200.0.5".into(),
        }];
        let f = hosts_file("train-1", "10.200.0.9".parse().unwrap(), &extra).unwrap();
        let f = String::from_utf8(f).unwrap();
        assert!(f.starts_with("127.0.0.1\tlocalhost\n"), "{f}");
        assert!(f.contains("10.200.0.9\ttrain-1\n"), "{f}");
        assert!(f.contains("10.200.0.5\tweb.svc\n"), "{f}");
        for (name, addr) in [
            ("bad name", "10.0.0.1"),
            ("x\n1.2.3.4 evil", "10.0.0.1"),
            ("ok", "nope"),
        ] {
            let e = vec![HostEntry {
                name: name.into(),
                address: addr.into(),
            }];
            assert!(hosts_file("h", "10.0.0.2".parse().unwrap(), &e).is_err());
        }
    }

    #[test]
    fn resolv_conf_drops_loopback_servers() {
        let host = "# generated\nnameserver 127.0.0.53\nnameserver 192.0.2.53\nsearch example.org\noptions edns0\n";
        let out = String::from_utf8(resolv_conf_from(host)).unwrap();
        assert_eq!(
            out,
            "# generated\nnameserver 192.0.2.53\nsearch example.org\noptions edns0\n"
        );
        assert!(resolv_conf_from("").is_empty());
    }
}
