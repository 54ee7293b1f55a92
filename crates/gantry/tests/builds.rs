//! Image builds inside workflows, end to end: a recipe on a busybox base from the local
//! registry is built on a node in a confined runc container, pushed to the server's object
//! cache, and a job runs in the result. Nothing is downloaded during the build.

mod common;

use common::Cluster;

fn recipe(scope: &str, run: &str) -> String {
    format!(
        r#"version: v4
files:
  greeting.txt: |
    hello from the recipe
images:
  tool:
    from: docker://busybox:1
    files:
      /opt/app/greeting.txt: file://greeting.txt
    run:
      - {run}
    env: [ TOOL_HOME=/opt/app ]
    scope: {scope}
jobs:
  use-it:
    image: {{ build: tool }}
    script: |
      #!/bin/sh
      cat $TOOL_HOME/greeting.txt $TOOL_HOME/built.txt
"#
    )
}

fn build_task(d: &serde_json::Value) -> &serde_json::Value {
    Cluster::task(d, "build:tool")
}

#[test]
fn a_workflow_builds_its_image_runs_a_job_in_it_and_a_resubmit_is_a_cache_hit() {
    let c = Cluster::up(1);
    let file = c.write(
        "build.yaml",
        &recipe("user", "\"echo built in a container > /opt/app/built.txt\""),
    );
    let out = c.gantry(&["workflow", "start", file.to_str().unwrap(), "--watch"]);
    let id = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.log()
    );
    let d = c.detail(&id);
    assert_eq!(build_task(&d)["status"], "FINISHED");
    assert_eq!(
        build_task(&d)["attempts"].as_array().unwrap().len(),
        1,
        "it really built"
    );
    assert_eq!(
        c.ok(&["workflow", "log", &id, "use-it"]),
        "hello from the recipe\nbuilt in a container\n"
    );
    let build_log = c.ok(&["workflow", "log", &id, "build:tool"]);
    assert!(build_log.contains("step"), "progress is shown: {build_log}");

    // The image is in the object cache, for its owner.
    let images = c.json(&["image", "list"]);
    assert!(images.to_string().contains("tool"), "{images:#}");

    // The same recipe again: nothing builds.
    let again = c.start_workflow(&file);
    let d = c.wait_status(&again, "FINISHED");
    let b = build_task(&d);
    assert_eq!(b["status"], "FINISHED");
    assert!(
        b["attempts"].as_array().unwrap().is_empty(),
        "a cache hit runs no build: {b:#}"
    );
    assert!(b["reason"].as_str().unwrap().contains("cache hit"), "{b:#}");
    let hit_log = c.ok(&["workflow", "log", &again, "build:tool"]);
    assert!(
        hit_log.starts_with("cache hit: ") && hit_log.contains("nothing to build"),
        "a cache hit's log says so: {hit_log:?}"
    );
    assert_eq!(
        c.ok(&["workflow", "log", &again, "use-it"]),
        "hello from the recipe\nbuilt in a container\n"
    );
}

#[test]
fn a_failing_step_fails_the_workflow_clearly_and_builds_can_be_switched_off() {
    let c = Cluster::up(1);
    let file = c.write(
        "bad.yaml",
        &recipe("user", "\"echo about to fail; exit 7\""),
    );
    let id = c.start_workflow(&file);
    let d = c.wait_status(&id, "FAILED");
    assert_eq!(build_task(&d)["status"], "FAILED");
    let why = build_task(&d)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        why.contains("exited with code 7") && why.contains("step 2/2"),
        "the build's own error: {why}"
    );
    let events = c.ok(&["workflow", "events", &id]);
    assert!(events.contains("step 2/2"), "{events}");
    let job = Cluster::task(&d, "use-it");
    assert_eq!(job["status"], "FAILED");
    assert_eq!(job["reason"], "dependency build:tool ended FAILED");
    let log = c.ok(&["workflow", "log", &id, "build:tool"]);
    assert!(log.contains("about to fail"), "{log}");

    c.ok(&["admin", "settings", "set", "builds.enabled=false"]);
    let good = c.write("good.yaml", &recipe("user", "\"true\""));
    let out = c.gantry(&["workflow", "start", good.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("image builds are disabled on this cluster"),
        "{err}"
    );
}

#[test]
fn a_group_image_is_reused_by_the_group_and_never_by_a_stranger() {
    let c = Cluster::up(1);
    let token = |name: &str, group: &str| {
        c.json(&["admin", "user", "create", name, "--group", group])["token"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (alice, carol, bob) = (
        token("alice", "physics"),
        token("carol", "physics"),
        token("bob", "chem"),
    );
    let url = format!("http://127.0.0.1:{}", c.port);
    let as_user = |tok: &str, args: &[&str]| {
        c.command(args)
            .env("GANTRY_URL", &url)
            .env("GANTRY_TOKEN", tok)
            .output()
            .unwrap()
    };
    let file = c.write(
        "group.yaml",
        &recipe(
            "group",
            "\"echo built in a container > /opt/app/built.txt\"",
        ),
    );
    let f = file.to_str().unwrap();
    let start = |tok: &str| {
        let out = as_user(tok, &["workflow", "start", f]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let a = start(&alice);
    let d = c.wait_status(&a, "FINISHED");
    assert_eq!(
        build_task(&d)["attempts"].as_array().unwrap().len(),
        1,
        "alice builds"
    );

    let k = start(&carol);
    let d = c.wait_status(&k, "FINISHED");
    assert!(
        build_task(&d)["attempts"].as_array().unwrap().is_empty(),
        "carol reuses the group's image"
    );

    let b = start(&bob);
    let d = c.wait_status(&b, "FINISHED");
    assert_eq!(
        build_task(&d)["attempts"].as_array().unwrap().len(),
        1,
        "bob's group builds its own"
    );

    // Bob may not name the physics group's image directly.
    let physics = c.json(&["image", "list"]);
    let tag = physics
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["scope"] == "group" && i["owner"] == "physics")
        .and_then(|i| i["tag"].as_str())
        .expect("the physics image is listed")
        .to_string();
    let stolen = c.write(
        "stolen.yaml",
        &format!(
            "version: v4\njobs:\n  x:\n    image: {{ uri: \"docker://127.0.0.1:{}/group/physics/tool:{tag}\" }}\n    command: [\"true\"]\n",
            c.port
        ),
    );
    let out = as_user(&bob, &["workflow", "start", stolen.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("that you may use"));
    let listed = as_user(&bob, &["image", "list", "-o", "json"]);
    assert!(!String::from_utf8_lossy(&listed.stdout).contains("physics"));
}
