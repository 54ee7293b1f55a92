//! `gantry agent --label` and `--print-labels`, run as an administrator would run them: the
//! built binary, its standard output and exit status. No GPU can run here, so the labels
//! printed are the administrator's and the CPU's (`scripts/gpu-labels-check.sh` shows the GPU
//! ones on a GPU machine).

use std::process::{Command, Output};

const GANTRY: &str = env!("CARGO_BIN_EXE_gantry");

fn agent(args: &[&str]) -> Output {
    Command::new(GANTRY)
        .arg("agent")
        .args(args)
        // The agent's flags read these; the user running the tests may have them set.
        .env_remove("GANTRY_URL")
        .env_remove("GANTRY_AGENT_TOKEN")
        .output()
        .expect("running gantry")
}

fn cpu_model() -> Option<String> {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()?
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
}

#[test]
fn print_labels_shows_the_admins_and_the_cpus() {
    // Neither --server nor --token: printing needs no server.
    let out = agent(&["--print-labels", "--label", "zone=a", "--label", "rack=r1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let labels: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(labels["zone"], "a");
    assert_eq!(labels["rack"], "r1");
    if let Some(model) = cpu_model() {
        assert_eq!(labels["cpu.model"], model.as_str());
    }
    // The admin's word over what is found.
    let out = agent(&["--print-labels", "--label", "cpu.model=by-hand"]);
    let labels: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(labels["cpu.model"], "by-hand");
}

#[test]
fn bad_labels_are_refused_at_start() {
    for (label, says) in [
        ("zone", "KEY=VALUE"),
        ("bad key=1", "label key `bad key`"),
        ("Example.com/zone=a", "prefix"),
        ("zone=a\u{7}", "control character"),
    ] {
        // With a server to reach: the agent stops before it tries.
        let out = agent(&[
            "--server",
            "http://127.0.0.1:9",
            "--token",
            "t",
            "--label",
            label,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{label}: accepted");
        assert!(err.contains(says), "{label}: {err}");
    }
    let out = agent(&["--print-labels", "--label", "zone=a", "--label", "zone=b"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("label `zone` is given twice"));
    assert!(out.stdout.is_empty(), "printed labels it refused");
}
