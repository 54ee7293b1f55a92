//! The server on PostgreSQL (`gantry server --store postgres://...`), end to end: a real
//! server and agent, the store a scratch database on the PostgreSQL that
//! `scripts/test-images.sh` starts.

mod common;

use common::{Split, GANTRY};
use gantry_store::testkit::ScratchDb;

fn scratch_db() -> ScratchDb {
    let url = common::test_env("GANTRY_TEST_PG");
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(ScratchDb::create(url))
}

#[test]
fn the_example_pipeline_runs_on_a_server_whose_store_is_postgres() {
    let db = scratch_db();
    let mut s = Split::server_only_with("30s", &["--store", db.url()]);
    s.start_agent();
    let c = &s.cluster;
    assert!(
        !c.data_dir().join("server/gantry.db").exists(),
        "no SQLite database beside a PostgreSQL store"
    );
    let example = common::repo_root().join("examples/pipeline.yaml");
    let id = c.start_workflow(&example);
    let d = c.wait_status(&id, "FINISHED");
    let tasks = d["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 6, "prepare, 4 squares, report");
    for t in tasks {
        assert_eq!(t["status"], "FINISHED", "{t:#}");
    }
    let sq = c.ok(&["workflow", "log", &id, "square", "--task", "3"]);
    assert_eq!(sq.trim(), "task 3: 3 squared is 9");
    let events = c.ok(&["workflow", "events", &id]);
    assert!(events.contains("attempt 1 placed on"), "{events}");

    // A second user sees only their own.
    let token = c.user_token("ada", "physics");
    let theirs = c.as_user(&token, &["workflow", "list"]);
    assert!(theirs.status.success());
    assert!(!String::from_utf8_lossy(&theirs.stdout).contains(&id));

    // What the server stored lives in the database, not in the server: a new process finds
    // the workflow, the users and the node.
    s.restart_server();
    let c = &s.cluster;
    assert_eq!(c.detail(&id)["status"], "FINISHED");
    assert!(c.as_user(&token, &["workflow", "list"]).status.success());
    let nodes = c.json(&["node", "list"]);
    assert!(
        nodes
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["name"] == s.agent_name.as_str()),
        "{nodes:#}"
    );
}

#[test]
fn a_store_that_is_not_postgres_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, env) in [
        (Some("mysql://db/gantry"), None),
        (None, Some("/var/lib/gantry.db")),
    ] {
        let mut cmd = std::process::Command::new(GANTRY);
        cmd.args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path());
        if let Some(f) = flag {
            cmd.args(["--store", f]);
        }
        if let Some(e) = env {
            cmd.env("GANTRY_STORE", e);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("--store") && err.contains("postgres://"),
            "{err}"
        );
        assert!(
            !dir.path().join("server/gantry.db").exists(),
            "nothing was opened"
        );
    }
}

/// Many agents at once on a PostgreSQL store: simulated nodes (the real agent protocol,
/// containers simulated) register together and stay READY, and a task array runs with every
/// task placed exactly once.
#[test]
fn a_simulated_fleet_registers_and_runs_each_task_once_on_postgres() {
    use clap::Parser;
    const NODES: usize = 40;
    const TASKS: u64 = 120;
    let db = scratch_db();
    let s = Split::server_only_with("30s", &["--store", db.url()]);
    let c = &s.cluster;
    let token = c.ok(&["admin", "user", "create", "fleet", "--agent"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_rt = rt.enter();
    let (fleet, _) = gantry_simagent::spawn(gantry_simagent::Args::parse_from([
        "gantry-simagent",
        "--server",
        &format!("http://127.0.0.1:{}", c.port),
        "--token",
        token.trim(),
        "--nodes",
        &NODES.to_string(),
        "--cores",
        "2",
        "--prefix",
        "fleet",
    ]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let ready = || {
        c.json(&["node", "list"])
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["state"] == "READY" && n["connected"] == true)
            .count()
    };
    while fleet.connected() < NODES || ready() < NODES {
        assert!(
            std::time::Instant::now() < deadline,
            "the fleet did not come up"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let file = c.write(
        "array.yaml",
        &format!(
            "version: v4\njobs:\n  work:\n    image: {{uri: docker://busybox:1}}\n    command: [sleep, \"0.1\"]\n    resource: {{cpu: {{cores: 1}}}}\n    task-array: {{start: 1, end: {TASKS}}}\n"
        ),
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "the array to end", |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    assert_eq!(d["status"], "FINISHED", "{:#}", d["counts"]);
    for t in d["tasks"].as_array().unwrap() {
        assert_eq!(t["attempts"].as_array().unwrap().len(), 1, "{t:#}");
    }
    assert_eq!(fleet.assigned(), (TASKS, 0));
}
