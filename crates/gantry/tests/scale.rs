//! The scale benchmark's harness as a test, at a small N: a fleet of simulated agents
//! (`gantry-simagent`: the real agent protocol, containers simulated) against a real
//! `gantry server`. Every node registers and stays READY and connected, a task array runs
//! with each task placed exactly once, and every reported end is acknowledged. Nothing here
//! is timed (`bench/scale.sh` measures, at 1,000 and 10,000 nodes); deadlines only bound a
//! hang.

mod common;

use std::time::{Duration, Instant};

use clap::Parser;
use common::Split;

const NODES: usize = 200;
// Past the store's `BORN_AHEAD` (1,024): most of the array gets its rows as it runs.
const TASKS: u64 = 2500;

fn wait(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_simulated_fleet_registers_runs_each_task_once_and_stays_ready() {
    let s = Split::server_only("30s");
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
    let nodes = || c.json(&["node", "list"]);
    let ready = |n: &serde_json::Value| {
        n.as_array()
            .unwrap()
            .iter()
            .filter(|n| n["state"] == "READY" && n["connected"] == true)
            .count()
    };
    wait(
        "every simulated node welcomed and READY",
        Duration::from_secs(120),
        || fleet.connected() == NODES && ready(&nodes()) == NODES,
    );

    // `node list` filters on the server: a page by name, a pool, a state.
    let len = |args: &[&str]| c.json(args).as_array().unwrap().len();
    let page = c.json(&["node", "list", "--limit", "5"]);
    let names: Vec<&str> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!((names.len(), &names), (5, &sorted));
    assert_eq!(
        len(&["node", "list", "--pool", "default", "--state", "ready"]),
        NODES
    );
    assert_eq!(len(&["node", "list", "--state", "DOWN"]), 0);
    assert_eq!(len(&["node", "list", "--pool", "gpu"]), 0);
    let bad = c.gantry(&["node", "list", "--state", "asleep"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && err.contains("state must be one of READY"),
        "{err}"
    );

    // Each task "runs" for the sleep its command names.
    let file = c.write(
        "array.yaml",
        &format!(
            "version: v4\njobs:\n  work:\n    image: {{uri: docker://busybox:1}}\n    command: [sleep, \"0.2\"]\n    resource: {{cpu: {{cores: 1}}}}\n    task-array: {{start: 1, end: {TASKS}}}\n"
        ),
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "the array to end", |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    assert_eq!(d["status"], "FINISHED", "{:#}", d["counts"]);
    let d = c.json(&["workflow", "describe", &id, "--limit", "10000"]);
    let tasks = d["tasks"].as_array().unwrap();
    assert_eq!(tasks.len() as u64, TASKS);
    for t in tasks {
        assert_eq!(t["status"], "FINISHED", "{t:#}");
        assert_eq!(t["attempts"].as_array().unwrap().len(), 1, "{t:#}");
    }
    let indexes: Vec<u64> = tasks.iter().map(|t| t["index"].as_u64().unwrap()).collect();
    assert_eq!(
        indexes,
        (1..=TASKS).collect::<Vec<_>>(),
        "each index once, in order"
    );
    // The agents' side: each task was given once, to one node, and each end acknowledged.
    assert_eq!(fleet.assigned(), (TASKS, 0));
    wait("every end acknowledged", Duration::from_secs(60), || {
        fleet.ended() == (TASKS, TASKS)
    });
    // Nobody was declared lost on the way.
    assert_eq!(ready(&nodes()), NODES);
    assert_eq!(fleet.reconnects(), 0);
}

/// Liveness never lies for long: a connected node that falls silent (no heartbeat within the
/// timeout) is marked DOWN and its connection is closed, so that its agent reconnects and is
/// READY again, rather than staying DOWN while connected with its reports ignored.
#[test]
fn a_silent_node_is_disconnected_and_is_ready_again_when_it_reconnects() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

    let s = Split::server_only("2s");
    let c = &s.cluster;
    let token = c.ok(&["admin", "user", "create", "quiet", "--agent"]);
    let url = format!("ws://127.0.0.1:{}/api/v1/agent/connect", c.port);
    let hello = serde_json::json!({
        "type": "hello", "name": "quiet-node", "pool": "default", "version": "test",
        "capacity": {"cpus": 1, "memory_bytes": 1u64 << 30, "devices": {}},
    })
    .to_string();
    let connect = move || {
        let mut req = url.clone().into_client_request().unwrap();
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {}", token.trim()).parse().unwrap(),
        );
        req
    };
    let state = || {
        let nodes = c.json(&["node", "list"]);
        let n = nodes
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == "quiet-node")
            .cloned()
            .unwrap();
        (
            n["state"].as_str().unwrap().to_string(),
            n["connected"] == true,
        )
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(connect()).await.unwrap();
        ws.send(Message::text(hello.clone())).await.unwrap();
        // Silent from here on: no heartbeat, only reading until the server closes.
        let closed = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(m) = ws.next().await {
                match m {
                    Ok(Message::Close(_)) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "the server did not close the silent node's connection"
        );
    });
    wait(
        "the silent node DOWN and disconnected",
        Duration::from_secs(30),
        || state() == ("DOWN".into(), false),
    );
    // Its agent reconnects and heartbeats: READY again.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let agent =
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async move {
            let (mut ws, _) = tokio_tungstenite::connect_async(connect()).await.unwrap();
            ws.send(Message::text(hello)).await.unwrap();
            let mut beat = tokio::time::interval(Duration::from_millis(300));
            loop {
                tokio::select! {
                    _ = beat.tick() => {
                        if ws.send(Message::text(r#"{"type":"heartbeat"}"#)).await.is_err() {
                            return;
                        }
                    }
                    m = ws.next() => if !matches!(m, Some(Ok(_))) { return },
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {
                        if ready_rx.try_recv().is_ok() {
                            return;
                        }
                    }
                }
            }
        })
        });
    wait("the node READY again", Duration::from_secs(30), || {
        state() == ("READY".into(), true)
    });
    // And it stays so while it heartbeats, past the timeout.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(state(), ("READY".into(), true));
    ready_tx.send(()).unwrap();
    agent.join().unwrap();
}

/// An administrator caps task arrays (`workflows.max_array_size`, as Slurm's `MaxArraySize`):
/// a bigger one is refused at submit with the job's position and the setting named, and
/// nothing of it is stored; one within the cap is accepted.
#[test]
fn an_administrator_caps_the_size_of_task_arrays() {
    let s = Split::server_only("30s");
    let c = &s.cluster;
    let array = |n: u32| {
        format!(
            "version: v4\njobs:\n  work:\n    image:\n      uri: docker://busybox:1\n    command: [true]\n    task-array:\n      start: 1\n      end: {n}\n"
        )
    };
    let bad = c.gantry(&["admin", "settings", "set", "workflows.max_array_size=0"]);
    assert!(!bad.status.success(), "a cap of 0 is refused");
    c.ok(&["admin", "settings", "set", "workflows.max_array_size=100"]);
    let over = c.write("over.yaml", &array(101));
    let out = c.gantry(&["workflow", "start", over.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "101 tasks over a cap of 100");
    assert!(
        err.contains("at most 100 tasks")
            && err.contains("jobs.work.task-array (job at 3:3): 101 tasks"),
        "{err}"
    );
    assert_eq!(
        c.json(&["workflow", "list"]).as_array().unwrap().len(),
        0,
        "nothing stored"
    );
    let within = c.write("within.yaml", &array(100));
    c.start_workflow(&within);
    assert_eq!(c.json(&["workflow", "list"]).as_array().unwrap().len(), 1);
}

/// A big array is shown a page at a time: `describe` gives the first 1,000 tasks with the
/// total and where the next page starts, `--after` walks every task once in order, `status`
/// and `workflow list` give the counts without the tasks, and a bad page is refused.
#[test]
fn describe_pages_a_big_array_and_status_counts_it() {
    let s = Split::server_only("30s");
    let c = &s.cluster;
    let f = c.write(
        "big.yaml",
        "version: v4\njobs:\n  work:\n    image:\n      uri: docker://busybox:1\n    command: [true]\n    task-array:\n      start: 1\n      end: 2500\n",
    );
    let id = c.start_workflow(&f);
    let first = c.json(&["workflow", "describe", &id]);
    assert_eq!(
        first["tasks"].as_array().unwrap().len(),
        1000,
        "the first page"
    );
    assert_eq!(first["tasks_total"], 2500);
    let mut seen: Vec<u64> = vec![];
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["workflow", "describe", id.as_str(), "--limit", "1000"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let page = c.json(&args);
        seen.extend(
            page["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["index"].as_u64().unwrap()),
        );
        match page["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(
        seen,
        (1..=2500).collect::<Vec<u64>>(),
        "every task once, in order"
    );

    let status = c.json(&["workflow", "status", &id]);
    assert_eq!(status["counts"]["PENDING"], 2500);
    let listed = c.json(&["workflow", "list"]);
    assert_eq!(listed[0]["counts"]["PENDING"], 2500);
    let none = c.json(&["workflow", "describe", &id, "--status", "failed"]);
    assert_eq!(none["tasks"].as_array().unwrap().len(), 0);
    assert_eq!(none["tasks_total"], 0);

    let other = c.start_workflow(&f);
    let theirs = c.json(&["workflow", "describe", &other, "--limit", "1"])["tasks"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    for (args, why) in [
        (
            vec!["--after", theirs.as_str()],
            "is not a task of workflow",
        ),
        (vec!["--limit", "20000"], "at most 10000"),
        (vec!["--after", "nope"], "--after takes a task id"),
    ] {
        let mut all = vec!["workflow", "describe", id.as_str()];
        all.extend(args);
        let out = c.gantry(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{all:?}: {err}");
    }
}
