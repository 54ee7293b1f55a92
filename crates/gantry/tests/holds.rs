//! Node holds driven through the real Alertmanager webhook (payloads in Alertmanager's version 4
//! shape, as captured from a real Alertmanager 0.25) and by administrators, on an embedded
//! cluster of five real agents, so monitoring's cap is one node.

mod common;

use common::Cluster;
use serde_json::{json, Value};

struct Hook {
    url: String,
    token: String,
}

impl Hook {
    fn new(c: &Cluster) -> Hook {
        let made = c.json(&["admin", "user", "create", "alertmanager", "--monitoring"]);
        Hook {
            url: format!("http://127.0.0.1:{}/api/v1/monitoring/alertmanager", c.port),
            token: made["token"].as_str().unwrap().to_string(),
        }
    }

    /// Posts with curl (a plain HTTP client, as Alertmanager is); returns (status, body).
    fn post_as(&self, token: Option<&str>, body: &str) -> (u16, String) {
        let mut cmd = std::process::Command::new("curl");
        cmd.args([
            "-sS",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
        ]);
        if let Some(t) = token {
            cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        let out = cmd
            .args(["--data-binary", body, &self.url])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap();
        (code.trim().parse().unwrap(), body.to_string())
    }

    fn post(&self, body: &Value) -> Value {
        let (code, text) = self.post_as(Some(&self.token), &body.to_string());
        assert_eq!(code, 200, "{text}");
        serde_json::from_str(&text).unwrap()
    }
}

fn alert(status: &str, node: &str, name: &str, hold: &str, release: &str, starts: &str) -> Value {
    json!({
        "status": status,
        "labels": {"alertname": name, "node": node, "gantry_hold": hold, "gantry_release": release, "severity": "critical"},
        "annotations": {"summary": format!("{name} on {node}")},
        "startsAt": starts,
        "endsAt": if status == "firing" { "0001-01-01T00:00:00Z" } else { "2026-11-30T10:05:00Z" },
        "generatorURL": "http://prometheus/graph",
        "fingerprint": format!("{:016x}", name.len() as u64 * 7919 + node.bytes().map(u64::from).sum::<u64>()),
    })
}

/// A post in Alertmanager's shape; the top-level status is deliberately not trusted.
fn post(top: &str, alerts: Vec<Value>) -> Value {
    json!({
        "receiver": "gantry", "status": top, "alerts": alerts,
        "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
        "externalURL": "http://alertmanager", "version": "4", "groupKey": "{}:{}", "truncatedAlerts": 0
    })
}

fn node_names(c: &Cluster) -> Vec<String> {
    let nodes = c.json(&["node", "list"]);
    nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect()
}

fn node(c: &Cluster, name: &str) -> Value {
    c.json(&["node", "show", name])
}

fn state(c: &Cluster, name: &str) -> String {
    node(c, name)["state"].as_str().unwrap().to_string()
}

fn holds(c: &Cluster, name: &str) -> Vec<Value> {
    node(c, name)["holds"].as_array().unwrap().clone()
}

#[test]
fn alerts_hold_and_release_nodes_within_the_pool_cap_and_repeat_harmlessly() {
    let c = Cluster::up(5);
    let hook = Hook::new(&c);
    let names = node_names(&c);
    let (n1, n2) = (&names[0], &names[1]);
    const T1: &str = "2026-11-30T10:00:00Z";

    // Without the right token nothing changes.
    let body = post(
        "firing",
        vec![alert("firing", n1, "DiskFull", "cordon", "auto", T1)],
    )
    .to_string();
    assert_eq!(hook.post_as(None, &body).0, 401);
    let admin = std::fs::read_to_string(c.data_dir().join("context.toml")).unwrap();
    let user = c.json(&["admin", "user", "create", "eve"]);
    assert_eq!(
        hook.post_as(Some(user["token"].as_str().unwrap()), &body).0,
        403
    );
    assert!(admin.contains("token"));
    assert_eq!(state(&c, n1), "READY");
    // A payload that can never be accepted is a 4xx, and changes nothing.
    assert_eq!(hook.post_as(Some(&hook.token), "{not json").0, 400);

    // Firing: the node is cordoned, with who, why and when.
    let out = hook.post(&post(
        "firing",
        vec![alert("firing", n1, "DiskFull", "cordon", "auto", T1)],
    ));
    assert_eq!(out["placed"], 1);
    assert_eq!(state(&c, n1), "CORDONED");
    let h = &holds(&c, n1)[0];
    assert_eq!(h["source"], "monitoring");
    assert_eq!(h["alertname"], "DiskFull");
    assert_eq!(h["reason"], format!("DiskFull on {n1}"));
    assert_eq!(h["state"], "ACTIVE");
    assert!(h["created_at"].is_string());

    // The same entry again (a re-send, an HA twin) changes nothing.
    for _ in 0..3 {
        let out = hook.post(&post(
            "firing",
            vec![alert("firing", n1, "DiskFull", "cordon", "auto", T1)],
        ));
        assert_eq!(out["unchanged"], 1);
    }
    assert_eq!(holds(&c, n1).len(), 1);

    // A second node past the cap (1 of 5): deferred, visible, not applied.
    let out = hook.post(&post(
        "firing",
        vec![alert("firing", n2, "DiskFull", "cordon", "auto", T1)],
    ));
    assert_eq!(out["deferred"], 1);
    assert_eq!(state(&c, n2), "READY");
    assert_eq!(holds(&c, n2)[0]["state"], "DEFERRED");
    let list = String::from_utf8_lossy(&c.gantry(&["node", "list"]).stdout).into_owned();
    assert!(list.contains("DEFERRED"), "{list}");
    let metrics = reqwest_get(&format!("http://127.0.0.1:{}/metrics", c.port));
    assert!(
        metrics.contains("gantry_holds_deferred{pool=\"default\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("gantry_holds{pool=\"default\",type=\"cordon\",source=\"monitoring\"} 1"),
        "{metrics}"
    );
    let shown = c.ok(&["node", "show", n2]);
    assert!(shown.contains("DEFERRED"), "{shown}");

    // Work is never placed on the cordoned node.
    let arr = c.write(
        "arr.yaml",
        "version: v4\njobs:\n  many:\n    image: { uri: docker://busybox:1 }\n    command: [ \"true\" ]\n    task-array: { start: 1, end: 8 }\n",
    );
    let id = c.start_workflow(&arr);
    let d = c.wait_status(&id, "FINISHED");
    for t in d["tasks"].as_array().unwrap() {
        assert_ne!(
            t["node"].as_str().unwrap(),
            n1.as_str(),
            "placed on a cordoned node"
        );
    }

    // Resolved (in a post whose top-level status still says firing): n1 is released by
    // monitoring, and n2's deferred hold takes the freed room.
    let out = hook.post(&post(
        "firing",
        vec![
            alert("resolved", n1, "DiskFull", "cordon", "auto", T1),
            alert("firing", n2, "DiskFull", "cordon", "auto", T1),
        ],
    ));
    assert_eq!(out["released"], 1);
    assert_eq!(state(&c, n1), "READY");
    assert_eq!(state(&c, n2), "CORDONED");
    let released = &node(&c, n1)["hold_history"][0];
    assert_eq!(released["state"], "RELEASED");
    assert_eq!(released["released_by"], "monitoring");

    // A late duplicate of the ended episode's firing post holds nothing.
    let out = hook.post(&post(
        "firing",
        vec![alert("firing", n1, "DiskFull", "cordon", "auto", T1)],
    ));
    assert_eq!(out["unchanged"], 1);
    assert_eq!(state(&c, n1), "READY");
    // A resolve repeated later changes nothing either.
    let out = hook.post(&post(
        "resolved",
        vec![alert("resolved", n1, "DiskFull", "cordon", "auto", T1)],
    ));
    assert_eq!(out["unchanged"], 1);

    // Unknown nodes are recorded and reported, not fatal.
    let out = hook.post(&post(
        "firing",
        vec![alert("firing", "ghost-9", "DiskFull", "cordon", "auto", T1)],
    ));
    assert!(
        out["ignored"][0].as_str().unwrap().contains("ghost-9"),
        "{out}"
    );
}

/// One post in which a cordon alert fires on every node; returns the reply.
fn fire_everywhere(hook: &Hook, names: &[String], starts: &str) -> Value {
    let alerts: Vec<Value> = names
        .iter()
        .map(|n| alert("firing", n, "NodeExporterDown", "cordon", "auto", starts))
        .collect();
    hook.post(&post("firing", alerts))
}

#[test]
fn every_node_firing_at_once_holds_only_the_cap() {
    let c = Cluster::up(5);
    let hook = Hook::new(&c);
    let names = node_names(&c);
    let out = fire_everywhere(&hook, &names, "2026-11-30T11:00:00Z");
    assert_eq!(out["placed"], 1, "{out}");
    assert_eq!(out["deferred"], 4, "{out}");
    let held: Vec<&String> = names.iter().filter(|n| state(&c, n) != "READY").collect();
    assert_eq!(held.len(), 1);
    let events = c.ok(&["node", "show", &names[4]]);
    assert!(
        events
            .contains("deferred: monitoring already holds 1 of 5 node(s) in pool default (cap 1)"),
        "{events}"
    );
}

/// The cap's fraction is the administrator's, for the cluster and for one pool (the pool's
/// wins), with the CLI verb the README gives.
#[test]
fn an_administrator_sets_the_fraction_monitoring_may_hold() {
    let c = Cluster::up(5);
    let hook = Hook::new(&c);
    c.ok(&["admin", "settings", "set", "monitoring.hold_fraction=0.6"]);
    c.ok(&[
        "admin",
        "settings",
        "set",
        "monitoring.hold_fraction.default=0.4",
    ]);
    let bad = c.gantry(&["admin", "settings", "set", "monitoring.hold_fraction=2"]);
    assert!(!bad.status.success(), "a fraction past 1 is refused");
    let names = node_names(&c);
    let out = fire_everywhere(&hook, &names, "2026-11-30T11:30:00Z");
    assert_eq!(
        (&out["placed"], &out["deferred"]),
        (&json!(2), &json!(3)),
        "{out}"
    );
    let held = names.iter().filter(|n| state(&c, n) != "READY").count();
    assert_eq!(held, 2, "floor(0.4 x 5) nodes");
}

#[test]
fn an_admin_release_rule_keeps_the_node_until_an_admin_releases_and_that_stands() {
    let c = Cluster::up(5);
    let hook = Hook::new(&c);
    let n = node_names(&c)[2].clone();
    const T1: &str = "2026-11-30T12:00:00Z";
    hook.post(&post(
        "firing",
        vec![alert(
            "firing",
            &n,
            "EdacUncorrectable",
            "cordon",
            "admin",
            T1,
        )],
    ));
    assert_eq!(state(&c, &n), "CORDONED");
    let out = hook.post(&post(
        "resolved",
        vec![alert(
            "resolved",
            &n,
            "EdacUncorrectable",
            "cordon",
            "admin",
            T1,
        )],
    ));
    assert_eq!(out["awaiting_admin"], 1);
    assert_eq!(
        state(&c, &n),
        "CORDONED",
        "resolved, but an administrator must release it"
    );
    let shown = c.ok(&["node", "show", &n]);
    assert!(shown.contains("an administrator must release"), "{shown}");

    let released = c.json(&["node", "release", &n, "--reason", "DIMM replaced"]);
    assert_eq!(released[0]["released_by"], "admin");
    assert_eq!(released[0]["release_reason"], "DIMM replaced");
    assert_eq!(state(&c, &n), "READY");
    // The same episode firing again does not undo the administrator's release...
    hook.post(&post(
        "firing",
        vec![alert(
            "firing",
            &n,
            "EdacUncorrectable",
            "cordon",
            "admin",
            T1,
        )],
    ));
    assert_eq!(state(&c, &n), "READY");
    // ...a new episode does.
    hook.post(&post(
        "firing",
        vec![alert(
            "firing",
            &n,
            "EdacUncorrectable",
            "cordon",
            "admin",
            "2026-11-30T12:30:00Z",
        )],
    ));
    assert_eq!(state(&c, &n), "CORDONED");
    // Monitoring never releases an administrator's hold.
    let admin_hold = c.json(&[
        "node",
        "hold",
        &n,
        "--type",
        "cordon",
        "--reason",
        "firmware update",
    ]);
    assert_eq!(admin_hold["source"], "admin");
    assert_eq!(admin_hold["created_by"], "admin");
    hook.post(&post(
        "resolved",
        vec![alert(
            "resolved",
            &n,
            "EdacUncorrectable",
            "cordon",
            "admin",
            "2026-11-30T12:30:00Z",
        )],
    ));
    let hold_ids: Vec<Value> = holds(&c, &n)
        .into_iter()
        .filter(|h| h["source"] == "admin")
        .collect();
    assert_eq!(hold_ids.len(), 1);
}

#[test]
fn an_evict_hold_moves_retry_on_node_steps_and_fails_the_others_with_the_reason() {
    let c = Cluster::up(5);
    let file = c.write(
        "evict.yaml",
        r#"version: v4
jobs:
  movable:
    image: { uri: docker://busybox:1 }
    command: [ sleep, "4" ]
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
    let m_node = Cluster::task(&d, "movable")["node"]
        .as_str()
        .unwrap()
        .to_string();
    let p_node = Cluster::task(&d, "pinned")["node"]
        .as_str()
        .unwrap()
        .to_string();
    c.ok(&[
        "node",
        "hold",
        &m_node,
        "--type",
        "evict",
        "--reason",
        "GPU Xid 79 on the bus",
    ]);
    if p_node != m_node {
        c.ok(&[
            "node",
            "hold",
            &p_node,
            "--type",
            "evict",
            "--reason",
            "GPU Xid 79 on the bus",
        ]);
    }
    let d = c.wait_status(&id, "FAILED");
    let movable = Cluster::task(&d, "movable");
    assert_eq!(movable["status"], "FINISHED", "{movable:#}");
    let a = movable["attempts"].as_array().unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["cause"], "EVICTED");
    assert_ne!(a[1]["node"], a[0]["node"], "restarted on a healthy node");
    let pinned = Cluster::task(&d, "pinned");
    assert_eq!(pinned["status"], "FAILED");
    let reason = pinned["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("evicted from node {p_node}")) && reason.contains("GPU Xid 79"),
        "{reason}"
    );
    let events = c.ok(&["workflow", "events", &id]);
    assert!(
        events.contains(&format!("evicting from {m_node}: evict hold"))
            && events.contains("by admin"),
        "{events}"
    );
    assert_eq!(state(&c, &m_node), "EVICTING");
}

fn reqwest_get(url: &str) -> String {
    let out = std::process::Command::new("curl")
        .args(["-sS", url])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}
