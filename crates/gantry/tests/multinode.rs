//! Multinode jobs, host networking and annotations, as a user meets them on a real `gantry up`
//! cluster: what `validate` and `workflow start` say of them, the members `describe` lists,
//! the cluster settings that decide placement, and the labels `node show` lists.

mod common;

use common::Cluster;
use serde_json::Value;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Starts a workflow file; returns its id and what `workflow start` warned.
fn start(c: &Cluster, name: &str, text: &str) -> (String, String) {
    let f = c.write(name, text);
    let out = c.gantry(&["workflow", "start", f.to_str().unwrap()]);
    assert!(out.status.success(), "start {name}: {}", stderr(&out));
    (
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        stderr(&out),
    )
}

/// Stops a workflow that may have ended already: until placement reads annotations (the
/// scheduler's part), a constrained job runs on any node.
fn stop(c: &Cluster, id: &str) {
    let _ = c.gantry(&["workflow", "stop", id]);
}

#[track_caller]
fn said(warned: &str, what: &str) {
    assert!(warned.contains(what), "{what:?} not in:\n{warned}");
}

/// An administrator's `settings set` that is refused; its error.
fn refused(c: &Cluster, kv: &str) -> String {
    let out = c.gantry(&["admin", "settings", "set", kv]);
    assert!(!out.status.success(), "{kv} was taken");
    stderr(&out)
}

fn tasks(d: &Value) -> Vec<(String, Option<u64>, String)> {
    d["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["job"].as_str().unwrap().to_string(),
                t["index"].as_u64(),
                t["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn multinode_jobs_validate_start_with_warnings_and_list_their_members() {
    let c = Cluster::up(2);

    // Validation: both positions of a multinode task array, and the gang's size.
    let bad = c.write(
        "bad.yaml",
        "version: v4\njobs:\n  a:\n    image: {uri: docker://busybox:1}\n    task-array: {start: 1, end: 2}\n    multinode: {nodes: 2, implementation: openmpi}\n  b:\n    image: {uri: docker://busybox:1}\n    multinode: {nodes: 0, implementation: mpich}\n",
    );
    let out = c.gantry(&["workflow", "validate", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(
        all.contains(
            "6:5: jobs.a.multinode: `multinode` and `task-array` (at 5:5) cannot both be set"
        ),
        "{all}"
    );
    assert!(
        all.contains("9:24: jobs.b.multinode.nodes: 0 is out of range; it must be at least 1"),
        "{all}"
    );
    let out = c.gantry(&["workflow", "start", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        c.json(&["workflow", "list"]).as_array().unwrap().is_empty(),
        "nothing stored"
    );

    // gasnet is refused, precisely, by start.
    let gas = c.write(
        "gas.yaml",
        "version: v4\njobs:\n  g:\n    image: {uri: docker://busybox:1}\n    command: [true]\n    multinode: {nodes: 2, implementation: gasnet}\n",
    );
    let out = c.gantry(&["workflow", "start", gas.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out)
            .contains("jobs.g.multinode.implementation: gasnet multinode jobs are not supported"),
        "{}",
        stderr(&out)
    );

    // A gang larger than the cluster is accepted, warned about, and stored as one task per
    // member, each waiting with the scheduler's reason.
    let (id, warned) = start(
        &c,
        "gang.yaml",
        r#"version: v4
jobs:
  big:
    image: {uri: docker://busybox:1}
    command: [hostname]
    multinode: {nodes: 3, implementation: generic}
    resource: {cpu: {cores: 100000}}
  wide:
    image: {uri: docker://busybox:1}
    command: [hostname]
    multinode: {nodes: 3, implementation: openmpi, procsPerNode: 1}
    resource: {cpu: {cores: 1}}
"#,
    );
    said(
        &warned,
        "warning: jobs.big: cannot start on any of today's nodes (never fits: needs more than any node has: 100000 cores",
    );
    said(&warned, "warning: jobs.wide: cannot start on any of today's nodes (never fits: needs 3 nodes with 1 core each of one pool");
    let d = c.wait_for(&id, "the members to say why they wait", |d| {
        d["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["job"] == "big")
            .all(|t| {
                t["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("never fits"))
            })
    });
    let big: Vec<_> = tasks(&d).into_iter().filter(|t| t.0 == "big").collect();
    assert_eq!(
        big,
        (0..3)
            .map(|i| ("big".to_string(), Some(i), "PENDING".to_string()))
            .collect::<Vec<_>>()
    );
    assert_eq!(tasks(&d).iter().filter(|t| t.0 == "wide").count(), 3);
    let text = c.ok(&["workflow", "describe", &id]);
    for m in ["big[0]", "big[1]", "big[2]", "wide[0]", "wide[2]"] {
        assert!(text.contains(m), "{m} in\n{text}");
    }
    // The web UI's task table shows each member.
    let page = c.web_page(&format!("/workflows/{id}"));
    for m in ["big[0]", "big[1]", "big[2]"] {
        assert!(page.contains(m), "{m} on the workflow page:\n{page}");
    }
    stop(&c, &id);

    // Annotations: a constraint no node has is warned about, a key the cluster does not place
    // by is said to be not acted on.
    let annotated = r#"version: v4
jobs:
  gpu:
    image: {uri: docker://busybox:1}
    command: [true]
    resource:
      annotations: {nvidia.com/gpu.model: NoSuchGPU, team: physics}
"#;
    let (id, warned) = start(&c, "gpu.yaml", annotated);
    said(&warned, "jobs.gpu: cannot start on any of today's nodes (never fits: no node has label nvidia.com/gpu.model=NoSuchGPU)");
    said(&warned, "jobs.gpu.resource.annotations: team not acted on");
    stop(&c, &id);

    // The administrator decides which keys constrain.
    let bad = refused(&c, "scheduler.constraint_annotations=nvidia.com/");
    said(&bad, "is not an annotation key");
    c.ok(&[
        "admin",
        "settings",
        "set",
        "scheduler.constraint_annotations=team",
    ]);
    let got = c.json(&[
        "admin",
        "settings",
        "get",
        "scheduler.constraint_annotations",
    ]);
    assert_eq!(got[0]["value"], "team", "{got}");
    let (id, warned) = start(&c, "gpu2.yaml", annotated);
    said(&warned, "no node has label team=physics");
    said(
        &warned,
        "jobs.gpu.resource.annotations: nvidia.com/gpu.model not acted on",
    );
    stop(&c, &id);

    // Host networking forbidden in the only pool: accepted, and told.
    c.ok(&[
        "admin",
        "settings",
        "set",
        "network.host.forbidden_pools=default",
    ]);
    let (id, warned) = start(
        &c,
        "host.yaml",
        r#"version: v4
services:
  web:
    image: {uri: docker://busybox:1}
    command: [httpd, -f, -p, "18080"]
    network:
      host: true
      ports: [{name: http, port: 18080}]
"#,
    );
    said(&warned, "web: host networking (network.host, multinode) is forbidden in pool(s) default by an administrator (network.host.forbidden_pools)");
    said(&warned, "services.web: cannot start on any of today's nodes (never fits: pool \"default\" does not allow host networking)");
    stop(&c, &id);
    said(
        &refused(&c, "network.host.forbidden_pools=../x"),
        "pool \"../x\"",
    );
}

/// Until agents report labels themselves (`gantry agent --label`), a stand-in speaks the
/// agent protocol's hello over the real WebSocket, as an agent does, with labels, address and
/// exec service; the server, store and CLI are the real ones.
fn hello(c: &Cluster, name: &str, labels: Value) -> std::thread::JoinHandle<()> {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};
    let url = format!("ws://127.0.0.1:{}/api/v1/agent/connect", c.port);
    let token = c.admin_token();
    let hello = serde_json::json!({
        "type": "hello", "name": name, "pool": "default", "version": "test",
        "capacity": {"cpus": 1, "memory_bytes": 1u64 << 30, "devices": {}},
        "address": "192.0.2.7", "exec_addr": "192.0.2.7:7070", "labels": labels,
    });
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let mut req = url.into_client_request().unwrap();
            req.headers_mut()
                .insert("Authorization", format!("Bearer {token}").parse().unwrap());
            let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
            ws.send(Message::text(hello.to_string())).await.unwrap();
            // The welcome says the server took the hello; then hold the connection a while.
            while let Some(Ok(m)) = ws.next().await {
                if m.to_text().is_ok_and(|t| t.contains("welcome")) {
                    break;
                }
            }
            ready_tx.send(()).unwrap();
            tokio::time::sleep(std::time::Duration::from_secs(20)).await;
        })
    });
    ready_rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the server welcomes the stand-in agent");
    h
}

#[test]
fn node_show_lists_labels_and_address_and_annotations_match_them() {
    let c = Cluster::up(1);
    let _agent = hello(
        &c,
        "gpu-node",
        serde_json::json!({"nvidia.com/gpu.model": "NVIDIA L4", "nvidia.com/gpu.arch": "ada"}),
    );
    let n = c.json(&["node", "show", "gpu-node"]);
    assert_eq!(n["address"], "192.0.2.7", "{n:#}");
    assert_eq!(n["labels"]["nvidia.com/gpu.model"], "NVIDIA L4", "{n:#}");
    assert_eq!(n["labels"]["nvidia.com/gpu.arch"], "ada", "{n:#}");
    // Its exec service is for its gangs' agents, not for people.
    assert!(!n.to_string().contains("7070"), "{n:#}");
    let listed = c.json(&["node", "list"]);
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "gpu-node")
        .unwrap();
    assert_eq!(row["labels"]["nvidia.com/gpu.model"], "NVIDIA L4");
    let text = c.ok(&["node", "show", "gpu-node"]);
    assert!(text.contains("Address:   192.0.2.7"), "{text}");
    assert!(text.contains("nvidia.com/gpu.model=NVIDIA L4"), "{text}");
    let page = c.web_page("/nodes/gpu-node");
    assert!(
        page.contains("<code>nvidia.com/gpu.model=NVIDIA L4</code>") && page.contains("192.0.2.7"),
        "{page}"
    );
    let real = c.json(&["node", "list"]);
    let other = real
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] != "gpu-node")
        .unwrap()["name"]
        .as_str()
        .unwrap()
        .to_string();
    // A real agent reports what it finds itself: the CPU model of /proc/cpuinfo.
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .find_map(|l| {
            Some(
                l.strip_prefix("model name")?
                    .split_once(':')?
                    .1
                    .trim()
                    .to_string(),
            )
        })
        .expect("a model name in /proc/cpuinfo");
    let shown = c.json(&["node", "show", &other]);
    assert_eq!(shown["labels"]["cpu.model"], cpu.as_str(), "{shown:#}");
    assert!(c
        .ok(&["node", "show", &other])
        .contains(&format!("cpu.model={cpu}")));

    // A job asking for the label the node has is not warned about; one asking for another
    // model is.
    let job = |model: &str| {
        format!(
            "version: v4\njobs:\n  j:\n    image: {{uri: docker://busybox:1}}\n    command: [true]\n    resource:\n      annotations: {{nvidia.com/gpu.model: {model}}}\n"
        )
    };
    let (id, warned) = start(&c, "l4.yaml", &job("NVIDIA L4"));
    assert!(!warned.contains("cannot start"), "{warned}");
    stop(&c, &id);
    let (id, warned) = start(&c, "t4.yaml", &job("T4"));
    said(&warned, "no node has label nvidia.com/gpu.model=T4");
    stop(&c, &id);
}
