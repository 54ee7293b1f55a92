//! The MCP server against real clients: the official Python SDK (PyPI `mcp`, installed in a
//! venv by scripts/install-deps.sh) runs `tests/mcp/agent.py` against a real cluster, over
//! Streamable HTTP and over stdio (`gantry mcp`), on the handshake-era protocol and on
//! 2026-07-28, as a client that can ask its person (who accepts or declines) and as one that
//! cannot. The Python side asserts what a client sees; this side checks the cluster's.

mod common;

use common::{chat_model, Cluster};
use serde_json::Value;

/// Runs one scenario of agent.py; returns the JSON it printed.
fn agent(c: &Cluster, token: &str, scenario: &str, args: &[&str]) -> Value {
    let url = format!("http://127.0.0.1:{}", c.port);
    common::mcp_agent(&url, token, scenario, args, &|| c.log())
}

const HELLO: &str = r#"version: v4
jobs:
  hello:
    image: { uri: docker://busybox:1 }
    script: |
      #!/bin/sh
      for i in 1 2 3; do echo "hello $i from $FB_WORKFLOW_ID"; done
    resource: { cpu: { cores: 1 }, memory: { size: 64MiB } }
"#;

#[test]
fn agents_run_workflows_over_http_and_stdio_on_both_protocols() {
    let c = Cluster::up(1);
    let admin = c.admin_token();
    let spec = c.write("hello.yaml", HELLO);
    let spec = spec.to_str().unwrap();
    let mut ids = vec![];
    for transport in ["http", "stdio"] {
        for mode in ["legacy", "2026-07-28"] {
            let how = ["--transport", transport, "--mode", mode];
            let t = agent(&c, &admin, "tools", &how);
            let want = if mode == "legacy" { "2025-11-25" } else { mode };
            assert_eq!(t["protocol"], want, "{transport} negotiated {t}");
            let r = agent(&c, &admin, "run", &[&how[..], &["--spec", spec]].concat());
            let id = r["id"].as_str().unwrap().to_string();
            let want: String = (1..=3).map(|i| format!("hello {i} from {id}\n")).collect();
            assert_eq!(
                r["logs"],
                want.as_str(),
                "{transport} {mode}: the agent read it all"
            );
            // The cluster agrees: it ran, as admin's, and the CLI shows the same output.
            let d = c.detail(&id);
            assert_eq!(d["status"], "FINISHED");
            assert_eq!(d["owner"], "admin");
            assert_eq!(c.ok(&["workflow", "log", &id, "hello"]), want);
            ids.push(id);
        }
    }
    // Another user's agent sees none of it: 404's "no workflow", over either transport.
    let bob = c.user_token("bob", "bobs");
    for transport in ["http", "stdio"] {
        agent(
            &c,
            &bob,
            "isolation",
            &["--transport", transport, "--workflow", &ids[0]],
        );
    }
    assert_eq!(
        c.detail(&ids[0])["status"],
        "FINISHED",
        "bob stopped nothing"
    );
    // No token, a bad token, a foreign Origin, someone else's session: refused.
    agent(&c, &admin, "http-edges", &["--other-token", &bob]);
}

fn endpoint(c: &Cluster) -> Value {
    c.json(&["endpoint", "show", "chat"])
}

/// Waits until `id` serves chat with no takeover left open; returns the last takeover.
fn serving(c: &Cluster, id: &str) -> Value {
    c.wait_endpoint("chat", &format!("{id} serving chat"), |e| {
        e["workflow_id"] == id && e["status"] == "SERVING" && e["takeover"].is_null()
    });
    let h = c.json(&["endpoint", "history", "chat"]);
    h.as_array().unwrap().last().unwrap().clone()
}

fn workflows(c: &Cluster) -> usize {
    c.json(&["workflow", "list"]).as_array().unwrap().len()
}

fn started(r: &Value) -> String {
    r["result"]["id"].as_str().unwrap().to_string()
}

#[test]
fn endpoint_takeovers_happen_only_with_the_persons_confirmation() {
    let c = Cluster::up(2);
    let admin = c.admin_token();
    let spec = |v: &str| c.write(&format!("{v}.yaml"), &chat_model(v));
    let takeover = |v: &str, how: &[&str]| {
        let file = spec(v);
        let args = [&["--spec", file.to_str().unwrap()][..], how].concat();
        agent(&c, &admin, "takeover", &args)
    };
    agent(&c, &admin, "create-endpoint", &["--endpoint", "chat"]);
    // Attaching to an idle endpoint takes nothing over: nobody is asked.
    let v1 = started(&takeover("v1", &["--elicit", "accept", "--unasked"]));
    let t = serving(&c, &v1);
    assert!(
        t["from_workflow"].is_null() && t["confirmed_by"].is_null(),
        "{t:#}"
    );

    // Declined, in both protocol forms, and refused where the client cannot ask: nothing
    // starts, v1 keeps serving.
    let before = workflows(&c);
    for how in [
        &["--elicit", "decline", "--mode", "legacy"][..],
        &["--elicit", "decline", "--mode", "2026-07-28"],
        &["--elicit", "none"],
        &["--elicit", "none", "--mode", "2026-07-28"],
        &["--elicit", "none", "--transport", "stdio"],
    ] {
        let r = takeover("v2", how);
        assert!(
            r["refused"].as_str().unwrap().contains("Nothing was"),
            "{r}"
        );
        if how[1] == "decline" {
            let asked = r["asked"][0].as_str().unwrap();
            assert!(
                asked.contains("takes over endpoint chat") && asked.contains(&v1[..8]),
                "the person is told what changes: {asked}"
            );
        }
    }
    assert_eq!(workflows(&c), before, "no workflow was started");
    assert_eq!(endpoint(&c)["workflow_id"], v1.as_str());

    // Confirmed: through elicitation/create (legacy), the input-required round trip
    // (2026-07-28), over stdio, and with a token from a refusal. Each takeover records who
    // confirmed it and through which channel, and switches without `endpoint approve`.
    let mut old = v1;
    for (v, how, via) in [
        (
            "v2",
            &["--elicit", "accept", "--mode", "legacy"][..],
            "mcp-elicitation",
        ),
        (
            "v3",
            &["--elicit", "accept", "--mode", "2026-07-28"],
            "mcp-input-required",
        ),
        (
            "v4",
            &["--elicit", "accept", "--transport", "stdio"],
            "mcp-elicitation",
        ),
        ("v5", &["--elicit", "none", "--with-token"], "mcp-token"),
    ] {
        let new = started(&takeover(v, how));
        let t = serving(&c, &new);
        assert_eq!(t["from_workflow"], old.as_str(), "{t:#}");
        assert_eq!(t["phase"], "DONE", "{t:#}");
        assert_eq!(t["channel"], "mcp");
        assert_eq!(t["requested_by"], "admin");
        assert_eq!(t["confirmed_by"], "admin", "{t:#}");
        assert_eq!(t["confirmed_via"], via, "{t:#}");
        c.wait_status(&old, "STOPPED");
        old = new;
    }

    // Or the agent starts it and the takeover waits for the person at the CLI.
    let v6 = started(&takeover("v6", &["--elicit", "none", "--await-approval"]));
    c.wait_endpoint("chat", "awaiting confirmation", |e| {
        e["takeover"]["phase"] == "AWAITING_CONFIRMATION"
    });
    assert_eq!(
        endpoint(&c)["workflow_id"],
        old.as_str(),
        "nothing switched"
    );
    let t = c.json(&["endpoint", "approve", "chat"]);
    assert_eq!(t["confirmed_via"], "cli");
    serving(&c, &v6);

    // Stopping the workflow that serves it: refused, declined, then confirmed.
    let stop = |how: &[&str]| {
        agent(
            &c,
            &admin,
            "stop",
            &[&["--workflow", &v6][..], how].concat(),
        )
    };
    stop(&["--elicit", "none"]);
    stop(&["--elicit", "decline", "--mode", "2026-07-28"]);
    assert_eq!(c.detail(&v6)["status"], "RUNNING", "still running");
    stop(&["--elicit", "accept"]);
    c.wait_status(&v6, "STOPPED");
    let events = c.ok(&["workflow", "events", &v6]);
    assert!(
        events.contains("confirmed by admin via mcp-elicitation"),
        "{events}"
    );

    // Deleting the endpoint: declined changes nothing; confirmed deletes it.
    let delete = |how: &[&str]| {
        agent(
            &c,
            &admin,
            "delete-endpoint",
            &[&["--endpoint", "chat"][..], how].concat(),
        )
    };
    delete(&["--elicit", "decline"]);
    delete(&["--elicit", "none"]);
    assert_eq!(endpoint(&c)["name"], "chat");
    let r = delete(&["--elicit", "accept", "--mode", "2026-07-28"]);
    assert_eq!(r["result"]["confirmed_via"], "mcp-input-required");
    assert!(!c.gantry(&["endpoint", "show", "chat"]).status.success());
}

#[test]
fn read_only_mode_is_enforced_where_tools_are_dispatched() {
    let c = Cluster::up_with(1, vec!["--mcp-read-only".into()]);
    let admin = c.admin_token();
    let spec = c.write("hello.yaml", HELLO);
    for (transport, mode) in [
        ("http", "legacy"),
        ("http", "2026-07-28"),
        ("stdio", "legacy"),
    ] {
        agent(
            &c,
            &admin,
            "read-only",
            &[
                "--transport",
                transport,
                "--mode",
                mode,
                "--spec",
                spec.to_str().unwrap(),
            ],
        );
    }
    assert_eq!(workflows(&c), 0, "nothing was started");
    assert_eq!(
        c.json(&["endpoint", "list"]).as_array().unwrap().len(),
        0,
        "nothing was created"
    );
}
