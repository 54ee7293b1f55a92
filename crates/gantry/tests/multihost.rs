//! Gantry across hosts: a `gantry server` on a test bridge and agents on hosts of their own
//! (network namespaces joined to the bridge by veth pairs, each with its own address and the
//! pool's storage root bind-mounted; `common::hosts`), so that server-agent traffic, container
//! networking, endpoints, multinode members and node loss cross a network between addresses
//! instead of one host's loopback. Real server, agents and runc; needs root and iproute2.

mod common;

use common::hosts::Hosts;
use common::Cluster;
use serde_json::Value;
use std::collections::BTreeSet;

fn attempts(t: &Value) -> &Vec<Value> {
    t["attempts"].as_array().unwrap()
}

/// The node of a task's last attempt.
fn node_of(t: &Value) -> String {
    attempts(t).last().unwrap()["node"]
        .as_str()
        .unwrap_or_else(|| panic!("no node: {t:#}"))
        .to_string()
}

fn tasks_of<'a>(d: &'a Value, job: &str) -> Vec<&'a Value> {
    let mut ts: Vec<&Value> = d["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["job"] == job)
        .collect();
    ts.sort_by_key(|t| t["index"].as_u64());
    ts
}

#[test]
fn agents_on_three_hosts_register_at_their_addresses_and_share_a_workflow() {
    let h = Hosts::start(3, "30s");
    let c = &h.cluster;

    let nodes = c.json(&["node", "list"]);
    assert_eq!(nodes.as_array().unwrap().len(), 3, "{nodes:#}");
    for host in &h.hosts {
        let n = h.node(&host.name);
        assert_eq!(n["address"], host.addr.to_string(), "{n:#}");
        assert_eq!(
            (&n["connected"], &n["state"]),
            (&Value::Bool(true), &"READY".into())
        );
    }

    // Six one-core steps of two jobs on three one-core nodes: at most one a node at a time, so each node
    // takes some. On the host's network each prints the addresses it sees, which are its
    // host's only.
    let file = c.write(
        "spread.yaml",
        r#"version: v4
jobs:
  where:
    image: { uri: docker://busybox:1 }
    task-array: { start: 1, end: 4 }
    network: { host: true }
    resource: { cpu: { cores: 1 } }
    script: |
      #!/bin/sh
      ip -4 -o addr show dev eth0
      sleep 2
  also:
    image: { uri: docker://busybox:1 }
    task-array: { start: 1, end: 2 }
    network: { host: true }
    resource: { cpu: { cores: 1 } }
    script: |
      #!/bin/sh
      ip -4 -o addr show dev eth0
      sleep 2
"#,
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "the workflow to end", |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    assert_eq!(d["status"], "FINISHED", "{d:#}\n{}", c.log());

    let mut used = BTreeSet::new();
    let steps: Vec<&Value> = tasks_of(&d, "where")
        .into_iter()
        .chain(tasks_of(&d, "also"))
        .collect();
    assert_eq!(steps.len(), 6);
    for t in steps {
        let node = node_of(t);
        let addr = h.hosts[h.index(&node)].addr;
        let (job, i) = (t["job"].as_str().unwrap(), t["index"].to_string());
        let log = c.ok(&["workflow", "log", &id, job, "--task", &i]);
        assert!(
            log.contains(&format!("inet {addr}/24")),
            "{job}[{i}] ran on {node} ({addr}) but saw: {log}"
        );
        used.insert(node);
    }
    let all: BTreeSet<String> = h.hosts.iter().map(|h| h.name.clone()).collect();
    assert_eq!(used, all, "the steps were not spread over every host");
}

#[test]
fn a_host_whose_link_goes_down_is_lost_and_its_step_reruns_on_another_host() {
    let h = Hosts::start(2, "3s");
    let c = &h.cluster;
    // The ephemeral volume lies in the shared storage root, so the second run (on the other
    // host) sees what the first one left: it finishes at once.
    let file = c.write(
        "movable.yaml",
        r#"version: v4
jobs:
  movable:
    image: { uri: docker://busybox:1 }
    resource: { cpu: { cores: 1 } }
    policy: { retry: { attempts: 2, on: [ node ] } }
    mounts: { /data: { volume: v } }
    script: |
      #!/bin/sh
      if [ -e /data/ran ]; then echo "second run, after $(cat /data/ran)"; exit 0; fi
      echo "first run" > /data/ran; sleep 600
volumes:
  v: {}
"#,
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "movable RUNNING", |d| {
        Cluster::task(d, "movable")["status"] == "RUNNING"
    });
    let lost = node_of(Cluster::task(&d, "movable"));
    let a = h.index(&lost);
    let b = 1 - a;
    assert_eq!(h.containers(a).len(), 1, "one container on {lost}");

    h.link(a, false);
    let d = c.wait_for(&id, "the workflow to end", |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    let movable = Cluster::task(&d, "movable");
    assert_eq!(d["status"], "FINISHED", "{d:#}\n{}", c.log());
    let tries = attempts(movable);
    assert_eq!(tries.len(), 2, "{movable:#}");
    assert_eq!(tries[0]["cause"], "NODE_LOST", "{movable:#}");
    assert_eq!(tries[0]["node"], lost.as_str());
    assert_eq!(tries[1]["node"], h.hosts[b].name.as_str(), "{movable:#}");
    let log = c.ok(&["workflow", "log", &id, "movable"]);
    assert!(log.contains("second run, after first run"), "{log}");
    let shown = c.json(&["node", "show", &lost]);
    assert_eq!(shown["state"], "DOWN", "{shown:#}");
    assert_eq!(shown["connected"], false, "{shown:#}");
    let events = c.ok(&["workflow", "events", &id]);
    assert!(events.contains("no heartbeat for 3s"), "{events}");
    // Cut off, not dead: the first run's container still runs on the lost host.
    assert_eq!(
        h.containers(a).len(),
        1,
        "the container on {lost} was stopped unseen"
    );

    // Link up again: the agent reconnects over it, its node is READY, and it stops the
    // container the server gave up on.
    h.link(a, true);
    h.wait_node(&lost, &format!("{lost} READY again"), |n| {
        n["connected"] == true && n["state"] == "READY"
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !h.containers(a).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the orphaned container on {lost} still runs: {}",
            c.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}
