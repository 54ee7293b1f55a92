//! The node's tenant firewall, in the kernel's nftables (Debian's `nft`): what a container on
//! this agent's bridge may reach, mirroring a Kubernetes default-deny NetworkPolicy.
//!
//! Each agent has two tables named after its bridge (several agents share a host under
//! `gantry up --agents N`, so no table ever judges another bridge's traffic):
//!
//! - `bridge NAME` sees frames of the bridge's ports. Its `prerouting` chain binds each port to
//!   the MAC and IPv4 address the agent gave its container, so a container with `CAP_NET_RAW`
//!   cannot speak with another's address, and drops everything else: IPv6 (link-local between
//!   ports included), VLAN tags, odd ether types. Its `forward` chain judges traffic between two
//!   ports, which the bridge switches without routing (and without `br_netfilter`, nothing else
//!   sees it): only within one workflow.
//! - `inet NAME` sees routed traffic. `input`: containers reach no host service except the
//!   site's `--host-allow` ports, the Gantry server's, and their own workflow's host-network
//!   services on this node. `forward`: out of a container, to its own workflow's containers
//!   and host-network services (here or on other nodes), to the server's endpoint proxy, and
//!   to the outside world when egress is allowed; into a container from elsewhere, only from
//!   its workflow's containers on other nodes and from the server. Replies pass by conntrack.
//!
//! A packet is judged by a fixed number of lookups whatever the number of workflows: a map
//! from a container's address to its workflow's chain, one set of members per workflow
//! (`m_TAG`, with `TAG` a hash of the workflow's id) and one set of its host-network services
//! (`s_TAG`, address . protocol . port). Local members come from the agent's attachment
//! records; members on other nodes and the services come from the server.
//!
//! Every change is one `nft -f -` batch, which the kernel applies atomically.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::{Command, Stdio};

use sha2::Digest;

/// A port on the host that containers may reach on every host address (`--host-allow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostPort {
    pub proto: Proto,
    pub port: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

impl std::str::FromStr for HostPort {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: expected PROTO/PORT, e.g. tcp/7070 or udp/53");
        let (proto, port) = s.trim().split_once('/').ok_or_else(bad)?;
        let proto = match proto.to_ascii_lowercase().as_str() {
            "tcp" => Proto::Tcp,
            "udp" => Proto::Udp,
            _ => return Err(bad()),
        };
        let port: u16 = port.parse().map_err(|_| bad())?;
        if port == 0 {
            return Err(bad());
        }
        Ok(HostPort { proto, port })
    }
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.proto.as_str(), self.port)
    }
}

/// One container on the bridge, as the firewall knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The host side of its veth pair, and its own MAC: what its frames must come with.
    pub port: Option<(String, String)>,
    pub address: Ipv4Addr,
    pub workflow: String,
    pub egress: bool,
}

/// What the server says a workflow's containers here may reach beyond themselves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    /// Its containers on other nodes.
    pub peers: Vec<Ipv4Addr>,
    /// Its host-network services (a node's address and a port), TCP and UDP alike.
    pub services: Vec<SocketAddrV4>,
}

/// An agent's two tables.
#[derive(Debug, Clone, Copy)]
pub struct Tables<'a> {
    /// The bridge's name, also the tables'.
    pub name: &'a str,
    pub host_allow: &'a [HostPort],
    /// The Gantry server as this agent reaches it.
    pub server: &'a [SocketAddrV4],
}

const FAMILIES: [&str; 2] = ["bridge", "inet"];

/// The type of a workflow's set of host-network services.
const SERVICES: &str = "type ipv4_addr . inet_proto . inet_service";

/// A short, fixed name for a workflow's chain and set: `w` and 16 hex digits of a hash of its
/// id (any string the agent was given), so nothing from outside is ever spliced into a script.
pub fn tag(workflow: &str) -> String {
    let h = sha2::Sha256::digest(workflow.as_bytes());
    format!("w{}", &hex::encode(h)[..16])
}

/// An interface name as the kernel allows it, safe inside a quoted nft string.
fn valid_ifname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A MAC address written as six pairs of hex digits.
fn valid_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Tables<'_> {
    /// Both tables, empty of members: replaces whatever was there, in the same batch.
    fn base(&self, out: &mut String) {
        let n = self.name;
        for f in FAMILIES {
            // `add` first so that `delete` never fails on a table that is not there yet.
            let _ = writeln!(out, "add table {f} {n}\ndelete table {f} {n}");
        }
        let _ = write!(
            out,
            r#"table bridge {n} {{
  set ports {{ type ifname . ether_addr . ipv4_addr; }}
  set port_names {{ type ifname; }}
  map wf {{ type ipv4_addr : verdict; }}
  chain prerouting {{
    type filter hook prerouting priority filter; policy accept;
    iifname != @port_names accept
    iifname . ether saddr . ip saddr @ports accept
    iifname . ether saddr . arp saddr ip @ports accept
    counter drop
  }}
  chain forward {{
    type filter hook forward priority filter; policy accept;
    iifname != @port_names accept
    ether type arp accept
    ip saddr vmap @wf
    counter drop
  }}
}}
table inet {n} {{
  set host_allow {{ type inet_proto . inet_service; }}
  set server {{ type ipv4_addr . inet_service; }}
  set server_hosts {{ type ipv4_addr; }}
  set egress {{ type ipv4_addr; }}
  map wf {{ type ipv4_addr : verdict; }}
  chain input {{
    type filter hook input priority filter; policy accept;
    iifname != "{n}" accept
    ct state established,related accept
    meta l4proto . th dport @host_allow accept
    ip daddr . tcp dport @server accept
    ip saddr vmap @wf
    counter drop
  }}
  chain outbound {{
    ip saddr vmap @wf
    oifname "{n}" counter drop
    ip daddr . tcp dport @server accept
    ip saddr @egress accept
    counter drop
  }}
  chain forward {{
    type filter hook forward priority filter; policy accept;
    iifname != "{n}" oifname != "{n}" accept
    ct state established,related accept
    iifname "{n}" jump outbound
    ip daddr vmap @wf
    ip saddr @server_hosts accept
    counter drop
  }}
}}
"#
        );
        if !self.host_allow.is_empty() {
            let items = self
                .host_allow
                .iter()
                .map(|h| format!("{} . {}", h.proto.as_str(), h.port));
            let _ = writeln!(out, "add element inet {n} host_allow {{ {} }}", list(items));
        }
        if !self.server.is_empty() {
            let items = self
                .server
                .iter()
                .map(|s| format!("{} . {}", s.ip(), s.port()));
            let _ = writeln!(out, "add element inet {n} server {{ {} }}", list(items));
            let hosts: std::collections::BTreeSet<Ipv4Addr> =
                self.server.iter().map(|s| *s.ip()).collect();
            let _ = writeln!(
                out,
                "add element inet {n} server_hosts {{ {} }}",
                list(hosts)
            );
        }
    }

    /// A workflow's chain and set in both tables. `create` fails on one that is there
    /// already: then the tables are not what the records say, and get rebuilt.
    fn workflow(&self, out: &mut String, workflow: &str) {
        let (n, t) = (self.name, tag(workflow));
        for f in FAMILIES {
            let _ = writeln!(
                out,
                "create set {f} {n} m_{t} {{ type ipv4_addr; }}\ncreate chain {f} {n} {t}"
            );
        }
        let _ = writeln!(out, "create set inet {n} s_{t} {{ {SERVICES}; }}");
        // Within the bridge, the source is the member the map jumped for: only the destination
        // is left to check. Routed packets jump here by either end, so both are checked.
        let _ = writeln!(out, "add rule bridge {n} {t} ip daddr @m_{t} accept");
        let _ = writeln!(
            out,
            "add rule inet {n} {t} ip saddr @m_{t} ip daddr @m_{t} accept"
        );
        // A host-network service listens on a node's own address: reached through `input` on
        // this node and `forward` to the others, never through the bridge.
        let _ = writeln!(
            out,
            "add rule inet {n} {t} ip saddr @m_{t} ip daddr . meta l4proto . th dport @s_{t} accept"
        );
    }

    /// The elements of one member: `add element` lines, or with `delete` each element added and
    /// deleted again (so that the batch holds whether or not the element was there).
    fn elements(&self, out: &mut String, m: &Member, delete: bool) {
        let (n, t, ip) = (self.name, tag(&m.workflow), m.address);
        let mut items: Vec<(&str, String, String)> = vec![];
        if let Some((veth, mac)) = m
            .port
            .as_ref()
            .filter(|(v, m)| valid_ifname(v) && valid_mac(m))
        {
            items.push((
                "bridge",
                "ports".into(),
                format!("\"{veth}\" . {mac} . {ip}"),
            ));
            items.push(("bridge", "port_names".into(), format!("\"{veth}\"")));
        }
        for f in FAMILIES {
            items.push((f, "wf".into(), format!("{ip} : jump {t}")));
            items.push((f, format!("m_{t}"), ip.to_string()));
        }
        if m.egress {
            items.push(("inet", "egress".into(), ip.to_string()));
        }
        for (f, s, e) in items {
            let _ = writeln!(out, "add element {f} {n} {s} {{ {e} }}");
            if delete {
                // A map's element is deleted by its key alone.
                let key = e.split(" : ").next().unwrap_or(&e);
                let _ = writeln!(out, "delete element {f} {n} {s} {{ {key} }}");
            }
        }
    }

    fn peers(&self, out: &mut String, workflow: &str, peers: &[Ipv4Addr], delete: bool) {
        self.set_elements(out, &format!("m_{}", tag(workflow)), list(peers), delete);
    }

    fn services(&self, out: &mut String, workflow: &str, services: &[SocketAddrV4], delete: bool) {
        let items = services.iter().flat_map(|s| {
            [Proto::Tcp, Proto::Udp].map(|p| format!("{} . {} . {}", s.ip(), p.as_str(), s.port()))
        });
        self.set_elements(out, &format!("s_{}", tag(workflow)), list(items), delete);
    }

    /// Adds `items` (a list as nft writes it) to the inet table's `set`, or deletes them.
    fn set_elements(&self, out: &mut String, set: &str, items: String, delete: bool) {
        if items.is_empty() {
            return;
        }
        let n = self.name;
        let _ = writeln!(out, "add element inet {n} {set} {{ {items} }}");
        if delete {
            let _ = writeln!(out, "delete element inet {n} {set} {{ {items} }}");
        }
    }

    fn reach(&self, out: &mut String, workflow: &str, reach: &Reach) {
        self.peers(out, workflow, &reach.peers, false);
        self.services(out, workflow, &reach.services, false);
    }

    /// The whole ruleset from scratch: what an agent starts with, and the way back from any
    /// surprise (a table someone flushed, an element that was not where it should be).
    pub fn full(&self, members: &[Member], reach: &BTreeMap<String, Reach>) -> String {
        let mut out = String::new();
        self.base(&mut out);
        let workflows: std::collections::BTreeSet<&str> =
            members.iter().map(|m| m.workflow.as_str()).collect();
        for w in &workflows {
            self.workflow(&mut out, w);
            if let Some(r) = reach.get(*w) {
                self.reach(&mut out, w, r);
            }
        }
        for m in members {
            self.elements(&mut out, m, false);
        }
        out
    }

    /// Admits one container. The first of its workflow here (`first`) brings the workflow's
    /// chain and sets, with `reach`, what it may reach elsewhere; the others only add
    /// themselves (rewriting what is there would cost the kernel a grace period).
    pub fn add(&self, m: &Member, reach: &Reach, first: bool) -> String {
        let mut out = String::new();
        if first {
            self.workflow(&mut out, &m.workflow);
            self.reach(&mut out, &m.workflow, reach);
        }
        self.elements(&mut out, m, false);
        out
    }

    /// Withdraws one container; with `last`, its workflow's chain and set go too.
    pub fn remove(&self, m: &Member, last: bool) -> String {
        let (n, t) = (self.name, tag(&m.workflow));
        let mut out = String::new();
        for f in FAMILIES {
            let _ = writeln!(
                out,
                "add set {f} {n} m_{t} {{ type ipv4_addr; }}\nadd chain {f} {n} {t}"
            );
        }
        let _ = writeln!(out, "add set inet {n} s_{t} {{ {SERVICES}; }}");
        self.elements(&mut out, m, true);
        if last {
            for f in FAMILIES {
                let _ = writeln!(
                    out,
                    "flush chain {f} {n} {t}\ndelete chain {f} {n} {t}\ndelete set {f} {n} m_{t}"
                );
            }
            let _ = writeln!(out, "delete set inet {n} s_{t}");
        }
        out
    }

    /// Replaces a workflow's members on other nodes (its chain and set exist: it has local
    /// members).
    pub fn replace_peers(&self, workflow: &str, old: &[Ipv4Addr], new: &[Ipv4Addr]) -> String {
        let mut out = String::new();
        self.peers(&mut out, workflow, old, true);
        self.peers(&mut out, workflow, new, false);
        out
    }

    /// Replaces a workflow's host-network services (its chain and sets exist: it has local
    /// members).
    pub fn replace_services(
        &self,
        workflow: &str,
        old: &[SocketAddrV4],
        new: &[SocketAddrV4],
    ) -> String {
        let mut out = String::new();
        self.services(&mut out, workflow, old, true);
        self.services(&mut out, workflow, new, false);
        out
    }

    /// Removes both tables (missing ones too).
    pub fn delete(&self) -> String {
        let n = self.name;
        FAMILIES
            .iter()
            .map(|f| format!("add table {f} {n}\ndelete table {f} {n}\n"))
            .collect()
    }
}

/// Where Debian (and most others) install `nft`.
fn nft_binary() -> &'static str {
    ["/usr/sbin/nft", "/sbin/nft", "/usr/local/sbin/nft"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .unwrap_or("nft")
}

/// Whether `nft` is installed (without it no table can have been made).
pub fn available() -> bool {
    Path::new(nft_binary()).is_file()
}

/// Runs one batch with `nft -f -`: all of it or nothing.
pub fn apply(script: &str) -> Result<(), String> {
    let mut child = Command::new(nft_binary())
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running nft ({e}): install nftables"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| format!("writing to nft: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for nft: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "nft exited with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(ip: &str, wf: &str, egress: bool) -> Member {
        Member {
            port: Some(("veth1234abcd".into(), "0a:58:0a:00:00:05".into())),
            address: ip.parse().unwrap(),
            workflow: wf.into(),
            egress,
        }
    }

    #[test]
    fn host_ports_parse() {
        let h: HostPort = "tcp/7070".parse().unwrap();
        assert_eq!(
            h,
            HostPort {
                proto: Proto::Tcp,
                port: 7070
            }
        );
        assert_eq!(h.to_string(), "tcp/7070");
        assert_eq!("UDP/53".parse::<HostPort>().unwrap().proto, Proto::Udp);
        for bad in [
            "7070",
            "tcp/",
            "tcp/0",
            "tcp/70000",
            "icmp/1",
            "tcp/80-90",
            "",
        ] {
            let e = bad.parse::<HostPort>().unwrap_err();
            assert!(e.contains("PROTO/PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn tags_are_short_and_fixed() {
        let t = tag("6f1c0a4e-0000-4000-8000-000000000001");
        assert_eq!(t.len(), 17);
        assert!(t.starts_with('w') && t[1..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(t, tag("6f1c0a4e-0000-4000-8000-000000000001"));
        assert_ne!(t, tag("6f1c0a4e-0000-4000-8000-000000000002"));
        // Whatever a workflow id holds, only the hash reaches the script.
        assert!(!tag("x; flush ruleset").contains(' '));
    }

    #[test]
    fn scripts_name_only_what_they_should() {
        let host_allow = ["tcp/7070".parse().unwrap()];
        let server = ["192.0.2.10:7070".parse().unwrap()];
        let t = Tables {
            name: "gtr0abc1234",
            host_allow: &host_allow,
            server: &server,
        };
        let a = member("10.9.0.5", "wf-a", true);
        let b = member("10.9.0.6", "wf-b", false);
        let reach = Reach {
            peers: vec!["10.9.1.7".parse().unwrap()],
            services: vec!["192.0.2.21:8000".parse().unwrap()],
        };
        let full = t.full(
            &[a.clone(), b.clone()],
            &BTreeMap::from([("wf-a".to_string(), reach.clone())]),
        );
        assert!(full.starts_with("add table bridge gtr0abc1234\ndelete table bridge gtr0abc1234\n"));
        assert!(full.contains("add element inet gtr0abc1234 host_allow { tcp . 7070 }"));
        assert!(full.contains("add element inet gtr0abc1234 server { 192.0.2.10 . 7070 }"));
        let (ta, tb) = (tag("wf-a"), tag("wf-b"));
        assert!(full.contains(&format!(
            "add element inet gtr0abc1234 m_{ta} {{ 10.9.1.7 }}"
        )));
        assert!(!full.contains(&format!("m_{tb} {{ 10.9.1.7 }}")));
        // A host-network service is reachable over TCP and UDP, by its workflow only.
        assert!(full.contains(&format!(
            "add element inet gtr0abc1234 s_{ta} {{ 192.0.2.21 . tcp . 8000, 192.0.2.21 . udp . 8000 }}"
        )));
        assert!(!full.contains(&format!("s_{tb} {{ 192.0.2.21")));
        assert!(full.contains(&format!(
            "add rule inet gtr0abc1234 {ta} ip saddr @m_{ta} ip daddr . meta l4proto . th dport @s_{ta} accept"
        )));
        assert!(full.contains("add element inet gtr0abc1234 egress { 10.9.0.5 }"));
        assert!(!full.contains("egress { 10.9.0.6 }"));
        assert!(full.contains(
            "add element bridge gtr0abc1234 ports { \"veth1234abcd\" . 0a:58:0a:00:00:05 . 10.9.0.5 }"
        ));

        // Removal adds each element before deleting it, so a batch never fails on one that
        // is missing; the last member takes its workflow's chain and set along.
        let r = t.remove(&a, true);
        assert!(r.contains(&format!(
            "add element inet gtr0abc1234 wf {{ 10.9.0.5 : jump {ta} }}\ndelete element inet gtr0abc1234 wf {{ 10.9.0.5 }}"
        )));
        assert!(r.contains(&format!("delete chain inet gtr0abc1234 {ta}")));
        assert!(r.contains(&format!("delete set inet gtr0abc1234 s_{ta}")));
        let moved = t.replace_services(
            "wf-a",
            &reach.services,
            &["192.0.2.22:8000".parse().unwrap()],
        );
        assert!(moved.contains(&format!(
            "delete element inet gtr0abc1234 s_{ta} {{ 192.0.2.21 . tcp . 8000, 192.0.2.21 . udp . 8000 }}\nadd element inet gtr0abc1234 s_{ta} {{ 192.0.2.22 . tcp . 8000"
        )));
        assert!(!t.remove(&a, false).contains("delete chain"));

        // A port whose name or MAC is not what the kernel would have is left out, not spliced.
        let mut evil = a.clone();
        evil.port = Some(("x\" } ; flush ruleset".into(), "0a:58:0a:00:00:05".into()));
        assert!(!t
            .add(&evil, &Reach::default(), true)
            .contains("flush ruleset"));
        // Only the first of a workflow brings its chain, sets and peers.
        let p = Reach {
            peers: vec!["10.9.1.7".parse().unwrap()],
            services: vec![],
        };
        assert!(t
            .add(&a, &p, true)
            .contains(&format!("create chain inet gtr0abc1234 {ta}")));
        assert!(t
            .add(&a, &p, true)
            .contains(&format!("m_{ta} {{ 10.9.1.7 }}")));
        assert!(!t.add(&a, &p, false).contains("chain"));
        assert!(!t.add(&a, &p, false).contains("10.9.1.7"));
    }
}
