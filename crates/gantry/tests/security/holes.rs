//! The smaller holes of the tenant-isolation review, each tried as it was found: by a normal
//! user of another group (or the monitoring token), against a real `gantry up` cluster, next
//! to the legitimate use it resembles.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{test_env, Cluster};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Like [`Cluster::as_user`], for a verb that must succeed; its stdout.
fn ok_as(c: &Cluster, token: &str, args: &[&str]) -> String {
    let out = c.as_user(token, args);
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

fn wait_until(what: &str, mut pred: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !pred() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
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

/// The one task of a one-job workflow.
fn main_task(d: &Value) -> &Value {
    Cluster::task(d, "main")
}

// --- 1. oci:// layouts only from the roots an administrator allows ---------------------

#[test]
fn oci_layouts_run_only_from_allowed_roots_and_refusals_say_nothing_of_what_exists() {
    let roots = tempfile::Builder::new()
        .prefix("gantry-oci-")
        .tempdir()
        .unwrap();
    let root = roots.path().join("layouts");
    let outside = roots.path().join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let layout = test_env("GANTRY_TEST_OCI_BUSYBOX");
    for to in [root.join("busybox"), outside.join("busybox")] {
        let st = std::process::Command::new("cp")
            .args(["-a", layout])
            .arg(&to)
            .status()
            .unwrap();
        assert!(st.success());
    }
    // A link from inside the root to a real layout outside it.
    std::os::unix::fs::symlink(outside.join("busybox"), root.join("linked")).unwrap();
    let c = Cluster::up_with(1, vec!["--oci-root".into(), root.display().to_string()]);
    let mallory = c.user_token("mallory", "intruders");
    let bob = c.user_token("bob", "chem");

    // The legitimate use: a layout under the allowed root runs.
    let good = c.write(
        "good.yaml",
        &job_file(
            &format!("oci://{}/busybox:1", root.display()),
            "echo from-a-layout",
        ),
    );
    let id = c.start_as(&bob, &good);
    c.wait_status(&id, "FINISHED");
    let log = ok_as(&c, &bob, &["workflow", "log", &id, "main"]);
    assert_eq!(log.trim(), "from-a-layout");

    // Outside every root, or climbing out of one, or a build base there: refused at submit,
    // by name alone, before anything on the node is opened.
    let host_paths = [
        "oci:///etc".to_string(),
        format!("oci://{}/busybox:1", outside.display()),
        format!("oci://{}/../outside/busybox:1", root.display()),
    ];
    for uri in &host_paths {
        let f = c.write("bad.yaml", &job_file(uri, "true"));
        let out = c.as_user(&mallory, &["workflow", "start", f.to_str().unwrap()]);
        assert!(!out.status.success(), "{uri} was accepted");
        let err = text(&out.stderr);
        assert!(
            err.contains("read only from directories an administrator allows")
                && err.contains(&format!("jobs.main.image.uri: {uri}")),
            "{uri}: {err}"
        );
    }
    let build = "version: v4\nimages:\n  x:\n    from: oci:///etc\n    run: [\"true\"]\njobs:\n  main:\n    image: { build: x }\n    command: [\"true\"]\n";
    let f = c.write("build.yaml", build);
    let out = c.as_user(&mallory, &["workflow", "start", f.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("images.x.from: oci:///etc"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        c.json(&["workflow", "list"]).as_array().unwrap().len() == 1,
        "nothing was stored"
    );

    // A build base beneath the root by name but reached through a planted link out of it:
    // refused (at submit or on the node), never built from what lies outside.
    let linked = format!("oci://{}/linked:1", root.display());
    let build = format!("version: v4\nimages:\n  x:\n    from: {linked}\n    run: [\"true\"]\njobs:\n  main:\n    image: {{ build: x }}\n    command: [\"true\"]\n");
    let f = c.write("linked-build.yaml", &build);
    let out = c.as_user(&mallory, &["workflow", "start", f.to_str().unwrap()]);
    if out.status.success() {
        let id = text(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let d = c.wait_status(&id, "FAILED");
        let reason = Cluster::task(&d, "build:x")["reason"].to_string();
        assert!(reason.contains("is not available on this node"), "{reason}");
    } else {
        let err = text(&out.stderr);
        assert!(err.contains("is not available on this node"), "{err}");
    }

    // Beneath the root by name but not a layout there (missing, or a symlink out of it): the
    // node refuses, and the two refusals read the same, but for the path the user gave.
    let mut reasons = vec![];
    for name in ["missing", "linked"] {
        let uri = format!("oci://{}/{name}", root.display());
        let f = c.write(&format!("{name}.yaml"), &job_file(&uri, "true"));
        let id = c.start_as(&mallory, &f);
        let d = c.wait_status(&id, "FAILED");
        let reason = main_task(&d)["reason"].as_str().unwrap().to_string();
        assert!(
            reason.contains("is not available on this node"),
            "{name}: {reason}"
        );
        reasons.push(reason.replace(&format!("{}/{name}", root.display()), "PATH"));
    }
    assert_eq!(
        reasons[0], reasons[1],
        "a refusal must not tell what exists"
    );
}

// --- 2. what the server and agents write is not world-readable --------------------------

fn assert_private(p: &Path, want: u32) {
    assert_eq!(mode(p), want, "{} is mode {:o}", p.display(), mode(p));
}

/// Every server file that holds data or secrets, and each log file of `attempt`.
fn server_files(c: &Cluster) -> Vec<(PathBuf, u32)> {
    let server = c.data_dir().join("server");
    let mut out = vec![(server.clone(), 0o700)];
    for f in ["gantry.db", "gantry.db-wal", "gantry.db-shm", "secret.key"] {
        out.push((server.join(f), 0o600));
    }
    out.push((server.join("logs"), 0o700));
    out.push((server.join("objects"), 0o700));
    for e in std::fs::read_dir(server.join("logs")).unwrap().flatten() {
        out.push((e.path(), 0o700));
        for f in std::fs::read_dir(e.path()).unwrap().flatten() {
            out.push((f.path(), 0o600));
        }
    }
    out.push((c.data_dir().join("agent.token"), 0o600));
    out.push((c.data_dir().join("context.toml"), 0o600));
    out
}

#[test]
fn the_store_logs_and_secrets_are_private_and_old_modes_are_fixed_at_start() {
    let mut c = Cluster::up(1);
    let bob = c.user_token("bob", "chem");
    let mallory = c.user_token("mallory", "intruders");
    let mut set = c
        .command(&["secret", "set", "api-key"])
        .env("GANTRY_URL", format!("http://127.0.0.1:{}", c.port))
        .env("GANTRY_TOKEN", &bob)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        set.stdin
            .take()
            .unwrap()
            .write_all(b"s3cret-value")
            .unwrap();
    }
    assert!(set.wait().unwrap().success());
    // A job whose environment carries a secret, still running so its bundle can be looked at;
    // the file put into it is read by the container's root, an unprivileged host uid.
    let spec = "version: v4\njobs:\n  main:\n    image: { uri: docker://busybox:1 }\n    env: [ KEY=secret://user/api-key ]\n    files:\n      /etc/app.conf: \"app-config\"\n    script: |\n      #!/bin/sh\n      cat /etc/app.conf\n      echo private-output\n      sleep 600\n";
    let f = c.write("secret.yaml", spec);
    let id = c.start_as(&bob, &f);
    c.wait_for(&id, "main running", |d| main_task(d)["status"] == "RUNNING");
    wait_until("its output reaches the server", || {
        ok_as(&c, &bob, &["workflow", "log", &id, "main"]).contains("private-output")
    });
    let log = ok_as(&c, &bob, &["workflow", "log", &id, "main"]);
    assert!(log.starts_with("app-config"), "{log}");
    // Its owner reads it through the API; someone of another group does not even see it.
    let out = c.as_user(&mallory, &["workflow", "log", &id, "main"]);
    assert!(!out.status.success());
    assert!(!text(&out.stdout).contains("private-output"));

    let d = c.detail(&id);
    let attempt = main_task(&d)["attempts"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let node = main_task(&d)["node"].as_str().unwrap().to_string();
    let state = c.data_dir().join("agents").join(&node);
    let bundle = state.join("runtime/containers").join(&attempt);
    let config = std::fs::read_to_string(bundle.join("config.json")).unwrap();
    assert!(
        config.contains("KEY=s3cret-value"),
        "the bundle carries the secret's value"
    );
    for (p, m) in [
        // The files a job is given may carry its secrets too.
        (bundle.join("files"), 0o700),
        (bundle.join("config.json"), 0o600),
        (bundle.join("meta.json"), 0o600),
        (bundle.join("stdout"), 0o600),
        (bundle.join("stderr"), 0o600),
    ] {
        assert_private(&p, m);
    }
    // Directories on the way to bundles: others may pass (image builds' and jobs' user
    // namespaces must), never list.
    for d in [
        state.clone(),
        state.join("runtime"),
        state.join("runtime/containers"),
        bundle.clone(),
    ] {
        assert_eq!(
            mode(&d) & 0o066,
            0,
            "{} is mode {:o}",
            d.display(),
            mode(&d)
        );
    }
    assert_eq!(mode(&state.join("images/blobs")) & 0o077, 0);
    for (p, m) in server_files(&c) {
        assert_private(&p, m);
    }
    ok_as(&c, &bob, &["workflow", "stop", &id]);
    c.wait_status(&id, "STOPPED");

    // Files an older version left world-readable are made private by the next start (killed,
    // so that the store's -wal and -shm are left behind too).
    c.kill9();
    let loose: Vec<(PathBuf, u32)> = server_files(&c);
    for (p, m) in &loose {
        let wide = if *m == 0o700 { 0o755 } else { 0o644 };
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(wide)).unwrap();
    }
    c.start();
    for (p, m) in server_files(&c) {
        assert_private(&p, m);
    }
    let log = ok_as(&c, &bob, &["workflow", "log", &id, "main"]);
    assert!(log.contains("private-output"), "{log}");
}

// --- 3, 4, 5. the Alertmanager webhook -------------------------------------------------

/// A one-node cluster, Alertmanager's token for it, and the node's name.
fn with_monitoring() -> (Cluster, String, String) {
    let c = Cluster::up(1);
    let token = c.json(&["admin", "user", "create", "alertmanager", "--monitoring"])["token"]
        .as_str()
        .unwrap()
        .to_string();
    let node = c.json(&["node", "list"])[0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    (c, token, node)
}

fn alert(status: &str, node: &str, name: &str, starts: &str, fingerprint: &str) -> Value {
    json!({
        "status": status,
        "labels": {"alertname": name, "node": node, "gantry_hold": "cordon", "gantry_release": "auto"},
        "annotations": {"summary": format!("{name} on {node}")},
        "startsAt": starts,
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": fingerprint,
    })
}

fn hook(c: &Cluster, token: &str, alerts: Vec<Value>) -> (u16, Value) {
    curl_json(
        c,
        "POST",
        "/api/v1/monitoring/alertmanager",
        token,
        &json!({"version": "4", "status": "firing", "receiver": "gantry", "alerts": alerts}),
    )
}

fn node_state(c: &Cluster, node: &str) -> String {
    c.json(&["node", "show", node])["state"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn an_alert_without_a_real_start_is_refused_and_does_not_poison_its_fingerprint() {
    let (c, token, node) = with_monitoring();
    const FP: &str = "0123456789abcdef";
    const T1: &str = "2026-11-30T10:00:00Z";

    for bad in [
        "",
        "0001-01-01T00:00:00Z",
        "1970-01-01T00:00:00Z",
        "yesterday",
    ] {
        let (code, body) = hook(
            &c,
            &token,
            vec![alert("firing", &node, "DiskFull", bad, FP)],
        );
        assert_eq!(code, 400, "startsAt {bad:?}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains("startsAt")
                || body["error"].as_str().unwrap().contains("no startsAt"),
            "{body}"
        );
        assert_eq!(
            node_state(&c, &node),
            "READY",
            "startsAt {bad:?} held the node"
        );
    }
    let (code, body) = hook(
        &c,
        &token,
        vec![alert("resolved", &node, "DiskFull", "", FP)],
    );
    assert_eq!(code, 400, "{body}");
    // A fingerprint that is no fingerprint is refused the same way.
    let (code, body) = hook(
        &c,
        &token,
        vec![alert("firing", &node, "DiskFull", T1, &"f".repeat(5000))],
    );
    assert_eq!(code, 400, "{body}");

    // In a post with a good entry, the bad one is reported and the good one acted on.
    let (code, body) = hook(
        &c,
        &token,
        vec![
            alert("firing", &node, "DiskFull", "", FP),
            alert("firing", &node, "DiskFull", T1, FP),
        ],
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["placed"], 1, "{body}");
    assert_eq!(body["refused"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(node_state(&c, &node), "CORDONED");
    let holds = c.json(&["node", "show", &node])["holds"].clone();
    assert_eq!(holds.as_array().unwrap().len(), 1, "{holds}");
    assert_eq!(holds[0]["fingerprint"], FP);

    // That fingerprint's episodes still work: its resolve releases the node.
    let (code, body) = hook(
        &c,
        &token,
        vec![alert("resolved", &node, "DiskFull", T1, FP)],
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["released"], 1, "{body}");
    assert_eq!(node_state(&c, &node), "READY");
}

/// One answer of a query to the server's store, read as its files are (sqlite3).
fn sql(c: &Cluster, query: &str) -> String {
    let out = std::process::Command::new("sqlite3")
        .arg(c.data_dir().join("server/gantry.db"))
        .arg(query)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_string()
}

fn count_events(c: &Cluster, kind: &str) -> usize {
    sql(
        c,
        &format!("SELECT count(*) FROM events WHERE kind = '{kind}'"),
    )
    .parse()
    .unwrap()
}

#[test]
fn unknown_node_alerts_are_recorded_once_per_episode_and_summaries_are_capped() {
    let (c, token, node) = with_monitoring();
    const T1: &str = "2026-11-30T10:00:00Z";

    // The report's post: one alert about an unknown node, repeated, sent twice.
    let one = alert("firing", "no-such-node", "Ghost", T1, "00000000deadbeef");
    let (code, body) = hook(&c, &token, vec![one.clone(); 1001]);
    assert_eq!(code, 200, "{body}");
    let (code, _) = hook(&c, &token, vec![one.clone(); 1001]);
    assert_eq!(code, 200);
    assert_eq!(count_events(&c, "alert.unknown_node"), 1);
    // Its resolve, and a next episode, are new: one event each.
    let mut resolved = one.clone();
    resolved["status"] = json!("resolved");
    let mut next = one.clone();
    next["startsAt"] = json!("2026-11-30T11:00:00Z");
    hook(
        &c,
        &token,
        vec![resolved.clone(), next.clone(), resolved, next],
    );
    assert_eq!(count_events(&c, "alert.unknown_node"), 3);

    // A 1.5 MB summary is kept as a hold's reason cut to the documented size, marked.
    let mut big = alert("firing", &node, "Loud", T1, "1111222233334444");
    let summary = "ß".repeat(750_000);
    big["annotations"]["summary"] = json!(summary);
    let (code, body) = hook(&c, &token, vec![big]);
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["placed"], 1);
    let shown = c.json(&["node", "show", &node]);
    let reason = shown["holds"][0]["reason"].as_str().unwrap();
    assert!(reason.len() <= 4096, "{}", reason.len());
    assert!(reason.starts_with("ßß"));
    assert!(
        reason.ends_with("… (truncated, 1500000 bytes)"),
        "{}",
        &reason[reason.len() - 40..]
    );
    // An administrator's release reason likewise.
    let long = "r".repeat(100_000);
    c.ok(&["node", "release", &node, "--reason", &long]);
    let shown = c.json(&["node", "show", &node]);
    let released = shown["hold_history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["state"] == "RELEASED")
        .unwrap()
        .clone();
    let why = released["release_reason"].as_str().unwrap();
    assert!(why.len() <= 4096 && why.ends_with("… (truncated, 100000 bytes)"));
    // And no event message is longer.
    let longest: usize = sql(&c, "SELECT max(length(CAST(message AS BLOB))) FROM events")
        .parse()
        .unwrap();
    assert!(longest <= 4096, "an event message of {longest} bytes");
}

// --- 6. retries: capped, and spaced by a backoff ----------------------------------------

#[test]
fn retries_are_capped_and_each_attempt_waits_out_a_growing_backoff() {
    let c = Cluster::up(1);
    let bob = c.user_token("bob", "chem");
    let retry = |attempts: &str| {
        format!(
            "version: v4\njobs:\n  main:\n    image: {{ uri: docker://busybox:1 }}\n    command: [sh, -c, \"exit 3\"]\n    policy:\n      retry: {{ attempts: {attempts}, on: [failure] }}\n"
        )
    };
    // Past the file format's hard maximum: refused with its position, locally and by the server.
    let huge = c.write("huge.yaml", &retry("4294967295"));
    let out = c.as_user(&bob, &["workflow", "validate", huge.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("huge.yaml:7:")
            && text(&out.stderr).contains(
                "jobs.main.policy.retry.attempts: 4294967295 is out of range; it must be between 1 and 100"
            ),
        "{}",
        text(&out.stderr)
    );
    let (code, body) = curl_json(
        &c,
        "POST",
        "/api/v1/workflows",
        &bob,
        &json!({"spec": retry("4294967295")}),
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["diagnostics"][0]["line"], 7, "{body}");

    // An administrator's lower cap is applied at submit, saying so.
    c.ok(&["admin", "settings", "set", "retry.max_attempts=3"]);
    let five = c.write("five.yaml", &retry("5"));
    let out = c.as_user(&bob, &["workflow", "start", five.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("at most 3 times")
            && text(&out.stderr).contains("jobs.main.policy.retry.attempts: 5"),
        "{}",
        text(&out.stderr)
    );

    // Within the cap: three attempts, each starting only after the one before ended and its
    // backoff (1 s, then 2 s) passed; the wait is the task's reason meanwhile.
    let three = c.write("three.yaml", &retry("3"));
    let id = c.start_as(&bob, &three);
    let d = c.wait_status(&id, "FAILED");
    let attempts = main_task(&d)["attempts"].as_array().unwrap().clone();
    assert_eq!(attempts.len(), 3, "{d:#}");
    let at = |v: &Value| {
        time::OffsetDateTime::parse(
            v.as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    for (n, pair) in attempts.windows(2).enumerate() {
        let ended = at(&pair[0]["ended_at"]);
        let next = at(&pair[1]["created_at"]);
        let backoff = time::Duration::seconds(1 << n);
        assert!(
            next - ended >= backoff,
            "attempt {} started {} after attempt {} ended; the backoff is {backoff}",
            n + 2,
            next - ended,
            n + 1
        );
    }
    let events = c.json(&["workflow", "events", id.trim()]);
    let messages: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    for want in [
        "attempt 2 of 3 starts after a 1s backoff",
        "attempt 3 of 3 starts after a 2s backoff",
    ] {
        assert!(
            messages.iter().any(|m| m.contains(want)),
            "no {want:?} in {messages:#?}"
        );
    }
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
    let id = c.start_as(&bob, &fine);
    c.wait_status(&id, "FINISHED");

    // 5.1 MiB through the CLI: said plainly, not "cannot reach the server".
    let big = c.write("big.yaml", &padded((5 << 20) + (100 << 10)));
    let out = c.as_user(&bob, &["workflow", "start", big.to_str().unwrap()]);
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
    let id = c.start_as(&bob, &f);
    c.wait_status(&id, "FINISHED");
    let check = |out: &str| {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 147_457, "{} bytes", out.len());
        for (i, l) in lines[..147_456].iter().enumerate() {
            assert_eq!(*l, format!("{i:063}"), "line {i}");
        }
        assert_eq!(lines[147_456], "THE-END");
    };
    let out = ok_as(&c, &bob, &["workflow", "log", &id, "main"]);
    assert!(out.len() > 8 << 20);
    check(&out);
    check(&ok_as(
        &c,
        &bob,
        &["workflow", "log", &id, "main", "--follow"],
    ));
    // Someone of another group reads none of it.
    let mallory = c.user_token("mallory", "intruders");
    let out = c.as_user(&mallory, &["workflow", "log", &id, "main"]);
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
