//! The smaller holes of the tenant-isolation review, each tried as it was found: by a normal
//! user of another group (or the monitoring token), against a real `gantry up` cluster, next
//! to the legitimate use it resembles.

use std::path::Path;
use std::process::Output;

use serde_json::{json, Value};

use crate::common::Cluster;

/// Runs a client verb as the user whose token this is.
fn as_user(c: &Cluster, token: &str, args: &[&str]) -> Output {
    c.command(args)
        .env("GANTRY_URL", format!("http://127.0.0.1:{}", c.port))
        .env("GANTRY_TOKEN", token)
        .output()
        .expect("running gantry")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Like [`as_user`], for a verb that must succeed; its stdout.
fn ok_as(c: &Cluster, token: &str, args: &[&str]) -> String {
    let out = as_user(c, token, args);
    assert!(
        out.status.success(),
        "gantry {args:?} failed ({}):\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// One HTTP request with curl (a plain client, as Alertmanager or a script is); the body is
/// read from a file, so it may be larger than a command line takes. Returns (status, body).
fn curl(c: &Cluster, method: &str, path: &str, token: &str, body: Option<&Path>) -> (u16, String) {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["-H", "Content-Type: application/json"]);
    if let Some(b) = body {
        cmd.arg("--data-binary").arg(format!("@{}", b.display()));
    }
    let out = cmd
        .arg(format!("http://127.0.0.1:{}{path}", c.port))
        .output()
        .unwrap();
    let all = text(&out.stdout);
    let (body, code) = all.rsplit_once('\n').unwrap_or(("", &all));
    let code = code.trim().parse().unwrap_or_else(|_| {
        panic!(
            "curl {method} {path}: no status ({all}) {}",
            text(&out.stderr)
        )
    });
    (code, body.to_string())
}

fn curl_json(c: &Cluster, method: &str, path: &str, token: &str, body: &Value) -> (u16, Value) {
    let file = c.write(
        &format!("body-{}.json", std::process::id()),
        &body.to_string(),
    );
    let (code, text) = curl(c, method, path, token, Some(&file));
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (code, v)
}

fn job_file(image: &str, script: &str) -> String {
    format!(
        "version: v4\njobs:\n  main:\n    image: {{ uri: {image} }}\n    script: |\n      #!/bin/sh\n{}\n",
        script
            .lines()
            .map(|l| format!("      {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

// --- 7. request body limits --------------------------------------------------------------

/// A valid workflow file of about `bytes`, padded with a comment.
fn padded(bytes: usize) -> String {
    let head = job_file("docker://busybox:1", "echo padded");
    let line = format!("# {}\n", "x".repeat(1000));
    let mut s = head;
    while s.len() < bytes {
        s.push_str(&line);
    }
    s
}

#[test]
fn workflow_files_up_to_4_mib_are_taken_and_bigger_ones_get_a_clear_413() {
    let c = Cluster::up(1);
    let bob = c.user_token("bob", "chem");
    // 3 MiB: more than axum's default 2 MiB body limit, within the documented 4 MiB.
    let fine = c.write("fine.yaml", &padded(3 << 20));
    let id = ok_as(&c, &bob, &["workflow", "start", fine.to_str().unwrap()]);
    c.wait_status(id.trim(), "FINISHED");

    // 5.1 MiB through the CLI: said plainly, not "cannot reach the server".
    let big = c.write("big.yaml", &padded((5 << 20) + (100 << 10)));
    let out = as_user(&c, &bob, &["workflow", "start", big.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("the workflow file is 5.1 MiB; the server takes at most 4 MiB"),
        "{err}"
    );
    assert!(!err.contains("cannot reach"), "{err}");

    // Straight to the API: 413, a JSON error that names the limit.
    let body = json!({"spec": padded((5 << 20) + (100 << 10))});
    let (code, reply) = curl_json(&c, "POST", "/api/v1/workflows", &bob, &body);
    assert_eq!(code, 413, "{reply}");
    assert_eq!(reply["limit_bytes"], 4 << 20, "{reply}");
    assert_eq!(
        reply["error"],
        "the workflow file is 5.1 MiB; the server takes at most 4 MiB"
    );
    // A body too big even to read, on that route and on another.
    let huge = c.write(
        "huge.json",
        &json!({"spec": "x".repeat(9 << 20)}).to_string(),
    );
    let (code, reply) = curl(&c, "POST", "/api/v1/workflows", &bob, Some(&huge));
    assert_eq!(code, 413, "{reply}");
    let reply: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["limit_bytes"], (8 << 20) + (64 << 10), "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("8.1 MiB"),
        "{reply}"
    );
    let (code, reply) = curl(&c, "POST", "/api/v1/endpoints", &bob, Some(&huge));
    assert_eq!(code, 413, "{reply}");
    let reply: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["limit_bytes"], 2 << 20, "{reply}");
    assert_eq!(c.json(&["workflow", "list"]).as_array().unwrap().len(), 1);
}

// --- 8. workflow log past 8 MiB ----------------------------------------------------------

#[test]
fn workflow_log_reads_a_log_past_8_mib_to_its_end() {
    let c = Cluster::up(1);
    let bob = c.user_token("bob", "chem");
    // 9 MiB of numbered lines, then a last line: any page lost or repeated shows.
    let spec = job_file(
        "docker://busybox:1",
        "i=0\nwhile [ $i -lt 147456 ]; do printf '%063d\\n' $i; i=$((i+1)); done\necho THE-END",
    );
    let f = c.write("big-log.yaml", &spec);
    let id = ok_as(&c, &bob, &["workflow", "start", f.to_str().unwrap()]);
    let id = id.trim();
    c.wait_status(id, "FINISHED");
    let check = |out: &str| {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 147_457, "{} bytes", out.len());
        for (i, l) in lines[..147_456].iter().enumerate() {
            assert_eq!(*l, format!("{i:063}"), "line {i}");
        }
        assert_eq!(lines[147_456], "THE-END");
    };
    let out = ok_as(&c, &bob, &["workflow", "log", id, "main"]);
    assert!(out.len() > 8 << 20);
    check(&out);
    check(&ok_as(
        &c,
        &bob,
        &["workflow", "log", id, "main", "--follow"],
    ));
    // Someone of another group reads none of it.
    let mallory = c.user_token("mallory", "intruders");
    let out = as_user(&c, &mallory, &["workflow", "log", id, "main"]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
}

// --- 9. an endpoint name someone else holds --------------------------------------------

#[test]
fn an_endpoint_name_held_by_someone_you_cannot_see_answers_as_any_unusable_name() {
    let c = Cluster::up(1);
    let alice = c.user_token("alice", "physics");
    let carol = c.user_token("carol", "physics");
    let bob = c.user_token("bob", "chem");
    let create = |token: &str, name: &str, scope: &str| {
        curl_json(
            &c,
            "POST",
            "/api/v1/endpoints",
            token,
            &json!({"name": name, "scope": scope}),
        )
    };
    let (code, _) = create(&alice, "chat", "user");
    assert_eq!(code, 200);
    let (code, _) = create(&alice, "team", "group");
    assert_eq!(code, 200);

    // Bob, of another group: a name held by an endpoint he cannot see answers exactly as a
    // name nobody can use.
    let (taken_code, taken) = create(&bob, "chat", "user");
    let (bad_code, bad) = create(&bob, "Not_A_Name", "user");
    assert_eq!(taken_code, bad_code);
    assert_eq!(taken_code, 400, "{taken}");
    let keys = |v: &Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<Vec<String>>()
    };
    assert_eq!(keys(&taken), keys(&bad));
    assert_eq!(
        taken["error"].as_str().unwrap().replace("\"chat\"", "NAME"),
        bad["error"]
            .as_str()
            .unwrap()
            .replace("\"Not_A_Name\"", "NAME"),
    );
    assert!(!taken.to_string().contains("alice"), "{taken}");
    assert!(!taken.to_string().contains("exists"), "{taken}");
    // Carol shares alice's group, but `chat` is alice's alone: the same answer.
    let (code, same) = create(&carol, "chat", "user");
    assert_eq!((code, &same), (taken_code, &taken));
    // The legitimate use: a free name is bob's.
    let (code, mine) = create(&bob, "bobs-chat", "user");
    assert_eq!(code, 200, "{mine}");

    // Whoever may see the endpoint learns that it exists; its owner is told plainly.
    let (code, again) = create(&alice, "chat", "user");
    assert_eq!(code, 409, "{again}");
    assert_eq!(again["error"], "you already have an endpoint chat");
    let (code, group) = create(&carol, "team", "group");
    assert_eq!(code, 409, "{group}");
    assert!(
        group["error"].as_str().unwrap().contains("alice"),
        "{group}"
    );
    let out = ok_as(&c, &alice, &["endpoint", "list", "-o", "json"]);
    let names: Vec<String> = serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.contains(&"chat".to_string()) && !names.contains(&"bobs-chat".to_string()));
}
