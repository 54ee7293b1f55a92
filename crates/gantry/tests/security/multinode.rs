//! Multinode jobs and the placement settings, against a normal user of another group: the
//! settings that decide placement (which annotations constrain, where host networking is
//! forbidden) are an administrator's, and a gang's members are as private as any task.

use crate::common::Cluster;

fn err(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn another_group_cannot_set_placement_settings_or_see_a_gangs_members() {
    let c = Cluster::up(1);
    let alice = c.user_token("alice", "physics");
    let mallory = c.user_token("mallory", "other");

    // Attack: a user widens what constrains placement, or forbids host networking to others.
    for kv in [
        "scheduler.constraint_annotations=team",
        "network.host.forbidden_pools=default",
    ] {
        let out = c.as_user(&mallory, &["admin", "settings", "set", kv]);
        assert!(!out.status.success(), "{kv} was set by a user");
        assert!(err(&out).contains("administrator"), "{}", err(&out));
    }
    let out = c.as_user(
        &mallory,
        &[
            "admin",
            "settings",
            "get",
            "scheduler.constraint_annotations",
        ],
    );
    assert!(!out.status.success());
    // Nothing changed; the administrator's own use works.
    let got = c.json(&[
        "admin",
        "settings",
        "get",
        "scheduler.constraint_annotations",
    ]);
    assert_eq!(got[0]["value"], "nvidia.com/gpu.model,nvidia.com/gpu.arch");
    let got = c.json(&["admin", "settings", "get", "network.host.forbidden_pools"]);
    assert_eq!(got[0]["value"], "");
    c.ok(&[
        "admin",
        "settings",
        "set",
        "network.host.forbidden_pools=gpu",
    ]);
    let got = c.json(&["admin", "settings", "get", "network.host.forbidden_pools"]);
    assert_eq!(got[0]["value"], "gpu");

    // Alice's gang waits (it is larger than the cluster); she sees its three members.
    let f = c.write(
        "gang.yaml",
        "version: v4\njobs:\n  sim:\n    image: {uri: docker://busybox:1}\n    command: [hostname]\n    multinode: {nodes: 3, implementation: openmpi}\n    resource: {cpu: {cores: 100000}}\n",
    );
    let id = c.start_as(&alice, &f);
    let out = c.as_user(&alice, &["workflow", "describe", &id, "-o", "json"]);
    assert!(out.status.success(), "{}", err(&out));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let members: Vec<u64> = d["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["job"] == "sim")
        .map(|t| t["index"].as_u64().unwrap())
        .collect();
    assert_eq!(members, [0, 1, 2]);

    // Attack: another group reads the members, their log, or stops the gang.
    for args in [
        vec!["workflow", "describe", id.as_str()],
        vec!["workflow", "events", id.as_str()],
        vec!["workflow", "log", id.as_str(), "sim", "--task", "1"],
        vec!["workflow", "stop", id.as_str()],
    ] {
        let out = c.as_user(&mallory, &args);
        assert!(!out.status.success(), "{args:?} worked for another group");
        assert!(
            err(&out).contains("not found") || err(&out).contains("no workflow"),
            "{args:?}: {}",
            err(&out)
        );
    }
    // Nodes show every user their pool, address and labels, as `node show` does; never the
    // exec service through which a gang's agents start processes in each other's containers.
    let nodes = c.as_user(&mallory, &["node", "list", "-o", "json"]);
    assert!(nodes.status.success(), "{}", err(&nodes));
    let nodes: serde_json::Value = serde_json::from_slice(&nodes.stdout).unwrap();
    let node = &nodes[0];
    assert!(
        node["labels"].is_object() && node.get("exec_addr").is_none(),
        "{node:#}"
    );
    let listed = c.as_user(&mallory, &["workflow", "list", "-o", "json"]);
    assert!(!String::from_utf8_lossy(&listed.stdout).contains(&id));
    // Still Alice's, still waiting.
    let out = c.as_user(&alice, &["workflow", "stop", &id]);
    assert!(out.status.success(), "{}", err(&out));
}

/// Alice's host-network service listens on the node's own address. Her workflow's bridged
/// job reaches it as `web.svc` (the firewall opens exactly that address and port to her
/// workflow); bob's bridged job on the same node, aiming at the same port of the host (at
/// its bridge's gateway and at her service's address), is refused by the node's firewall.
#[test]
fn another_groups_bridged_containers_cannot_reach_a_host_network_service() {
    // Room for both workflows' steps at once on the one node.
    let c = Cluster::up_with(1, vec!["--cpus".into(), "4".into()]);
    let alice = c.user_token("alice", "ga");
    let bob = c.user_token("bob", "gb");
    let port = crate::common::free_port();
    let serve = format!(
        r#"version: v4
services:
  web:
    image: {{ uri: docker://busybox:1 }}
    persist: true
    network:
      host: true
      ports: [ {{ name: http, port: {port}, protocol: tcp }} ]
    script: |
      #!/bin/sh
      mkdir -p /www && echo alice-secret > /www/index.html
      exec httpd -f -p {port} -h /www
    readiness-probe:
      http-get: {{ path: /, port: {port} }}
      period-seconds: 1
jobs:
  mine:
    image: {{ uri: docker://busybox:1 }}
    depends-on: [ {{ name: web, status: RUNNING }} ]
    command: [ wget, -q, -O, "-", "http://web.svc:{port}/" ]
"#
    );
    let a = c.start_as(&alice, &c.write("alice.yaml", &serve));
    let d = c.wait_for(&a, "alice's job ended", |d| {
        let s = &Cluster::task(d, "mine")["status"];
        s == "FINISHED" || s == "FAILED"
    });
    let mine = c.ok(&["workflow", "log", &a, "mine"]);
    assert_eq!(
        Cluster::task(&d, "mine")["status"],
        "FINISHED",
        "{d:#}\n{mine}"
    );
    assert_eq!(mine.trim(), "alice-secret");

    // Bob's workflow is networked (it has a service), so his job is on the same bridge.
    let attack = format!(
        r#"version: v4
services:
  idle:
    image: {{ uri: docker://busybox:1 }}
    command: [ sleep, "600" ]
jobs:
  probe:
    image: {{ uri: docker://busybox:1 }}
    script: |
      #!/bin/sh
      gw=$(ip route | awk '/^default/ {{print $3}}')
      for a in $gw 127.0.0.1; do
        out=$(timeout 8 wget -q -O - http://$a:{port}/ 2>&1) || out="refused"
        echo "$a: $out"
      done
"#
    );
    let b = c.start_as(&bob, &c.write("bob.yaml", &attack));
    let d = c.wait_for(&b, "bob's probe ended", |d| {
        let s = &Cluster::task(d, "probe")["status"];
        s == "FINISHED" || s == "FAILED"
    });
    let out = String::from_utf8_lossy(&c.as_user(&bob, &["workflow", "log", &b, "probe"]).stdout)
        .into_owned();
    assert_eq!(
        Cluster::task(&d, "probe")["status"],
        "FINISHED",
        "{d:#}\n{out}"
    );
    assert!(!out.contains("alice-secret"), "{out}");
    assert_eq!(out.matches("refused").count(), 2, "{out}");
    // Bob's workflow ended with its job (its service does not persist); alice's runs on.
    c.ok(&["workflow", "stop", &a]);
}
