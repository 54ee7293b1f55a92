//! The test environment: a local registry (plain HTTP), one with basic auth, and OCI layouts,
//! all made by `scripts/test-images.sh`. When `GANTRY_TEST_REGISTRY` is set the caller has
//! prepared everything and the variables are read as they are; otherwise the script is run
//! once (it is idempotent and holds its own lock) and its env file is read.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub struct TestEnv {
    pub dir: PathBuf,
    pub registry: String,
    pub auth_registry: String,
    pub auth_user: String,
    pub auth_password: String,
    pub oci_busybox: PathBuf,
    pub oci_busybox_zstd: PathBuf,
    pub oci_whiteout: PathBuf,
    pub oci_multi: PathBuf,
    pub busybox_digest: String,
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn from_vars(vars: &HashMap<String, String>) -> TestEnv {
    let get = |k: &str| {
        vars.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} is not set in the test environment"))
    };
    TestEnv {
        dir: get("GANTRY_TEST_DIR").into(),
        registry: get("GANTRY_TEST_REGISTRY"),
        auth_registry: get("GANTRY_TEST_AUTH_REGISTRY"),
        auth_user: get("GANTRY_TEST_AUTH_USER"),
        auth_password: get("GANTRY_TEST_AUTH_PASSWORD"),
        oci_busybox: get("GANTRY_TEST_OCI_BUSYBOX").into(),
        oci_busybox_zstd: get("GANTRY_TEST_OCI_BUSYBOX_ZSTD").into(),
        oci_whiteout: get("GANTRY_TEST_OCI_WHITEOUT").into(),
        oci_multi: get("GANTRY_TEST_OCI_MULTI").into(),
        busybox_digest: get("GANTRY_TEST_BUSYBOX_DIGEST"),
    }
}

pub fn env() -> &'static TestEnv {
    static ENV: OnceLock<TestEnv> = OnceLock::new();
    ENV.get_or_init(|| {
        if std::env::var_os("GANTRY_TEST_REGISTRY").is_some() {
            return from_vars(&std::env::vars().collect());
        }
        let dir = std::env::var("GANTRY_TEST_DIR").unwrap_or_else(|_| "/tmp/gantry-test".into());
        let script = repo_root().join("scripts/test-images.sh");
        let out = Command::new(&script)
            .env("GANTRY_TEST_DIR", &dir)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed:\n{}{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(Path::new(&dir).join("env")).expect("the env file");
        let vars = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
            .collect();
        from_vars(&vars)
    })
}

/// A scratch directory for one test, on the same filesystem as the test environment (overlay
/// and mknod need a real filesystem, not a tmpfs that may lack trusted xattrs). Its name
/// carries the test process's pid, so leftovers of killed runs can be told apart from the
/// directories of tests running right now in other processes.
pub fn scratch(tag: &str) -> tempfile::TempDir {
    let base = env().dir.join("scratch");
    std::fs::create_dir_all(&base).unwrap();
    clean_dead_scratch(&base);
    tempfile::Builder::new()
        .prefix(&format!("{tag}.{}.", std::process::id()))
        .tempdir_in(base)
        .unwrap()
}

fn clean_dead_scratch(base: &Path) {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let Ok(rd) = std::fs::read_dir(base) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.split('.').nth(1).and_then(|p| p.parse::<i32>().ok());
            if pid.is_some_and(pid_alive) {
                continue;
            }
            let path = e.path();
            // Overlays a killed test left mounted: never recurse into them.
            unmount_beneath(&path);
            let _ = std::fs::remove_dir_all(&path);
        }
    });
}

/// Detaches every mount beneath `dir`, the deepest first (overlays, network namespaces).
pub fn unmount_beneath(dir: &Path) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<&str> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| Path::new(m).starts_with(dir))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let c = std::ffi::CString::new(m).unwrap();
        // SAFETY: valid NUL-terminated path.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Detaches every container network an agent recorded under `net_dir` (its `<state>/net`)
/// and removes its bridge and firewall tables.
pub fn remove_agent_network(net_dir: &Path) {
    use gantry_agent::net::{NetConfig, Network};
    if !net_dir.is_dir() {
        return;
    }
    let bridge = std::fs::read_to_string(net_dir.join("bridge"))
        .map(|b| b.trim().to_owned())
        .unwrap_or_else(|_| "gtrnone".into());
    if let Ok(n) = Network::new(NetConfig {
        state_dir: net_dir.to_owned(),
        bridge,
        ..Default::default()
    }) {
        n.cleanup(&[]);
        if let Err(e) = n.remove_bridge() {
            eprintln!("removing a leftover bridge: {e}");
        }
    }
}

pub fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    pid > 0 && unsafe { libc::kill(pid, 0) } == 0
}

/// How every `harness = false` test binary here starts: answer `--list`, and pick the tests
/// named on the command line, libtest-style enough for `cargo test NAME`. `None`: nothing to run (the
/// empty result line is printed).
pub fn select<T>(tests: &'static [(&'static str, T)]) -> Option<Vec<&'static (&'static str, T)>> {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in tests {
            println!("{name}: test");
        }
        return None;
    }
    let filters: Vec<&str> = args[1..]
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected: Vec<_> = tests
        .iter()
        .filter(|(n, _)| filters.is_empty() || filters.iter().any(|f| n.contains(f)))
        .collect();
    println!("\nrunning {} tests", selected.len());
    if selected.is_empty() {
        println!("\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n");
        return None;
    }
    Some(selected)
}

/// The tally of a `harness = false` run, printed libtest-style by [`Tally::finish`] (the closing
/// line is what `make test` sums).
pub struct Tally {
    started: std::time::Instant,
    filtered: usize,
    passed: usize,
    failed: Vec<&'static str>,
}

/// Runs the selected tests in turn (`all`: how many exist), a panic failing only its own test;
/// `between` cleans up after each, so a failed test's leftovers never reach the next.
pub fn run_all<T>(
    all: usize,
    selected: &[&'static (&'static str, T)],
    mut run: impl FnMut(&T),
    mut between: impl FnMut(),
) -> Tally {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let mut tally = Tally {
        started: std::time::Instant::now(),
        filtered: all - selected.len(),
        passed: 0,
        failed: Vec::new(),
    };
    for (name, test) in selected {
        let ok = catch_unwind(AssertUnwindSafe(|| run(test))).is_ok();
        println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
        if ok {
            tally.passed += 1;
        } else {
            tally.failed.push(name);
        }
        between();
    }
    tally
}

impl Tally {
    /// Prints the result line; exits with 101, as libtest does, when a test failed.
    pub fn finish(self) {
        let Tally {
            started,
            filtered,
            passed,
            failed,
        } = self;
        let secs = started.elapsed().as_secs_f64();
        if failed.is_empty() {
            println!(
                "\ntest result: ok. {passed} passed; 0 failed; 0 ignored; 0 measured; {filtered} filtered out; finished in {secs:.2}s\n"
            );
        } else {
            println!("\nfailures:\n    {}", failed.join("\n    "));
            println!(
                "\ntest result: FAILED. {passed} passed; {} failed; 0 ignored; 0 measured; {filtered} filtered out; finished in {secs:.2}s\n",
                failed.len()
            );
            std::process::exit(101);
        }
    }
}

const FORWARDING: &str = "/proc/sys/net/ipv4/ip_forward";

/// IPv4 forwarding as it is before a run that makes bridges (the CNI bridge plugin turns it on).
pub fn forwarding() -> String {
    std::fs::read_to_string(FORWARDING).unwrap_or_default()
}

/// Turns forwarding back off if it was off before the run and no `gtr*` bridge is left (another
/// run's containers may still need it).
pub fn restore_forwarding(before: &str) {
    let bridges_left = std::fs::read_dir("/sys/class/net")
        .map(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("gtr"))
        })
        .unwrap_or(true);
    if before.trim() == "0" && !bridges_left {
        let _ = std::fs::write(FORWARDING, "0");
    }
}

/// Pushes a SIF of `rootfs` to the test registry as an ORAS artifact, with oci-client's
/// push (what `apptainer push` sends: one SIF layer, a SIF config); returns `oras://...`.
pub async fn push_sif(rootfs: &Path, repo: &str) -> String {
    use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
    let env = env();
    // As `ImageStore::new` does: reqwest is built without a crypto provider of its own.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let sq = gantry_agent::image::sif::mksquashfs(rootfs, &rootfs.with_extension("sqfs"), &[])
        .expect("mksquashfs (squashfs-tools, scripts/install-deps.sh)");
    let sif = gantry_agent::image::sif::write_sif(&sq);
    let reference: oci_client::Reference = format!("{}/{repo}:1", env.registry).parse().unwrap();
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(vec![env.registry.clone()]),
        ..Default::default()
    });
    let layer = ImageLayer {
        data: sif.into(),
        media_type: gantry_agent::image::sif::SIF_LAYER_MEDIA_TYPE.into(),
        annotations: None,
    };
    let config = Config {
        data: b"{}".to_vec().into(),
        media_type: "application/vnd.sylabs.sif.config.v1+json".into(),
        annotations: None,
    };
    client
        .push(
            &reference,
            &[layer],
            config,
            &oci_client::secrets::RegistryAuth::Anonymous,
            None,
        )
        .await
        .unwrap();
    format!("oras://{}/{repo}:1", env.registry)
}
