//! The keys each mapping of the file may hold, with the other spellings accepted and the
//! hints for known mistakes, and the reading of a mapping against its keys.

use crate::diag::Pos;
use crate::suggest::{kebab, suggest};
use crate::yaml::{Kind, Node};

use super::prim::Fields;
use super::Cx;

/// The keys a mapping may hold.
pub(super) struct Schema {
    pub(super) keys: &'static [&'static str],
    /// Other spellings accepted for a key: (alias, canonical).
    pub(super) aliases: &'static [(&'static str, &'static str)],
    /// Messages for keys that are known mistakes: (key, message).
    pub(super) hints: &'static [(&'static str, &'static str)],
}

pub(super) const NO_ALIASES: &[(&str, &str)] = &[];
pub(super) const NO_HINTS: &[(&str, &str)] = &[];

macro_rules! schema {
    ($name:ident, [$($k:literal),* $(,)?]) => {
        pub(super) const $name: Schema = Schema { keys: &[$($k),*], aliases: NO_ALIASES, hints: NO_HINTS };
    };
    ($name:ident, [$($k:literal),* $(,)?], $aliases:expr, $hints:expr) => {
        pub(super) const $name: Schema = Schema { keys: &[$($k),*], aliases: $aliases, hints: $hints };
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
pub(super) const SERVICE_ONLY_IN_JOB: &[(&str, &str)] = &[
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

impl Cx<'_> {
    pub(super) fn fields<'a>(
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
}

pub(super) fn unknown_key(key: &str, schema: &Schema) -> String {
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
