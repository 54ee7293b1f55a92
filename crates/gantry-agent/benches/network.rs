//! What the tenant firewall adds to a networked container's start and removal:
//! `cargo bench -p gantry-agent --bench network` (root, the CNI plugins and nft, as the agent
//! needs). Prints `figure NAME VALUE` lines; nothing here passes or fails.
//!
//! One agent's network (its own bridge and tables, a free /24 of 10.234.0.0/16, everything
//! under a temporary directory and removed at the end). Measured, as medians of ROUNDS:
//!
//! - `attach` and `detach`: the whole of `Network::attach` and `Network::detach` (namespace,
//!   CNI ADD or DEL of `loopback` and `bridge`, records, and the firewall's one batch each),
//!   wall time and the CPU time of the processes they run;
//! - `firewall.*`: that one batch alone (`nft -f -` of the same script) for the first and a
//!   further container of a workflow, in and out, so the rest is what CNI and the namespace
//!   cost;
//! - both again with `LOADED` other containers attached, each of its own workflow, to show
//!   that neither grows with the number of workflows; and a rebuild of the tables whole with
//!   those (what an agent does when it starts).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use gantry_agent::net::firewall::{self, Member, Tables};
use gantry_agent::net::{NetConfig, Network, Policy};

const ROUNDS: usize = 30;
const LOADED: usize = 100;

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

fn free_subnet() -> String {
    let out = std::process::Command::new("ip")
        .args(["-4", "route"])
        .output()
        .expect("ip route");
    let routes = String::from_utf8_lossy(&out.stdout).into_owned();
    (0..250)
        .map(|i| (std::process::id() as usize + i) % 250 + 1)
        .find(|k| !routes.contains(&format!("10.234.{k}.")))
        .map(|k| format!("10.234.{k}.0/24"))
        .expect("no free /24 in 10.234.0.0/16")
}

fn policy(workflow: &str) -> Policy {
    Policy {
        workflow: workflow.into(),
        egress: true,
        peers: vec!["10.235.0.9".parse().unwrap()],
        node_services: vec![],
    }
}

/// CPU time (user + system) of the waited-for children so far.
fn children_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Times one firewall batch `ROUNDS` times (with `undo` after each, untimed): the median
/// wall time and the mean CPU time of the `nft` it runs, in ms.
fn batch(script: &str, undo: &str) -> (f64, f64) {
    let (mut wall, mut cpu) = (vec![], Duration::ZERO);
    for _ in 0..ROUNDS {
        let (t, c) = (Instant::now(), children_cpu());
        firewall::apply(script).unwrap();
        wall.push(t.elapsed());
        cpu += children_cpu() - c;
        firewall::apply(undo).unwrap();
    }
    (median(wall), cpu.as_secs_f64() * 1000.0 / ROUNDS as f64)
}

/// Attaches and detaches `ROUNDS` times; then times the firewall's batches alone.
fn measure(net: &Network, label: &str) {
    let (mut attach, mut detach) = (vec![], vec![]);
    let (mut attach_cpu, mut detach_cpu) = (Duration::ZERO, Duration::ZERO);
    for i in 0..ROUNDS {
        let id = format!("bench-{i}");
        let (t, c) = (Instant::now(), children_cpu());
        net.attach(&id, &policy("wf-bench"), None).expect("attach");
        attach.push(t.elapsed());
        attach_cpu += children_cpu() - c;
        let (t, c) = (Instant::now(), children_cpu());
        net.detach(&id).expect("detach");
        detach.push(t.elapsed());
        detach_cpu += children_cpu() - c;
    }
    let per = |d: Duration| d.as_secs_f64() * 1000.0 / ROUNDS as f64;
    println!("figure network.{label}.attach.ms {:.1}", median(attach));
    println!(
        "figure network.{label}.attach.cpu_ms {:.1}",
        per(attach_cpu)
    );
    println!("figure network.{label}.detach.ms {:.1}", median(detach));
    println!(
        "figure network.{label}.detach.cpu_ms {:.1}",
        per(detach_cpu)
    );

    let tables = Tables {
        name: net.bridge(),
        host_allow: &[],
        server: &[],
    };
    let member = |n: u32, wf: &str| Member {
        port: Some((format!("vethbench{n}"), "0a:58:0a:00:00:01".into())),
        address: Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 236, 0, 0)) + n),
        workflow: wf.into(),
        egress: true,
    };
    let peers = firewall::Reach {
        peers: vec!["10.235.0.9".parse().unwrap()],
        services: vec!["10.235.0.10:8000".parse().unwrap()],
    };
    let (one, two) = (member(1, "wf-fw"), member(2, "wf-fw"));
    let figures = [
        // The first container of a workflow brings its chain and set; the last takes them.
        (
            "admit_first",
            batch(&tables.add(&one, &peers, true), &tables.remove(&one, true)),
        ),
        (
            "withdraw_last",
            batch(&tables.remove(&one, true), &tables.add(&one, &peers, true)),
        ),
    ];
    // `one` is in again (the last undo): `two` joins its workflow.
    let more = [
        (
            "admit_another",
            batch(
                &tables.add(&two, &peers, false),
                &tables.remove(&two, false),
            ),
        ),
        (
            "withdraw_another",
            batch(
                &tables.remove(&two, false),
                &tables.add(&two, &peers, false),
            ),
        ),
    ];
    firewall::apply(&tables.remove(&two, false)).unwrap();
    firewall::apply(&tables.remove(&one, true)).unwrap();
    for (name, (wall, cpu)) in figures.into_iter().chain(more) {
        println!("figure network.{label}.firewall.{name}.ms {wall:.1}");
        println!("figure network.{label}.firewall.{name}.cpu_ms {cpu:.1}");
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("gbench-network.")
        .tempdir()
        .unwrap();
    let net = Network::new(NetConfig::for_agent(
        dir.path(),
        &format!("bench-{}", std::process::id()),
    ))
    .unwrap();
    net.set_subnet(&free_subnet()).unwrap();
    let net = Guard(net);
    // The bridge and the tables exist from the first attachment on.
    net.attach("bench-warm", &policy("wf-warm"), None).unwrap();
    net.detach("bench-warm").unwrap();

    measure(&net, "empty");
    for i in 0..LOADED {
        net.attach(&format!("load-{i}"), &policy(&format!("wf-load-{i}")), None)
            .unwrap();
    }
    measure(&net, "loaded");
    // What an agent does when it starts: leftovers checked, the tables rebuilt whole.
    let mut rebuild = vec![];
    for _ in 0..5 {
        let t = Instant::now();
        net.cleanup(&(0..LOADED).map(|i| format!("load-{i}")).collect::<Vec<_>>());
        rebuild.push(t.elapsed());
    }
    println!("figure network.loaded.restart.ms {:.1}", median(rebuild));
    println!("figure network.loaded.containers {LOADED}");
}

/// Leaves nothing behind, whatever happened: containers' networks, the bridge, the tables.
struct Guard(Network);

impl std::ops::Deref for Guard {
    type Target = Network;
    fn deref(&self) -> &Network {
        &self.0
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.cleanup(&[]);
        if let Err(e) = self.0.remove_bridge() {
            eprintln!("removing the bench's bridge: {e}");
        }
    }
}
