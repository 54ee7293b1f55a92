//! End to end: the `gantry` binary runs workflows in runc containers on an embedded cluster
//! (`gantry up` with real agents over loopback), pulling busybox from a local registry.

mod common;

use common::Cluster;

fn attempts(task: &serde_json::Value) -> &Vec<serde_json::Value> {
    task["attempts"].as_array().unwrap()
}

#[test]
fn pipeline_runs_a_dag_with_a_task_array_a_shared_volume_files_and_env() {
    let c = Cluster::up(2);
    let example = common::repo_root().join("examples/pipeline.yaml");
    let out = c.gantry(&["workflow", "start", example.to_str().unwrap(), "--watch"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "watch exited {}: {stderr}\n{}",
        out.status,
        c.log()
    );
    let id = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap()
        .trim()
        .to_string();
    assert!(stderr.contains("FINISHED"), "{stderr}");

    let d = c.detail(&id);
    assert_eq!(d["status"], "FINISHED");
    assert_eq!(
        d["tasks"].as_array().unwrap().len(),
        6,
        "prepare, 4 squares, report"
    );
    for t in d["tasks"].as_array().unwrap() {
        assert_eq!(t["status"], "FINISHED", "{t:#}");
        assert_eq!(t["exit_code"], 0);
    }

    let prepare = c.ok(&["workflow", "log", &id, "prepare"]);
    assert_eq!(prepare.trim(), format!("preparing demo in workflow {id}"));
    let sq = c.ok(&["workflow", "log", &id, "square", "--task", "3"]);
    assert_eq!(sq.trim(), "task 3: 3 squared is 9");
    let report = c.ok(&["workflow", "log", &id, "report"]);
    assert!(
        report.contains("Hello from a file the workflow carries."),
        "{report}"
    );
    assert!(report.contains("sum of squares: 30"), "{report}");

    // A prefix of 8 characters is enough wherever an id is taken.
    let status = c.json(&["workflow", "status", &id[..8]]);
    assert_eq!(status["id"], id.as_str());

    // The ephemeral volume is removed once the workflow has ended.
    let vol = c.data_dir().join("storage/default/ephemeral").join(&id);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while vol.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} was not removed",
            vol.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

const FAILURES: &str = r#"version: v4
volumes:
  state: {}
jobs:
  fails:
    image: { uri: docker://busybox:1 }
    script: |
      #!/bin/sh
      echo "about to fail"
      echo "boom" >&2
      exit 3
  after-fails:
    image: { uri: docker://busybox:1 }
    command: [ "true" ]
    depends-on: [ { name: fails, status: FINISHED } ]
  slow:
    image: { uri: docker://busybox:1 }
    command: [ sleep, "600" ]
    policy:
      timeout:
        execute: 2s
  flaky:
    image: { uri: docker://busybox:1 }
    mounts:
      /state: { volume: state }
    policy:
      retry:
        attempts: 3
        on: [ failure ]
    script: |
      #!/bin/sh
      n=$(cat /state/count 2>/dev/null || echo 0)
      n=$((n + 1))
      echo $n > /state/count
      echo "attempt $n"
      [ "$n" -ge 3 ]
"#;

#[test]
fn failures_timeouts_and_retries_end_with_recorded_causes() {
    let c = Cluster::up(1);
    let file = c.write("failures.yaml", FAILURES);
    let out = c.gantry(&["workflow", "start", file.to_str().unwrap(), "--watch"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a FAILED workflow exits 1: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap()
        .trim()
        .to_string();
    let d = c.detail(&id);
    assert_eq!(d["status"], "FAILED");

    let fails = Cluster::task(&d, "fails");
    assert_eq!(fails["status"], "FAILED");
    assert_eq!(fails["exit_code"], 3);
    assert_eq!(fails["reason"], "exited with code 3");
    assert_eq!(attempts(fails)[0]["cause"], "EXIT");

    let after = Cluster::task(&d, "after-fails");
    assert_eq!(after["status"], "FAILED");
    assert_eq!(after["reason"], "dependency fails ended FAILED");
    assert!(
        attempts(after).is_empty(),
        "a step whose dependency failed never runs"
    );

    let slow = Cluster::task(&d, "slow");
    assert_eq!(slow["status"], "FAILED");
    assert_eq!(slow["reason"], "timeout");
    assert_eq!(attempts(slow)[0]["cause"], "TIMEOUT");

    let flaky = Cluster::task(&d, "flaky");
    assert_eq!(flaky["status"], "FINISHED", "{flaky:#}");
    let a = attempts(flaky);
    assert_eq!(a.len(), 3);
    assert_eq!(a[0]["status"], "FAILED");
    assert_eq!(a[1]["status"], "FAILED");
    assert_eq!(a[2]["status"], "FINISHED");
    assert_eq!(c.ok(&["workflow", "log", &id, "flaky"]).trim(), "attempt 3");
    assert_eq!(
        c.ok(&["workflow", "log", &id, "flaky", "--attempt", "1"])
            .trim(),
        "attempt 1"
    );

    // stdout and stderr are kept apart.
    let out = c.gantry(&["workflow", "log", &id, "fails"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "about to fail");
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "boom");

    let events = c.ok(&["workflow", "events", &id]);
    assert!(events.contains("slow: stopping on"), "{events}");
    assert!(events.contains("timeout"), "{events}");
}

#[test]
fn stop_ends_the_workflow_stopped_and_a_job_that_cannot_fit_says_why() {
    let c = Cluster::up(1);
    let file = c.write(
        "stop.yaml",
        r#"version: v4
jobs:
  sleeper:
    image: { uri: docker://busybox:1 }
    command: [ sleep, "600" ]
  huge:
    image: { uri: docker://busybox:1 }
    command: [ "true" ]
    resource:
      cpu: { cores: 512 }
  many:
    image: { uri: docker://busybox:1 }
    command: [ "true" ]
    resource:
      cpu: { cores: 512 }
    task-array: { start: 1, end: 150 }
"#,
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "sleeper RUNNING, huge and many explained", |d| {
        Cluster::task(d, "sleeper")["status"] == "RUNNING"
            && Cluster::task(d, "huge")["reason"].is_string()
            && Cluster::task(d, "many[1]")["reason"].is_string()
    });
    let huge = Cluster::task(&d, "huge");
    assert_eq!(huge["status"], "PENDING");
    let reason = huge["reason"].as_str().unwrap();
    assert!(
        reason.contains("never fits") && reason.contains("512"),
        "{reason}"
    );
    let describe = c.ok(&["workflow", "describe", &id]);
    assert!(describe.contains("never fits"), "{describe}");
    // The controller tries the first of a big array's waiting members; the others say what
    // they wait behind.
    let last = Cluster::task(&d, "many[150]")["reason"].as_str().unwrap();
    assert!(
        last.starts_with("waiting behind many[1]: ") && last.contains("never fits"),
        "{last}"
    );

    c.ok(&["workflow", "stop", &id]);
    let d = c.wait_status(&id, "STOPPED");
    assert_eq!(Cluster::task(&d, "sleeper")["status"], "STOPPED");
    assert_eq!(
        attempts(Cluster::task(&d, "sleeper"))[0]["cause"],
        "STOPPED"
    );
    assert_eq!(Cluster::task(&d, "huge")["status"], "STOPPED");
    // The controller reads only the first of a big array's waiting members; stopping ends them
    // all, each with its event.
    let many: Vec<&serde_json::Value> = d["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["job"] == "many")
        .collect();
    assert_eq!(many.len(), 150);
    assert!(many.iter().all(|t| t["status"] == "STOPPED"), "{many:#?}");
    let events = c.ok(&["workflow", "events", &id, "-o", "json"]);
    let events: Vec<serde_json::Value> = serde_json::from_str(&events).unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["task"] == "many[150]" && e["kind"] == "task.ended"),
        "{events:#?}"
    );
    // Stopping twice is refused: it already ended.
    let again = c.gantry(&["workflow", "stop", &id]);
    assert!(!again.status.success());
}

#[test]
fn kill_minus_nine_loses_nothing_and_running_jobs_continue() {
    let mut c = Cluster::up(1);
    let file = c.write(
        "long.yaml",
        r#"version: v4
jobs:
  counter:
    image: { uri: docker://busybox:1 }
    script: |
      #!/bin/sh
      for i in 1 2 3 4 5 6; do echo "line $i"; sleep 1; done
"#,
    );
    let id = c.start_workflow(&file);
    c.wait_for(&id, "counter RUNNING", |d| {
        Cluster::task(d, "counter")["status"] == "RUNNING"
    });
    std::thread::sleep(std::time::Duration::from_millis(1500));
    c.kill9();
    std::thread::sleep(std::time::Duration::from_secs(2));
    c.start();
    let d = c.wait_status(&id, "FINISHED");
    let counter = Cluster::task(&d, "counter");
    assert_eq!(
        attempts(counter).len(),
        1,
        "the same attempt continued: {counter:#}"
    );
    let log = c.ok(&["workflow", "log", &id, "counter"]);
    let want: Vec<String> = (1..=6).map(|i| format!("line {i}")).collect();
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        want,
        "every line exactly once"
    );
    let events = c.ok(&["workflow", "events", &id]);
    assert!(events.contains("submitted by admin"), "{events}");
}

/// A client verb whose reader has gone (`gantry ... | head`) ends by SIGPIPE, quietly, as Unix
/// filters do: no panic, no backtrace, no exit 101.
#[test]
fn a_closed_pipe_ends_a_client_verb_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ok.yaml");
    std::fs::write(
        &file,
        "version: v4\njobs:\n  a:\n    image: { uri: docker://busybox:1 }\n    command: [ \"true\" ]\n",
    )
    .unwrap();
    // A pipe whose read end is closed before the verb writes its one line.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(common::GANTRY)
        .args(["workflow", "validate", file.to_str().unwrap()])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc_sigpipe()),
        "{:?}: {stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// SIGPIPE's number on Linux (the tests link no libc).
fn libc_sigpipe() -> i32 {
    13
}

#[test]
fn validate_prints_every_problem_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "version: v4\njobs:\n  a:\n    image: { uri: docker://busybox:1 }\n    comand: [ls]\n    depends-on: [ { name: ghost, status: FINISHED } ]\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::GANTRY)
        .args(["workflow", "validate"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let name = bad.display().to_string();
    assert!(err.contains(&format!("{name}:5:5:")), "{err}");
    assert!(err.contains("command"), "did-you-mean: {err}");
    assert!(
        err.contains(&format!("{name}:6:")) && err.contains("ghost"),
        "{err}"
    );
}

fn all_tasks_ended(d: &serde_json::Value) -> bool {
    d["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["status"] == "FINISHED" || t["status"] == "FAILED")
}

#[test]
fn secrets_reach_the_registry_and_the_environment_but_never_the_store() {
    let c = Cluster::up(1);
    let reg = common::test_env("GANTRY_TEST_AUTH_REGISTRY");
    let user = common::test_env("GANTRY_TEST_AUTH_USER");
    let password = common::test_env("GANTRY_TEST_AUTH_PASSWORD");
    c.ok(&[
        "secret",
        "set",
        "regcred",
        "--value",
        &format!("{user}:{password}"),
    ]);
    let mut set = c.command(&["secret", "set", "api-token"]);
    set.stdin(std::process::Stdio::piped());
    let mut child = set.spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"hunter2-not-in-the-db\n").unwrap();
    assert!(child.wait().unwrap().success());
    let listed = c.ok(&["secret", "list"]);
    assert!(
        listed.contains("secret://user/api-token") && !listed.contains("hunter2"),
        "{listed}"
    );

    let file = c.write(
        "secrets.yaml",
        &format!(
            r#"version: v4
jobs:
  private:
    image:
      uri: docker://{reg}/private/busybox:1
      secret: secret://user/regcred
    env:
      - TOKEN=secret://user/api-token
    script: |
      #!/bin/sh
      echo "token=$TOKEN"
  no-credential:
    image:
      uri: docker://{reg}/private/busybox:1
    command: [ "true" ]
"#
        ),
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "both tasks ended", all_tasks_ended);
    assert_eq!(Cluster::task(&d, "private")["status"], "FINISHED", "{d:#}");
    assert_eq!(
        c.ok(&["workflow", "log", &id, "private"]).trim(),
        "token=hunter2-not-in-the-db"
    );
    let denied = Cluster::task(&d, "no-credential");
    assert_eq!(denied["status"], "FAILED");
    let why = attempts(denied)[0]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        why.contains("401") || why.contains("unauthorized") || why.contains("auth"),
        "{why}"
    );

    // A workflow naming a secret that does not exist is refused at submit.
    let missing = c.write(
        "missing.yaml",
        "version: v4\njobs:\n  a:\n    image: { uri: docker://busybox:1 }\n    env: [ X=secret://user/nope ]\n    command: [ \"true\" ]\n",
    );
    let out = c.gantry(&["workflow", "start", missing.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("secret://user/nope does not exist"));

    // Sealed at rest: neither value appears anywhere in the database files.
    for f in ["gantry.db", "gantry.db-wal"] {
        let bytes = std::fs::read(c.data_dir().join("server").join(f)).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains("hunter2-not-in-the-db") && !text.contains(password),
            "{f} holds a plaintext secret"
        );
    }
}

#[test]
fn typed_secrets_are_checked_at_set_listed_by_type_and_image_ones_reach_only_trusted_registries() {
    let c = Cluster::up(1);
    let reg = common::test_env("GANTRY_TEST_AUTH_REGISTRY");
    let user = common::test_env("GANTRY_TEST_AUTH_USER");
    let password = common::test_env("GANTRY_TEST_AUTH_PASSWORD");
    let host = reg.split('/').next().unwrap();

    // A missing or misspelt field is named, and nothing is stored.
    for (value, field) in [
        (
            r#"{"accessKeyId":"A","secretAccessKey":"S","endpoint":"http://127.0.0.1:1"}"#,
            "region",
        ),
        (
            r#"{"accessKeyId":"A","secretAccessKey":"S","region":"r","endpoint":"http://x","regoin":"r"}"#,
            "regoin",
        ),
    ] {
        let out = c.gantry(&["secret", "set", "bad-s3", "--type", "s3", "--value", value]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(field), "{err}");
    }
    let out = c.gantry(&["secret", "set", "x", "--type", "ssh", "--value", "v"]);
    assert!(!out.status.success());

    // A typed value from standard input.
    let mut set = c.command(&["secret", "set", "store", "--type", "s3"]);
    set.stdin(std::process::Stdio::piped());
    let mut child = set.spawn().unwrap();
    std::io::Write::write_all(
        child.stdin.as_mut().unwrap(),
        br#"{"accessKeyId":"AKIA-not-listed","secretAccessKey":"s3-key-not-listed","region":"us-east-1","endpoint":"http://127.0.0.1:9000"}"#,
    )
    .unwrap();
    assert!(child.wait().unwrap().success());
    let trusted = format!(
        r#"{{"username":"{user}","password":"{password}","trustedDomains":["{}"]}}"#,
        host.split(':').next().unwrap()
    );
    c.ok(&[
        "secret", "set", "reg", "--type", "image", "--value", &trusted,
    ]);
    let elsewhere = format!(
        r#"{{"username":"{user}","password":"{password}","trustedDomains":["registry.example.org"]}}"#
    );
    c.ok(&[
        "secret",
        "set",
        "reg-elsewhere",
        "--type",
        "image",
        "--value",
        &elsewhere,
    ]);

    let listed = c.json(&["secret", "list"]);
    let text = listed.to_string();
    assert!(
        !text.contains("not-listed") && !text.contains(password),
        "{text}"
    );
    let kinds: Vec<(String, String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["type"].as_str().unwrap().to_string(),
                s["scope"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(!kinds.iter().any(|k| k.0 == "bad-s3"), "{kinds:?}");
    for want in [
        ("store", "s3"),
        ("reg", "image"),
        ("reg-elsewhere", "image"),
    ] {
        assert!(
            kinds.contains(&(want.0.into(), want.1.into(), "user".into())),
            "{want:?} in {kinds:?}"
        );
    }
    let table = c.ok(&["secret", "list"]);
    assert!(table.contains("TYPE") && table.contains("s3"), "{table}");

    // An image secret is registry auth, sent only to the hosts it trusts.
    let file = c.write(
        "typed.yaml",
        &format!(
            r#"version: v4
jobs:
  trusted:
    image:
      uri: docker://{reg}/private/busybox:1
      secret: secret://user/reg
    command: [ "true" ]
  untrusted:
    image:
      uri: docker://{reg}/private/busybox:1
      secret: secret://user/reg-elsewhere
    command: [ "true" ]
"#
        ),
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "both tasks ended", all_tasks_ended);
    assert_eq!(Cluster::task(&d, "trusted")["status"], "FINISHED", "{d:#}");
    let untrusted = Cluster::task(&d, "untrusted");
    assert_eq!(untrusted["status"], "FAILED", "{d:#}");
    let why = attempts(untrusted)[0]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("trusted only for registry.example.org"),
        "{why}"
    );

    // An s3 secret is not registry auth: refused at submit.
    let wrong = c.write(
        "wrong.yaml",
        &format!(
            "version: v4\njobs:\n  a:\n    image: {{ uri: docker://{reg}/private/busybox:1, secret: secret://user/store }}\n    command: [ \"true\" ]\n"
        ),
    );
    let out = c.gantry(&["workflow", "start", wrong.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("secret://user/store is an s3 secret"), "{err}");
}

#[test]
fn a_silent_agent_loses_its_node_and_its_steps_fail_with_the_reason() {
    let mut s = common::Split::start("3s");
    let c = &s.cluster;
    let file = c.write(
        "sleep.yaml",
        "version: v4\njobs:\n  sleeper:\n    image: { uri: docker://busybox:1 }\n    command: [ sleep, \"600\" ]\n",
    );
    let id = c.start_workflow(&file);
    c.wait_for(&id, "sleeper RUNNING", |d| {
        Cluster::task(d, "sleeper")["status"] == "RUNNING"
    });

    s.kill_agent();
    let c = &s.cluster;
    let d = c.wait_status(&id, "FAILED");
    let sleeper = Cluster::task(&d, "sleeper");
    let node = s.agent_name.clone();
    assert_eq!(sleeper["reason"], format!("node {node} was lost"));
    assert_eq!(attempts(sleeper)[0]["cause"], "NODE_LOST");
    let shown = c.json(&["node", "show", &node]);
    assert_eq!(shown["state"], "DOWN");
    let events = c.ok(&["workflow", "events", &id]);
    assert!(events.contains("no heartbeat for 3s"), "{events}");

    // The agent comes back: the node is READY again, and the container the server gave up on
    // (it kept running under its shim) is stopped.
    s.start_agent();
    s.wait_no_containers(&node, "the orphaned container still runs");
}

#[test]
fn a_workflow_stopped_while_its_agent_is_away_stops_when_the_agent_returns() {
    // The stop is sent while no connection of the node's is there to take it; the server
    // sends it again when the agent reconnects, before the node could be declared lost.
    let mut s = common::Split::start("60s");
    let c = &s.cluster;
    let file = c.write(
        "sleep.yaml",
        "version: v4\njobs:\n  sleeper:\n    image: { uri: docker://busybox:1 }\n    command: [ sleep, \"600\" ]\n",
    );
    let id = c.start_workflow(&file);
    c.wait_for(&id, "sleeper RUNNING", |d| {
        Cluster::task(d, "sleeper")["status"] == "RUNNING"
    });
    s.kill_agent();
    s.cluster.ok(&["workflow", "stop", &id]);
    s.start_agent();
    let d = s.cluster.wait_status(&id, "STOPPED");
    assert_eq!(
        attempts(Cluster::task(&d, "sleeper"))[0]["cause"],
        "STOPPED"
    );
}

#[test]
fn task_array_concurrency_is_honoured_and_logs_follow_to_the_end() {
    let c = Cluster::up(1);
    let file = c.write(
        "array.yaml",
        r#"version: v4
jobs:
  member:
    image: { uri: docker://busybox:1 }
    task-array: { start: 1, end: 6, concurrency: 2 }
    command: [ sleep, "1" ]
  talker:
    image: { uri: docker://busybox:1 }
    script: |
      #!/bin/sh
      for i in 1 2 3; do echo "said $i"; sleep 1; done
"#,
    );
    let id = c.start_workflow(&file);
    let follower = c
        .command(&["workflow", "log", &id, "talker", "--follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let d = c.wait_status(&id, "FINISHED");
    let out = follower.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "said 1\nsaid 2\nsaid 3\n"
    );

    // From the attempts' own times: never more than 2 members in flight at once.
    let parse = |v: &serde_json::Value| {
        time::OffsetDateTime::parse(
            v.as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    let spans: Vec<_> = d["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["job"] == "member")
        .map(|t| {
            let a = &attempts(t)[0];
            (parse(&a["created_at"]), parse(&a["ended_at"]))
        })
        .collect();
    assert_eq!(spans.len(), 6);
    for (start, _) in &spans {
        let overlapping = spans
            .iter()
            .filter(|(s, e)| s <= start && start < e)
            .count();
        assert!(overlapping <= 2, "{overlapping} members in flight at once");
    }
}
