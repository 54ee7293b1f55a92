//! Authentication and scope on every route under `/api/v1`, over real HTTP, against a server
//! started in-process on a fresh data directory. No agent connects, so submitted workflows stay
//! PENDING: that is enough to check who may see and change what.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{bearer, routes, start_server, Api, Cluster, Reply, HELLO};
use reqwest::header::WWW_AUTHENTICATE;
use reqwest::{Method, StatusCode};
use serde_json::json;

/// Asserts a reply is 401 with our error shape and a `WWW-Authenticate: Bearer` challenge.
fn assert_unauthorized(r: &Reply, what: &str) {
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{what}: {}", r.body);
    assert_eq!(
        r.headers
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok()),
        Some("Bearer"),
        "{what}: the 401 must challenge for a bearer token"
    );
    assert!(!r.error().is_empty(), "{what}: empty error message");
}

fn assert_forbidden(r: &Reply, what: &str) {
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{what}: {}", r.body);
    assert!(!r.error().is_empty(), "{what}: empty error message");
}

#[tokio::test]
async fn every_route_wants_a_valid_bearer_token() {
    let c = Cluster::start().await;
    let wf = c.submit(&c.alice, HELLO).await;
    let unknown = format!("gantry_{}", "0".repeat(64));
    let bad: Vec<(&str, Option<String>)> = vec![
        ("no Authorization header", None),
        ("an empty header", Some(String::new())),
        ("an unknown token", Some(format!("Bearer {unknown}"))),
        (
            "a token with a character more",
            Some(format!("Bearer {}x", c.alice)),
        ),
        ("an empty bearer token", Some("Bearer ".into())),
        ("a token without its scheme", Some(c.alice.clone())),
        ("basic auth", Some("Basic YWxpY2U6c2VjcmV0".into())),
    ];
    for route in routes(&wf) {
        for (what, header) in &bad {
            let r = c.route(&route, header.as_deref()).await;
            assert_unauthorized(&r, &format!("{route} with {what}"));
        }
    }
    c.assert_untouched(&wf).await;
}

#[tokio::test]
async fn each_token_names_its_user() {
    let c = Cluster::start().await;
    for (token, user, group, role) in [
        (&c.admin, "root", "admins", "admin"),
        (&c.alice, "alice", "physics", "user"),
        (&c.carol, "carol", "physics", "user"),
        (&c.bob, "bob", "chem", "user"),
    ] {
        let r = c.get(token, "/whoami").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(
            r.json(),
            json!({"user": user, "group": group, "role": role})
        );
    }
    // The scheme is case-insensitive (RFC 9110), and the bearer's token may be padded.
    let r = c
        .raw(
            Method::GET,
            "/whoami",
            Some(&format!("bearer  {} ", c.alice)),
        )
        .send()
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()["user"], "alice");
}

#[tokio::test]
async fn an_agent_token_only_connects_a_node() {
    let c = Cluster::start().await;
    let wf = c.submit(&c.alice, HELLO).await;
    for route in routes(&wf) {
        let r = c.route(&route, Some(&bearer(&c.agent))).await;
        if route.agent_only {
            assert_eq!(
                r.status,
                StatusCode::SWITCHING_PROTOCOLS,
                "{route}: the agent's handshake must succeed: {}",
                r.body
            );
        } else {
            assert_forbidden(&r, &format!("{route} with an agent token"));
        }
    }
    // Without the WebSocket handshake headers axum's upgrade extractor refuses the request
    // (400) once the token has passed: still no way in, and never a 2xx.
    let r = c.get(&c.agent, "/agent/connect").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.error().contains("upgrade"), "{}", r.error());
    c.assert_untouched(&wf).await;
}

#[tokio::test]
async fn users_cannot_connect_as_agents_or_use_admin_routes() {
    let c = Cluster::start().await;
    let wf = c.submit(&c.alice, HELLO).await;
    for (name, token) in [("alice", &c.alice), ("carol", &c.carol), ("bob", &c.bob)] {
        for route in routes(&wf) {
            if !(route.admin_only || route.agent_only) {
                continue;
            }
            let r = c.route(&route, Some(&bearer(token))).await;
            assert_forbidden(&r, &format!("{route} as {name}"));
        }
        // A plain GET, without the upgrade headers, is refused for the token too.
        let r = c.get(token, "/agent/connect").await;
        assert_forbidden(&r, &format!("plain GET /agent/connect as {name}"));
    }
    c.assert_untouched(&wf).await;
}

#[tokio::test]
async fn workflows_are_visible_to_their_owner_group_and_admins_only() {
    let c = Cluster::start().await;
    let wf = c.submit(&c.alice, HELLO).await;
    let bobs = c.submit(&c.bob, HELLO).await;

    // Listings.
    assert_eq!(c.list_ids(&c.alice).await, BTreeSet::from([wf.clone()]));
    assert_eq!(c.list_ids(&c.carol).await, BTreeSet::from([wf.clone()]));
    assert_eq!(c.list_ids(&c.bob).await, BTreeSet::from([bobs.clone()]));
    assert_eq!(
        c.list_ids(&c.admin).await,
        BTreeSet::from([wf.clone(), bobs.clone()])
    );

    // The owner, a member of the owner's group and an administrator see everything about it.
    for (name, token) in [("alice", &c.alice), ("carol", &c.carol), ("root", &c.admin)] {
        let r = c.get(token, &format!("/workflows/{wf}")).await;
        assert_eq!(r.status, StatusCode::OK, "detail as {name}: {}", r.body);
        let d = r.json();
        assert_eq!(d["id"], wf.as_str());
        assert_eq!(d["owner"], "alice");
        assert_eq!(d["group"], "physics");
        assert_eq!(d["status"], "PENDING");
        assert_eq!(d["tasks"].as_array().map(Vec::len), Some(1), "{d}");
        assert_eq!(d["tasks"][0]["job"], "main");

        let r = c.get(token, &format!("/workflows/{wf}/events")).await;
        assert_eq!(r.status, StatusCode::OK, "events as {name}: {}", r.body);
        let events = r.json();
        let kinds: Vec<&str> = events
            .as_array()
            .expect("events are a list")
            .iter()
            .map(|e| {
                assert_eq!(e["workflow_id"], wf.as_str(), "{e}");
                e["kind"].as_str().unwrap_or_default()
            })
            .collect();
        assert!(kinds.contains(&"workflow.submitted"), "{events}");

        // Nothing ran yet: an empty log, and where to read on from.
        let r = c.get(token, &format!("/workflows/{wf}/logs/main")).await;
        assert_eq!(r.status, StatusCode::OK, "logs as {name}: {}", r.body);
        assert_eq!(r.body, "");
        assert_eq!(
            r.headers
                .get("x-gantry-next-offset")
                .and_then(|v| v.to_str().ok()),
            Some("0")
        );
    }
    let r = c.get(&c.alice, &format!("/workflows/{wf}/logs/nope")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(
        r.error().contains("main"),
        "the error lists the jobs: {}",
        r.body
    );

    // Someone of another group gets exactly what a workflow that does not exist gets: 404.
    let ghost = uuid::Uuid::new_v4().to_string();
    for (method, path) in [
        (Method::GET, "/workflows/{}"),
        (Method::GET, "/workflows/{}/events"),
        (Method::POST, "/workflows/{}/stop"),
        (Method::GET, "/workflows/{}/logs/main"),
    ] {
        let hidden = c
            .raw(
                method.clone(),
                &path.replace("{}", &wf),
                Some(&bearer(&c.bob)),
            )
            .send()
            .await;
        let missing = c
            .raw(
                method.clone(),
                &path.replace("{}", &ghost),
                Some(&bearer(&c.bob)),
            )
            .send()
            .await;
        assert_eq!(
            hidden.status,
            StatusCode::NOT_FOUND,
            "{method} {path}: {}",
            hidden.body
        );
        assert_eq!(missing.status, StatusCode::NOT_FOUND, "{method} {path}");
        assert_eq!(
            hidden.error().replace(&wf, "ID"),
            missing.error().replace(&ghost, "ID"),
            "{method} {path}: a hidden workflow must look like a missing one"
        );
        // And alice cannot see bob's either.
        let r = c
            .raw(
                method.clone(),
                &path.replace("{}", &bobs),
                Some(&bearer(&c.alice)),
            )
            .send()
            .await;
        assert_eq!(
            r.status,
            StatusCode::NOT_FOUND,
            "{method} {path} of bob's as alice"
        );
    }
    // Bob's refused stop left no trace: no stop was requested.
    assert!(!c.event_kinds(&wf).await.contains("workflow.stop"));

    // Unique prefixes of 8 or more characters resolve; shorter ones do not.
    for n in [8, 13, 20, wf.len()] {
        let r = c.get(&c.carol, &format!("/workflows/{}", &wf[..n])).await;
        assert_eq!(r.status, StatusCode::OK, "prefix of {n}: {}", r.body);
        assert_eq!(r.json()["id"], wf.as_str());
        let r = c
            .get(&c.carol, &format!("/workflows/{}/events", &wf[..n]))
            .await;
        assert_eq!(
            r.status,
            StatusCode::OK,
            "events by a prefix of {n}: {}",
            r.body
        );
        let r = c.get(&c.bob, &format!("/workflows/{}", &wf[..n])).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "bob, prefix of {n}");
    }
    // A prefix too short to be an id is a bad request that says how long one must be, for
    // everyone alike (it tells nobody whether such a workflow exists).
    for n in [1, 4, 7] {
        for who in [&c.alice, &c.admin, &c.bob] {
            let r = c.get(who, &format!("/workflows/{}", &wf[..n])).await;
            assert_eq!(
                r.status,
                StatusCode::BAD_REQUEST,
                "prefix of {n}: {}",
                r.body
            );
            assert!(r.body.contains("at least 8 characters"), "{}", r.body);
        }
    }

    // Carol, of alice's group, may stop alice's workflow.
    let r = c
        .post(&c.carol, &format!("/workflows/{}/stop", &wf[..8]), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()["id"], wf.as_str());
    let d = c.wait_for_status(&c.alice, &wf, "STOPPED").await;
    assert_eq!(d["owner"], "alice");
    assert!(
        c.event_messages(&wf)
            .await
            .iter()
            .any(|m| m.contains("carol")),
        "the events say who stopped it"
    );
    // Bob's workflow was not touched by any of this; an administrator may stop it.
    let r = c.get(&c.bob, &format!("/workflows/{bobs}")).await;
    assert_eq!(r.json()["status"], "PENDING");
    let r = c
        .post(&c.admin, &format!("/workflows/{bobs}/stop"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    c.wait_for_status(&c.bob, &bobs, "STOPPED").await;
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let c = Cluster::start().await;
    let wf = c.submit(&c.alice, HELLO).await;
    let before = c.list_ids(&c.admin).await;

    // Workflow files with errors: 400 with positioned diagnostics, from submit and validate alike.
    let broken_yaml = "version: v4\njobs:\n  main: [unclosed\n";
    let unknown_key = "version: v4\njobs:\n  main:\n    image: {uri: docker://busybox:1}\n    comand: [\"true\"]\n";
    for (what, spec) in [
        ("broken YAML", broken_yaml),
        ("an unknown key", unknown_key),
    ] {
        let r = c
            .post(&c.alice, "/workflows", Some(json!({"spec": spec})))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{what}: {}", r.body);
        assert!(!r.error().is_empty());
        let diags = r.json()["diagnostics"].clone();
        let list = diags
            .as_array()
            .unwrap_or_else(|| panic!("{what}: no diagnostics: {}", r.body));
        assert!(!list.is_empty(), "{what}: no diagnostics");
        for d in list {
            assert!(d["line"].as_u64().is_some_and(|l| l >= 1), "{what}: {d}");
            assert!(d["column"].as_u64().is_some_and(|l| l >= 1), "{what}: {d}");
            assert!(
                d["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{what}: {d}"
            );
        }
        let v = c
            .post(&c.alice, "/workflows/validate", Some(json!({"spec": spec})))
            .await;
        assert_eq!(v.status, StatusCode::OK, "validate {what}: {}", v.body);
        assert_eq!(v.json()["valid"], false);
        assert_eq!(
            v.json()["diagnostics"],
            diags,
            "validate and submit disagree on {what}"
        );
        assert_eq!(c.list_ids(&c.admin).await, before, "after {what}");
    }
    // The unknown key is named where it stands, with a suggestion.
    let r = c
        .post(&c.alice, "/workflows", Some(json!({"spec": unknown_key})))
        .await;
    let d = &r.json()["diagnostics"][0];
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(5), Some(5)),
        "{d}"
    );
    let m = d["message"].as_str().unwrap_or_default();
    assert!(m.contains("comand") && m.contains("command"), "{m}");

    // A valid file validates.
    let v = c
        .post(&c.bob, "/workflows/validate", Some(json!({"spec": HELLO})))
        .await;
    assert_eq!(v.status, StatusCode::OK, "{}", v.body);
    assert_eq!(v.json(), json!({"valid": true, "diagnostics": []}));

    // Request bodies that are not what the route takes: our JSON error, never axum's text.
    let bodies: [(&str, &str, &str); 5] = [
        (
            "malformed JSON",
            "application/json",
            r#"{"spec": "version: v4"#,
        ),
        (
            "a body without spec",
            "application/json",
            r#"{"name": "x"}"#,
        ),
        (
            "spec of the wrong type",
            "application/json",
            r#"{"spec": 4}"#,
        ),
        ("an empty body", "application/json", ""),
        ("YAML sent as text", "text/plain", HELLO),
    ];
    for (what, content_type, body) in bodies {
        for path in ["/workflows", "/workflows/validate"] {
            let r = c
                .raw(Method::POST, path, Some(&bearer(&c.alice)))
                .header("content-type", content_type)
                .body(body)
                .send()
                .await;
            assert_eq!(
                r.status,
                StatusCode::BAD_REQUEST,
                "{what} to {path}: {}",
                r.body
            );
            assert!(!r.error().is_empty(), "{what} to {path}");
        }
        assert_eq!(c.list_ids(&c.admin).await, before, "after {what}");
    }

    // What Gantry cannot run yet is refused by name.
    let with_service = format!(
        "{HELLO}services:\n  web:\n    image: {{uri: docker://busybox:1}}\n    command: [\"true\"]\n    autoscaler:\n      replicas: {{min: 1, max: 3}}\n"
    );
    let v = c
        .post(
            &c.alice,
            "/workflows/validate",
            Some(json!({"spec": with_service})),
        )
        .await;
    assert_eq!(
        v.json()["valid"],
        true,
        "an autoscaler is valid v4: {}",
        v.body
    );
    let r = c
        .post(&c.alice, "/workflows", Some(json!({"spec": with_service})))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(
        r.error().contains("services.web.autoscaler"),
        "{}",
        r.error()
    );
    assert_eq!(
        c.list_ids(&c.admin).await,
        before,
        "after an unsupported autoscaler"
    );

    // A file far too large: 413, naming the limit.
    let huge = format!("{HELLO}# {}\n", "x".repeat(5 << 20));
    let r = c
        .post(&c.alice, "/workflows", Some(json!({"spec": huge})))
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.body);
    assert!(r.error().contains("at most 4 MiB"), "{}", r.error());
    assert_eq!(r.json()["limit_bytes"], 4 << 20);
    assert_eq!(c.list_ids(&c.admin).await, before, "after a huge file");

    // A listing filter that is not a status.
    let r = c.get(&c.alice, "/workflows?status=DONE").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.error().contains("PENDING"), "{}", r.error());

    // Query parameters of the wrong type: 400 with our error shape.
    for path in [
        format!("/workflows/{wf}/events?after=soon"),
        format!("/workflows/{wf}/logs/main?offset=-1"),
        format!("/workflows/{wf}/logs/main?follow=maybe"),
    ] {
        let r = c.get(&c.alice, &path).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}: {}", r.body);
        assert!(!r.error().is_empty(), "{path}");
    }

    // An unknown route under the API is a JSON 404; a known one with the wrong method a JSON 405.
    let r = c.get(&c.alice, "/no-such-thing").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(!r.error().is_empty());
    let r = c
        .raw(
            Method::DELETE,
            &format!("/workflows/{wf}"),
            Some(&bearer(&c.alice)),
        )
        .send()
        .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{}", r.body);
    assert!(!r.error().is_empty());
    let allow = r.headers.get("allow").and_then(|v| v.to_str().ok());
    assert!(allow.is_some_and(|a| a.contains("GET")), "{allow:?}");
    // A path segment that is not UTF-8 once decoded.
    let r = c.get(&c.alice, "/workflows/%FF%FE").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(!r.error().is_empty());

    c.assert_untouched(&wf).await;
}

#[tokio::test]
async fn admin_settings() {
    let c = Cluster::start().await;
    let r = c.get(&c.admin, "/admin/settings").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(
        r.json()
            .as_array()
            .expect("settings are a list")
            .contains(&json!({"key": "builds.enabled", "value": "true"})),
        "builds are on by default: {}",
        r.body
    );
    assert_eq!(c.setting("builds.enabled").await, "true");

    // Non-administrators may neither read nor change settings, known or not.
    for token in [&c.alice, &c.bob] {
        for r in [
            c.get(token, "/admin/settings").await,
            c.get(token, "/admin/settings/builds.enabled").await,
            c.get(token, "/admin/settings/no.such").await,
            c.put(
                token,
                "/admin/settings/builds.enabled",
                json!({"key": "builds.enabled", "value": "false"}),
            )
            .await,
        ] {
            assert_forbidden(&r, "a user on /admin/settings");
        }
    }
    assert_eq!(c.setting("builds.enabled").await, "true");

    // Bad values and mismatched keys: 400, nothing stored.
    for body in [
        json!({"key": "builds.enabled", "value": "yes"}),
        json!({"key": "builds.enabled", "value": ""}),
        json!({"key": "builds.enabled", "value": "TRUE"}),
        json!({"key": "other", "value": "false"}),
        json!({"value": "false"}),
    ] {
        let r = c
            .put(&c.admin, "/admin/settings/builds.enabled", body.clone())
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.body);
        assert!(!r.error().is_empty());
    }
    assert_eq!(c.setting("builds.enabled").await, "true");

    // Unknown keys: 404 naming the known ones.
    let r = c.get(&c.admin, "/admin/settings/builds.enable").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(r.error().contains("builds.enabled"), "{}", r.error());
    let r = c
        .put(
            &c.admin,
            "/admin/settings/builds.enable",
            json!({"key": "builds.enable", "value": "false"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(r.error().contains("builds.enabled"), "{}", r.error());

    // A good value is stored, and every reader sees it.
    let r = c
        .put(
            &c.admin,
            "/admin/settings/builds.enabled",
            json!({"key": "builds.enabled", "value": "false"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json(), json!({"key": "builds.enabled", "value": "false"}));
    assert_eq!(c.setting("builds.enabled").await, "false");
    let r = c.get(&c.admin, "/admin/settings").await;
    assert!(
        r.json()
            .as_array()
            .expect("settings are a list")
            .contains(&json!({"key": "builds.enabled", "value": "false"})),
        "{}",
        r.body
    );
}

/// The pool cap's fraction, cluster-wide and for one pool, as README's holds section says.
#[tokio::test]
async fn the_hold_fraction_is_set_for_the_cluster_and_for_one_pool() {
    let c = Cluster::start().await;
    let set = |key: &str, value: &str| {
        let path = format!("/admin/settings/{key}");
        let body = json!({"key": key, "value": value});
        (path, body)
    };
    assert_eq!(c.setting("monitoring.hold_fraction").await, "0.2");
    for (key, value) in [
        ("monitoring.hold_fraction", "0.3"),
        ("monitoring.hold_fraction.gpu", "0.5"),
    ] {
        let (path, body) = set(key, value);
        let r = c.put(&c.admin, &path, body.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "{key}: {}", r.body);
        assert_eq!(r.json(), body);
    }
    assert_eq!(c.setting("monitoring.hold_fraction.gpu").await, "0.5");
    // A pool without its own value has the cluster's.
    assert_eq!(c.setting("monitoring.hold_fraction.cpu").await, "0.3");
    for (key, value) in [
        ("monitoring.hold_fraction", "1.5"),
        ("monitoring.hold_fraction", "NaN"),
        ("monitoring.hold_fraction.gpu", "-0.1"),
        ("monitoring.hold_fraction.gpu", "half"),
    ] {
        let (path, body) = set(key, value);
        let r = c.put(&c.admin, &path, body).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{key}={value}: {}",
            r.body
        );
        assert!(r.error().contains("from 0 to 1"), "{}", r.error());
    }
    let (path, body) = set("monitoring.hold_fraction.", "0.1");
    assert_eq!(
        c.put(&c.admin, &path, body).await.status,
        StatusCode::NOT_FOUND
    );
    // Users may not change it.
    let (path, body) = set("monitoring.hold_fraction.gpu", "1");
    assert_forbidden(&c.put(&c.alice, &path, body).await, "a user");
    assert_eq!(c.setting("monitoring.hold_fraction.gpu").await, "0.5");
    assert_eq!(c.setting("monitoring.hold_fraction").await, "0.3");
}

#[tokio::test]
async fn admin_creates_users() {
    let c = Cluster::start().await;
    let r = c
        .post(
            &c.admin,
            "/admin/users",
            Some(json!({"name": "dave", "group": "physics"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let created = r.json();
    assert_eq!(created["name"], "dave");
    assert_eq!(created["group"], "physics");
    assert_eq!(created["role"], "user");
    let dave = created["token"].as_str().expect("a token").to_string();
    let r = c.get(&dave, "/whoami").await;
    assert_eq!(r.status, StatusCode::OK, "the new token works: {}", r.body);
    assert_eq!(
        r.json(),
        json!({"user": "dave", "group": "physics", "role": "user"})
    );
    // Dave is in alice's group: he sees her work.
    let wf = c.submit(&c.alice, HELLO).await;
    assert_eq!(c.list_ids(&dave).await, BTreeSet::from([wf]));

    // A second user of the same name: 409, and the first keeps working.
    let r = c
        .post(
            &c.admin,
            "/admin/users",
            Some(json!({"name": "dave", "group": "chem"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(!r.error().is_empty());
    assert_eq!(c.get(&dave, "/whoami").await.json()["group"], "physics");
    // Users made by `Server::create_user` count too.
    let r = c
        .post(&c.admin, "/admin/users", Some(json!({"name": "alice"})))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);

    // Bad names: 400, and nothing half-made (the good name stays free).
    let long = "a".repeat(65);
    for body in [
        json!({"name": ""}),
        json!({"name": "with space"}),
        json!({"name": "a/b"}),
        json!({"name": "émile"}),
        json!({"name": long}),
        json!({"name": "erin", "group": "bad group"}),
        json!({"name": "erin", "group": ""}),
        json!({"name": "erin", "role": "superuser"}),
        json!({"group": "physics"}),
    ] {
        let r = c.post(&c.admin, "/admin/users", Some(body.clone())).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.body);
        assert!(!r.error().is_empty(), "{body}");
    }

    // Only an administrator creates users.
    let r = c
        .post(&c.alice, "/admin/users", Some(json!({"name": "erin"})))
        .await;
    assert_forbidden(&r, "alice creating a user");

    // The group defaults to the user's name; roles are honoured.
    let r = c
        .post(&c.admin, "/admin/users", Some(json!({"name": "erin"})))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()["group"], "erin");
    let r = c
        .post(
            &c.admin,
            "/admin/users",
            Some(json!({"name": "node-7", "role": "agent"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let agent = r.json()["token"].as_str().expect("a token").to_string();
    assert_forbidden(
        &c.get(&agent, "/whoami").await,
        "a new agent token on /whoami",
    );
    let r = c
        .post(
            &c.admin,
            "/admin/users",
            Some(json!({"name": "ops", "role": "admin"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let ops = r.json()["token"].as_str().expect("a token").to_string();
    assert_eq!(c.setting_as(&ops, "builds.enabled").await, "true");
}

#[tokio::test]
async fn stopping_a_pending_workflow_ends_it_stopped() {
    let c = Cluster::start().await;
    let wf = c.submit(&c.alice, HELLO).await;
    let other = c.submit(&c.alice, HELLO).await;

    let r = c
        .post(&c.alice, &format!("/workflows/{wf}/stop"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()["id"], wf.as_str());

    let d = c.wait_for_status(&c.alice, &wf, "STOPPED").await;
    assert!(
        !d["ended_at"].is_null(),
        "a stopped workflow has ended: {d}"
    );
    for t in d["tasks"].as_array().expect("tasks") {
        assert_eq!(t["status"], "STOPPED", "{d}");
    }
    let kinds = c.event_kinds(&wf).await;
    assert!(kinds.contains("workflow.stop"), "{kinds:?}");

    // Stopping it again: 409, with a JSON error that says it already ended.
    let r = c
        .post(&c.alice, &format!("/workflows/{wf}/stop"), None)
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(r.error().contains("STOPPED"), "{}", r.error());

    // The listing's filter sees it; the other workflow is still waiting.
    let stopped = c.list_ids_query(&c.alice, "?status=STOPPED").await;
    assert_eq!(stopped, BTreeSet::from([wf.clone()]));
    let pending = c.list_ids_query(&c.alice, "?status=PENDING").await;
    assert_eq!(pending, BTreeSet::from([other]));
}

/// `Server` has no shutdown method; it lives on the runtime that started it, so dropping that
/// runtime stops it (listener, controller, connections) as a process exit would.
#[test]
fn workflows_tokens_and_settings_survive_a_restart() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let runtime = || tokio::runtime::Runtime::new().expect("a tokio runtime");

    let first = runtime();
    let (wf, alice, admin, old_base) = first.block_on(async {
        let c = Cluster::start_in(dir.path()).await;
        let wf = c.submit(&c.alice, HELLO).await;
        let r = c
            .put(
                &c.admin,
                "/admin/settings/builds.enabled",
                json!({"key": "builds.enabled", "value": "false"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        (wf, c.alice.clone(), c.admin.clone(), c.base.clone())
    });
    first.shutdown_timeout(Duration::from_secs(10));

    let second = runtime();
    second.block_on(async {
        let gone = common::client()
            .get(format!("{old_base}/api/v1/whoami"))
            .send()
            .await;
        assert!(gone.is_err(), "the first server still answers: {gone:?}");

        let server = start_server(dir.path()).await;
        assert!(server.has_users().await.expect("the store answers"));
        let api = Api::new(&server);
        assert_eq!(api.get(&alice, "/whoami").await.json()["user"], "alice");
        assert_eq!(api.setting_as(&admin, "builds.enabled").await, "false");
        assert_eq!(api.list_ids(&alice).await, BTreeSet::from([wf.clone()]));
        let d = api.get(&alice, &format!("/workflows/{wf}")).await.json();
        assert_eq!(d["status"], "PENDING", "{d}");
        assert_eq!(d["tasks"][0]["job"], "main", "{d}");
        assert!(api
            .event_kinds_as(&admin, &wf)
            .await
            .contains("workflow.submitted"));

        // The new server's controller takes the workflow over.
        let r = api
            .post(&alice, &format!("/workflows/{wf}/stop"), None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        api.wait_for_status(&alice, &wf, "STOPPED").await;
    });
}

#[tokio::test]
async fn a_monitoring_token_only_posts_alerts_and_reads_targets() {
    let c = Cluster::start().await;
    let wf = c.submit(&c.alice, HELLO).await;
    let token = c
        .server
        .create_user(
            "alertmanager",
            "monitoring",
            gantry_api::v1::Role::Monitoring,
        )
        .await
        .unwrap();
    for route in routes(&wf) {
        let r = c.route(&route, Some(&bearer(&token))).await;
        if route.path.starts_with("/monitoring/") {
            assert!(
                r.status.is_success(),
                "{route} with the monitoring token: {} {}",
                r.status,
                r.body
            );
        } else {
            assert_forbidden(&r, &format!("{route} with the monitoring token"));
        }
    }
    c.assert_untouched(&wf).await;
}

#[tokio::test]
async fn secrets_are_kept_per_user_group_and_organization() {
    let c = Cluster::start().await;
    let put = |token: String, scope: &'static str, name: &'static str| {
        let api = &c.api;
        async move {
            api.put(
                &token,
                &format!("/secrets/{scope}/{name}"),
                json!({"value": "v"}),
            )
            .await
        }
    };
    assert_eq!(
        put(c.alice.clone(), "user", "k").await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        put(c.alice.clone(), "group", "shared").await.status,
        StatusCode::NO_CONTENT
    );
    assert_forbidden(
        &put(c.alice.clone(), "organization", "org-wide").await,
        "a user setting an organization secret",
    );
    assert_eq!(
        put(c.admin.clone(), "organization", "org-wide")
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        put(c.alice.clone(), "nope", "k").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        put(c.alice.clone(), "user", "../k").await.status,
        StatusCode::NOT_FOUND
    );

    let names = |token: &str| {
        let api = &c.api;
        let token = token.to_string();
        async move {
            let list = api.get(&token, "/secrets").await.json();
            let mut v: Vec<String> = list
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    assert!(s.get("value").is_none(), "a listing never shows a value");
                    s["uri"].as_str().unwrap().to_string()
                })
                .collect();
            v.sort();
            v
        }
    };
    assert_eq!(
        names(&c.alice).await,
        [
            "secret://group/shared",
            "secret://organization/org-wide",
            "secret://user/k"
        ]
    );
    // Carol shares alice's group, not her user secrets; bob shares neither.
    assert_eq!(
        names(&c.carol).await,
        ["secret://group/shared", "secret://organization/org-wide"]
    );
    assert_eq!(names(&c.bob).await, ["secret://organization/org-wide"]);
    // Bob deleting "user/k" deletes his own (absent) secret, never alice's.
    let r = c
        .api
        .raw(Method::DELETE, "/secrets/user/k", Some(&bearer(&c.bob)))
        .send()
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(names(&c.alice).await.len(), 3);
}

async fn delete(c: &Cluster, token: &str, path: &str) -> Reply {
    c.raw(Method::DELETE, path, Some(&bearer(token)))
        .send()
        .await
}

/// The id of `user`'s only token, as the admin listing shows it.
async fn token_id(c: &Cluster, user: &str) -> String {
    let r = c.get(&c.admin, &format!("/admin/tokens?user={user}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let list = r.json();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    list[0]["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn admins_list_disable_and_delete_users() {
    let c = Cluster::start().await;
    let r = c.get(&c.admin, "/admin/users").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let users = r.json();
    let names: Vec<&str> = users
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["agent-1", "alice", "bob", "carol", "root"]);
    let alice = &users[1];
    assert_eq!(
        (
            &alice["group"],
            &alice["role"],
            &alice["disabled"],
            &alice["tokens"]
        ),
        (&json!("physics"), &json!("user"), &json!(false), &json!(1))
    );

    let r = c.get(&c.admin, "/admin/users/alice").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let d = r.json();
    assert_eq!(d["user"]["name"], "alice");
    assert_eq!(d["tokens"].as_array().unwrap().len(), 1);
    assert!(
        !r.body.contains(&c.alice) && !r.body.contains(&c.alice[7..]),
        "a listing shows no secret: {}",
        r.body
    );
    assert_eq!(
        c.get(&c.admin, "/admin/users/nobody").await.status,
        StatusCode::NOT_FOUND
    );

    // Disabled: every token refused at once, with why; work already submitted is left alone.
    let wf = c.submit(&c.alice, HELLO).await;
    let r = c.post(&c.admin, "/admin/users/alice/disable", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()["disabled"], true);
    let r = c.get(&c.alice, "/whoami").await;
    assert_unauthorized(&r, "a disabled user's token");
    assert!(r.error().contains("alice is disabled"), "{}", r.body);
    let r = c.get(&c.admin, &format!("/workflows/{wf}")).await;
    assert_eq!(r.json()["status"], "PENDING", "{}", r.body);
    let r = c.post(&c.admin, "/admin/users/alice/enable", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(c.get(&c.alice, "/whoami").await.status, StatusCode::OK);

    // The last administrator is neither disabled nor deleted.
    let r = c.post(&c.admin, "/admin/users/root/disable", None).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    let r = delete(&c, &c.admin, "/admin/users/root?force=true").await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert_eq!(c.get(&c.admin, "/whoami").await.status, StatusCode::OK);

    // A user who owns a workflow not yet ended is kept unless forced.
    let r = delete(&c, &c.admin, "/admin/users/alice").await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(r.error().contains("force"), "{}", r.body);
    assert_eq!(c.get(&c.alice, "/whoami").await.status, StatusCode::OK);
    let r = delete(&c, &c.admin, "/admin/users/alice?force=true").await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    assert_unauthorized(&c.get(&c.alice, "/whoami").await, "a deleted user's token");
    let r = delete(&c, &c.admin, "/admin/users/alice").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    // Her group still sees her workflow.
    assert_eq!(c.list_ids(&c.carol).await, BTreeSet::from([wf]));
}

#[tokio::test]
async fn admins_list_revoke_and_rotate_tokens_that_expire() {
    let c = Cluster::start().await;
    let r = c.get(&c.admin, "/admin/tokens").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json().as_array().unwrap().len(), 5);
    assert_eq!(
        c.get(&c.admin, "/admin/tokens?user=nobody").await.status,
        StatusCode::NOT_FOUND
    );

    // New tokens expire by the setting unless asked; never on request.
    let r = c
        .post(&c.admin, "/admin/users", Some(json!({"name": "dave"})))
        .await;
    let at = time::OffsetDateTime::parse(
        r.json()["expires_at"].as_str().expect("an expiry"),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let days = (at - time::OffsetDateTime::now_utc()).whole_days();
    assert!((89..=90).contains(&days), "90 days by default, not {days}");
    let r = c
        .post(
            &c.admin,
            "/admin/users",
            Some(json!({"name": "erin", "expires": "never"})),
        )
        .await;
    assert!(r.json()["expires_at"].is_null(), "{}", r.body);
    for bad in ["0d", "soon", "-1h"] {
        let r = c
            .post(
                &c.admin,
                "/admin/users",
                Some(json!({"name": "frank", "expires": bad})),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.body);
    }
    assert_eq!(
        c.get(&c.admin, "/admin/users/frank").await.status,
        StatusCode::NOT_FOUND,
        "a refused create makes nothing"
    );
    let r = c
        .put(
            &c.admin,
            "/admin/settings/tokens.default_expiry",
            json!({"key": "tokens.default_expiry", "value": "soon"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);

    // An expired token: 401 that says when.
    let r = c
        .post(
            &c.admin,
            "/admin/users",
            Some(json!({"name": "gina", "expires": "1s"})),
        )
        .await;
    let gina = r.json()["token"].as_str().unwrap().to_string();
    assert_eq!(c.get(&gina, "/whoami").await.status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = c.get(&gina, "/whoami").await;
    assert_unauthorized(&r, "an expired token");
    assert!(r.error().starts_with("token expired on "), "{}", r.body);
    let listed = c.get(&c.admin, "/admin/tokens?user=gina").await.json();
    assert_eq!(listed[0]["expired"], true);

    // Rotated: same id and user, the old secret 401, the new one works.
    let id = token_id(&c, "bob").await;
    let r = c
        .post(
            &c.admin,
            &format!("/admin/tokens/{id}/rotate"),
            Some(json!({"expires": "30d"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let rotated = r.json();
    assert_eq!(
        (&rotated["info"]["id"], &rotated["info"]["user"]),
        (&json!(id), &json!("bob"))
    );
    let new = rotated["token"].as_str().unwrap().to_string();
    assert_unauthorized(
        &c.get(&c.bob, "/whoami").await,
        "a rotated token's old secret",
    );
    assert_eq!(c.get(&new, "/whoami").await.json()["user"], "bob");

    // Revoked: 401 at once, and gone from the list.
    let r = delete(&c, &c.admin, &format!("/admin/tokens/{id}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_unauthorized(&c.get(&new, "/whoami").await, "a revoked token");
    let r = c.get(&c.admin, "/admin/tokens?user=bob").await;
    assert_eq!(r.json(), json!([]));
    let r = delete(&c, &c.admin, &format!("/admin/tokens/{id}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
}

#[tokio::test]
async fn users_cannot_manage_users_others_tokens_or_another_groups_endpoint_tokens() {
    let c = Cluster::start().await;
    let carol_id = token_id(&c, "carol").await;
    for (method, path, body) in [
        (Method::GET, "/admin/users".to_string(), None),
        (Method::GET, "/admin/users/carol".into(), None),
        (Method::POST, "/admin/users/carol/disable".into(), None),
        (Method::POST, "/admin/users/bob/enable".into(), None),
        (Method::DELETE, "/admin/users/carol?force=true".into(), None),
        (Method::GET, "/admin/tokens".into(), None),
        (Method::GET, "/admin/tokens?user=bob".into(), None),
        (Method::DELETE, format!("/admin/tokens/{carol_id}"), None),
        (
            Method::POST,
            format!("/admin/tokens/{carol_id}/rotate"),
            Some(json!({})),
        ),
    ] {
        let mut req = c.raw(method.clone(), &path, Some(&bearer(&c.bob)));
        if let Some(b) = &body {
            req = req.json(b);
        }
        assert_forbidden(&req.send().await, &format!("bob: {method} {path}"));
    }
    assert_eq!(c.get(&c.carol, "/whoami").await.status, StatusCode::OK);
    assert_eq!(
        token_id(&c, "carol").await,
        carol_id,
        "carol's token untouched"
    );

    // Alice's endpoint and its token: bob (chem) neither lists nor revokes it.
    let r = c
        .post(&c.alice, "/endpoints", Some(json!({"name": "chat"})))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = c
        .post(
            &c.alice,
            "/endpoints/chat/tokens",
            Some(json!({"expires": "1h"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let ep_id = r.json()["id"].as_str().unwrap().to_string();
    let r = c.get(&c.alice, "/endpoints/chat/tokens").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()[0]["id"], ep_id.as_str());
    assert_eq!(r.json()[0]["created_by"], "alice");
    assert_eq!(
        c.get(&c.alice, "/endpoint-tokens").await.json()[0]["id"],
        ep_id.as_str()
    );
    let r = c.get(&c.bob, "/endpoints/chat/tokens").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert_eq!(c.get(&c.bob, "/endpoint-tokens").await.json(), json!([]));
    let r = delete(&c, &c.bob, &format!("/endpoint-tokens/{ep_id}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert_eq!(
        c.get(&c.alice, "/endpoints/chat/tokens").await.json()[0]["id"],
        ep_id.as_str(),
        "bob's attempt changed nothing"
    );
    // The owner revokes it; the admin sees every endpoint's tokens.
    assert_eq!(
        c.get(&c.admin, "/endpoint-tokens").await.json()[0]["id"],
        ep_id.as_str()
    );
    let r = delete(&c, &c.alice, &format!("/endpoint-tokens/{ep_id}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        c.get(&c.alice, "/endpoints/chat/tokens").await.json(),
        json!([])
    );
}
