//! A supported workflow compiled into its plan: each step's container, policy and resources.

use gantry_api::agent::{InjectedFile, Probe, ProbeCheck, ServicePort};
use gantry_api::EndpointScope;
use gantry_spec::{
    DepStatus, EndpointKind, EnvValue, FileSource, HttpScheme, ImageRef, MultinodeImpl, ProbeKind,
    RetryOn, Scope, Workflow,
};

use super::b64;
use super::steps::steps;
use super::volumes::{attach_transfers, persistent};
use super::{DepPlan, EndpointPlan, JobPlan, MultinodePlan, ServicePlan, WorkflowPlan};

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

fn endpoint_scope(s: Scope) -> EndpointScope {
    match s {
        Scope::User => EndpointScope::User,
        Scope::Group => EndpointScope::Group,
        Scope::Organization => EndpointScope::Organization,
        Scope::Public => EndpointScope::Public,
    }
}

fn service_plan(s: &gantry_spec::Service) -> ServicePlan {
    let ports: Vec<ServicePort> = s
        .network
        .ports
        .iter()
        .map(|p| ServicePort {
            name: p.name.clone(),
            port: p.port,
            protocol: format!("{:?}", p.protocol).to_lowercase(),
        })
        .collect();
    let readiness = s.readiness_probe.as_ref().and_then(|p| {
        let check = match &p.kind {
            ProbeKind::Exec { command } => ProbeCheck::Exec {
                command: command.clone(),
            },
            ProbeKind::HttpGet {
                path,
                port,
                scheme,
                http_headers,
            } => ProbeCheck::HttpGet {
                path: path.clone(),
                port: *port,
                scheme: match scheme {
                    HttpScheme::Http => "http".into(),
                    HttpScheme::Https => "https".into(),
                },
                headers: http_headers
                    .iter()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect(),
            },
            ProbeKind::TcpSocket { port } => ProbeCheck::TcpSocket { port: *port },
            ProbeKind::Grpc { .. } => return None,
        };
        Some(Probe {
            check,
            initial_delay_seconds: p.initial_delay_seconds,
            period_seconds: p.period_seconds.max(1),
            timeout_seconds: p.timeout_seconds.max(1),
            success_threshold: p.success_threshold.max(1),
            failure_threshold: p.failure_threshold.max(1),
        })
    });
    let endpoints = s
        .network
        .endpoints
        .iter()
        .map(|e| EndpointPlan {
            name: e.name.clone(),
            port: ports
                .iter()
                .find(|p| p.name == e.port_name)
                .map(|p| p.port)
                .unwrap_or_default(),
            kind: match e.kind {
                EndpointKind::Path => "path".into(),
                EndpointKind::Subdomain => "subdomain".into(),
            },
            scope: endpoint_scope(e.scope),
            attach: e.attach.clone(),
        })
        .collect();
    ServicePlan {
        persist: s.persist,
        ports,
        readiness,
        endpoints,
    }
}

/// Compiles a validated workflow. Call [`support`](super::support) first: this assumes only
/// supported features.
pub fn compile(wf: &Workflow) -> WorkflowPlan {
    let mut jobs = Vec::with_capacity(wf.jobs.len() + wf.services.len());
    for st in steps(wf) {
        let mut files: Vec<InjectedFile> = st
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
        let mut argv = st.command.to_vec();
        if let Some(script) = st.script {
            argv = script_argv(script);
            files.push(InjectedFile {
                target: SCRIPT_PATH.into(),
                content: b64(script),
            });
        }
        argv.extend(st.args.iter().cloned());
        // Secret values stay references here; they are filled in only when sent to an agent.
        let env = st
            .env
            .iter()
            .map(|e| match &e.value {
                EnvValue::Plain(v) | EnvValue::Secret(v) => format!("{}={v}", e.name),
            })
            .collect();
        let cores = st.resource.cpu.cores.max(1);
        let memory_bytes = st.resource.memory.size.map(|m| {
            if st.resource.memory.by_core {
                m.saturating_mul(cores as u64)
            } else {
                m
            }
        });
        jobs.push(JobPlan {
            name: st.name.to_string(),
            depends_on: st
                .depends_on
                .iter()
                .map(|d| DepPlan {
                    name: d.name.clone(),
                    running: d.status == DepStatus::Running,
                })
                .collect(),
            task_array: st.task_array.map(|t| (t.start, t.end)),
            concurrency: st.task_array.and_then(|t| t.concurrency),
            attempts: st.policy.retry.attempts.max(1),
            retry_on_failure: st.policy.retry.on.contains(&RetryOn::Failure),
            retry_on_node: st.policy.retry.on.contains(&RetryOn::Node),
            timeout_ms: st.policy.timeout_execute.map(|d| d.as_millis() as u64),
            image: st.image.uri().unwrap_or_default().to_string(),
            image_secret: match st.image {
                ImageRef::Uri { secret, .. } => secret.clone(),
                ImageRef::Build(_) => None,
            },
            argv,
            env,
            cwd: st.cwd.map(str::to_string),
            mounts: st
                .mounts
                .iter()
                .map(|(path, m)| (path.clone(), m.volume.clone()))
                .collect(),
            files,
            cores,
            memory_bytes,
            devices: st.resource.devices.clone(),
            exclusive: st.resource.exclusive,
            service: st.service.map(service_plan),
            image_build: st.image.build_name().map(str::to_string),
            build: None,
            transfer: None,
            multinode: st.multinode.map(|m| MultinodePlan {
                nodes: m.nodes,
                implementation: match m.implementation {
                    MultinodeImpl::OpenMpi => "openmpi",
                    MultinodeImpl::Mpich => "mpich",
                    MultinodeImpl::Gasnet => "gasnet",
                    MultinodeImpl::Generic => "generic",
                }
                .into(),
                procs_per_node: m.procs_per_node,
            }),
            host_network: st.host_network(),
            annotations: st.resource.annotations.clone(),
            host_ports: match st.service {
                Some(svc) if svc.network.host => svc.network.ports.iter().map(|p| p.port).collect(),
                _ => vec![],
            },
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
    let persistent = persistent(wf);
    attach_transfers(wf, &mut jobs);
    WorkflowPlan {
        jobs,
        builds: vec![],
        persistent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::support;

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

    #[test]
    fn multinode_and_host_network_compile_into_the_plan() {
        let wf = gantry_spec::parse(
            r#"version: v4
jobs:
  mpi:
    image: {uri: docker://alpine}
    command: [hostname]
    multinode: {nodes: 3, implementation: ompi, procs-per-node: 2}
    resource:
      cpu: {cores: 4}
      annotations: {nvidia.com/gpu.model: T4, team: a}
  hostjob:
    image: {uri: docker://alpine}
    network: {host: true}
services:
  web:
    image: {uri: docker://alpine}
    network:
      host: true
      ports: [{name: http, port: 8080}, {name: dns, port: 5353, protocol: udp}]
  plain:
    image: {uri: docker://alpine}
    network:
      ports: [{name: http, port: 80}]
"#,
        )
        .unwrap();
        let s = support(&wf);
        assert!(s.unsupported.is_empty(), "{:?}", s.unsupported);
        assert!(
            !s.ignored.iter().any(|w| w.contains("annotations")),
            "which annotations are acted on is the cluster's setting: {:?}",
            s.ignored
        );
        let p = compile(&wf);
        let mpi = p.job("mpi").unwrap();
        assert_eq!(
            mpi.multinode,
            Some(MultinodePlan {
                nodes: 3,
                implementation: "openmpi".into(),
                procs_per_node: Some(2)
            })
        );
        assert!(mpi.host_network, "members share their node's network");
        assert_eq!(mpi.task_indexes(), Some(0..=2));
        assert_eq!(mpi.annotations.len(), 2);
        assert_eq!(mpi.annotations["nvidia.com/gpu.model"], "T4");
        assert!(mpi.host_ports.is_empty());
        let hostjob = p.job("hostjob").unwrap();
        assert!(hostjob.host_network && hostjob.multinode.is_none());
        assert_eq!(hostjob.task_indexes(), None);
        let web = p.job("web").unwrap();
        assert!(web.host_network);
        assert_eq!(web.host_ports, [8080, 5353]);
        let plain = p.job("plain").unwrap();
        assert!(!plain.host_network && plain.host_ports.is_empty());
        // A plan stored before issue 15 reads back as single-node, bridge-networked.
        let mut old = serde_json::to_value(plain).unwrap();
        for k in ["multinode", "host_network", "annotations", "host_ports"] {
            old.as_object_mut().unwrap().remove(k);
        }
        let back: JobPlan = serde_json::from_value(old).unwrap();
        assert!(!back.host_network && back.multinode.is_none());
    }
}
