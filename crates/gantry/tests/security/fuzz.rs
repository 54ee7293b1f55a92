//! What the fuzz targets of the API's request bodies (`fuzz/`, run by `make test`) showed,
//! tried by a normal user of another group against a real embedded cluster: their requests
//! go to the server over plain HTTP, as an attacker's would, not through the CLI (which
//! checks files itself before it sends them).

use serde_json::{json, Value};

use crate::common::Cluster;

/// POSTs a JSON body with a user's token; returns (status, body).
fn post(c: &Cluster, token: &str, path: &str, body: &Value) -> (u16, Value) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-X", "POST"])
        .args(["-H", "Content-Type: application/json"])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["--data-binary", "@-"])
        .arg(format!("http://127.0.0.1:{}/api/v1{path}", c.port))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(body.to_string().as_bytes())?;
            child.wait_with_output()
        })
        .expect("running curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("curl wrote the status");
    let body = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.into()));
    (code.trim().parse().expect("a status"), body)
}

/// Submits a workflow file over HTTP, with a name when given.
fn submit(c: &Cluster, token: &str, spec: &str, name: Option<&str>) -> (u16, Value) {
    post(
        c,
        token,
        "/workflows",
        &json!({ "spec": spec, "name": name }),
    )
}

/// Every workflow's name and owner, as an administrator lists them.
fn listed(c: &Cluster) -> Vec<(String, String)> {
    let list = c.json(&["workflow", "list"]);
    list.as_array()
        .expect("a list")
        .iter()
        .map(|w| {
            let s = |k: &str| w[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("owner"))
        })
        .collect()
}

fn arrays(ends: &[u32]) -> String {
    let mut spec = "version: v4\njobs:\n".to_string();
    for (i, end) in ends.iter().enumerate() {
        spec.push_str(&format!(
            "  part{i}:\n    image: {{uri: docker://busybox:1}}\n    command: [sh, -c, \"echo $FB_TASK_ID\"]\n    task-array: {{start: 1, end: {end}}}\n"
        ));
    }
    spec
}

/// Each task array was limited to a million tasks, but not their sum, and the server writes
/// every task of a workflow when it is submitted: a 4 MiB file of arrays could ask for
/// billions and take the server (everyone's) down.
#[test]
fn a_workflow_cannot_ask_for_more_tasks_than_the_server_stores() {
    let c = Cluster::up(1);
    let alice = c.user_token("alice", "ga");
    let mallory = c.user_token("mallory", "gb");

    let attack = json!({ "spec": arrays(&[999_999, 999_999, 999_999]), "name": "many" });
    let (code, body) = post(&c, &mallory, "/workflows", &attack);
    assert_eq!(code, 400, "{body}");
    let d = &body["diagnostics"][0];
    assert_eq!(d["line"], 7, "at the job that passes the limit: {body}");
    let message = d["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("jobs.part1.task-array:") && message.contains("at most 1000000"),
        "{message}"
    );
    let (code, checked) = post(&c, &mallory, "/workflows/validate", &attack);
    assert_eq!((code, &checked["valid"]), (200, &json!(false)), "{checked}");
    assert_eq!(checked["diagnostics"], body["diagnostics"]);
    assert!(listed(&c).is_empty(), "nothing is stored");

    // Several arrays that fit run, every task once.
    let (code, made) = submit(&c, &alice, &arrays(&[3, 2]), None);
    assert_eq!(code, 200, "{made}");
    let d = c.wait_status(made["id"].as_str().expect("an id"), "FINISHED");
    assert_eq!(d["tasks"].as_array().map(Vec::len), Some(5), "{d}");
}

/// A workflow's name is printed in the listings of everyone who may see it: its group and
/// the administrators. A name with terminal controls rewrote their screens.
#[test]
fn a_workflow_name_cannot_drive_another_users_terminal() {
    let c = Cluster::up(1);
    let mallory = c.user_token("mallory", "gb");
    let spec = "version: v4\njobs:\n  hello:\n    image: {uri: docker://busybox:1}\n    command: [echo, hi]\n";

    for evil in [
        "nightly\u{1b}[2J\u{1b}]0;root@prod\u{7}",
        "ok\r\nworkflow-00000000  admin  FINISHED",
    ] {
        let (code, body) = submit(&c, &mallory, spec, Some(evil));
        assert_eq!(code, 400, "{evil:?}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains("control characters"), "{error}");
    }
    assert!(listed(&c).is_empty(), "nothing is stored");
    let text = c.ok(&["workflow", "list"]);
    assert!(!text.contains('\u{1b}'), "{text:?}");

    // Names in any script, with spaces and symbols, are listed as given.
    let name = "nightly résumé ✓ (β)";
    let (code, made) = submit(&c, &mallory, spec, Some(name));
    assert_eq!(code, 200, "{made}");
    c.wait_status(made["id"].as_str().expect("an id"), "FINISHED");
    assert_eq!(listed(&c), [(name.to_string(), "mallory".to_string())]);
}
