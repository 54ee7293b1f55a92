//! The words the CLI answers with (issue 16): id prefixes, `log`'s task, `node hold --type
//! drain`, `node release --reason`, a node's events paged and named, `describe`'s times and
//! `--status`, on an embedded cluster of one real agent.

mod common;

use common::Cluster;
use serde_json::Value;

fn err(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn messages_name_flags_ids_and_the_work_a_node_did() {
    let c = Cluster::up(1);
    let file = c.write(
        "msgs.yaml",
        r#"version: v4
jobs:
  arr:
    image: { uri: docker://busybox:1 }
    command: [ "true" ]
    task-array: { start: 1, end: 3 }
  bad:
    image: { uri: docker://busybox:1 }
    command: [ sh, -c, "exit 3" ]
"#,
    );
    let id = c.start_workflow(&file);
    c.wait_for(&id, "the workflow to end", |d| d["status"] == "FAILED");

    // Ids: too short, unknown, and a prefix of 8 that finds it.
    let out = c.gantry(&["workflow", "status", &id[..4]]);
    assert!(!out.status.success());
    assert!(
        err(&out).contains("workflow ids need at least 8 characters"),
        "{}",
        err(&out)
    );
    let unknown = if id.starts_with("00000000") {
        "ffffffff"
    } else {
        "00000000"
    };
    let out = c.gantry(&["workflow", "status", unknown]);
    assert!(
        err(&out).contains(&format!(
            "no workflow {unknown} (see `gantry workflow list`)"
        )),
        "{}",
        err(&out)
    );
    assert!(c.ok(&["workflow", "status", &id[..8]]).contains(&id));

    // `log` names its real flag and the indexes there are.
    let out = c.gantry(&["workflow", "log", &id, "arr"]);
    assert!(!out.status.success());
    let e = err(&out);
    assert!(e.contains("--task N") && e.contains("indexes 1-3"), "{e}");
    let out = c.gantry(&["workflow", "log", &id, "arr", "--task", "9"]);
    assert!(err(&out).contains("indexes 1-3"), "{}", err(&out));

    // `describe`: times per task, and --status filters (any case, several).
    let text = c.ok(&["workflow", "describe", &id]);
    for h in ["START", "END", "DURATION"] {
        assert!(text.contains(h), "{text}");
    }
    let only: Value = c.json(&["workflow", "describe", &id, "--status", "failed"]);
    let tasks = only["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{only:#}");
    assert_eq!(tasks[0]["job"], "bad");
    let both: Value = c.json(&[
        "workflow", "describe", &id, "--status", "FAILED", "--status", "finished",
    ]);
    assert_eq!(both["tasks"].as_array().unwrap().len(), 4);
    let out = c.gantry(&["workflow", "describe", &id, "--status", "DONE"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err(&out).contains("unknown task status \"DONE\"") && err(&out).contains("RUNNING"),
        "{}",
        err(&out)
    );

    // A node's events: paged, newest kept, each naming its workflow and task.
    let node = c.json(&["node", "list"])[0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let page = c.json(&["node", "show", &node, "--limit", "3"]);
    let evs = page["events"].as_array().unwrap();
    assert_eq!(evs.len(), 3, "{page:#}");
    assert_eq!(page["more_events"], true);
    assert!(
        evs.windows(2)
            .all(|w| w[0]["seq"].as_i64() < w[1]["seq"].as_i64()),
        "oldest first within the page: {page:#}"
    );
    let all = c.json(&["node", "show", &node, "--limit", "1000"]);
    let all_evs = all["events"].as_array().unwrap();
    assert_eq!(all["more_events"], false);
    assert_eq!(
        evs.last().unwrap()["seq"],
        all_evs.last().unwrap()["seq"],
        "the page is the newest events"
    );
    let named = all_evs
        .iter()
        .find(|e| e["task"] == "arr[2]")
        .unwrap_or_else(|| panic!("an event of arr[2]: {all:#}"));
    assert_eq!(named["workflow_name"], "msgs");
    assert_eq!(named["workflow_id"], id.as_str());
    let text = c.ok(&["node", "show", &node, "--limit", "1000"]);
    assert!(
        text.contains(&format!("workflow msgs ({}) task arr[2]", &id[..8])),
        "{text}"
    );
    let later = c.json(&["node", "show", &node, "--since", "2999-01-01T00:00:00Z"]);
    assert!(later["events"].as_array().unwrap().is_empty());
    let recent = c.json(&["node", "show", &node, "--since", "1h", "--limit", "1000"]);
    assert_eq!(recent["events"].as_array().unwrap().len(), all_evs.len());
    let out = c.gantry(&["node", "show", &node, "--since", "yesterday"]);
    assert!(!out.status.success());
    assert!(err(&out).contains("RFC 3339"), "{}", err(&out));

    // The web page names them too, newest first, with a link to more.
    let html = c.web_page(&format!("/nodes/{node}?events=3"));
    assert!(html.contains(&format!("msgs ({})", &id[..8])), "{html}");
    assert!(html.contains("More events"), "{html}");

    // A user of another group sees the node's own events but not this workflow's.
    let other = c.user_token("mallory", "elsewhere");
    let out = c.as_user(
        &other,
        &["node", "show", &node, "--limit", "1000", "-o", "json"],
    );
    assert!(out.status.success(), "{}", err(&out));
    let theirs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let evs = theirs["events"].as_array().unwrap();
    assert!(!evs.is_empty(), "the node's own events: {theirs:#}");
    assert!(
        evs.iter().all(|e| e["workflow_id"].is_null()),
        "another group's workflow is not shown: {theirs:#}"
    );
    let out = c.as_user(&other, &["workflow", "status", &id[..8]]);
    assert!(
        err(&out).contains(&format!("no workflow {}", &id[..8])),
        "{}",
        err(&out)
    );

    // Holds: drain is a cordon; a release asks for its reason and records it.
    let h = c.json(&[
        "node",
        "hold",
        &node,
        "--type",
        "drain",
        "--reason",
        "bios update",
    ]);
    assert_eq!(h["kind"], "cordon");
    let out = c.gantry(&["node", "release", &node]);
    assert_eq!(out.status.code(), Some(2));
    assert!(err(&out).contains("--reason"), "{}", err(&out));
    let released = c.json(&["node", "release", &node, "--reason", "bios updated"]);
    assert_eq!(released[0]["release_reason"], "bios updated");
}
