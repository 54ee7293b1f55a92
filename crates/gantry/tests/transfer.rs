//! Data ingress into volumes, end to end: a real `gantry up` cluster whose agent fetches over
//! real HTTP from a server in this test (`common::http`), and jobs in runc that read what
//! landed in the volume.

mod common;

use common::http::{Route, Server};
use common::Cluster;
use std::time::Duration;

fn attempts(task: &serde_json::Value) -> &Vec<serde_json::Value> {
    task["attempts"].as_array().unwrap()
}

fn reason(task: &serde_json::Value) -> String {
    attempts(task)
        .last()
        .and_then(|a| a["reason"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The workflow's events of `kind` for `step`, as `workflow events -o json` lists them.
fn events(c: &Cluster, id: &str, step: &str, kind: &str) -> Vec<String> {
    let all = c.ok(&["workflow", "events", id, "-o", "json"]);
    let all: Vec<serde_json::Value> = serde_json::from_str(&all).unwrap();
    all.iter()
        .filter(|e| e["task"] == step && e["kind"] == kind)
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A workflow of one ingress into `data` (`source` is the source's fields) and a job `read`
/// that mounts it and runs `command`.
fn one_ingress(
    c: &Cluster,
    name: &str,
    source: &str,
    dest: &str,
    policy: &str,
    command: &str,
) -> std::path::PathBuf {
    c.write(
        &format!("{name}.yaml"),
        &format!(
            r#"version: v4
volumes:
  data:
    ingress:
      - source: {{ {source} }}
        destination: {{ uri: "{dest}" }}
{policy}
jobs:
  read:
    image: {{ uri: docker://busybox:1 }}
    mounts: {{ /data: {{ volume: data }} }}
    command: {command}
"#
        ),
    )
}

#[test]
fn ingress_stages_http_and_file_data_before_the_jobs_that_mount_the_volume() {
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let srv = Server::start(vec![
        ("/data.txt", Route::Body(b"hello from http\n".to_vec())),
        ("/big.bin", Route::Body(big)),
    ]);
    let c = Cluster::up(1);
    let file = c.write(
        "ingress.yaml",
        &format!(
            r#"version: v4
files:
  conf: "k=v\n"
volumes:
  data:
    ingress:
      - source: {{ uri: "{}" }}
        destination: {{ uri: "file://in/data.txt" }}
      - source: {{ uri: "file://conf" }}
        destination: {{ uri: "file:///conf.ini" }}
      - source: {{ uri: "{}" }}
        destination: {{ uri: "file://big.bin" }}
jobs:
  compute:
    image: {{ uri: docker://busybox:1 }}
    mounts: {{ /data: {{ volume: data }} }}
    script: |
      #!/bin/sh
      cat /data/in/data.txt /data/conf.ini
      wc -c < /data/big.bin
"#,
            srv.url("/data.txt"),
            srv.url("/big.bin"),
        ),
    );
    let id = c.start_workflow(&file);
    let d = c.wait_status(&id, "FINISHED");
    let ingress = Cluster::task(&d, "ingress:data");
    assert_eq!(ingress["status"], "FINISHED", "{d:#}");
    let compute = Cluster::task(&d, "compute");
    // The job started only after the transfer had ended.
    let at = |v: &serde_json::Value| {
        time::OffsetDateTime::parse(
            v.as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    let ended = at(&attempts(ingress)[0]["ended_at"]);
    let started = at(&attempts(compute)[0]["created_at"]);
    assert!(
        started >= ended,
        "compute started {started}, ingress ended {ended}"
    );
    assert_eq!(
        c.ok(&["workflow", "log", &id, "compute"]),
        "hello from http\nk=v\n3000000\n"
    );
    let log = c.ok(&["workflow", "log", &id, "ingress:data"]);
    assert!(
        log.contains(&format!(
            "{} -> file://big.bin: 3.0 MB",
            srv.url("/big.bin")
        )) && log.contains("ingress:data finished: 3 transfer(s)"),
        "{log}"
    );
    // An event per transfer, in order, naming the source, the destination and the size.
    let done = events(&c, &id, "ingress:data", "transfer.done");
    assert_eq!(done.len(), 3, "{done:#?}");
    assert!(
        done[0].starts_with(&format!(
            "{} -> file://in/data.txt: 16 bytes in ",
            srv.url("/data.txt")
        )) && done[1].starts_with("file://conf -> file:///conf.ini: 4 bytes in ")
            && done[2].starts_with(&format!(
                "{} -> file://big.bin: 3000000 bytes in ",
                srv.url("/big.bin")
            )),
        "{done:#?}"
    );
}

#[test]
fn a_failed_ingress_names_the_url_and_the_cause_and_the_jobs_never_start() {
    let srv = Server::start(vec![
        ("/stall", Route::Stall(Duration::from_secs(60))),
        ("/short", Route::Short(10, b"abc".to_vec())),
        ("/private", Route::Bearer("right".into(), b"data".to_vec())),
    ]);
    let c = Cluster::up(1);
    c.ok(&[
        "secret",
        "set",
        "wrong",
        "--type",
        "http",
        "--value",
        r#"{"token":"not-right"}"#,
    ]);
    let run = |name: &str, source: &str, policy: &str| {
        let file = one_ingress(
            &c,
            name,
            &format!("uri: \"{source}\""),
            "file://x",
            policy,
            "[ \"true\" ]",
        );
        let id = c.start_workflow(&file);
        let d = c.wait_status(&id, "FAILED");
        let t = Cluster::task(&d, "ingress:data").clone();
        assert_eq!(t["status"], "FAILED", "{d:#}");
        let job = Cluster::task(&d, "read");
        assert!(attempts(job).is_empty(), "the job never started: {d:#}");
        (reason(&t), id)
    };

    let missing = srv.url("/missing");
    let (why, id) = run(
        "missing",
        &missing,
        "        policy: { retry: { attempts: 2 } }",
    );
    assert!(
        why.contains(&missing) && why.contains("404") && why.contains("after 2 tries"),
        "{why}"
    );
    let asked = srv
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, _)| p == "/missing")
        .count();
    assert_eq!(asked, 2, "policy.retry.attempts holds");
    // The failure's event names the URL and the cause, once (after the tries), and nothing
    // was recorded done.
    let failed = events(&c, &id, "ingress:data", "transfer.failed");
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert!(
        failed[0].starts_with(&format!("{missing} -> file://x: "))
            && failed[0].contains("404")
            && failed[0].contains("after 2 tries"),
        "{failed:#?}"
    );
    assert!(events(&c, &id, "ingress:data", "transfer.done").is_empty());

    // Wrong credentials: the server's answer, with the URL.
    let private = srv.url("/private");
    let (why, _) = run(
        "wrong",
        &format!("{private}\", secret: \"secret://user/wrong"),
        "",
    );
    assert!(
        why.contains(&private) && why.contains("HTTP 401 Unauthorized"),
        "{why}"
    );
    assert!(
        srv.seen
            .lock()
            .unwrap()
            .iter()
            .any(|(p, a)| p == "/private" && a.as_deref() == Some("Bearer not-right")),
        "the secret's token was sent"
    );

    let stall = srv.url("/stall");
    let (why, _) = run(
        "stall",
        &stall,
        "        policy: { timeout: { execute: 2s } }",
    );
    assert!(
        why.contains(&stall) && why.contains("timed out after 2s"),
        "{why}"
    );

    let short = srv.url("/short");
    let (why, id) = run("short", &short, "");
    assert!(
        why.contains(&short) && why.contains("broke off after 3 bytes"),
        "{why}"
    );
    // Nothing half-written is left in the volume (the workflow's volume is removed at its
    // end anyway; the file was never renamed into place).
    let vol = c
        .data_dir()
        .join("storage/default/ephemeral")
        .join(&id)
        .join("data/x");
    assert!(!vol.exists());
}

#[test]
fn a_workflow_stages_in_from_s3_and_http_computes_and_stages_out_to_s3() {
    let s3 = common::s3::S3::start();
    s3.put("inputs", "raw/numbers.txt", "3\n4\n5\n");
    s3.py("s3.create_bucket(Bucket='results')");
    let srv = Server::start(vec![("/factor", Route::Body(b"10\n".to_vec()))]);
    let c = Cluster::up(1);
    c.ok(&[
        "secret",
        "set",
        "store",
        "--type",
        "s3",
        "--value",
        &s3.secret_json("AKIDEXAMPLE", "not-checked-by-moto"),
    ]);
    let workflow = |name: &str, script: &str| {
        c.write(
            &format!("{name}.yaml"),
            &format!(
                r#"version: v4
volumes:
  work:
    ingress:
      - source: {{ uri: "s3://inputs/raw/numbers.txt", secret: secret://user/store }}
        destination: {{ uri: "file://in/numbers.txt" }}
      - source: {{ uri: "{}" }}
        destination: {{ uri: "file://in/factor" }}
    egress:
      - source: {{ uri: "file://out/sum.txt" }}
        destination: {{ uri: "s3://results/{name}/sum.txt", secret: secret://user/store }}
jobs:
  compute:
    image: {{ uri: docker://busybox:1 }}
    mounts: {{ /work: {{ volume: work }} }}
    script: |
      #!/bin/sh
      {script}
"#,
                srv.url("/factor")
            ),
        )
    };
    let id = c.start_workflow(&workflow(
        "run1",
        r#"mkdir -p /work/out && f=$(cat /work/in/factor) && s=0 && for n in $(cat /work/in/numbers.txt); do s=$((s + n * f)); done && echo $s > /work/out/sum.txt"#,
    ));
    let d = c.wait_status(&id, "FINISHED");
    for step in ["ingress:work", "compute", "egress:work"] {
        assert_eq!(
            Cluster::task(&d, step)["status"],
            "FINISHED",
            "{step}: {d:#}"
        );
    }
    // The result is in the bucket, read back through the S3 API.
    assert_eq!(s3.get("results", "run1/sum.txt").as_deref(), Some("120\n"));
    let log = c.ok(&["workflow", "log", &id, "egress:work"]);
    assert!(
        log.contains("file://out/sum.txt -> s3://results/run1/sum.txt: 4 B"),
        "{log}"
    );
    let done = events(&c, &id, "egress:work", "transfer.done");
    assert!(
        done.len() == 1
            && done[0].starts_with("file://out/sum.txt -> s3://results/run1/sum.txt: 4 bytes in "),
        "{done:#?}"
    );
    assert!(events(&c, &id, "egress:work", "transfer.skipped").is_empty());

    // A failed job: its volume's egress never runs, says so in an event, and nothing reaches
    // the bucket.
    let id = c.start_workflow(&workflow("run2", "echo x > /work/out; exit 3"));
    let d = c.wait_status(&id, "FAILED");
    let egress = Cluster::task(&d, "egress:work");
    assert!(attempts(egress).is_empty(), "{d:#}");
    assert_eq!(s3.get("results", "run2/sum.txt"), None);
    let skipped = events(&c, &id, "egress:work", "transfer.skipped");
    assert_eq!(
        skipped,
        vec!["not uploaded (dependency compute ended FAILED): \
             file://out/sum.txt -> s3://results/run2/sum.txt"
            .to_string()]
    );
    assert!(events(&c, &id, "egress:work", "transfer.done").is_empty());

    // A stopped workflow: its egress never runs either, and says so.
    let id = c.start_workflow(&workflow(
        "run3",
        "mkdir -p /work/out && echo 1 > /work/out/sum.txt && sleep 300",
    ));
    c.wait_for(&id, "compute running", |d| {
        Cluster::task(d, "compute")["status"] == "RUNNING"
    });
    c.ok(&["workflow", "stop", &id]);
    let d = c.wait_status(&id, "STOPPED");
    assert!(
        attempts(Cluster::task(&d, "egress:work")).is_empty(),
        "{d:#}"
    );
    assert_eq!(s3.get("results", "run3/sum.txt"), None);
    let skipped = events(&c, &id, "egress:work", "transfer.skipped");
    assert!(
        skipped.len() == 1
            && skipped[0].starts_with("not uploaded (")
            && skipped[0].ends_with("file://out/sum.txt -> s3://results/run3/sum.txt"),
        "{skipped:#?}"
    );
    assert!(events(&c, &id, "egress:work", "transfer.done").is_empty());

    // A missing object fails the ingress with the URL and the S3 error.
    let missing = c.write(
        "missing.yaml",
        r#"version: v4
volumes:
  work:
    ingress:
      - source: { uri: "s3://inputs/raw/nope.txt", secret: secret://user/store }
        destination: { uri: "file://x" }
jobs:
  compute:
    image: { uri: docker://busybox:1 }
    mounts: { /work: { volume: work } }
    command: [ "true" ]
"#,
    );
    let id = c.start_workflow(&missing);
    let d = c.wait_status(&id, "FAILED");
    let why = reason(Cluster::task(&d, "ingress:work"));
    assert!(
        why.contains("s3://inputs/raw/nope.txt") && why.to_lowercase().contains("not found"),
        "{why}"
    );

    // An s3:// transfer without a secret, or with an http one, is refused at submit.
    c.ok(&[
        "secret",
        "set",
        "web",
        "--type",
        "http",
        "--value",
        r#"{"token":"t"}"#,
    ]);
    let wrong = c.write(
        "wrong.yaml",
        &std::fs::read_to_string(&missing)
            .unwrap()
            .replace("secret://user/store", "secret://user/web"),
    );
    let out = c.gantry(&["workflow", "start", wrong.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "secret://user/web is a http secret; s3://inputs/raw/nope.txt takes a s3 secret"
        ),
        "{err}"
    );
}

#[test]
fn wrong_s3_credentials_fail_the_ingress_with_the_s3_error() {
    let (s3, id, secret) = common::s3::S3::authenticated();
    s3.put("inputs", "a.txt", "signed\n");
    let c = Cluster::up(1);
    c.ok(&[
        "secret",
        "set",
        "good",
        "--type",
        "s3",
        "--value",
        &s3.secret_json(&id, &secret),
    ]);
    c.ok(&[
        "secret",
        "set",
        "bad",
        "--type",
        "s3",
        "--value",
        &s3.secret_json(&id, "wrong"),
    ]);
    let file = |name: &str| {
        one_ingress(
            &c,
            name,
            &format!("uri: \"s3://inputs/a.txt\", secret: secret://user/{name}"),
            "file://a.txt",
            "",
            "[ cat, /data/a.txt ]",
        )
    };
    let bad = c.start_workflow(&file("bad"));
    let d = c.wait_status(&bad, "FAILED");
    let why = reason(Cluster::task(&d, "ingress:data"));
    assert!(
        why.contains("s3://inputs/a.txt") && why.contains("SignatureDoesNotMatch"),
        "{why}"
    );
    assert!(attempts(Cluster::task(&d, "read")).is_empty());

    let good = c.start_workflow(&file("good"));
    c.wait_status(&good, "FINISHED");
    assert_eq!(c.ok(&["workflow", "log", &good, "read"]), "signed\n");
}

#[test]
fn ingress_into_a_persistent_volume_lands_in_its_storage_and_outlives_the_workflow() {
    let srv = Server::start(vec![(
        "/ref.txt",
        Route::Body(b"reference data\n".to_vec()),
    )]);
    let c = Cluster::up(1);
    c.ok(&["volume", "create", "refs"]);
    let fetch = one_ingress(
        &c,
        "fetch",
        &format!("uri: \"{}\"", srv.url("/ref.txt")),
        "file://ref.txt",
        "",
        "[cat, /data/ref.txt]",
    );
    let text = std::fs::read_to_string(&fetch).unwrap().replace(
        "  data:\n    ingress:",
        "  data:\n    use: persistent\n    name: refs\n    ingress:",
    );
    std::fs::write(&fetch, text).unwrap();
    let id = c.start_workflow(&fetch);
    let d = c.wait_status(&id, "FINISHED");
    assert_eq!(
        Cluster::task(&d, "ingress:data")["status"],
        "FINISHED",
        "{d:#}"
    );
    assert_eq!(c.ok(&["workflow", "log", &id, "read"]), "reference data\n");
    // A later workflow with no ingress of its own reads what the first one staged.
    let later = c.write(
        "later.yaml",
        r#"version: v4
volumes:
  refs: {use: persistent, name: refs}
jobs:
  read:
    image: { uri: docker://busybox:1 }
    mounts: { /refs: { volume: refs } }
    command: [cat, /refs/ref.txt]
"#,
    );
    let id2 = c.start_workflow(&later);
    c.wait_status(&id2, "FINISHED");
    assert_eq!(c.ok(&["workflow", "log", &id2, "read"]), "reference data\n");
}

#[test]
fn a_running_transfer_shows_its_progress_in_describe() {
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    let srv = Server::start(vec![("/slow.bin", Route::Trickle(body.clone()))]);
    let c = Cluster::up(1);
    let slow = srv.url("/slow.bin");
    let file = one_ingress(
        &c,
        "slow",
        &format!("uri: \"{slow}\""),
        "file://slow.bin",
        "",
        "[ \"true\" ]",
    );
    let id = c.start_workflow(&file);
    // The first half trickles out over about five seconds, then the server holds the rest
    // until released: progress is reported while it moves.
    srv.held();
    // Not a speed bound: a deadline so that a server that never shows progress fails the test
    // rather than hangs it (the held body never ends on its own).
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let progress = loop {
        let d = c.json(&["workflow", "describe", &id]);
        let t = Cluster::task(&d, "ingress:data");
        assert!(
            t["status"] != "FINISHED" && t["status"] != "FAILED",
            "ended before progress was seen: {d:#}"
        );
        if !t["progress"].is_null() {
            break t["progress"].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no progress shown while the body was held: {d:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(progress["source"], slow.as_str(), "{progress:#}");
    assert_eq!(progress["destination"], "file://slow.bin", "{progress:#}");
    assert_eq!(progress["total_bytes"], body.len() as u64, "{progress:#}");
    let done = progress["done_bytes"].as_u64().unwrap();
    assert!(done > 0 && done <= body.len() as u64 / 2, "{progress:#}");
    assert!(
        progress["bytes_per_second"].as_u64().unwrap() > 0,
        "{progress:#}"
    );
    // The table says it too.
    let table = c.ok(&["workflow", "describe", &id]);
    assert!(
        table.contains(&format!("{slow} -> file://slow.bin: ")) && table.contains("195.3 KiB ("),
        "{table}"
    );
    // And the web UI's page of the workflow, signed in as a person would (curl keeps the
    // cookies).
    let page = c.web_page(&format!("/workflows/{id}"));
    assert!(
        page.contains(&format!("{slow} -&#62; file://slow.bin: ")) && page.contains("195.3 KiB ("),
        "{page}"
    );
    srv.release();
    let d = c.wait_status(&id, "FINISHED");
    let t = Cluster::task(&d, "ingress:data");
    assert!(
        t["progress"].is_null(),
        "an ended step shows no progress: {d:#}"
    );
    let done = events(&c, &id, "ingress:data", "transfer.done");
    assert!(
        done.len() == 1
            && done[0].starts_with(&format!("{slow} -> file://slow.bin: 200000 bytes in ")),
        "{done:#?}"
    );
}
