//! Every class of problem: its exact `line:column` and message.

fn problems(src: &str) -> Vec<String> {
    match gantry_spec::parse(src) {
        Ok(_) => panic!("expected problems in:\n{src}"),
        Err(diags) => diags
            .iter()
            .map(|d| format!("{}:{}: {}", d.line, d.column, d.message))
            .collect(),
    }
}

#[track_caller]
fn check(src: &str, want: &[&str]) {
    let got = problems(src);
    assert_eq!(got, want, "\ngot:\n{}", got.join("\n"));
}

#[test]
fn version_v3_names_the_v4_changes() {
    check(
        r#"version: v3
jobs:
  a:
    image: {uri: docker://alpine}
    mounts:
      data: {location: /data}
"#,
        &[
            "1:10: version: version `v3` is not supported; Gantry reads `version: v4` (and v1). In v4, mounts are keyed by container path (`/data: {volume: NAME}` instead of `NAME: {location: /data}`), an endpoint names its port with `port-name` instead of `port`, and volumes use `use: ephemeral|persistent` (legacy `reference: volume://...` still works)",
        ],
    );
}

#[test]
fn missing_version() {
    check(
        r#"jobs:
  a:
    image: {uri: docker://alpine}
"#,
        &["1:1: missing `version`; a workflow file starts with `version: v4`"],
    );
}

#[test]
fn unsupported_version() {
    check(
        r#"version: v5
jobs: {}
"#,
        &["1:10: version: unsupported version `v5`; write `version: v4`"],
    );
}

#[test]
fn unknown_keys_at_every_level() {
    check(
        r#"version: v4
job:
  a: {}
jobs:
  a:
    image: {uri: docker://alpine}
    taskArray: {start: 1, end: 2}
    resource:
      gpu: 1
      cpu: {cores: 2, hyperthreads: true}
"#,
        &[
            "2:1: unknown key `job`; did you mean `jobs`?",
            "7:5: jobs.a: unknown key `taskArray`; did you mean `task-array`? (keys are kebab-case)",
            "9:7: jobs.a.resource: unknown key `gpu`; did you mean `cpu`?",
            "10:23: jobs.a.resource.cpu: unknown key `hyperthreads`; expected one of: cores, affinity, threads, sockets",
        ],
    );
}

#[test]
fn wrong_types() {
    check(
        r#"version: v4
jobs:
  a:
    image: {uri: docker://alpine}
    resource: big
    cwd: [a]
    command: {a: b}
    env: FOO=1
services:
  s:
    image: {uri: docker://alpine}
    persist: 1
    resource:
      cpu: {cores: four}
      memory: {size: 12XB}
      devices: {nvidia.com/gpu: -1}
    policy:
      timeout: {execute: 120}
"#,
        &[
            "5:15: jobs.a.resource: expected a mapping, found a string",
            "6:10: jobs.a.cwd: expected a string, found a list",
            "7:14: jobs.a.command: expected a list, found a mapping",
            "8:10: jobs.a.env: expected a list of strings, found a string",
            "12:14: services.s.persist: expected true or false, found an integer",
            "14:20: services.s.resource.cpu.cores: expected a whole number, found a string",
            "15:22: services.s.resource.memory.size: unknown unit `XB` in size `12XB`; use B, KB, MB, GB, TB, PB (powers of 1000) or KiB, MiB, GiB, TiB, PiB (powers of 1024)",
            r#"16:33: services.s.resource.devices["nvidia.com/gpu"]: -1 is out of range; it must be at least 0"#,
            "18:26: services.s.policy.timeout.execute: missing unit in duration `120`; use ns, us, ms, s, m or h (for example 90s)",
        ],
    );
}

#[test]
fn bad_values() {
    check(
        r#"version: v4
volumes:
  v: {}
jobs:
  a:
    image: {uri: docker://alpine}
    env: [FOO, "=x", BAR=1, BAR=2]
    mounts:
      data: {volume: v}
      /in/../etc: {volume: v}
    cwd: relative/dir
services:
  s:
    image: {uri: docker://alpine}
    network:
      ports:
        - {name: web, port: 0}
        - {name: api, port: 70000}
        - {name: ok, port: 8080}
        - {name: ok, port: 8081}
"#,
        &[
            "7:11: jobs.a.env[0]: `FOO` is not `NAME=VALUE`",
            "7:16: jobs.a.env[1]: `=x` is not `NAME=VALUE`: `` is not a variable name",
            "7:29: jobs.a.env[3]: `BAR` is set twice (first at 7:22); keep one",
            "9:7: jobs.a.mounts.data: mount path `data` must be an absolute path (start with `/`)",
            r#"10:7: jobs.a.mounts["/in/../etc"]: mount path `/in/../etc` must not contain `..`"#,
            "11:10: jobs.a.cwd: working directory `relative/dir` must be an absolute path (start with `/`)",
            "17:29: services.s.network.ports[0].port: 0 is out of range; it must be between 1 and 65535",
            "18:29: services.s.network.ports[1].port: 70000 is out of range; it must be between 1 and 65535",
            "20:12: services.s.network.ports[3].name: a port named `ok` is already defined",
        ],
    );
}

#[test]
fn references_to_missing_names() {
    check(
        r#"version: v4
files:
  app.py: print(1)
volumes:
  data: {}
jobs:
  prep:
    image: {uri: docker://alpine}
  main:
    image: {build: trainer}
    depends-on: [{name: perp}]
    requires: [prep]
    mounts:
      /data: {volume: dta}
    files:
      /app.py: file://ap.py
services:
  web:
    image: {uri: docker://nginx}
    network:
      ports: [{name: http, port: 80}]
      endpoints: [{name: site, port-name: htp}]
    dynamic-config: {path: /etc/x.conf, services: [wbe], script: echo}
"#,
        &[
            "10:20: jobs.main.image.build: image `trainer` is not defined under `images`; images: (none)",
            "11:25: jobs.main.depends-on[0].name: `perp` is not a job or service of this workflow (did you mean `prep`?); jobs: `main`, `prep`; services: `web`",
            "12:5: jobs.main.requires: `requires` and `depends-on` are both set; list every dependency under `depends-on`",
            r#"14:23: jobs.main.mounts["/data"].volume: volume `dta` is not defined under `volumes` (did you mean `data`?); volumes: `data`"#,
            r#"16:16: jobs.main.files["/app.py"]: file `ap.py` is not defined under the top-level `files` (did you mean `app.py`?); files: `app.py`"#,
            "22:43: services.web.network.endpoints[0].port-name: port `htp` is not one of this service's `network.ports` (did you mean `http`?); ports: `http`",
            "23:52: services.web.dynamic-config.services[0]: `wbe` is not a service of this workflow; services: `web`",
        ],
    );
}

#[test]
fn dependency_cycles_and_self_dependency() {
    check(
        r#"version: v4
jobs:
  a:
    image: {uri: docker://alpine}
    depends-on: [{name: c}]
  b:
    image: {uri: docker://alpine}
    requires: [a]
  c:
    image: {uri: docker://alpine}
    requires: [b]
  d:
    image: {uri: docker://alpine}
    requires: [d]
"#,
        &[
            "8:16: jobs.b: dependency cycle: a -> c -> b -> a; a step cannot wait for itself",
            "14:16: jobs.d.requires[0]: `d` depends on itself",
        ],
    );
}

#[test]
fn task_arrays() {
    check(
        r#"version: v4
jobs:
  a:
    image: {uri: docker://alpine}
    task-array: {start: 10, end: 1}
  b:
    image: {uri: docker://alpine}
    task-array: {start: 1, end: 5, concurrency: 0}
  c:
    image: {uri: docker://alpine}
    task-array: {start: 0, end: 1000000}
  d:
    image: {uri: docker://alpine}
    task-array: {end: 3}
"#,
        &[
            "5:29: jobs.a.task-array: `end` (1) is before `start` (10)",
            "8:49: jobs.b.task-array.concurrency: 0 is out of range; it must be at least 1",
            "11:28: jobs.c.task-array: 1000001 tasks is too many; a task array runs at most 1000000",
            "14:5: jobs.d.task-array: missing `start`; a task array runs tasks `start` to `end`, inclusive",
        ],
    );
}

/// The `api` fuzz target asserts that an accepted workflow's tasks fit in one submit: arrays
/// within the per-array limit could add up to any number, and the server stores every task
/// of a workflow when it is submitted, so one 4 MiB file could take all of its memory.
#[test]
fn a_workflow_has_at_most_a_million_tasks_in_all() {
    let job = |name: &str, end: u32| {
        format!("  {name}:\n    image: {{uri: docker://alpine}}\n    task-array: {{start: 1, end: {end}}}\n")
    };
    let file = |jobs: &[String]| {
        format!(
            "version: v4\nservices:\n  s:\n    image: {{uri: docker://alpine}}\njobs:\n{}",
            jobs.concat()
        )
    };
    // In file order, `b` (line 9) is where the total passes the limit; `a` sorts first by name
    // but is written last.
    let over = file(&[job("c", 600_000), job("b", 400_000), job("a", 10)]);
    check(
        &over,
        &["9:3: jobs.b.task-array: with its 400000 tasks, the workflow makes 1000011 tasks; a workflow runs at most 1000000 in all"],
    );
    // Exactly the limit, the service included, is fine.
    let at = file(&[job("c", 600_000), job("b", 399_999)]);
    assert!(gantry_spec::parse(&at).is_ok());
    // A job without an array counts one.
    let plain = format!(
        "{}  d:\n    image: {{uri: docker://alpine}}\n",
        file(&[job("c", 999_999)])
    );
    check(
        &plain,
        &["9:3: jobs.d: with it, the workflow makes 1000001 tasks; a workflow runs at most 1000000 in all"],
    );
}

#[test]
fn command_script_and_image() {
    check(
        r#"version: v4
jobs:
  a:
    image: {uri: docker://alpine}
    command: [echo, hi]
    script: |
      echo hi
  b:
    command: [true]
  c:
    image: {uri: docker://alpine}
    command: echo hi
"#,
        &[
            "6:5: jobs.a.script: `command` and `script` are both set; use one of them",
            "8:3: jobs.b: missing `image`; every job needs `image: {uri: docker://...}`",
            r#"12:14: jobs.c.command: expected a list of strings (`["/bin/sh", "-c", "..."]`); for a shell script use `script`"#,
        ],
    );
}

#[test]
fn duplicate_keys() {
    check(
        r#"version: v4
jobs:
  a:
    image: {uri: docker://alpine}
    image: {uri: docker://busybox}
  a:
    image: {uri: docker://alpine}
"#,
        &[
            "5:5: duplicate key `image` (first set at 4:5); remove one",
            "6:3: duplicate key `a` (first set at 3:3); remove one",
        ],
    );
}

#[test]
fn image_uris_secrets_and_names() {
    check(
        r#"version: v4
jobs:
  same:
    image: {uri: alpine}
  other:
    image: {uri: "ftp://x/y"}
    depends-on: [{name: same, status: running}, {name: same}]
    env: [TOKEN=secret://]
services:
  same:
    image: {uri: docker://nginx, secret: user/TOKEN}
"#,
        &[
            "4:18: jobs.same.image.uri: image URI `alpine` has no scheme; write `docker://alpine` (schemes: docker://, oras://, oci://)",
            "6:18: jobs.other.image.uri: unsupported image URI scheme `ftp://`; use docker://, oras://, oci://",
            "7:56: jobs.other.depends-on[1].name: `same` is listed twice (first at 7:25); keep one",
            "8:11: jobs.other.env[0]: `TOKEN=secret://`: the secret reference names no secret",
            "10:3: services.same: a job is also named `same`; names must be unique across jobs and services",
            "11:42: services.same.image.secret: `user/TOKEN` is not a secret reference; write `secret://SCOPE/NAME`",
        ],
    );
}

#[test]
fn yaml_syntax_error() {
    check(
        r#"version: v4
jobs:
  a: [1, 2
"#,
        &["4:1: YAML syntax error: while parsing a flow sequence, expected ',' or ']'"],
    );
}

#[test]
fn empty_file() {
    check(
        r#""#,
        &["1:1: the file is empty; a workflow starts with `version: v4`"],
    );
}

#[test]
fn root_is_not_a_mapping() {
    check(
        r#"- a
- b
"#,
        &["1:1: a workflow file is a mapping that starts with `version: v4`; found a list"],
    );
}

#[test]
fn no_jobs_or_services() {
    check(
        r#"version: v4
volumes:
  v: {}
"#,
        &["1:1: the workflow has no `jobs` and no `services`; it needs at least one"],
    );
}

#[test]
fn volumes_and_transfers() {
    check(
        r#"version: v4
volumes:
  a: {reference: "volume://user"}
  b: {reference: "vol://user/ephemeral"}
  c: {reference: "volume://team/persistent/x"}
  d: {use: persistent}
  e: {use: ephemeral, reference: volume://user/ephemeral}
  g: {reference: volume://organization/persistent/x}
  h: {use: ephemeral, name: x}
  i: {reference: "volume://user/persistent/../x"}
  f:
    ingress:
      - source: {uri: https://x/y}
        destination: {uri: /data/y}
      - source: {uri: file://missing.txt}
        destination: {uri: file://y}
      - source: {uri: https://x/z}
        destination: {uri: file://in/../../z}
      - source: {uri: https://x/z}
        destination: {uri: file:///}
    egress:
      - source: {uri: file:///../etc/passwd}
        destination: {uri: s3://b/k}
jobs:
  j: {image: {uri: docker://alpine}}
"#,
        &[
            "3:18: volumes.a.reference: `volume://user` is not a volume reference: expected `volume://SCOPE/CLASS` or `volume://SCOPE/CLASS/NAME`; write `volume://user/ephemeral` or `volume://SCOPE/persistent/NAME`",
            "4:18: volumes.b.reference: `vol://user/ephemeral` is not a volume reference: it must start with `volume://`; write `volume://user/ephemeral` or `volume://SCOPE/persistent/NAME`",
            "5:18: volumes.c.reference: unknown volume scope `team` in `volume://team/persistent/x`; use `user` or `group` (or `account`)",
            "6:7: volumes.d: a persistent volume needs `name`: the volume that outlives the workflow",
            "7:23: volumes.e: `use` and `reference` are both set; say what the volume is once",
            "8:18: volumes.g.reference: unknown volume scope `organization` in `volume://organization/persistent/x`; use `user` or `group` (or `account`)",
            "9:23: volumes.h.name: an ephemeral volume has no `name`; use `use: persistent` for a named volume",
            "10:18: volumes.i.reference: `volume://user/persistent/../x` is not a volume reference: expected `volume://SCOPE/CLASS` or `volume://SCOPE/CLASS/NAME`; write `volume://user/ephemeral` or `volume://SCOPE/persistent/NAME`",
            "14:28: volumes.f.ingress[0].destination.uri: `/data/y` is not a URI; write `SCHEME://...` (https://, s3://, file://)",
            "15:23: volumes.f.ingress[1].source.uri: file `missing.txt` is not defined under the top-level `files`; files: (none)",
            "18:28: volumes.f.ingress[2].destination.uri: `file://in/../../z` must name a path below the volume's root (no `..`)",
            "20:28: volumes.f.ingress[3].destination.uri: `file:///` must name a path below the volume's root (no `..`)",
            "22:23: volumes.f.egress[0].source.uri: `file:///../etc/passwd` must name a path below the volume's root (no `..`)",
        ],
    );
}

#[test]
fn service_and_job_only_keys() {
    check(
        r#"version: v4
services:
  s:
    image: {uri: docker://nginx}
    task-array: {start: 1, end: 2}
    readiness-probe:
      http-get: {port: 80}
      tcp-socket: {port: 80}
    autoscaler:
      replicas: {min: 5, max: 2}
  t:
    image: {uri: docker://nginx}
    readiness-probe: {period-seconds: 5}
    network:
      endpoints:
        - {name: e, port: 80}
jobs:
  j:
    image: {uri: docker://alpine}
    persist: true
"#,
        &[
            "5:5: services.s: unknown key `task-array`: `task-array` is for jobs; a service runs until it is stopped",
            "8:7: services.s.readiness-probe: `http-get` and `tcp-socket` are both set; a probe has exactly one action",
            "10:18: services.s.autoscaler.replicas: `min` (5) is more than `max` (2)",
            "13:5: services.t.readiness-probe: missing the probe's action: `exec`, `http-get`, `tcp-socket` or `grpc`",
            "16:11: services.t.network.endpoints[0]: missing `port-name`",
            "16:21: services.t.network.endpoints[0]: unknown key `port`: `port` became `port-name` in v4: name one of the service's `network.ports`",
            "20:5: jobs.j: unknown key `persist`: `persist` is a service key; move this step under `services`",
        ],
    );
}

#[test]
fn root_is_a_scalar() {
    check(
        r#"just text
"#,
        &["1:1: a workflow file is a mapping that starts with `version: v4`; found a string"],
    );
}

#[test]
fn autoscaler_dynamic_config_and_endpoints() {
    check(
        r#"version: v4
services:
  pool:
    image: {uri: docker://worker}
  boot:
    image: {uri: docker://router}
    autoscaler:
      replicas: {max: 3}
      scale-up:
        triggers:
          - {metrics-query: "q > 1", services: [pool]}
          - {metrics-query: "q > 2"}
      scale-down: {metrics-query: "q < 1", services: [pool]}
    dynamic-config: {path: conf/up.conf, services: [pool]}
    network:
      ports: [{name: http, port: 80}]
      endpoints:
        - {name: "bad name", port-name: http}
        - {name: ok, port-name: http, attach: "no/slashes", scope: everyone}
"#,
        &[
            "8:7: services.boot.autoscaler.replicas: `replicas` cannot be set when the scale-up triggers scale other services",
            "9:7: services.boot.autoscaler.scale-up: either every trigger names `services` (to scale other services) or none does",
            "13:7: services.boot.autoscaler.scale-down: `services` is only for scale-up triggers; scale-down applies to this service",
            "14:5: services.boot.dynamic-config: missing `script`",
            "14:28: services.boot.dynamic-config.path: path `conf/up.conf` must be an absolute path (start with `/`)",
            "18:18: services.boot.network.endpoints[0].name: `bad name` is not a valid name: use letters, digits, `-` and `_`, starting with a letter or digit, at most 63 characters",
            "19:47: services.boot.network.endpoints[1].attach: `no/slashes` is not a valid endpoint name: use lower-case letters, digits and `-` (not first or last), at most 63 characters",
            "19:68: services.boot.network.endpoints[1].scope: `everyone` is not one of `user`, `group`, `organization`, `public`",
        ],
    );
}

#[test]
fn image_recipes() {
    check(
        r#"version: v4
files:
  a.txt: hello
images:
  base:
    run: [make]
  app:
    from: quay.io/app
    files: {/opt/a.txt: a.txt, relative: file://a.txt}
    scope: world
    env: [NOEQUALS]
jobs:
  j:
    image: {build: app, uri: docker://x}
"#,
        &[
            "5:3: images.base: missing `from`, the base image (`docker://...`)",
            "8:11: images.app.from: image URI `quay.io/app` has no scheme; write `docker://quay.io/app` (schemes: docker://, oci://)",
            r#"9:25: images.app.files["/opt/a.txt"]: `a.txt` is not a file reference; write `file://NAME` naming a top-level file"#,
            "9:32: images.app.files.relative: file destination `relative` must be an absolute path (start with `/`)",
            "10:12: images.app.scope: `world` is not one of `user`, `group`",
            "11:11: images.app.env[0]: `NOEQUALS` is not `NAME=VALUE`",
            "14:25: jobs.j.image: `build` and `uri` are both set; an image is either built or pulled",
        ],
    );
}

#[test]
fn names_dependencies_policy_multinode_network() {
    check(
        r#"version: v4
jobs:
  "bad.name":
    image: {uri: docker://alpine}
  j:
    image: {uri: docker://alpine}
    depends-on: [bad.name, {status: FINISHED}]
    requires: [nope]
    policy:
      timeout: {execute: 0s}
      retry: {attempts: 0, on: [network]}
    multinode: {nodes: 0, implementation: pvm}
    network: {expose-tcp: [99999]}
  k:
    image: {uri: docker://alpine}
    policy:
      retry: {on: []}
    readiness-probe: {exec: {command: [true]}}
"#,
        &[
            r#"3:3: jobs["bad.name"]: `bad.name` is not a valid name: use letters, digits, `-` and `_`, starting with a letter or digit, at most 63 characters"#,
            "7:18: jobs.j.depends-on[0]: expected a mapping; write `{name: NAME, status: FINISHED}`",
            "7:28: jobs.j.depends-on[1]: missing `name` of the job or service depended on",
            "8:5: jobs.j.requires: `requires` and `depends-on` are both set; list every dependency under `depends-on`",
            "8:16: jobs.j.requires[0]: `nope` is not a job or service of this workflow; jobs: `bad.name`, `j`, `k`; services: (none)",
            "10:26: jobs.j.policy.timeout.execute: the timeout must be longer than 0",
            "11:25: jobs.j.policy.retry.attempts: 0 is out of range; it must be between 1 and 100",
            "11:33: jobs.j.policy.retry.on[0]: `network` is not one of `failure`, `node`",
            "12:24: jobs.j.multinode.nodes: 0 is out of range; it must be at least 1",
            "12:43: jobs.j.multinode.implementation: `pvm` is not one of `openmpi`, `ompi`, `mpich`, `gasnet`, `generic`",
            "13:28: jobs.j.network.expose-tcp[0]: 99999 is out of range; it must be between 1 and 65535",
            "17:19: jobs.k.policy.retry.on: empty; list `failure`, `node` or both",
            "18:5: jobs.k: unknown key `readiness-probe`: `readiness-probe` is a service key; move this step under `services`",
        ],
    );
}

#[test]
fn multinode_jobs_have_one_to_64_nodes_and_no_task_array() {
    check(
        r#"version: v4
jobs:
  a:
    image: {uri: docker://alpine}
    task-array: {start: 1, end: 4}
    multinode: {nodes: 2, implementation: openmpi}
  b:
    image: {uri: docker://alpine}
    multinode: {nodes: 65, implementation: generic, procs-per-node: 0}
  c:
    image: {uri: docker://alpine}
    multinode: {nodes: -1}
    network: {host: yes please}
"#,
        &[
            "6:5: jobs.a.multinode: `multinode` and `task-array` (at 5:5) cannot both be set; run the members of a multinode job as one gang, or an array of single-node tasks",
            "9:24: jobs.b.multinode.nodes: 65 nodes is too many; a multinode job spans at most 64 nodes",
            "9:69: jobs.b.multinode.procs-per-node: 0 is out of range; it must be at least 1",
            "12:5: jobs.c.multinode: missing `implementation`",
            "12:24: jobs.c.multinode.nodes: -1 is out of range; it must be at least 1",
            "13:21: jobs.c.network.host: expected true or false, found a string",
        ],
    );
}

#[test]
fn env_as_a_mapping() {
    check(
        "version: v4\njobs:\n  a:\n    image: {uri: docker://alpine}\n    env: {A: 1}\n",
        &["5:10: jobs.a.env: expected a list of `NAME=VALUE` strings (`- NAME=VALUE`), found a mapping"],
    );
}

#[test]
fn persistent_endpoint_attached_twice() {
    check(
        "\
version: v4
services:
  a:
    image: {uri: docker://x}
    network:
      ports: [{name: p, port: 80}]
      endpoints: [{name: e, port-name: p, attach: chat}]
  b:
    image: {uri: docker://x}
    network:
      ports: [{name: p, port: 80}]
      endpoints: [{name: e, port-name: p, attach: chat}]
",
        &["12:19: services.b.network.endpoints[0]: persistent endpoint `chat` is already attached at 7:19; attach it once"],
    );
}

#[test]
fn retry_attempts_have_a_hard_maximum() {
    check(
        r#"version: v4
defaults:
  job:
    policy:
      retry: {attempts: 101}
jobs:
  j:
    image: {uri: docker://alpine}
    policy:
      retry: {attempts: 4294967295, on: [failure]}
"#,
        &[
            "5:25: defaults.job.policy.retry.attempts: 101 is out of range; it must be between 1 and 100",
            "10:25: jobs.j.policy.retry.attempts: 4294967295 is out of range; it must be between 1 and 100",
        ],
    );
    let most = gantry_spec::parse(
        "version: v4\njobs:\n  j:\n    image: {uri: docker://alpine}\n    policy:\n      retry: {attempts: 100}\n",
    )
    .expect("the hard maximum itself is valid");
    assert_eq!(
        most.jobs["j"].policy.retry.attempts,
        gantry_spec::MAX_RETRY_ATTEMPTS
    );
}

#[test]
fn names_that_would_be_paths_and_reserved_container_paths() {
    check(
        r#"version: v4
volumes:
  outer: {}
  outer/inner: {}
  ../up: {}
  kept:
    use: persistent
    name: ../../etc
images:
  a/b: {from: docker://busybox}
jobs:
  j:
    image: {uri: docker://busybox}
    command: [true]
    mounts:
      /data: {volume: outer}
      /dev: {volume: outer}
      /dev/shm: {volume: outer}
      /: {volume: outer}
      /proc/sys: {volume: outer}
      //sys/.: {volume: outer}
      /.gantry: {volume: outer}
    files:
      /dev/confine: "fake"
      /etc/app.conf: "ok"
"#,
        &[
            "4:3: volumes[\"outer/inner\"]: `outer/inner` is not a valid name: use letters, digits, `-` and `_`, starting with a letter or digit, at most 63 characters",
            "5:3: volumes[\"../up\"]: `../up` is not a valid name: use letters, digits, `-` and `_`, starting with a letter or digit, at most 63 characters",
            "8:11: volumes.kept.name: `../../etc` is not a valid name: use letters, digits, `-` and `_`, starting with a letter or digit, at most 63 characters",
            "10:3: images[\"a/b\"]: `a/b` is not a valid name: use letters, digits, `-` and `_`, starting with a letter or digit, at most 63 characters",
            "17:7: jobs.j.mounts[\"/dev\"]: mount path `/dev` is reserved: Gantry and the kernel own `/dev` in every container (`/dev`, `/proc`, `/sys`, `/.gantry` and everything below them)",
            "18:7: jobs.j.mounts[\"/dev/shm\"]: mount path `/dev/shm` is reserved: Gantry and the kernel own `/dev` in every container (`/dev`, `/proc`, `/sys`, `/.gantry` and everything below them)",
            "19:7: jobs.j.mounts[\"/\"]: mount path `/` is the container's root: mount volumes and put files below it",
            "20:7: jobs.j.mounts[\"/proc/sys\"]: mount path `/proc/sys` is reserved: Gantry and the kernel own `/proc` in every container (`/dev`, `/proc`, `/sys`, `/.gantry` and everything below them)",
            "21:7: jobs.j.mounts[\"//sys/.\"]: mount path `//sys/.` is reserved: Gantry and the kernel own `/sys` in every container (`/dev`, `/proc`, `/sys`, `/.gantry` and everything below them)",
            "22:7: jobs.j.mounts[\"/.gantry\"]: mount path `/.gantry` is reserved: Gantry and the kernel own `/.gantry` in every container (`/dev`, `/proc`, `/sys`, `/.gantry` and everything below them)",
            "24:7: jobs.j.files[\"/dev/confine\"]: file destination `/dev/confine` is reserved: Gantry and the kernel own `/dev` in every container (`/dev`, `/proc`, `/sys`, `/.gantry` and everything below them)",
        ],
    );
}
