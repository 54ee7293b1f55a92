//! A first run from the binary alone: the examples it ships, named contexts (and what a client
//! verb says when the current one's server is down), and registry errors that say their cause.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{Cluster, GANTRY};

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The binary with only a scratch home: no data dir, no contexts but what the test writes.
fn bare(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(GANTRY)
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("GANTRY_DATA_DIR")
        .env_remove("GANTRY_URL")
        .env_remove("GANTRY_TOKEN")
        .env_remove("GANTRY_CONTEXT")
        .output()
        .unwrap()
}

/// `gantry up`'s log once it holds `needle`: it prints its summary after the agents register,
/// which is when `Cluster::up` returns, so it may not be there yet.
fn log_with(c: &Cluster, needle: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let log = c.log();
        if log.contains(needle) || std::time::Instant::now() > deadline {
            return log;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_examples_ship_in_the_binary_and_the_pipeline_runs_from_stdin() {
    let home = tempfile::tempdir().unwrap();
    let list = bare(home.path(), &["example"]);
    assert!(list.status.success());
    let list = text(&list.stdout);
    assert!(
        list.contains("pipeline") && list.contains("service-endpoint"),
        "{list}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&bare(home.path(), &["example", "-o", "json"]).stdout).unwrap();
    assert_eq!(json[0]["name"], "pipeline");

    let shipped = bare(home.path(), &["example", "pipeline"]);
    assert!(shipped.status.success());
    let repo = std::fs::read(common::repo_root().join("examples/pipeline.yaml")).unwrap();
    assert_eq!(
        shipped.stdout, repo,
        "the binary prints the repository's file"
    );

    let nope = bare(home.path(), &["example", "nope"]);
    assert_eq!(nope.status.code(), Some(2));
    assert!(
        text(&nope.stderr).contains("there are: pipeline"),
        "{}",
        text(&nope.stderr)
    );

    // `gantry up` says how to run it without the repository; that line works as written.
    let c = Cluster::up(1);
    let log = log_with(&c, "Try:");
    assert!(
        log.contains("Try: gantry example pipeline | gantry workflow start - --watch"),
        "{log}"
    );
    assert!(
        log.contains("oci://"),
        "gantry up says how to run offline: {log}"
    );
    let mut start = c
        .command(&["workflow", "start", "-", "--watch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    start
        .stdin
        .take()
        .unwrap()
        .write_all(&shipped.stdout)
        .unwrap();
    let out = start.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the pipeline from stdin finishes: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn an_old_context_file_reads_as_default_and_a_dead_server_is_named() {
    let home = tempfile::tempdir().unwrap();
    let port = closed_port();
    let config = home.path().join("config/gantry");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("context.toml"),
        format!("url = \"http://127.0.0.1:{port}\"\ntoken = \"t\"\n"),
    )
    .unwrap();

    let list: serde_json::Value =
        serde_json::from_slice(&bare(home.path(), &["context", "list", "-o", "json"]).stdout)
            .unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list:#}");
    assert_eq!(list[0]["name"], "default");
    assert_eq!(list[0]["server"], format!("http://127.0.0.1:{port}"));
    assert_eq!(list[0]["current"], true);

    let out = bare(home.path(), &["workflow", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "the server of context default (http://127.0.0.1:{port}) is not answering: is it running?"
        )),
        "{err}"
    );

    // A name that is not there is refused, and nothing changes.
    let out = bare(home.path(), &["context", "use", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no context \"nope\"; there are: default"));
    assert!(!config.join("contexts.toml").exists());
    let out = bare(home.path(), &["--context", "nope", "node", "list"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn gantry_up_names_its_context_and_says_what_it_replaced() {
    let mut c = Cluster::up(1);
    let name = c
        .data_dir()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let url = format!("http://127.0.0.1:{}", c.port);
    let points = format!("context {name} now points at {url}");
    let log = log_with(&c, &points);
    assert!(log.contains(&points), "{log}");
    let list = c.json(&["context", "list"]);
    let mine = list
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == name.as_str())
        .expect("gantry up's context is listed");
    assert_eq!(mine["server"], url.as_str());
    assert_eq!(mine["current"], true);
    assert_eq!(mine["user"], "admin");
    // It holds tokens: only its owner may read it.
    use std::os::unix::fs::PermissionsExt;
    let contexts = c.data_dir().join("config/gantry/contexts.toml");
    let mode = std::fs::metadata(&contexts).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "contexts.toml is private");

    // Another context is current and this one points elsewhere: a restart says both.
    c.interrupt();
    std::fs::write(
        &contexts,
        format!(
            "current = \"other\"\n\n[contexts.{name}]\nurl = \"http://127.0.0.1:1\"\ntoken = \"x\"\n\n\
             [contexts.other]\nurl = \"http://127.0.0.1:2\"\ntoken = \"y\"\n"
        ),
    )
    .unwrap();
    c.start();
    let log = log_with(&c, "it replaced");
    assert!(
        log.contains(&format!(
            "it replaced context {name}, which pointed at http://127.0.0.1:1"
        )),
        "{log}"
    );
    assert!(
        log.contains("the current context was other; go back with `gantry context use other`"),
        "{log}"
    );
    // Without the data dir, the current context is the one `gantry up` wrote.
    let out = c
        .command(&["node", "list", "-o", "json"])
        .env_remove("GANTRY_DATA_DIR")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // --context picks another one for one command.
    let out = c
        .command(&["--context", "other", "node", "list"])
        .env_remove("GANTRY_DATA_DIR")
        .output()
        .unwrap();
    assert!(
        text(&out.stderr)
            .contains("the server of context other (http://127.0.0.1:2) is not answering"),
        "{}",
        text(&out.stderr)
    );
    c.ok(&["context", "use", "other"]);
    let list = c.json(&["context", "list"]);
    let other = list
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "other")
        .unwrap();
    assert_eq!(other["current"], true);
}

fn one_job(image: &str) -> String {
    format!(
        "version: v4\njobs:\n  pull:\n    image:\n      uri: {image}\n    script: |\n      #!/bin/sh\n      true\n"
    )
}

#[test]
fn a_registry_that_cannot_be_reached_fails_the_task_with_the_matching_hint() {
    let c = Cluster::up(1);
    let port = closed_port();
    let file = c.write(
        "refused.yaml",
        &one_job(&format!("docker://127.0.0.1:{port}/library/busybox:1")),
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "the pull to fail", |d| d["status"] == "FAILED");
    let reason = Cluster::task(&d, "pull")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains(&format!(
            "nothing listens on 127.0.0.1:{port}; is the registry up?"
        )),
        "{reason}"
    );
    assert!(!reason.contains("insecure"), "{reason}");

    let file = c.write(
        "dns.yaml",
        &one_job("docker://nonexistent.invalid/library/busybox:1"),
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "the pull to fail", |d| d["status"] == "FAILED");
    let reason = Cluster::task(&d, "pull")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("cannot resolve nonexistent.invalid"),
        "{reason}"
    );
}

#[test]
fn a_build_whose_base_cannot_be_fetched_says_why() {
    let c = Cluster::up(1);
    let port = closed_port();
    let file = c.write(
        "build.yaml",
        &format!(
            "version: v4\nimages:\n  tool:\n    from: docker://127.0.0.1:{port}/library/busybox:1\n    \
             run:\n      - touch /x\njobs:\n  use-it:\n    image: {{ build: tool }}\n    script: |\n      \
             #!/bin/sh\n      true\n"
        ),
    );
    let out = c.gantry(&["workflow", "start", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("nothing listens on 127.0.0.1:{port}")),
        "the base's cause is kept: {err}"
    );
}
