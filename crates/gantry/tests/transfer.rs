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
    let ended = attempts(ingress)[0]["ended_at"]
        .as_str()
        .unwrap()
        .to_string();
    let started = attempts(compute)[0]["created_at"]
        .as_str()
        .unwrap()
        .to_string();
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
}

#[test]
fn a_failed_ingress_names_the_url_and_the_cause_and_the_jobs_never_start() {
    let srv = Server::start(vec![
        ("/stall", Route::Stall(Duration::from_secs(60))),
        ("/short", Route::Short(10, b"abc".to_vec())),
    ]);
    let c = Cluster::up(1);
    let run = |name: &str, source: &str, policy: &str| {
        let file = c.write(
            &format!("{name}.yaml"),
            &format!(
                r#"version: v4
volumes:
  data:
    ingress:
      - source: {{ uri: "{source}" }}
        destination: {{ uri: "file://x" }}
{policy}
jobs:
  use-it:
    image: {{ uri: docker://busybox:1 }}
    mounts: {{ /data: {{ volume: data }} }}
    command: [ "true" ]
"#
            ),
        );
        let id = c.start_workflow(&file);
        let d = c.wait_status(&id, "FAILED");
        let t = Cluster::task(&d, "ingress:data").clone();
        assert_eq!(t["status"], "FAILED", "{d:#}");
        let job = Cluster::task(&d, "use-it");
        assert!(attempts(job).is_empty(), "the job never started: {d:#}");
        (reason(&t), id)
    };

    let missing = srv.url("/missing");
    let (why, _) = run(
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
