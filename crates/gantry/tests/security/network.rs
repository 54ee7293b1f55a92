//! Tenant networks on `gantry up --agents 2`: a workflow's containers reach their own
//! workflow's containers (on their node and the other), and another workflow's services only
//! through the server's endpoint proxy, with a token.
//!
//! The server listens on 0.0.0.0 here, so that containers reach its proxy at their bridge's
//! gateway (`gantry up` then lets its containers reach exactly that port of the host). Each
//! agent offers 2 cores, and the steps ask for 1 or 2, so where each lands follows from what
//! fits (checked below): alice's job on the other node than her service; bob's service on
//! that other node, and his job on her service's node.

use crate::common::{model, Cluster, GANTRY};

/// Runs a client verb as the user with `token`; its stdout.
fn as_user(c: &Cluster, token: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(GANTRY)
        .args(args)
        .env("GANTRY_URL", format!("http://127.0.0.1:{}", c.port))
        .env("GANTRY_TOKEN", token)
        .env("HOME", c.data_dir())
        .env("XDG_CONFIG_HOME", c.data_dir().join("nobody"))
        .env_remove("GANTRY_DATA_DIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gantry {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The addresses and egress decisions the agents recorded for a workflow's containers, read
/// from their state directories: what an attacker scanning the node's subnet would find.
fn recorded(c: &Cluster, workflow: &str) -> Vec<(String, bool)> {
    let mut out = vec![];
    let agents = std::fs::read_dir(c.data_dir().join("agents")).unwrap();
    for a in agents.flatten() {
        let Ok(rd) = std::fs::read_dir(a.path().join("net/attachments")) else {
            continue;
        };
        for f in rd.flatten() {
            let Ok(text) = std::fs::read_to_string(f.path()) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            if v["workflow"] == workflow {
                if let Some(addr) = v["address"].as_str() {
                    out.push((addr.to_owned(), v["egress"] == true));
                }
            }
        }
    }
    out
}

/// The tries bob's containers make: alice's backend by its address, and her endpoint through
/// the server's proxy with the token she gave him and without one.
const TRIES: &str = r#"
      gw=$(ip route | awk '/^default/ {print $3}')
      try() { out=$(timeout 8 wget -q -O - "$@" 2>&1) || out="failed: $out"; echo "$out"; }
      echo "direct: $(try http://$A_ADDR:8080/)"
      echo "proxy: $(try --header "Authorization: Bearer $TOKEN" http://$gw:$PORT/e/a-private/)"
      echo "no-token: $(try http://$gw:$PORT/e/a-private/)""#;

#[test]
fn another_groups_service_is_reached_only_through_its_endpoint() {
    let c = Cluster::up_listening(2, "0.0.0.0", vec!["--cpus".into(), "2".into()]);
    let alice = c.user_token("alice", "ga");
    let bob = c.user_token("bob", "gb");

    // Alice serves a private endpoint from a service; her own job, on the other node, reaches
    // the service by name.
    as_user(
        &c,
        &alice,
        &["endpoint", "create", "a-private", "--scope", "user"],
    );
    let mut file = model("a-v1", "a-private", 0, 8080);
    file.push_str(
        r#"    resource: { cpu: { cores: 1 } }
jobs:
  client:
    image: { uri: docker://busybox:1 }
    resource: { cpu: { cores: 2 } }
    depends-on: [ { name: llm, status: RUNNING } ]
    script: |
      #!/bin/sh
      wget -q -O - http://llm.svc:8080/
"#,
    );
    let a = as_user(
        &c,
        &alice,
        &[
            "workflow",
            "start",
            c.write("a.yaml", &file).to_str().unwrap(),
        ],
    );
    let d = c.wait_for(&a, "alice's client FINISHED", |d| {
        Cluster::task(d, "client")["status"] == "FINISHED"
    });
    let a_node = Cluster::task(&d, "llm")["node"].clone();
    assert_ne!(Cluster::task(&d, "client")["node"], a_node, "{d:#}");
    assert_eq!(c.ok(&["workflow", "log", &a, "client"]).trim(), "a-v1");
    let token = as_user(
        &c,
        &alice,
        &["endpoint", "token", "a-private", "--expires", "1h"],
    );

    // Her backend's address, as bob could find it by scanning; the host itself reaches it
    // (that is how the agent probes it), so it is the right one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let addrs = loop {
        // The finished client's network goes once the agent has shipped its end.
        let addrs = recorded(&c, &a);
        if addrs.len() == 1 || std::time::Instant::now() > deadline {
            break addrs;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    };
    assert_eq!(addrs.len(), 1, "{addrs:?}");
    assert!(addrs[0].1, "egress is allowed by default");
    let a_addr = addrs[0].0.clone();
    let direct = std::process::Command::new("curl")
        .args(["-s", "-m", "10", &format!("http://{a_addr}:8080/")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&direct.stdout), "a-v1\n");

    // The administrator denies egress: endpoints are not the outside world, they stay open.
    c.ok(&["admin", "settings", "set", "network.egress=deny"]);
    let bad = c.gantry(&["admin", "settings", "set", "network.egress=sometimes"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("allow or deny"));

    // Bob's workflow: a service on the other node, which tries first and then serves what it
    // found; a job on alice's node, which tries, then fetches the service's findings (bob's
    // own containers reach each other across nodes).
    let env = format!(
        "    env: [ A_ADDR={a_addr}, TOKEN={token}, PORT={} ]\n",
        c.port
    );
    let b_file = format!(
        r#"version: v4
services:
  far:
    image: {{ uri: docker://busybox:1 }}
    resource: {{ cpu: {{ cores: 2 }} }}
{env}    script: |
      #!/bin/sh
      mkdir -p /www
      ( {TRIES}
      ) > /www/found
      exec httpd -f -p 8080 -h /www
    network:
      ports: [ {{ name: http, port: 8080 }} ]
    readiness-probe:
      http-get: {{ path: /found, port: 8080 }}
      period-seconds: 1
jobs:
  near:
    image: {{ uri: docker://busybox:1 }}
    resource: {{ cpu: {{ cores: 1 }} }}
    depends-on: [ {{ name: far, status: RUNNING }} ]
{env}    script: |
      #!/bin/sh
      {TRIES}
      echo "far: $(wget -q -O - http://far.svc:8080/found | tr '\n' '|')"
"#
    );
    let b = as_user(
        &c,
        &bob,
        &[
            "workflow",
            "start",
            c.write("b.yaml", &b_file).to_str().unwrap(),
        ],
    );
    c.wait_for(&b, "bob's far RUNNING", |d| {
        Cluster::task(d, "far")["status"] == "RUNNING"
    });
    // The administrator's decision is in the node's record of the container (its firewall).
    let far = recorded(&c, &b);
    assert!(
        !far.is_empty() && far.iter().all(|(_, egress)| !egress),
        "{far:?}"
    );
    let d = c.wait_status(&b, "FINISHED");
    assert_ne!(Cluster::task(&d, "far")["node"], a_node, "{d:#}");
    assert_eq!(Cluster::task(&d, "near")["node"], a_node, "{d:#}");
    let log = c.ok(&["workflow", "log", &b, "near"]);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 4, "{log}");
    let (direct, proxy, no_token) = (lines[0], lines[1], lines[2]);
    // On alice's service's node, by address: nothing.
    assert!(direct.starts_with("direct: failed"), "{log}");
    assert!(!direct.contains("a-v1"), "{log}");
    // Through the endpoint, with her token: served; without: refused by the proxy.
    assert_eq!(proxy, "proxy: a-v1", "{log}");
    assert!(no_token.contains("401"), "{log}");
    // The same from the other node.
    let far: Vec<&str> = lines[3]
        .strip_prefix("far: ")
        .unwrap_or_else(|| panic!("{log}"))
        .split('|')
        .collect();
    assert!(
        far[0].starts_with("direct: failed") && !far[0].contains("a-v1"),
        "{log}"
    );
    assert_eq!(far[1], "proxy: a-v1", "{log}");
    assert!(far[2].contains("401"), "{log}");

    // Alice's service still serves her, through the endpoint.
    let auth = format!("Authorization: Bearer {alice}");
    let via = std::process::Command::new("curl")
        .args(["-s", "-m", "10", "-H", &auth])
        .arg(format!("http://127.0.0.1:{}/e/a-private/", c.port))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&via.stdout), "a-v1\n");
    as_user(&c, &alice, &["workflow", "stop", &a, "--yes"]);
    c.wait_status(&a, "STOPPED");
}
