//! Containers under runc, each parented by a detached shim (`shim/main.rs`).
//!
//! Everything about a container lives in `<state_dir>/containers/<id>/`, so an agent that
//! restarts finds its containers again with [`Runtime::list`]:
//!
//! ```text
//! meta.json       the caller's opaque metadata (the agent keeps its Assignment there)
//! config.json     the OCI runtime config; rootfs/ is the overlay of the image layers
//! upper/ work/    the container's private overlay layer
//! files/N         injected files, bind-mounted read-only at their targets
//! mounts/N        the caller's mount sources, bound here only while runc starts the container
//! stdout stderr   the container's output, written by the container itself
//! shim.pid shim.log runc.log container.pid
//! exit.json       {"exit_code": N, "signal": S?, "start_error": "..."?}, written once at the end
//! exec-*.pid      the process of a running `Runtime::exec`
//! task.json       instead of a shim: the agent process that runs this attempt itself (a task)
//! ```
//!
//! A container may join a network namespace made for it beforehand (see [`StartOptions`] and
//! `crate::net`) instead of getting a fresh one with only `lo`.
//!
//! An image build's steps run as containers too, with a build's confinement
//! ([`Runtime::start_build_step`]: a user namespace, a shorter capability list, output appended
//! to the build's log). The build itself is a *task*: an attempt the agent runs in its own
//! process ([`Runtime::create_task`]) but records in the same layout, so it is listed, its output
//! shipped and its end reported exactly like a container's. A task whose agent is gone (the
//! agent restarted) reads as [`ContainerState::Unknown`].

mod dir;
mod seccomp;
mod shim;
mod spec;
pub(crate) mod sys;
pub mod userns;

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::image::ImageConfig;
use dir::{files, write_atomic};

pub use spec::{CONFINE_PATH, SECCOMP_PATH};

/// A pids limit that stops fork bombs without getting in the way of real work.
pub const DEFAULT_PIDS_LIMIT: u64 = 4096;

/// How long `start` waits for runc to report the process running.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a SIGKILLed container may take to be reaped before `stop` gives up.
const KILL_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);
/// How long runc's init may take to exec confine once runc reports the container started.
const INIT_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// `confine/main.rs`, `shim/main.rs` and `rsh/main.rs`, linked statically by `build.rs`.
const CONFINE_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/confine"));
const SHIM_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/shim"));
const RSH_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/rsh"));

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeConfig {
    /// This agent's state; containers live in `<state_dir>/containers/<id>/`.
    pub state_dir: PathBuf,
    /// This agent's runc root (`runc --root`), so agents on one host never see each other's
    /// containers.
    pub runc_root: PathBuf,
    /// Cgroup path under which containers are placed, e.g. `gantry/<agent-name>`.
    pub cgroup_parent: String,
    /// The runc binary.
    pub runc: PathBuf,
    /// Host ids for job containers' user namespaces (see [`JOB_IDS`]); `None` runs jobs
    /// without one. A node that cannot do it (see [`userns::probe`]) runs them without one
    /// too, and says why ([`Runtime::job_userns`]).
    #[serde(default)]
    pub job_userns: Option<IdRange>,
}

impl RuntimeConfig {
    /// The containers in this state directory (see [`Runtime::list`]), without making a
    /// [`Runtime`]: that compiles the seccomp profile and writes the programs out.
    pub fn containers(&self) -> Vec<String> {
        let Ok(rd) = fs::read_dir(self.state_dir.join("containers")) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = rd
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| valid_id(n))
            .collect();
        ids.sort();
        ids
    }

    /// A configuration with `runc` from `PATH`.
    pub fn new(
        state_dir: impl Into<PathBuf>,
        runc_root: impl Into<PathBuf>,
        cgroup_parent: impl Into<String>,
    ) -> Self {
        RuntimeConfig {
            state_dir: state_dir.into(),
            runc_root: runc_root.into(),
            cgroup_parent: cgroup_parent.into(),
            runc: PathBuf::from("runc"),
            job_userns: Some(JOB_IDS),
        }
    }
}

/// A bind mount from the host into the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    /// Absolute host path; must exist.
    pub source: PathBuf,
    /// Absolute path in the container.
    pub target: String,
    pub read_only: bool,
}

/// What a container gets from the host besides its [`ContainerSpec`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartOptions {
    /// Join this network namespace (a bind-mounted nsfs file, as `crate::net` makes) instead
    /// of creating a new one. runc then leaves its interfaces alone (`lo` included), so whoever
    /// made it configures them. Ignored when `host_network` is set.
    pub netns: Option<PathBuf>,
}

/// A user namespace mapping: ids `0..size` in the container are `host..host+size` outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMap {
    pub host: u32,
    pub size: u32,
}

/// Host ids for the user namespaces of job containers: slot `n` maps the container's ids
/// 0..65535 to `first + n * 65536` on the host, one slot per container of this agent, so no
/// two of its containers share host ids and none is root on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdRange {
    pub first: u32,
    pub slots: u32,
}

/// Above the build steps' range (`userns::BUILD_MAP`), and below 2^31: some tools take ids
/// for signed numbers.
pub const JOB_IDS: IdRange = IdRange {
    first: 0x7100_0000,
    slots: 2048,
};

impl IdRange {
    const SIZE: u32 = 65536;

    pub fn slot(&self, n: u32) -> IdMap {
        IdMap {
            host: self.first + n * Self::SIZE,
            size: Self::SIZE,
        }
    }

    fn slot_of(&self, host: u32) -> Option<u32> {
        let off = host.checked_sub(self.first)?;
        (off % Self::SIZE == 0 && off / Self::SIZE < self.slots).then_some(off / Self::SIZE)
    }
}

impl IdMap {
    /// The id in the container of a host id, if the mapping covers it.
    pub fn to_container(&self, host_id: u32) -> Option<u32> {
        host_id.checked_sub(self.host).filter(|id| *id < self.size)
    }
}

/// What an image build's step container gets instead of a job's defaults
/// ([`Runtime::start_build_step`]): always a shorter capability list (what package managers
/// need) and no cgroup filesystem; these options on top.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildOptions {
    /// Run in a user namespace: root in the container is `host` outside. The image layers must
    /// then be idmapped mounts (see `crate::build`); the container's upper directory is given to
    /// `host` so that root in the container owns the image's `/`.
    pub userns: Option<IdMap>,
    /// Append the container's stdout and stderr to these files (the build's log) instead of
    /// its own.
    pub output: Option<(PathBuf, PathBuf)>,
}

/// The process that runs a task (`task.json`): a pid and that process's start time, so a
/// reused pid is never taken for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TaskOwner {
    pid: i32,
    start_time: u64,
}

impl TaskOwner {
    fn current() -> Option<Self> {
        let pid = std::process::id() as i32;
        Some(TaskOwner {
            pid,
            start_time: process_start_time(pid)?,
        })
    }

    fn alive(&self) -> bool {
        process_start_time(self.pid) == Some(self.start_time)
    }
}

/// Field 22 of `/proc/PID/stat`: when the process started, in clock ticks since boot.
fn process_start_time(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: count after its end.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// How a command run in a container ([`Runtime::exec`]) ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutcome {
    /// 128+N when killed by signal N; `None` when it ran past its timeout and was killed.
    pub exit_code: Option<i32>,
    /// The start of its stdout and stderr (at most 4 KiB), for messages.
    pub output: String,
}

/// Everything needed to start one container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerSpec {
    /// `[A-Za-z0-9_.-]`, at most 128 characters, not starting with `.` or `-`.
    pub id: String,
    /// Unpacked image layers, bottom first (as [`crate::image::PreparedImage::layers`]).
    pub layers: Vec<PathBuf>,
    pub args: Vec<String>,
    pub env: Vec<String>,
    /// Absolute working directory; created if the image lacks it.
    pub cwd: String,
    /// `user`, `uid`, `user:group` or `uid:gid`, resolved in the image; `None` is root.
    #[serde(default)]
    pub user: Option<String>,
    pub mounts: Vec<Bind>,
    /// (absolute target, content): written under the container's directory and bind-mounted
    /// read-only (mode 0644).
    pub files: Vec<(String, Vec<u8>)>,
    /// CPU quota in cores (1.5 = 150 ms per 100 ms); 0 or less means no quota.
    pub cpus: f64,
    pub memory_bytes: Option<u64>,
    pub pids_limit: Option<u64>,
    /// Empty: the first 12 characters of the id.
    pub hostname: String,
    /// Share the host's network namespace instead of getting one with only `lo`.
    pub host_network: bool,
}

/// What [`merge_image_config`] decides from an image and an assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedProcess {
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub cwd: String,
    pub user: Option<String>,
}

const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Combines an image's configuration with what an assignment asks for:
/// - argv: the assignment's when given (it is the full command line, replacing the image's
///   entrypoint), otherwise the image's entrypoint followed by its cmd;
/// - env: the image's, overridden by the assignment's per variable (order kept, new ones
///   appended), with a default `PATH` when neither sets one;
/// - cwd: the assignment's, else the image's `WorkingDir`, else `/`;
/// - user: the image's.
pub fn merge_image_config(
    image: &ImageConfig,
    argv: &[String],
    env: &[String],
    cwd: Option<&str>,
) -> Result<MergedProcess, RuntimeError> {
    let args = if argv.is_empty() {
        image
            .entrypoint
            .iter()
            .chain(image.cmd.iter())
            .cloned()
            .collect()
    } else {
        argv.to_vec()
    };
    if args.is_empty() {
        return Err(RuntimeError::InvalidSpec(
            "no command: the task gives none and the image has no entrypoint or cmd".into(),
        ));
    }
    let key = |kv: &str| kv.split_once('=').map_or(kv, |(k, _)| k).to_owned();
    let mut merged: Vec<String> = Vec::new();
    for kv in image.env.iter().chain(env.iter()) {
        if !kv.contains('=') || kv.starts_with('=') {
            return Err(RuntimeError::InvalidSpec(format!(
                "environment entry `{kv}` is not NAME=VALUE"
            )));
        }
        let k = key(kv);
        match merged.iter_mut().find(|e| key(e) == k) {
            Some(slot) => *slot = kv.clone(),
            None => merged.push(kv.clone()),
        }
    }
    if !merged.iter().any(|e| key(e) == "PATH") {
        merged.insert(0, DEFAULT_PATH.to_owned());
    }
    let cwd = cwd
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .or_else(|| image.working_dir.clone())
        .unwrap_or_else(|| "/".to_owned());
    if !cwd.starts_with('/') {
        return Err(RuntimeError::InvalidSpec(format!(
            "working directory `{cwd}` is not absolute"
        )));
    }
    Ok(MergedProcess {
        args,
        env: merged,
        cwd,
        user: image.user.clone(),
    })
}

/// A container as the runtime sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerState {
    Running,
    /// `exit_code` follows the shell convention: 128+N when killed by signal N (137 for
    /// SIGKILL, which is also what the OOM killer sends).
    Exited {
        exit_code: i32,
        signal: Option<i32>,
    },
    /// No record of it, or its shim died without recording an exit (e.g. the node rebooted).
    Unknown,
}

/// The shim's record of how the container ended (`exit.json`, written by `shim/main.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ExitRecord {
    exit_code: i32,
    #[serde(default)]
    signal: Option<i32>,
    /// Set when the process never started (bad command, bad mount...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start_error: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("invalid container spec: {0}")]
    InvalidSpec(String),
    #[error("invalid runtime configuration: {0}")]
    InvalidConfig(String),
    #[error("container {0} already exists")]
    AlreadyExists(String),
    #[error("no container {0}")]
    NotFound(String),
    #[error("container {id} failed to start: {message}")]
    StartFailed { id: String, message: String },
    #[error("{0} is a task that still runs: stop it first")]
    TaskRunning(String),
    #[error("container {id}: {what} did not happen within {secs} s")]
    Timeout { id: String, what: String, secs: u64 },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

type Result<T, E = RuntimeError> = std::result::Result<T, E>;

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> RuntimeError {
    let context = context.into();
    move |source| RuntimeError::Io { context, source }
}

/// Writes `data` at `path` with `mode` unless it is there already (an agent restarted with
/// the same binary rewrites nothing).
fn replace_file(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    if fs::read(path).is_ok_and(|old| old == data)
        && fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o7777 == mode)
    {
        return Ok(());
    }
    dir::write_atomic_mode(path, data, mode)
}

/// Whether the container in `dir` runs its process through `confine`: its config.json's.
fn started_through_confine(dir: &Path) -> bool {
    #[derive(Deserialize)]
    struct Config {
        process: Process,
    }
    #[derive(Deserialize)]
    struct Process {
        args: Vec<String>,
    }
    fs::read(dir.join(files::CONFIG))
        .ok()
        .and_then(|b| serde_json::from_slice::<Config>(&b).ok())
        .is_some_and(|c| c.process.args.first().map(String::as_str) == Some(CONFINE_PATH))
}

/// A container id usable as a file name: also what the network keys attachments by.
pub(crate) fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with(['.', '-'])
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// An absolute container path without `..`.
fn valid_target(t: &str) -> bool {
    let p = Path::new(t);
    p.is_absolute()
        && p.components().all(|c| !matches!(c, Component::ParentDir))
        && p.components().count() > 1
}

/// The runc runtime of one agent. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Runtime {
    cfg: Arc<RuntimeConfig>,
    /// Job containers' user namespaces, or why there are none.
    jobs: Arc<Result<JobIds, String>>,
}

/// The slots of [`IdRange`] in use, and a user namespace of each slot's mapping, kept for the
/// idmapped mounts of later containers in that slot (making one forks a process).
#[derive(Debug)]
struct JobIds {
    range: IdRange,
    slots: std::sync::Mutex<Slots>,
}

#[derive(Debug, Default)]
struct Slots {
    /// Read from the containers' `config.json`s on first use (after an agent restart).
    loaded: bool,
    taken: std::collections::HashMap<String, u32>,
    namespaces: std::collections::HashMap<u32, Arc<userns::UserNs>>,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Self> {
        let parts: Vec<&str> = config.cgroup_parent.split('/').collect();
        if config.cgroup_parent.trim_matches('/').is_empty()
            || parts.iter().any(|p| *p == ".." || *p == ".")
        {
            return Err(RuntimeError::InvalidConfig(format!(
                "cgroup_parent `{}` must be a relative path like gantry/<agent>",
                config.cgroup_parent
            )));
        }
        // Bundles (with their assignments' secrets) and runc's state are nobody else's; image
        // builds' and jobs' user namespaces (unprivileged host uids) must still pass through to
        // their bundles.
        for d in [
            config.state_dir.clone(),
            config.state_dir.join("containers"),
            config.runc_root.clone(),
        ] {
            fs::create_dir_all(&d).map_err(io_err(format!("creating {}", d.display())))?;
            crate::restrict_dir(&d, crate::PASS_THROUGH)
                .map_err(io_err(format!("restricting {}", d.display())))?;
        }
        if sys::noexec(&config.state_dir).map_err(io_err("statvfs of the state directory"))? {
            return Err(RuntimeError::InvalidConfig(format!(
                "{} is on a noexec filesystem: containers start through a program kept there",
                config.state_dir.display()
            )));
        }
        let filter = seccomp::compile(&spec::seccomp_profile()?)?;
        for (name, data, mode) in [
            (files::CONFINE, CONFINE_BINARY, 0o755),
            (files::SHIM, SHIM_BINARY, 0o755),
            (files::RSH, RSH_BINARY, 0o755),
            (files::SECCOMP, &filter[..], 0o644),
        ] {
            let path = config.state_dir.join(name);
            replace_file(&path, data, mode)
                .map_err(io_err(format!("writing {}", path.display())))?;
        }
        let jobs = match config.job_userns {
            None => Err("switched off (`--job-userns off`)".to_string()),
            Some(range) => {
                let scratch = config
                    .state_dir
                    .join(format!("userns-probe.{}", std::process::id()));
                let _ = fs::remove_dir_all(&scratch);
                let probed = userns::probe(range.slot(0), &scratch);
                let _ = fs::remove_dir_all(&scratch);
                probed.map(|()| JobIds {
                    range,
                    slots: Default::default(),
                })
            }
        };
        if let Err(why) = &jobs {
            tracing::warn!(
                "job containers run without a user namespace (root in a container is root on \
                 the node, under seccomp and a reduced capability set): {why}"
            );
        }
        Ok(Runtime {
            cfg: Arc::new(config),
            jobs: Arc::new(jobs),
        })
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.cfg
    }

    /// Multinode members' remote launcher on the host (`rsh/main.rs`), to bind into their
    /// containers.
    pub fn rsh_path(&self) -> PathBuf {
        self.cfg.state_dir.join(files::RSH)
    }

    /// Whether job containers run in user namespaces here, or why not.
    pub fn job_userns(&self) -> Result<IdRange, String> {
        self.jobs
            .as_ref()
            .as_ref()
            .map(|j| j.range)
            .map_err(Clone::clone)
    }

    /// A free slot's mapping (and a namespace of it) for container `id`.
    fn take_slot(&self, id: &str) -> Result<Option<(IdMap, Arc<userns::UserNs>)>> {
        let Ok(jobs) = self.jobs.as_ref() else {
            return Ok(None);
        };
        let mut s = jobs.slots.lock().unwrap_or_else(|p| p.into_inner());
        if !s.loaded {
            for c in self.cfg.containers() {
                if let Some(n) =
                    container_host_id(&self.container_dir(&c)).and_then(|h| jobs.range.slot_of(h))
                {
                    s.taken.insert(c, n);
                }
            }
            s.loaded = true;
        }
        if let Some(n) = s.taken.get(id).copied() {
            if let Some(ns) = s.namespaces.get(&n) {
                return Ok(Some((jobs.range.slot(n), ns.clone())));
            }
        }
        let used: std::collections::HashSet<u32> = s.taken.values().copied().collect();
        let n = (0..jobs.range.slots)
            .find(|n| !used.contains(n))
            .ok_or_else(|| {
                RuntimeError::InvalidConfig(format!(
                    "all {} user-namespace id ranges of this agent are in use",
                    jobs.range.slots
                ))
            })?;
        let map = jobs.range.slot(n);
        let ns = match s.namespaces.get(&n) {
            Some(ns) => ns.clone(),
            None => {
                let ns =
                    Arc::new(userns::UserNs::new(map).map_err(io_err("making a user namespace"))?);
                s.namespaces.insert(n, ns.clone());
                ns
            }
        };
        s.taken.insert(id.to_owned(), n);
        Ok(Some((map, ns)))
    }

    /// The user namespace container `id` will run in, taken now when its network namespace
    /// must be made in it before the container starts (see `UserNs::netns`). `None` where job
    /// containers run without one. Released with the container ([`Runtime::remove`]).
    pub fn job_userns_for(&self, id: &str) -> Result<Option<Arc<userns::UserNs>>> {
        if !valid_id(id) {
            return Err(RuntimeError::InvalidSpec(format!(
                "bad container id `{id}`"
            )));
        }
        Ok(self.take_slot(id)?.map(|(_, ns)| ns))
    }

    fn release_slot(&self, id: &str) {
        if let Ok(jobs) = self.jobs.as_ref() {
            let mut s = jobs.slots.lock().unwrap_or_else(|p| p.into_inner());
            s.taken.remove(id);
        }
    }

    /// The container's directory (bundle and state).
    pub fn container_dir(&self, id: &str) -> PathBuf {
        self.cfg.state_dir.join("containers").join(id)
    }

    /// The files the container's stdout and stderr go to.
    pub fn log_paths(&self, id: &str) -> (PathBuf, PathBuf) {
        let d = self.container_dir(id);
        (d.join(files::STDOUT), d.join(files::STDERR))
    }

    fn cgroups_path(&self, id: &str) -> String {
        format!("/{}/{id}", self.cfg.cgroup_parent.trim_matches('/'))
    }

    /// Starts a container and returns once its process runs (or has already exited). On
    /// error nothing is left behind. Blocks (up to a minute): call it from a blocking task.
    pub fn start(&self, spec: &ContainerSpec, meta: &serde_json::Value) -> Result<()> {
        self.start_with(spec, meta, &StartOptions::default())
    }

    /// [`Runtime::start`] with host-side options (a network namespace to join).
    pub fn start_with(
        &self,
        spec: &ContainerSpec,
        meta: &serde_json::Value,
        opts: &StartOptions,
    ) -> Result<()> {
        self.start_inner(spec, meta, opts, None)
    }

    /// Starts one step of an image build: [`Runtime::start_with`] with a build's confinement
    /// (see [`BuildOptions`]).
    pub fn start_build_step(
        &self,
        spec: &ContainerSpec,
        meta: &serde_json::Value,
        opts: &StartOptions,
        build: &BuildOptions,
    ) -> Result<()> {
        self.start_inner(spec, meta, opts, Some(build))
    }

    fn start_inner(
        &self,
        spec: &ContainerSpec,
        meta: &serde_json::Value,
        opts: &StartOptions,
        build: Option<&BuildOptions>,
    ) -> Result<()> {
        self.create(spec, meta, opts, build)?;
        let started = self.wait_started(&spec.id);
        // runc has made its own mounts of them in the container by now (or never will).
        let released = release_mount_sources(&self.container_dir(&spec.id));
        match started
            .and(released)
            .and_then(|()| self.verify_init(&spec.id))
        {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = self.stop(&spec.id, Duration::ZERO);
                let _ = self.remove(&spec.id);
                Err(e)
            }
        }
    }

    fn validate(&self, spec: &ContainerSpec) -> Result<()> {
        let bad = |m: String| Err(RuntimeError::InvalidSpec(m));
        if !valid_id(&spec.id) {
            return bad(format!("id `{}` must be 1-128 of [A-Za-z0-9_.-]", spec.id));
        }
        if spec.layers.is_empty() {
            return bad("no image layers".into());
        }
        if let Some(l) = spec.layers.iter().find(|l| !l.is_dir()) {
            return bad(format!("layer {} is not unpacked", l.display()));
        }
        if spec.args.is_empty() {
            return bad("no command".into());
        }
        if !spec.cwd.starts_with('/') {
            return bad(format!("working directory `{}` is not absolute", spec.cwd));
        }
        // The kernel's trees and the `/dev` holding confine and its filter: a mount there
        // could put another init in place of confine (the workflow file is refused for it
        // first, see `gantry_spec::names`).
        let reserved = |t: &str| {
            gantry_spec::names::at_or_below(t, &gantry_spec::names::KERNEL_TREES).is_some()
        };
        for b in &spec.mounts {
            if !valid_target(&b.target) || reserved(&b.target) {
                return bad(format!("mount target `{}` is not allowed", b.target));
            }
            if !b.source.is_absolute() || !b.source.exists() {
                return bad(format!(
                    "mount source {} does not exist (or is not absolute)",
                    b.source.display()
                ));
            }
        }
        for (t, _) in &spec.files {
            if !valid_target(t) || reserved(t) {
                return bad(format!("file target `{t}` is not allowed"));
            }
        }
        Ok(())
    }

    /// Builds the bundle and launches the shim (blocking work).
    fn create(
        &self,
        spec: &ContainerSpec,
        meta: &serde_json::Value,
        opts: &StartOptions,
        build: Option<&BuildOptions>,
    ) -> Result<()> {
        self.validate(spec)?;
        if let Some(ns) = opts.netns.as_deref().filter(|_| !spec.host_network) {
            if !ns.is_absolute() || !ns.exists() {
                return Err(RuntimeError::InvalidSpec(format!(
                    "network namespace {} does not exist (or is not absolute)",
                    ns.display()
                )));
            }
        }
        let dir = self.container_dir(&spec.id);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(RuntimeError::AlreadyExists(spec.id.clone()))
            }
            Err(e) => return Err(io_err(format!("creating {}", dir.display()))(e)),
        }
        let built = self.populate(spec, meta, opts, build, &dir);
        if built.is_err() {
            let _ = self.remove_blocking(&spec.id);
        }
        built
    }

    fn populate(
        &self,
        spec: &ContainerSpec,
        meta: &serde_json::Value,
        opts: &StartOptions,
        build: Option<&BuildOptions>,
        dir: &Path,
    ) -> Result<()> {
        // runc runs the container's processes from the bundle; keep it away from other users.
        fs::set_permissions(dir, fs::Permissions::from_mode(0o711))
            .map_err(io_err("chmod bundle"))?;
        let meta_bytes = serde_json::to_vec(meta).map_err(|e| io_err("meta")(e.into()))?;
        write_atomic(&dir.join(files::META), &meta_bytes).map_err(io_err("writing meta.json"))?;
        // Each directory is an inode to make and delete again: `files/` only when there are.
        let injected_dir = (!spec.files.is_empty()).then_some(files::INJECTED);
        for d in [files::ROOTFS, files::UPPER, files::WORK]
            .into_iter()
            .chain(injected_dir)
        {
            fs::create_dir(dir.join(d)).map_err(io_err(format!("creating {d}")))?;
        }
        // A job's container gets a user namespace of its own slot; a build step comes with
        // its build's (and its layers already idmapped, see `crate::build`).
        let job_ns = match build {
            Some(_) => None,
            None => self.take_slot(&spec.id)?,
        };
        if let (Some((_, ns)), Some(netns), false) =
            (&job_ns, opts.netns.as_deref(), spec.host_network)
        {
            // runc joins the user namespace first, and from there only a network it owns.
            if !ns
                .owns_netns(netns)
                .map_err(io_err("reading the network's owner"))?
            {
                return Err(RuntimeError::InvalidSpec(format!(
                    "network namespace {} was not made in the container's user namespace \
                     (see Runtime::job_userns_for)",
                    netns.display()
                )));
            }
        }
        let userns = build
            .and_then(|b| b.userns)
            .or(job_ns.as_ref().map(|(m, _)| *m));
        if let Some(d) = injected_dir {
            // A job's files may carry its secrets: nobody else may reach them. In a user
            // namespace the directory is the container's root's (as the files are), so the
            // bind mounts work whether runc opens their sources as the host's root or from
            // inside the namespace.
            let d = dir.join(d);
            fs::set_permissions(&d, fs::Permissions::from_mode(0o700))
                .map_err(io_err(format!("chmod {}", files::INJECTED)))?;
            if let Some(m) = userns {
                std::os::unix::fs::lchown(&d, Some(m.host), Some(m.host)).map_err(io_err(
                    "giving the injected files' directory to the user namespace",
                ))?;
            }
        }
        if let Some(m) = userns {
            // The upper directory is the overlay's `/`: root in the container must own it.
            std::os::unix::fs::lchown(dir.join(files::UPPER), Some(m.host), Some(m.host))
                .map_err(io_err("giving the upper directory to the user namespace"))?;
        }
        if let Some((out, err)) = build.and_then(|b| b.output.as_ref()) {
            // The shim opens these (appending) and hands them to the container.
            for (link, target) in [(files::STDOUT, out), (files::STDERR, err)] {
                std::os::unix::fs::symlink(target, dir.join(link))
                    .map_err(io_err(format!("linking {link} to {}", target.display())))?;
            }
        }
        let rootfs = dir.join(files::ROOTFS);
        // A build step's upper directory becomes a layer: it must hold plain files.
        let options = if build.is_some() {
            sys::PLAIN_UPPER
        } else {
            &[]
        };
        // In a user namespace the image's files must look owned by the container's ids: each
        // layer goes to overlayfs as an idmapped view of the shared cache (nothing on disk
        // changes). overlayfs keeps its own clones of its layers' mounts, so the views are
        // taken off again at once.
        let layers = match &job_ns {
            None => spec.layers.clone(),
            Some((_, ns)) => {
                let at = dir.join(files::LOWER);
                fs::create_dir(&at).map_err(io_err("creating lower/"))?;
                let mut views = Vec::new();
                for (n, layer) in spec.layers.iter().enumerate() {
                    let view = at.join(n.to_string());
                    fs::create_dir(&view).map_err(io_err("creating a layer's view"))?;
                    ns.idmapped_mount(layer, &view)
                        .map_err(io_err(format!("idmapping layer {}", layer.display())))?;
                    views.push(view);
                }
                views
            }
        };
        let mounted = sys::mount_overlay(
            &layers,
            &dir.join(files::UPPER),
            &dir.join(files::WORK),
            &rootfs,
            options,
        )
        .map_err(io_err(format!(
            "mounting the image at {}",
            rootfs.display()
        )));
        if job_ns.is_some() {
            release_views(&dir.join(files::LOWER))?;
        }
        mounted?;

        let (uid, gid, additional_gids) = resolve_user(&rootfs, spec.user.as_deref())?;
        let mut spec = spec.clone();
        // Bound into the container's directory by this process, so a source that is a
        // descriptor of ours (`/proc/self/fd/N`) reaches runc, which mounts in a namespace of
        // its own, as a path only the agent controls.
        if !spec.mounts.is_empty() {
            let at = dir.join(files::MOUNTS);
            fs::create_dir(&at).map_err(io_err("creating mounts/"))?;
            for (n, b) in spec.mounts.iter_mut().enumerate() {
                let target = at.join(n.to_string());
                let is_dir = fs::metadata(&b.source)
                    .map_err(io_err(format!("mount source for {}", b.target)))?
                    .is_dir();
                if is_dir {
                    fs::create_dir(&target)
                } else {
                    fs::File::create(&target).map(drop)
                }
                .map_err(io_err(format!("creating {}", target.display())))?;
                match &job_ns {
                    // Through the container's mapping, so that what is on disk keeps the
                    // owners it would have without a user namespace.
                    Some((_, ns)) => ns.idmapped_mount(&b.source, &target),
                    None => sys::bind_mount(&b.source, &target),
                }
                .map_err(io_err(format!("binding the source of {}", b.target)))?;
                b.source = target;
            }
        }
        let mut injected = Vec::new();
        for (n, (target, content)) in spec.files.iter().enumerate() {
            let src = dir.join(files::INJECTED).join(n.to_string());
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&src)
                .and_then(|mut f| f.write_all(content))
                .map_err(io_err(format!("writing injected file for {target}")))?;
            if let Some(m) = userns {
                // Root's in the container, as without a user namespace.
                std::os::unix::fs::lchown(&src, Some(m.host), Some(m.host))
                    .map_err(io_err(format!("owning the injected file for {target}")))?;
            }
            injected.push((src, target.clone()));
        }
        if spec.hostname.is_empty() {
            spec.hostname = spec.id.chars().take(12).collect();
        }
        let host = spec::HostSide {
            uid,
            gid,
            additional_gids,
            files: injected,
            confine: &self.cfg.state_dir.join(files::CONFINE),
            seccomp: &self.cfg.state_dir.join(files::SECCOMP),
            cgroups_path: self.cgroups_path(&spec.id),
            swap_accounting: Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
                .exists(),
            netns: opts.netns.as_deref(),
            build: build.is_some(),
            userns,
            // A job's container joins its slot's namespace (the one its layers, volumes and
            // network namespace were made with) rather than getting another of the same
            // mapping.
            userns_path: job_ns.as_ref().map(|(_, ns)| ns.path()),
        };
        let oci = spec::build(&spec, &host)?;
        let json = serde_json::to_vec_pretty(&oci).map_err(|e| io_err("config.json")(e.into()))?;
        write_atomic(&dir.join(files::CONFIG), &json).map_err(io_err("writing config.json"))?;
        self.spawn_shim(&spec.id, dir)
    }

    fn spawn_shim(&self, id: &str, dir: &Path) -> Result<()> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(files::SHIM_LOG))
            .map_err(io_err("opening shim.log"))?;
        let log2 = log.try_clone().map_err(io_err("opening shim.log"))?;
        let shim = self.cfg.state_dir.join(files::SHIM);
        let mut cmd = Command::new(&shim);
        cmd.args(shim::shim_args(
            &self.cfg.runc,
            &self.cfg.runc_root,
            id,
            dir,
        ))
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
        // The shim detaches itself (own session, reparented to init); what runs here exits as
        // soon as it has.
        let status = cmd
            .status()
            .map_err(io_err(format!("starting shim {}", shim.display())))?;
        if !status.success() {
            return Err(RuntimeError::StartFailed {
                id: id.to_owned(),
                message: format!("shim launcher exited with {status}"),
            });
        }
        Ok(())
    }

    fn wait_started(&self, id: &str) -> Result<()> {
        let dir = self.container_dir(id);
        let deadline = Instant::now() + START_TIMEOUT;
        // runc's pid file and the shim's exit record both appear by rename: wake on them
        // rather than sleeping. The timeout still notices a shim that died silently.
        let watch = sys::DirWatch::new(&dir).ok();
        loop {
            if let Some(rec) = read_exit(&dir) {
                return match rec.start_error {
                    // The shim records runc's exit status; runc's log says why.
                    Some(message) => Err(RuntimeError::StartFailed {
                        id: id.to_owned(),
                        message: shim::runc_error(&dir.join(files::RUNC_LOG)).unwrap_or(message),
                    }),
                    None => Ok(()),
                };
            }
            if dir.join(files::CONTAINER_PID).exists() {
                return Ok(());
            }
            let shim_pid = read_pid(&dir.join(files::SHIM_PID));
            if shim_pid.is_some_and(|p| !self.shim_alive(p, id)) && read_exit(&dir).is_none() {
                let log = fs::read_to_string(dir.join(files::SHIM_LOG)).unwrap_or_default();
                return Err(RuntimeError::StartFailed {
                    id: id.to_owned(),
                    message: format!("the shim died: {}", log.trim()),
                });
            }
            if Instant::now() > deadline {
                return Err(RuntimeError::Timeout {
                    id: id.to_owned(),
                    what: "start".into(),
                    secs: START_TIMEOUT.as_secs(),
                });
            }
            match &watch {
                Some(w) => w.wait(POLL),
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// Checks that the container's first process runs this agent's `confine` (the very file,
    /// by device and inode), so that nothing mounted into the container or shipped in its image
    /// took its place and ran without the seccomp filter. Waits for runc's init to exec it; a
    /// container whose process has already ended passes (there is nothing left to check, and
    /// its pid may be another process's by now).
    fn verify_init(&self, id: &str) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let confine = fs::metadata(self.cfg.state_dir.join(files::CONFINE))
            .map_err(io_err("reading confine's inode"))?;
        let want = (confine.dev(), confine.ino());
        let Some(pid) = self.pid(id) else {
            return Ok(());
        };
        let cgroup = self.cgroups_path(id);
        let deadline = Instant::now() + INIT_CHECK_TIMEOUT;
        loop {
            match executable_in_cgroup(pid, &cgroup) {
                None => return Ok(()),
                Some(exe) if exe == want => return Ok(()),
                Some(_) => {}
            }
            if Instant::now() > deadline {
                return Err(RuntimeError::StartFailed {
                    id: id.to_owned(),
                    message: format!(
                        "its first process is not Gantry's {CONFINE_PATH}: refusing to let it run"
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A descriptor that becomes readable when the container's shim exits (it has written
    /// `exit.json` by then), so a monitor can wake on the end instead of polling for it.
    /// `None` for a task, or when the shim is already gone.
    pub fn exit_fd(&self, id: &str) -> Option<std::os::fd::OwnedFd> {
        if !valid_id(id) {
            return None;
        }
        let pid = read_pid(&self.container_dir(id).join(files::SHIM_PID))?;
        let fd = sys::pidfd_open(pid).ok()?;
        // Checked after opening, so the descriptor is known to be this container's shim and
        // not a process that reused its pid.
        self.shim_alive(pid, id).then_some(fd)
    }

    /// Whether `pid` is still this container's shim (guarding against pid reuse).
    fn shim_alive(&self, pid: i32, id: &str) -> bool {
        if !crate::image::pid_alive(pid) {
            return false;
        }
        let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
            return false;
        };
        let mut args = cmdline.split(|b| *b == 0);
        args.any(|a| a == b"--id") && cmdline.split(|b| *b == 0).any(|a| a == id.as_bytes())
    }

    /// Containers in the state directory, for re-adoption after an agent restart.
    pub fn list(&self) -> Vec<String> {
        self.cfg.containers()
    }

    /// The metadata given to [`Runtime::start`].
    pub fn meta(&self, id: &str) -> Result<serde_json::Value> {
        if !valid_id(id) {
            return Err(RuntimeError::NotFound(id.to_owned()));
        }
        let p = self.container_dir(id).join(files::META);
        let raw = fs::read(&p).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => RuntimeError::NotFound(id.to_owned()),
            _ => io_err(format!("reading {}", p.display()))(e),
        })?;
        serde_json::from_slice(&raw)
            .map_err(|e| io_err(format!("parsing {}", p.display()))(e.into()))
    }

    pub fn status(&self, id: &str) -> ContainerState {
        if !valid_id(id) {
            return ContainerState::Unknown;
        }
        let dir = self.container_dir(id);
        if !dir.is_dir() {
            return ContainerState::Unknown;
        }
        if let Some(rec) = read_exit(&dir) {
            return ContainerState::Exited {
                exit_code: rec.exit_code,
                signal: rec.signal,
            };
        }
        if let Some(owner) = read_task(&dir) {
            return if owner.alive() {
                ContainerState::Running
            } else {
                ContainerState::Unknown
            };
        }
        if read_pid(&dir.join(files::SHIM_PID)).is_some_and(|p| self.shim_alive(p, id)) {
            return ContainerState::Running;
        }
        // The shim may have written its record and exited since we looked.
        if let Some(rec) = read_exit(&dir) {
            return ContainerState::Exited {
                exit_code: rec.exit_code,
                signal: rec.signal,
            };
        }
        // The shim is gone without a record: the container may still run, orphaned.
        match self.runc_status(id).as_deref() {
            Some("running" | "created" | "paused" | "pausing") => ContainerState::Running,
            _ => ContainerState::Unknown,
        }
    }

    /// The host pid of the container's first process (its init), while it may run.
    pub fn pid(&self, id: &str) -> Option<i32> {
        if !valid_id(id) {
            return None;
        }
        read_pid(&self.container_dir(id).join(files::CONTAINER_PID))
    }

    /// Runs `argv` inside a running container with `runc exec`: the container's user,
    /// environment, capabilities and confinement apply. A command still running after
    /// `timeout` is killed. Blocks: call it from a blocking task.
    pub fn exec(&self, id: &str, argv: &[String], timeout: Duration) -> Result<ExecOutcome> {
        use std::io::Read;
        let (mut cmd, pid_file) = self.exec_command(id, argv)?;
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err(format!("running {} exec", self.cfg.runc.display())))?;
        // Each pipe is read on its own thread so a chatty command never blocks on a full pipe;
        // what it leaves running in the background may hold a pipe open, so the results are
        // waited for only briefly.
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let readers: Vec<Box<dyn Read + Send>> = [
            child
                .stdout
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        .collect();
        let n_readers = readers.len();
        for mut r in readers {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = r.by_ref().take(4096).read_to_end(&mut buf);
                let _ = tx.send(buf);
                let _ = io::copy(&mut r, &mut io::sink());
            });
        }
        drop(tx);
        let deadline = Instant::now() + timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break Some(st),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => break None,
            }
        };
        let exit_code = match status {
            Some(st) => {
                use std::os::unix::process::ExitStatusExt;
                Some(st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)))
            }
            None => {
                // The process in the container first (runc exec does not pass SIGKILL on).
                if let Some(pid) = read_pid(&pid_file) {
                    // SAFETY: kill only sends a signal.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                let _ = child.kill();
                let _ = child.wait();
                None
            }
        };
        let mut output = Vec::new();
        for _ in 0..n_readers {
            match rx.recv_timeout(Duration::from_millis(500)) {
                Ok(b) => output.extend_from_slice(&b),
                Err(_) => break,
            }
        }
        let _ = fs::remove_file(&pid_file);
        output.truncate(4096);
        Ok(ExecOutcome {
            exit_code,
            output: String::from_utf8_lossy(&output).into_owned(),
        })
    }

    /// The `runc exec` of `argv` in a running container, as [`Runtime::exec`] runs it (the
    /// container's user, environment, working directory, capabilities; through confine and the
    /// seccomp filter), for a caller that streams its input and output (stdin is null unless
    /// set), and the file runc writes the host pid of the process in the container to: what
    /// to kill, since runc exec does not pass SIGKILL on. The caller removes that file.
    pub fn exec_command(&self, id: &str, argv: &[String]) -> Result<(Command, PathBuf)> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static SEQ: AtomicU64 = AtomicU64::new(0);
        if !valid_id(id) || !self.container_dir(id).is_dir() {
            return Err(RuntimeError::NotFound(id.to_owned()));
        }
        if argv.is_empty() {
            return Err(RuntimeError::InvalidSpec("exec: no command".into()));
        }
        let dir = self.container_dir(id);
        let pid_file = dir.join(format!(
            "exec-{}-{}.pid",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        // The container's filter belongs to its processes, not its namespaces: what runc
        // execs into it goes through confine as well (unless the container predates confine
        // and runc applies the filter from its config.json).
        let confine: &[&str] = if started_through_confine(&dir) {
            &[CONFINE_PATH, SECCOMP_PATH]
        } else {
            &[]
        };
        let mut cmd = self.runc();
        cmd.arg("exec")
            .arg("--no-new-privs")
            .arg("--pid-file")
            .arg(&pid_file)
            .arg(id)
            .args(confine)
            .args(argv);
        Ok((cmd, pid_file))
    }

    /// Records an attempt that this process runs itself (an image build) in the container
    /// layout: its directory with `meta`, empty output files for the caller to write to
    /// ([`Runtime::log_paths`]), and the owner that [`Runtime::status`] checks. It reads as
    /// running until [`Runtime::finish_task`], or as unknown once this process is gone.
    pub fn create_task(&self, id: &str, meta: &serde_json::Value) -> Result<()> {
        if !valid_id(id) {
            return Err(RuntimeError::InvalidSpec(format!(
                "id `{id}` must be 1-128 of [A-Za-z0-9_.-]"
            )));
        }
        let owner = TaskOwner::current().ok_or_else(|| {
            io_err("reading this process's start time")(io::Error::other("no /proc/self/stat"))
        })?;
        let dir = self.container_dir(id);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(RuntimeError::AlreadyExists(id.to_owned()))
            }
            Err(e) => return Err(io_err(format!("creating {}", dir.display()))(e)),
        }
        let made = (|| -> Result<()> {
            // Build steps under a user namespace reach their bundles through this directory.
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o711))
                .map_err(io_err("chmod task directory"))?;
            let meta_bytes = serde_json::to_vec(meta).map_err(|e| io_err("meta")(e.into()))?;
            write_atomic(&dir.join(files::META), &meta_bytes)
                .map_err(io_err("writing meta.json"))?;
            for f in [files::STDOUT, files::STDERR] {
                fs::OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .write(true)
                    .mode(0o600)
                    .open(dir.join(f))
                    .map_err(io_err(format!("creating {f}")))?;
            }
            let owner = serde_json::to_vec(&owner).map_err(|e| io_err("task")(e.into()))?;
            write_atomic(&dir.join(files::TASK), &owner).map_err(io_err("writing task.json"))
        })();
        if made.is_err() {
            let _ = fs::remove_dir_all(&dir);
        }
        made
    }

    /// Records a task's end: from now on [`Runtime::status`] reads `Exited { exit_code }`.
    pub fn finish_task(&self, id: &str, exit_code: i32) -> Result<()> {
        if !valid_id(id) || read_task(&self.container_dir(id)).is_none() {
            return Err(RuntimeError::NotFound(id.to_owned()));
        }
        let record = ExitRecord {
            exit_code,
            signal: None,
            start_error: None,
        };
        let json = serde_json::to_vec(&record).map_err(|e| io_err("exit")(e.into()))?;
        write_atomic(&self.container_dir(id).join(files::EXIT), &json)
            .map_err(io_err("writing exit.json"))
    }

    /// Takes an exited container's upper directory (what its process changed in the image) out
    /// of its directory to `dest`, on the same filesystem, once its shim has unmounted it. The
    /// container itself is left for [`Runtime::remove`].
    pub fn take_upper(&self, id: &str, dest: &Path) -> Result<()> {
        if !valid_id(id) || !self.container_dir(id).is_dir() {
            return Err(RuntimeError::NotFound(id.to_owned()));
        }
        if self.status(id) == ContainerState::Running {
            return Err(RuntimeError::InvalidSpec(format!(
                "container {id} still runs: its upper directory is in use"
            )));
        }
        let dir = self.container_dir(id);
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Some(pid) = read_pid(&dir.join(files::SHIM_PID)) {
            if !self.shim_alive(pid, id) || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(POLL);
        }
        let rootfs = dir.join(files::ROOTFS);
        sys::unmount_all(&rootfs).map_err(io_err(format!("unmounting {}", rootfs.display())))?;
        fs::rename(dir.join(files::UPPER), dest).map_err(io_err(format!(
            "moving the upper directory of {id} to {}",
            dest.display()
        )))
    }

    fn runc(&self) -> Command {
        let mut c = Command::new(&self.cfg.runc);
        c.arg("--root")
            .arg(&self.cfg.runc_root)
            .stdin(Stdio::null());
        c
    }

    fn runc_status(&self, id: &str) -> Option<String> {
        let out = self
            .runc()
            .args(["state", id])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        v["status"].as_str().map(str::to_owned)
    }

    /// Best effort: an exited or unknown container makes runc complain, which is fine here.
    fn runc_kill(&self, id: &str, all: bool, signal: &str) {
        let mut c = self.runc();
        c.arg("kill");
        if all {
            c.arg("--all");
        }
        let _ = c
            .args([id, signal])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// The one way to stop a container: SIGTERM to its init, up to `grace` to exit, then
    /// SIGKILL to every process in it. Harmless on a container that has already exited.
    /// Blocks until the container is gone: call it from a blocking task.
    pub fn stop(&self, id: &str, grace: Duration) -> Result<ContainerState> {
        if !valid_id(id) || !self.container_dir(id).is_dir() {
            return Ok(ContainerState::Unknown);
        }
        let state = self.status(id);
        if state != ContainerState::Running || read_task(&self.container_dir(id)).is_some() {
            // A task is stopped by the process that runs it.
            return Ok(state);
        }
        if !grace.is_zero() {
            self.runc_kill(id, false, "TERM");
            if let Some(s) = self.wait_not_running(id, grace) {
                return Ok(s);
            }
        }
        self.runc_kill(id, true, "KILL");
        self.wait_not_running(id, KILL_TIMEOUT)
            .ok_or_else(|| RuntimeError::Timeout {
                id: id.to_owned(),
                what: "exit after SIGKILL".into(),
                secs: KILL_TIMEOUT.as_secs(),
            })
    }

    fn wait_not_running(&self, id: &str, within: Duration) -> Option<ContainerState> {
        let deadline = Instant::now() + within;
        // Woken by the shim's exit where it has one; the beat covers an orphaned container.
        let exit = self.exit_fd(id);
        loop {
            let s = self.status(id);
            if s != ContainerState::Running {
                return Some(s);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match &exit {
                Some(fd) => {
                    sys::wait_readable(fd, left.min(POLL));
                }
                None => std::thread::sleep(left.min(POLL)),
            }
        }
    }

    /// Deletes everything about a container: runc state, its rootfs mount, its directory and
    /// the cgroup directories runc leaves behind. A running container is killed first.
    /// Blocks: call it from a blocking task.
    pub fn remove(&self, id: &str) -> Result<()> {
        if !valid_id(id) {
            return Err(RuntimeError::NotFound(id.to_owned()));
        }
        if self.status(id) == ContainerState::Running {
            if read_task(&self.container_dir(id)).is_some() {
                return Err(RuntimeError::TaskRunning(id.to_owned()));
            }
            self.stop(id, Duration::ZERO)?;
        }
        // Let the shim finish its own cleanup rather than racing it.
        if let Some(exit) = self.exit_fd(id) {
            sys::wait_readable(&exit, Duration::from_secs(10));
        }
        self.remove_blocking(id)
    }

    fn remove_blocking(&self, id: &str) -> Result<()> {
        // Usually `runc run` has already deleted its state and its cgroups; a runc process
        // start-up costs ~4 ms of CPU, so only ask it when runc still holds something.
        let dir = self.container_dir(id);
        let leftovers = self.cfg.runc_root.join(id).exists();
        // A container that ended as runc reported it (its exit recorded, no start error) has
        // no cgroup left either: looking in every hierarchy would cost 11 lookups per job.
        let clean_end = !leftovers && read_exit(&dir).is_some_and(|r| r.start_error.is_none());
        if leftovers {
            let _ = self
                .runc()
                .args(["delete", "--force", id])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        // The shim takes the image off `rootfs` as the container ends; a shim that died first
        // leaves it mounted. Nothing else is mounted in the container's directory on the host,
        // and the removal stops at any mount rather than walk the image's shared layers.
        let rootfs = dir.join(files::ROOTFS);
        sys::unmount_all(&rootfs).map_err(io_err(format!("unmounting {}", rootfs.display())))?;
        release_mount_sources(&dir)?;
        release_views(&dir.join(files::LOWER))?;
        sys::remove_tree(&dir).map_err(io_err(format!("removing {}", dir.display())))?;
        self.release_slot(id);
        if !clean_end {
            sys::remove_cgroups(&self.cfg.cgroup_parent, id);
        }
        Ok(())
    }
}

/// The (device, inode) of what process `pid` executes, if it is a process of the cgroup
/// `cgroup` (as runc names it) before and after the look, so never another process that
/// reused the pid; `None` once it is not (it has ended).
fn executable_in_cgroup(pid: i32, cgroup: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let member = || {
        fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| {
            c.lines()
                .any(|l| l.rsplit_once(':').is_some_and(|(_, p)| p == cgroup))
        })
    };
    if !member() {
        return None;
    }
    // Not readable for a moment while runc's init execs: report something that is no file.
    let exe = fs::metadata(format!("/proc/{pid}/exe")).map_or((0, 0), |m| (m.dev(), m.ino()));
    member().then_some(exe)
}

/// Takes the mount sources bound under `mounts/` off again and removes the directory.
fn release_mount_sources(dir: &Path) -> Result<()> {
    release_views(&dir.join(files::MOUNTS))
}

/// Takes off what is mounted on each entry of `at` (mount sources, layer views) and removes
/// `at`.
fn release_views(at: &Path) -> Result<()> {
    let Ok(entries) = fs::read_dir(at) else {
        return Ok(());
    };
    for e in entries.flatten() {
        sys::unmount_all(&e.path())
            .map_err(io_err(format!("unmounting {}", e.path().display())))?;
    }
    sys::remove_tree(at).map_err(io_err(format!("removing {}", at.display())))
}

/// The host id that a container's root is in its `config.json`, when it has a user namespace.
fn container_host_id(dir: &Path) -> Option<u32> {
    let raw = fs::read(dir.join(files::CONFIG)).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&raw).ok()?;
    v["linux"]["uidMappings"][0]["hostID"]
        .as_u64()
        .and_then(|h| u32::try_from(h).ok())
}

fn read_pid(p: &Path) -> Option<i32> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn read_exit(dir: &Path) -> Option<ExitRecord> {
    serde_json::from_slice(&fs::read(dir.join(files::EXIT)).ok()?).ok()
}

fn read_task(dir: &Path) -> Option<TaskOwner> {
    serde_json::from_slice(&fs::read(dir.join(files::TASK)).ok()?).ok()
}

/// Resolves `user[:group]` against the image's /etc/passwd and /etc/group. Files are read only
/// if they are not symlinks: a symlink would be followed on the host, not in the image.
fn resolve_user(rootfs: &Path, user: Option<&str>) -> Result<(u32, u32, Vec<u32>)> {
    let Some(user) = user.filter(|u| !u.is_empty()) else {
        return Ok((0, 0, Vec::new()));
    };
    let read = |name: &str| -> Option<String> {
        let etc = rootfs.join("etc");
        let p = etc.join(name);
        let plain = |p: &Path| fs::symlink_metadata(p).is_ok_and(|m| !m.file_type().is_symlink());
        if plain(&etc) && plain(&p) {
            fs::read_to_string(p).ok()
        } else {
            None
        }
    };
    let passwd = read("passwd").unwrap_or_default();
    let group = read("group").unwrap_or_default();
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let bad = |m: String| RuntimeError::InvalidSpec(m);
    let pw = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 4 && (f[0] == u || f[2] == u));
    let (uid, name, primary) = match (u.parse::<u32>(), &pw) {
        (Ok(uid), pw) => (
            uid,
            pw.as_ref().map(|f| f[0]),
            pw.as_ref().and_then(|f| f[3].parse().ok()),
        ),
        (Err(_), Some(f)) => (
            f[2].parse()
                .map_err(|_| bad(format!("bad uid for {u} in /etc/passwd")))?,
            Some(f[0]),
            f[3].parse().ok(),
        ),
        (Err(_), None) => return Err(bad(format!("user `{u}` is not in the image's /etc/passwd"))),
    };
    let groups: Vec<Vec<&str>> = group
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 3)
        .collect();
    let gid = match g {
        None => primary.unwrap_or(0),
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => groups
                .iter()
                .find(|f| f[0] == g)
                .and_then(|f| f[2].parse().ok())
                .ok_or_else(|| bad(format!("group `{g}` is not in the image's /etc/group")))?,
        },
    };
    let additional = match name {
        Some(n) if g.is_none() => groups
            .iter()
            .filter(|f| f.len() >= 4 && f[3].split(',').any(|m| m == n))
            .filter_map(|f| f[2].parse().ok())
            .filter(|x| *x != gid)
            .collect(),
        _ => Vec::new(),
    };
    Ok((uid, gid, additional))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> ImageConfig {
        ImageConfig {
            env: vec!["PATH=/usr/bin".into(), "LANG=C".into()],
            entrypoint: vec!["/entry".into()],
            cmd: vec!["serve".into(), "--port=1".into()],
            working_dir: Some("/srv".into()),
            user: Some("app".into()),
        }
    }

    #[test]
    fn merge_defaults_to_image() {
        let m = merge_image_config(&image(), &[], &[], None).unwrap();
        assert_eq!(m.args, vec!["/entry", "serve", "--port=1"]);
        assert_eq!(m.env, vec!["PATH=/usr/bin", "LANG=C"]);
        assert_eq!(m.cwd, "/srv");
        assert_eq!(m.user.as_deref(), Some("app"));
    }

    #[test]
    fn merge_assignment_overrides() {
        let argv = vec!["/bin/sh".to_owned(), "-c".into(), "true".into()];
        let env = vec!["LANG=C.UTF-8".to_owned(), "FB_TASK_ID=3".into()];
        let m = merge_image_config(&image(), &argv, &env, Some("/work")).unwrap();
        assert_eq!(m.args, argv);
        assert_eq!(m.env, vec!["PATH=/usr/bin", "LANG=C.UTF-8", "FB_TASK_ID=3"]);
        assert_eq!(m.cwd, "/work");
    }

    #[test]
    fn merge_adds_path_and_checks_input() {
        let bare = ImageConfig::default();
        let m = merge_image_config(&bare, &["x".into()], &["A=1".into()], None).unwrap();
        assert_eq!(m.env[0], DEFAULT_PATH);
        assert_eq!(m.cwd, "/");
        assert!(merge_image_config(&bare, &[], &[], None).is_err());
        assert!(merge_image_config(&bare, &["x".into()], &["NOVALUE".into()], None).is_err());
        assert!(merge_image_config(&bare, &["x".into()], &[], Some("rel")).is_err());
    }

    #[test]
    fn a_process_executable_is_known_only_while_it_is_in_its_cgroup() {
        use std::os::unix::fs::MetadataExt;
        let me = std::process::id() as i32;
        let cgroup = fs::read_to_string("/proc/self/cgroup").unwrap();
        let cgroup = cgroup.lines().next().unwrap().rsplit_once(':').unwrap().1;
        let exe = fs::metadata("/proc/self/exe").unwrap();
        assert_eq!(
            executable_in_cgroup(me, cgroup),
            Some((exe.dev(), exe.ino()))
        );
        assert_eq!(executable_in_cgroup(me, "/gantry/elsewhere"), None);
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert_eq!(executable_in_cgroup(pid, cgroup), None, "an ended process");
    }

    #[test]
    fn ids_and_targets() {
        assert!(valid_id("0b5f-attempt_1.2"));
        assert!(!valid_id("../x") && !valid_id("") && !valid_id(".hidden") && !valid_id("a/b"));
        assert!(valid_target("/etc/app.conf"));
        assert!(!valid_target("/") && !valid_target("rel") && !valid_target("/a/../b"));
    }

    #[test]
    fn users_resolve_in_the_image() {
        let root = std::env::temp_dir().join(format!("gantry-user-{}", std::process::id()));
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::write(
            root.join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n",
        )
        .unwrap();
        fs::write(
            root.join("etc/group"),
            "root:x:0:\napp:x:1000:\nvideo:x:44:app,other\n",
        )
        .unwrap();
        assert_eq!(resolve_user(&root, None).unwrap(), (0, 0, vec![]));
        assert_eq!(
            resolve_user(&root, Some("app")).unwrap(),
            (1000, 1000, vec![44])
        );
        assert_eq!(
            resolve_user(&root, Some("1000")).unwrap(),
            (1000, 1000, vec![44])
        );
        assert_eq!(resolve_user(&root, Some("5:7")).unwrap(), (5, 7, vec![]));
        assert_eq!(
            resolve_user(&root, Some("app:video")).unwrap(),
            (1000, 44, vec![])
        );
        assert!(resolve_user(&root, Some("nobody")).is_err());
        fs::remove_dir_all(root).unwrap();
    }
}
