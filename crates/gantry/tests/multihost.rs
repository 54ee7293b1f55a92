//! Gantry across hosts: a `gantry server` on a test bridge and agents on hosts of their own
//! (network namespaces joined to the bridge by veth pairs, each with its own address and the
//! pool's storage root bind-mounted; `common::hosts`), so that server-agent traffic, container
//! networking, endpoints, multinode members, data staging and node loss cross a network
//! between addresses instead of one host's loopback. Real server, agents and runc; needs root
//! and iproute2.

mod common;

use common::hosts::Hosts;
use common::Cluster;
use serde_json::Value;
use std::collections::BTreeSet;

fn attempts(t: &Value) -> &Vec<Value> {
    t["attempts"].as_array().unwrap()
}

/// The node of a task's last attempt.
fn node_of(t: &Value) -> String {
    attempts(t).last().unwrap()["node"]
        .as_str()
        .unwrap_or_else(|| panic!("no node: {t:#}"))
        .to_string()
}

fn tasks_of<'a>(d: &'a Value, job: &str) -> Vec<&'a Value> {
    let mut ts: Vec<&Value> = d["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["job"] == job)
        .collect();
    ts.sort_by_key(|t| t["index"].as_u64());
    ts
}

#[test]
fn agents_on_three_hosts_register_at_their_addresses_and_share_a_workflow() {
    let h = Hosts::start(3, "30s");
    let c = &h.cluster;

    let nodes = c.json(&["node", "list"]);
    assert_eq!(nodes.as_array().unwrap().len(), 3, "{nodes:#}");
    for host in &h.hosts {
        let n = h.node(&host.name);
        assert_eq!(n["address"], host.addr.to_string(), "{n:#}");
        assert_eq!(
            (&n["connected"], &n["state"]),
            (&Value::Bool(true), &"READY".into())
        );
    }

    // Six one-core steps of two jobs on three one-core nodes: at most one a node at a time, so each node
    // takes some. On the host's network each prints the addresses it sees, which are its
    // host's only.
    let file = c.write(
        "spread.yaml",
        r#"version: v4
jobs:
  where:
    image: { uri: docker://busybox:1 }
    task-array: { start: 1, end: 4 }
    network: { host: true }
    resource: { cpu: { cores: 1 } }
    script: |
      #!/bin/sh
      ip -4 -o addr show dev eth0
      sleep 2
  also:
    image: { uri: docker://busybox:1 }
    task-array: { start: 1, end: 2 }
    network: { host: true }
    resource: { cpu: { cores: 1 } }
    script: |
      #!/bin/sh
      ip -4 -o addr show dev eth0
      sleep 2
"#,
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "the workflow to end", |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    assert_eq!(d["status"], "FINISHED", "{d:#}\n{}", c.log());

    let mut used = BTreeSet::new();
    let steps: Vec<&Value> = tasks_of(&d, "where")
        .into_iter()
        .chain(tasks_of(&d, "also"))
        .collect();
    assert_eq!(steps.len(), 6);
    for t in steps {
        let node = node_of(t);
        let addr = h.hosts[h.index(&node)].addr;
        let (job, i) = (t["job"].as_str().unwrap(), t["index"].to_string());
        let log = c.ok(&["workflow", "log", &id, job, "--task", &i]);
        assert!(
            log.contains(&format!("inet {addr}/24")),
            "{job}[{i}] ran on {node} ({addr}) but saw: {log}"
        );
        used.insert(node);
    }
    let all: BTreeSet<String> = h.hosts.iter().map(|h| h.name.clone()).collect();
    assert_eq!(used, all, "the steps were not spread over every host");
}

#[test]
fn a_host_whose_link_goes_down_is_lost_and_its_step_reruns_on_another_host() {
    let h = Hosts::start(2, "3s");
    let c = &h.cluster;
    // The ephemeral volume lies in the shared storage root, so the second run (on the other
    // host) sees what the first one left: it finishes at once.
    let file = c.write(
        "movable.yaml",
        r#"version: v4
jobs:
  movable:
    image: { uri: docker://busybox:1 }
    resource: { cpu: { cores: 1 } }
    policy: { retry: { attempts: 2, on: [ node ] } }
    mounts: { /data: { volume: v } }
    script: |
      #!/bin/sh
      if [ -e /data/ran ]; then echo "second run, after $(cat /data/ran)"; exit 0; fi
      echo "first run" > /data/ran; sleep 600
volumes:
  v: {}
"#,
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "movable RUNNING", |d| {
        Cluster::task(d, "movable")["status"] == "RUNNING"
    });
    let lost = node_of(Cluster::task(&d, "movable"));
    let a = h.index(&lost);
    let b = 1 - a;
    assert_eq!(h.containers(a).len(), 1, "one container on {lost}");

    h.link(a, false);
    let d = c.wait_for(&id, "the workflow to end", |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    let movable = Cluster::task(&d, "movable");
    assert_eq!(d["status"], "FINISHED", "{d:#}\n{}", c.log());
    let tries = attempts(movable);
    assert_eq!(tries.len(), 2, "{movable:#}");
    assert_eq!(tries[0]["cause"], "NODE_LOST", "{movable:#}");
    assert_eq!(tries[0]["node"], lost.as_str());
    assert_eq!(tries[1]["node"], h.hosts[b].name.as_str(), "{movable:#}");
    let log = c.ok(&["workflow", "log", &id, "movable"]);
    assert!(log.contains("second run, after first run"), "{log}");
    let shown = c.json(&["node", "show", &lost]);
    assert_eq!(shown["state"], "DOWN", "{shown:#}");
    assert_eq!(shown["connected"], false, "{shown:#}");
    let events = c.ok(&["workflow", "events", &id]);
    assert!(events.contains("no heartbeat for 3s"), "{events}");
    // Cut off, not dead: the first run's container still runs on the lost host.
    assert_eq!(
        h.containers(a).len(),
        1,
        "the container on {lost} was stopped unseen"
    );

    // Link up again: the agent reconnects over it, its node is READY, and it stops the
    // container the server gave up on.
    h.link(a, true);
    h.wait_node(&lost, &format!("{lost} READY again"), |n| {
        n["connected"] == true && n["state"] == "READY"
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !h.containers(a).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the orphaned container on {lost} still runs: {}",
            c.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// A gang of three members lands one to a host; member 0 runs a command in each member's
/// container through that host's agent's exec service (the remote launcher MPI uses), and
/// each member, on its node's network, sees its own host's address.
#[test]
fn a_multinode_gang_spans_three_hosts_and_reaches_each_member_through_its_agent() {
    let h = Hosts::start(3, "30s");
    let c = &h.cluster;
    let file = c.write(
        "gang.yaml",
        r#"version: v4
jobs:
  gang:
    image: { uri: docker://busybox:1 }
    multinode: { nodes: 3, implementation: generic }
    resource: { cpu: { cores: 1 }, memory: { size: 128MiB } }
    script: |
      #!/bin/sh
      echo "hosts $MULTINODE_HOSTLIST"
      for m in gang-0 gang-1 gang-2; do
        MULTINODE_WRAPPER_FORWARD_STREAMS=1 $MULTINODE_RSH_WRAPPER $m \
          'echo "$(hostname) at $MULTINODE_NODE_IP: $(ip -4 -o addr show dev eth0)"' 2>&1
        echo "rsh $m: exit $?"
      done
"#,
    );
    let id = c.start_workflow(&file);
    c.wait_for(&id, "gang-0 to end", |d| {
        let s = &Cluster::task(d, "gang[0]")["status"];
        s == "FINISHED" || s == "FAILED"
    });
    let log = c.ok(&["workflow", "log", &id, "gang", "--task", "0"]);
    let d = c.wait_for(&id, &format!("the gang to end; gang-0 said: {log}"), |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    assert_eq!(d["status"], "FINISHED", "{d:#}\n{log}\n{}", c.log());
    assert!(log.contains("hosts gang-0:1,gang-1:1,gang-2:1"), "{log}");
    let mut used = BTreeSet::new();
    for (i, t) in tasks_of(&d, "gang").into_iter().enumerate() {
        assert!(log.contains(&format!("rsh gang-{i}: exit 0")), "{log}");
        let node = node_of(t);
        let addr = h.hosts[h.index(&node)].addr;
        let said = log
            .lines()
            .find(|l| l.starts_with(&format!("[gang-{i}] gang-{i} at ")))
            .unwrap_or_else(|| panic!("nothing from gang-{i}: {log}"));
        assert!(
            said.starts_with(&format!("[gang-{i}] gang-{i} at {addr}: "))
                && said.contains(&format!("inet {addr}/24")),
            "gang-{i} is on {node} ({addr}) but said: {said}"
        );
        used.insert(node);
    }
    assert_eq!(used.len(), 3, "members shared a host: {d:#}");
}

/// Container networking between hosts: a host-network service on one host, reached as
/// `web.svc` by a job in a container on the other host's bridge (the only host with a core
/// left), by the server's persistent endpoint proxy, and from outside at the host's address;
/// the job reaches the server too, over its own host's link.
#[test]
fn a_service_on_one_host_is_reached_from_a_container_on_another_and_through_an_endpoint() {
    let h = Hosts::start(2, "30s");
    let c = &h.cluster;
    c.ok(&["endpoint", "create", "site", "--scope", "public"]);
    let port = common::free_port();
    let file = c.write(
        "web.yaml",
        &r#"version: v4
services:
  web:
    image: { uri: docker://busybox:1 }
    resource: { cpu: { cores: 1 } }
    network:
      host: true
      ports: [ { name: http, port: PORT, protocol: tcp } ]
      endpoints: [ { name: site, port-name: http, protocol: http, attach: site } ]
    persist: true
    script: |
      #!/bin/sh
      mkdir -p /www && ip -4 -o addr show dev eth0 > /www/index.html
      exec httpd -f -p PORT -h /www
    readiness-probe:
      http-get: { path: /, port: PORT }
      period-seconds: 1
jobs:
  client:
    image: { uri: docker://busybox:1 }
    resource: { cpu: { cores: 1 } }
    depends-on: [ { name: web, status: RUNNING } ]
    script: |
      #!/bin/sh
      set -e
      echo "container: $(ip -4 -o addr show dev eth0)"
      echo "service: $(wget -q -O - http://web.svc:PORT/)"
      echo "server: $(wget -q -O - http://SERVER/healthz)"
"#
        .replace("PORT", &port.to_string())
        .replace("SERVER", &format!("{}:{}", h.gateway, c.port)),
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "client done", |d| {
        let s = &Cluster::task(d, "client")["status"];
        s == "FINISHED" || s == "FAILED"
    });
    let log = c.ok(&["workflow", "log", &id, "client"]);
    let client = Cluster::task(&d, "client");
    assert_eq!(client["status"], "FINISHED", "{d:#}\n{log}\n{}", c.log());
    let web = h.index(&node_of(Cluster::task(&d, "web")));
    let other = h.index(&node_of(client));
    assert_ne!(web, other, "service and client on one host: {d:#}");
    let served = format!("inet {}/24", h.hosts[web].addr);
    let said = |what: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(what))
            .unwrap_or_else(|| panic!("no {what} in {log}"))
            .to_string()
    };
    // On its host's bridge, not its host's network.
    let own = said("container: ");
    assert!(
        own.contains("inet ") && !own.contains("inet 10.77."),
        "{own}"
    );
    assert!(said("service: ").contains(&served), "{log}");
    assert_eq!(said("server: "), "ok", "{log}");

    let (code, body) = curl(&format!("http://{}:{port}/", h.hosts[web].addr));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&served), "{body}");
    c.wait_endpoint("site", "site serving", |e| e["status"] == "SERVING");
    let (code, body) = curl(&format!("http://{}:{}/e/site/", h.gateway, c.port));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&served), "{body}");
    c.ok(&["workflow", "stop", &id, "--yes"]);
    c.wait_status(&id, "STOPPED");
}

fn curl(url: &str) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "-m", "20", "-o", "-", "-w", "\n%{http_code}", url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The MPI image of `tests/mpi.rs` (`scripts/make-mpi-image.sh`, built once per change of the
/// script, pushed to the local registry), as the agents name it through their mirror.
fn mpi_image() -> String {
    let reg = common::registry();
    let out = std::process::Command::new(common::repo_root().join("scripts/make-mpi-image.sh"))
        .arg(reg)
        .output()
        .expect("running scripts/make-mpi-image.sh");
    assert!(
        out.status.success(),
        "scripts/make-mpi-image.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pushed = String::from_utf8(out.stdout).unwrap();
    let path = pushed.trim().strip_prefix(&format!("{reg}/")).unwrap();
    format!("docker://{path}")
}

/// Open MPI's ranks on two hosts: `mpirun` in member 0 starts rank 1 through the other
/// host's exec service, and the ranks' own TCP connections cross the bridge.
#[test]
fn an_openmpi_job_runs_its_ranks_on_two_hosts() {
    let h = Hosts::start(2, "30s");
    let c = &h.cluster;
    let file = c.write(
        "mpi.yaml",
        &r#"version: v4
jobs:
  ranks:
    image: { uri: IMAGE }
    command: [ /usr/local/bin/allreduce-openmpi ]
    multinode: { nodes: 2, implementation: openmpi }
    resource: { cpu: { cores: 1 }, memory: { size: 256MiB } }
    policy: { timeout: { execute: 5m } }
"#
        .replace("IMAGE", &mpi_image()),
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "the ranks to end", |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    let log = c.ok(&["workflow", "log", &id, "ranks", "--task", "0"]);
    assert_eq!(d["status"], "FINISHED", "{d:#}\n{log}\n{}", c.log());
    let nodes: BTreeSet<String> = tasks_of(&d, "ranks").into_iter().map(node_of).collect();
    assert_eq!(nodes.len(), 2, "ranks on one host: {d:#}");
    assert!(log.contains("rank 0 of 2 on ranks-0"), "{log}");
    assert!(log.contains("rank 1 of 2 on ranks-1"), "{log}");
    assert!(log.contains("sum 3 (expected 3)"), "{log}");
}

/// Data staging with the storage root shared by bind mounts: ingress fetches into the
/// workflow's volume on one host, three steps on three hosts read it and each writes its own
/// file there, and egress (on whichever host) uploads all three, which it finds only because
/// every host's storage root is the same directory.
#[test]
fn data_staged_in_on_one_host_is_read_and_written_on_all_and_staged_out() {
    let mut h = Hosts::start(3, "30s");
    let s3 = common::s3::S3::start();
    s3.py("s3.create_bucket(Bucket='results')");
    let input = "a line that every host reads\n";
    let srv = common::http::Server::start(vec![(
        "/input.txt",
        common::http::Route::Body(input.as_bytes().to_vec()),
    )]);
    let web = h.reach(&format!("127.0.0.1:{}", srv.port));
    let s3_at = h.reach(&format!("127.0.0.1:{}", s3.port));
    let c = &h.cluster;
    c.ok(&[
        "secret",
        "set",
        "store",
        "--type",
        "s3",
        "--value",
        &format!(
            r#"{{"accessKeyId":"AKIDEXAMPLE","secretAccessKey":"not-checked","region":"us-east-1","endpoint":"http://{s3_at}"}}"#
        ),
    ]);
    let file = c.write(
        "staging.yaml",
        &r#"version: v4
volumes:
  work:
    ingress:
      - source: { uri: "http://WEB/input.txt" }
        destination: { uri: "file://in/input.txt" }
    egress:
      - source: { uri: "file://out/1.txt" }
        destination: { uri: "s3://results/1.txt", secret: secret://user/store }
      - source: { uri: "file://out/2.txt" }
        destination: { uri: "s3://results/2.txt", secret: secret://user/store }
      - source: { uri: "file://out/3.txt" }
        destination: { uri: "s3://results/3.txt", secret: secret://user/store }
jobs:
  read:
    image: { uri: docker://busybox:1 }
    task-array: { start: 1, end: 3 }
    resource: { cpu: { cores: 1 } }
    mounts: { /work: { volume: work } }
    script: |
      #!/bin/sh
      set -e
      mkdir -p /work/out
      echo "$FB_TASK_ID read $(wc -c < /work/in/input.txt) bytes" > /work/out/$FB_TASK_ID.txt
      sleep 2
"#
        .replace("WEB", &web.to_string()),
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "the workflow to end", |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    assert_eq!(d["status"], "FINISHED", "{d:#}\n{}", c.log());
    for step in ["ingress:work", "egress:work"] {
        assert_eq!(Cluster::task(&d, step)["status"], "FINISHED", "{d:#}");
    }
    let readers: BTreeSet<String> = tasks_of(&d, "read").into_iter().map(node_of).collect();
    assert_eq!(readers.len(), 3, "the steps shared a host: {d:#}");
    for i in 1..=3 {
        assert_eq!(
            s3.get("results", &format!("{i}.txt")).as_deref(),
            Some(format!("{i} read {} bytes\n", input.len()).as_str()),
            "results/{i}.txt; egress ran on {}",
            node_of(Cluster::task(&d, "egress:work"))
        );
    }
}

/// A gang whose head fails at once: the members on the other hosts, often still being made
/// when their stop arrives, are stopped all the same, and the workflow ends FAILED with
/// nothing left running on any host.
#[test]
fn a_gang_whose_head_fails_at_once_is_stopped_on_every_host() {
    let h = Hosts::start(3, "30s");
    let c = &h.cluster;
    let file = c.write(
        "fails.yaml",
        r#"version: v4
jobs:
  gang:
    image: { uri: docker://busybox:1 }
    multinode: { nodes: 3, implementation: generic }
    resource: { cpu: { cores: 1 }, memory: { size: 128MiB } }
    command: [ sh, -c, "exit 3" ]
"#,
    );
    let id = c.start_workflow(&file);
    let d = c.wait_for(&id, "the gang to end", |d| {
        d["status"] == "FINISHED" || d["status"] == "FAILED"
    });
    assert_eq!(d["status"], "FAILED", "{d:#}");
    let members = tasks_of(&d, "gang");
    let head = members[0]["reason"].as_str().unwrap_or_default();
    assert!(head.ends_with("exited with code 3"), "{head}");
    for t in &members[1..] {
        assert_eq!(t["status"], "FAILED", "{t:#}");
        // Stopped with its gang, or before its image was even ready.
        let a = &attempts(t)[0];
        assert!(
            a["cause"] == "GANG"
                || (a["cause"] == "START_ERROR" && a["reason"] == "stopped before it started"),
            "{t:#}"
        );
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for i in 0..h.hosts.len() {
        while !h.containers(i).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "a member still runs on {}: {:?}",
                h.hosts[i].name,
                h.containers(i)
            );
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }
}
