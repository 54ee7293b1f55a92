//! Containers under real runc, with real shims (the static shim the runtime writes out). This
//! is a `harness = false` test: one process runs the tests in order (see below).
//!
//! Tests run one after another in this process. Every container records the pid of the test
//! process that made it (in its metadata), so leftovers of killed runs are removed at start
//! without touching containers of tests running in other processes (nextest runs each test in
//! its own process).

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gantry_agent::image::{ImageStore, PullConfig};
use gantry_agent::runtime::{
    Bind, ContainerSpec, ContainerState, Runtime, RuntimeConfig, RuntimeError,
};
use gantry_api::agent::ImageSource;

const CGROUP_PARENT: &str = "gantry-test/agent-runtime";

struct Ctx {
    rt: Runtime,
    config: RuntimeConfig,
    layers: Vec<PathBuf>,
}

impl Ctx {
    fn spec(&self, id: &str, script: &str) -> ContainerSpec {
        ContainerSpec {
            id: id.to_owned(),
            layers: self.layers.clone(),
            args: vec!["/bin/sh".into(), "-c".into(), script.into()],
            env: vec!["PATH=/bin:/usr/bin".into()],
            cwd: "/".into(),
            user: None,
            mounts: vec![],
            files: vec![],
            cpus: 1.0,
            memory_bytes: Some(256 << 20),
            pids_limit: Some(gantry_agent::runtime::DEFAULT_PIDS_LIMIT),
            hostname: String::new(),
            host_network: false,
        }
    }

    fn run(&self, spec: &ContainerSpec) -> (i32, String, String) {
        let rt = &self.rt;
        rt.start(spec, &meta()).unwrap();
        let code = match wait_exit(rt, &spec.id) {
            ContainerState::Exited { exit_code, .. } => exit_code,
            other => panic!("{other:?}"),
        };
        let (out, err) = rt.log_paths(&spec.id);
        let out = fs::read_to_string(out).unwrap();
        let err = fs::read_to_string(err).unwrap();
        rt.remove(&spec.id).unwrap();
        (code, out, err)
    }
}

/// Every container's metadata names the test process that owns it.
fn meta() -> serde_json::Value {
    serde_json::json!({ "test_pid": std::process::id() })
}

fn wait_exit(rt: &Runtime, id: &str) -> ContainerState {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = rt.status(id);
        if s != ContainerState::Running || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn output_and_exit_code(c: &Ctx) {
    let (code, out, err) = c.run(&c.spec("t-output", "echo hello; echo err >&2; exit 3"));
    assert_eq!(code, 3);
    assert_eq!(out, "hello\n");
    assert_eq!(err, "err\n");
}

fn env_cwd_mounts_and_files(c: &Ctx) {
    let dir = common::scratch("volumes");
    let (rw, ro) = (dir.path().join("rw"), dir.path().join("ro"));
    fs::create_dir_all(&rw).unwrap();
    fs::create_dir_all(&ro).unwrap();
    fs::write(rw.join("in.txt"), "from host\n").unwrap();
    let mut spec = c.spec(
        "t-env",
        "echo foo=$FOO; pwd; cat /data/in.txt; cat /etc/gantry/injected.txt; \
         echo out > /data/out.txt; \
         if touch /ro/x 2>/dev/null; then echo ro-writable; else echo ro-refused; fi; \
         if echo x > /etc/gantry/injected.txt 2>/dev/null; then echo file-writable; else echo file-refused; fi; \
         hostname; id -u",
    );
    spec.env.push("FOO=bar baz".into());
    spec.cwd = "/work/dir".into();
    spec.hostname = "box".into();
    spec.mounts = vec![
        Bind {
            source: rw.clone(),
            target: "/data".into(),
            read_only: false,
        },
        Bind {
            source: ro,
            target: "/ro".into(),
            read_only: true,
        },
    ];
    spec.files = vec![("/etc/gantry/injected.txt".into(), b"injected\n".to_vec())];
    let (code, out, err) = c.run(&spec);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "foo=bar baz\n/work/dir\nfrom host\ninjected\nro-refused\nfile-refused\nbox\n0\n"
    );
    assert_eq!(fs::read_to_string(rw.join("out.txt")).unwrap(), "out\n");
}

/// A volume holding a fake `confine` mounted at `/dev` would replace every container's init and
/// run it without the seccomp filter: the kernel's trees and the root are refused as targets
/// of mounts and files, while a volume beside them still mounts, and its process is confined.
fn machinery_cannot_be_shadowed(c: &Ctx) {
    let dir = common::scratch("shadow");
    let vol = dir.path().join("vol");
    fs::create_dir_all(&vol).unwrap();
    fs::write(vol.join("confine"), "#!/bin/sh\nexec \"$@\"\n").unwrap();
    for target in [
        "/dev",
        "/dev/",
        "/dev/confine",
        "/dev/seccomp.bpf",
        "/",
        "/proc/sys",
        "/sys",
    ] {
        let mut spec = c.spec("t-shadow", "true");
        spec.mounts = vec![Bind {
            source: vol.clone(),
            target: target.into(),
            read_only: false,
        }];
        match c.rt.start(&spec, &meta()) {
            Err(RuntimeError::InvalidSpec(m)) => {
                assert!(m.contains(target.trim_end_matches('/')), "{m}")
            }
            other => panic!("a mount at {target}: {other:?}"),
        }
        let mut spec = c.spec("t-shadow", "true");
        spec.files = vec![(target.into(), b"fake".to_vec())];
        assert!(
            matches!(
                c.rt.start(&spec, &meta()),
                Err(RuntimeError::InvalidSpec(_))
            ),
            "a file at {target}"
        );
        assert_eq!(
            c.rt.status("t-shadow"),
            ContainerState::Unknown,
            "nothing left"
        );
    }
    let mut spec = c.spec(
        "t-shadow",
        "grep -E '^Seccomp:' /proc/self/status; ls /data",
    );
    spec.mounts = vec![Bind {
        source: vol,
        target: "/data".into(),
        read_only: false,
    }];
    let (code, out, err) = c.run(&spec);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "Seccomp:\t2\nconfine\n");
}

/// Defense in depth: root in a job's container is an unprivileged host uid, a different one for
/// each container that runs at once, while what it writes into a volume keeps the owners it
/// would have without a user namespace, and the image still reads as root's.
fn jobs_run_in_a_user_namespace_of_their_own(c: &Ctx) {
    use std::os::unix::fs::MetadataExt;
    let range =
        c.rt.job_userns()
            .expect("this node runs jobs in user namespaces");
    let dir = common::scratch("userns");
    let vol = dir.path().join("vol");
    fs::create_dir_all(&vol).unwrap();
    let mut a = c.spec(
        "t-userns-a",
        "cat /proc/self/uid_map; stat -c %u /bin/busybox; id -u; touch /data/a; sleep 30",
    );
    a.mounts = vec![Bind {
        source: vol.clone(),
        target: "/data".into(),
        read_only: false,
    }];
    let b = c.spec("t-userns-b", "sleep 30");
    c.rt.start(&a, &meta()).unwrap();
    c.rt.start(&b, &meta()).unwrap();
    let host_uid = |id: &str| {
        let pid = c.rt.pid(id).unwrap();
        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .unwrap()
            .to_owned();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u32>()
            .unwrap()
    };
    let (ua, ub) = (host_uid("t-userns-a"), host_uid("t-userns-b"));
    assert!(ua >= range.first && ub >= range.first, "{ua} {ub}");
    assert_ne!(ua, ub, "two containers share host ids");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !vol.join("a").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = fs::read_to_string(c.rt.log_paths("t-userns-a").0).unwrap();
    let map: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(map, ["0", &ua.to_string(), "65536"], "{out}");
    assert_eq!(out.lines().skip(1).collect::<Vec<_>>(), ["0", "0"], "{out}");
    assert_eq!(
        fs::metadata(vol.join("a")).unwrap().uid(),
        0,
        "on disk: root's"
    );
    for id in ["t-userns-a", "t-userns-b"] {
        c.rt.stop(id, Duration::ZERO).unwrap();
        c.rt.remove(id).unwrap();
    }
    // The slot is free again for the next container.
    let next = c.spec("t-userns-c", "sleep 5");
    c.rt.start(&next, &meta()).unwrap();
    assert!([ua, ub].contains(&host_uid("t-userns-c")));
    c.rt.stop("t-userns-c", Duration::ZERO).unwrap();
    c.rt.remove("t-userns-c").unwrap();
}

fn image_user(c: &Ctx) {
    let mut spec = c.spec("t-user", "id -u; id -g; grep CapEff /proc/self/status");
    spec.user = Some("nobody".into());
    let (code, out, err) = c.run(&spec);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("65534\n65534\nCapEff:\t0000000000000000"),
        "{out}"
    );
}

fn memory_limit_kills(c: &Ctx) {
    // The shell keeps the whole string in memory: far past 32 MiB.
    let mut spec = c.spec(
        "t-oom",
        "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived ${#x}",
    );
    spec.memory_bytes = Some(32 << 20);
    let (code, out, _) = c.run(&spec);
    assert_eq!(code, 137, "{out}");
    assert!(!out.contains("survived"));
}

fn pids_limit_refuses_forks(c: &Ctx) {
    let mut spec = c.spec(
        "t-pids",
        "i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done; echo all-started",
    );
    spec.pids_limit = Some(16);
    let (code, out, err) = c.run(&spec);
    assert_ne!(code, 0, "{out}");
    assert!(!out.contains("all-started"));
    assert!(err.to_lowercase().contains("fork"), "{err}");
}

fn isolated_namespaces(c: &Ctx) {
    let mut spec = c.spec(
        "t-isolated",
        "ps -o pid,comm; echo --; cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '; echo --; \
         if unshare -n true 2>/dev/null; then echo unshare-allowed; else echo unshare-refused; fi; \
         grep -E '^(NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status",
    );
    spec.hostname = "iso".into();
    let (code, out, err) = c.run(&spec);
    assert_eq!(code, 0, "{err}");
    let parts: Vec<&str> = out.split("--\n").collect();
    let procs: Vec<(u32, &str)> = parts[0]
        .lines()
        .skip(1)
        .map(|l| {
            let mut f = l.split_whitespace();
            (f.next().unwrap().parse().unwrap(), f.next().unwrap_or(""))
        })
        .collect();
    // init (confine), the shell, ps: nothing of the host.
    assert!(procs.len() <= 3, "{procs:?}");
    assert!(procs.iter().any(|(_, c)| *c == "ps"), "{procs:?}");
    assert!(procs.iter().all(|(pid, _)| *pid < 10), "{procs:?}");
    assert_eq!(parts[1].trim(), "lo", "only loopback");
    assert!(parts[2].contains("unshare-refused"), "{out}");
    assert!(parts[2].contains("NoNewPrivs:\t1"), "{out}");
    // One filter, loaded by confine (runc has none to load: see spec.rs).
    assert!(parts[2].contains("Seccomp:\t2"), "{out}");
    assert!(parts[2].contains("Seccomp_filters:\t1"), "{out}");
}

/// confine never runs a command it could not confine: here with a filter that is no program.
fn confine_refuses_to_run_unconfined(c: &Ctx) {
    let confine = c.config.state_dir.join("confine");
    let bad = c.config.state_dir.join("not-a-filter");
    fs::write(&bad, b"12345").unwrap();
    for filter in [bad.as_path(), Path::new("/nonexistent/filter")] {
        let out = std::process::Command::new(&confine)
            .arg(filter)
            .args(["/bin/echo", "ran"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(127), "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with("gantry confine: "),
            "{out:?}"
        );
    }
    fs::remove_file(&bad).unwrap();
    // The agent's own filter: the command runs under it.
    let out = std::process::Command::new(&confine)
        .arg(c.config.state_dir.join("seccomp.bpf"))
        .args(["/bin/grep", "^Seccomp:", "/proc/self/status"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Seccomp:\t2");
}

fn host_network_when_asked(c: &Ctx) {
    let host_ifaces = fs::read_to_string("/proc/net/dev").unwrap().lines().count() - 2;
    let mut spec = c.spec("t-hostnet", "tail -n +3 /proc/net/dev | wc -l");
    spec.host_network = true;
    let (code, out, err) = c.run(&spec);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), host_ifaces.to_string());
}

fn limits_reach_cgroups_and_cgroups_are_removed(c: &Ctx) {
    let mut spec = c.spec("t-cgroup", "sleep 1000");
    spec.cpus = 1.5;
    spec.memory_bytes = Some(64 << 20);
    spec.pids_limit = Some(100);
    c.rt.start(&spec, &meta()).unwrap();
    let cg = |ctrl: &str, file: &str| {
        let p = Path::new("/sys/fs/cgroup")
            .join(ctrl)
            .join(CGROUP_PARENT)
            .join(&spec.id)
            .join(file);
        fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .trim()
            .to_owned()
    };
    assert_eq!(cg("cpu", "cpu.cfs_quota_us"), "150000");
    assert_eq!(cg("cpu", "cpu.cfs_period_us"), "100000");
    assert_eq!(
        cg("memory", "memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );
    assert_eq!(cg("pids", "pids.max"), "100");
    c.rt.stop(&spec.id, Duration::from_secs(30)).unwrap();
    c.rt.remove(&spec.id).unwrap();
    // In every hierarchy (cgroup v1 has one per controller, and the unified one beside them).
    for root in fs::read_dir("/sys/fs/cgroup").unwrap() {
        let p = root.unwrap().path().join(CGROUP_PARENT).join(&spec.id);
        assert!(!p.exists(), "{} left behind", p.display());
    }
    assert!(!c.rt.container_dir(&spec.id).exists());
}

fn stop_uses_sigterm(c: &Ctx) {
    let mut spec = c.spec("t-stop", "");
    spec.args = vec!["sleep".into(), "1000".into()];
    c.rt.start(&spec, &meta()).unwrap();
    assert_eq!(c.rt.status(&spec.id), ContainerState::Running);
    let end = c.rt.stop(&spec.id, Duration::from_secs(60)).unwrap();
    // 143 = SIGTERM: it ended at the polite signal, not at the SIGKILL after the grace.
    assert_eq!(
        end,
        ContainerState::Exited {
            exit_code: 143,
            signal: Some(15)
        }
    );
    c.rt.remove(&spec.id).unwrap();
}

/// confine is the container's PID 1: the command is its child, orphans that end are reaped,
/// and the container's exit code is the command's.
fn init_runs_the_command_and_reaps_orphans(c: &Ctx) {
    // The subshell leaves `sleep` orphaned: it is re-parented to PID 1, and once it ends only
    // PID 1 can reap it. Then each process's pid, state and parent.
    let script = "echo $PPID; (sleep 0.1 &); sleep 1; \
                  for s in /proc/[0-9]*/stat; do cut -d' ' -f1,3,4 $s; done; exit 7";
    let (code, out, err) = c.run(&c.spec("t-init", script));
    assert_eq!(code, 7, "{err}");
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("1"),
        "the command is PID 1's child: {out}"
    );
    let procs: Vec<Vec<&str>> = lines.map(|l| l.split(' ').collect()).collect();
    assert!(procs.iter().any(|p| p == &["1", "S", "0"]), "{out}");
    assert!(
        procs.iter().all(|p| p[1] != "Z"),
        "the orphan was not reaped: {out}"
    );
    // No more than PID 1, the shell, and the shell's `cut`: the orphan is gone.
    assert!(procs.len() <= 3, "{out}");
}

fn stop_kills_after_grace(c: &Ctx) {
    let spec = c.spec("t-stubborn", "trap '' TERM; while :; do sleep 1; done");
    c.rt.start(&spec, &meta()).unwrap();
    let end = c.rt.stop(&spec.id, Duration::from_secs(1)).unwrap();
    let killed = ContainerState::Exited {
        exit_code: 137,
        signal: Some(9),
    };
    assert_eq!(end, killed);
    // Stopping again is harmless and says the same.
    assert_eq!(c.rt.stop(&spec.id, Duration::from_secs(1)).unwrap(), killed);
    c.rt.remove(&spec.id).unwrap();
    c.rt.remove(&spec.id).unwrap();
    assert_eq!(
        c.rt.stop(&spec.id, Duration::from_secs(1)).unwrap(),
        ContainerState::Unknown
    );
}

fn start_failure_is_reported_and_cleaned(c: &Ctx) {
    // runc cannot set the container up: a file bind-mounted over the image's /bin directory.
    let file = c.config.state_dir.join("a-file");
    fs::write(&file, "x").unwrap();
    let mut spec = c.spec("t-nostart", "true");
    spec.mounts.push(Bind {
        source: file,
        target: "/bin".into(),
        read_only: true,
    });
    let err = c.rt.start(&spec, &meta()).unwrap_err();
    assert!(matches!(err, RuntimeError::StartFailed { .. }), "{err}");
    assert!(err.to_string().contains("/bin"), "{err}");
    assert!(!c.rt.list().contains(&spec.id));
    fs::remove_file(&spec.mounts[0].source).unwrap();
    // A command that is not there: the container starts, and reports it as a shell would.
    let mut spec = c.spec("t-nobinary", "");
    spec.args = vec!["/no/such/binary".into()];
    let (code, _, err) = c.run(&spec);
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("/no/such/binary"), "{err}");
    // A duplicate id is refused without touching the existing container.
    let spec = c.spec("t-dup", "sleep 1000");
    c.rt.start(&spec, &meta()).unwrap();
    let err = c.rt.start(&spec, &meta()).unwrap_err();
    assert!(matches!(err, RuntimeError::AlreadyExists(_)), "{err}");
    assert_eq!(c.rt.status(&spec.id), ContainerState::Running);
    c.rt.remove(&spec.id).unwrap();
}

fn shim_survives_the_runtime(c: &Ctx) {
    let spec = c.spec("t-survive", "sleep 3; echo done; exit 7");
    let meta = serde_json::json!({"test_pid": std::process::id(), "attempt": 2});
    {
        let rt = Runtime::new(c.config.clone()).unwrap();
        rt.start(&spec, &meta).unwrap();
        // The agent goes away: nothing of the runtime is left in this process.
    }
    let shim_pid: i32 = fs::read_to_string(c.rt.container_dir(&spec.id).join("shim.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stat = fs::read_to_string(format!("/proc/{shim_pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let (ppid, sid): (u32, i32) = (fields[1].parse().unwrap(), fields[3].parse().unwrap());
    assert_ne!(ppid, std::process::id(), "the shim is not our child");
    // SAFETY: getsid(0) only reads this process's session id.
    let our_sid = unsafe { libc::getsid(0) };
    assert_ne!(sid, our_sid, "the shim has its own session");

    let rt = Runtime::new(c.config.clone()).unwrap();
    assert!(rt.list().contains(&spec.id));
    assert_eq!(rt.meta(&spec.id).unwrap(), meta);
    assert_eq!(rt.status(&spec.id), ContainerState::Running);
    assert_eq!(
        wait_exit(&rt, &spec.id),
        ContainerState::Exited {
            exit_code: 7,
            signal: None
        }
    );
    assert_eq!(
        fs::read_to_string(rt.log_paths(&spec.id).0).unwrap(),
        "done\n"
    );
    rt.remove(&spec.id).unwrap();
    assert!(!rt.list().contains(&spec.id));
}

type Test = (&'static str, fn(&Ctx));

const TESTS: &[Test] = &[
    ("output_and_exit_code", output_and_exit_code),
    ("env_cwd_mounts_and_files", env_cwd_mounts_and_files),
    ("machinery_cannot_be_shadowed", machinery_cannot_be_shadowed),
    (
        "jobs_run_in_a_user_namespace_of_their_own",
        jobs_run_in_a_user_namespace_of_their_own,
    ),
    ("image_user", image_user),
    ("memory_limit_kills", memory_limit_kills),
    ("pids_limit_refuses_forks", pids_limit_refuses_forks),
    ("isolated_namespaces", isolated_namespaces),
    (
        "confine_refuses_to_run_unconfined",
        confine_refuses_to_run_unconfined,
    ),
    ("host_network_when_asked", host_network_when_asked),
    (
        "limits_reach_cgroups_and_cgroups_are_removed",
        limits_reach_cgroups_and_cgroups_are_removed,
    ),
    ("stop_uses_sigterm", stop_uses_sigterm),
    ("stop_kills_after_grace", stop_kills_after_grace),
    (
        "init_runs_the_command_and_reaps_orphans",
        init_runs_the_command_and_reaps_orphans,
    ),
    (
        "start_failure_is_reported_and_cleaned",
        start_failure_is_reported_and_cleaned,
    ),
    ("shim_survives_the_runtime", shim_survives_the_runtime),
];

/// Removes what this process or a killed earlier run left: containers in our state directory
/// whose owning test process is this one or gone, runc containers in our runc root that have
/// no directory at all, and their cgroups.
fn clean_leftovers(rt: &Runtime, config: &RuntimeConfig) {
    let ours = std::process::id() as i64;
    let ids = rt.list();
    for id in &ids {
        let owner = rt
            .meta(id)
            .ok()
            .and_then(|m| m["test_pid"].as_i64())
            .unwrap_or(0);
        if owner != ours && common::pid_alive(owner as i32) {
            continue;
        }
        if let Err(e) = rt.remove(id) {
            eprintln!("cleaning leftover {id}: {e}");
        }
    }
    let out = std::process::Command::new(&config.runc)
        .arg("--root")
        .arg(&config.runc_root)
        .args(["list", "-q"])
        .output();
    if let Ok(out) = out {
        for id in String::from_utf8_lossy(&out.stdout).lines() {
            if rt.container_dir(id).exists() {
                continue;
            }
            let _ = std::process::Command::new(&config.runc)
                .arg("--root")
                .arg(&config.runc_root)
                .args(["delete", "--force", id])
                .status();
        }
    }
}

/// Built from JSON so the test does not depend on every field of the wire type.
fn image_source(uri: &str) -> ImageSource {
    serde_json::from_value(serde_json::json!({ "uri": uri })).unwrap()
}

fn main() {
    let Some(selected) = common::select(TESTS) else {
        return;
    };

    let env = common::env();
    let base = env.dir.join("agent-runtime");
    let config = RuntimeConfig::new(base.join("state"), base.join("runc"), CGROUP_PARENT);
    let rt = Runtime::new(config.clone()).expect("runtime");
    clean_leftovers(&rt, &config);

    let images = ImageStore::new(
        base.join("images"),
        PullConfig {
            insecure_hosts: vec![env.registry.clone()],
            ..Default::default()
        },
    )
    .expect("image store");
    let image = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(images.prepare(&image_source(&format!(
            "docker://{}/library/busybox:1",
            env.registry
        ))))
        .expect("pulling busybox");
    let ctx = Ctx {
        rt: rt.clone(),
        config: config.clone(),
        layers: image.layers,
    };

    let tally = common::run_all(
        TESTS.len(),
        &selected,
        |t| t(&ctx),
        || {
            // Whatever a failed test left running goes before the next one starts.
            clean_leftovers(&rt, &config);
        },
    );
    tally.finish();
}
