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
