//! Several `gantry server` replicas on one PostgreSQL and one shared directory (job output,
//! the object cache): each serves the API, one runs the controller under the store's lease,
//! and the agent (given every replica's URL) works for whichever does. The leader is paused
//! and then killed in the middle of a task array; the lease moves, the agent follows it, every
//! task runs exactly once, and its output and events are whole through any replica.
//! Behind HAProxy, an endpoint's takeover waits for every replica's proxy to let the old
//! backend go, and outlives its leader.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::{free_port, Split, GANTRY};
use gantry_store::testkit::ScratchDb;

fn scratch_db() -> ScratchDb {
    let url = common::test_env("GANTRY_TEST_PG");
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(ScratchDb::create(url))
}

/// The status and body of `GET url` (curl: the tests need no HTTP client of their own).
fn get(url: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-m", "2", "-w", "\n%{http_code}", url])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// One more replica: `gantry server` on its own data directory and port, on the same store,
/// with the first replica's secrets key (secrets sealed by one are opened by every other).
struct Replica {
    port: u16,
    dir: PathBuf,
    shared: PathBuf,
    child: Option<Child>,
}

impl Replica {
    fn start(&mut self, store: &str, log: &Path) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(GANTRY)
            .args(["server", "--listen", &format!("127.0.0.1:{}", self.port)])
            .arg("--data-dir")
            .arg(&self.dir)
            .args(["--store", store, "--heartbeat-timeout", "10s"])
            .arg("--shared-dir")
            .arg(&self.shared)
            .args(["--stop-grace", "2s"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting a replica");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(c) = &self.child {
            // A paused replica is killed as it is: SIGKILL needs no SIGCONT.
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
        }
        self.kill();
    }
}

/// Which of `urls` runs the controller now (by `/healthz/controller`), once exactly one does.
fn leader(urls: &[String], what: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let leading: Vec<usize> = (0..urls.len())
            .filter(|&i| get(&format!("{}/healthz/controller", urls[i])).0 == 200)
            .collect();
        if leading.len() == 1 {
            return leading[0];
        }
        assert!(Instant::now() < deadline, "{what}: leaders {leading:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Points the CLI's context (the data dir's) at `url`.
fn point_cli_at(dir: &Path, url: &str) {
    let path = dir.join("context.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text: String = text
        .lines()
        .map(|l| match l.starts_with("url = ") {
            true => format!("url = \"{url}\""),
            false => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&path, text + "\n").unwrap();
}

fn finished(d: &serde_json::Value) -> u64 {
    d["counts"]["FINISHED"].as_u64().unwrap_or(0)
}

/// Three replicas on a scratch database and one shared directory: the first a [`Split`]'s
/// server (whose CLI context the tests use), the others [`Replica`]s; once all answer.
struct Three {
    s: Split,
    replicas: Vec<Replica>,
    urls: Vec<String>,
    data: PathBuf,
    log: PathBuf,
    // Dropped last: the servers above use them.
    _shared: tempfile::TempDir,
    db: ScratchDb,
}

fn three() -> Three {
    let db = scratch_db();
    let shared_dir = tempfile::Builder::new()
        .prefix("gantry-e2e-shared-")
        .tempdir()
        .unwrap();
    let shared = shared_dir.path().to_path_buf();
    let s = Split::server_only_with(
        "10s",
        &[
            "--store",
            db.url(),
            "--shared-dir",
            shared.to_str().unwrap(),
        ],
    );
    let data = s.cluster.data_dir().to_path_buf();
    let log = data.join("up.log");
    let key = data.join("server/secret.key");
    let mut replicas: Vec<Replica> = (0..2)
        .map(|i| {
            let dir = data.join(format!("replica-{i}"));
            std::fs::create_dir_all(dir.join("server")).unwrap();
            std::fs::copy(&key, dir.join("server/secret.key")).unwrap();
            Replica {
                port: free_port(),
                dir,
                shared: shared.clone(),
                child: None,
            }
        })
        .collect();
    for r in &mut replicas {
        r.start(db.url(), &log);
    }
    let mut urls = vec![format!("http://127.0.0.1:{}", s.cluster.port)];
    urls.extend(replicas.iter().map(Replica::url));
    for u in &urls {
        let deadline = Instant::now() + Duration::from_secs(30);
        while get(&format!("{u}/healthz")).0 != 200 {
            assert!(
                Instant::now() < deadline,
                "{u} did not start: {}",
                s.cluster.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Three {
        s,
        replicas,
        urls,
        data,
        log,
        _shared: shared_dir,
        db,
    }
}

#[test]
fn replicas_share_one_store_and_the_controller_moves_when_its_leader_pauses_or_dies() {
    const TASKS: u64 = 30;
    let Three {
        mut s,
        mut replicas,
        urls,
        data,
        log,
        _shared,
        db,
    } = three();
    // The first server took the lease before the others started.
    assert_eq!(leader(&urls, "at start"), 0);
    // A standby turns agents away, naming why; the agent finds the leader among its URLs.
    let token = s.cluster.admin_token();
    let refused = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .arg(format!("{}/api/v1/agent/connect", urls[1]))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&refused.stdout), "503");
    s.start_agent_at(&urls.join(","));

    // Every replica serves the API from the store: the workflow is seen through each.
    let file = s.cluster.write(
        "array.yaml",
        &format!(
            "version: v4\njobs:\n  work:\n    image: {{uri: docker://busybox:1}}\n    command: [sh, -c, \"echo task $FB_TASK_ID of $FB_WORKFLOW_ID; sleep 1\"]\n    resource: {{cpu: {{cores: 1}}}}\n    task-array: {{start: 1, end: {TASKS}}}\n"
        ),
    );
    // Submitted through a standby: the leader hears of it through the store.
    point_cli_at(&data, &urls[1]);
    let id = s.cluster.start_workflow(&file);
    for u in &urls[1..] {
        point_cli_at(&data, u);
        assert_eq!(
            s.cluster.detail(&id)["id"].as_str(),
            Some(id.as_str()),
            "through {u}"
        );
    }
    point_cli_at(&data, &urls[0]);
    s.cluster
        .wait_for(&id, "a few tasks to finish", |d| finished(d) >= 4);

    // Paused: its lease runs out and a standby takes it; woken, it finds itself deposed and
    // stands by (what it was about to commit is refused by the fence).
    let pid = s.server.as_ref().unwrap().id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let t0 = Instant::now();
    let next = leader(&urls[1..], "after pausing the leader") + 1;
    eprintln!("the lease moved {:?} after the leader paused", t0.elapsed());
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&format!("{}/healthz/controller", urls[0])).0 != 503 {
        assert!(Instant::now() < deadline, "the old leader still leads");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(leader(&urls, "after the old leader woke"), next);
    // Administrators see who leads, from any replica.
    point_cli_at(&data, &urls[0]);
    let ctl = s.cluster.json(&["admin", "controller"]);
    assert_eq!(ctl["this_server_leads"], false, "{ctl:#}");
    assert!(
        ctl["holder"].as_str().unwrap().starts_with(&urls[next]),
        "{ctl:#}"
    );
    assert!(ctl["token"].as_i64().unwrap() >= 2, "{ctl:#}");
    point_cli_at(&data, &urls[next]);
    let before = finished(&s.cluster.detail(&id));
    s.cluster
        .wait_for(&id, "the array to go on under the new leader", |d| {
            finished(d) >= before + 4
        });

    // Killed outright: the last replica takes over, and the array finishes. The CLI is given
    // every replica, the dead one first: it moves on to one that answers.
    replicas[next - 1].kill();
    let t0 = Instant::now();
    let last = (1..urls.len()).find(|&i| i != next).unwrap();
    let alive = [urls[0].clone(), urls[last].clone()];
    let now = leader(&alive, "after killing the leader");
    eprintln!(
        "the lease moved {:?} after the leader was killed",
        t0.elapsed()
    );
    point_cli_at(&data, &[urls[next].as_str(), &alive[now]].join(","));
    let d = s.cluster.wait_for(&id, "the array to end", |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    assert_eq!(d["status"], "FINISHED", "{:#}", d["counts"]);
    let tasks = d["tasks"].as_array().unwrap();
    assert_eq!(tasks.len() as u64, TASKS);
    for t in tasks {
        let attempts = t["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "each task ran once: {t:#}");
    }
    // Output written through the first leader, the second and the third, read through the
    // third: the shared directory holds it all.
    for task in 1..=TASKS {
        let out = s
            .cluster
            .ok(&["workflow", "log", &id, "work", "--task", &task.to_string()]);
        assert_eq!(out.trim(), format!("task {task} of {id}"));
    }
    // Each task's events, whichever replica committed them: placed, running, its attempt
    // ended and the task moved on, once each.
    let events: Vec<serde_json::Value> = s
        .cluster
        .json(&["workflow", "events", &id])
        .as_array()
        .unwrap()
        .clone();
    for task in 1..=TASKS {
        let label = format!("work[{task}]");
        let of: Vec<&str> = events
            .iter()
            .filter(|e| e["task"] == label.as_str())
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        for kind in [
            "task.placed",
            "task.running",
            "attempt.ended",
            "task.status",
        ] {
            assert_eq!(
                of.iter().filter(|k| **k == kind).count(),
                1,
                "{label}: {kind} once in {of:?}"
            );
        }
    }

    // The killed replica starts again and rejoins as a standby.
    replicas[next - 1].start(db.url(), &log);
    let back = replicas[next - 1].url();
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&format!("{back}/healthz")).0 != 200 {
        assert!(Instant::now() < deadline, "the replica did not start again");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(&format!("{back}/healthz/controller")).0, 503);
    point_cli_at(&data, &back);
    assert_eq!(s.cluster.detail(&id)["status"], "FINISHED");
}

/// HAProxy in front of `urls`, as a site runs it: the API (and everything else) to any live
/// replica, retried on another when one fails; the agents' WebSocket to the replica whose
/// `/healthz/controller` says it runs the controller.
struct Haproxy {
    port: u16,
    child: Child,
}

impl Haproxy {
    fn start(dir: &Path, urls: &[String], log: &Path) -> Haproxy {
        let port = free_port();
        let servers = |check: &str| -> String {
            urls.iter()
                .enumerate()
                .map(|(i, u)| {
                    let addr = u.trim_start_matches("http://");
                    format!("  server r{i} {addr} check inter 300ms fall 1 rise 1{check}\n")
                })
                .collect()
        };
        let cfg = format!(
            "global\n  maxconn 2000\n\
             defaults\n  mode http\n  timeout connect 1s\n  timeout client 60s\n  \
             timeout server 60s\n  timeout tunnel 1h\n  retries 3\n  option redispatch 1\n  \
             retry-on all-retryable-errors\n\
             frontend gantry\n  bind 127.0.0.1:{port}\n  \
             use_backend agents if {{ path_beg /api/v1/agent/ }}\n  default_backend api\n\
             backend api\n  option httpchk GET /healthz\n{}\
             backend agents\n  option httpchk GET /healthz/controller\n{}",
            servers(""),
            servers("")
        );
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, cfg).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new("/usr/sbin/haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting haproxy (Debian's haproxy: scripts/install-deps.sh)");
        let h = Haproxy { port, child };
        let deadline = Instant::now() + Duration::from_secs(30);
        while get(&format!("{}/healthz", h.url())).0 != 200 {
            assert!(Instant::now() < deadline, "haproxy did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        h
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// [`three`] behind [`Haproxy`], the first replica leading; the agent and the CLI know the load
/// balancer only.
fn three_behind_haproxy() -> (Three, Haproxy) {
    let mut three = three();
    assert_eq!(leader(&three.urls, "at start"), 0);
    let lb = Haproxy::start(&three.data, &three.urls, &three.log);
    three.s.start_agent_at(&lb.url());
    point_cli_at(&three.data, &lb.url());
    (three, lb)
}

#[test]
fn three_replicas_behind_haproxy_lose_their_leader_mid_array_and_no_request_fails() {
    const TASKS: u64 = 24;
    let (mut three, lb) = three_behind_haproxy();
    let (s, urls) = (&mut three.s, &three.urls);

    let file = s.cluster.write(
        "array.yaml",
        &format!(
            "version: v4\njobs:\n  work:\n    image: {{uri: docker://busybox:1}}\n    command: [sh, -c, \"echo task $FB_TASK_ID; sleep 1\"]\n    resource: {{cpu: {{cores: 1}}}}\n    task-array: {{start: 1, end: {TASKS}}}\n"
        ),
    );
    let id = s.cluster.start_workflow(&file);
    s.cluster
        .wait_for(&id, "a few tasks to finish", |d| finished(d) >= 4);

    // Clients read through the load balancer all along; none of their requests may fail.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let url = format!("{}/api/v1/workflows/{id}?limit=0", lb.url());
        let token = s.cluster.admin_token();
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0u32, vec![]);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let out = Command::new("curl")
                    .args(["-s", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}"])
                    .args(["-H", &format!("Authorization: Bearer {token}")])
                    .arg(&url)
                    .output()
                    .unwrap();
                match String::from_utf8_lossy(&out.stdout).as_ref() {
                    "200" => ok += 1,
                    other => failed.push(other.to_string()),
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            (ok, failed)
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let _ = s.server.as_mut().unwrap().kill();
    let _ = s.server.as_mut().unwrap().wait();
    let t0 = Instant::now();
    let now = leader(&urls[1..], "after killing the leader") + 1;
    eprintln!(
        "the lease moved {:?} after the leader was killed (to replica {now})",
        t0.elapsed()
    );
    let d = s.cluster.wait_for(&id, "the array to end", |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = reader.join().unwrap();
    eprintln!("{ok} reads through the load balancer during the failover");
    assert!(failed.is_empty(), "failed reads: {failed:?} (of {ok} good)");
    assert!(ok > 10, "the reader read: {ok}");
    assert_eq!(d["status"], "FINISHED", "{:#}", d["counts"]);
    for t in d["tasks"].as_array().unwrap() {
        assert_eq!(t["attempts"].as_array().unwrap().len(), 1, "{t:#}");
        let task = t["index"].as_u64().unwrap();
        let out = s
            .cluster
            .ok(&["workflow", "log", &id, "work", "--task", &task.to_string()]);
        assert_eq!(out.trim(), format!("task {task}"));
    }
}

/// Monitoring's alerts, posted through every replica at once: each server decides holds with
/// its own lock, and the store's version check keeps them to the pool's cap (20 % of ten
/// nodes: two cordons) between them; the rest wait deferred.
#[test]
fn hold_decisions_through_several_replicas_keep_the_pool_cap() {
    use clap::Parser;
    use serde_json::json;
    const NODES: usize = 10;
    let Three {
        s,
        replicas: _replicas,
        urls,
        _shared,
        db: _db,
        ..
    } = three();
    let c = &s.cluster;
    let agent_token = c.ok(&["admin", "user", "create", "fleet", "--agent"]);
    let hook: serde_json::Value =
        c.json(&["admin", "user", "create", "alertmanager", "--monitoring"]);
    let hook_token = hook["token"].as_str().unwrap().to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_rt = rt.enter();
    let (fleet, _) = gantry_simagent::spawn(gantry_simagent::Args::parse_from([
        "gantry-simagent",
        "--server",
        &urls[0],
        "--token",
        agent_token.trim(),
        "--nodes",
        &NODES.to_string(),
        "--prefix",
        "held",
    ]));
    let deadline = Instant::now() + Duration::from_secs(60);
    while fleet.connected() < NODES {
        assert!(Instant::now() < deadline, "the fleet did not come up");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Ten posts at once, one alert each, spread over the three replicas.
    let posts: Vec<std::process::Child> = (0..NODES)
        .map(|i| {
            let node = format!("held-{i}");
            let body = json!({
                "receiver": "gantry", "status": "firing",
                "alerts": [{
                    "status": "firing",
                    "labels": {"alertname": "DiskFull", "node": node, "gantry_hold": "cordon",
                               "gantry_release": "auto", "severity": "critical"},
                    "annotations": {"summary": format!("disk full on {node}")},
                    "startsAt": "2026-12-04T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                    "generatorURL": "http://prometheus/graph",
                    "fingerprint": format!("{:016x}", 4096 + i),
                }],
                "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
                "externalURL": "http://alertmanager", "version": "4", "groupKey": "{}:{}",
                "truncatedAlerts": 0
            });
            Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
                .args(["-H", "Content-Type: application/json"])
                .args(["-H", &format!("Authorization: Bearer {hook_token}")])
                .args(["--data-binary", &body.to_string()])
                .arg(format!(
                    "{}/api/v1/monitoring/alertmanager",
                    urls[i % urls.len()]
                ))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for p in posts {
        let out = p.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    }
    let mut states: Vec<String> = vec![];
    for i in 0..NODES {
        let shown = c.json(&["node", "show", &format!("held-{i}")]);
        for h in shown["holds"].as_array().unwrap() {
            states.push(h["state"].as_str().unwrap().to_string());
        }
    }
    states.sort();
    let active = states.iter().filter(|s| s.as_str() == "ACTIVE").count();
    assert_eq!(states.len(), NODES, "one hold per alert: {states:?}");
    assert_eq!(active, 2, "the cap is two of ten: {states:?}");
}

/// How long the model's stream at /cgi-bin/stream runs, one event a second: long enough to
/// outlast a takeover's switch and a failover.
const STREAM_EVENTS: u32 = 25;

/// `common::model` of `version` behind endpoint `chat`, with a long stream.
fn streamer(version: &str) -> String {
    common::streaming_model(version, "chat", 0, 8080, STREAM_EVENTS)
}

/// A takeover of a persistent endpoint behind HAProxy, its old backend still streaming to
/// clients of the two standbys when the leader switches: the leader waits for every
/// replica's proxy (through the store) before it stops the old workflow, and is killed while
/// it waits; the new leader carries the takeover to DONE once the streams have ended whole,
/// and no request through the load balancer fails meanwhile.
#[test]
fn a_takeover_drains_every_replica_and_outlives_a_killed_leader() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let (mut three, lb) = three_behind_haproxy();
    let (s, urls) = (&mut three.s, &three.urls);
    s.cluster.ok(&[
        "endpoint",
        "create",
        "chat",
        "--scope",
        "public",
        "--drain-timeout",
        "120s",
    ]);
    let v1 = s
        .cluster
        .start_workflow(&s.cluster.write("v1.yaml", &streamer("v1")));
    s.cluster.wait_endpoint("chat", "v1 to serve chat", |e| {
        e["status"] == "SERVING" && e["workflow_id"] == v1.as_str()
    });
    // Every replica's proxy follows the store.
    for u in urls {
        let deadline = Instant::now() + Duration::from_secs(30);
        while get(&format!("{u}/e/chat/")) != (200, "v1\n".into()) {
            assert!(Instant::now() < deadline, "{u} does not route chat to v1");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // Clients call the endpoint through the load balancer all along.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let answered = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (stop, failures, answered) = (stop.clone(), failures.clone(), answered.clone());
            let url = format!("{}/e/chat/", lb.url());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let out = Command::new("curl")
                        .args(["-s", "-m", "10", "-w", "\n%{http_code}", &url])
                        .output()
                        .expect("curl");
                    match String::from_utf8_lossy(&out.stdout).as_ref() {
                        "v1\n\n200" => answered[0].fetch_add(1, Ordering::Relaxed),
                        "v2\n\n200" => answered[1].fetch_add(1, Ordering::Relaxed),
                        other => {
                            failures.lock().unwrap().push(other.to_string());
                            0
                        }
                    };
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        })
        .collect();
    // A stream through each standby, begun on v1: the leader's own proxy has nothing in
    // flight on it.
    let streams: Vec<_> = urls[1..]
        .iter()
        .map(|u| {
            let url = format!("{u}/e/chat/cgi-bin/stream");
            std::thread::spawn(move || {
                let out = Command::new("curl")
                    .args(["-sN", "-m", "120", "-w", "\n%{http_code}", &url])
                    .output()
                    .expect("curl");
                (
                    String::from_utf8_lossy(&out.stdout).into_owned(),
                    Instant::now(),
                )
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));

    let t_submit = Instant::now();
    let v2 = s
        .cluster
        .start_workflow(&s.cluster.write("v2.yaml", &streamer("v2")));
    s.cluster.wait_endpoint("chat", "the switch to v2", |e| {
        e["takeover"]["phase"] == "DRAINING" || e["takeover"].is_null()
    });
    let draining = s.cluster.json(&["endpoint", "show", "chat"]);
    assert_eq!(
        draining["takeover"]["phase"], "DRAINING",
        "the standbys' streams hold the old backend: {draining:#}"
    );
    assert_eq!(draining["workflow_id"], v2.as_str());
    eprintln!("switched to v2 {:?} after the submit", t_submit.elapsed());

    // The leader dies while it waits for the standbys' proxies.
    let _ = s.server.as_mut().unwrap().kill();
    let _ = s.server.as_mut().unwrap().wait();
    let t_kill = Instant::now();
    let now = leader(&urls[1..], "after killing the leader") + 1;
    let moved = t_kill.elapsed();
    eprintln!("the lease moved {moved:?} after the leader was killed (to replica {now})");
    assert!(
        moved < Duration::from_secs(5),
        "the lease moved in {moved:?}"
    );
    // The streams still run on v1, so the new leader drains on.
    let e = s.cluster.json(&["endpoint", "show", "chat"]);
    assert_eq!(e["takeover"]["phase"], "DRAINING", "{e:#}");
    assert_eq!(s.cluster.detail(&v1)["status"], "RUNNING");

    // The streams end whole from v1: nobody stopped it under them.
    let mut ended = vec![];
    for (i, t) in streams.into_iter().enumerate() {
        let (out, at) = t.join().unwrap();
        let (body, code) = out.rsplit_once('\n').unwrap_or(("", "0"));
        assert_eq!(code, "200", "the stream through {}: {out}", urls[i + 1]);
        let events: Vec<&str> = body.lines().filter(|l| l.starts_with("data:")).collect();
        let whole: Vec<String> = (1..=STREAM_EVENTS)
            .map(|i| format!("data: v1 {i}"))
            .collect();
        assert_eq!(events, whole, "the stream through {}", urls[i + 1]);
        ended.push(at);
    }
    let streams_ended = ended.into_iter().max().unwrap();
    let e = s
        .cluster
        .wait_endpoint("chat", "the takeover to end", |e| e["takeover"].is_null());
    let drained_after = streams_ended.elapsed();
    assert_eq!(e["status"], "SERVING", "{e:#}");
    assert_eq!(e["workflow_id"], v2.as_str(), "{e:#}");
    let history = s.cluster.json(&["endpoint", "history", "chat"]);
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["phase"], "DONE", "{last:#}");
    assert_eq!(last["from_workflow"], v1.as_str());
    assert_eq!(last["to_workflow"], v2.as_str());
    s.cluster.wait_status(&v1, "STOPPED");
    eprintln!(
        "the takeover was seen to end {:?} after the submit, {drained_after:?} after the last \
         stream on the old backend",
        t_submit.elapsed()
    );
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let failed = failures.lock().unwrap().clone();
    let (n1, n2) = (
        answered[0].load(Ordering::Relaxed),
        answered[1].load(Ordering::Relaxed),
    );
    eprintln!("{n1} answers from v1 and {n2} from v2 through the load balancer");
    assert!(
        failed.is_empty(),
        "{} failed requests: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(n1 > 0 && n2 > 0, "v1 {n1}, v2 {n2}");

    // The killed replica starts again and rejoins as a standby, its proxy on v2.
    s.restart_server();
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&format!("{}/healthz", urls[0])).0 != 200 {
        assert!(Instant::now() < deadline, "the replica did not start again");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(&format!("{}/healthz/controller", urls[0])).0, 503);
    assert_eq!(leader(urls, "after the restart"), now);
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&format!("{}/e/chat/", urls[0])) != (200, "v2\n".into()) {
        assert!(
            Instant::now() < deadline,
            "the restarted replica does not route to v2"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An MCP confirmation outlives the replica that handed it out: a client that cannot ask its
/// person is refused through one replica with a token, and the call made again with that
/// token through another replica goes ahead, once (the Python MCP SDK's client, as in
/// `tests/mcp.rs`). A token made up, or used twice, still confirms nothing.
#[test]
fn an_mcp_confirmation_handed_out_by_one_replica_is_taken_by_another() {
    let Three {
        s,
        replicas: _replicas,
        urls,
        _shared,
        db: _db,
        ..
    } = three();
    let c = &s.cluster;
    c.ok(&["endpoint", "create", "chat", "--scope", "public"]);
    let r = common::mcp_agent(
        &urls[1],
        &c.admin_token(),
        "delete-endpoint",
        &[
            "--endpoint",
            "chat",
            "--elicit",
            "none",
            "--with-token",
            "--confirm-url",
            &urls[2],
        ],
        &|| c.log(),
    );
    assert!(r["result"].is_object(), "{r:#}");
    let listed = c.json(&["endpoint", "list"]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["name"] != "chat"),
        "deleted through the other replica: {listed:#}"
    );
}
