//! A real embedded cluster for end-to-end tests: the `gantry` binary (`gantry up`), runc, and a
//! local OCI registry (Debian's docker-registry) serving busybox, set up by
//! `scripts/test-images.sh`. Nothing here is mocked.

#![allow(dead_code)]

pub mod hosts;
pub mod http;
pub mod s3;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const GANTRY: &str = env!("CARGO_BIN_EXE_gantry");

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python with the MCP SDK (PyPI `mcp`) that scripts/install-deps.sh puts in a venv.
pub fn mcp_python() -> PathBuf {
    let p = std::env::var_os("GANTRY_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/gantry-venv/bin/python"));
    assert!(
        p.exists(),
        "{} is missing: scripts/install-deps.sh makes the venv with the Python MCP SDK \
         (or point GANTRY_MCP_PYTHON at a python that has `mcp`)",
        p.display()
    );
    p
}

/// Runs one scenario of `tests/mcp/agent.py` (a real MCP client) against the server at
/// `url`; returns the JSON it printed last. `log` is shown when it fails.
pub fn mcp_agent(
    url: &str,
    token: &str,
    scenario: &str,
    args: &[&str],
    log: &dyn Fn() -> String,
) -> serde_json::Value {
    let out = Command::new(mcp_python())
        .arg(repo_root().join("crates/gantry/tests/mcp/agent.py"))
        .arg(scenario)
        .args(["--url", url, "--token", token, "--gantry", GANTRY])
        .args(args)
        .output()
        .expect("running the Python MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "agent.py {scenario} {args:?} failed ({}):\n{stdout}\n{}\nserver log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        log()
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("agent.py printed {stdout:?}: {e}"))
}

/// The local registry's `host:port`, starting it once if needed.
pub fn registry() -> &'static str {
    test_env("GANTRY_TEST_REGISTRY")
}

/// A value from the env file `scripts/test-images.sh` writes (registries, credentials, the
/// test PostgreSQL), running the script once.
pub fn test_env(key: &str) -> &'static str {
    gantry_store::testkit::test_env(key)
}

/// A free port that nothing else takes before the test uses it: one below the kernel's
/// ephemeral range, which port-0 listeners (an agent's metrics) and outgoing connections draw
/// from; a port picked there was once taken by an agent's listener before `gantry up` bound it.
/// Spread by process id, and checked free.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let base = 10_000u32;
    let span = low.saturating_sub(base).max(1000);
    let start = std::process::id().wrapping_mul(7919) % span;
    loop {
        let i = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (base + (start + i.wrapping_mul(101)) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Fetches with `get` until `pred` holds for what it returns, every 250 ms for up to two
/// minutes (generous: real containers start); past that, fails with `stuck`'s words about the
/// last value.
fn poll<T>(get: impl Fn() -> T, pred: impl Fn(&T) -> bool, stuck: impl Fn(&T) -> String) -> T {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let v = get();
        if pred(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{}", stuck(&v));
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A model-server stand-in: busybox `httpd` as a persistent service that attaches to the
/// persistent endpoint `endpoint`. It answers `version` at /, streams six server-sent events
/// from /cgi-bin/stream (one a second), echoes what the backend sees of Authorization at
/// /cgi-bin/echo, and becomes ready (an HTTP probe of / on `probe_port`) `delay` seconds after
/// it starts.
pub fn model(version: &str, endpoint: &str, delay: u32, probe_port: u16) -> String {
    streaming_model(version, endpoint, delay, probe_port, 6)
}

/// [`model`] whose stream at /cgi-bin/stream sends `events` events, one a second.
pub fn streaming_model(
    version: &str,
    endpoint: &str,
    delay: u32,
    probe_port: u16,
    events: u32,
) -> String {
    format!(
        r#"version: v4
services:
  llm:
    image: {{ uri: docker://busybox:1 }}
    persist: true
    script: |
      #!/bin/sh
      mkdir -p /www/cgi-bin
      echo {version} > /www/index.html
      printf '#!/bin/sh\necho "Content-Type: text/event-stream"\necho\nfor i in $(seq 1 {events}); do echo "data: {version} $i"; echo; sleep 1; done\n' > /www/cgi-bin/stream
      printf '#!/bin/sh\necho "Content-Type: text/plain"\necho\necho "auth=[$HTTP_AUTHORIZATION] prefix=[$HTTP_X_FORWARDED_PREFIX] uri=[$REQUEST_URI]"\n' > /www/cgi-bin/echo
      chmod +x /www/cgi-bin/stream /www/cgi-bin/echo
      sleep {delay}
      exec httpd -f -p 8080 -h /www
    network:
      ports: [ {{ name: http, port: 8080 }} ]
      endpoints:
        - {{ name: api, port-name: http, protocol: http, attach: {endpoint} }}
    readiness-probe:
      http-get: {{ path: /, port: {probe_port} }}
      period-seconds: 1
"#
    )
}

/// The plain [`model`]: attaches to endpoint `chat`, ready as soon as it answers `version` at /.
pub fn chat_model(version: &str) -> String {
    model(version, "chat", 0, 8080)
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub agents: u32,
    child: Option<Child>,
    /// More arguments for `gantry up`.
    extra: Vec<String>,
    /// The address `gantry up` listens on (with `port`); clients always use 127.0.0.1.
    listen_ip: String,
}

impl Cluster {
    pub fn up(agents: u32) -> Cluster {
        Cluster::up_with(agents, vec![])
    }

    pub fn up_with(agents: u32, extra: Vec<String>) -> Cluster {
        Cluster::up_listening(agents, "127.0.0.1", extra)
    }

    /// A cluster whose server listens on `ip` (e.g. `0.0.0.0`, so that containers can reach
    /// it at their bridge's gateway).
    pub fn up_listening(agents: u32, ip: &str, extra: Vec<String>) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("gantry-e2e-")
            .tempdir()
            .unwrap();
        // Root in a job's container is an unprivileged host uid (a user namespace), which must
        // be able to pass through the data dir to reach its container's files: as under
        // /var/lib, not a private 0700 temporary directory.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let mut c = Cluster {
            dir,
            port: free_port(),
            agents,
            child: None,
            extra,
            listen_ip: ip.to_owned(),
        };
        c.start();
        c
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The first administrator's token, from the context `gantry up` wrote.
    pub fn admin_token(&self) -> String {
        let text = std::fs::read_to_string(self.data_dir().join("context.toml")).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("token = "))
            .unwrap()
            .trim_matches('"')
            .to_string()
    }

    /// Starts (or restarts) `gantry up` on this data dir and waits for every agent.
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("up.log"))
            .unwrap();
        let child = Command::new(GANTRY)
            .args([
                "up",
                "--listen",
                &format!("{}:{}", self.listen_ip, self.port),
            ])
            .arg("--data-dir")
            .arg(self.dir.path())
            .args(["--agents", &self.agents.to_string()])
            .args([
                "--registry-mirror",
                &format!("docker.io=http://{}", registry()),
            ])
            .args(["--insecure-registry", test_env("GANTRY_TEST_AUTH_REGISTRY")])
            .args(&self.extra)
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting gantry up");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.gantry(&["node", "list", "-o", "json"]);
            if out.status.success() {
                let nodes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                let up = nodes
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|n| n["connected"] == true)
                    .count();
                if up >= self.agents as usize {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "cluster did not come up: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops `gantry up` as a person would (SIGINT, Ctrl-C) and waits for it to exit.
    pub fn interrupt(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("gantry up is not running");
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "gantry up ignored SIGINT");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The container bridges of this cluster's agents (`gtr` + sha256("<name>@<state dir>"),
    /// as gantry_agent::net::bridge_name names them).
    pub fn bridges(&self) -> Vec<String> {
        use sha2::Digest;
        let Ok(agents) = std::fs::read_dir(self.dir.path().join("agents")) else {
            return vec![];
        };
        agents
            .flatten()
            .map(|a| {
                let id = format!("{}@{}", a.file_name().to_string_lossy(), a.path().display());
                format!("gtr{}", &hex::encode(sha2::Sha256::digest(id))[..8])
            })
            .collect()
    }

    /// Kills `gantry up` with SIGKILL: server and agents die at once, containers live on.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("up.log")).unwrap_or_default()
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(GANTRY);
        cmd.args(args)
            .env("GANTRY_DATA_DIR", self.dir.path())
            .env_remove("GANTRY_URL")
            .env_remove("GANTRY_TOKEN")
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"));
        cmd
    }

    pub fn gantry(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("running gantry")
    }

    /// Runs a client verb that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.gantry(args);
        assert!(
            out.status.success(),
            "gantry {args:?} failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&a)).expect("JSON output")
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Submits a workflow file; returns its id.
    pub fn start_workflow(&self, file: &Path) -> String {
        let out = self.ok(&["workflow", "start", file.to_str().unwrap()]);
        out.trim().to_string()
    }

    pub fn detail(&self, id: &str) -> serde_json::Value {
        self.json(&["workflow", "describe", id])
    }

    /// Waits (generously) until `pred` holds for the workflow's detail.
    pub fn wait_for(
        &self,
        id: &str,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        poll(
            || self.detail(id),
            pred,
            |d| {
                format!(
                    "timed out waiting for {what}; workflow is {d:#}\nlog: {}",
                    self.log()
                )
            },
        )
    }

    /// Waits (generously) until `pred` holds for the persistent endpoint `name`.
    pub fn wait_endpoint(
        &self,
        name: &str,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        poll(
            || self.json(&["endpoint", "show", name]),
            pred,
            |e| format!("timed out waiting for {what}: {e:#}\n{}", self.log()),
        )
    }

    pub fn wait_status(&self, id: &str, status: &str) -> serde_json::Value {
        self.wait_for(id, status, |d| d["status"] == status)
    }

    pub fn task<'a>(d: &'a serde_json::Value, label: &str) -> &'a serde_json::Value {
        d["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| {
                let name = match t["index"].as_u64() {
                    Some(i) => format!("{}[{i}]", t["job"].as_str().unwrap()),
                    None => t["job"].as_str().unwrap().to_string(),
                };
                name == label
            })
            .unwrap_or_else(|| panic!("no task {label} in {d:#}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill9();
        // Containers outlive the agent by design: end the ones a failed test left behind.
        if let Ok(agents) = std::fs::read_dir(self.dir.path().join("agents")) {
            for a in agents.flatten() {
                let root = a.path().join("runc");
                let Ok(out) = Command::new("runc")
                    .arg("--root")
                    .arg(&root)
                    .args(["list", "-q"])
                    .output()
                else {
                    continue;
                };
                for id in String::from_utf8_lossy(&out.stdout).lines() {
                    let _ = Command::new("runc")
                        .arg("--root")
                        .arg(&root)
                        .args(["kill", "--all", id, "KILL"])
                        .status();
                    std::thread::sleep(Duration::from_millis(100));
                    let _ = Command::new("runc")
                        .arg("--root")
                        .arg(&root)
                        .args(["delete", "-f", id])
                        .status();
                }
            }
        }
        // A killed agent leaves its container bridge, with its /24, behind; a later cluster
        // given the same /24 would route its containers' traffic to the dead bridge.
        for bridge in self.bridges() {
            let _ = Command::new("ip")
                .args(["link", "del", &bridge])
                .stderr(Stdio::null())
                .status();
            // And its firewall's tables, named after it.
            for family in ["bridge", "inet"] {
                let _ = Command::new("nft")
                    .args(["delete", "table", family, &bridge])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        // Unmount anything left under the data dir, deepest first.
        if let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") {
            let prefix = self.dir.path().to_string_lossy().into_owned();
            let mut targets: Vec<&str> = mounts
                .lines()
                .filter_map(|l| l.split_whitespace().nth(1))
                .filter(|t| t.starts_with(&prefix))
                .collect();
            targets.sort_by_key(|t| std::cmp::Reverse(t.len()));
            for t in targets {
                let _ = Command::new("umount").args(["-l", t]).status();
            }
        }
    }
}

/// A `gantry server` and `gantry agent` as separate processes, so either can be killed alone.
pub struct Split {
    pub cluster: Cluster,
    pub server: Option<Child>,
    pub agent: Option<Child>,
    pub agent_name: String,
    /// More agents ([`Split::start_extra_agent`]), by name.
    extra: Vec<(String, Child)>,
    heartbeat_timeout: String,
    /// More flags for `gantry server`.
    server_args: Vec<String>,
}

impl Split {
    pub fn start(heartbeat_timeout: &str) -> Split {
        let mut s = Split::server_only(heartbeat_timeout);
        s.start_agent();
        s
    }

    /// A `gantry server` with no agent yet.
    pub fn server_only(heartbeat_timeout: &str) -> Split {
        Split::server_only_with(heartbeat_timeout, &[])
    }

    /// A `gantry server` with more flags (e.g. `--store URL`) and no agent yet.
    pub fn server_only_with(heartbeat_timeout: &str, extra: &[&str]) -> Split {
        let dir = tempfile::Builder::new()
            .prefix("gantry-e2e-")
            .tempdir()
            .unwrap();
        let cluster = Cluster {
            dir,
            port: free_port(),
            agents: 1,
            child: None,
            extra: vec![],
            listen_ip: "127.0.0.1".into(),
        };
        let mut s = Split {
            cluster,
            server: None,
            agent: None,
            agent_name: format!("split-{}", std::process::id()),
            extra: vec![],
            heartbeat_timeout: heartbeat_timeout.to_string(),
            server_args: extra.iter().map(|a| a.to_string()).collect(),
        };
        s.start_server();
        let ctx = s.cluster.data_dir().join("context.toml");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ctx.exists() {
            assert!(
                Instant::now() < deadline,
                "server did not start: {}",
                s.cluster.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    fn start_server(&mut self) {
        let c = &self.cluster;
        let log = c.log_file();
        let server = Command::new(GANTRY)
            .args(["server", "--listen", &format!("127.0.0.1:{}", c.port)])
            .arg("--data-dir")
            .arg(c.data_dir())
            .args([
                "--heartbeat-timeout",
                &self.heartbeat_timeout,
                "--stop-grace",
                "2s",
            ])
            .args(&self.server_args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting gantry server");
        self.server = Some(server);
    }

    /// Kills the server and starts it again on the same data directory and flags; returns
    /// once it answers.
    pub fn restart_server(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        self.start_server();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.cluster.gantry(&["workflow", "list"]).status.success() {
            assert!(
                Instant::now() < deadline,
                "server did not start again: {}",
                self.cluster.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn start_agent(&mut self) {
        let name = self.agent_name.clone();
        self.agent = Some(self.spawn_agent(&name, &[]));
    }

    /// [`Split::start_agent`] with `--server SERVERS` (several replicas' URLs, comma-separated).
    pub fn start_agent_at(&mut self, servers: &str) {
        let name = self.agent_name.clone();
        self.agent = Some(self.spawn_agent_at(servers, &name, &[]));
    }

    /// Starts one more agent, another node of this host named `name` (its own state and
    /// exec service address; `extra` are more flags), and waits until it is READY. It is
    /// killed with the cluster, or earlier by [`Split::kill_extra`].
    pub fn start_extra_agent(&mut self, name: &str, extra: &[&str]) {
        let child = self.spawn_agent(name, extra);
        self.extra.push((name.to_string(), child));
    }

    /// Kills an agent [`Split::start_extra_agent`] started (its containers run on).
    pub fn kill_extra(&mut self, name: &str) {
        if let Some(i) = self.extra.iter().position(|(n, _)| n == name) {
            let (_, mut child) = self.extra.remove(i);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits (up to a minute) until agent `name`'s runc root lists no container: a returned
    /// agent has stopped what the server gave up on. Fails with `stuck` otherwise.
    pub fn wait_no_containers(&self, name: &str, stuck: &str) {
        let root = self
            .cluster
            .data_dir()
            .join("agents")
            .join(name)
            .join("runc");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(["list", "-q"])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&out.stdout).trim().is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "{stuck}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    // The child goes to the caller, which keeps it in the `Split` (killed and waited for on
    // drop); clippy sees only that a panic while waiting for it to connect would leave it.
    #[allow(clippy::zombie_processes)]
    fn spawn_agent(&self, name: &str, extra: &[&str]) -> Child {
        let server = format!("http://127.0.0.1:{}", self.cluster.port);
        self.spawn_agent_at(&server, name, extra)
    }

    #[allow(clippy::zombie_processes)]
    fn spawn_agent_at(&self, servers: &str, name: &str, extra: &[&str]) -> Child {
        let d = self.cluster.data_dir().to_path_buf();
        let log = self.cluster.log_file();
        let mut agent = Command::new(GANTRY)
            .args(["agent", "--server", servers])
            .args([
                "--token",
                &self.cluster.admin_token(),
                "--pool",
                "default",
                "--name",
                name,
            ])
            .args(["--cpus", "2", "--memory", "4GiB"])
            // Two split clusters may run at once: the default metrics port is one per host.
            .args(["--metrics-listen", "127.0.0.1:0"])
            .arg("--storage-root")
            .arg(d.join("storage"))
            .arg("--state-dir")
            .arg(d.join("agents").join(name))
            .args([
                "--registry-mirror",
                &format!("docker.io=http://{}", registry()),
            ])
            .args(extra)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting gantry agent");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let nodes = self.cluster.json(&["node", "list"]);
            let up = nodes
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["name"] == name && n["connected"] == true && n["state"] == "READY");
            if up {
                return agent;
            }
            if Instant::now() >= deadline {
                let _ = agent.kill();
                let _ = agent.wait();
                panic!("agent did not connect: {}", self.cluster.log());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn kill_agent(&mut self) {
        if let Some(mut a) = self.agent.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
    }
}

impl Cluster {
    fn log_file(&self) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("up.log"))
            .unwrap()
    }
}

impl Drop for Split {
    fn drop(&mut self) {
        self.kill_agent();
        for (_, mut a) in self.extra.drain(..) {
            let _ = a.kill();
            let _ = a.wait();
        }
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
    }
}

impl Cluster {
    /// Runs a client verb with another user's token.
    pub fn as_user(&self, token: &str, args: &[&str]) -> Output {
        self.command(args)
            .env("GANTRY_URL", format!("http://127.0.0.1:{}", self.port))
            .env("GANTRY_TOKEN", token)
            .output()
            .expect("running gantry")
    }

    /// Submits a workflow file as another user; returns its id.
    pub fn start_as(&self, token: &str, file: &Path) -> String {
        let out = self.as_user(token, &["workflow", "start", file.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "workflow start failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `path` of the web UI, fetched after signing in with the cluster's token through the sign-in
    /// form (its CSRF field and cookie), as a browser does.
    pub fn web_page(&self, path: &str) -> String {
        let base = format!("http://127.0.0.1:{}", self.port);
        let jar = self.data_dir().join("web-cookies.txt");
        let curl = |args: &[&str]| {
            let out = std::process::Command::new("curl")
                .args(["-sS", "--fail", "-c", jar.to_str().unwrap(), "-b"])
                .arg(&jar)
                .args(args)
                .output()
                .expect("running curl");
            assert!(
                out.status.success(),
                "curl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        let form = curl(&[&format!("{base}/signin")]);
        let at = form.find(r#"name="csrf" value=""#).expect("a csrf field") + 19;
        let csrf = &form[at..at + form[at..].find('"').unwrap()];
        curl(&[
            "--data-urlencode",
            &format!("token={}", self.admin_token()),
            "--data-urlencode",
            &format!("csrf={csrf}"),
            "--data-urlencode",
            &format!("next={path}"),
            &format!("{base}/signin"),
        ]);
        curl(&[&format!("{base}{path}")])
    }

    /// Creates a user in `group`; returns the token `gantry admin user create` shows once.
    pub fn user_token(&self, name: &str, group: &str) -> String {
        self.json(&["admin", "user", "create", name, "--group", group])["token"]
            .as_str()
            .expect("a token")
            .to_string()
    }
}
