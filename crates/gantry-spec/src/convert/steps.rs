//! Steps: what jobs and services share (image, command, environment, mounts, files,
//! resources, policy, dependencies) with `defaults` merged in, and the job-only keys
//! (task arrays, multinode, the job network).

use std::collections::{BTreeMap, BTreeSet};

use crate::diag::Pos;
use crate::model::*;
use crate::names::name_error;
use crate::yaml::{Entry, Kind, Node};

use super::prim::{child, did_you_mean, index, listing, Fields};
use super::schema::{
    CPU, DEPENDENCY, JOB, JOB_NETWORK, MEMORY, MOUNT, MULTINODE, POLICY, RESOURCE, RETRY,
    TASK_ARRAY, TIMEOUT,
};
use super::{Cx, MAX_MULTINODE_NODES, MAX_TASKS};

/// Step settings that `defaults` may fill, before the merge.
#[derive(Debug, Clone, Default)]
pub(super) struct PResource {
    pub(super) cores: Option<u32>,
    pub(super) threads: Option<bool>,
    pub(super) affinity: Option<Affinity>,
    pub(super) sockets: Option<u32>,
    pub(super) mem_size: Option<u64>,
    pub(super) by_core: Option<bool>,
    pub(super) devices: BTreeMap<String, u32>,
    pub(super) exclusive: Option<bool>,
    pub(super) annotations: BTreeMap<String, String>,
}

impl PResource {
    /// `self` filled from `base` where `self` says nothing.
    pub(super) fn over(mut self, base: &PResource) -> PResource {
        self.cores = self.cores.or(base.cores);
        self.threads = self.threads.or(base.threads);
        self.affinity = self.affinity.or(base.affinity);
        self.sockets = self.sockets.or(base.sockets);
        self.mem_size = self.mem_size.or(base.mem_size);
        self.by_core = self.by_core.or(base.by_core);
        self.exclusive = self.exclusive.or(base.exclusive);
        for (k, v) in &base.devices {
            self.devices.entry(k.clone()).or_insert(*v);
        }
        for (k, v) in &base.annotations {
            self.annotations
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
        self
    }

    pub(super) fn finish(self) -> Resource {
        Resource {
            cpu: Cpu {
                cores: self.cores.unwrap_or(1),
                threads: self.threads.unwrap_or(false),
                affinity: self.affinity,
                sockets: self.sockets,
            },
            memory: Memory {
                size: self.mem_size,
                by_core: self.by_core.unwrap_or(false),
            },
            devices: self.devices,
            exclusive: self.exclusive.unwrap_or(false),
            annotations: self.annotations,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct PPolicy {
    pub(super) timeout: Option<std::time::Duration>,
    pub(super) attempts: Option<u32>,
    pub(super) on: Option<Vec<RetryOn>>,
    pub(super) restart: Option<RestartPolicy>,
}

impl PPolicy {
    pub(super) fn over(mut self, base: &PPolicy) -> PPolicy {
        self.timeout = self.timeout.or(base.timeout);
        self.attempts = self.attempts.or(base.attempts);
        if self.on.is_none() {
            self.on.clone_from(&base.on);
        }
        self.restart = self.restart.or(base.restart);
        self
    }

    pub(super) fn finish(self) -> Policy {
        Policy {
            timeout_execute: self.timeout,
            retry: Retry {
                attempts: self.attempts.unwrap_or(1),
                on: self.on.unwrap_or_else(|| vec![RetryOn::Failure]),
            },
            restart: self.restart,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct PDefaults {
    pub(super) env: Vec<EnvVar>,
    pub(super) mounts: BTreeMap<String, Mount>,
    pub(super) resource: PResource,
    pub(super) policy: PPolicy,
}

/// What jobs and services share, before `defaults` are merged in.
pub(super) struct Common {
    pub(super) display_name: Option<String>,
    pub(super) image: Option<ImageRef>,
    pub(super) command: Vec<String>,
    pub(super) script: Option<String>,
    pub(super) args: Vec<String>,
    pub(super) env: Vec<EnvVar>,
    pub(super) cwd: Option<String>,
    pub(super) mounts: BTreeMap<String, Mount>,
    pub(super) files: BTreeMap<String, FileSource>,
    pub(super) resource: PResource,
    pub(super) depends_on: Vec<Dependency>,
    pub(super) multinode: Option<Multinode>,
    pub(super) policy: PPolicy,
    pub(super) preemptible: Option<bool>,
}

/// Later layers win: a variable set again replaces the earlier one.
/// Each name keeps its last setting, in the order of those last settings.
pub(super) fn merge_env(layers: &[&[EnvVar]]) -> Vec<EnvVar> {
    let mut seen = BTreeSet::new();
    let mut out: Vec<EnvVar> = layers
        .iter()
        .rev()
        .flat_map(|layer| layer.iter().rev())
        .filter(|v| seen.insert(v.name.as_str()))
        .cloned()
        .collect();
    out.reverse();
    out
}

pub(super) fn merge_mounts(layers: &[&BTreeMap<String, Mount>]) -> BTreeMap<String, Mount> {
    let mut out = BTreeMap::new();
    for layer in layers {
        for (k, v) in *layer {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

impl Cx<'_> {
    /// Checks the name of a step, volume or image (the key of its entry).
    pub(super) fn entry_name(&mut self, e: &Entry, path: &str) {
        if let Some(msg) = name_error(&e.key) {
            self.err(e.key_pos, path, msg);
        }
    }

    pub(super) fn common(&mut self, name: &str, f: &Fields, is_job: bool) -> Common {
        let display_name = f.get("name").and_then(|n| self.string(n, &f.child("name")));
        let image = f
            .get("image")
            .and_then(|n| self.image_ref(n, &f.child("image"), f.key_pos("image")));
        if f.get("image").is_none() {
            let what = if is_job { "job" } else { "service" };
            let msg = format!("missing `image`; every {what} needs `image: {{uri: docker://...}}`");
            self.err(f.owner, &f.path, msg);
        }
        let command = match f.get("command") {
            Some(n) => {
                if let Kind::Scalar(_) = n.kind {
                    if !n.is_null() {
                        self.err(
                            n.pos,
                            &f.child("command"),
                            "expected a list of strings (`[\"/bin/sh\", \"-c\", \"...\"]`); \
                             for a shell script use `script`",
                        );
                    }
                    Vec::new()
                } else {
                    self.strings(n, &f.child("command"))
                }
            }
            None => Vec::new(),
        };
        let script = f
            .get("script")
            .and_then(|n| self.string(n, &f.child("script")));
        if script.is_some() && !command.is_empty() {
            self.err(
                f.key_pos("script"),
                &f.child("script"),
                "`command` and `script` are both set; use one of them",
            );
        }
        let args = f
            .get("args")
            .map(|n| self.strings(n, &f.child("args")))
            .unwrap_or_default();
        let env = f
            .get("env")
            .map(|n| self.env(n, &f.child("env")))
            .unwrap_or_default();
        let cwd = f.get("cwd").and_then(|n| {
            let s = self.string(n, &f.child("cwd"))?;
            self.abs_path(&s, n.pos, &f.child("cwd"), "working directory")
                .then_some(s)
        });
        let mounts = f
            .get("mounts")
            .map(|n| self.mounts(n, &f.child("mounts")))
            .unwrap_or_default();
        let files = f
            .get("files")
            .map(|n| self.step_files(n, &f.child("files")))
            .unwrap_or_default();
        let resource = f
            .get("resource")
            .map(|n| self.resource(n, &f.child("resource"), f.key_pos("resource")))
            .unwrap_or_default();
        let depends_on = self.dependencies(name, f);
        let multinode = f
            .get("multinode")
            .and_then(|n| self.multinode(n, &f.child("multinode"), f.key_pos("multinode")));
        let policy = f
            .get("policy")
            .map(|n| self.policy(n, &f.child("policy"), f.key_pos("policy")))
            .unwrap_or_default();
        let preemptible = f
            .get("preemptible")
            .and_then(|n| self.boolean(n, &f.child("preemptible")));
        Common {
            display_name,
            image,
            command,
            script,
            args,
            env,
            cwd,
            mounts,
            files,
            resource,
            depends_on,
            multinode,
            policy,
            preemptible,
        }
    }

    pub(super) fn job(
        &mut self,
        e: &Entry,
        path: &str,
        top: &PDefaults,
        dj: &PDefaults,
    ) -> Option<Job> {
        self.entry_name(e, path);
        let f = self.fields(&e.value, path, e.key_pos, &JOB)?;
        let c = self.common(&e.key, &f, true);
        let task_array = f
            .get("task-array")
            .and_then(|n| self.task_array(n, &f.child("task-array"), f.key_pos("task-array")));
        let network = f
            .get("network")
            .and_then(|n| self.job_network(n, &f.child("network"), f.key_pos("network")));
        if let (Some(_), Some(_)) = (f.get("multinode"), f.get("task-array")) {
            // One gang of N nodes per job: an array of gangs would be N x M containers placed
            // all-or-none, which no scheduler here (or the vendor's) offers.
            let msg = format!(
                "`multinode` and `task-array` (at {}) cannot both be set; run the members of \
                 a multinode job as one gang, or an array of single-node tasks",
                f.key_pos("task-array")
            );
            self.err(f.key_pos("multinode"), &f.child("multinode"), msg);
        }
        // A step whose image is wrong stays in the graph so that its
        // dependencies are still checked; the error keeps it from `parse`'s
        // result.
        let image = c.image.unwrap_or_else(ImageRef::invalid);
        Some(Job {
            name: e.key.clone(),
            display_name: c.display_name,
            image,
            command: c.command,
            script: c.script,
            args: c.args,
            env: merge_env(&[&top.env, &dj.env, &c.env]),
            cwd: c.cwd,
            mounts: merge_mounts(&[&top.mounts, &dj.mounts, &c.mounts]),
            files: c.files,
            resource: c
                .resource
                .over(&dj.resource.clone().over(&top.resource))
                .finish(),
            depends_on: c.depends_on,
            task_array,
            multinode: c.multinode,
            policy: c.policy.over(&dj.policy.clone().over(&top.policy)).finish(),
            network,
            preemptible: c.preemptible,
            pos: e.key_pos,
        })
    }

    pub(super) fn env(&mut self, node: &Node, path: &str) -> Vec<EnvVar> {
        let mut out: Vec<EnvVar> = Vec::new();
        if let Kind::Map(_) = node.kind {
            self.err(
                node.pos,
                path,
                "expected a list of `NAME=VALUE` strings (`- NAME=VALUE`), found a mapping",
            );
            return out;
        }
        let mut seen: BTreeMap<String, Pos> = BTreeMap::new();
        for (i, (entry, pos)) in self.string_list(node, path).into_iter().enumerate() {
            let p = index(path, i);
            let Some((name, value)) = entry.split_once('=') else {
                let msg = format!("`{entry}` is not `NAME=VALUE`");
                self.err(pos, &p, msg);
                continue;
            };
            if name.is_empty() || name.chars().any(|c| c.is_whitespace()) {
                let msg = format!("`{entry}` is not `NAME=VALUE`: `{name}` is not a variable name");
                self.err(pos, &p, msg);
                continue;
            }
            if let Some(first) = seen.get(name) {
                let msg = format!("`{name}` is set twice (first at {first}); keep one");
                self.err(pos, &p, msg);
                continue;
            }
            seen.insert(name.to_string(), pos);
            let value = if value.starts_with("secret://") {
                if value.len() == "secret://".len() {
                    let msg = format!("`{entry}`: the secret reference names no secret");
                    self.err(pos, &p, msg);
                    continue;
                }
                EnvValue::Secret(value.to_string())
            } else {
                EnvValue::Plain(value.to_string())
            };
            out.push(EnvVar {
                name: name.to_string(),
                value,
            });
        }
        out
    }

    pub(super) fn mounts(&mut self, node: &Node, path: &str) -> BTreeMap<String, Mount> {
        let mut out = BTreeMap::new();
        for e in self.map_entries(node, path) {
            let p = child(path, &e.key);
            let v1 = matches!(&e.value.kind, Kind::Map(m) if m.iter().any(|x| x.key == "location"));
            if v1 {
                self.err(
                    e.key_pos,
                    &p,
                    "v1 mount syntax: in v4 a mount is keyed by its container path, `/path: {volume: NAME}`",
                );
                continue;
            }
            let ok = self.container_target(&e.key, e.key_pos, &p, "mount path");
            // `/data: NAME` is a shorthand the catalog uses for `/data: {volume: NAME}`.
            let vol_node = match &e.value.kind {
                Kind::Scalar(_) if !e.value.is_null() => Some(&e.value),
                _ => {
                    let Some(f) = self.fields(&e.value, &p, e.key_pos, &MOUNT) else {
                        continue;
                    };
                    if f.get("volume").is_none() {
                        self.err(
                            e.key_pos,
                            &p,
                            "missing `volume`; write `/path: {volume: NAME}`",
                        );
                    }
                    f.get("volume")
                }
            };
            let Some(vn) = vol_node else { continue };
            let Some(volume) = self.string(vn, &child(&p, "volume")) else {
                continue;
            };
            if !self.names.volumes.contains(&volume) {
                let msg = format!(
                    "volume `{volume}` is not defined under `volumes`{}; volumes: {}",
                    did_you_mean(&volume, &self.names.volumes),
                    listing(&self.names.volumes)
                );
                self.err(vn.pos, &child(&p, "volume"), msg);
                continue;
            }
            if ok {
                out.insert(
                    e.key.clone(),
                    Mount {
                        volume,
                        pos: vn.pos,
                    },
                );
            }
        }
        out
    }

    pub(super) fn step_files(&mut self, node: &Node, path: &str) -> BTreeMap<String, FileSource> {
        let mut out = BTreeMap::new();
        for e in self.map_entries(node, path) {
            let p = child(path, &e.key);
            let ok = self.container_target(&e.key, e.key_pos, &p, "file destination");
            let Some(value) = self.string(&e.value, &p) else {
                continue;
            };
            let src = match value.strip_prefix("file://") {
                Some(name) => {
                    self.file_ref(name, e.value.pos, &p);
                    FileSource::File(name.to_string())
                }
                None => FileSource::Inline(value),
            };
            if ok {
                out.insert(e.key.clone(), src);
            }
        }
        out
    }

    pub(super) fn resource(&mut self, node: &Node, path: &str, owner: Pos) -> PResource {
        let mut r = PResource::default();
        let Some(f) = self.fields(node, path, owner, &RESOURCE) else {
            return r;
        };
        if let Some(n) = f.get("cpu") {
            let p = f.child("cpu");
            if let Some(cf) = self.fields(n, &p, f.key_pos("cpu"), &CPU) {
                r.cores = cf
                    .get("cores")
                    .and_then(|n| self.u32_in(n, &cf.child("cores"), 1));
                r.threads = cf
                    .get("threads")
                    .and_then(|n| self.boolean(n, &cf.child("threads")));
                r.sockets = cf
                    .get("sockets")
                    .and_then(|n| self.u32_in(n, &cf.child("sockets"), 1));
                r.affinity = cf.get("affinity").and_then(|n| {
                    self.enum_value(
                        n,
                        &cf.child("affinity"),
                        &[
                            ("CORE", Affinity::Core),
                            ("SOCKET", Affinity::Socket),
                            ("NUMA", Affinity::Numa),
                        ],
                        true,
                    )
                });
            }
        }
        if let Some(n) = f.get("memory") {
            let p = f.child("memory");
            if let Some(mf) = self.fields(n, &p, f.key_pos("memory"), &MEMORY) {
                r.mem_size = mf.get("size").and_then(|n| {
                    let v = self.size(n, &mf.child("size"))?;
                    if v == 0 {
                        self.err(n.pos, &mf.child("size"), "memory size must be more than 0");
                        return None;
                    }
                    Some(v)
                });
                r.by_core = mf
                    .get("by-core")
                    .and_then(|n| self.boolean(n, &mf.child("by-core")));
            }
        }
        if let Some(n) = f.get("devices") {
            let p = f.child("devices");
            for e in self.map_entries(n, &p) {
                if let Some(count) = self.uint(&e.value, &child(&p, &e.key), 0, u64::from(u32::MAX))
                {
                    r.devices.insert(e.key.clone(), count as u32);
                }
            }
        }
        r.exclusive = f
            .get("exclusive")
            .and_then(|n| self.boolean(n, &f.child("exclusive")));
        if let Some(n) = f.get("annotations") {
            r.annotations = self.string_map(n, &f.child("annotations"));
        }
        r
    }

    pub(super) fn policy(&mut self, node: &Node, path: &str, owner: Pos) -> PPolicy {
        let mut p = PPolicy::default();
        let Some(f) = self.fields(node, path, owner, &POLICY) else {
            return p;
        };
        if let Some(n) = f.get("timeout") {
            if let Some(tf) = self.fields(n, &f.child("timeout"), f.key_pos("timeout"), &TIMEOUT) {
                p.timeout = tf.get("execute").and_then(|n| {
                    let d = self.duration(n, &tf.child("execute"))?;
                    if d.is_zero() {
                        self.err(
                            n.pos,
                            &tf.child("execute"),
                            "the timeout must be longer than 0",
                        );
                        return None;
                    }
                    Some(d)
                });
            }
        }
        if let Some(n) = f.get("retry") {
            if let Some(rf) = self.fields(n, &f.child("retry"), f.key_pos("retry"), &RETRY) {
                p.attempts = rf.get("attempts").and_then(|n| {
                    self.uint(n, &rf.child("attempts"), 1, MAX_RETRY_ATTEMPTS.into())
                        .and_then(|v| u32::try_from(v).ok())
                });
                if let Some(n) = rf.get("on") {
                    let rp = rf.child("on");
                    let mut on = Vec::new();
                    for (i, item) in self.seq(n, &rp).iter().enumerate() {
                        if let Some(v) = self.enum_value(
                            item,
                            &index(&rp, i),
                            &[("failure", RetryOn::Failure), ("node", RetryOn::Node)],
                            true,
                        ) {
                            if !on.contains(&v) {
                                on.push(v);
                            }
                        }
                    }
                    if matches!(n.kind, Kind::Seq(ref s) if s.is_empty()) || n.is_null() {
                        self.err(n.pos, &rp, "empty; list `failure`, `node` or both");
                    }
                    on.sort();
                    p.on = Some(on);
                }
            }
        }
        p.restart = f.get("restart").and_then(|n| {
            self.enum_value(
                n,
                &f.child("restart"),
                &[
                    ("on-node-fault", RestartPolicy::OnNodeFault),
                    ("never", RestartPolicy::Never),
                ],
                true,
            )
        });
        p
    }

    pub(super) fn dependencies(&mut self, me: &str, f: &Fields) -> Vec<Dependency> {
        let mut out: Vec<Dependency> = Vec::new();
        let (deps, reqs) = (f.get("depends-on"), f.get("requires"));
        if deps.is_some() && reqs.is_some() {
            self.err(
                f.key_pos("requires"),
                &f.child("requires"),
                "`requires` and `depends-on` are both set; list every dependency under `depends-on`",
            );
        }
        if let Some(n) = deps {
            let path = f.child("depends-on");
            for (i, item) in self.seq(n, &path).iter().enumerate() {
                let p = index(&path, i);
                if let Kind::Scalar(_) = item.kind {
                    if !item.is_null() {
                        self.err(
                            item.pos,
                            &p,
                            "expected a mapping; write `{name: NAME, status: FINISHED}`",
                        );
                        continue;
                    }
                }
                let Some(df) = self.fields(item, &p, item.pos, &DEPENDENCY) else {
                    continue;
                };
                let Some(name_node) = df.get("name") else {
                    self.err(
                        item.pos,
                        &p,
                        "missing `name` of the job or service depended on",
                    );
                    continue;
                };
                let Some(name) = self.string(name_node, &df.child("name")) else {
                    continue;
                };
                let status = df
                    .get("status")
                    .and_then(|n| {
                        self.enum_value(
                            n,
                            &df.child("status"),
                            &[
                                ("FINISHED", DepStatus::Finished),
                                ("RUNNING", DepStatus::Running),
                            ],
                            true,
                        )
                    })
                    .unwrap_or(DepStatus::Finished);
                let description = df
                    .get("description")
                    .and_then(|n| self.string(n, &df.child("description")));
                if self.dependency_ok(me, &name, status, name_node.pos, &df.child("name"), &out) {
                    out.push(Dependency {
                        name,
                        status,
                        description,
                        pos: name_node.pos,
                    });
                }
            }
        }
        if let Some(n) = reqs {
            let path = f.child("requires");
            for (i, (name, pos)) in self.string_list(n, &path).into_iter().enumerate() {
                if self.dependency_ok(me, &name, DepStatus::Finished, pos, &index(&path, i), &out) {
                    out.push(Dependency {
                        name,
                        status: DepStatus::Finished,
                        description: None,
                        pos,
                    });
                }
            }
        }
        out
    }

    pub(super) fn dependency_ok(
        &mut self,
        me: &str,
        name: &str,
        status: DepStatus,
        pos: Pos,
        path: &str,
        earlier: &[Dependency],
    ) -> bool {
        if name == me {
            let msg = format!("`{me}` depends on itself");
            self.err(pos, path, msg);
            return false;
        }
        let is_job = self.names.jobs.contains(name);
        let is_service = self.names.services.contains(name);
        if !is_job && !is_service {
            let all: BTreeSet<String> = self
                .names
                .jobs
                .union(&self.names.services)
                .cloned()
                .collect();
            let msg = format!(
                "`{name}` is not a job or service of this workflow{}; jobs: {}; services: {}",
                did_you_mean(name, &all),
                listing(&self.names.jobs),
                listing(&self.names.services)
            );
            self.err(pos, path, msg);
            return false;
        }
        if status == DepStatus::Running && !is_service {
            let msg = format!(
                "`{name}` is a job; status RUNNING is for services, a job can only be waited for until FINISHED"
            );
            self.err(pos, path, msg);
            return false;
        }
        if let Some(first) = earlier.iter().find(|d| d.name == name) {
            let msg = format!(
                "`{name}` is listed twice (first at {}); keep one",
                first.pos
            );
            self.err(pos, path, msg);
            return false;
        }
        true
    }

    pub(super) fn task_array(&mut self, node: &Node, path: &str, owner: Pos) -> Option<TaskArray> {
        let f = self.fields(node, path, owner, &TASK_ARRAY)?;
        let start = f
            .get("start")
            .and_then(|n| self.u32_in(n, &f.child("start"), 0));
        let end = f
            .get("end")
            .and_then(|n| self.u32_in(n, &f.child("end"), 0));
        let concurrency = f
            .get("concurrency")
            .and_then(|n| self.u32_in(n, &f.child("concurrency"), 1));
        for key in ["start", "end"] {
            if f.get(key).is_none() {
                let msg =
                    format!("missing `{key}`; a task array runs tasks `start` to `end`, inclusive");
                self.err(owner, path, msg);
            }
        }
        let (start, end) = (start?, end?);
        if start > end {
            let msg = format!("`end` ({end}) is before `start` ({start})");
            self.err(f.key_pos("end"), path, msg);
            return None;
        }
        if u64::from(end - start) >= MAX_TASKS {
            let msg = format!(
                "{} tasks is too many; a task array runs at most {MAX_TASKS}",
                u64::from(end - start) + 1
            );
            self.err(f.key_pos("end"), path, msg);
            return None;
        }
        Some(TaskArray {
            start,
            end,
            concurrency,
        })
    }

    pub(super) fn multinode(&mut self, node: &Node, path: &str, owner: Pos) -> Option<Multinode> {
        let f = self.fields(node, path, owner, &MULTINODE)?;
        let nodes = f.get("nodes").and_then(|n| {
            let v = self.u32_in(n, &f.child("nodes"), 1)?;
            if v > MAX_MULTINODE_NODES {
                let msg = format!(
                    "{v} nodes is too many; a multinode job spans at most {MAX_MULTINODE_NODES} nodes"
                );
                self.err(n.pos, &f.child("nodes"), msg);
                return None;
            }
            Some(v)
        });
        let implementation = f.get("implementation").and_then(|n| {
            self.enum_value(
                n,
                &f.child("implementation"),
                &[
                    ("openmpi", MultinodeImpl::OpenMpi),
                    ("ompi", MultinodeImpl::OpenMpi),
                    ("mpich", MultinodeImpl::Mpich),
                    ("gasnet", MultinodeImpl::Gasnet),
                    ("generic", MultinodeImpl::Generic),
                ],
                true,
            )
        });
        let procs_per_node = f
            .get("procs-per-node")
            .and_then(|n| self.u32_in(n, &f.child("procs-per-node"), 1));
        for key in ["nodes", "implementation"] {
            if f.get(key).is_none() {
                let msg = format!("missing `{key}`");
                self.err(owner, path, msg);
            }
        }
        Some(Multinode {
            nodes: nodes?,
            implementation: implementation?,
            procs_per_node,
        })
    }

    pub(super) fn job_network(
        &mut self,
        node: &Node,
        path: &str,
        owner: Pos,
    ) -> Option<JobNetwork> {
        let f = self.fields(node, path, owner, &JOB_NETWORK)?;
        let host = f
            .get("host")
            .and_then(|n| self.boolean(n, &f.child("host")))
            .unwrap_or(false);
        let isolated = f
            .get("isolated")
            .and_then(|n| self.boolean(n, &f.child("isolated")))
            .unwrap_or(false);
        let ports = |cx: &mut Self, key: &str| -> Vec<u16> {
            let Some(n) = f.get(key) else {
                return Vec::new();
            };
            let p = f.child(key);
            cx.seq(n, &p)
                .iter()
                .enumerate()
                .filter_map(|(i, item)| cx.port(item, &index(&p, i)))
                .collect()
        };
        let expose_tcp = ports(self, "expose-tcp");
        let expose_udp = ports(self, "expose-udp");
        Some(JobNetwork {
            host,
            isolated,
            expose_tcp,
            expose_udp,
        })
    }
}
