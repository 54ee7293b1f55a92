//! Node health against the real stack: `gantry up --monitoring` runs Debian's Prometheus,
//! Alertmanager and a Node Exporter per agent with the shipped rules and routes, plus test
//! rules on metrics the tests raise through each node's textfile collector. Five agents, so
//! monitoring's cap is one node. Waits are generous; nothing asserts a duration.

mod common;

use std::time::{Duration, Instant};

use common::Cluster;

const TEST_RULES: &str = r#"groups:
  - name: gantry-e2e
    rules:
      - alert: TestCordon
        expr: gantry_test_cordon{job="node"} == 1
        labels: { gantry_hold: cordon, gantry_release: auto }
        annotations: { summary: "test cordon on {{ $labels.node }}" }
      - alert: TestEvict
        expr: gantry_test_evict{job="node"} == 1
        labels: { gantry_hold: evict, gantry_release: auto }
        annotations: { summary: "test evict on {{ $labels.node }}" }
      - alert: TestHardware
        expr: gantry_test_hardware{job="node"} == 1
        labels: { gantry_hold: cordon, gantry_release: admin }
        annotations: { summary: "test hardware fault on {{ $labels.node }}" }
"#;

fn stack() -> Cluster {
    let rules = std::env::temp_dir().join(format!("gantry-e2e-rules-{}.yml", std::process::id()));
    std::fs::write(&rules, TEST_RULES).unwrap();
    Cluster::up_with(
        5,
        vec![
            "--monitoring".into(),
            "--monitoring-interval".into(),
            "1s".into(),
            "--monitoring-rules".into(),
            rules.to_string_lossy().into_owned(),
        ],
    )
}

fn names(c: &Cluster) -> Vec<String> {
    c.json(&["node", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect()
}

/// Raises (or clears) a metric on one node through its Node Exporter's textfile collector.
fn raise(c: &Cluster, node: &str, metric: &str, on: bool) {
    let dir = c.data_dir().join("agents").join(node).join("textfile");
    let file = dir.join(format!("{metric}.prom"));
    if on {
        let tmp = dir.join(format!(".{metric}.tmp"));
        std::fs::write(&tmp, format!("{metric} 1\n")).unwrap();
        std::fs::rename(tmp, file).unwrap();
    } else {
        let _ = std::fs::remove_file(file);
    }
}

fn state(c: &Cluster, node: &str) -> String {
    c.json(&["node", "show", node])["state"]
        .as_str()
        .unwrap()
        .to_string()
}

fn wait_state(c: &Cluster, node: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = state(c, node);
        if s == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{node} stayed {s}, wanted {want}: {}",
            c.ok(&["node", "show", node])
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_firing_rule_cordons_its_node_and_the_resolve_releases_it() {
    let c = stack();
    let n = names(&c);
    let target = &n[1];
    // Prometheus finds every agent and node exporter through Gantry's service discovery.
    let sd = c.json(&["node", "list"]);
    assert_eq!(sd.as_array().unwrap().len(), 5);

    raise(&c, target, "gantry_test_cordon", true);
    wait_state(&c, target, "CORDONED");
    let shown = c.json(&["node", "show", target]);
    let hold = &shown["holds"][0];
    assert_eq!(hold["source"], "monitoring");
    assert_eq!(hold["alertname"], "TestCordon");
    assert_eq!(hold["reason"], format!("test cordon on {target}"));
    assert!(hold["fingerprint"].is_string());

    // The held node receives no new work.
    let arr = c.write(
        "arr.yaml",
        "version: v4\njobs:\n  many:\n    image: { uri: docker://busybox:1 }\n    command: [ \"true\" ]\n    task-array: { start: 1, end: 8 }\n",
    );
    let id = c.start_workflow(&arr);
    let d = c.wait_status(&id, "FINISHED");
    for t in d["tasks"].as_array().unwrap() {
        assert_ne!(t["node"].as_str().unwrap(), target.as_str());
    }

    raise(&c, target, "gantry_test_cordon", false);
    wait_state(&c, target, "READY");
    let history = c.json(&["node", "show", target]);
    assert_eq!(history["hold_history"][0]["released_by"], "monitoring");
}

#[test]
fn an_admin_release_rule_waits_for_an_admin_and_all_nodes_firing_hold_only_the_cap() {
    let c = stack();
    let n = names(&c);
    raise(&c, &n[0], "gantry_test_hardware", true);
    wait_state(&c, &n[0], "CORDONED");
    raise(&c, &n[0], "gantry_test_hardware", false);
    // Resolved: the hold stays, marked for an administrator.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let shown = c.json(&["node", "show", &n[0]]);
        if shown["holds"][0]["alert_resolved_at"].is_string() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the resolve never arrived: {shown:#}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(state(&c, &n[0]), "CORDONED");
    c.ok(&["node", "release", &n[0], "--reason", "board replaced"]);
    assert_eq!(state(&c, &n[0]), "READY");

    // Every node fires at once: monitoring holds only one of five; the rest are deferred.
    for node in &n {
        raise(&c, node, "gantry_test_cordon", true);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let nodes = c.json(&["node", "list"]);
        let holds: Vec<&serde_json::Value> = nodes
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|n| n["holds"].as_array().unwrap())
            .collect();
        if holds.len() == 5 {
            let active = holds.iter().filter(|h| h["state"] == "ACTIVE").count();
            let deferred = holds.iter().filter(|h| h["state"] == "DEFERRED").count();
            assert_eq!((active, deferred), (1, 4), "{nodes:#}");
            let held = nodes
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| n["state"] != "READY")
                .count();
            assert_eq!(held, 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every alert arrived: {nodes:#}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    for node in &n {
        raise(&c, node, "gantry_test_cordon", false);
    }
    for node in &n {
        wait_state(&c, node, "READY");
    }
}

#[test]
fn an_evict_rule_moves_retry_on_node_steps_and_fails_the_others() {
    let c = stack();
    let file = c.write(
        "evict.yaml",
        r#"version: v4
volumes:
  state: {}
jobs:
  movable:
    image: { uri: docker://busybox:1 }
    mounts: { /state: { volume: state } }
    # The first run waits to be evicted; the restart finishes.
    script: |
      #!/bin/sh
      if [ -e /state/ran ]; then echo "restarted"; exit 0; fi
      touch /state/ran
      sleep 600
    policy:
      retry: { attempts: 2, on: [ node ] }
  pinned:
    image: { uri: docker://busybox:1 }
    command: [ sleep, "600" ]
"#,
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "both RUNNING", |d| {
        Cluster::task(d, "movable")["status"] == "RUNNING"
            && Cluster::task(d, "pinned")["status"] == "RUNNING"
    });
    let m = Cluster::task(&d, "movable")["node"]
        .as_str()
        .unwrap()
        .to_string();
    let p = Cluster::task(&d, "pinned")["node"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(m, p, "one core per agent: the two land apart");

    raise(&c, &m, "gantry_test_evict", true);
    let d = c.wait_for(&id, "movable moved", |d| {
        Cluster::task(d, "movable")["attempts"]
            .as_array()
            .unwrap()
            .len()
            == 2
    });
    let first = &Cluster::task(&d, "movable")["attempts"][0];
    assert_eq!(first["cause"], "EVICTED");
    raise(&c, &m, "gantry_test_evict", false);
    wait_state(&c, &m, "READY");

    raise(&c, &p, "gantry_test_evict", true);
    let d = c.wait_status(&id, "FAILED");
    let movable = Cluster::task(&d, "movable");
    assert_eq!(movable["status"], "FINISHED", "{movable:#}");
    assert_ne!(
        movable["attempts"][1]["node"],
        movable["attempts"][0]["node"]
    );
    let pinned = Cluster::task(&d, "pinned");
    assert_eq!(pinned["status"], "FAILED");
    let reason = pinned["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("evicted from node {p}")) && reason.contains("TestEvict"),
        "{reason}"
    );
    let events = c.ok(&["workflow", "events", &id]);
    assert!(events.contains(&format!("test evict on {p}")), "{events}");
    raise(&c, &p, "gantry_test_evict", false);
}
