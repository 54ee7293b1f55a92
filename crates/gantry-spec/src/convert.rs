//! From the positioned YAML tree to the typed workflow, checking as it goes.
//!
//! Every check records a diagnostic and carries on, so one pass reports all
//! problems. Names that other entries refer to (files, volumes, images,
//! jobs, services) are collected before anything is converted, so references
//! are checked where they are written.

use crate::diag::{Diags, Pos};
use crate::model::*;
use crate::names::{endpoint_name_error, name_error, reserved_target_error};
use crate::suggest::{kebab, suggest};
use crate::units::{parse_duration, parse_size};
use crate::yaml::{parse_bool, parse_int, Entry, Kind, Node};
use std::collections::{BTreeMap, BTreeSet};

/// The field path of `key` under `path`: `jobs.a.image`, or
/// `jobs.a.mounts["/data"]` for keys that are not plain names.
pub(crate) fn child(path: &str, key: &str) -> String {
    let simple = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if simple {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    } else {
        format!("{path}[{key:?}]")
    }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// The keys a mapping may hold.
struct Schema {
    keys: &'static [&'static str],
    /// Other spellings accepted for a key: (alias, canonical).
    aliases: &'static [(&'static str, &'static str)],
    /// Messages for keys that are known mistakes: (key, message).
    hints: &'static [(&'static str, &'static str)],
}

const NO_ALIASES: &[(&str, &str)] = &[];
const NO_HINTS: &[(&str, &str)] = &[];

macro_rules! schema {
    ($name:ident, [$($k:literal),* $(,)?]) => {
        const $name: Schema = Schema { keys: &[$($k),*], aliases: NO_ALIASES, hints: NO_HINTS };
    };
    ($name:ident, [$($k:literal),* $(,)?], $aliases:expr, $hints:expr) => {
        const $name: Schema = Schema { keys: &[$($k),*], aliases: $aliases, hints: $hints };
    };
}

schema!(
    TOP,
    [
        "version",
        "annotations",
        "defaults",
        "files",
        "volumes",
        "jobs",
        "services",
        "preemptible",
        "images"
    ]
);
schema!(DEFAULTS, ["job", "service", "env", "mounts", "resource"]);
schema!(
    DEFAULTS_JOB,
    ["env", "mounts", "policy", "resource"],
    NO_ALIASES,
    &[(
        "image",
        "`defaults.job` cannot set `image`; give each job its own `image`"
    )]
);
schema!(
    DEFAULTS_SERVICE,
    ["env", "mounts", "resource"],
    NO_ALIASES,
    &[(
        "policy",
        "`defaults.service` has no `policy`; set it on each service"
    )]
);
schema!(
    RESOURCE,
    ["cpu", "memory", "devices", "exclusive", "annotations"]
);
schema!(CPU, ["cores", "affinity", "threads", "sockets"]);
schema!(
    MEMORY,
    ["size", "by-core"],
    &[("byCore", "by-core")],
    NO_HINTS
);
schema!(POLICY, ["timeout", "retry", "restart"]);
schema!(TIMEOUT, ["execute"]);
schema!(RETRY, ["attempts", "on"]);
const SERVICE_ONLY_IN_JOB: &[(&str, &str)] = &[
    (
        "persist",
        "`persist` is a service key; move this step under `services`",
    ),
    (
        "readiness-probe",
        "`readiness-probe` is a service key; move this step under `services`",
    ),
    (
        "autoscaler",
        "`autoscaler` is a service key; move this step under `services`",
    ),
    (
        "dynamic-config",
        "`dynamic-config` is a service key; move this step under `services`",
    ),
];
schema!(
    JOB,
    [
        "name",
        "image",
        "command",
        "script",
        "args",
        "env",
        "cwd",
        "mounts",
        "files",
        "resource",
        "depends-on",
        "requires",
        "task-array",
        "multinode",
        "policy",
        "network",
        "preemptible"
    ],
    NO_ALIASES,
    SERVICE_ONLY_IN_JOB
);
schema!(
    SERVICE,
    [
        "name",
        "image",
        "command",
        "script",
        "args",
        "env",
        "cwd",
        "mounts",
        "files",
        "resource",
        "depends-on",
        "requires",
        "multinode",
        "policy",
        "network",
        "preemptible",
        "persist",
        "readiness-probe",
        "autoscaler",
        "dynamic-config"
    ],
    NO_ALIASES,
    &[(
        "task-array",
        "`task-array` is for jobs; a service runs until it is stopped"
    )]
);
schema!(
    IMAGE,
    [
        "uri",
        "secret",
        "secrets",
        "decryption-secret",
        "cache",
        "cache-ttl",
        "build"
    ],
    &[("decryptionSecret", "decryption-secret")],
    NO_HINTS
);
schema!(
    URI,
    [
        "uri",
        "secret",
        "secrets",
        "decryption-secret",
        "cache",
        "cache-ttl"
    ],
    &[("decryptionSecret", "decryption-secret")],
    NO_HINTS
);
schema!(DEPENDENCY, ["name", "status", "description"]);
schema!(TASK_ARRAY, ["start", "end", "concurrency"]);
schema!(
    MULTINODE,
    ["nodes", "implementation", "procs-per-node"],
    &[("procsPerNode", "procs-per-node")],
    NO_HINTS
);
schema!(
    JOB_NETWORK,
    ["host", "isolated", "expose-tcp", "expose-udp"],
    NO_ALIASES,
    &[
        (
            "ports",
            "`ports` belong to a service's network; a job exposes ports with `expose-tcp`/`expose-udp`"
        ),
        (
            "endpoints",
            "`endpoints` belong to a service's network; move this step under `services`"
        )
    ]
);
schema!(SERVICE_NETWORK, ["host", "ports", "endpoints"]);
schema!(PORT, ["name", "port", "protocol"]);
schema!(
    ENDPOINT,
    [
        "name",
        "port-name",
        "protocol",
        "type",
        "scope",
        "annotations",
        "attach"
    ],
    NO_ALIASES,
    &[(
        "port",
        "`port` became `port-name` in v4: name one of the service's `network.ports`"
    )]
);
schema!(
    PROBE,
    [
        "exec",
        "http-get",
        "tcp-socket",
        "grpc",
        "initial-delay-seconds",
        "period-seconds",
        "timeout-seconds",
        "success-threshold",
        "failure-threshold"
    ]
);
schema!(EXEC, ["command"]);
schema!(HTTP_GET, ["path", "port", "scheme", "http-headers"]);
schema!(HEADER, ["name", "value"]);
schema!(TCP_SOCKET, ["port"]);
schema!(GRPC, ["port", "service"]);
schema!(
    AUTOSCALER,
    ["replicas", "metrics", "scale-up", "scale-down"]
);
schema!(REPLICAS, ["min", "max"]);
schema!(METRICS, ["enabled", "path", "port", "interval", "includes"]);
schema!(SCALE_UP, ["triggers"]);
schema!(
    SCALE_POLICY,
    [
        "metrics-query",
        "cooldown-period",
        "services",
        "drain-period"
    ]
);
schema!(DYNAMIC_CONFIG, ["path", "services", "script"]);
schema!(
    VOLUME,
    [
        "name",
        "use",
        "reference",
        "size",
        "annotations",
        "ingress",
        "egress",
        "type",
        "path"
    ]
);
schema!(TRANSFER, ["source", "destination", "policy"]);
schema!(
    MOUNT,
    ["volume"],
    NO_ALIASES,
    &[(
        "location",
        "v1 mount syntax: in v4 a mount is keyed by its container path, `/path: {volume: NAME}`"
    )]
);
schema!(IMAGE_RECIPE, ["from", "files", "run", "env", "scope"]);

/// The entries of one mapping, by canonical key.
struct Fields<'a> {
    entries: Vec<(&'static str, &'a Entry)>,
    path: String,
    /// Where the mapping is named (its key in the parent), for "missing key"
    /// messages.
    owner: Pos,
}

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> Option<&'a Node> {
        self.entry(key).map(|e| &e.value)
    }

    fn entry(&self, key: &str) -> Option<&'a Entry> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, e)| *e)
    }

    fn child(&self, key: &str) -> String {
        child(&self.path, key)
    }

    fn key_pos(&self, key: &str) -> Pos {
        self.entry(key).map_or(self.owner, |e| e.key_pos)
    }
}

/// Names defined in the file, collected before conversion.
#[derive(Default)]
struct Names {
    files: BTreeSet<String>,
    volumes: BTreeSet<String>,
    images: BTreeSet<String>,
    jobs: BTreeSet<String>,
    services: BTreeSet<String>,
}

fn listing(set: &BTreeSet<String>) -> String {
    if set.is_empty() {
        "(none)".into()
    } else {
        set.iter()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn did_you_mean(word: &str, set: &BTreeSet<String>) -> String {
    match suggest(word, set.iter().map(String::as_str)) {
        Some(s) => format!(" (did you mean `{s}`?)"),
        None => String::new(),
    }
}

/// Step settings that `defaults` may fill, before the merge.
#[derive(Debug, Clone, Default)]
struct PResource {
    cores: Option<u32>,
    threads: Option<bool>,
    affinity: Option<Affinity>,
    sockets: Option<u32>,
    mem_size: Option<u64>,
    by_core: Option<bool>,
    devices: BTreeMap<String, u32>,
    exclusive: Option<bool>,
    annotations: BTreeMap<String, String>,
}

impl PResource {
    /// `self` filled from `base` where `self` says nothing.
    fn over(mut self, base: &PResource) -> PResource {
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

    fn finish(self) -> Resource {
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
struct PPolicy {
    timeout: Option<std::time::Duration>,
    attempts: Option<u32>,
    on: Option<Vec<RetryOn>>,
    restart: Option<RestartPolicy>,
}

impl PPolicy {
    fn over(mut self, base: &PPolicy) -> PPolicy {
        self.timeout = self.timeout.or(base.timeout);
        self.attempts = self.attempts.or(base.attempts);
        if self.on.is_none() {
            self.on.clone_from(&base.on);
        }
        self.restart = self.restart.or(base.restart);
        self
    }

    fn finish(self) -> Policy {
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
struct PDefaults {
    env: Vec<EnvVar>,
    mounts: BTreeMap<String, Mount>,
    resource: PResource,
    policy: PPolicy,
}

/// What jobs and services share, before `defaults` are merged in.
struct Common {
    display_name: Option<String>,
    image: Option<ImageRef>,
    command: Vec<String>,
    script: Option<String>,
    args: Vec<String>,
    env: Vec<EnvVar>,
    cwd: Option<String>,
    mounts: BTreeMap<String, Mount>,
    files: BTreeMap<String, FileSource>,
    resource: PResource,
    depends_on: Vec<Dependency>,
    multinode: Option<Multinode>,
    policy: PPolicy,
    preemptible: Option<bool>,
}

/// Later layers win: a variable set again replaces the earlier one.
/// Each name keeps its last setting, in the order of those last settings.
fn merge_env(layers: &[&[EnvVar]]) -> Vec<EnvVar> {
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

fn merge_mounts(layers: &[&BTreeMap<String, Mount>]) -> BTreeMap<String, Mount> {
    let mut out = BTreeMap::new();
    for layer in layers {
        for (k, v) in *layer {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

fn scheme_of(uri: &str) -> Option<&str> {
    let (scheme, rest) = uri.split_once("://")?;
    if scheme.is_empty()
        || rest.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-' || b == b'.')
    {
        return None;
    }
    Some(scheme)
}

pub(crate) struct Cx<'d> {
    d: &'d mut Diags,
    names: Names,
}

impl Cx<'_> {
    fn err(&mut self, pos: Pos, path: &str, msg: impl AsRef<str>) {
        self.d.err(pos, path, msg);
    }

    fn expected(&mut self, node: &Node, path: &str, what: &str) {
        let msg = format!("expected {what}, found {}", node.describe());
        self.err(node.pos, path, msg);
    }

    fn fields<'a>(
        &mut self,
        node: &'a Node,
        path: &str,
        owner: Pos,
        schema: &Schema,
    ) -> Option<Fields<'a>> {
        let mut out = Fields {
            entries: Vec::new(),
            path: path.to_string(),
            owner,
        };
        if node.is_null() {
            return Some(out);
        }
        let Kind::Map(entries) = &node.kind else {
            self.expected(node, path, "a mapping");
            return None;
        };
        for e in entries {
            let canon = schema
                .keys
                .iter()
                .find(|k| **k == e.key)
                .copied()
                .or_else(|| {
                    schema
                        .aliases
                        .iter()
                        .find(|(a, _)| *a == e.key)
                        .map(|(_, c)| *c)
                });
            match canon {
                Some(k) => {
                    if let Some((_, first)) = out.entries.iter().find(|(c, _)| *c == k) {
                        let msg =
                            format!("`{}` and `{}` are the same key; keep one", first.key, e.key);
                        self.err(e.key_pos, path, msg);
                    } else {
                        out.entries.push((k, e));
                    }
                }
                None => {
                    let msg = unknown_key(&e.key, schema);
                    self.err(e.key_pos, path, msg);
                }
            }
        }
        Some(out)
    }

    /// The entries of a mapping whose keys are free names.
    fn map_entries<'a>(&mut self, node: &'a Node, path: &str) -> &'a [Entry] {
        match &node.kind {
            Kind::Map(entries) => entries,
            _ if node.is_null() => &[],
            _ => {
                self.expected(node, path, "a mapping");
                &[]
            }
        }
    }

    fn seq<'a>(&mut self, node: &'a Node, path: &str) -> &'a [Node] {
        match &node.kind {
            Kind::Seq(items) => items,
            _ if node.is_null() => &[],
            _ => {
                self.expected(node, path, "a list");
                &[]
            }
        }
    }

    fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.kind {
            Kind::Scalar(s) if !node.is_null() => Some(s.text.clone()),
            _ => {
                self.expected(node, path, "a string");
                None
            }
        }
    }

    fn nonempty(&mut self, node: &Node, path: &str) -> Option<String> {
        let s = self.string(node, path)?;
        if s.trim().is_empty() {
            self.err(node.pos, path, "must not be empty");
            return None;
        }
        Some(s)
    }

    fn uint(&mut self, node: &Node, path: &str, min: u64, max: u64) -> Option<u64> {
        let value = match &node.kind {
            Kind::Scalar(s) if !node.is_null() => parse_int(s.text.trim()),
            _ => None,
        };
        let Some(v) = value else {
            self.expected(node, path, "a whole number");
            return None;
        };
        if v < i128::from(min) || v > i128::from(max) {
            let msg = if max == u64::from(u32::MAX) || max == u64::MAX {
                format!("{v} is out of range; it must be at least {min}")
            } else {
                format!("{v} is out of range; it must be between {min} and {max}")
            };
            self.err(node.pos, path, msg);
            return None;
        }
        u64::try_from(v).ok()
    }

    fn u32_in(&mut self, node: &Node, path: &str, min: u32) -> Option<u32> {
        self.uint(node, path, u64::from(min), u64::from(u32::MAX))
            .and_then(|v| u32::try_from(v).ok())
    }

    fn port(&mut self, node: &Node, path: &str) -> Option<u16> {
        self.uint(node, path, 1, 65535)
            .and_then(|v| u16::try_from(v).ok())
    }

    fn boolean(&mut self, node: &Node, path: &str) -> Option<bool> {
        match &node.kind {
            Kind::Scalar(s) if s.plain => {
                if let Some(b) = parse_bool(&s.text) {
                    return Some(b);
                }
            }
            _ => {}
        }
        self.expected(node, path, "true or false");
        None
    }

    fn string_list(&mut self, node: &Node, path: &str) -> Vec<(String, Pos)> {
        let mut out = Vec::new();
        if let Kind::Scalar(_) = node.kind {
            if !node.is_null() {
                self.expected(node, path, "a list of strings");
                return out;
            }
        }
        for (i, item) in self.seq(node, path).iter().enumerate() {
            if let Some(s) = self.string(item, &index(path, i)) {
                out.push((s, item.pos));
            }
        }
        out
    }

    fn strings(&mut self, node: &Node, path: &str) -> Vec<String> {
        self.string_list(node, path)
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    }

    fn string_map(&mut self, node: &Node, path: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for e in self.map_entries(node, path) {
            if let Some(v) = self.string(&e.value, &child(path, &e.key)) {
                out.insert(e.key.clone(), v);
            }
        }
        out
    }

    fn enum_value<T: Copy>(
        &mut self,
        node: &Node,
        path: &str,
        choices: &[(&str, T)],
        case_insensitive: bool,
    ) -> Option<T> {
        let text = self.string(node, path)?;
        let found = choices.iter().find(|(name, _)| {
            if case_insensitive {
                name.eq_ignore_ascii_case(text.trim())
            } else {
                *name == text
            }
        });
        match found {
            Some((_, v)) => Some(*v),
            None => {
                let names: Vec<String> = choices.iter().map(|(n, _)| format!("`{n}`")).collect();
                let msg = format!("`{text}` is not one of {}", names.join(", "));
                self.err(node.pos, path, msg);
                None
            }
        }
    }

    fn abs_path(&mut self, text: &str, pos: Pos, path: &str, what: &str) -> bool {
        if !text.starts_with('/') {
            let msg = format!("{what} `{text}` must be an absolute path (start with `/`)");
            self.err(pos, path, msg);
            return false;
        }
        if text.split('/').any(|seg| seg == "..") {
            let msg = format!("{what} `{text}` must not contain `..`");
            self.err(pos, path, msg);
            return false;
        }
        true
    }

    /// A path in a step's container that a volume or a file goes to: absolute, and not one
    /// of the container's own (see `names::reserved_target_error`).
    fn container_target(&mut self, text: &str, pos: Pos, path: &str, what: &str) -> bool {
        if !self.abs_path(text, pos, path, what) {
            return false;
        }
        match reserved_target_error(text) {
            Some(why) => {
                self.err(pos, path, format!("{what} {why}"));
                false
            }
            None => true,
        }
    }

    fn secret_uri(&mut self, node: &Node, path: &str) -> Option<String> {
        let s = self.string(node, path)?;
        match s.strip_prefix("secret://") {
            Some(rest) if !rest.is_empty() => Some(s),
            _ => {
                let msg = format!("`{s}` is not a secret reference; write `secret://SCOPE/NAME`");
                self.err(node.pos, path, msg);
                None
            }
        }
    }

    fn size(&mut self, node: &Node, path: &str) -> Option<u64> {
        let text = self.string(node, path)?;
        match parse_size(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                self.err(node.pos, path, e);
                None
            }
        }
    }

    fn duration(&mut self, node: &Node, path: &str) -> Option<std::time::Duration> {
        let text = self.string(node, path)?;
        match parse_duration(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                self.err(node.pos, path, e);
                None
            }
        }
    }

    fn file_ref(&mut self, name: &str, pos: Pos, path: &str) {
        if !self.names.files.contains(name) {
            let msg = format!(
                "file `{name}` is not defined under the top-level `files`{}; files: {}",
                did_you_mean(name, &self.names.files),
                listing(&self.names.files)
            );
            self.err(pos, path, msg);
        }
    }

    // ---- the document -------------------------------------------------

    fn workflow(&mut self, root: &Node) -> Option<Workflow> {
        if !matches!(root.kind, Kind::Map(_)) {
            let msg = format!(
                "a workflow file is a mapping that starts with `version: v4`; found {}",
                root.describe()
            );
            self.err(root.pos, "", msg);
            return None;
        }
        let f = self.fields(root, "", root.pos, &TOP)?;

        // A file of another version would drown in unrelated errors; its
        // version is the one thing worth saying.
        let version = match f.get("version") {
            None => {
                self.err(
                    root.pos,
                    "",
                    "missing `version`; a workflow file starts with `version: v4`",
                );
                String::from("v4")
            }
            Some(node) => {
                let v = self.string(node, "version")?;
                match v.as_str() {
                    "v4" => v,
                    "v2" | "v3" => {
                        let msg = format!(
                            "version `{v}` is not supported; Gantry reads `version: v4` (and v1). In v4, mounts are \
                             keyed by container path (`/data: {{volume: NAME}}` instead of \
                             `NAME: {{location: /data}}`), an endpoint names its port with `port-name` \
                             instead of `port`, and volumes use `use: ephemeral|persistent` (legacy \
                             `reference: volume://...` still works)"
                        );
                        self.err(node.pos, "version", msg);
                        return None;
                    }
                    _ => {
                        let msg = format!("unsupported version `{v}`; write `version: v4`");
                        self.err(node.pos, "version", msg);
                        return None;
                    }
                }
            }
        };

        // Names first, so references can be checked where they are written.
        for (key, set) in [
            ("files", 0usize),
            ("volumes", 1),
            ("images", 2),
            ("jobs", 3),
            ("services", 4),
        ] {
            let Some(node) = f.get(key) else { continue };
            if let Kind::Map(entries) = &node.kind {
                for e in entries {
                    let target = match set {
                        0 => &mut self.names.files,
                        1 => &mut self.names.volumes,
                        2 => &mut self.names.images,
                        3 => &mut self.names.jobs,
                        _ => &mut self.names.services,
                    };
                    target.insert(e.key.clone());
                }
            }
        }

        let annotations = f
            .get("annotations")
            .map(|n| self.string_map(n, "annotations"))
            .unwrap_or_default();
        let preemptible = f
            .get("preemptible")
            .and_then(|n| self.boolean(n, "preemptible"));
        let files = f
            .get("files")
            .map(|n| self.string_map(n, "files"))
            .unwrap_or_default();

        let (top, djob, dservice) = match f.get("defaults") {
            Some(n) => self.defaults(n, f.key_pos("defaults")),
            None => Default::default(),
        };

        let mut volumes = BTreeMap::new();
        if let Some(n) = f.get("volumes") {
            for e in self.map_entries(n, "volumes") {
                let path = child("volumes", &e.key);
                if let Some(v) = self.volume(e, &path) {
                    volumes.insert(e.key.clone(), v);
                }
            }
        }

        let mut images = BTreeMap::new();
        if let Some(n) = f.get("images") {
            for e in self.map_entries(n, "images") {
                let path = child("images", &e.key);
                if let Some(v) = self.image_recipe(e, &path) {
                    images.insert(e.key.clone(), v);
                }
            }
        }

        let mut jobs = BTreeMap::new();
        if let Some(n) = f.get("jobs") {
            for e in self.map_entries(n, "jobs") {
                let path = child("jobs", &e.key);
                if let Some(job) = self.job(e, &path, &top, &djob) {
                    jobs.insert(e.key.clone(), job);
                }
            }
        }

        let mut services = BTreeMap::new();
        if let Some(n) = f.get("services") {
            for e in self.map_entries(n, "services") {
                let path = child("services", &e.key);
                if self.names.jobs.contains(&e.key) {
                    let msg = format!(
                        "a job is also named `{}`; names must be unique across jobs and services",
                        e.key
                    );
                    self.err(e.key_pos, &path, msg);
                }
                if let Some(svc) = self.service(e, &path, &top, &dservice) {
                    services.insert(e.key.clone(), svc);
                }
            }
        }

        // Two endpoints of one workflow taking over the same persistent
        // endpoint would race for it.
        let mut attached: BTreeMap<&str, Pos> = BTreeMap::new();
        for (sname, svc) in &services {
            for (i, ep) in svc.network.endpoints.iter().enumerate() {
                let Some(target) = ep.attach.as_deref() else {
                    continue;
                };
                match attached.get(target) {
                    Some(first) => {
                        let path = index(
                            &format!("{}.network.endpoints", child("services", sname)),
                            i,
                        );
                        let msg = format!(
                            "persistent endpoint `{target}` is already attached at {first}; attach it once"
                        );
                        self.err(ep.pos, &path, msg);
                    }
                    None => {
                        attached.insert(target, ep.pos);
                    }
                }
            }
        }

        if self.names.jobs.is_empty() && self.names.services.is_empty() {
            self.err(
                root.pos,
                "",
                "the workflow has no `jobs` and no `services`; it needs at least one",
            );
        }

        Some(Workflow {
            version,
            upgraded_from: None,
            annotations,
            preemptible,
            files,
            volumes,
            jobs,
            services,
            images,
        })
    }

    fn defaults(&mut self, node: &Node, owner: Pos) -> (PDefaults, PDefaults, PDefaults) {
        let mut top = PDefaults::default();
        let mut job = PDefaults::default();
        let mut service = PDefaults::default();
        let Some(f) = self.fields(node, "defaults", owner, &DEFAULTS) else {
            return (top, job, service);
        };
        self.defaults_layer(&f, &mut top);
        if let Some(n) = f.get("job") {
            if let Some(jf) = self.fields(n, "defaults.job", f.key_pos("job"), &DEFAULTS_JOB) {
                self.defaults_layer(&jf, &mut job);
            }
        }
        if let Some(n) = f.get("service") {
            if let Some(sf) = self.fields(
                n,
                "defaults.service",
                f.key_pos("service"),
                &DEFAULTS_SERVICE,
            ) {
                self.defaults_layer(&sf, &mut service);
            }
        }
        (top, job, service)
    }

    fn defaults_layer(&mut self, f: &Fields, out: &mut PDefaults) {
        if let Some(n) = f.get("env") {
            out.env = self.env(n, &f.child("env"));
        }
        if let Some(n) = f.get("mounts") {
            out.mounts = self.mounts(n, &f.child("mounts"));
        }
        if let Some(n) = f.get("resource") {
            out.resource = self.resource(n, &f.child("resource"), f.key_pos("resource"));
        }
        if let Some(n) = f.get("policy") {
            out.policy = self.policy(n, &f.child("policy"), f.key_pos("policy"));
        }
    }

    // ---- steps ----------------------------------------------------------

    /// Checks the name of a step, volume or image (the key of its entry).
    fn entry_name(&mut self, e: &Entry, path: &str) {
        if let Some(msg) = name_error(&e.key) {
            self.err(e.key_pos, path, msg);
        }
    }

    fn common(&mut self, name: &str, f: &Fields, is_job: bool) -> Common {
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

    fn job(&mut self, e: &Entry, path: &str, top: &PDefaults, dj: &PDefaults) -> Option<Job> {
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

    fn service(
        &mut self,
        e: &Entry,
        path: &str,
        top: &PDefaults,
        ds: &PDefaults,
    ) -> Option<Service> {
        self.entry_name(e, path);
        let f = self.fields(&e.value, path, e.key_pos, &SERVICE)?;
        let c = self.common(&e.key, &f, false);
        let persist = f
            .get("persist")
            .and_then(|n| self.boolean(n, &f.child("persist")))
            .unwrap_or(false);
        let readiness_probe = f
            .get("readiness-probe")
            .and_then(|n| self.probe(n, &f.child("readiness-probe"), f.key_pos("readiness-probe")));
        let network = f
            .get("network")
            .map(|n| self.service_network(n, &f.child("network"), f.key_pos("network")))
            .unwrap_or_default();
        let autoscaler = f.get("autoscaler").and_then(|n| {
            self.autoscaler(n, &e.key, &f.child("autoscaler"), f.key_pos("autoscaler"))
        });
        let dynamic_config = f.get("dynamic-config").and_then(|n| {
            self.dynamic_config(n, &f.child("dynamic-config"), f.key_pos("dynamic-config"))
        });
        let image = c.image.unwrap_or_else(ImageRef::invalid);
        Some(Service {
            name: e.key.clone(),
            display_name: c.display_name,
            image,
            command: c.command,
            script: c.script,
            args: c.args,
            env: merge_env(&[&top.env, &ds.env, &c.env]),
            cwd: c.cwd,
            mounts: merge_mounts(&[&top.mounts, &ds.mounts, &c.mounts]),
            files: c.files,
            resource: c
                .resource
                .over(&ds.resource.clone().over(&top.resource))
                .finish(),
            depends_on: c.depends_on,
            multinode: c.multinode,
            policy: c.policy.finish(),
            preemptible: c.preemptible,
            persist,
            readiness_probe,
            network,
            autoscaler,
            dynamic_config,
            pos: e.key_pos,
        })
    }

    fn image_ref(&mut self, node: &Node, path: &str, owner: Pos) -> Option<ImageRef> {
        if let Kind::Scalar(s) = &node.kind {
            if !node.is_null() {
                let msg = format!(
                    "expected a mapping; write `image: {{uri: {}}}`",
                    if s.text.contains("://") {
                        s.text.clone()
                    } else {
                        format!("docker://{}", s.text)
                    }
                );
                self.err(node.pos, path, msg);
                return None;
            }
        }
        let f = self.fields(node, path, owner, &IMAGE)?;
        if let Some(b) = f.get("build") {
            if let Some(k) = [
                "uri",
                "secret",
                "secrets",
                "decryption-secret",
                "cache",
                "cache-ttl",
            ]
            .into_iter()
            .find(|k| f.get(k).is_some())
            {
                let msg =
                    format!("`build` and `{k}` are both set; an image is either built or pulled");
                self.err(f.key_pos(k), path, msg);
                return None;
            }
            let name = self.string(b, &f.child("build"))?;
            if !self.names.images.contains(&name) {
                let msg = format!(
                    "image `{name}` is not defined under `images`{}; images: {}",
                    did_you_mean(&name, &self.names.images),
                    listing(&self.names.images)
                );
                self.err(b.pos, &f.child("build"), msg);
                return None;
            }
            return Some(ImageRef::Build(name));
        }
        let Some(u) = f.get("uri") else {
            self.err(
                owner,
                path,
                "missing `uri` (or Gantry's `build`); write `image: {uri: docker://...}`",
            );
            return None;
        };
        let uri = self.image_uri(u, &f.child("uri"), &["docker", "oras", "oci"])?;
        let spec = self.uri_extras(&f, uri);
        Some(ImageRef::Uri {
            uri: spec.uri,
            secret: spec.secret,
            secrets: spec.secrets,
            decryption_secret: spec.decryption_secret,
            cache: spec.cache,
            cache_ttl: spec.cache_ttl,
        })
    }

    fn image_uri(&mut self, node: &Node, path: &str, schemes: &[&str]) -> Option<String> {
        let uri = self.nonempty(node, path)?;
        let allowed = schemes
            .iter()
            .map(|s| format!("{s}://"))
            .collect::<Vec<_>>()
            .join(", ");
        match scheme_of(&uri) {
            Some(s) if schemes.contains(&s) => Some(uri),
            Some(s) => {
                let msg = format!("unsupported image URI scheme `{s}://`; use {allowed}");
                self.err(node.pos, path, msg);
                None
            }
            None => {
                let msg = format!(
                    "image URI `{uri}` has no scheme; write `docker://{uri}` (schemes: {allowed})"
                );
                self.err(node.pos, path, msg);
                None
            }
        }
    }

    /// The access fields a URI may carry beside `uri`.
    fn uri_extras(&mut self, f: &Fields, uri: String) -> UriSpec {
        let secret = f
            .get("secret")
            .and_then(|n| self.secret_uri(n, &f.child("secret")));
        let secrets = f
            .get("secrets")
            .map(|n| self.string_map(n, &f.child("secrets")))
            .unwrap_or_default();
        let decryption_secret = f
            .get("decryption-secret")
            .and_then(|n| self.secret_uri(n, &f.child("decryption-secret")));
        let cache = f.get("cache").and_then(|n| {
            self.enum_value(
                n,
                &f.child("cache"),
                &[
                    ("once", CachePolicy::Once),
                    ("changed", CachePolicy::Changed),
                    ("never", CachePolicy::Never),
                ],
                true,
            )
        });
        let cache_ttl = f
            .get("cache-ttl")
            .and_then(|n| self.uint(n, &f.child("cache-ttl"), 0, u64::MAX));
        UriSpec {
            uri,
            secret,
            secrets,
            decryption_secret,
            cache,
            cache_ttl,
        }
    }

    fn env(&mut self, node: &Node, path: &str) -> Vec<EnvVar> {
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

    fn mounts(&mut self, node: &Node, path: &str) -> BTreeMap<String, Mount> {
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

    fn step_files(&mut self, node: &Node, path: &str) -> BTreeMap<String, FileSource> {
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

    fn resource(&mut self, node: &Node, path: &str, owner: Pos) -> PResource {
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

    fn policy(&mut self, node: &Node, path: &str, owner: Pos) -> PPolicy {
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

    fn dependencies(&mut self, me: &str, f: &Fields) -> Vec<Dependency> {
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

    fn dependency_ok(
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

    fn task_array(&mut self, node: &Node, path: &str, owner: Pos) -> Option<TaskArray> {
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

    fn multinode(&mut self, node: &Node, path: &str, owner: Pos) -> Option<Multinode> {
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

    fn job_network(&mut self, node: &Node, path: &str, owner: Pos) -> Option<JobNetwork> {
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

    fn service_network(&mut self, node: &Node, path: &str, owner: Pos) -> Network {
        let mut net = Network::default();
        let Some(f) = self.fields(node, path, owner, &SERVICE_NETWORK) else {
            return net;
        };
        net.host = f
            .get("host")
            .and_then(|n| self.boolean(n, &f.child("host")))
            .unwrap_or(false);
        if let Some(n) = f.get("ports") {
            let pp = f.child("ports");
            for (i, item) in self.seq(n, &pp).iter().enumerate() {
                let p = index(&pp, i);
                let Some(pf) = self.fields(item, &p, item.pos, &PORT) else {
                    continue;
                };
                let name = pf
                    .get("name")
                    .and_then(|n| self.nonempty(n, &pf.child("name")));
                let port = pf.get("port").and_then(|n| self.port(n, &pf.child("port")));
                let protocol = pf
                    .get("protocol")
                    .and_then(|n| {
                        self.enum_value(
                            n,
                            &pf.child("protocol"),
                            &[("tcp", PortProtocol::Tcp), ("udp", PortProtocol::Udp)],
                            true,
                        )
                    })
                    .unwrap_or(PortProtocol::Tcp);
                for key in ["name", "port"] {
                    if pf.get(key).is_none() {
                        let msg =
                            format!("missing `{key}`; a port is `{{name: NAME, port: NUMBER}}`");
                        self.err(item.pos, &p, msg);
                    }
                }
                let (Some(name), Some(port)) = (name, port) else {
                    continue;
                };
                if net.ports.iter().any(|x| x.name == name) {
                    let msg = format!("a port named `{name}` is already defined");
                    self.err(pf.key_pos("name"), &pf.child("name"), msg);
                    continue;
                }
                if net
                    .ports
                    .iter()
                    .any(|x| x.port == port && x.protocol == protocol)
                {
                    let msg = format!("port {port} is already defined");
                    self.err(pf.key_pos("port"), &pf.child("port"), msg);
                    continue;
                }
                net.ports.push(Port {
                    name,
                    port,
                    protocol,
                });
            }
        }
        if let Some(n) = f.get("endpoints") {
            let ep = f.child("endpoints");
            for (i, item) in self.seq(n, &ep).iter().enumerate() {
                let p = index(&ep, i);
                if let Some(e) = self.endpoint(item, &p, &net.ports) {
                    if net.endpoints.iter().any(|x| x.name == e.name) {
                        let msg = format!("an endpoint named `{}` is already defined", e.name);
                        self.err(e.pos, &p, msg);
                        continue;
                    }
                    net.endpoints.push(e);
                }
            }
        }
        net
    }

    fn endpoint(&mut self, node: &Node, path: &str, ports: &[Port]) -> Option<Endpoint> {
        let f = self.fields(node, path, node.pos, &ENDPOINT)?;
        let name = f.get("name").and_then(|n| {
            let s = self.string(n, &f.child("name"))?;
            if let Some(msg) = name_error(&s) {
                self.err(n.pos, &f.child("name"), msg);
                return None;
            }
            Some(s)
        });
        let port_name = f.get("port-name").and_then(|n| {
            let s = self.string(n, &f.child("port-name"))?;
            if !ports.iter().any(|p| p.name == s) {
                let names: BTreeSet<String> = ports.iter().map(|p| p.name.clone()).collect();
                let msg = format!(
                    "port `{s}` is not one of this service's `network.ports`{}; ports: {}",
                    did_you_mean(&s, &names),
                    listing(&names)
                );
                self.err(n.pos, &f.child("port-name"), msg);
                return None;
            }
            Some(s)
        });
        let protocol = f
            .get("protocol")
            .and_then(|n| {
                self.enum_value(
                    n,
                    &f.child("protocol"),
                    &[
                        ("http", EndpointProtocol::Http),
                        ("https", EndpointProtocol::Https),
                        ("grpc", EndpointProtocol::Grpc),
                        ("grpcs", EndpointProtocol::Grpcs),
                        ("tcp", EndpointProtocol::Tcp),
                        ("tls", EndpointProtocol::Tls),
                    ],
                    true,
                )
            })
            .unwrap_or(EndpointProtocol::Http);
        let kind = f
            .get("type")
            .and_then(|n| {
                self.enum_value(
                    n,
                    &f.child("type"),
                    &[
                        ("path", EndpointKind::Path),
                        ("subdomain", EndpointKind::Subdomain),
                    ],
                    true,
                )
            })
            .unwrap_or(EndpointKind::Path);
        let scope = f
            .get("scope")
            .and_then(|n| {
                self.enum_value(
                    n,
                    &f.child("scope"),
                    &[
                        ("user", Scope::User),
                        ("group", Scope::Group),
                        ("organization", Scope::Organization),
                        ("public", Scope::Public),
                    ],
                    true,
                )
            })
            .unwrap_or(Scope::Group);
        let annotations = f
            .get("annotations")
            .map(|n| self.string_map(n, &f.child("annotations")))
            .unwrap_or_default();
        let attach = f.get("attach").and_then(|n| {
            let s = self.string(n, &f.child("attach"))?;
            if let Some(msg) = endpoint_name_error(&s) {
                self.err(n.pos, &f.child("attach"), msg);
                return None;
            }
            Some(s)
        });
        for key in ["name", "port-name"] {
            if f.get(key).is_none() {
                let msg = format!("missing `{key}`");
                self.err(node.pos, path, msg);
            }
        }
        Some(Endpoint {
            name: name?,
            port_name: port_name?,
            protocol,
            kind,
            scope,
            annotations,
            attach,
            pos: node.pos,
        })
    }

    fn probe(&mut self, node: &Node, path: &str, owner: Pos) -> Option<Probe> {
        let f = self.fields(node, path, owner, &PROBE)?;
        let actions: Vec<&str> = ["exec", "http-get", "tcp-socket", "grpc"]
            .into_iter()
            .filter(|k| f.get(k).is_some())
            .collect();
        if actions.len() > 1 {
            let msg = format!(
                "`{}` and `{}` are both set; a probe has exactly one action",
                actions[0], actions[1]
            );
            self.err(f.key_pos(actions[1]), path, msg);
        }
        let timing = |cx: &mut Self, key: &str, min: u32, default: u32| -> u32 {
            f.get(key)
                .and_then(|n| cx.u32_in(n, &f.child(key), min))
                .unwrap_or(default)
        };
        let initial_delay_seconds = timing(self, "initial-delay-seconds", 0, 0);
        let period_seconds = timing(self, "period-seconds", 1, 10);
        let timeout_seconds = timing(self, "timeout-seconds", 1, 1);
        let success_threshold = timing(self, "success-threshold", 1, 1);
        let failure_threshold = timing(self, "failure-threshold", 1, 3);
        let Some(action) = actions.first().copied() else {
            self.err(
                owner,
                path,
                "missing the probe's action: `exec`, `http-get`, `tcp-socket` or `grpc`",
            );
            return None;
        };
        let an = f.get(action)?;
        let ap = f.child(action);
        let apos = f.key_pos(action);
        let kind = match action {
            "exec" => {
                let ef = self.fields(an, &ap, apos, &EXEC)?;
                let command = ef
                    .get("command")
                    .map(|n| self.strings(n, &ef.child("command")))
                    .unwrap_or_default();
                if command.is_empty() {
                    self.err(
                        apos,
                        &ap,
                        "missing `command`, the probe's command line as a list",
                    );
                    return None;
                }
                ProbeKind::Exec { command }
            }
            "http-get" => {
                let hf = self.fields(an, &ap, apos, &HTTP_GET)?;
                let path_s = hf
                    .get("path")
                    .and_then(|n| self.string(n, &hf.child("path")))
                    .unwrap_or_else(|| "/".into());
                let scheme = hf
                    .get("scheme")
                    .and_then(|n| {
                        self.enum_value(
                            n,
                            &hf.child("scheme"),
                            &[("HTTP", HttpScheme::Http), ("HTTPS", HttpScheme::Https)],
                            true,
                        )
                    })
                    .unwrap_or(HttpScheme::Http);
                let mut http_headers = Vec::new();
                if let Some(n) = hf.get("http-headers") {
                    let hp = hf.child("http-headers");
                    for (i, item) in self.seq(n, &hp).iter().enumerate() {
                        let p = index(&hp, i);
                        let Some(hdr) = self.fields(item, &p, item.pos, &HEADER) else {
                            continue;
                        };
                        let name = hdr
                            .get("name")
                            .and_then(|n| self.nonempty(n, &hdr.child("name")));
                        let value = hdr
                            .get("value")
                            .and_then(|n| self.string(n, &hdr.child("value")));
                        match (name, value) {
                            (Some(name), Some(value)) => {
                                http_headers.push(HttpHeader { name, value })
                            }
                            _ => {
                                if hdr.get("name").is_none() || hdr.get("value").is_none() {
                                    self.err(item.pos, &p, "a header needs `name` and `value`");
                                }
                            }
                        }
                    }
                }
                let port = self.probe_port(&hf, apos, &ap)?;
                ProbeKind::HttpGet {
                    path: path_s,
                    port,
                    scheme,
                    http_headers,
                }
            }
            "tcp-socket" => {
                let tf = self.fields(an, &ap, apos, &TCP_SOCKET)?;
                ProbeKind::TcpSocket {
                    port: self.probe_port(&tf, apos, &ap)?,
                }
            }
            _ => {
                let gf = self.fields(an, &ap, apos, &GRPC)?;
                let service = gf
                    .get("service")
                    .and_then(|n| self.string(n, &gf.child("service")));
                ProbeKind::Grpc {
                    port: self.probe_port(&gf, apos, &ap)?,
                    service,
                }
            }
        };
        Some(Probe {
            kind,
            initial_delay_seconds,
            period_seconds,
            timeout_seconds,
            success_threshold,
            failure_threshold,
        })
    }

    fn probe_port(&mut self, f: &Fields, owner: Pos, path: &str) -> Option<u16> {
        match f.get("port") {
            Some(n) => self.port(n, &f.child("port")),
            None => {
                self.err(owner, path, "missing `port`");
                None
            }
        }
    }

    fn service_refs(&mut self, node: &Node, path: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (i, (name, pos)) in self.string_list(node, path).into_iter().enumerate() {
            if !self.names.services.contains(&name) {
                let msg = format!(
                    "`{name}` is not a service of this workflow{}; services: {}",
                    did_you_mean(&name, &self.names.services),
                    listing(&self.names.services)
                );
                self.err(pos, &index(path, i), msg);
                continue;
            }
            out.push(name);
        }
        out
    }

    fn scale_policy(&mut self, node: &Node, path: &str, owner: Pos) -> Option<ScalePolicy> {
        let f = self.fields(node, path, owner, &SCALE_POLICY)?;
        Some(ScalePolicy {
            metrics_query: f
                .get("metrics-query")
                .and_then(|n| self.nonempty(n, &f.child("metrics-query"))),
            cooldown_period: f
                .get("cooldown-period")
                .and_then(|n| self.uint(n, &f.child("cooldown-period"), 0, u64::MAX)),
            services: f
                .get("services")
                .map(|n| self.service_refs(n, &f.child("services")))
                .unwrap_or_default(),
            drain_period: f
                .get("drain-period")
                .and_then(|n| self.uint(n, &f.child("drain-period"), 0, u64::MAX)),
        })
    }

    fn autoscaler(&mut self, node: &Node, me: &str, path: &str, owner: Pos) -> Option<Autoscaler> {
        let f = self.fields(node, path, owner, &AUTOSCALER)?;
        let mut a = Autoscaler::default();
        if let Some(n) = f.get("replicas") {
            let rp = f.child("replicas");
            if let Some(rf) = self.fields(n, &rp, f.key_pos("replicas"), &REPLICAS) {
                let min = match rf.get("min") {
                    Some(n) => self.u32_in(n, &rf.child("min"), 0),
                    None => Some(0),
                };
                let max = rf
                    .get("max")
                    .and_then(|n| self.u32_in(n, &rf.child("max"), 1));
                if rf.get("max").is_none() {
                    self.err(f.key_pos("replicas"), &rp, "missing `max`");
                }
                if let (Some(min), Some(max)) = (min, max) {
                    if min > max {
                        let msg = format!("`min` ({min}) is more than `max` ({max})");
                        self.err(rf.key_pos("min"), &rp, msg);
                    } else {
                        a.replicas = Some(Replicas { min, max });
                    }
                }
            }
        }
        if let Some(n) = f.get("metrics") {
            let mp = f.child("metrics");
            if let Some(mf) = self.fields(n, &mp, f.key_pos("metrics"), &METRICS) {
                a.metrics = Some(AutoscalerMetrics {
                    enabled: mf
                        .get("enabled")
                        .and_then(|n| self.boolean(n, &mf.child("enabled")))
                        .unwrap_or(false),
                    path: mf.get("path").and_then(|n| {
                        let s = self.string(n, &mf.child("path"))?;
                        if !s.starts_with('/') {
                            let msg = format!("metrics path `{s}` must start with `/`");
                            self.err(n.pos, &mf.child("path"), msg);
                            return None;
                        }
                        Some(s)
                    }),
                    port: mf.get("port").and_then(|n| self.port(n, &mf.child("port"))),
                    interval: mf
                        .get("interval")
                        .and_then(|n| self.uint(n, &mf.child("interval"), 1, u64::MAX)),
                    includes: mf
                        .get("includes")
                        .map(|n| self.strings(n, &mf.child("includes")))
                        .unwrap_or_default(),
                });
            }
        }
        if let Some(n) = f.get("scale-up") {
            let sp = f.child("scale-up");
            if let Some(sf) = self.fields(n, &sp, f.key_pos("scale-up"), &SCALE_UP) {
                if let Some(t) = sf.get("triggers") {
                    let tp = sf.child("triggers");
                    for (i, item) in self.seq(t, &tp).iter().enumerate() {
                        if let Some(pol) = self.scale_policy(item, &index(&tp, i), item.pos) {
                            if pol.services.iter().any(|s| s == me) {
                                let msg = format!(
                                    "`{me}` names itself in `services`; leave `services` empty to scale this service"
                                );
                                self.err(item.pos, &index(&tp, i), msg);
                            }
                            a.scale_up.push(pol);
                        }
                    }
                }
            }
            let targeted = a.scale_up.iter().filter(|p| !p.services.is_empty()).count();
            if targeted > 0 && targeted < a.scale_up.len() {
                self.err(
                    f.key_pos("scale-up"),
                    &sp,
                    "either every trigger names `services` (to scale other services) or none does",
                );
            }
            if targeted > 0 && f.get("replicas").is_some() {
                self.err(
                    f.key_pos("replicas"),
                    &f.child("replicas"),
                    "`replicas` cannot be set when the scale-up triggers scale other services",
                );
            }
        }
        if let Some(n) = f.get("scale-down") {
            let dp = f.child("scale-down");
            if let Some(pol) = self.scale_policy(n, &dp, f.key_pos("scale-down")) {
                if !pol.services.is_empty() {
                    self.err(
                        f.key_pos("scale-down"),
                        &dp,
                        "`services` is only for scale-up triggers; scale-down applies to this service",
                    );
                }
                a.scale_down = Some(pol);
            }
        }
        Some(a)
    }

    fn dynamic_config(&mut self, node: &Node, path: &str, owner: Pos) -> Option<DynamicConfig> {
        let f = self.fields(node, path, owner, &DYNAMIC_CONFIG)?;
        let file = f.get("path").and_then(|n| {
            let s = self.string(n, &f.child("path"))?;
            self.abs_path(&s, n.pos, &f.child("path"), "path")
                .then_some(s)
        });
        let services = f
            .get("services")
            .map(|n| self.service_refs(n, &f.child("services")))
            .unwrap_or_default();
        let script = f
            .get("script")
            .and_then(|n| self.nonempty(n, &f.child("script")));
        for key in ["path", "script"] {
            if f.get(key).is_none() {
                let msg = format!("missing `{key}`");
                self.err(owner, path, msg);
            }
        }
        Some(DynamicConfig {
            path: file?,
            services,
            script: script?,
        })
    }

    // ---- volumes and images ---------------------------------------------

    fn volume(&mut self, e: &Entry, path: &str) -> Option<Volume> {
        self.entry_name(e, path);
        let f = self.fields(&e.value, path, e.key_pos, &VOLUME)?;
        let mut provisioner = None;
        let name = f
            .get("name")
            .and_then(|n| self.nonempty(n, &f.child("name")));
        let mut kind = VolumeKind::Ephemeral;
        let mut made_on_use = false;
        let sources: Vec<&str> = ["use", "reference", "type"]
            .into_iter()
            .filter(|k| f.get(k).is_some())
            .collect();
        if sources.len() > 1 {
            let msg = format!(
                "`{}` and `{}` are both set; say what the volume is once",
                sources[0], sources[1]
            );
            self.err(f.key_pos(sources[1]), path, msg);
            return None;
        }
        if let Some(n) = f.get("use") {
            let u = self.nonempty(n, &f.child("use"))?;
            match u.as_str() {
                "ephemeral" => {}
                "persistent" => match &name {
                    Some(nm) => {
                        kind = VolumeKind::Persistent {
                            scope: Scope::User,
                            name: nm.clone(),
                        }
                    }
                    None => {
                        self.err(
                            f.key_pos("use"),
                            path,
                            "a persistent volume needs `name`: the volume that outlives the workflow",
                        );
                        return None;
                    }
                },
                other => {
                    provisioner = Some(other.to_string());
                    if let Some(nm) = &name {
                        kind = VolumeKind::Persistent {
                            scope: Scope::User,
                            name: nm.clone(),
                        };
                    }
                }
            }
        } else if let Some(n) = f.get("reference") {
            let r = self.string(n, &f.child("reference"))?;
            let (k, prov) = self.reference(&r, n.pos, &f.child("reference"))?;
            made_on_use = matches!(k, VolumeKind::Persistent { .. });
            kind = k;
            provisioner = prov;
        } else if let Some(n) = f.get("type") {
            let t = self.enum_value(
                n,
                &f.child("type"),
                &[("EPHEMERAL", 0u8), ("HOST", 1u8)],
                true,
            )?;
            if t == 1 {
                let Some(pn) = f.get("path") else {
                    self.err(f.key_pos("type"), path, "a HOST volume needs `path`");
                    return None;
                };
                let p = self.string(pn, &f.child("path"))?;
                if !self.abs_path(&p, pn.pos, &f.child("path"), "host path") {
                    return None;
                }
                kind = VolumeKind::Host { path: p };
            }
        }
        if f.get("path").is_some() && !matches!(kind, VolumeKind::Host { .. }) {
            self.err(
                f.key_pos("path"),
                &f.child("path"),
                "`path` is only for the deprecated `type: HOST` volumes",
            );
        }
        if let VolumeKind::Persistent { name: nm, .. } = &kind {
            if let Some(msg) = name_error(nm) {
                let at = ["name", "reference", "use"]
                    .into_iter()
                    .find(|k| f.get(k).is_some())
                    .unwrap_or("name");
                self.err(f.get(at).map_or(e.key_pos, |n| n.pos), &f.child(at), msg);
            }
        }
        // The catalog's `fds` writes `name:` beside `reference: volume://user/ephemeral`: a
        // v1 leftover (the volume's key again) that Fuzzball ignores, and so does Gantry.
        if name.is_some() && kind == VolumeKind::Ephemeral && f.get("reference").is_none() {
            self.err(
                f.key_pos("name"),
                &f.child("name"),
                "an ephemeral volume has no `name`; use `use: persistent` for a named volume",
            );
        }
        let size = f.get("size").and_then(|n| self.size(n, &f.child("size")));
        let annotations = f
            .get("annotations")
            .map(|n| self.string_map(n, &f.child("annotations")))
            .unwrap_or_default();
        let ingress = f
            .get("ingress")
            .map(|n| self.transfers(n, &f.child("ingress"), true))
            .unwrap_or_default();
        let egress = f
            .get("egress")
            .map(|n| self.transfers(n, &f.child("egress"), false))
            .unwrap_or_default();
        Some(Volume {
            name: e.key.clone(),
            kind,
            provisioner,
            size,
            annotations,
            made_on_use,
            ingress,
            egress,
            pos: e.key_pos,
        })
    }

    /// The legacy `volume://SCOPE/CLASS[/NAME]`.
    fn reference(&mut self, r: &str, pos: Pos, path: &str) -> Option<(VolumeKind, Option<String>)> {
        let bad = |cx: &mut Self, why: &str| {
            let msg = format!(
                "`{r}` is not a volume reference: {why}; write `volume://user/ephemeral` or \
                 `volume://SCOPE/persistent/NAME`"
            );
            cx.err(pos, path, msg);
            None
        };
        let Some(rest) = r.strip_prefix("volume://") else {
            return bad(self, "it must start with `volume://`");
        };
        let parts: Vec<&str> = rest.split('/').collect();
        if parts.len() < 2 || parts.len() > 3 || parts.iter().any(|p| p.is_empty()) {
            return bad(
                self,
                "expected `volume://SCOPE/CLASS` or `volume://SCOPE/CLASS/NAME`",
            );
        }
        let scope = match parts[0] {
            "user" => Scope::User,
            "group" | "account" => Scope::Group,
            // Fuzzball has no organization-wide volumes (its storage classes are scoped to
            // users or groups), and neither does Gantry.
            other => {
                let msg = format!(
                    "unknown volume scope `{other}` in `{r}`; use `user` or `group` (or `account`)"
                );
                self.err(pos, path, msg);
                return None;
            }
        };
        let name = parts.get(2).map(|s| s.to_string());
        match parts[1] {
            // An ephemeral volume's name comes from its workflow: Fuzzball ignores a suffix.
            "ephemeral" => Some((VolumeKind::Ephemeral, None)),
            "persistent" => Some((
                VolumeKind::Persistent {
                    scope,
                    name: name.unwrap_or_else(|| "default".into()),
                },
                None,
            )),
            class => {
                let kind = match name {
                    Some(name) => VolumeKind::Persistent { scope, name },
                    None => VolumeKind::Ephemeral,
                };
                Some((kind, Some(class.to_string())))
            }
        }
    }

    fn transfers(&mut self, node: &Node, path: &str, ingress: bool) -> Vec<Transfer> {
        let mut out = Vec::new();
        for (i, item) in self.seq(node, path).iter().enumerate() {
            let p = index(path, i);
            let Some(f) = self.fields(item, &p, item.pos, &TRANSFER) else {
                continue;
            };
            let source = f
                .get("source")
                .and_then(|n| self.transfer_uri(n, &f.child("source"), f.key_pos("source")));
            let destination = f.get("destination").and_then(|n| {
                self.transfer_uri(n, &f.child("destination"), f.key_pos("destination"))
            });
            let policy = f.get("policy").map(|n| {
                self.policy(n, &f.child("policy"), f.key_pos("policy"))
                    .finish()
            });
            for key in ["source", "destination"] {
                if f.get(key).is_none() {
                    let msg = format!("missing `{key}`");
                    self.err(item.pos, &p, msg);
                }
            }
            let (Some((source, spos)), Some((destination, dpos))) = (source, destination) else {
                continue;
            };
            // Inside the volume the other end is a `file://` path.
            let (inside, inside_pos, inside_key) = if ingress {
                (&destination, dpos, "destination")
            } else {
                (&source, spos, "source")
            };
            if scheme_of(&inside.uri) != Some("file") {
                let msg = format!(
                    "the {inside_key} of {} is a path in the volume; write `file://PATH`",
                    if ingress { "an ingress" } else { "an egress" }
                );
                self.err(inside_pos, &child(&f.child(inside_key), "uri"), msg);
                continue;
            }
            // `file://PATH` and `file:///PATH` both mean PATH below the volume's root; one
            // that leaves it (or names the root itself) is refused here, and the agent
            // resolves it beneath the volume again when it writes.
            let in_volume = inside
                .uri
                .trim_start_matches("file://")
                .trim_start_matches('/');
            if in_volume.split('/').all(|seg| seg.is_empty() || seg == ".")
                || in_volume.split('/').any(|seg| seg == "..")
                || in_volume.contains('\0')
            {
                let msg = format!(
                    "`{}` must name a path below the volume's root (no `..`)",
                    inside.uri
                );
                self.err(inside_pos, &child(&f.child(inside_key), "uri"), msg);
                continue;
            }
            if ingress {
                if let Some(name) = source.uri.strip_prefix("file://") {
                    self.file_ref(name, spos, &child(&f.child("source"), "uri"));
                }
            }
            out.push(Transfer {
                source,
                destination,
                policy,
                pos: item.pos,
            });
        }
        out
    }

    fn transfer_uri(&mut self, node: &Node, path: &str, owner: Pos) -> Option<(UriSpec, Pos)> {
        let f = self.fields(node, path, owner, &URI)?;
        let Some(u) = f.get("uri") else {
            self.err(owner, path, "missing `uri`");
            return None;
        };
        let uri = self.nonempty(u, &f.child("uri"))?;
        if scheme_of(&uri).is_none() {
            let msg =
                format!("`{uri}` is not a URI; write `SCHEME://...` (https://, s3://, file://)");
            self.err(u.pos, &f.child("uri"), msg);
            return None;
        }
        Some((self.uri_extras(&f, uri), u.pos))
    }

    fn image_recipe(&mut self, e: &Entry, path: &str) -> Option<ImageRecipe> {
        self.entry_name(e, path);
        let f = self.fields(&e.value, path, e.key_pos, &IMAGE_RECIPE)?;
        let from = match f.get("from") {
            Some(n) => self.image_uri(n, &f.child("from"), &["docker", "oci"]),
            None => {
                self.err(
                    e.key_pos,
                    path,
                    "missing `from`, the base image (`docker://...`)",
                );
                None
            }
        };
        let mut files = BTreeMap::new();
        if let Some(n) = f.get("files") {
            let fp = f.child("files");
            for fe in self.map_entries(n, &fp) {
                let p = child(&fp, &fe.key);
                let ok = self.abs_path(&fe.key, fe.key_pos, &p, "file destination");
                let Some(v) = self.string(&fe.value, &p) else {
                    continue;
                };
                let Some(name) = v.strip_prefix("file://") else {
                    let msg = format!("`{v}` is not a file reference; write `file://NAME` naming a top-level file");
                    self.err(fe.value.pos, &p, msg);
                    continue;
                };
                self.file_ref(name, fe.value.pos, &p);
                if ok {
                    files.insert(fe.key.clone(), name.to_string());
                }
            }
        }
        let run = f
            .get("run")
            .map(|n| self.strings(n, &f.child("run")))
            .unwrap_or_default();
        let env = f
            .get("env")
            .map(|n| {
                self.env(n, &f.child("env"))
                    .into_iter()
                    .map(|v| match v.value {
                        EnvValue::Plain(s) | EnvValue::Secret(s) => format!("{}={}", v.name, s),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let scope = f
            .get("scope")
            .and_then(|n| {
                self.enum_value(
                    n,
                    &f.child("scope"),
                    &[("user", ImageScope::User), ("group", ImageScope::Group)],
                    true,
                )
            })
            .unwrap_or(ImageScope::User);
        Some(ImageRecipe {
            name: e.key.clone(),
            from: from?,
            files,
            run,
            env,
            scope,
            pos: e.key_pos,
        })
    }
}

impl ImageRef {
    fn invalid() -> ImageRef {
        ImageRef::Uri {
            uri: String::new(),
            secret: None,
            secrets: BTreeMap::new(),
            decryption_secret: None,
            cache: None,
            cache_ttl: None,
        }
    }
}

fn unknown_key(key: &str, schema: &Schema) -> String {
    if let Some((_, hint)) = schema.hints.iter().find(|(k, _)| *k == key) {
        return format!("unknown key `{key}`: {hint}");
    }
    let k = kebab(key);
    if k != key && schema.keys.contains(&k.as_str()) {
        return format!("unknown key `{key}`; did you mean `{k}`? (keys are kebab-case)");
    }
    if let Some(s) = suggest(key, schema.keys.iter().copied()) {
        return format!("unknown key `{key}`; did you mean `{s}`?");
    }
    format!(
        "unknown key `{key}`; expected one of: {}",
        schema.keys.join(", ")
    )
}

/// Converts and checks a loaded document. Returns the workflow when the
/// document is usable at all; the caller decides by the diagnostics whether
/// it is valid.
/// Every task of a workflow is stored when it is submitted, so a file may ask for at most
/// this many, in one task array and in all.
pub const MAX_TASKS: u64 = 1_000_000;

/// The most nodes one multinode job may span. A gang is placed whole or not at all, so the
/// controller must see every waiting member at once: its snapshot lists up to 64 waiting tasks
/// of a job (the store's `PENDING_WINDOW`, which a server test holds this to).
pub const MAX_MULTINODE_NODES: u32 = 64;

/// The workflow's tasks in all (one per job or service, or per task-array member) within
/// [`MAX_TASKS`]; past it, the job that crosses the limit, in file order, is named.
pub(crate) fn check_task_total(wf: &Workflow, diags: &mut Diags) {
    let mut steps: Vec<(Pos, &str, Option<u64>)> = wf
        .jobs
        .values()
        .map(|j| {
            (
                j.pos,
                j.name.as_str(),
                j.task_array
                    .as_ref()
                    .map(TaskArray::len)
                    .or(j.multinode.as_ref().map(|m| u64::from(m.nodes))),
            )
        })
        .collect();
    let services = wf.services.len() as u64;
    let total = services + steps.iter().map(|s| s.2.unwrap_or(1)).sum::<u64>();
    if total <= MAX_TASKS {
        return;
    }
    steps.sort();
    let mut so_far = services;
    for (pos, name, array) in steps {
        so_far += array.unwrap_or(1);
        if so_far > MAX_TASKS {
            let (path, with) = match array {
                Some(n) => (
                    child(&child("jobs", name), "task-array"),
                    format!("its {n} tasks"),
                ),
                None => (child("jobs", name), "it".to_string()),
            };
            let msg = format!(
                "with {with}, the workflow makes {total} tasks; a workflow runs at most {MAX_TASKS} in all"
            );
            diags.err(pos, &path, msg);
            return;
        }
    }
}

pub(crate) fn convert(root: &Node, diags: &mut Diags) -> Option<Workflow> {
    let mut cx = Cx {
        d: diags,
        names: Names::default(),
    };
    cx.workflow(root)
}
