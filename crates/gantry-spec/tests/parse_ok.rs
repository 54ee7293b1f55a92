//! Valid files: what the typed workflow holds after parsing and the merge of
//! `defaults`.

use gantry_spec::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

fn fixture(name: &str) -> Workflow {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    match parse_file(&path) {
        Ok(wf) => wf,
        Err(diags) => panic!("{}", render_all(name, &diags)),
    }
}

fn env(pairs: &[(&str, &str)]) -> Vec<EnvVar> {
    pairs
        .iter()
        .map(|(k, v)| EnvVar {
            name: k.to_string(),
            value: match v.strip_prefix("secret://") {
                Some(_) => EnvValue::Secret(v.to_string()),
                None => EnvValue::Plain(v.to_string()),
            },
        })
        .collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn minimal_job() {
    let wf = parse("version: v4\njobs:\n  hello:\n    image: {uri: docker://alpine}\n").unwrap();
    let job = &wf.jobs["hello"];
    assert_eq!(job.name, "hello");
    assert_eq!(job.pos, Pos::new(3, 3));
    assert_eq!(job.image.uri(), Some("docker://alpine"));
    assert!(job.command.is_empty() && job.script.is_none());
    assert_eq!(job.resource, Resource::default());
    assert_eq!(job.resource.cpu.cores, 1);
    assert_eq!(
        job.policy.retry,
        Retry {
            attempts: 1,
            on: vec![RetryOn::Failure]
        }
    );
    assert_eq!(wf.topo_order(), vec!["hello"]);
}

#[test]
fn top_level_sections() {
    let wf = fixture("full.yaml");
    assert_eq!(wf.version, "v4");
    assert_eq!(wf.annotations, map(&[("scheduling.zone", "east")]));
    assert_eq!(
        wf.files.keys().collect::<Vec<_>>(),
        vec!["config.ini", "req.txt"]
    );
    assert_eq!(wf.files["config.ini"], "[main]\nthreads = 4\n");
    assert_eq!(
        wf.jobs.keys().collect::<Vec<_>>(),
        vec!["prepare", "simulate", "sweep", "train"]
    );
    assert_eq!(
        wf.services.keys().collect::<Vec<_>>(),
        vec!["gateway", "model-server", "shell"]
    );
}

/// What the vendor's catalog writes: `fds` keeps a v1 `name:` beside an ephemeral reference
/// (ignored, as Fuzzball does), and legacy persistent references are made on first use while
/// v4 `use: persistent` names a volume that must exist.
#[test]
fn catalog_volume_forms() {
    let wf = parse(
        r#"version: v4
volumes:
  data: {name: data, reference: volume://user/ephemeral}
  suffixed: {reference: volume://user/ephemeral/ignored}
  mine: {reference: volume://user/persistent}
  ours: {reference: volume://group/persistent}
  named: {use: persistent, name: results}
jobs:
  j: {image: {uri: docker://alpine}, command: [true]}
"#,
    )
    .unwrap_or_else(|d| panic!("{}", render_all("catalog", &d)));
    let v = &wf.volumes;
    assert_eq!(v["data"].kind, VolumeKind::Ephemeral);
    assert_eq!(v["suffixed"].kind, VolumeKind::Ephemeral);
    assert_eq!(
        v["mine"].kind,
        VolumeKind::Persistent {
            scope: Scope::User,
            name: "default".into()
        }
    );
    assert_eq!(
        v["ours"].kind,
        VolumeKind::Persistent {
            scope: Scope::Group,
            name: "default".into()
        }
    );
    assert!(v["mine"].made_on_use && v["ours"].made_on_use);
    assert_eq!(
        v["named"].kind,
        VolumeKind::Persistent {
            scope: Scope::User,
            name: "results".into()
        }
    );
    assert!(!v["named"].made_on_use);
    assert!(!v["data"].made_on_use);
}

#[test]
fn volumes_in_every_form() {
    let wf = fixture("full.yaml");
    let v = &wf.volumes;
    assert_eq!(v["scratch"].kind, VolumeKind::Ephemeral);
    assert_eq!(v["plain"].kind, VolumeKind::Ephemeral);
    assert_eq!(v["work"].kind, VolumeKind::Ephemeral);
    assert_eq!(
        v["models"].kind,
        VolumeKind::Persistent {
            scope: Scope::Group,
            name: "models".into()
        }
    );
    assert_eq!(
        v["home"].kind,
        VolumeKind::Persistent {
            scope: Scope::User,
            name: "default".into()
        }
    );
    assert_eq!(
        v["cache"].kind,
        VolumeKind::Persistent {
            scope: Scope::User,
            name: "pip-cache".into()
        }
    );
    assert_eq!(v["cache"].size, Some(10_000_000_000));
    assert!(v.values().all(|x| x.provisioner.is_none()));

    let ingress = &v["scratch"].ingress;
    assert_eq!(ingress.len(), 2);
    assert_eq!(ingress[0].source.uri, "https://example.com/data.tar.gz");
    assert_eq!(ingress[0].destination.uri, "file://data.tar.gz");
    assert_eq!(ingress[1].source.uri, "file://config.ini");
    let egress = &v["work"].egress;
    assert_eq!(egress[0].destination.uri, "s3://bucket/results.tar");
    assert_eq!(
        egress[0].destination.secret.as_deref(),
        Some("secret://user/S3_CREDS")
    );
}

#[test]
fn job_defaults_are_merged() {
    let wf = fixture("full.yaml");
    let prepare = &wf.jobs["prepare"];
    assert_eq!(prepare.display_name.as_deref(), Some("prepare"));
    // Top-level and `defaults.job` env first, the job's own last; the job
    // wins on LEVEL.
    assert_eq!(
        prepare.env,
        env(&[
            ("LANG", "C.UTF-8"),
            ("MODE", "batch"),
            ("LEVEL", "debug"),
            ("API_TOKEN", "secret://user/API_TOKEN"),
        ])
    );
    assert_eq!(prepare.mounts["/scratch"].volume, "scratch");
    assert_eq!(prepare.cwd.as_deref(), Some("/scratch"));
    assert_eq!(
        prepare.files["/etc/app/config.ini"],
        FileSource::File("config.ini".into())
    );
    assert!(prepare
        .script
        .as_deref()
        .unwrap()
        .starts_with("#!/bin/sh\n"));
    // Own timeout, retry from the defaults.
    assert_eq!(
        prepare.policy.timeout_execute,
        Some(Duration::from_secs(90))
    );
    assert_eq!(
        prepare.policy.retry,
        Retry {
            attempts: 2,
            on: vec![RetryOn::Failure]
        }
    );
    assert_eq!(prepare.resource.cpu.cores, 4);
    assert_eq!(prepare.resource.cpu.affinity, Some(Affinity::Numa));
    assert_eq!(prepare.resource.memory.size, Some(8 << 30));
    assert_eq!(prepare.resource.annotations, map(&[("node.pool", "batch")]));
    assert_eq!(
        prepare.image,
        ImageRef::Uri {
            uri: "docker://registry.example.com/tools:1.0".into(),
            secret: Some("secret://user/REGISTRY".into()),
            secrets: BTreeMap::new(),
            decryption_secret: None,
            cache: None,
            cache_ttl: None,
        }
    );

    let sweep = &wf.jobs["sweep"];
    // The job's own fields win field by field; the rest comes from defaults.
    assert_eq!(
        sweep.resource.cpu,
        Cpu {
            cores: 1,
            threads: true,
            affinity: Some(Affinity::Numa),
            sockets: None
        }
    );
    assert_eq!(
        sweep.resource.memory,
        Memory {
            size: Some(512 << 20),
            by_core: true
        }
    );
    assert_eq!(
        sweep.policy.timeout_execute,
        Some(Duration::from_secs(12 * 3600))
    );
    assert_eq!(
        sweep.command,
        vec!["/bin/sh", "-c", "echo task ${FB_TASK_ID}"]
    );
    assert_eq!(sweep.args, vec!["--fast"]);
    assert_eq!(
        sweep.task_array,
        Some(TaskArray {
            start: 1,
            end: 100,
            concurrency: Some(8)
        })
    );
    assert_eq!(sweep.task_array.as_ref().unwrap().len(), 100);
    assert_eq!(
        sweep.image.uri(),
        Some("oras://registry.example.com/sweep.sif:2")
    );
    // `requires` means "when it has finished".
    assert_eq!(sweep.depends_on.len(), 1);
    assert_eq!(sweep.depends_on[0].name, "prepare");
    assert_eq!(sweep.depends_on[0].status, DepStatus::Finished);
}

#[test]
fn multinode_devices_retry_and_network() {
    let wf = fixture("full.yaml");
    let sim = &wf.jobs["simulate"];
    assert_eq!(
        sim.multinode,
        Some(Multinode {
            nodes: 4,
            implementation: MultinodeImpl::OpenMpi,
            procs_per_node: Some(8)
        })
    );
    assert_eq!(
        sim.depends_on[0].description.as_deref(),
        Some("needs every sweep result")
    );
    assert_eq!(
        sim.mounts.keys().collect::<Vec<_>>(),
        vec!["/models", "/scratch"]
    );
    assert_eq!(sim.resource.devices.get("nvidia.com/gpu"), Some(&2));
    assert!(sim.resource.exclusive);
    assert_eq!(sim.resource.cpu.affinity, Some(Affinity::Socket));
    assert_eq!(
        sim.resource.annotations,
        map(&[
            ("node.pool", "batch"),
            ("nvidia.com/gpu.model", "NVIDIA H100")
        ])
    );
    assert_eq!(
        sim.policy.retry,
        Retry {
            attempts: 3,
            on: vec![RetryOn::Failure, RetryOn::Node]
        }
    );
    assert_eq!(
        sim.network,
        Some(JobNetwork {
            host: false,
            isolated: true,
            expose_tcp: vec![8080],
            expose_udp: vec![]
        })
    );
}

#[test]
fn host_network_jobs_and_the_camel_case_procs_per_node() {
    let wf = gantry_spec::parse(
        "version: v4\njobs:\n  mpi:\n    image: {uri: docker://alpine}\n    multinode: {nodes: 3, implementation: mpich, procsPerNode: 2}\n    network: {host: true}\n",
    )
    .unwrap_or_else(|d| panic!("{d:?}"));
    let mpi = &wf.jobs["mpi"];
    assert_eq!(
        mpi.multinode,
        Some(Multinode {
            nodes: 3,
            implementation: MultinodeImpl::Mpich,
            procs_per_node: Some(2)
        })
    );
    assert!(mpi.network.as_ref().is_some_and(|n| n.host));
}

#[test]
fn a_v1_file_keeps_multinode_and_host_networking() {
    let wf = gantry_spec::parse(
        "version: v1\njobs:\n  mpi:\n    image: {uri: docker://alpine}\n    multinode: {nodes: 2, implementation: openmpi}\n    network: {host: true}\nservices:\n  web:\n    image: {uri: docker://alpine}\n    network: {host: true}\n",
    )
    .unwrap_or_else(|d| panic!("{d:?}"));
    assert_eq!(wf.jobs["mpi"].multinode.as_ref().map(|m| m.nodes), Some(2));
    assert!(wf.jobs["mpi"].network.as_ref().is_some_and(|n| n.host));
    assert!(wf.services["web"].network.host);
}

#[test]
fn image_builds() {
    let wf = fixture("full.yaml");
    assert_eq!(wf.jobs["train"].image, ImageRef::Build("trainer".into()));
    let recipe = &wf.images["trainer"];
    assert_eq!(recipe.from, "docker://python:3.12-slim");
    assert_eq!(recipe.files["/opt/app/req.txt"], "req.txt");
    assert_eq!(recipe.run, vec!["pip install -r /opt/app/req.txt"]);
    assert_eq!(recipe.env, vec!["PYTHONUNBUFFERED=1"]);
    assert_eq!(recipe.scope, ImageScope::Group);
    assert_eq!(wf.builds_in_order(), vec!["trainer"]);
}

#[test]
fn services() {
    let wf = fixture("full.yaml");
    let ms = &wf.services["model-server"];
    assert!(ms.persist);
    // `/models: models` is the catalog's shorthand for `{volume: models}`.
    assert_eq!(ms.mounts["/models"].volume, "models");
    assert_eq!(ms.env, env(&[("LANG", "C.UTF-8"), ("MODE", "serve")]));
    assert_eq!(ms.resource.memory.size, Some(1 << 30));
    assert_eq!(
        ms.resource.cpu.cores, 1,
        "defaults.job does not reach services"
    );
    assert_eq!(ms.policy, Policy::default());
    assert!(ms.network.host);
    assert_eq!(
        ms.network.ports,
        vec![
            Port {
                name: "openai".into(),
                port: 8000,
                protocol: PortProtocol::Tcp
            },
            Port {
                name: "metrics".into(),
                port: 9000,
                protocol: PortProtocol::Tcp
            },
        ]
    );
    let ep = &ms.network.endpoints[0];
    assert_eq!(ep.name, "api");
    assert_eq!(ep.port_name, "openai");
    assert_eq!(ep.protocol, EndpointProtocol::Http);
    assert_eq!(ep.kind, EndpointKind::Subdomain);
    assert_eq!(ep.scope, Scope::Public);
    assert_eq!(ep.attach.as_deref(), Some("chat"));
    assert_eq!(
        ep.annotations,
        map(&[("description", "OpenAI-compatible API")])
    );

    let probe = ms.readiness_probe.as_ref().unwrap();
    assert_eq!(
        probe.kind,
        ProbeKind::HttpGet {
            path: "/health".into(),
            port: 8000,
            scheme: HttpScheme::Http,
            http_headers: vec![HttpHeader {
                name: "Authorization".into(),
                value: "Bearer token".into()
            }],
        }
    );
    assert_eq!(
        (
            probe.initial_delay_seconds,
            probe.period_seconds,
            probe.timeout_seconds
        ),
        (30, 5, 1)
    );
    assert_eq!((probe.success_threshold, probe.failure_threshold), (1, 60));

    let auto = ms.autoscaler.as_ref().unwrap();
    assert_eq!(auto.replicas, Some(Replicas { min: 0, max: 4 }));
    let metrics = auto.metrics.as_ref().unwrap();
    assert!(metrics.enabled);
    assert_eq!(
        (metrics.path.as_deref(), metrics.port, metrics.interval),
        (Some("/metrics"), Some(9000), Some(15))
    );
    assert_eq!(auto.scale_up.len(), 1);
    assert_eq!(auto.scale_up[0].cooldown_period, Some(60));
    assert_eq!(auto.scale_down.as_ref().unwrap().drain_period, Some(30));

    let gw = &wf.services["gateway"];
    assert_eq!(gw.depends_on[0].status, DepStatus::Running);
    let dc = gw.dynamic_config.as_ref().unwrap();
    assert_eq!(dc.path, "/etc/nginx/conf.d/upstream.conf");
    assert_eq!(dc.services, vec!["model-server"]);
    // Unset endpoint fields take the format's defaults.
    let web = &gw.network.endpoints[0];
    assert_eq!(
        (web.protocol, web.kind, web.scope),
        (EndpointProtocol::Http, EndpointKind::Path, Scope::Group)
    );
    let tcp = gw.readiness_probe.as_ref().unwrap();
    assert_eq!(tcp.kind, ProbeKind::TcpSocket { port: 80 });
    assert_eq!(
        (
            tcp.initial_delay_seconds,
            tcp.period_seconds,
            tcp.timeout_seconds,
            tcp.success_threshold,
            tcp.failure_threshold
        ),
        (0, 10, 1, 1, 3)
    );

    let shell = &wf.services["shell"];
    assert_eq!(
        shell.readiness_probe.as_ref().unwrap().kind,
        ProbeKind::Exec {
            command: vec!["test".into(), "-f".into(), "/tmp/ready".into()]
        }
    );
    assert_eq!(
        shell.policy.timeout_execute,
        Some(Duration::from_secs(8 * 3600))
    );
}

#[test]
fn graph() {
    let wf = fixture("full.yaml");
    assert_eq!(
        wf.topo_order(),
        vec![
            "model-server",
            "gateway",
            "prepare",
            "shell",
            "sweep",
            "simulate",
            "train"
        ]
    );
    assert_eq!(wf.dependents_of("model-server"), vec!["gateway", "train"]);
    assert_eq!(wf.dependents_of("train"), Vec::<&str>::new());
    assert_eq!(wf.dependencies_of("simulate")[0].name, "sweep");
    assert!(wf.dependencies_of("nope").is_empty());
    assert_eq!(wf.step_kind("train"), Some(StepKind::Job));
    assert_eq!(wf.step_kind("gateway"), Some(StepKind::Service));
    assert_eq!(wf.step_kind("nope"), None);
}

#[test]
fn positions_are_kept() {
    let wf = fixture("full.yaml");
    let train = &wf.jobs["train"];
    assert_eq!(train.pos, Pos::new(133, 3));
    assert_eq!(train.depends_on[0].pos, Pos::new(138, 15));
    assert_eq!(wf.volumes["scratch"].pos, Pos::new(40, 3));
    assert_eq!(wf.images["trainer"].pos, Pos::new(141, 3));
    assert_eq!(
        wf.services["model-server"].network.endpoints[0].pos,
        Pos::new(166, 11)
    );
}

#[test]
fn catalog_style_file() {
    let wf = fixture("catalog_style.yaml");
    let desktop = &wf.services["desktop"];
    assert_eq!(
        desktop.image.uri(),
        Some("oras://depot.example.com/desktop.sif:1")
    );
    assert_eq!(
        desktop.files["/usr/share/applications/tool.desktop"],
        FileSource::Inline("[Desktop Entry]\nName=Tool\n".into())
    );
    assert_eq!(desktop.mounts["/data"].volume, "data");
    assert_eq!(
        desktop.policy.timeout_execute,
        Some(Duration::from_secs(8 * 3600))
    );
    let analyse = &wf.jobs["analyse"];
    assert_eq!(analyse.mounts["/data"].volume, "data", "from defaults.job");
    assert_eq!(analyse.depends_on[0].status, DepStatus::Running);
    assert_eq!(analyse.resource.memory.size, Some(1_000_000_000));
    assert_eq!(wf.topo_order(), vec!["desktop", "analyse"]);
}

#[test]
fn yaml_anchors_and_merge_keys() {
    let src = "\
version: v4
defaults:
  job:
    resource: &res
      cpu: {cores: 3}
jobs:
  a:
    image: &img {uri: docker://alpine}
    resource: *res
  b:
    image: *img
    resource:
      <<: *res
      memory: {size: 1GB}
";
    let wf = parse(src).unwrap();
    assert_eq!(wf.jobs["b"].image.uri(), Some("docker://alpine"));
    assert_eq!(wf.jobs["b"].resource.cpu.cores, 3);
    assert_eq!(wf.jobs["b"].resource.memory.size, Some(1_000_000_000));
}

#[test]
fn vendor_only_keys_are_accepted() {
    let src = "\
version: v4
preemptible: true
defaults:
  mounts: {/shared: {volume: v}}
  resource: {cpu: {sockets: 1}}
volumes:
  v:
    use: fast-nvme
    annotations: {tier: fast}
  old:
    type: HOST
    path: /srv/data
jobs:
  j:
    image:
      uri: docker://alpine
      decryption-secret: secret://user/KEY
      cache: once
      cache-ttl: 3600
      secrets: {token: secret://user/T}
    preemptible: false
    policy: {restart: on-node-fault}
    network: {expose-udp: [5353]}
    resource: {memory: {size: 1GiB, byCore: true}}
services:
  s:
    image: {uri: docker://nginx}
    readiness-probe: {grpc: {port: 50051, service: health}}
    network:
      ports: [{name: g, port: 50051}]
      endpoints: [{name: g, port-name: g, protocol: grpc}]
";
    let wf = parse(src).unwrap_or_else(|d| panic!("{}", render_all("t", &d)));
    assert_eq!(wf.preemptible, Some(true));
    assert_eq!(wf.volumes["v"].provisioner.as_deref(), Some("fast-nvme"));
    assert_eq!(
        wf.volumes["old"].kind,
        VolumeKind::Host {
            path: "/srv/data".into()
        }
    );
    let j = &wf.jobs["j"];
    assert_eq!(j.mounts["/shared"].volume, "v");
    assert_eq!(j.resource.cpu.sockets, Some(1));
    assert!(j.resource.memory.by_core);
    assert_eq!(j.policy.restart, Some(RestartPolicy::OnNodeFault));
    assert_eq!(j.preemptible, Some(false));
    match &j.image {
        ImageRef::Uri {
            decryption_secret,
            cache,
            cache_ttl,
            secrets,
            ..
        } => {
            assert_eq!(decryption_secret.as_deref(), Some("secret://user/KEY"));
            assert_eq!(*cache, Some(CachePolicy::Once));
            assert_eq!(*cache_ttl, Some(3600));
            assert_eq!(secrets["token"], "secret://user/T");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        wf.services["s"].readiness_probe.as_ref().unwrap().kind,
        ProbeKind::Grpc {
            port: 50051,
            service: Some("health".into())
        }
    );
}

#[test]
fn serializes_and_round_trips() {
    let wf = fixture("full.yaml");
    let json = serde_json::to_string(&wf).unwrap();
    let back: Workflow = serde_json::from_str(&json).unwrap();
    assert_eq!(back, wf);
}

#[test]
fn defaults_layers_precedence() {
    // The step's own value wins over `defaults.job`/`defaults.service`,
    // which win over the workflow-wide `defaults`.
    let src = "\
version: v4
defaults:
  env: [A=top, B=top]
  resource: {cpu: {cores: 2}, memory: {size: 1GB}}
  mounts: {/t: {volume: v}}
  job:
    env: [B=job]
    resource: {cpu: {cores: 4}}
  service:
    env: [B=svc]
volumes: {v: {}}
jobs:
  j: {image: {uri: docker://a}}
services:
  s: {image: {uri: docker://a}, resource: {memory: {size: 2GB}}}
";
    let wf = parse(src).unwrap();
    let (j, s) = (&wf.jobs["j"], &wf.services["s"]);
    assert_eq!(j.env, env(&[("A", "top"), ("B", "job")]));
    assert_eq!(s.env, env(&[("A", "top"), ("B", "svc")]));
    assert_eq!(
        (j.resource.cpu.cores, j.resource.memory.size),
        (4, Some(1_000_000_000))
    );
    assert_eq!(
        (s.resource.cpu.cores, s.resource.memory.size),
        (2, Some(2_000_000_000))
    );
    assert_eq!(j.mounts["/t"].volume, "v");
    assert_eq!(s.mounts["/t"].volume, "v");
}

#[test]
fn task_array_ids() {
    let ta = TaskArray {
        start: 3,
        end: 5,
        concurrency: None,
    };
    assert_eq!(ta.len(), 3);
    assert_eq!(ta.ids().collect::<Vec<_>>(), vec![3, 4, 5]);
    let full = TaskArray {
        start: 0,
        end: u32::MAX,
        concurrency: None,
    };
    assert_eq!(full.len(), 1 << 32);
}
