//! The background checks behind the health series: paths, the image cache, and the runtime.
//!
//! ## The runtime check
//!
//! Every interval the agent starts a trial container through its own [`Runtime`], exactly as
//! it starts jobs (shim, runc, overlay rootfs, namespaces, cgroup, seccomp, the static init
//! when there is one), waits for it to exit 0 and removes it. The check passes only if all of
//! that worked, removal included, so a node that would leave mounts or cgroups behind is not
//! healthy.
//!
//! The container needs no image. Its only layer is `<state>/health/layer/`, holding one
//! program, `/true`:
//! - on x86-64, a 129-byte static ELF executable the agent writes itself (`exit(0)` through
//!   the raw syscall), so a bare node with runc and nothing else can be checked;
//! - elsewhere, a statically linked helper copied from the host's packages (`tini-static` or
//!   `catatonit` run with `--version`, or a static busybox, which runs its `true` applet when
//!   called `/true`);
//! - with none of those, the check falls back to `runc --version` and `runc list` on the
//!   agent's runc root: it shows runc runs and its state is readable, not that a container
//!   can start. The log says so once.

use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::image::ImageStore;
use crate::runtime::{ContainerSpec, ContainerState, Runtime};

use super::{Metrics, PathHealth};

/// The trial container's id. It is not a UUID, so the agent never adopts it as a job.
pub const CHECK_CONTAINER: &str = "gantry-health-check";
/// How often the checks run by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// How long the trial container may take to exit.
const EXIT_TIMEOUT: Duration = Duration::from_secs(60);
/// A path probe or cache walk that takes longer than this counts as failed (a hung network
/// filesystem); the next one is not started while it is still stuck.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);
/// The whole runtime check (start, exit, removal).
const RUNTIME_TIMEOUT: Duration = Duration::from_secs(180);

/// What the background checks look at.
#[derive(Debug, Clone)]
pub struct HealthConfig {
    /// The agent's state directory: `scratch` in the metrics, and home of `health/`.
    pub scratch: PathBuf,
    /// The pool's storage root: `storage` in the metrics.
    pub storage: PathBuf,
    pub interval: Duration,
}

impl HealthConfig {
    pub fn new(scratch: impl Into<PathBuf>, storage: impl Into<PathBuf>) -> Self {
        HealthConfig {
            scratch: scratch.into(),
            storage: storage.into(),
            interval: DEFAULT_INTERVAL,
        }
    }
}

/// How a runtime check was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeCheck {
    /// A trial container started, exited 0 and was removed.
    Container,
    /// No static program to run: only `runc --version` and `runc list` were tried.
    RuncCommands,
}

/// Runs the checks now and then every `config.interval`, in the background, until the
/// metrics are dropped. Each step's result is visible to scrapes as soon as it is known.
pub fn spawn_health_checks(
    metrics: &Metrics,
    runtime: Runtime,
    images: Option<Arc<ImageStore>>,
    config: HealthConfig,
) -> tokio::task::JoinHandle<()> {
    let weak = metrics.downgrade();
    tokio::spawn(async move {
        let busy: [Arc<AtomicBool>; 4] = Default::default();
        let mut said_fallback = false;
        loop {
            let Some(inner) = weak.upgrade() else { return };
            let mut paths = Vec::new();
            for (i, (name, dir)) in [("scratch", &config.scratch), ("storage", &config.storage)]
                .into_iter()
                .enumerate()
            {
                let dir = dir.clone();
                let h = guarded(&busy[i], PROBE_TIMEOUT, move || probe_path(&dir)).await;
                paths.push((name, h.unwrap_or_default()));
            }
            Metrics::update_checks(&inner, |c| c.paths = paths);
            if let Some(images) = &images {
                let images = images.clone();
                if let Some(bytes) =
                    guarded(&busy[2], PROBE_TIMEOUT, move || images.cache_bytes()).await
                {
                    Metrics::update_checks(&inner, |c| c.image_cache_bytes = Some(bytes));
                }
            }
            let started = Instant::now();
            let rt = runtime.clone();
            let work = config.scratch.join("health");
            let result = guarded(&busy[3], RUNTIME_TIMEOUT, move || check_runtime(&rt, &work))
                .await
                .unwrap_or_else(|| Err("the check did not finish in time".into()));
            let took = started.elapsed();
            match &result {
                Ok(RuntimeCheck::RuncCommands) if !said_fallback => {
                    said_fallback = true;
                    tracing::warn!(
                        "runtime check: no static program for a trial container on this node; \
                         checking `runc --version` and `runc list` only"
                    );
                }
                Err(e) => tracing::warn!("runtime check failed: {e}"),
                _ => {}
            }
            Metrics::update_checks(&inner, |c| {
                c.runtime = Some((result.is_ok(), took));
                if result.is_err() {
                    c.runtime_failures += 1;
                }
            });
            drop(inner);
            tokio::time::sleep(config.interval).await;
        }
    })
}

/// Runs blocking `f` with a deadline. `None` when it ran out of time, panicked, or the last
/// one is still stuck (then no new one is started: a hung filesystem must not pile up
/// threads).
async fn guarded<T: Send + 'static>(
    busy: &Arc<AtomicBool>,
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    struct Release(Arc<AtomicBool>);
    impl Drop for Release {
        fn drop(&mut self) {
            self.0.store(false, Ordering::SeqCst);
        }
    }
    if busy.swap(true, Ordering::SeqCst) {
        return None;
    }
    let release = Release(busy.clone());
    let task = tokio::task::spawn_blocking(move || {
        let _release = release;
        f()
    });
    tokio::time::timeout(timeout, task).await.ok()?.ok()
}

/// Whether `dir` takes a write (create, write, fsync, delete a probe file), and its
/// filesystem's space. A missing directory is not writable and has no space figures.
pub fn probe_path(dir: &Path) -> PathHealth {
    let (free_bytes, size_bytes) = match statvfs(dir) {
        Some((free, size)) => (Some(free), Some(size)),
        None => (None, None),
    };
    PathHealth {
        writable: write_probe(dir).is_ok(),
        free_bytes,
        size_bytes,
    }
}

fn write_probe(dir: &Path) -> io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let p = dir.join(format!(
        ".gantry-probe-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&p)?;
    let written = f
        .write_all(b"gantry write probe\n")
        .and_then(|()| f.sync_all());
    drop(f);
    let removed = fs::remove_file(&p);
    written.and(removed)
}

/// (bytes available to unprivileged writers, filesystem size).
// The field types are u64 on 64-bit Linux but narrower on some 32-bit targets.
#[allow(clippy::useless_conversion)]
fn statvfs(dir: &Path) -> Option<(u64, u64)> {
    let c = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain data; zeroed is a valid value for it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = u64::from(st.f_frsize);
    Some((
        u64::from(st.f_bavail).saturating_mul(frsize),
        u64::from(st.f_blocks).saturating_mul(frsize),
    ))
}

/// One runtime check through `runtime`, with its trial layer under `work`. Blocks (seconds):
/// call it from a blocking task. Leaves no container, mount or cgroup behind, whatever the
/// outcome; a check cut short by a crash is cleaned up by the next one.
pub fn check_runtime(runtime: &Runtime, work: &Path) -> Result<RuntimeCheck, String> {
    if runtime.container_dir(CHECK_CONTAINER).exists() {
        runtime
            .remove(CHECK_CONTAINER)
            .map_err(|e| format!("removing the last check's container: {e}"))?;
    }
    let layer = work.join("layer");
    let Some(args) =
        prepare_layer(&layer).map_err(|e| format!("preparing {}: {e}", layer.display()))?
    else {
        return runc_commands(runtime).map(|()| RuntimeCheck::RuncCommands);
    };
    let spec = ContainerSpec {
        id: CHECK_CONTAINER.into(),
        layers: vec![layer],
        args,
        env: vec!["PATH=/".into()],
        cwd: "/".into(),
        user: None,
        mounts: vec![],
        files: vec![],
        cpus: 0.0,
        memory_bytes: Some(64 << 20),
        pids_limit: Some(16),
        hostname: "health".into(),
        host_network: false,
    };
    runtime
        .start(&spec, &serde_json::json!({ "health_check": true }))
        .map_err(|e| format!("starting a trial container: {e}"))?;
    let deadline = Instant::now() + EXIT_TIMEOUT;
    let ended = loop {
        match runtime.status(CHECK_CONTAINER) {
            ContainerState::Running if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            ContainerState::Running => {
                break Err(format!(
                    "the trial container still ran after {} s",
                    EXIT_TIMEOUT.as_secs()
                ))
            }
            ContainerState::Exited { exit_code: 0, .. } => break Ok(()),
            ContainerState::Exited { exit_code, .. } => {
                let (_, err) = runtime.log_paths(CHECK_CONTAINER);
                let stderr = fs::read_to_string(err).unwrap_or_default();
                break Err(format!(
                    "the trial container exited {exit_code}: {}",
                    stderr.trim()
                ));
            }
            ContainerState::Unknown => break Err("the trial container vanished".into()),
        }
    };
    let removed = runtime
        .remove(CHECK_CONTAINER)
        .map_err(|e| format!("removing the trial container: {e}"));
    ended.and(removed).map(|()| RuntimeCheck::Container)
}

/// Writes the trial layer (once; rewritten if changed) and returns the container's argv, or
/// `None` when this node has no program to run in it.
fn prepare_layer(layer: &Path) -> io::Result<Option<Vec<String>>> {
    let Some((program, args)) = trial_program() else {
        return Ok(None);
    };
    fs::create_dir_all(layer)?;
    let target = layer.join("true");
    if fs::read(&target).ok().as_deref() != Some(program.as_slice()) {
        let tmp = layer.join(format!(".true.{}", std::process::id()));
        fs::write(&tmp, &program)?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
        fs::rename(&tmp, &target)?;
    }
    let mut argv = vec!["/true".to_owned()];
    argv.extend(args.iter().map(|a| a.to_string()));
    Ok(Some(argv))
}

/// The program the trial container runs, and its arguments after argv[0].
fn trial_program() -> Option<(Vec<u8>, &'static [&'static str])> {
    if cfg!(target_arch = "x86_64") {
        return Some((true_elf_x86_64(), &[]));
    }
    const HELPERS: [(&str, &[&str]); 4] = [
        ("/usr/bin/tini-static", &["--version"]),
        ("/usr/bin/catatonit", &["--version"]),
        ("/usr/libexec/podman/catatonit", &["--version"]),
        ("/bin/busybox", &[]),
    ];
    HELPERS.iter().find_map(|(path, args)| {
        let bytes = fs::read(path).ok()?;
        is_static_elf(&bytes).then_some((bytes, *args))
    })
}

/// A static x86-64 Linux executable that exits 0: an ELF header, one loadable segment, and
/// `xor edi, edi; mov eax, 60 (exit); syscall`.
pub fn true_elf_x86_64() -> Vec<u8> {
    const BASE: u64 = 0x40_0000;
    const EHDR: u64 = 64;
    const PHDR: u64 = 56;
    const CODE: [u8; 9] = [0x31, 0xff, 0xb8, 0x3c, 0x00, 0x00, 0x00, 0x0f, 0x05];
    let size = EHDR + PHDR + CODE.len() as u64;
    let mut b = Vec::with_capacity(size as usize);
    // e_ident: magic, 64-bit, little-endian, version 1, System V ABI, padding.
    b.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    b.extend_from_slice(&2u16.to_le_bytes()); // e_type: ET_EXEC
    b.extend_from_slice(&0x3eu16.to_le_bytes()); // e_machine: EM_X86_64
    b.extend_from_slice(&1u32.to_le_bytes()); // e_version
    b.extend_from_slice(&(BASE + EHDR + PHDR).to_le_bytes()); // e_entry: the code
    b.extend_from_slice(&EHDR.to_le_bytes()); // e_phoff
    b.extend_from_slice(&0u64.to_le_bytes()); // e_shoff: no sections
    b.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    for v in [EHDR as u16, PHDR as u16, 1, 0, 0, 0] {
        // e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&1u32.to_le_bytes()); // p_type: PT_LOAD
    b.extend_from_slice(&5u32.to_le_bytes()); // p_flags: read + execute
    b.extend_from_slice(&0u64.to_le_bytes()); // p_offset: the whole file
    b.extend_from_slice(&BASE.to_le_bytes()); // p_vaddr
    b.extend_from_slice(&BASE.to_le_bytes()); // p_paddr
    b.extend_from_slice(&size.to_le_bytes()); // p_filesz
    b.extend_from_slice(&size.to_le_bytes()); // p_memsz
    b.extend_from_slice(&0x1000u64.to_le_bytes()); // p_align
    b.extend_from_slice(&CODE);
    b
}

/// Whether `bytes` is a 64-bit little-endian ELF with no program interpreter (statically
/// linked, so it runs in a root filesystem without a libc).
fn is_static_elf(bytes: &[u8]) -> bool {
    let u16_at = |o: usize| {
        bytes
            .get(o..o + 2)
            .map(|s| u16::from_le_bytes([s[0], s[1]]))
    };
    let u64_at = |o: usize| {
        bytes
            .get(o..o + 8)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map(u64::from_le_bytes)
    };
    if bytes.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(32), u16_at(54), u16_at(56)) else {
        return false;
    };
    (0..u64::from(phnum)).all(|i| {
        let at = phoff + i * u64::from(phentsize);
        let p_type = usize::try_from(at)
            .ok()
            .and_then(|at| bytes.get(at..at + 4))
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]));
        // PT_INTERP = 3; an unreadable header is not trusted either.
        matches!(p_type, Some(t) if t != 3)
    })
}

/// The fallback: runc runs and can read this agent's runc root.
fn runc_commands(runtime: &Runtime) -> Result<(), String> {
    let cfg = runtime.config();
    let run = |what: &str, cmd: &mut Command| -> Result<(), String> {
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {what}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    run("runc --version", Command::new(&cfg.runc).arg("--version"))?;
    run(
        "runc list",
        Command::new(&cfg.runc)
            .arg("--root")
            .arg(&cfg.runc_root)
            .arg("list"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_program_is_a_static_elf() {
        let elf = true_elf_x86_64();
        assert_eq!(elf.len(), 129);
        assert!(is_static_elf(&elf));
        assert!(!is_static_elf(b"#!/bin/sh\n"));
        assert!(!is_static_elf(&elf[..40]));
    }

    #[test]
    fn dynamic_executables_are_not_static() {
        // This test binary is linked against libc.
        let me = fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(!is_static_elf(&me));
    }

    #[test]
    fn a_missing_path_is_not_writable() {
        let h = probe_path(Path::new("/nonexistent/gantry-probe"));
        assert_eq!(h, PathHealth::default());
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_built_in_program_runs_and_exits_0() {
        let dir = std::env::temp_dir().join(format!("gantry-true-{}", std::process::id()));
        let layer = dir.join("layer");
        let argv = prepare_layer(&layer).unwrap().unwrap();
        assert_eq!(argv, vec!["/true"]);
        let status = Command::new(layer.join("true")).status().unwrap();
        assert!(status.success(), "{status}");
        fs::remove_dir_all(dir).unwrap();
    }
}
