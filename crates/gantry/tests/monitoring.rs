//! Node health against the real stack: `gantry up --monitoring` runs Debian's Prometheus,
//! Alertmanager and a Node Exporter per agent with the shipped rules and routes, plus test
//! rules on metrics the tests raise through each node's textfile collector. Five agents, so
//! monitoring's cap is one node. Waits are generous; nothing asserts a duration.

mod common;

use std::time::{Duration, Instant};

use common::Cluster;

const TEST_RULES: &str = r#"groups:
  - name: gantry-e2e
    rules:
      - alert: TestCordon
        expr: gantry_test_cordon{job="node"} == 1
        labels: { gantry_hold: cordon, gantry_release: auto }
        annotations: { summary: "test cordon on {{ $labels.node }}" }
      - alert: TestEvict
        expr: gantry_test_evict{job="node"} == 1
        labels: { gantry_hold: evict, gantry_release: auto }
        annotations: { summary: "test evict on {{ $labels.node }}" }
      - alert: TestHardware
        expr: gantry_test_hardware{job="node"} == 1
        labels: { gantry_hold: cordon, gantry_release: admin }
        annotations: { summary: "test hardware fault on {{ $labels.node }}" }
"#;

fn stack() -> Cluster {
    let rules = std::env::temp_dir().join(format!("gantry-e2e-rules-{}.yml", std::process::id()));
    std::fs::write(&rules, TEST_RULES).unwrap();
    Cluster::up_with(
        5,
        vec![
            "--monitoring".into(),
            "--monitoring-interval".into(),
            "1s".into(),
            "--monitoring-rules".into(),
            rules.to_string_lossy().into_owned(),
        ],
    )
}

fn names(c: &Cluster) -> Vec<String> {
    c.json(&["node", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect()
}

/// Raises (or clears) a metric on one node through its Node Exporter's textfile collector.
fn raise(c: &Cluster, node: &str, metric: &str, on: bool) {
    let dir = c.data_dir().join("agents").join(node).join("textfile");
    let file = dir.join(format!("{metric}.prom"));
    if on {
        let tmp = dir.join(format!(".{metric}.tmp"));
        std::fs::write(&tmp, format!("{metric} 1\n")).unwrap();
        std::fs::rename(tmp, file).unwrap();
    } else {
        let _ = std::fs::remove_file(file);
    }
}

fn state(c: &Cluster, node: &str) -> String {
    c.json(&["node", "show", node])["state"]
        .as_str()
        .unwrap()
        .to_string()
}

fn wait_state(c: &Cluster, node: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = state(c, node);
        if s == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{node} stayed {s}, wanted {want}: {}",
            c.ok(&["node", "show", node])
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_firing_rule_cordons_its_node_and_the_resolve_releases_it() {
    let c = stack();
    let n = names(&c);
    let target = &n[1];
    // Prometheus finds every agent and node exporter through Gantry's service discovery.
    let sd = c.json(&["node", "list"]);
    assert_eq!(sd.as_array().unwrap().len(), 5);

    raise(&c, target, "gantry_test_cordon", true);
    wait_state(&c, target, "CORDONED");
    let shown = c.json(&["node", "show", target]);
    let hold = &shown["holds"][0];
    assert_eq!(hold["source"], "monitoring");
    assert_eq!(hold["alertname"], "TestCordon");
    assert_eq!(hold["reason"], format!("test cordon on {target}"));
    assert!(hold["fingerprint"].is_string());

    // The held node receives no new work.
    let arr = c.write(
        "arr.yaml",
        "version: v4\njobs:\n  many:\n    image: { uri: docker://busybox:1 }\n    command: [ \"true\" ]\n    task-array: { start: 1, end: 8 }\n",
    );
    let id = c.start_workflow(&arr);
    let d = c.wait_status(&id, "FINISHED");
    for t in d["tasks"].as_array().unwrap() {
        assert_ne!(t["node"].as_str().unwrap(), target.as_str());
    }

    raise(&c, target, "gantry_test_cordon", false);
    wait_state(&c, target, "READY");
    let history = c.json(&["node", "show", target]);
    assert_eq!(history["hold_history"][0]["released_by"], "monitoring");
}

#[test]
fn an_admin_release_rule_waits_for_an_admin_and_all_nodes_firing_hold_only_the_cap() {
    let c = stack();
    let n = names(&c);
    raise(&c, &n[0], "gantry_test_hardware", true);
    wait_state(&c, &n[0], "CORDONED");
    raise(&c, &n[0], "gantry_test_hardware", false);
    // Resolved: the hold stays, marked for an administrator.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let shown = c.json(&["node", "show", &n[0]]);
        if shown["holds"][0]["alert_resolved_at"].is_string() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the resolve never arrived: {shown:#}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(state(&c, &n[0]), "CORDONED");
    c.ok(&["node", "release", &n[0], "--reason", "board replaced"]);
    assert_eq!(state(&c, &n[0]), "READY");

    // Every node fires at once: monitoring holds only one of five; the rest are deferred.
    for node in &n {
        raise(&c, node, "gantry_test_cordon", true);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let nodes = c.json(&["node", "list"]);
        let holds: Vec<&serde_json::Value> = nodes
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|n| n["holds"].as_array().unwrap())
            .collect();
        if holds.len() == 5 {
            let active = holds.iter().filter(|h| h["state"] == "ACTIVE").count();
            let deferred = holds.iter().filter(|h| h["state"] == "DEFERRED").count();
            assert_eq!((active, deferred), (1, 4), "{nodes:#}");
            let held = nodes
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| n["state"] != "READY")
                .count();
            assert_eq!(held, 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every alert arrived: {nodes:#}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    for node in &n {
        raise(&c, node, "gantry_test_cordon", false);
    }
    for node in &n {
        wait_state(&c, node, "READY");
    }
}

#[test]
fn an_evict_rule_moves_retry_on_node_steps_and_fails_the_others() {
    let c = stack();
    let file = c.write(
        "evict.yaml",
        r#"version: v4
volumes:
  state: {}
jobs:
  movable:
    image: { uri: docker://busybox:1 }
    mounts: { /state: { volume: state } }
    # The first run waits to be evicted; the restart finishes.
    script: |
      #!/bin/sh
      if [ -e /state/ran ]; then echo "restarted"; exit 0; fi
      touch /state/ran
      sleep 600
    policy:
      retry: { attempts: 2, on: [ node ] }
  pinned:
    image: { uri: docker://busybox:1 }
    command: [ sleep, "600" ]
"#,
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "both RUNNING", |d| {
        Cluster::task(d, "movable")["status"] == "RUNNING"
            && Cluster::task(d, "pinned")["status"] == "RUNNING"
    });
    let m = Cluster::task(&d, "movable")["node"]
        .as_str()
        .unwrap()
        .to_string();
    let p = Cluster::task(&d, "pinned")["node"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(m, p, "one core per agent: the two land apart");

    raise(&c, &m, "gantry_test_evict", true);
    let d = c.wait_for(&id, "movable moved", |d| {
        Cluster::task(d, "movable")["attempts"]
            .as_array()
            .unwrap()
            .len()
            == 2
    });
    let first = &Cluster::task(&d, "movable")["attempts"][0];
    assert_eq!(first["cause"], "EVICTED");
    raise(&c, &m, "gantry_test_evict", false);
    wait_state(&c, &m, "READY");

    raise(&c, &p, "gantry_test_evict", true);
    let d = c.wait_status(&id, "FAILED");
    let movable = Cluster::task(&d, "movable");
    assert_eq!(movable["status"], "FINISHED", "{movable:#}");
    assert_ne!(
        movable["attempts"][1]["node"],
        movable["attempts"][0]["node"]
    );
    let pinned = Cluster::task(&d, "pinned");
    assert_eq!(pinned["status"], "FAILED");
    let reason = pinned["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("evicted from node {p}")) && reason.contains("TestEvict"),
        "{reason}"
    );
    let events = c.ok(&["workflow", "events", &id]);
    assert!(events.contains(&format!("test evict on {p}")), "{events}");
    raise(&c, &p, "gantry_test_evict", false);
}

/// `gantry monitoring export`, then the real tools on what it wrote.
#[test]
fn export_writes_files_promtool_and_amtool_accept_and_keeps_differing_files_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let token = tmp.path().join("prometheus.token");
    std::fs::write(&token, "t\n").unwrap();
    let export = |extra: &[&str]| {
        std::process::Command::new(common::GANTRY)
            .args(["monitoring", "export"])
            .arg(&dir)
            .args([
                "--server",
                "http://10.0.0.10:7070",
                "--alertmanager",
                "127.0.0.1:9093",
                "--token-file",
                token.to_str().unwrap(),
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    // Bad input: a clear error, nothing written.
    let bad = std::process::Command::new(common::GANTRY)
        .args(["monitoring", "export"])
        .arg(&dir)
        .args(["--server", "10.0.0.10:7070"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("http://HOST:PORT"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(!dir.exists());
    // No flags: every placeholder stays, and the output names them.
    let bare = std::process::Command::new(common::GANTRY)
        .args(["monitoring", "export"])
        .arg(tmp.path().join("bare"))
        .output()
        .unwrap();
    assert!(bare.status.success());
    let said = String::from_utf8_lossy(&bare.stdout);
    for p in [
        "{{SERVER}}",
        "{{TOKEN_FILE}}",
        "{{ALERTMANAGER}}",
        "{{WEBHOOK_URL}}",
        "{{WEBHOOK_TOKEN_FILE}}",
    ] {
        assert!(said.contains(p), "{p}: {said}");
    }
    let prom = std::fs::read_to_string(tmp.path().join("bare/prometheus.yml")).unwrap();
    assert!(prom.contains(r#"targets: ["{{SERVER}}"]"#), "{prom}");

    let out = export(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in [
        "prometheus.yml",
        "alertmanager.yml",
        "rules/gantry-node-health.yml",
        "dashboards/gantry-cluster-health.json",
        "dashboards/gantry-holds.json",
        "dashboards/gantry-node.json",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing");
        assert!(stdout.contains(f), "{f} not reported: {stdout}");
    }
    assert!(stdout.contains("Next steps"), "{stdout}");
    let am = std::fs::read_to_string(dir.join("alertmanager.yml")).unwrap();
    assert!(am.contains("http://10.0.0.10:7070/api/v1/monitoring/alertmanager"));
    // Every placeholder filled (the header comments still name them, as documentation).
    for f in ["alertmanager.yml", "prometheus.yml"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        let left: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#') && l.contains("{{"))
            .collect();
        assert!(left.is_empty(), "{f}: {left:?}");
    }

    let tool = |args: &[&str]| {
        let o = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", args[0]));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "{args:?}: {text}");
        text
    };
    let d = dir.to_str().unwrap();
    let checked = tool(&[
        "promtool",
        "check",
        "config",
        &format!("{d}/prometheus.yml"),
    ]);
    assert!(checked.contains("1 rule files found"), "{checked}");
    tool(&[
        "promtool",
        "check",
        "rules",
        &format!("{d}/rules/gantry-node-health.yml"),
    ]);
    tool(&["amtool", "check-config", &format!("{d}/alertmanager.yml")]);

    // Same values again: nothing differs, so no --force is needed.
    assert!(export(&[]).status.success());
    // An edited file stays unless --force, and nothing else is written meanwhile.
    let rules = dir.join("rules/gantry-node-health.yml");
    std::fs::write(&rules, "groups: []\n").unwrap();
    std::fs::remove_file(dir.join("dashboards/gantry-node.json")).unwrap();
    let refused = export(&[]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("gantry-node-health.yml") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&rules).unwrap(), "groups: []\n");
    assert!(!dir.join("dashboards/gantry-node.json").exists());
    assert!(export(&["--force"]).status.success());
    assert_ne!(std::fs::read_to_string(&rules).unwrap(), "groups: []\n");
}

#[test]
fn a_taken_prometheus_port_is_refused_before_anything_starts() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::GANTRY)
        .args(["up", "--monitoring", "--listen"])
        .arg(format!("127.0.0.1:{}", common::free_port()))
        .arg("--data-dir")
        .arg(tmp.path())
        .args(["--prometheus-listen", &addr])
        .env("HOME", tmp.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--prometheus-listen") && err.contains(&addr) && err.contains("cannot listen"),
        "{err}"
    );
    assert!(!tmp.path().join("monitoring").exists());
}

/// Metric names an expression selects. promtool parses PromQL but cannot list its names, so
/// this walks the expression: strings, `{...}` matchers, `[...]` ranges, the label lists of
/// `by`/`without`/`on`/`ignoring`/`group_left`/`group_right`, Grafana's `$variables`, numbers,
/// keywords and every identifier followed by `(` (a function or aggregation) are skipped; what
/// is left names a metric.
fn metric_names(expr: &str) -> Vec<String> {
    const KEYWORDS: &[&str] = &[
        // Aggregations, which may be followed by `by (...)` before their parenthesis.
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "inf",
        "nan",
        "start",
        "end",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "atan2",
    ];
    const LABEL_LISTS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let b: Vec<char> = expr.chars().collect();
    let mut names = vec![];
    let mut i = 0;
    let skip_to = |i: usize, close: char| -> usize {
        let mut j = i;
        while j < b.len() && b[j] != close {
            if b[j] == '"' || b[j] == '\'' || b[j] == '`' {
                let q = b[j];
                j += 1;
                while j < b.len() && b[j] != q {
                    if b[j] == '\\' {
                        j += 1;
                    }
                    j += 1;
                }
            }
            j += 1;
        }
        j + 1
    };
    while i < b.len() {
        let c = b[i];
        if c == '"' || c == '\'' || c == '`' {
            i += 1;
            while i < b.len() && b[i] != c {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '{' {
            i = skip_to(i + 1, '}');
        } else if c == '[' {
            i = skip_to(i + 1, ']');
        } else if c == '$' {
            i += 1;
            if i < b.len() && b[i] == '{' {
                i = skip_to(i + 1, '}');
            } else {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() || (c == '.' && i + 1 < b.len() && b[i + 1].is_ascii_digit()) {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '_' || b[i] == ':') {
                i += 1;
            }
            let word: String = b[start..i].iter().collect();
            let mut j = i;
            while j < b.len() && b[j].is_whitespace() {
                j += 1;
            }
            let call = j < b.len() && b[j] == '(';
            if LABEL_LISTS.contains(&word.as_str()) && call {
                i = skip_to(j + 1, ')');
            } else if !call && !KEYWORDS.contains(&word.as_str()) {
                names.push(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn the_metric_name_walker_skips_what_is_not_a_metric() {
    let mut got = metric_names(
        r#"sum by (node, pool) (rate(gantry_webhook_requests_total{code=~"5..", x="a}b"}[$__rate_interval] offset 5m)) / on (node) group_left (pool) max without (gpu) (node_memory_MemTotal_bytes{node="$node"}) > bool 0.5 and 1e3 < label_replace(up, "a", "$1", "b", "(.*)") or vector(1) unless ALERTS"#,
    );
    got.sort();
    assert_eq!(
        got,
        [
            "ALERTS",
            "gantry_webhook_requests_total",
            "node_memory_MemTotal_bytes",
            "up"
        ]
    );
}

/// Every PromQL expression of the shipped dashboards and rules, as (where, expression).
fn shipped_expressions() -> Vec<(String, String)> {
    let mon = common::repo_root().join("deploy/monitoring");
    let mut out = vec![];
    for e in std::fs::read_dir(mon.join("dashboards")).unwrap() {
        let path = e.unwrap().path();
        let d: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut panels: Vec<&serde_json::Value> = vec![];
        for p in d["panels"].as_array().unwrap() {
            panels.push(p);
            panels.extend(p["panels"].as_array().into_iter().flatten());
        }
        for p in panels {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(x) = t["expr"].as_str() {
                    out.push((format!("{file}: panel {}", p["title"]), x.to_string()));
                }
            }
        }
        for v in d["templating"]["list"].as_array().into_iter().flatten() {
            if v["type"] != "query" {
                continue;
            }
            let q = v["query"]["query"]
                .as_str()
                .or(v["query"].as_str())
                .unwrap_or("");
            // label_values(SELECTOR, LABEL) and query_result(EXPR): the part that is PromQL.
            let inner = q
                .trim()
                .strip_prefix("label_values(")
                .map(|r| r.rsplit_once(',').map_or(r, |(s, _)| s))
                .or_else(|| q.trim().strip_prefix("query_result("))
                .unwrap_or("");
            out.push((format!("{file}: variable {}", v["name"]), inner.to_string()));
        }
    }
    // YAML through python3-yaml (what check-monitoring.sh uses): the test crate has no YAML
    // parser of its own.
    let rules = std::process::Command::new("python3")
        .args([
            "-c",
            "import json,sys,yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(mon.join("rules/gantry-node-health.yml"))
        .output()
        .unwrap();
    assert!(
        rules.status.success(),
        "{}",
        String::from_utf8_lossy(&rules.stderr)
    );
    let rules: serde_json::Value = serde_json::from_slice(&rules.stdout).unwrap();
    for g in rules["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            let name = r["alert"].as_str().or(r["record"].as_str()).unwrap_or("?");
            out.push((
                format!("rules: {name}"),
                r["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

/// Names a dashboard or rule may use that no scrape of this machine shows. Each needs a
/// reason; nothing else is excused.
fn excused(name: &str) -> bool {
    // GPUs: the agent exports these only for the GPUs NVML reports (none here), as DCGM does.
    name.starts_with("gantry_gpu_") || name.starts_with("DCGM_")
        // Node Exporter collectors that report only with the hardware present: EDAC memory
        // controllers and hwmon sensors with critical limits (absent in VMs and containers).
        || name.starts_with("node_edac_")
        || name.starts_with("node_hwmon_")
}

/// The web UI's Nodes page, signed in afresh (web_page's sign-in form is only shown to a new
/// session).
fn nodes_page(c: &Cluster) -> String {
    let _ = std::fs::remove_file(c.data_dir().join("web-cookies.txt"));
    c.web_page("/nodes")
}

/// `gantry up --monitoring` on fixed ports: every URL it prints answers, the files land in
/// `<data-dir>/monitoring/`, the web UI's Nodes page links to the stack, and every metric name
/// the dashboards and rules use is one that Prometheus really scraped from Gantry and the
/// Node Exporters.
#[test]
fn fixed_ports_answer_the_nodes_page_links_them_and_every_shipped_metric_is_exported() {
    let (prom_port, am_port) = (common::free_port(), common::free_port());
    let mut c = Cluster::up_with(
        2,
        vec![
            "--monitoring".into(),
            "--monitoring-interval".into(),
            "1s".into(),
            "--prometheus-listen".into(),
            format!("127.0.0.1:{prom_port}"),
            "--alertmanager-listen".into(),
            format!("127.0.0.1:{am_port}"),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !c.log().contains("monitoring files:") {
        assert!(Instant::now() < deadline, "no URLs printed: {}", c.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = c.log();
    let url_of = |label: &str| -> Vec<String> {
        log.lines()
            .filter(|l| l.trim_start().starts_with(label))
            .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("http://")))
            .map(str::to_string)
            .collect()
    };
    let prom = format!("http://127.0.0.1:{prom_port}");
    let am = format!("http://127.0.0.1:{am_port}");
    assert_eq!(url_of("prometheus:"), std::slice::from_ref(&prom), "{log}");
    assert_eq!(url_of("alertmanager:"), std::slice::from_ref(&am), "{log}");
    let exporters = url_of("node exporter ");
    assert_eq!(exporters.len(), 2, "{log}");
    let get = |url: &str| {
        let o = std::process::Command::new("curl")
            .args(["-sS", "--fail", "--max-time", "10", url])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    get(&format!("{prom}/-/ready"));
    get(&format!("{am}/-/ready"));
    for e in &exporters {
        assert!(get(e).contains("node_exporter_build_info"), "{e}");
    }
    let files = c.data_dir().join("monitoring");
    for f in [
        "prometheus.yml",
        "alertmanager.yml",
        "rules/gantry-node-health.yml",
        "dashboards/gantry-node.json",
    ] {
        assert!(files.join(f).is_file(), "{f}");
    }

    // The Nodes page links to what `gantry up` configured, and to Grafana once one is set.
    let page = nodes_page(&c);
    assert!(page.contains(&format!(r#"href="{prom}""#)), "{page}");
    assert!(page.contains(&format!(r#"href="{am}""#)), "{page}");
    assert!(!page.contains(">Grafana<"), "{page}");
    // Attack: a normal user of another group may not point everyone's links elsewhere.
    let mallory = c.user_token("mallory", "other");
    let refused = c.as_user(
        &mallory,
        &[
            "admin",
            "settings",
            "set",
            "monitoring.grafana_url=https://evil.example",
        ],
    );
    assert!(!refused.status.success());
    assert!(!nodes_page(&c).contains("evil.example"));
    let bad = c.gantry(&[
        "admin",
        "settings",
        "set",
        "monitoring.grafana_url=javascript:alert(1)",
    ]);
    assert!(!bad.status.success());
    c.ok(&[
        "admin",
        "settings",
        "set",
        "monitoring.grafana_url=https://grafana.example.org/d/gantry",
    ]);
    let page = nodes_page(&c);
    assert!(
        page.contains(r#"href="https://grafana.example.org/d/gantry""#),
        "{page}"
    );
    c.ok(&["admin", "settings", "set", "monitoring.prometheus_url="]);
    assert!(!nodes_page(&c).contains(&format!(r#"href="{prom}""#)));

    // gantry_holds has a series per (pool, type, source) that holds something, none for an
    // idle cluster: one administrator's hold makes it appear.
    let first = c.json(&["node", "list"])[0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    c.ok(&[
        "node",
        "hold",
        &first,
        "--type",
        "cordon",
        "--reason",
        "metric names",
    ]);
    // Every name in use, against what Prometheus scraped (server, both agents, both Node
    // Exporters, and its own ALERTS series once the watchdog fires).
    let exprs = shipped_expressions();
    let mut used: std::collections::BTreeMap<String, String> = Default::default();
    for (at, e) in &exprs {
        for n in metric_names(e) {
            used.entry(n).or_insert_with(|| at.clone());
        }
    }
    assert!(used.len() > 20, "too few names found: {used:?}");
    let recorded: Vec<String> = exprs
        .iter()
        .filter_map(|(at, _)| at.strip_prefix("rules: ").map(str::to_string))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let v: serde_json::Value =
            serde_json::from_str(&get(&format!("{prom}/api/v1/label/__name__/values"))).unwrap();
        let known: std::collections::BTreeSet<&str> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n.as_str())
            .collect();
        let unknown: Vec<String> = used
            .iter()
            .filter(|(n, _)| !known.contains(n.as_str()) && !excused(n) && !recorded.contains(n))
            .map(|(n, at)| format!("{n} (first in {at})"))
            .collect();
        if unknown.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "metric names no exporter here has: {unknown:#?}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }

    // Restarted without --monitoring, the stack's own links go (nobody serves those ports)
    // and the one an administrator set stays.
    c.interrupt();
    let mut plain = std::process::Command::new(common::GANTRY)
        .args([
            "up",
            "--listen",
            &format!("127.0.0.1:{}", c.port),
            "--agents",
            "2",
        ])
        .arg("--data-dir")
        .arg(c.data_dir())
        .env("HOME", c.data_dir())
        .env("XDG_CONFIG_HOME", c.data_dir().join("config"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let page = loop {
        if c.gantry(&["node", "list"]).status.success() {
            let p = nodes_page(&c);
            if !p.contains(&format!(r#"href="{am}""#)) {
                break p;
            }
        }
        if Instant::now() > deadline {
            let _ = plain.kill();
            panic!(
                "the Alertmanager link outlived the stack: {}",
                nodes_page(&c)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(plain.id() as i32, libc::SIGINT) };
    let _ = plain.wait();
    assert!(
        page.contains(r#"href="https://grafana.example.org/d/gantry""#),
        "{page}"
    );
}
