//! Image builds: an attempt whose assignment carries a [`BuildSpec`] builds an image from a
//! base and steps, one layer per step, and pushes it to the server's object cache.
//!
//! 1. The base is prepared by the node's [`ImageStore`] (layers unpacked once, overlay
//!    lowerdirs); its manifest and configuration are read too ([`Builder::prepare`]). A failure
//!    here is a start failure, like a job whose image cannot be pulled.
//! 2. The attempt becomes a runtime *task* ([`Runtime::create_task`]): its directory holds the
//!    assignment, the build's log (`stdout`: progress and the RUN steps' output; `stderr`: the
//!    steps' errors and the failure) and, last, `exit.json`, so the agent ships its output and
//!    reports its end like a container's.
//! 3. The first `cached.len()` steps are not run: their layers are fetched from the build's
//!    registry (by digest) and unpacked into the image store, as more lowerdirs.
//! 4. Every other step gets a fresh upper directory over (base + layers so far):
//!    - FILES: the files are written through the overlay (`files`), no container;
//!    - RUN: `/bin/sh -c COMMAND` runs as root in a runc container with the overlay as its
//!      root ([`Runtime::start_build_step`]): its own PID, mount, IPC, UTS and network
//!      namespaces (network `none`: only `lo`; `bridge`: the node's CNI bridge, never the host's
//!      network), a user namespace when the node supports it (`userns`), the runtime's seccomp
//!      profile, `noNewPrivileges`, a short capability list, memory/CPU/pids limits, a tmpfs
//!      `/tmp`, no host paths (but a read-only `resolv.conf` when networked).
//!
//!    The upper directory then becomes the step's layer (`layer`).
//! 5. The base's configuration (edited as JSON: unknown fields kept) gets `spec.env`, the new
//!    diff_ids and history; each layer made or reused by a step is annotated with its step's key
//!    ([`BUILD_KEY_ANNOTATION`]). Blobs the build's repository lacks are pushed (or, for the
//!    base's layers, mounted from the base's repository when it is in the same registry),
//!    then the manifest as `repository:tag`. A registry that links blobs to repositories, as
//!    the object cache and CNCF distribution do, answers for the build's repository only, so
//!    a blob pushed elsewhere before is uploaded again (and stored once).
//! 6. Exit 0, or non-zero with the failing step named in the log; mounts, containers, cgroups
//!    and scratch directories are removed either way, before `exit.json` is written.
//!
//! The whole build has one deadline (`timeout_secs`): past it the running step is stopped and
//! the build exits 124. A stop from the server ends it the same way (exit 143, or the step's
//! own code). The log says how long each phase took.

pub mod layer;
mod registry;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use gantry_api::agent::{Assignment, BuildSpec, BuildStep, CachedLayer, BUILD_KEY_ANNOTATION};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::beneath::{Dir, Owner, Rel, Resolve};
use crate::image::{ImageStore, PreparedImage, PullConfig};
use crate::net::Network;
use crate::runtime::userns;
use crate::runtime::{
    self, sys, BuildOptions, ContainerSpec, ContainerState, IdMap, Runtime, StartOptions,
};

pub use registry::Descriptor;

/// Exit code of a build that ran past its deadline (as `timeout(1)`).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code of a build stopped between steps (128 + SIGTERM).
pub const EXIT_STOPPED: i32 = 143;
/// Exit code of a build that failed other than by a step's own exit code.
pub const EXIT_FAILED: i32 = 1;
/// A step's memory limit when the assignment gives none.
pub const DEFAULT_MEMORY: u64 = 4 << 30;
/// A step's CPU quota when the assignment gives none.
pub const DEFAULT_CPUS: f64 = 2.0;
/// How long a step stopped for the deadline gets between SIGTERM and SIGKILL.
const TIMEOUT_GRACE: Duration = Duration::from_secs(10);
/// How long a bridge-networked build waits for this node's subnet.
const SUBNET_WAIT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(50);

/// What a builder needs from its agent.
#[derive(Clone)]
pub struct BuildEnv {
    pub runtime: Runtime,
    pub images: Arc<ImageStore>,
    /// The node's container networking, for `bridge` builds.
    pub net: Option<Arc<Network>>,
    /// How the node reaches registries (mirrors, plain-HTTP hosts), for the base's manifest.
    pub pull: PullConfig,
    /// The agent's token, sent as a bearer token to the build's registry.
    pub token: Option<String>,
    /// Run RUN steps in a user namespace with this mapping where the node supports it (checked
    /// once, see [`userns::probe`]); `None` never does.
    pub userns: Option<IdMap>,
}

/// Why a build could not start (its base, or the assignment itself).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the assignment has no build")]
    NotABuild,
    #[error("invalid build: {0}")]
    Invalid(String),
    #[error("base image {uri}: {detail}")]
    Base { uri: String, detail: String },
    #[error(transparent)]
    Runtime(#[from] runtime::RuntimeError),
}

/// Asks a running build to stop: its step gets SIGTERM, `grace`, then SIGKILL. Cheap to clone.
#[derive(Clone, Debug)]
pub struct StopSignal(Arc<watch::Sender<Option<Duration>>>);

impl Default for StopSignal {
    fn default() -> Self {
        StopSignal(Arc::new(watch::channel(None).0))
    }
}

impl StopSignal {
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks for a stop; the first grace asked for holds.
    pub fn stop(&self, grace: Duration) {
        self.0.send_if_modified(|g| {
            if g.is_none() {
                *g = Some(grace);
                true
            } else {
                false
            }
        });
    }

    pub fn requested(&self) -> Option<Duration> {
        *self.0.borrow()
    }

    pub(crate) async fn wait(&self) -> Duration {
        let mut rx = self.0.subscribe();
        let grace = rx
            .wait_for(Option::is_some)
            .await
            .map(|g| g.unwrap_or_default());
        match grace {
            Ok(g) => g,
            // Unreachable while `self` holds the sender.
            Err(_) => std::future::pending().await,
        }
    }
}

/// Builds images on this node. Cheap to clone.
#[derive(Clone)]
pub struct Builder {
    env: Arc<BuildEnv>,
    userns: Arc<OnceLock<Result<IdMap, String>>>,
}

impl Builder {
    pub fn new(env: BuildEnv) -> Self {
        Builder {
            env: Arc::new(env),
            userns: Arc::default(),
        }
    }

    pub fn env(&self) -> &BuildEnv {
        &self.env
    }

    /// The mapping RUN steps get, or why they run without one. Probed once (blocking).
    fn userns(&self) -> Result<IdMap, String> {
        self.userns
            .get_or_init(|| {
                let Some(map) = self.env.userns else {
                    return Err("user namespaces are switched off for builds".into());
                };
                let scratch = self
                    .env
                    .runtime
                    .config()
                    .state_dir
                    .join(format!("build-probe.{}", std::process::id()));
                let _ = fs::remove_dir_all(&scratch);
                let r = userns::probe(map, &scratch).map(|()| map);
                let _ = fs::remove_dir_all(&scratch);
                if let Err(e) = &r {
                    tracing::warn!(
                        "image builds run without a user namespace (root in a build step is \
                         root on the node, with a reduced capability set): {e}"
                    );
                }
                r
            })
            .clone()
    }

    /// Checks the assignment, prepares the base image and records the attempt as a runtime
    /// task. An error means the build could not start, and nothing is left behind.
    pub async fn prepare(&self, asg: &Assignment) -> Result<PreparedBuild, BuildError> {
        let spec = asg.build.clone().ok_or(BuildError::NotABuild)?;
        validate(&spec).map_err(BuildError::Invalid)?;
        let started = Instant::now();
        let base_err = |detail: String| BuildError::Base {
            uri: spec.base.uri.clone(),
            detail,
        };
        let base = self
            .env
            .images
            .prepare(&spec.base)
            .await
            .map_err(|e| base_err(e.to_string()))?;
        let base_image = registry::base_image(
            &self.env.images,
            &self.env.pull,
            &spec.base,
            &base.manifest_digest,
        )
        .await
        .map_err(base_err)?;
        if base_image.layers.len() != base.layers.len() {
            return Err(base_err(format!(
                "its manifest lists {} layers, the image store unpacked {}",
                base_image.layers.len(),
                base.layers.len()
            )));
        }
        let base_time = started.elapsed();
        let meta = serde_json::to_value(asg)
            .map_err(|e| BuildError::Invalid(format!("the assignment: {e}")))?;
        let rt = self.env.runtime.clone();
        let id = asg.attempt_id.to_string();
        tokio::task::spawn_blocking(move || rt.create_task(&id, &meta))
            .await
            .map_err(|e| BuildError::Invalid(format!("creating the task: {e}")))??;
        Ok(PreparedBuild {
            builder: self.clone(),
            id: asg.attempt_id.to_string(),
            asg: asg.clone(),
            spec,
            base,
            base_image,
            base_time,
            started,
        })
    }

    /// [`Builder::prepare`] then [`PreparedBuild::run`]: the build's exit code.
    pub async fn build(&self, asg: &Assignment, stop: StopSignal) -> Result<i32, BuildError> {
        Ok(self.prepare(asg).await?.run(stop).await)
    }
}

fn validate(spec: &BuildSpec) -> Result<(), String> {
    if spec.network != "none" && spec.network != "bridge" {
        return Err(format!(
            "network `{}`: a build has `none` or `bridge`",
            spec.network
        ));
    }
    if spec.cached.len() > spec.steps.len() {
        return Err(format!(
            "{} cached layers for {} steps",
            spec.cached.len(),
            spec.steps.len()
        ));
    }
    for (i, (c, s)) in spec.cached.iter().zip(&spec.steps).enumerate() {
        if c.key != step_key(s) {
            return Err(format!(
                "cached layer {} is for key {}, but step {} has key {}",
                i + 1,
                c.key,
                i + 1,
                step_key(s)
            ));
        }
        crate::image::check_digest(&c.digest).map_err(|e| e.to_string())?;
        crate::image::check_digest(&c.diff_id).map_err(|e| e.to_string())?;
    }
    for (i, s) in spec.steps.iter().enumerate() {
        match s {
            BuildStep::Files { files, .. } => {
                for f in files {
                    Rel::container(&f.target).map_err(|e| format!("step {}: {e}", i + 1))?;
                    if f.mode > 0o7777 {
                        return Err(format!(
                            "step {}: mode {:o} of {} is not a permission mode",
                            i + 1,
                            f.mode,
                            f.target
                        ));
                    }
                }
            }
            BuildStep::Run { command, .. } => {
                if command.trim().is_empty() {
                    return Err(format!("step {}: an empty command", i + 1));
                }
            }
        }
    }
    // A name the registry will take, parsed back exactly as given.
    let text = format!("{}/{}:{}", spec.registry, spec.repository, spec.tag);
    match text.parse::<oci_client::Reference>() {
        Ok(r) if r.registry() == spec.registry && r.repository() == spec.repository => Ok(()),
        _ => Err(format!("`{text}` is not a valid push target")),
    }
}

fn step_key(s: &BuildStep) -> &str {
    match s {
        BuildStep::Files { key, .. } | BuildStep::Run { key, .. } => key,
    }
}

/// A build whose base is ready and whose task is recorded: [`PreparedBuild::run`] it.
pub struct PreparedBuild {
    builder: Builder,
    id: String,
    asg: Assignment,
    spec: BuildSpec,
    base: PreparedImage,
    base_image: registry::BaseImage,
    base_time: Duration,
    started: Instant,
}

/// How a build ended, for its log and exit code.
struct Failure {
    code: i32,
    message: String,
}

impl Failure {
    fn new(message: impl Into<String>) -> Self {
        Failure {
            code: EXIT_FAILED,
            message: message.into(),
        }
    }
}

/// The build's log: the task's stdout (progress, RUN output) and stderr.
struct BuildLog {
    out: Mutex<Option<fs::File>>,
    err: Mutex<Option<fs::File>>,
    paths: (PathBuf, PathBuf),
}

impl BuildLog {
    fn open(paths: (PathBuf, PathBuf)) -> Self {
        let open = |p: &Path| fs::OpenOptions::new().append(true).open(p).ok();
        BuildLog {
            out: Mutex::new(open(&paths.0)),
            err: Mutex::new(open(&paths.1)),
            paths,
        }
    }

    fn write(f: &Mutex<Option<fs::File>>, line: &str) {
        let mut g = crate::lock(f);
        if let Some(f) = g.as_mut() {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }

    fn line(&self, line: &str) {
        Self::write(&self.out, line);
    }

    fn error(&self, line: &str) {
        Self::write(&self.err, line);
    }
}

/// Seconds, for the log.
fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// A size for people: `12.3 MB`.
pub fn human_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn describe(step: &BuildStep) -> String {
    match step {
        BuildStep::Run { command, .. } => {
            let one_line = command.split_whitespace().collect::<Vec<_>>().join(" ");
            let mut s: String = one_line.chars().take(200).collect();
            if s.len() < one_line.len() {
                s.truncate(s.trim_end().len());
                s.push_str(" ...");
            }
            format!("RUN {s}")
        }
        BuildStep::Files { files, .. } => {
            let names: Vec<&str> = files.iter().map(|f| f.target.as_str()).collect();
            format!("FILES {}", names.join(" "))
        }
    }
}

/// A layer of the built image beyond the base's.
struct Added {
    descriptor: Descriptor,
    diff_id: String,
    created_by: String,
    key: String,
    /// Where its blob is, when this build made it.
    blob: Option<PathBuf>,
}

/// Everything that must be undone at the end, whatever happened.
struct Work {
    dir: PathBuf,
    attempt: String,
}

impl Work {
    fn step_id(&self, n: usize) -> String {
        format!("{}-step{n}", self.attempt)
    }
}

/// What one RUN step needs.
struct StepCtx {
    index: usize,
    total: usize,
    lowers: Vec<PathBuf>,
    userns: Option<IdMap>,
    netns: Option<PathBuf>,
    deadline: Instant,
    timeout_secs: u64,
}

impl PreparedBuild {
    /// Runs the build to its end and records its exit code (the task's `exit.json`), after
    /// cleaning up. Returns the exit code.
    pub async fn run(self, stop: StopSignal) -> i32 {
        let env = self.builder.env.clone();
        let id = self.id.clone();
        let work = Work {
            dir: env.runtime.container_dir(&id).join("build"),
            attempt: id.clone(),
        };
        let log = Arc::new(BuildLog::open(env.runtime.log_paths(&id)));
        let started = self.started;
        let (l2, s2) = (log.clone(), stop.clone());
        // Its own task, so that even a panic ends in a cleanup and an exit code.
        let handle = tokio::spawn(async move { self.execute(&l2, &s2).await });
        let result = handle
            .await
            .unwrap_or_else(|e| Err(Failure::new(format!("the build crashed: {e}"))));
        let cleanup_started = Instant::now();
        let (e2, w2) = (env.clone(), work);
        let cleaned = tokio::task::spawn_blocking(move || cleanup(&e2, &w2))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        if let Err(e) = &cleaned {
            log.error(&format!("cleaning up: {e}"));
            tracing::warn!(attempt = %id, "cleaning up a build: {e}");
        }
        log.line(&format!("cleanup: {}", secs(cleanup_started.elapsed())));
        let code = match result {
            Ok(summary) => {
                log.line(&format!(
                    "build finished in {}: {summary}",
                    secs(started.elapsed())
                ));
                0
            }
            Err(f) => {
                log.error(&f.message);
                log.line(&format!("build failed after {}", secs(started.elapsed())));
                if f.code == 0 {
                    EXIT_FAILED
                } else {
                    f.code
                }
            }
        };
        let rt = env.runtime.clone();
        let id2 = id.clone();
        let finished = tokio::task::spawn_blocking(move || rt.finish_task(&id2, code)).await;
        if !matches!(finished, Ok(Ok(()))) {
            tracing::warn!(attempt = %id, "could not record the build's end: {finished:?}");
        }
        code
    }

    async fn execute(&self, log: &BuildLog, stop: &StopSignal) -> Result<String, Failure> {
        let env = &self.builder.env;
        let spec = &self.spec;
        let total = spec.steps.len();
        let deadline = self.started + Duration::from_secs(spec.timeout_secs.max(1));
        let work = Work {
            dir: env.runtime.container_dir(&self.id).join("build"),
            attempt: self.id.clone(),
        };
        for d in ["lower", "layers", "blobs", "files"] {
            let p = work.dir.join(d);
            fs::create_dir_all(&p)
                .map_err(|e| Failure::new(format!("creating {}: {e}", p.display())))?;
        }
        log.line(&format!(
            "building {}/{}:{} from {} ({}, {} layers): base ready in {}",
            spec.registry,
            spec.repository,
            spec.tag,
            spec.base.uri,
            self.base.manifest_digest,
            self.base.layers.len(),
            secs(self.base_time)
        ));

        // A user namespace when a step runs a command (FILES steps need none).
        let runs = spec.steps[spec.cached.len()..]
            .iter()
            .any(|s| matches!(s, BuildStep::Run { .. }));
        let userns = if runs {
            let b = self.builder.clone();
            match tokio::task::spawn_blocking(move || b.userns()).await {
                Ok(Ok(map)) => {
                    log.line(&format!(
                        "steps run in a user namespace: root is host uid {}",
                        map.host
                    ));
                    Some(map)
                }
                Ok(Err(why)) => {
                    log.line(&format!(
                        "steps run without a user namespace ({why}): root in a step is root on the node, with a reduced capability set"
                    ));
                    None
                }
                Err(e) => return Err(Failure::new(format!("probing user namespaces: {e}"))),
            }
        } else {
            None
        };
        let ns = match userns {
            Some(map) => Some(
                tokio::task::spawn_blocking(move || userns::UserNs::new(map))
                    .await
                    .map_err(|e| Failure::new(e.to_string()))?
                    .map_err(|e| Failure::new(format!("making a user namespace: {e}")))?,
            ),
            None => None,
        };
        let ns = ns.map(Arc::new);
        let lower_for = |n: usize, dir: PathBuf| {
            let ns = ns.clone();
            let target = work.dir.join("lower").join(n.to_string());
            async move {
                match ns {
                    None => Ok(dir),
                    Some(ns) => tokio::task::spawn_blocking(move || {
                        fs::create_dir_all(&target)?;
                        ns.idmapped_mount(&dir, &target)?;
                        Ok::<_, std::io::Error>(target)
                    })
                    .await
                    .map_err(std::io::Error::other)
                    .and_then(|r| r),
                }
            }
        };
        let mut lowers = Vec::new();
        for l in &self.base.layers {
            let n = lowers.len();
            let p = lower_for(n, l.clone())
                .await
                .map_err(|e| Failure::new(format!("mapping layer {}: {e}", l.display())))?;
            lowers.push(p);
        }
        if lowers.is_empty() {
            // An image without layers: overlayfs needs one lower directory.
            let empty = work.dir.join("lower/empty");
            fs::create_dir_all(&empty)
                .map_err(|e| Failure::new(format!("creating {}: {e}", empty.display())))?;
            lowers.push(empty);
        }

        let target = registry::Target::new(
            &spec.registry,
            &spec.repository,
            &spec.tag,
            env.token.as_deref(),
        )
        .await
        .map_err(Failure::new)?;

        // Cached steps: their layers, not their commands.
        let mut added: Vec<Added> = Vec::new();
        let cache_started = Instant::now();
        for (i, c) in spec.cached.iter().enumerate() {
            let t = Instant::now();
            let dir = guarded(
                self.cached_layer(&target, c),
                stop,
                deadline,
                spec.timeout_secs,
            )
            .await?
            .map_err(|e| Failure::new(format!("step {}/{total}: cached layer: {e}", i + 1)))?;
            let n = lowers.len();
            let p = lower_for(n, dir)
                .await
                .map_err(|e| Failure::new(format!("mapping cached layer {}: {e}", c.digest)))?;
            lowers.push(p);
            log.line(&format!(
                "step {}/{total}: {} (cached: {} {}, ready in {})",
                i + 1,
                describe(&spec.steps[i]),
                c.digest,
                human_size(c.size),
                secs(t.elapsed())
            ));
            added.push(Added {
                descriptor: Descriptor {
                    media_type: c.media_type.clone(),
                    digest: c.digest.clone(),
                    size: c.size,
                    annotations: BTreeMap::from([(BUILD_KEY_ANNOTATION.to_owned(), c.key.clone())]),
                },
                diff_id: c.diff_id.clone(),
                created_by: created_by(&spec.steps[i]),
                key: c.key.clone(),
                blob: None,
            });
        }
        let cache_time = cache_started.elapsed();

        // The network, for every step at once.
        let netns = if spec.network == "bridge" && runs {
            Some(self.attach_network(&work).await?)
        } else {
            None
        };

        let steps_started = Instant::now();
        let mut run_time = Duration::ZERO;
        let mut layer_time = Duration::ZERO;
        for i in spec.cached.len()..total {
            let step = &spec.steps[i];
            if stop.requested().is_some() {
                return Err(Failure {
                    code: EXIT_STOPPED,
                    message: format!("stopped before step {}/{total}", i + 1),
                });
            }
            if Instant::now() >= deadline {
                return Err(timed_out(spec.timeout_secs, i + 1, total));
            }
            log.line(&format!("step {}/{total}: {}", i + 1, describe(step)));
            let t = Instant::now();
            let upper = work.dir.join("layers").join((i + 1).to_string());
            match step {
                BuildStep::Files { files, .. } => {
                    let mut decoded = Vec::new();
                    for f in files {
                        let content = base64::engine::general_purpose::STANDARD
                            .decode(&f.content)
                            .map_err(|e| {
                                Failure::new(format!(
                                    "step {}/{total}: content of {} is not base64: {e}",
                                    i + 1,
                                    f.target
                                ))
                            })?;
                        decoded.push((f.target.clone(), content, f.mode));
                    }
                    let (dir, lw, up) = (work.dir.join("files"), lowers.clone(), upper.clone());
                    tokio::task::spawn_blocking(move || {
                        files_step(&dir, i + 1, &lw, userns, &decoded, &up)
                    })
                    .await
                    .map_err(|e| Failure::new(e.to_string()))?
                    .map_err(|e| Failure::new(format!("step {}/{total} failed: {e}", i + 1)))?;
                }
                BuildStep::Run {
                    command,
                    env: step_env,
                    workdir,
                    ..
                } => {
                    let mut all_env = spec.env.clone();
                    all_env.extend(step_env.iter().cloned());
                    let argv = vec!["/bin/sh".to_owned(), "-c".to_owned(), command.clone()];
                    let process = runtime::merge_image_config(
                        &self.base.config,
                        &argv,
                        &all_env,
                        Some(workdir.as_deref().unwrap_or("/")),
                    )
                    .map_err(|e| Failure::new(format!("step {}/{total}: {e}", i + 1)))?;
                    let ctx = StepCtx {
                        index: i + 1,
                        total,
                        lowers: lowers.clone(),
                        userns,
                        netns: netns.clone(),
                        deadline,
                        timeout_secs: spec.timeout_secs,
                    };
                    let container = self.step_container(&work, &ctx, process);
                    let (b, l2, up) = (self.builder.clone(), log.paths.clone(), upper.clone());
                    let stop2 = stop.clone();
                    tokio::task::spawn_blocking(move || {
                        run_step(&b.env, container, &ctx, &stop2, l2, &up)
                    })
                    .await
                    .map_err(|e| Failure::new(e.to_string()))??;
                }
            }
            let ran = t.elapsed();
            run_time += ran;
            let t = Instant::now();
            let blob = work.dir.join("blobs").join(format!("{}.tar.gz", i + 1));
            let (up, bl) = (upper.clone(), blob.clone());
            let made = tokio::task::spawn_blocking(move || layer::write_layer(&up, &bl, userns))
                .await
                .map_err(|e| Failure::new(e.to_string()))?
                .map_err(|e| {
                    Failure::new(format!(
                        "step {}/{total}: making its layer from {}: {e}",
                        i + 1,
                        upper.display()
                    ))
                })?;
            let conv = t.elapsed();
            layer_time += conv;
            log.line(&format!(
                "step {}/{total}: done in {} (layer {} {}, {} uncompressed, made in {})",
                i + 1,
                secs(ran),
                made.digest,
                human_size(made.size),
                human_size(made.tar_size),
                secs(conv)
            ));
            lowers.push(upper);
            added.push(Added {
                descriptor: Descriptor {
                    media_type: layer::GZIP_MEDIA_TYPE.into(),
                    digest: made.digest,
                    size: made.size,
                    annotations: BTreeMap::from([(
                        BUILD_KEY_ANNOTATION.to_owned(),
                        step_key(step).to_owned(),
                    )]),
                },
                diff_id: made.diff_id,
                created_by: created_by(step),
                key: step_key(step).to_owned(),
                blob: Some(blob),
            });
        }
        let steps_time = steps_started.elapsed();

        // The image: configuration, manifest, push.
        let push_started = Instant::now();
        let config = image_config(&self.base_image.config, &spec.env, &added)
            .map_err(|e| Failure::new(format!("writing the image configuration: {e}")))?;
        let config_bytes = serde_json::to_vec(&config).map_err(|e| Failure::new(e.to_string()))?;
        let config_desc = Descriptor {
            media_type: registry::OCI_CONFIG.into(),
            digest: format!("sha256:{}", hex::encode(Sha256::digest(&config_bytes))),
            size: config_bytes.len() as u64,
            annotations: BTreeMap::new(),
        };
        let mut layers: Vec<Descriptor> = self.base_image.layers.clone();
        layers.extend(added.iter().map(|a| a.descriptor.clone()));
        let manifest = manifest(&config_desc, &layers);
        let manifest_bytes =
            serde_json::to_vec(&manifest).map_err(|e| Failure::new(e.to_string()))?;
        let manifest_digest = format!("sha256:{}", hex::encode(Sha256::digest(&manifest_bytes)));
        let pushed = guarded(
            self.push(
                &target,
                log,
                &added,
                config_bytes,
                &config_desc,
                manifest_bytes,
            ),
            stop,
            deadline,
            spec.timeout_secs,
        )
        .await?
        .map_err(Failure::new)?;
        let push_time = push_started.elapsed();
        log.line(&format!(
            "pushed {}@{manifest_digest} ({} layers, {pushed} uploaded) in {}",
            target.name(),
            layers.len(),
            secs(push_time)
        ));
        // The new blobs go to the node's cache: a job on this node pulls the image without
        // downloading them again.
        let images = env.images.clone();
        let blobs: Vec<(PathBuf, String)> = added
            .iter()
            .filter_map(|a| a.blob.clone().map(|b| (b, a.descriptor.digest.clone())))
            .collect();
        let _ = tokio::task::spawn_blocking(move || keep_blobs(&images, &blobs)).await;
        Ok(format!(
            "base {}, cached layers {}, steps {} (running {}, making layers {}), push {}",
            secs(self.base_time),
            secs(cache_time),
            secs(steps_time),
            secs(run_time),
            secs(layer_time),
            secs(push_time)
        ))
    }

    /// A cached step's layer, unpacked in the node's image store (fetched when missing).
    async fn cached_layer(
        &self,
        target: &registry::Target,
        c: &CachedLayer,
    ) -> Result<PathBuf, String> {
        let images = &self.builder.env.images;
        let dest = images.layer_path(&c.digest).map_err(|e| e.to_string())?;
        if dest.is_dir() {
            return Ok(dest);
        }
        let hex = crate::image::check_digest(&c.digest)
            .map_err(|e| e.to_string())?
            .to_owned();
        // The image store's own lock for this layer (a file lock), so a pull of the same
        // layer by a job never races this.
        let lock_path = images.root().join("locks").join(format!("layer-{hex}"));
        let _lock = tokio::task::spawn_blocking(move || lock_file(&lock_path))
            .await
            .map_err(|e| e.to_string())??;
        if dest.is_dir() {
            return Ok(dest);
        }
        let blob = images.root().join("blobs/sha256").join(&hex);
        let tmp_name = |what: &str| {
            images.root().join("tmp").join(format!(
                "{}.build-{what}-{}",
                std::process::id(),
                uuid::Uuid::new_v4()
            ))
        };
        if !blob.is_file() {
            // Removed however this ends, a stop or the deadline included (they drop this
            // future mid-download).
            let tmp = Scratch(tmp_name("blob"));
            target.fetch_blob(&c.digest, &tmp.0).await?;
            fs::rename(&tmp.0, &blob).map_err(|e| format!("storing {}: {e}", blob.display()))?;
        }
        let tmp = tmp_name("layer");
        let (b, t, d, digest) = (blob.clone(), tmp.clone(), dest.clone(), c.digest.clone());
        tokio::task::spawn_blocking(move || -> Result<(), String> {
            fs::create_dir(&t).map_err(|e| format!("creating {}: {e}", t.display()))?;
            let done = crate::image::unpack::unpack_layer(&b, &t)
                .map_err(|e| format!("unpacking {digest}: {e}"))
                .and_then(|()| {
                    fs::rename(&t, &d).map_err(|e| format!("storing {}: {e}", d.display()))
                });
            if done.is_err() {
                let _ = fs::remove_dir_all(&t);
            }
            done
        })
        .await
        .map_err(|e| e.to_string())??;
        Ok(dest)
    }

    async fn attach_network(&self, work: &Work) -> Result<PathBuf, Failure> {
        let Some(net) = self.builder.env.net.clone() else {
            return Err(Failure::new(
                "this build asks for the bridge network, and this agent has no networking",
            ));
        };
        let wait_until = Instant::now() + SUBNET_WAIT;
        while net.subnet().is_none() && Instant::now() < wait_until {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let id = work.attempt.clone();
        // The administrator allowed builds a NAT'd network for what they fetch: the outside
        // world, and like any step, its own workflow's containers, but no one else's.
        let policy = crate::net::Policy {
            workflow: self.asg.workflow_id.to_string(),
            egress: true,
            peers: vec![],
            node_services: vec![],
        };
        let att = tokio::task::spawn_blocking(move || net.attach(&id, &policy, None))
            .await
            .map_err(|e| Failure::new(e.to_string()))?
            .map_err(|e| Failure::new(format!("the build's network: {e}")))?;
        Ok(att.netns)
    }

    fn step_container(
        &self,
        work: &Work,
        ctx: &StepCtx,
        process: runtime::MergedProcess,
    ) -> ContainerSpec {
        let r = &self.asg.resources;
        let mut files = Vec::new();
        if ctx.netns.is_some() {
            let resolv = crate::net::resolv_conf();
            if !resolv.is_empty() {
                files.push(("/etc/resolv.conf".to_owned(), resolv));
            }
        }
        ContainerSpec {
            id: work.step_id(ctx.index),
            layers: ctx.lowers.clone(),
            args: process.args,
            env: process.env,
            cwd: process.cwd,
            // Steps run as root, whatever the image's user.
            user: None,
            mounts: Vec::new(),
            files,
            cpus: if r.cpus > 0.0 { r.cpus } else { DEFAULT_CPUS },
            memory_bytes: Some(r.memory_bytes.unwrap_or(DEFAULT_MEMORY)),
            pids_limit: Some(runtime::DEFAULT_PIDS_LIMIT),
            hostname: "build".into(),
            host_network: false,
        }
    }

    /// Pushes what the target repository lacks, then the manifest. Returns how much was
    /// uploaded. Cached steps' layers are the target repository's own (the server takes them
    /// from its earlier images), so they are linked there already.
    async fn push(
        &self,
        target: &registry::Target,
        log: &BuildLog,
        added: &[Added],
        config: Vec<u8>,
        config_desc: &Descriptor,
        manifest: Vec<u8>,
    ) -> Result<String, String> {
        let images = &self.builder.env.images;
        let mut uploaded = 0u64;
        // A base from the same registry: its layers can be linked rather than uploaded.
        let base_repo = match crate::image::parse_source(&self.spec.base.uri) {
            Ok(crate::image::Source::Registry(r)) if r.registry() == self.spec.registry => {
                Some(r.repository().to_owned())
            }
            _ => None,
        };
        let base_digests: Vec<&str> = self
            .base_image
            .layers
            .iter()
            .map(|d| d.digest.as_str())
            .collect();
        let mut blobs: Vec<(&Descriptor, PathBuf)> = Vec::new();
        for d in &self.base_image.layers {
            let hex = crate::image::check_digest(&d.digest).map_err(|e| e.to_string())?;
            blobs.push((d, images.root().join("blobs/sha256").join(hex)));
        }
        for a in added {
            let path = match &a.blob {
                Some(p) => p.clone(),
                None => {
                    let hex = crate::image::check_digest(&a.descriptor.digest)
                        .map_err(|e| e.to_string())?;
                    images.root().join("blobs/sha256").join(hex)
                }
            };
            blobs.push((&a.descriptor, path));
        }
        for (d, path) in blobs {
            if target.has_blob(&d.digest).await? {
                continue;
            }
            if let Some(repo) = base_repo.as_deref() {
                if base_digests.contains(&d.digest.as_str())
                    && target.mount_blob(repo, &d.digest).await
                {
                    log.line(&format!("linked layer {} from {repo}", d.digest));
                    continue;
                }
            }
            log.line(&format!(
                "pushing layer {} ({})",
                d.digest,
                human_size(d.size)
            ));
            if !path.is_file() {
                return Err(format!(
                    "layer {} is not in the registry and not on this node",
                    d.digest
                ));
            }
            target.push_file(&path, &d.digest, d.size).await?;
            uploaded += d.size;
        }
        if !target.has_blob(&config_desc.digest).await? {
            uploaded += config_desc.size;
            target.push_bytes(config, &config_desc.digest).await?;
        }
        uploaded += manifest.len() as u64;
        target.push_manifest(manifest).await?;
        Ok(human_size(uploaded))
    }
}

fn timed_out(timeout_secs: u64, step: usize, total: usize) -> Failure {
    Failure {
        code: EXIT_TIMEOUT,
        message: format!(
            "the build ran past its timeout of {timeout_secs} s (at step {step}/{total})"
        ),
    }
}

/// Runs `fut` unless the build is stopped or runs past its deadline first.
async fn guarded<T>(
    fut: impl std::future::Future<Output = T>,
    stop: &StopSignal,
    deadline: Instant,
    timeout_secs: u64,
) -> Result<T, Failure> {
    tokio::select! {
        r = fut => Ok(r),
        _ = stop.wait() => Err(Failure { code: EXIT_STOPPED, message: "stopped".into() }),
        _ = tokio::time::sleep_until(deadline.into()) => Err(Failure {
            code: EXIT_TIMEOUT,
            message: format!("the build ran past its timeout of {timeout_secs} s"),
        }),
    }
}

/// Runs one RUN step's container to its end and takes its upper directory to `upper`.
fn run_step(
    env: &BuildEnv,
    spec: ContainerSpec,
    ctx: &StepCtx,
    stop: &StopSignal,
    output: (PathBuf, PathBuf),
    upper: &Path,
) -> Result<(), Failure> {
    let rt = &env.runtime;
    let (i, total) = (ctx.index, ctx.total);
    // What runc will make in the upper directory for its mounts if the image lacks them.
    let mut targets: Vec<PathBuf> = ["proc", "dev", "sys", "tmp"].map(PathBuf::from).to_vec();
    if spec.files.iter().any(|(t, _)| t == "/etc/resolv.conf") {
        targets.push("etc".into());
        targets.push("etc/resolv.conf".into());
    }
    let existed: Vec<(PathBuf, bool)> = targets
        .into_iter()
        .map(|t| {
            let e = layer::exists_in_layers(&ctx.lowers, &t);
            (t, e)
        })
        .collect();
    let id = spec.id.clone();
    let opts = StartOptions {
        netns: ctx.netns.clone(),
    };
    let build = BuildOptions {
        userns: ctx.userns,
        output: Some(output),
    };
    let meta = json!({ "build_step": i, "attempt": id.rsplit_once("-step").map(|(a, _)| a) });
    // A container left by an earlier try of this step (a crash) goes first.
    if rt.container_dir(&id).exists() {
        let _ = rt.remove(&id);
    }
    rt.start_build_step(&spec, &meta, &opts, &build)
        .map_err(|e| Failure::new(format!("step {i}/{total}: could not start: {e}")))?;
    let ended = wait_step(rt, &id, ctx, stop);
    let result = match ended {
        Ok(0) => rt
            .take_upper(&id, upper)
            .map_err(|e| Failure::new(format!("step {i}/{total}: taking its changes: {e}"))),
        Ok(code) => Err(Failure {
            code,
            message: if code == 137 {
                format!(
                    "step {i}/{total} failed: exit code 137 (killed: out of memory? its limit is {})",
                    spec.memory_bytes.map_or("none".into(), human_size)
                )
            } else {
                format!("step {i}/{total} failed: exit code {code}")
            },
        }),
        Err(f) => Err(f),
    };
    if let Err(e) = rt.remove(&id) {
        tracing::warn!(container = %id, "removing a build step: {e}");
    }
    result?;
    layer::prune_mount_points(upper, &existed);
    Ok(())
}

/// Waits for a step's container to exit; stops it at the deadline or when asked.
fn wait_step(rt: &Runtime, id: &str, ctx: &StepCtx, stop: &StopSignal) -> Result<i32, Failure> {
    loop {
        match rt.status(id) {
            ContainerState::Exited { exit_code, .. } => return Ok(exit_code),
            ContainerState::Unknown => {
                return Err(Failure::new(format!(
                    "step {}/{}: its container vanished",
                    ctx.index, ctx.total
                )))
            }
            ContainerState::Running => {}
        }
        if let Some(grace) = stop.requested() {
            let end = rt.stop(id, grace);
            let code = match end {
                Ok(ContainerState::Exited { exit_code, .. }) => exit_code,
                _ => EXIT_STOPPED,
            };
            return Err(Failure {
                code,
                message: format!("stopped at step {}/{}", ctx.index, ctx.total),
            });
        }
        if Instant::now() >= ctx.deadline {
            let _ = rt.stop(id, TIMEOUT_GRACE);
            return Err(Failure {
                code: EXIT_TIMEOUT,
                message: format!(
                    "step {}/{} ran past the build's timeout of {} s",
                    ctx.index, ctx.total, ctx.timeout_secs
                ),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// Writes a FILES step's files through an overlay of `lowers`; its upper directory ends at
/// `upper`.
fn files_step(
    scratch: &Path,
    n: usize,
    lowers: &[PathBuf],
    userns: Option<IdMap>,
    files: &[(String, Vec<u8>, u32)],
    upper: &Path,
) -> Result<(), String> {
    let dir = scratch.join(n.to_string());
    let (up, wk, root) = (dir.join("upper"), dir.join("work"), dir.join("rootfs"));
    for d in [&up, &wk, &root] {
        fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
    }
    // Root of the image owns what it gets; in a user namespace, that is the mapped root.
    let owner = userns.map_or(0, |m| m.host);
    std::os::unix::fs::lchown(&up, Some(owner), Some(owner))
        .map_err(|e| format!("chown {}: {e}", up.display()))?;
    if lowers.is_empty() {
        return Err("no layers to write into".into());
    }
    sys::mount_overlay(lowers, &up, &wk, &root, sys::PLAIN_UPPER)
        .map_err(|e| format!("mounting the image at {}: {e}", root.display()))?;
    // The image's own symlinks lead where they would in a container, never out of it.
    let written = Dir::open_root(&root)
        .map_err(|e| format!("opening {}: {e}", root.display()))
        .and_then(|image| {
            files.iter().try_for_each(|(target, content, mode)| {
                let rel = Rel::container(target)?;
                let owner = Owner {
                    uid: owner,
                    gid: owner,
                };
                image
                    .write_file(&rel, content, *mode, owner, Resolve::InRoot)
                    .map_err(|e| format!("writing {target}: {e}"))
            })
        });
    let unmounted = sys::unmount_all(&root).map_err(|e| format!("unmounting: {e}"));
    written?;
    unmounted?;
    fs::rename(&up, upper).map_err(|e| format!("moving {}: {e}", up.display()))?;
    let _ = fs::remove_dir_all(&dir);
    Ok(())
}

/// Removes what a build made: its step containers, its network, its mounts and scratch
/// directories. Its task directory (log, assignment) stays for the agent.
fn cleanup(env: &BuildEnv, work: &Work) -> Result<(), String> {
    let rt = &env.runtime;
    let mut first: Option<String> = None;
    let prefix = format!("{}-step", work.attempt);
    for id in rt.list().into_iter().filter(|id| id.starts_with(&prefix)) {
        if let Err(e) = rt.remove(&id) {
            first.get_or_insert(format!("removing {id}: {e}"));
        }
    }
    if let Some(net) = &env.net {
        if net.attachment(&work.attempt).is_some() {
            if let Err(e) = net.detach(&work.attempt) {
                first.get_or_insert(format!("removing the build's network: {e}"));
            }
        }
    }
    let mut mounts = sys::mounts_under(&work.dir);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for m in &mounts {
        if let Err(e) = sys::unmount_all(m) {
            first.get_or_insert(format!("unmounting {}: {e}", m.display()));
        }
    }
    // Never recurse into a mount that is left: it could be an image layer.
    if let Err(e) = sys::remove_tree(&work.dir) {
        first.get_or_insert(format!("removing {}: {e}", work.dir.display()));
    }
    match first {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Moves the build's new blobs into the node's image store (where a pull looks first).
fn keep_blobs(images: &ImageStore, blobs: &[(PathBuf, String)]) {
    for (path, digest) in blobs {
        let Ok(hex) = crate::image::check_digest(digest) else {
            continue;
        };
        let dest = images.root().join("blobs/sha256").join(hex);
        if !dest.exists() {
            let _ = fs::rename(path, &dest);
        }
    }
}

/// A scratch file removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn lock_file(path: &Path) -> Result<fs::File, String> {
    use std::os::fd::AsRawFd;
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    loop {
        // SAFETY: the fd is owned by `f` and open.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(f);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("locking {}: {e}", path.display()));
        }
    }
}

fn created_by(step: &BuildStep) -> String {
    match step {
        BuildStep::Run { command, .. } => format!("RUN /bin/sh -c {command}"),
        BuildStep::Files { files, .. } => {
            let names: Vec<&str> = files.iter().map(|f| f.target.as_str()).collect();
            format!("FILES {}", names.join(" "))
        }
    }
}

/// `base` with `extra` over it, per variable: same name replaced in place, new ones appended.
fn merge_env(base: &[String], extra: &[String]) -> Vec<String> {
    let key = |kv: &str| kv.split_once('=').map_or(kv, |(k, _)| k).to_owned();
    let mut out: Vec<String> = base.to_vec();
    for kv in extra {
        let k = key(kv);
        match out.iter_mut().find(|e| key(e) == k) {
            Some(slot) => *slot = kv.clone(),
            None => out.push(kv.clone()),
        }
    }
    out
}

/// The built image's configuration: the base's, as JSON (fields this code does not know are
/// kept), with `env` in `config.Env`, the new layers' diff_ids, and a history entry for each
/// (every entry gets a `created`: some tools need one).
fn image_config(base: &Value, env: &[String], added: &[Added]) -> Result<Value, String> {
    let mut cfg = base.clone();
    let obj = cfg
        .as_object_mut()
        .ok_or("the base configuration is not an object")?;
    obj.insert("created".into(), json!(layer::EPOCH_RFC3339));
    if !env.is_empty() {
        let config = obj.entry("config").or_insert_with(|| json!({}));
        if config.is_null() {
            *config = json!({});
        }
        let config = config
            .as_object_mut()
            .ok_or("the base's `config` is not an object")?;
        let current: Vec<String> = config
            .get("Env")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        config.insert("Env".into(), json!(merge_env(&current, env)));
    }
    let rootfs = obj
        .entry("rootfs")
        .or_insert_with(|| json!({ "type": "layers", "diff_ids": [] }));
    let rootfs = rootfs
        .as_object_mut()
        .ok_or("the base's `rootfs` is not an object")?;
    rootfs.insert("type".into(), json!("layers"));
    let mut diff_ids: Vec<Value> = rootfs
        .get("diff_ids")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    diff_ids.extend(added.iter().map(|a| json!(a.diff_id)));
    rootfs.insert("diff_ids".into(), Value::Array(diff_ids));
    let mut history: Vec<Value> = obj
        .get("history")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for h in history.iter_mut() {
        if let Some(h) = h.as_object_mut() {
            h.entry("created")
                .or_insert_with(|| json!(layer::EPOCH_RFC3339));
        }
    }
    history.extend(added.iter().map(|a| {
        json!({
            "created": layer::EPOCH_RFC3339,
            "created_by": a.created_by,
            "comment": format!("gantry build step {}", a.key),
        })
    }));
    obj.insert("history".into(), Value::Array(history));
    Ok(cfg)
}

fn manifest(config: &Descriptor, layers: &[Descriptor]) -> Value {
    json!({
        "schemaVersion": 2,
        "mediaType": registry::OCI_MANIFEST,
        "config": config,
        "layers": layers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn added(diff_id: &str, key: &str) -> Added {
        Added {
            descriptor: Descriptor {
                media_type: layer::GZIP_MEDIA_TYPE.into(),
                digest: format!("sha256:{}", "a".repeat(64)),
                size: 10,
                annotations: BTreeMap::from([(BUILD_KEY_ANNOTATION.into(), key.into())]),
            },
            diff_id: diff_id.into(),
            created_by: "RUN /bin/sh -c true".into(),
            key: key.into(),
            blob: None,
        }
    }

    #[test]
    fn config_keeps_unknown_fields_and_adds_layers() {
        let base = json!({
            "architecture": "amd64", "os": "linux",
            "config": {"Env": ["PATH=/bin", "A=1"], "Cmd": ["/bin/sh"], "Labels": {"x": "y"}},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:base"]},
            "history": [{"created_by": "base"}],
            "x-vendor": {"kept": true}
        });
        let cfg = image_config(
            &base,
            &["A=2".into(), "B=3".into()],
            &[added("sha256:one", "k1"), added("sha256:two", "k2")],
        )
        .unwrap();
        assert_eq!(cfg["x-vendor"]["kept"], true);
        assert_eq!(cfg["config"]["Labels"]["x"], "y");
        assert_eq!(cfg["config"]["Env"], json!(["PATH=/bin", "A=2", "B=3"]));
        assert_eq!(
            cfg["rootfs"]["diff_ids"],
            json!(["sha256:base", "sha256:one", "sha256:two"])
        );
        let h = cfg["history"].as_array().unwrap();
        assert_eq!(h.len(), 3);
        assert!(h.iter().all(|e| e["created"].is_string()));
        assert_eq!(h[2]["comment"], "gantry build step k2");
        // A base without config or history.
        let cfg = image_config(&json!({"os": "linux"}), &["A=1".into()], &[]).unwrap();
        assert_eq!(cfg["config"]["Env"], json!(["A=1"]));
        assert_eq!(cfg["rootfs"]["diff_ids"], json!([]));
    }

    #[test]
    fn manifests_annotate_layers_with_their_keys() {
        let a = added("sha256:one", "key-1");
        let m = manifest(&a.descriptor, std::slice::from_ref(&a.descriptor));
        assert_eq!(m["layers"][0]["annotations"][BUILD_KEY_ANNOTATION], "key-1");
        assert_eq!(m["mediaType"], registry::OCI_MANIFEST);
        assert_eq!(m["layers"][0]["mediaType"], layer::GZIP_MEDIA_TYPE);
        // The config descriptor has no annotations field at all.
        let plain = Descriptor {
            annotations: BTreeMap::new(),
            ..a.descriptor
        };
        assert!(manifest(&plain, &[])["config"].get("annotations").is_none());
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_size(999), "999 B");
        assert_eq!(human_size(12_345_678), "12.3 MB");
    }

    #[test]
    fn specs_are_checked_before_anything_runs() {
        let spec: BuildSpec = serde_json::from_value(json!({
            "registry": "127.0.0.1:5055", "repository": "user/alice/app", "tag": "k2",
            "base": {"uri": "docker://busybox"},
            "steps": [
                {"kind": "run", "key": "k1", "command": "true"},
                {"kind": "files", "key": "k2", "files": [{"target": "/a", "content": "", "mode": 420}]}
            ],
            "network": "none", "timeout_secs": 60
        }))
        .unwrap();
        assert!(validate(&spec).is_ok());
        let mut bad = spec.clone();
        bad.network = "host".into();
        assert!(validate(&bad).unwrap_err().contains("network"));
        let mut bad = spec.clone();
        bad.cached = vec![CachedLayer {
            key: "other".into(),
            digest: format!("sha256:{}", "b".repeat(64)),
            diff_id: format!("sha256:{}", "c".repeat(64)),
            size: 1,
            media_type: layer::GZIP_MEDIA_TYPE.into(),
        }];
        assert!(validate(&bad).unwrap_err().contains("key"));
        let mut bad = spec.clone();
        if let BuildStep::Files { files, .. } = &mut bad.steps[1] {
            files[0].target = "../etc/passwd".into();
        }
        assert!(validate(&bad).is_err());
        let mut bad = spec;
        bad.repository = "Upper/Case".into();
        assert!(validate(&bad).unwrap_err().contains("push target"));
    }
}
