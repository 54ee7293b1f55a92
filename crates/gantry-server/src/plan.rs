//! A workflow file compiled into what the controller needs: per job, its graph edges, retry and
//! timeout policy, resources, and the container to run. Stored as JSON with the workflow, so the
//! controller never re-parses YAML and a server upgrade cannot change a running workflow.

use std::collections::BTreeMap;

use base64::Engine;
use gantry_api::agent::InjectedFile;
use gantry_spec::{EnvValue, FileSource, ImageRef, RetryOn, VolumeKind, Workflow};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkflowPlan {
    pub jobs: Vec<JobPlan>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobPlan {
    pub name: String,
    pub depends_on: Vec<String>,
    pub task_array: Option<(u32, u32)>,
    pub concurrency: Option<u32>,
    pub attempts: u32,
    pub retry_on_failure: bool,
    pub retry_on_node: bool,
    pub timeout_ms: Option<u64>,
    pub image: String,
    /// `secret://` holding the registry credential.
    #[serde(default)]
    pub image_secret: Option<String>,
    pub argv: Vec<String>,
    pub env: Vec<String>,
    pub cwd: Option<String>,
    /// (path in the container, volume name).
    pub mounts: Vec<(String, String)>,
    pub files: Vec<InjectedFile>,
    pub cores: u32,
    pub memory_bytes: Option<u64>,
    pub devices: BTreeMap<String, u32>,
    pub exclusive: bool,
}

impl WorkflowPlan {
    /// Every `secret://` the plan refers to.
    pub fn secret_refs(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .jobs
            .iter()
            .flat_map(|j| {
                j.image_secret.iter().cloned().chain(
                    j.env
                        .iter()
                        .filter_map(|kv| kv.split_once('=').map(|(_, v)| v))
                        .filter(|v| v.starts_with("secret://"))
                        .map(str::to_string),
                )
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    pub fn job(&self, name: &str) -> Option<&JobPlan> {
        self.jobs.iter().find(|j| j.name == name)
    }
}

/// Where a script is placed in the container.
const SCRIPT_PATH: &str = "/.gantry/script";

/// The argv that runs a `script`: its `#!` line is honoured by naming the interpreter, so the
/// script file need not be executable (injected files are read-only bind mounts).
fn script_argv(script: &str) -> Vec<String> {
    let first = script.lines().next().unwrap_or("");
    let mut argv: Vec<String> = match first.strip_prefix("#!") {
        Some(rest) => rest.split_whitespace().map(str::to_string).collect(),
        None => vec![],
    };
    if argv.is_empty() {
        argv.push("/bin/sh".into());
    }
    argv.push(SCRIPT_PATH.into());
    argv
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

/// What the file asks for that Gantry cannot do yet (the submit is refused, naming each), and
/// hints it accepts but does not act on (reported as warnings).
#[derive(Debug, Default)]
pub struct Support {
    pub unsupported: Vec<String>,
    pub ignored: Vec<String>,
}

pub fn support(wf: &Workflow) -> Support {
    let mut s = Support::default();
    for name in wf.services.keys() {
        s.unsupported
            .push(format!("services.{name}: services are not supported yet"));
    }
    for name in wf.images.keys() {
        s.unsupported
            .push(format!("images.{name}: image builds are not supported yet"));
    }
    for (name, v) in &wf.volumes {
        match &v.kind {
            VolumeKind::Ephemeral => {}
            VolumeKind::Persistent { .. } => s.unsupported.push(format!(
                "volumes.{name}: persistent volumes are not supported yet"
            )),
            VolumeKind::Host { .. } => s
                .unsupported
                .push(format!("volumes.{name}: host volumes are not supported")),
        }
        if v.provisioner.is_some() {
            s.unsupported.push(format!(
                "volumes.{name}: storage provisioners are not supported yet"
            ));
        }
        if !v.ingress.is_empty() || !v.egress.is_empty() {
            s.unsupported.push(format!(
                "volumes.{name}: ingress/egress data transfers are not supported yet"
            ));
        }
    }
    for (name, j) in &wf.jobs {
        let at = format!("jobs.{name}");
        match &j.image {
            ImageRef::Uri {
                uri,
                secret,
                secrets,
                decryption_secret,
                ..
            } => {
                if !(uri.starts_with("docker://") || uri.starts_with("oci://")) {
                    s.unsupported.push(format!(
                        "{at}.image.uri: {uri:?}: only docker:// and oci:// images are supported"
                    ));
                }
                if !secrets.is_empty() || decryption_secret.is_some() {
                    s.unsupported.push(format!(
                        "{at}.image: `secrets` and `decryption-secret` are not supported yet (`secret` is)"
                    ));
                }
                if let Some(sec) = secret {
                    if !sec.starts_with("secret://") {
                        s.unsupported.push(format!(
                            "{at}.image.secret: {sec:?} is not a secret:// reference"
                        ));
                    }
                }
            }
            ImageRef::Build(b) => s.unsupported.push(format!(
                "{at}.image.build: {b}: image builds are not supported yet"
            )),
        }
        if j.multinode.is_some() {
            s.unsupported.push(format!(
                "{at}.multinode: multinode jobs are not supported yet"
            ));
        }
        if j.network.is_some() {
            s.unsupported
                .push(format!("{at}.network: job networking is not supported yet"));
        }
        if j.policy.restart.is_some() {
            s.ignored.push(format!("{at}.policy.restart: not acted on"));
        }
        let c = &j.resource.cpu;
        if c.affinity.is_some() || c.threads || c.sockets.is_some() {
            s.ignored.push(format!(
                "{at}.resource.cpu: affinity, threads and sockets are not acted on"
            ));
        }
        if !j.resource.annotations.is_empty() {
            s.ignored
                .push(format!("{at}.resource.annotations: not acted on"));
        }
        if j.preemptible.is_some() {
            s.ignored.push(format!("{at}.preemptible: not acted on"));
        }
    }
    if wf.preemptible.is_some() {
        s.ignored.push("preemptible: not acted on".into());
    }
    s
}

/// Compiles a validated workflow. Call [`support`] first: this assumes only supported features.
pub fn compile(wf: &Workflow) -> WorkflowPlan {
    let mut jobs = Vec::with_capacity(wf.jobs.len());
    for (name, j) in &wf.jobs {
        let mut files: Vec<InjectedFile> = j
            .files
            .iter()
            .map(|(dest, src)| {
                let content = match src {
                    FileSource::File(f) => wf.files.get(f).cloned().unwrap_or_default(),
                    FileSource::Inline(c) => c.clone(),
                };
                InjectedFile {
                    target: dest.clone(),
                    content: b64(&content),
                }
            })
            .collect();
        let mut argv = j.command.clone();
        if let Some(script) = &j.script {
            argv = script_argv(script);
            files.push(InjectedFile {
                target: SCRIPT_PATH.into(),
                content: b64(script),
            });
        }
        argv.extend(j.args.iter().cloned());
        // Secret values stay references here; they are filled in only when sent to an agent.
        let env = j
            .env
            .iter()
            .map(|e| match &e.value {
                EnvValue::Plain(v) | EnvValue::Secret(v) => format!("{}={v}", e.name),
            })
            .collect();
        let cores = j.resource.cpu.cores.max(1);
        let memory_bytes = j.resource.memory.size.map(|m| {
            if j.resource.memory.by_core {
                m.saturating_mul(cores as u64)
            } else {
                m
            }
        });
        jobs.push(JobPlan {
            name: name.clone(),
            depends_on: j.depends_on.iter().map(|d| d.name.clone()).collect(),
            task_array: j.task_array.as_ref().map(|t| (t.start, t.end)),
            concurrency: j.task_array.as_ref().and_then(|t| t.concurrency),
            attempts: j.policy.retry.attempts.max(1),
            retry_on_failure: j.policy.retry.on.contains(&RetryOn::Failure),
            retry_on_node: j.policy.retry.on.contains(&RetryOn::Node),
            timeout_ms: j.policy.timeout_execute.map(|d| d.as_millis() as u64),
            image: j.image.uri().unwrap_or_default().to_string(),
            image_secret: match &j.image {
                ImageRef::Uri { secret, .. } => secret.clone(),
                ImageRef::Build(_) => None,
            },
            argv,
            env,
            cwd: j.cwd.clone(),
            mounts: j
                .mounts
                .iter()
                .map(|(path, m)| (path.clone(), m.volume.clone()))
                .collect(),
            files,
            cores,
            memory_bytes,
            devices: j.resource.devices.clone(),
            exclusive: j.resource.exclusive,
        });
    }
    // Scheduling order follows the graph, so earlier steps are placed first.
    let order = wf.topo_order();
    jobs.sort_by_key(|j| {
        order
            .iter()
            .position(|n| *n == j.name)
            .unwrap_or(usize::MAX)
    });
    WorkflowPlan { jobs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_argv_honours_the_shebang() {
        assert_eq!(
            script_argv("#!/bin/bash -e\necho"),
            ["/bin/bash", "-e", SCRIPT_PATH]
        );
        assert_eq!(script_argv("#! /bin/sh\necho"), ["/bin/sh", SCRIPT_PATH]);
        assert_eq!(script_argv("echo hi"), ["/bin/sh", SCRIPT_PATH]);
        assert_eq!(script_argv(""), ["/bin/sh", SCRIPT_PATH]);
    }
}
