//! Services and persistent endpoints end to end: busybox `httpd` in real containers on each
//! node's CNI bridge stands in for a model server; requests go through the server's proxy.
//! Hosts are given as `Host:` headers (`*.localhost` does not resolve here).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{model, Cluster};

fn curl(args: &[&str]) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "-m", "20", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn url(c: &Cluster, path: &str) -> String {
    format!("http://127.0.0.1:{}{path}", c.port)
}

fn endpoint(c: &Cluster, name: &str) -> serde_json::Value {
    c.json(&["endpoint", "show", name])
}

fn serving(c: &Cluster, name: &str, wf: &str) {
    c.wait_endpoint(name, &format!("{name} served by {wf}"), |e| {
        e["status"] == "SERVING" && e["workflow_id"] == wf && e["takeover"].is_null()
    });
}

#[test]
fn a_takeover_under_load_fails_no_request_and_the_old_workflow_ends_stopped() {
    let c = Cluster::up(2);
    c.ok(&[
        "endpoint",
        "create",
        "chat",
        "--scope",
        "public",
        "--drain-timeout",
        "30s",
    ]);
    let v1 = c.start_workflow(&c.write("v1.yaml", &model("v1", "chat", 0, 8080)));
    serving(&c, "chat", &v1);
    assert_eq!(curl(&[&url(&c, "/e/chat/")]), (200, "v1\n".into()));

    // A load generator keeps hitting the URL through the whole takeover.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen_v1 = Arc::new(AtomicUsize::new(0));
    let seen_v2 = Arc::new(AtomicUsize::new(0));
    let target = url(&c, "/e/chat/");
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (stop, failures, v1s, v2s, target) = (
                stop.clone(),
                failures.clone(),
                seen_v1.clone(),
                seen_v2.clone(),
                target.clone(),
            );
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) && n < 100_000 {
                    n += 1;
                    match curl(&[&target]) {
                        (200, b) if b == "v1\n" => v1s.fetch_add(1, Ordering::Relaxed),
                        (200, b) if b == "v2\n" => v2s.fetch_add(1, Ordering::Relaxed),
                        other => {
                            failures.lock().unwrap().push(format!("{other:?}"));
                            0
                        }
                    };
                }
            })
        })
        .collect();

    let v2 = c.start_workflow(&c.write("v2.yaml", &model("v2", "chat", 2, 8080)));
    serving(&c, "chat", &v2);
    c.wait_status(&v1, "STOPPED");
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    let failed = failures.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "{} failed requests: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(seen_v1.load(Ordering::Relaxed) > 0 && seen_v2.load(Ordering::Relaxed) > 0);
    // The same URL now answers from v2, by path and by host name.
    assert_eq!(curl(&[&url(&c, "/e/chat/")]), (200, "v2\n".into()));
    assert_eq!(
        curl(&["-H", "Host: chat.endpoints.localhost", &url(&c, "/")]),
        (200, "v2\n".into())
    );

    let history = c.json(&["endpoint", "history", "chat"]);
    let last = history.as_array().unwrap().last().unwrap();
    assert_eq!(last["phase"], "DONE");
    assert_eq!(last["from_workflow"], v1.as_str());
    assert_eq!(last["to_workflow"], v2.as_str());
    assert_eq!(last["requested_by"], "admin");
    assert_eq!(last["channel"], "cli");
    let events = c.ok(&["workflow", "events", &v1]);
    assert!(
        events.contains("endpoint chat now served by llm"),
        "{events}"
    );
}

#[test]
fn a_stream_begun_before_the_switch_completes_from_the_old_backend() {
    let c = Cluster::up(2);
    c.ok(&[
        "endpoint",
        "create",
        "sse",
        "--scope",
        "public",
        "--drain-timeout",
        "60s",
    ]);
    let v1 = c.start_workflow(&c.write("v1.yaml", &model("v1", "sse", 0, 8080)));
    serving(&c, "sse", &v1);
    let stream_url = url(&c, "/e/sse/cgi-bin/stream");
    let stream = std::thread::spawn(move || curl(&["-N", &stream_url]));
    std::thread::sleep(Duration::from_millis(1500));
    let v2 = c.start_workflow(&c.write("v2.yaml", &model("v2", "sse", 0, 8080)));
    serving(&c, "sse", &v2);
    // New requests already go to v2 while the old stream still runs on v1.
    assert_eq!(curl(&[&url(&c, "/e/sse/")]).1, "v2\n");
    let (code, body) = stream.join().unwrap();
    assert_eq!(code, 200);
    let events: Vec<&str> = body.lines().filter(|l| l.starts_with("data:")).collect();
    assert_eq!(
        events,
        (1..=6)
            .map(|i| format!("data: v1 {i}"))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
    );
    c.wait_status(&v1, "STOPPED");
}

#[test]
fn a_new_service_that_never_becomes_ready_leaves_the_old_one_serving() {
    let c = Cluster::up(2);
    c.ok(&["endpoint", "create", "steady", "--scope", "public"]);
    let v1 = c.start_workflow(&c.write("v1.yaml", &model("v1", "steady", 0, 8080)));
    serving(&c, "steady", &v1);
    // v2's probe asks a path its server does not have (404), once a second.
    let v2_file = model("v2", "steady", 0, 8080).replace("path: /,", "path: /notthere,");
    let v2 = c.start_workflow(&c.write("v2.yaml", &v2_file));
    // Why it is not ready is its task's reason, with how many checks failed so...
    let d = c.wait_for(&v2, "the probe's failures counted in the reason", |d| {
        d["tasks"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("times in a row"))
    });
    let reason = d["tasks"][0]["reason"].as_str().unwrap();
    assert_eq!(d["tasks"][0]["status"], "STARTED", "{d:#}");
    // The same as fields, for scripts (and `--watch`, which prints one line per outcome).
    let probe = &d["tasks"][0]["probe"];
    assert!(probe["count"].as_u64().is_some_and(|n| n >= 2), "{d:#}");
    assert!(
        probe["why"].as_str().is_some_and(|w| w.contains("404")),
        "{d:#}"
    );
    assert!(
        reason.starts_with("readiness probe: GET ")
            && reason.contains("/notthere")
            && reason.contains("404"),
        "{reason}"
    );
    // ... the endpoint's waiting takeover says the same ...
    let e = endpoint(&c, "steady");
    assert_eq!(e["workflow_id"], v1.as_str());
    assert_eq!(e["takeover"]["phase"], "WAITING_READY");
    let why = e["takeover"]["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains("readiness probe") && why.contains("404"),
        "{e:#}"
    );
    let shown = c.ok(&["endpoint", "show", "steady"]);
    assert!(shown.contains("404"), "{shown}");
    // ... and the events have it once: one per change of outcome, not every failed check
    // (the first checks may find nothing listening yet, which is an outcome of its own).
    let events = c.json(&["workflow", "events", &v2]);
    let outcomes: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "probe.failed")
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert!(
        !outcomes.is_empty() && outcomes.windows(2).all(|w| w[0] != w[1]),
        "{events:#}"
    );
    assert!(outcomes.last().unwrap().contains("404"), "{events:#}");
    assert_eq!(
        outcomes.iter().filter(|m| m.contains("404")).count(),
        1,
        "{events:#}"
    );
    assert_eq!(curl(&[&url(&c, "/e/steady/")]).1, "v1\n");
    c.ok(&["workflow", "stop", &v2, "--yes"]);
    c.wait_endpoint("steady", "the takeover failed", |e| e["takeover"].is_null());
    let last = c.json(&["endpoint", "history", "steady"]);
    let last = last.as_array().unwrap().last().unwrap();
    assert_eq!(last["phase"], "FAILED");
    assert!(
        last["reason"].as_str().unwrap().contains("keeps serving"),
        "{last:#}"
    );
    assert_eq!(curl(&[&url(&c, "/e/steady/")]).1, "v1\n");
    assert_eq!(c.detail(&v1)["status"], "RUNNING");
}

#[test]
fn takeovers_can_wait_for_a_person() {
    let c = Cluster::up(2);
    c.ok(&[
        "endpoint",
        "create",
        "careful",
        "--scope",
        "public",
        "--confirm",
    ]);
    let v1 = c.start_workflow(&c.write("v1.yaml", &model("v1", "careful", 0, 8080)));
    serving(&c, "careful", &v1);
    let v2 = c.start_workflow(&c.write("v2.yaml", &model("v2", "careful", 0, 8080)));
    c.wait_endpoint("careful", "awaiting confirmation", |e| {
        e["takeover"]["phase"] == "AWAITING_CONFIRMATION"
    });
    assert_eq!(
        curl(&[&url(&c, "/e/careful/")]).1,
        "v1\n",
        "nothing switches without approval"
    );
    let t = c.json(&["endpoint", "approve", "careful"]);
    assert_eq!(t["confirmed_by"], "admin");
    assert_eq!(
        t["confirmed_via"], "cli",
        "the CLI says so in x-gantry-channel"
    );
    serving(&c, "careful", &v2);
    assert_eq!(curl(&[&url(&c, "/e/careful/")]).1, "v2\n");

    // A rejected takeover changes nothing and its workflow stops.
    let v3 = c.start_workflow(&c.write("v3.yaml", &model("v3", "careful", 0, 8080)));
    c.wait_endpoint("careful", "awaiting confirmation", |e| {
        e["takeover"]["phase"] == "AWAITING_CONFIRMATION"
    });
    c.ok(&["endpoint", "reject", "careful"]);
    c.wait_status(&v3, "STOPPED");
    assert_eq!(curl(&[&url(&c, "/e/careful/")]).1, "v2\n");
    let h = c.json(&["endpoint", "history", "careful"]);
    assert_eq!(h.as_array().unwrap().last().unwrap()["phase"], "CANCELLED");
}

#[test]
fn scopes_and_tokens_are_enforced_and_tokens_never_reach_the_backend() {
    let c = Cluster::up(1);
    c.ok(&["endpoint", "create", "private", "--scope", "user"]);
    let v1 = c.start_workflow(&c.write("v1.yaml", &model("v1", "private", 0, 8080)));
    serving(&c, "private", &v1);
    let admin = std::fs::read_to_string(c.data_dir().join("context.toml")).unwrap();
    let admin = admin
        .lines()
        .find_map(|l| l.strip_prefix("token = "))
        .unwrap()
        .trim_matches('"')
        .to_string();
    let eve = c.json(&["admin", "user", "create", "eve"])["token"]
        .as_str()
        .unwrap()
        .to_string();
    let ep_token = c
        .ok(&["endpoint", "token", "private", "--expires", "1h"])
        .trim()
        .to_string();

    let get = |token: Option<&str>| {
        let mut args = vec![];
        let h;
        if let Some(t) = token {
            h = format!("Authorization: Bearer {t}");
            args.push("-H");
            args.push(h.as_str());
        }
        let u = url(&c, "/e/private/cgi-bin/echo");
        args.push(&u);
        curl(&args)
    };
    assert_eq!(get(None).0, 401);
    assert_eq!(get(Some("not-a-token")).0, 401);
    assert!(
        matches!(get(Some(&eve)).0, 403 | 404),
        "another user's token"
    );
    let (code, body) = get(Some(&admin));
    assert_eq!(code, 200);
    assert!(
        body.contains("auth=[]"),
        "the token must not reach the backend: {body}"
    );
    assert!(body.contains("prefix=[/e/private]"), "{body}");
    assert!(
        body.contains("uri=[/cgi-bin/echo]"),
        "the prefix is stripped: {body}"
    );
    let (code, body) = get(Some(&ep_token));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("auth=[]"), "{body}");

    // Endpoint tokens are listed by id (never the secret), revoked and expire: the proxy
    // refuses each with a 401 that says why.
    let short = c.json(&["endpoint", "token", "create", "private", "--expires", "2s"]);
    let short_token = short["token"].as_str().unwrap().to_string();
    let doomed = c.json(&["endpoint", "token", "private"]);
    let doomed_token = doomed["token"].as_str().unwrap().to_string();
    assert!(
        doomed["expires_at"].is_string(),
        "the default expiry applies: {doomed}"
    );
    let listed = c.json(&["endpoint", "token", "list", "private"]);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{listed}");
    assert!(ids.contains(&doomed["id"].as_str().unwrap()), "{listed}");
    assert!(!listed.to_string().contains(&doomed_token[7..]), "{listed}");
    assert_eq!(c.json(&["endpoint", "token", "list"]), listed);
    // Eve may neither list nor revoke them.
    let as_eve = |args: &[&str]| {
        std::process::Command::new(common::GANTRY)
            .args(args)
            .env("GANTRY_URL", format!("http://127.0.0.1:{}", c.port))
            .env("GANTRY_TOKEN", &eve)
            .output()
            .unwrap()
    };
    assert!(!as_eve(&["endpoint", "token", "list", "private"])
        .status
        .success());
    let doomed_id = doomed["id"].as_str().unwrap();
    assert!(!as_eve(&["endpoint", "token", "revoke", doomed_id])
        .status
        .success());
    assert_eq!(
        get(Some(&doomed_token)).0,
        200,
        "eve's revoke changed nothing"
    );
    c.ok(&["endpoint", "token", "revoke", doomed_id]);
    let (code, body) = get(Some(&doomed_token));
    assert_eq!(code, 401, "a revoked endpoint token: {body}");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, body) = get(Some(&short_token));
    assert_eq!(code, 401, "an expired endpoint token: {body}");
    assert!(body.contains("token expired on "), "{body}");

    // A disabled user's token is refused by the proxy too, and works again once enabled.
    let users = c.json(&["admin", "user", "list"]);
    assert!(
        users.as_array().unwrap().iter().any(|u| u["name"] == "eve"),
        "{users}"
    );
    c.ok(&["admin", "user", "disable", "eve"]);
    assert!(!as_eve(&["workflow", "list"]).status.success());
    let (code, body) = get(Some(&eve));
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("eve is disabled"), "{body}");
    c.ok(&["admin", "user", "enable", "eve"]);
    assert!(as_eve(&["workflow", "list"]).status.success());
    let eve_tokens = c.json(&["admin", "token", "list", "--user", "eve"]);
    let eve_id = eve_tokens[0]["id"].as_str().unwrap().to_string();
    let rotated = c.json(&["admin", "token", "rotate", &eve_id]);
    assert_eq!(rotated["info"]["id"], eve_id.as_str());
    assert!(
        !as_eve(&["workflow", "list"]).status.success(),
        "the old secret"
    );
    let eve = rotated["token"].as_str().unwrap().to_string();
    let out = std::process::Command::new(common::GANTRY)
        .args(["workflow", "list"])
        .env("GANTRY_URL", format!("http://127.0.0.1:{}", c.port))
        .env("GANTRY_TOKEN", &eve)
        .output()
        .unwrap();
    assert!(out.status.success(), "the new secret works");

    // Eve may not take the endpoint over: refused at submit.
    let file = c.write("eve.yaml", &model("eve", "private", 0, 8080));
    let out = std::process::Command::new(common::GANTRY)
        .args(["workflow", "start", file.to_str().unwrap()])
        .env("GANTRY_URL", format!("http://127.0.0.1:{}", c.port))
        .env("GANTRY_TOKEN", &eve)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("private"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Stopping a serving workflow without a terminal to ask on is refused without --yes
    // (exit 2, naming the endpoint), and nothing stops.
    let out = c.gantry(&["workflow", "stop", &v1]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--yes") && err.contains("private"), "{err}");
    serving(&c, "private", &v1);

    // No backend: a clear 503.
    c.ok(&["workflow", "stop", &v1, "--yes"]);
    // A stopped serving workflow leaves the endpoint IDLE (not FAILED), saying which and how.
    let e = c.wait_endpoint("private", "idle", |e| {
        e["status"] == "IDLE"
            && e["reason"]
                .as_str()
                .is_some_and(|r| r.contains("was stopped"))
    });
    let why = e["reason"].as_str().unwrap();
    assert!(why.contains(&v1[..8]), "{why}");
    let (code, body) = get(Some(&admin));
    assert_eq!(code, 503);
    assert!(body.contains("no backend"), "{body}");
}

#[test]
fn jobs_reach_services_by_name_and_per_workflow_endpoints_keep_their_path() {
    let c = Cluster::up(2);
    let file = c.write(
        "svc.yaml",
        r#"version: v4
services:
  web:
    image: { uri: docker://busybox:1 }
    persist: true
    script: |
      #!/bin/sh
      mkdir -p /www$FB_ENDPOINT_PATH_SITE
      echo "hello from web" > /www$FB_ENDPOINT_PATH_SITE/index.html
      echo "$FB_ENDPOINT_URL_SITE" > /www$FB_ENDPOINT_PATH_SITE/url
      exec httpd -f -p 8080 -h /www
    network:
      ports: [ { name: http, port: 8080 } ]
      endpoints: [ { name: site, port-name: http, protocol: http, type: path, scope: user } ]
    readiness-probe:
      tcp-socket: { port: 8080 }
jobs:
  client:
    image: { uri: docker://busybox:1 }
    depends-on: [ { name: web, status: RUNNING } ]
    script: |
      #!/bin/sh
      wget -q -O - "http://web.svc:8080/w/$FB_WORKFLOW_ID/site/"
"#,
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "client FINISHED", |d| {
        Cluster::task(d, "client")["status"] == "FINISHED"
    });
    assert_eq!(
        Cluster::task(&d, "web")["status"],
        "RUNNING",
        "a persistent service keeps running"
    );
    assert_eq!(
        c.ok(&["workflow", "log", &id, "client"]).trim(),
        "hello from web"
    );

    // Through the server's proxy the path is kept whole, as FB_ENDPOINT_PATH_SITE says.
    let admin = std::fs::read_to_string(c.data_dir().join("context.toml")).unwrap();
    let admin = admin
        .lines()
        .find_map(|l| l.strip_prefix("token = "))
        .unwrap()
        .trim_matches('"')
        .to_string();
    let auth = format!("Authorization: Bearer {admin}");
    let site = url(&c, &format!("/w/{id}/site/"));
    assert_eq!(
        curl(&["-H", &auth, &site]),
        (200, "hello from web\n".into())
    );
    let (code, told) = curl(&["-H", &auth, &format!("{site}url")]);
    assert_eq!(code, 200);
    assert_eq!(told.trim(), site);
    assert_eq!(
        curl(&[&site]).0,
        401,
        "a user-scoped endpoint needs a token"
    );
    c.ok(&["workflow", "stop", &id, "--yes"]);
    c.wait_status(&id, "STOPPED");
}

#[test]
fn two_workflows_use_one_port_on_one_node_and_subdomains_route_by_host() {
    let c = Cluster::up(1);
    let svc = |word: &str| {
        format!(
            r#"version: v4
services:
  web:
    image: {{ uri: docker://busybox:1 }}
    persist: true
    script: |
      #!/bin/sh
      mkdir -p /www && echo {word} > /www/index.html && exec httpd -f -p 8080 -h /www
    network:
      ports: [ {{ name: http, port: 8080 }} ]
      endpoints: [ {{ name: site, port-name: http, protocol: http, type: subdomain, scope: public }} ]
    readiness-probe:
      http-get: {{ path: /, port: 8080 }}
      period-seconds: 1
"#
        )
    };
    let a = c.start_workflow(&c.write("a.yaml", &svc("alpha")));
    let b = c.start_workflow(&c.write("b.yaml", &svc("beta")));
    for id in [&a, &b] {
        c.wait_for(id, "web RUNNING", |d| {
            Cluster::task(d, "web")["status"] == "RUNNING"
        });
    }
    let (na, nb) = (
        Cluster::task(&c.detail(&a), "web")["node"].clone(),
        Cluster::task(&c.detail(&b), "web")["node"].clone(),
    );
    assert_eq!(na, nb, "both on the one node, both on port 8080");
    let host = |id: &str| format!("Host: site-{}.endpoints.localhost", &id[..8]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ra, rb) = (
            curl(&["-H", &host(&a), &url(&c, "/")]),
            curl(&["-H", &host(&b), &url(&c, "/")]),
        );
        if ra == (200, "alpha\n".into()) && rb == (200, "beta\n".into()) {
            break;
        }
        assert!(Instant::now() < deadline, "{ra:?} {rb:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    c.ok(&["workflow", "stop", &a, "--yes"]);
    c.ok(&["workflow", "stop", &b, "--yes"]);
}

#[test]
fn stop_first_stops_the_old_workflow_before_the_new_one_takes_over() {
    let c = Cluster::up(2);
    c.ok(&[
        "endpoint",
        "create",
        "tight",
        "--scope",
        "public",
        "--mode",
        "stop-first",
    ]);
    let v1 = c.start_workflow(&c.write("v1.yaml", &model("v1", "tight", 0, 8080)));
    serving(&c, "tight", &v1);
    let v2 = c.start_workflow(&c.write("v2.yaml", &model("v2", "tight", 3, 8080)));
    // The old workflow goes first; until the new one is ready, the endpoint has no backend.
    c.wait_status(&v1, "STOPPED");
    serving(&c, "tight", &v2);
    assert_eq!(curl(&[&url(&c, "/e/tight/")]).1, "v2\n");
    let h = c.json(&["endpoint", "history", "tight"]);
    let last = h.as_array().unwrap().last().unwrap();
    assert_eq!(
        (last["phase"].as_str(), last["mode"].as_str()),
        (Some("DONE"), Some("stop-first"))
    );

    // Deleting asks first: without a terminal and --yes it is refused and the URL still
    // answers.
    let out = c.gantry(&["endpoint", "delete", "tight"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--yes") && err.contains("stops serving"),
        "{err}"
    );
    assert_eq!(curl(&[&url(&c, "/e/tight/")]).1, "v2\n");

    // Deleting the endpoint ends its URL.
    c.ok(&["endpoint", "delete", "tight", "--yes"]);
    assert_eq!(curl(&[&url(&c, "/e/tight/")]).0, 404);
    assert!(!c.gantry(&["endpoint", "show", "tight"]).status.success());
}

#[test]
fn a_cleanly_stopped_node_gives_back_its_bridge_unless_containers_still_run() {
    let mut c = Cluster::up(1);
    let bridge = c.bridges().pop().unwrap();
    let present = || {
        std::path::Path::new("/sys/class/net")
            .join(&bridge)
            .exists()
    };
    let svc = c.write(
        "svc.yaml",
        r#"version: v4
services:
  web:
    image: { uri: docker://busybox:1 }
    persist: true
    command: ["httpd", "-f", "-p", "8080"]
    network:
      ports: [ { name: http, port: 8080 } ]
"#,
    );
    let wf = c.start_workflow(&svc);
    c.wait_for(&wf, "the service RUNNING", |d| {
        Cluster::task(d, "web")["status"] == "RUNNING"
    });
    assert!(present(), "the service's network made no bridge {bridge}");

    // Containers outlive their agent: stopped while one runs, the node keeps its bridge.
    assert!(c.interrupt().success(), "{}", c.log());
    assert!(
        present(),
        "bridge {bridge} removed under a running container"
    );

    c.start();
    c.ok(&["workflow", "stop", &wf, "--yes"]);
    c.wait_status(&wf, "STOPPED");
    let agent = std::fs::read_dir(c.data_dir().join("agents"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let deadline = Instant::now() + Duration::from_secs(30);
    // The container, then its network attachment, are removed once the stop is reported.
    for dir in ["runtime/containers", "net/attachments"] {
        assert!(agent.join(dir).is_dir(), "no {dir} in {}", agent.display());
        while std::fs::read_dir(agent.join(dir)).is_ok_and(|mut d| d.next().is_some()) {
            assert!(
                Instant::now() < deadline,
                "the stopped service was never removed"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Nothing left on the node: a clean stop takes the bridge and its /24 route with it.
    assert!(c.interrupt().success(), "{}", c.log());
    assert!(
        !present(),
        "bridge {bridge} left behind by an idle node: {}",
        c.log()
    );
}
