//! Data ingress, attacked: a symlink planted in the volume while its transfers run must not
//! lead a write out of the volume, another group's transfer secret is not there to use, and
//! another group's transfers' progress and events are not there to see.

use super::common::http::{Route, Server};
use super::common::Cluster;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ingress_file(
    c: &Cluster,
    name: &str,
    first: &str,
    second: &str,
    secret: &str,
) -> std::path::PathBuf {
    c.write(
        name,
        &format!(
            r#"version: v4
volumes:
  data:
    ingress:
      - source: {{ uri: "{first}" }}
        destination: {{ uri: "file://first.txt" }}
      - source: {{ uri: "{second}"{secret} }}
        destination: {{ uri: "file://link/passwd" }}
jobs:
  read:
    image: {{ uri: docker://busybox:1 }}
    mounts: {{ /data: {{ volume: data }} }}
    command: [ cat, /data/first.txt, /data/link/passwd ]
"#
        ),
    )
}

#[test]
fn a_symlink_planted_in_the_volume_does_not_lead_an_ingress_out_of_it() {
    let srv = Server::start(vec![
        ("/hold", Route::Hold(b"first\n".to_vec())),
        ("/payload", Route::Body(b"payload\n".to_vec())),
    ]);
    let c = Cluster::up(1);
    let ana = c.user_token("ana", "ga");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("passwd"), "untouched\n").unwrap();

    // The attack: while the first transfer runs, `link` in the volume becomes a symlink to a
    // directory of the host (what a container of an earlier step, or a persistent volume's
    // earlier user, could leave there).
    let file = ingress_file(
        &c,
        "attack.yaml",
        &srv.url("/hold"),
        &srv.url("/payload"),
        "",
    );
    let id = c.start_as(&ana, &file);
    srv.held();
    let vol = c
        .data_dir()
        .join("storage/default/ephemeral")
        .join(&id)
        .join("data");
    std::os::unix::fs::symlink(outside.path(), vol.join("link")).unwrap();
    srv.release();
    let d = c.wait_status(&id, "FAILED");
    let t = Cluster::task(&d, "ingress:data");
    let why = t["attempts"][0]["reason"].as_str().unwrap_or_default();
    assert!(why.contains("symlink"), "{why}");
    assert!(Cluster::task(&d, "read")["attempts"]
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(
        std::fs::read_to_string(outside.path().join("passwd")).unwrap(),
        "untouched\n"
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);

    // The legitimate use: the same transfers with nothing planted land in the volume.
    let id = c.start_as(&ana, &file);
    srv.held();
    srv.release();
    c.wait_status(&id, "FINISHED");
    let out = c.as_user(&ana, &["workflow", "log", &id, "read"]);
    assert_eq!(text(&out.stdout), "first\npayload\n");
}

#[test]
fn another_groups_transfer_secret_is_not_found() {
    let srv = Server::start(vec![
        ("/hold", Route::Body(b"first\n".to_vec())),
        (
            "/private",
            Route::Bearer("t0k-of-ga".into(), b"private\n".to_vec()),
        ),
    ]);
    let c = Cluster::up(1);
    let ana = c.user_token("ana", "ga");
    let ben = c.user_token("ben", "gb");
    let out = c.as_user(
        &ana,
        &[
            "secret",
            "set",
            "web",
            "--scope",
            "group",
            "--type",
            "http",
            "--value",
            r#"{"token":"t0k-of-ga"}"#,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = ingress_file(
        &c,
        "private.yaml",
        &srv.url("/hold"),
        &srv.url("/private"),
        ", secret: secret://group/web",
    );

    // Ana's group's secret opens the private URL for her.
    let id = c.start_as(&ana, &file);
    c.wait_status(&id, "FINISHED");
    let out = c.as_user(&ana, &["workflow", "log", &id, "read"]);
    assert_eq!(text(&out.stdout), "first\nprivate\n");

    // Ben, of another group, naming the same secret gets "does not exist", and nothing runs.
    let before = srv.seen.lock().unwrap().len();
    let out = c.as_user(&ben, &["workflow", "start", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("secret://group/web does not exist"), "{err}");
    assert_eq!(
        srv.seen.lock().unwrap().len(),
        before,
        "no request was made"
    );
    // Nor is the secret listed to him.
    let out = c.as_user(&ben, &["secret", "list", "-o", "json"]);
    assert!(
        !text(&out.stdout).contains("\"web\""),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn another_groups_transfer_progress_and_events_are_not_found() {
    let body: Vec<u8> = (0..100_000u32).map(|i| (i % 239) as u8).collect();
    let srv = Server::start(vec![("/slow", Route::Trickle(body))]);
    let c = Cluster::up(1);
    let ana = c.user_token("ana", "ga");
    let ben = c.user_token("ben", "gb");
    let file = c.write(
        "slow.yaml",
        &format!(
            r#"version: v4
volumes:
  data:
    ingress:
      - source: {{ uri: "{}" }}
        destination: {{ uri: "file://slow.bin" }}
jobs:
  read:
    image: {{ uri: docker://busybox:1 }}
    mounts: {{ /data: {{ volume: data }} }}
    command: [ "true" ]
"#,
            srv.url("/slow")
        ),
    );
    let id = c.start_as(&ana, &file);
    srv.held();
    // Ana sees her transfer moving (the legitimate use)...
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let out = c.as_user(&ana, &["workflow", "describe", &id, "-o", "json"]);
        let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if !Cluster::task(&d, "ingress:data")["progress"].is_null() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no progress: {d:#}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // ...Ben, of another group, finds neither it nor its events.
    for args in [["workflow", "describe"], ["workflow", "events"]] {
        let out = c.as_user(&ben, &[args[0], args[1], &id, "-o", "json"]);
        assert!(!out.status.success());
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("no workflow {id}")),
            "{args:?}: {err}"
        );
        assert!(!text(&out.stdout).contains("slow"), "{args:?}");
    }
    srv.release();
    c.wait_status(&id, "FINISHED");
    let out = c.as_user(&ana, &["workflow", "events", &id, "-o", "json"]);
    assert!(text(&out.stdout).contains("transfer.done"));
    let out = c.as_user(&ben, &["workflow", "events", &id, "-o", "json"]);
    assert!(!out.status.success() && !text(&out.stdout).contains("transfer.done"));
}
