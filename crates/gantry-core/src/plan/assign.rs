//! What an agent is told to run for one placed task (its [`Assignment`]), built from the plan,
//! the placement and the few facts of the server and the workflow's running containers that
//! the caller reads: so the whole of what a container is given can be checked here, without a
//! store or a server.

use gantry_api::agent::{
    Assignment, BuildSpec, HostEntry, ImageSource, NetworkSpec, Resources, ServiceSpec,
    TransferSpec, VolumeMount,
};
use uuid::Uuid;

use super::{volume_dir, EndpointPlan, JobPlan, WorkflowPlan};

/// Marks an exclusive attempt in its resources, so the node stays whole for it.
pub const EXCLUSIVE: &str = "gantry.io/exclusive";

/// Where the server is reached, as containers are told it.
#[derive(Debug, Clone, Copy)]
pub struct Site<'a> {
    /// The server's public base URL, without a trailing `/`.
    pub public_url: &'a str,
    /// Subdomain endpoints are served as `NAME-WORKFLOW.<endpoint_domain>`.
    pub endpoint_domain: &'a str,
    /// The object cache's registry (`host[:port]`), which builds push to.
    pub registry_host: &'a str,
}

/// One task being placed, with what its assignment needs of the workflow around it.
#[derive(Debug, Clone)]
pub struct Placed<'a> {
    pub plan: &'a WorkflowPlan,
    pub workflow: Uuid,
    /// The workflow's group: the container's `FB_ACCOUNT_ID`.
    pub group: &'a str,
    /// The task: its job and index, and how many attempts it has made before this one.
    pub job: &'a str,
    pub index: Option<u32>,
    pub attempts_made: u32,
    /// (service job, address) of each service whose task has a live attempt with an address.
    pub services: &'a [(&'a str, &'a str)],
    /// The addresses of the workflow's running containers, sorted, without duplicates.
    pub peers: &'a [String],
}

/// A task's name in events and assignments: `job`, or `job[index]`.
pub fn task_label(job: &str, index: Option<u32>) -> String {
    match index {
        Some(i) => format!("{job}[{i}]"),
        None => job.to_string(),
    }
}

/// Where users reach an endpoint: (URL, path the app sees). Per-workflow path endpoints keep
/// the full path; persistent ones (`/e/NAME/`) and subdomains are stripped to `/`.
pub fn endpoint_location(site: &Site, wf: Uuid, e: &EndpointPlan) -> (String, String) {
    let base = site.public_url;
    match (&e.attach, e.kind.as_str()) {
        (Some(name), _) => (format!("{base}/e/{name}/"), "/".into()),
        (None, "subdomain") => {
            let (scheme, port) = scheme_and_port(base);
            (
                format!(
                    "{scheme}://{}-{}.{}{port}/",
                    e.name,
                    &wf.to_string()[..8],
                    site.endpoint_domain
                ),
                "/".into(),
            )
        }
        (None, _) => {
            let path = format!("/w/{wf}/{}/", e.name);
            (format!("{base}{path}"), path)
        }
    }
}

/// The scheme of a base URL and its explicit port as `:PORT` (empty without one), for URLs on
/// other hosts of the same server: `https://gantry.example.com` has no port to keep.
fn scheme_and_port(base: &str) -> (&str, String) {
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    let authority = rest.split('/').next().unwrap_or(rest);
    let port = authority
        .rsplit_once(':')
        .filter(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .map(|(_, p)| format!(":{p}"))
        .unwrap_or_default();
    (scheme, port)
}

fn env_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The assignment of one attempt of `p`'s task on a node of `pool`. Its secrets stay
/// references, its egress, cached build steps and gang are the caller's to fill in.
///
/// Panics if the plan has no job of the task's: a placed task always has one.
pub fn assignment(site: &Site, p: &Placed, attempt_id: Uuid, pool: &str) -> Assignment {
    let jp = p.plan.job(p.job).expect("placed tasks have a job plan");
    let mut env = jp.env.clone();
    if let Some(svc) = &jp.service {
        for e in &svc.endpoints {
            let (url, path) = endpoint_location(site, p.workflow, e);
            env.push(format!("FB_ENDPOINT_URL_{}={url}", env_name(&e.name)));
            env.push(format!("FB_ENDPOINT_PATH_{}={path}", env_name(&e.name)));
        }
    }
    // Every container of a workflow with services is on its node's bridge (or, with host
    // networking, in its node's namespace), reaches each ready service as `<service>.svc`,
    // and its workflow's other containers (the node's firewall keeps it from everyone
    // else's). A host-network service's address is its node's, as its agent reports it, so
    // the same entry names it; its node ports are listed for the firewall to let through.
    // Egress is filled in when it is sent.
    let services: Vec<(&JobPlan, &str)> = p
        .plan
        .jobs
        .iter()
        .filter(|j| j.service.is_some())
        .filter_map(|j| {
            let (_, address) = p.services.iter().find(|(name, _)| *name == j.name)?;
            Some((j, *address))
        })
        .collect();
    let network = (p.plan.has_services() || jp.host_network).then(|| NetworkSpec {
        egress: true,
        node_services: services
            .iter()
            .flat_map(|(j, address)| {
                j.host_ports
                    .iter()
                    .map(move |port| format!("{address}:{port}"))
            })
            .collect(),
        peers: p.peers.to_vec(),
        hosts: services
            .iter()
            .map(|(j, address)| HostEntry {
                name: format!("{}.svc", j.name),
                address: address.to_string(),
            })
            .collect(),
    });
    env.push(format!("FB_WORKFLOW_ID={}", p.workflow));
    env.push(format!("FB_ACCOUNT_ID={}", p.group));
    // A multinode member's index is its rank of node, not an array's FB_TASK_ID.
    if let (Some(i), None) = (p.index, &jp.multinode) {
        env.push(format!("FB_TASK_ID={i}"));
    }
    let mut devices = jp.devices.clone();
    if jp.exclusive {
        devices.insert(EXCLUSIVE.into(), 1);
    }
    Assignment {
        attempt_id,
        workflow_id: p.workflow,
        task: task_label(p.job, p.index),
        attempt: p.attempts_made + 1,
        image: ImageSource {
            uri: jp.image.clone(),
            credential: None,
            secret: jp.image_secret.clone(),
        },
        argv: jp.argv.clone(),
        env,
        cwd: jp.cwd.clone(),
        mounts: jp
            .mounts
            .iter()
            .map(|(target, volume)| {
                let (source, root) = volume_dir(p.plan, pool, p.workflow, volume);
                VolumeMount {
                    target: target.clone(),
                    source,
                    root,
                    read_only: false,
                }
            })
            .collect(),
        files: jp.files.clone(),
        resources: Resources {
            cpus: jp.cores as f64,
            memory_bytes: jp.memory_bytes,
            devices,
        },
        network,
        service: jp.service.as_ref().map(|s| ServiceSpec {
            ports: s.ports.clone(),
            readiness: s.readiness.clone(),
        }),
        build: jp.build.as_ref().and_then(|name| {
            let b = p.plan.builds.iter().find(|b| &b.name == name)?;
            Some(BuildSpec {
                registry: site.registry_host.to_string(),
                repository: b.repository.clone(),
                tag: b.final_key(),
                base: ImageSource {
                    uri: b.base.clone(),
                    credential: None,
                    secret: None,
                },
                steps: b.steps.clone(),
                cached: vec![],
                env: b.env.clone(),
                network: "none".into(),
                timeout_secs: 3600,
            })
        }),
        transfer: jp.transfer.as_ref().map(|t| {
            let (volume, root) = volume_dir(p.plan, pool, p.workflow, &t.volume);
            TransferSpec {
                volume,
                root,
                ..t.clone()
            }
        }),
        host_network: jp.host_network,
        multinode: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{compile, support, ResolvedVolume};

    const WORKFLOW: &str = r#"version: v4
volumes:
  scratch: {}
  results: {use: persistent, name: results}
jobs:
  sweep:
    image: {uri: docker://alpine, secret: secret://user/reg}
    command: [echo, hi]
    env: [MODE=fast]
    task-array: {start: 1, end: 4}
    mounts: {/scratch: scratch, /out: results}
    resource: {cpu: {cores: 2}, exclusive: true}
    depends-on: [{name: api, status: RUNNING}]
services:
  api:
    image: {uri: docker://alpine}
    network:
      ports: [{name: http, port: 8080}]
      endpoints:
        - {name: web-ui, port-name: http, type: subdomain}
        - {name: docs, port-name: http}
        - {name: chat, port-name: http, attach: chat}
  db:
    image: {uri: docker://alpine}
    network: {host: true, ports: [{name: pg, port: 5432}]}
"#;

    const SITE: Site = Site {
        public_url: "https://gantry.example.com:8443",
        endpoint_domain: "apps.example.com",
        registry_host: "gantry.example.com:8443",
    };

    fn plan() -> WorkflowPlan {
        let wf = gantry_spec::parse(WORKFLOW).unwrap();
        let s = support(&wf);
        assert!(s.unsupported.is_empty(), "{:?}", s.unsupported);
        let mut plan = compile(&wf);
        plan.persistent.get_mut("results").unwrap().resolved = Some(ResolvedVolume {
            id: Uuid::nil(),
            root: Some("/lustre".into()),
            dir: "vols/results".into(),
            pool: None,
        });
        plan
    }

    fn has(env: &[String], var: &str) -> bool {
        env.iter().any(|e| e == var)
    }

    #[test]
    fn a_task_array_member_gets_its_index_volumes_resources_and_the_running_services() {
        let plan = plan();
        let wf = Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0);
        let attempt = Uuid::from_u128(7);
        let peers = vec!["10.0.0.5".to_string(), "10.0.1.7".to_string()];
        // db (host network) and api run; their addresses are their attempts'.
        let services = [("db", "192.168.1.20"), ("api", "10.0.0.5")];
        let p = Placed {
            plan: &plan,
            workflow: wf,
            group: "physics",
            job: "sweep",
            index: Some(3),
            attempts_made: 1,
            services: &services,
            peers: &peers,
        };
        let a = assignment(&SITE, &p, attempt, "gpu");
        assert_eq!((a.attempt_id, a.workflow_id), (attempt, wf));
        assert_eq!(a.task, "sweep[3]");
        assert_eq!(a.attempt, 2, "the attempt after the one made");
        assert_eq!(a.image.uri, "docker://alpine");
        assert_eq!(a.image.secret.as_deref(), Some("secret://user/reg"));
        assert_eq!(a.argv, ["echo", "hi"]);
        assert_eq!(
            a.env,
            [
                "MODE=fast".to_string(),
                format!("FB_WORKFLOW_ID={wf}"),
                "FB_ACCOUNT_ID=physics".into(),
                "FB_TASK_ID=3".into(),
            ]
        );
        let mounts: Vec<(&str, &str, Option<&str>)> = a
            .mounts
            .iter()
            .map(|m| (m.target.as_str(), m.source.as_str(), m.root.as_deref()))
            .collect();
        let scratch = format!("gpu/ephemeral/{wf}/scratch");
        assert_eq!(
            mounts,
            [
                ("/out", "vols/results", Some("/lustre")),
                ("/scratch", scratch.as_str(), None),
            ],
            "a persistent volume where it was resolved, an ephemeral one in the pool's root"
        );
        assert_eq!(a.resources.cpus, 2.0);
        assert_eq!(a.resources.devices.get(EXCLUSIVE), Some(&1));
        let net = a.network.expect("a workflow with services is networked");
        assert!(net.egress);
        assert_eq!(net.peers, peers);
        let mut hosts: Vec<(&str, &str)> = net
            .hosts
            .iter()
            .map(|h| (h.name.as_str(), h.address.as_str()))
            .collect();
        hosts.sort();
        assert_eq!(hosts, [("api.svc", "10.0.0.5"), ("db.svc", "192.168.1.20")]);
        assert_eq!(
            net.node_services,
            ["192.168.1.20:5432"],
            "only a host-network service's node ports"
        );
        assert!(a.service.is_none() && a.build.is_none() && a.transfer.is_none());
        assert!(!a.host_network && a.multinode.is_none());
    }

    #[test]
    fn a_service_is_told_where_users_reach_each_of_its_endpoints() {
        let plan = plan();
        let wf = Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0);
        let p = Placed {
            plan: &plan,
            workflow: wf,
            group: "physics",
            job: "api",
            index: None,
            attempts_made: 0,
            services: &[],
            peers: &[],
        };
        let a = assignment(&SITE, &p, Uuid::from_u128(8), "default");
        assert_eq!((a.task.as_str(), a.attempt), ("api", 1));
        for var in [
            "FB_ENDPOINT_URL_WEB_UI=https://web-ui-12345678.apps.example.com:8443/".to_string(),
            "FB_ENDPOINT_PATH_WEB_UI=/".into(),
            format!("FB_ENDPOINT_URL_DOCS=https://gantry.example.com:8443/w/{wf}/docs/"),
            format!("FB_ENDPOINT_PATH_DOCS=/w/{wf}/docs/"),
            "FB_ENDPOINT_URL_CHAT=https://gantry.example.com:8443/e/chat/".into(),
            "FB_ENDPOINT_PATH_CHAT=/".into(),
        ] {
            assert!(has(&a.env, &var), "{var} in {:?}", a.env);
        }
        assert!(
            !a.env.iter().any(|e| e.starts_with("FB_TASK_ID=")),
            "a lone task has no index"
        );
        let svc = a.service.expect("a service's ports and probe");
        assert_eq!(svc.ports.len(), 1);
        assert_eq!(svc.ports[0].port, 8080);
        let net = a.network.unwrap();
        assert!(
            net.hosts.is_empty() && net.node_services.is_empty(),
            "nothing runs yet"
        );
        assert_eq!(a.resources.devices.get(EXCLUSIVE), None);
    }

    #[test]
    fn scheme_and_port_keeps_only_an_explicit_port() {
        assert_eq!(
            scheme_and_port("http://127.0.0.1:8080"),
            ("http", ":8080".to_string())
        );
        assert_eq!(
            scheme_and_port("https://gantry.example.com"),
            ("https", String::new())
        );
        assert_eq!(
            scheme_and_port("https://gantry.example.com:8443/base"),
            ("https", ":8443".to_string())
        );
        assert_eq!(scheme_and_port("http://[::1]"), ("http", String::new()));
        assert_eq!(
            scheme_and_port("http://[::1]:9000"),
            ("http", ":9000".to_string())
        );
    }
}
