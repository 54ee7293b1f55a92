//! The web UI in a real browser: a real cluster (`gantry up`, runc, a local registry) and
//! Debian's headless chromium driven by playwright-core (`tests/web/ui.mjs`). The script signs
//! in, watches a workflow finish and a log stream, reads a failed task's stderr (both streams,
//! search, download), stops one after its confirmation (dismissed first), starts one from the
//! New workflow page after a refused file, holds and releases a node as an administrator and
//! sees its graphs (the cluster runs the monitoring stack; the graphs go with its setting), creates endpoints and approves a takeover an MCP client asked for, deletes
//! one with its typed confirmation, finds a built image (its key shortened, with a copy button,
//! the table within the window) and its build log, lists volumes (not
//! another group's), and checks keyboard access and text contrast on the main pages. Screenshots go to `target/web-artifacts/`.
//! A second, small cluster without `--monitoring` shows node pages with no graph section.
//!
//! `scripts/install-deps.sh` installs chromium, node and playwright-core (into
//! `target/web-node`).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{chat_model, repo_root, Cluster};

fn token_of(c: &Cluster, name: &str, group: &str) -> String {
    c.json(&["admin", "user", "create", name, "--group", group])["token"]
        .as_str()
        .expect("a token")
        .to_string()
}

fn admin_token(c: &Cluster) -> String {
    let ctx = std::fs::read_to_string(c.data_dir().join("context.toml")).expect("context.toml");
    ctx.lines()
        .find_map(|l| l.strip_prefix("token = "))
        .expect("a token in context.toml")
        .trim_matches('"')
        .to_string()
}

/// A job that runs a little while, so the page is open before it ends, and writes lines one
/// by one, so its log is seen growing.
const PIPELINE: &str = r#"version: v4
jobs:
  prepare:
    image: { uri: docker://busybox:1 }
    script: |
      #!/bin/sh
      echo "preparing"
      sleep 2
  count:
    image: { uri: docker://busybox:1 }
    depends-on: [ { name: prepare } ]
    script: |
      #!/bin/sh
      for i in 1 2 3 4 5 6; do echo "tick $i"; sleep 1; done
  square:
    image: { uri: docker://busybox:1 }
    depends-on: [ { name: prepare } ]
    task-array: { start: 1, end: 2, concurrency: 2 }
    script: |
      #!/bin/sh
      echo "square of $FB_TASK_ID is $((FB_TASK_ID * FB_TASK_ID))"
  report:
    image: { uri: docker://busybox:1 }
    depends-on: [ { name: count }, { name: square } ]
    script: |
      #!/bin/sh
      echo "all done"
"#;

const LONG: &str = r#"version: v4
jobs:
  forever:
    image: { uri: docker://busybox:1 }
    command: [ sleep, "600" ]
"#;

const BUILD: &str = r#"version: v4
images:
  tool:
    from: docker://busybox:1
    run:
      - "echo built by the web test > /built.txt"
jobs:
  use-it:
    image: { build: tool }
    command: [ cat, /built.txt ]
"#;

/// A task that writes to both streams and fails: its error is on stderr.
const BROKEN: &str = r#"version: v4
jobs:
  broken:
    image: { uri: docker://busybox:1 }
    script: |
      #!/bin/sh
      echo "starting up"
      echo "reading the input"
      echo "error: the input file is missing" >&2
      exit 3
"#;

/// Valid but for one misspelt field, on its line 5.
const MISSPELT: &str = r#"version: v4
jobs:
  hello:
    image: { uri: docker://busybox:1 }
    comand: [ echo, hi ]
"#;

const HELLO: &str = r#"version: v4
jobs:
  hello:
    image: { uri: docker://busybox:1 }
    command: [ echo, "hello from the web" ]
"#;

fn need(what: &str, ok: bool) {
    assert!(
        ok,
        "{what} is missing: run scripts/install-deps.sh (as root) first"
    );
}

/// chromium, node and playwright-core, or a clear failure saying how to get them.
fn browser_env() -> (PathBuf, PathBuf) {
    let node_dir = repo_root().join("target/web-node");
    let chromium = PathBuf::from(std::env::var("CHROMIUM").unwrap_or("/usr/bin/chromium".into()));
    need("chromium", chromium.exists());
    need(
        "node",
        Command::new("node").arg("--version").output().is_ok(),
    );
    need(
        "playwright-core (in target/web-node)",
        node_dir.join("node_modules/playwright-core").exists(),
    );
    (node_dir, chromium)
}

#[test]
fn without_monitoring_node_pages_have_no_graphs() {
    let root = repo_root();
    let (node_dir, chromium) = browser_env();
    let artifacts = root.join("target/web-artifacts-no-monitoring");
    let _ = std::fs::remove_dir_all(&artifacts);
    std::fs::create_dir_all(&artifacts).unwrap();
    let c = Cluster::up(1);
    let setting = c.json(&["admin", "settings", "get", "monitoring.prometheus_url"]);
    assert_eq!(
        setting[0]["value"], "",
        "no Prometheus configured: {setting:#}"
    );
    let out = Command::new("node")
        .arg(root.join("crates/gantry/tests/web/ui.mjs"))
        .env("WEB_ONLY", "no-monitoring")
        .env("GANTRY_URL", format!("http://127.0.0.1:{}", c.port))
        .env("GANTRY_ADMIN_TOKEN", admin_token(&c))
        .env("WEB_NODE_DIR", &node_dir)
        .env("WEB_ARTIFACTS", &artifacts)
        .env("CHROMIUM", &chromium)
        .output()
        .expect("running node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the browser test failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ok   without monitoring"), "{stdout}");
}

#[test]
fn the_web_ui_works_in_a_real_browser() {
    let root = repo_root();
    let (node_dir, chromium) = browser_env();
    let artifacts = root.join("target/web-artifacts");
    let _ = std::fs::remove_dir_all(&artifacts);
    std::fs::create_dir_all(&artifacts).unwrap();

    // With the bundled monitoring stack, for the node page's graphs (scraped every second).
    let c = Cluster::up_with(
        2,
        vec![
            "--monitoring".into(),
            "--monitoring-interval".into(),
            "1s".into(),
        ],
    );
    let admin = admin_token(&c);
    let alice = token_of(&c, "alice", "physics");
    let bob = token_of(&c, "bob", "chem");
    let files = [
        ("WF_PIPELINE", c.write("pipeline.yaml", PIPELINE)),
        ("WF_LONG", c.write("long.yaml", LONG)),
        ("WF_MODEL_V1", c.write("v1.yaml", &chat_model("v1"))),
        ("WF_MODEL_V2", c.write("v2.yaml", &chat_model("v2"))),
        ("WF_BUILD", c.write("build.yaml", BUILD)),
        ("WF_BROKEN", c.write("broken.yaml", BROKEN)),
        ("WF_MISSPELT", c.write("misspelt.yaml", MISSPELT)),
        ("WF_HELLO", c.write("hello.yaml", HELLO)),
    ];
    let out = Command::new("node")
        .arg(root.join("crates/gantry/tests/web/ui.mjs"))
        .env("GANTRY_URL", format!("http://127.0.0.1:{}", c.port))
        .env("GANTRY_ADMIN_TOKEN", &admin)
        .env("GANTRY_ALICE_TOKEN", &alice)
        .env("GANTRY_BOB_TOKEN", &bob)
        .env("WEB_NODE_DIR", &node_dir)
        .env("WEB_ARTIFACTS", &artifacts)
        .env("CHROMIUM", &chromium)
        .envs(files.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .expect("running node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the browser test failed ({}):\n{stdout}\n{stderr}\nscreenshots: {}\nserver log:\n{}",
        out.status,
        artifacts.display(),
        c.log()
    );

    // What the browser did is what the API sees.
    let nodes = c.json(&["node", "list"]);
    for n in nodes.as_array().unwrap() {
        assert_eq!(n["state"], "READY", "released from the web page: {n:#}");
    }
    let history = c.json(&["endpoint", "history", "chat"]);
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["phase"], "DONE", "{history:#}");
    assert_eq!(last["channel"], "mcp", "{last:#}");
    assert_eq!(last["confirmed_by"], "alice", "{last:#}");
    assert_eq!(last["confirmed_via"], "web", "{last:#}");
    let shots = std::fs::read_dir(&artifacts).unwrap().count();
    assert!(shots >= 10, "only {shots} screenshots in {artifacts:?}");
}
