//! A server started in-process with a few users, and a small HTTP client for its API.

#![allow(dead_code)] // each test file uses its own part of this

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Deref;
use std::path::Path;
use std::time::{Duration, Instant};

use gantry_api::v1::Role;
use gantry_server::{Server, ServerConfig};
use reqwest::header::{HeaderMap, AUTHORIZATION};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// A valid workflow of one job. Without agents it stays PENDING.
pub const HELLO: &str = "\
version: v4
jobs:
  main:
    image:
      uri: docker://busybox:1
    command: [\"true\"]
";

/// How long a test waits for the controller before giving up. Generous: never a measurement.
const PATIENCE: Duration = Duration::from_secs(60);

pub fn client() -> reqwest::Client {
    // reqwest is built without a default crypto provider; plain http still wants one installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("an HTTP client")
}

pub async fn start_server(data_dir: &Path) -> Server {
    let listen = "127.0.0.1:0".parse().expect("a socket address");
    Server::start(ServerConfig::new(listen, data_dir.to_path_buf()))
        .await
        .expect("the server starts")
}

pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// One route of the API, with a body that would be accepted from a caller allowed to use it.
pub struct Route {
    pub method: Method,
    pub path: String,
    pub body: Option<Value>,
    /// Only administrators may use it.
    pub admin_only: bool,
    /// The agents' WebSocket: requested with the handshake's headers.
    pub agent_only: bool,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} /api/v1{}", self.method, self.path)
    }
}

/// Every route under `/api/v1`, aimed at workflow `wf` where it takes one.
pub fn routes(wf: &str) -> Vec<Route> {
    let r = |method: Method, path: String, body: Option<Value>| Route {
        method,
        path,
        body,
        admin_only: false,
        agent_only: false,
    };
    let admin = |method: Method, path: &str, body: Option<Value>| Route {
        admin_only: true,
        ..r(method, path.to_string(), body)
    };
    vec![
        r(Method::GET, "/whoami".into(), None),
        r(Method::GET, "/workflows".into(), None),
        r(
            Method::POST,
            "/workflows".into(),
            Some(json!({"spec": HELLO})),
        ),
        r(
            Method::POST,
            "/workflows/validate".into(),
            Some(json!({"spec": HELLO})),
        ),
        r(Method::GET, format!("/workflows/{wf}"), None),
        r(Method::GET, format!("/workflows/{wf}/events"), None),
        r(Method::POST, format!("/workflows/{wf}/stop"), None),
        r(Method::GET, format!("/workflows/{wf}/logs/main"), None),
        r(Method::GET, "/nodes".into(), None),
        r(Method::GET, "/nodes/node-1".into(), None),
        admin(
            Method::POST,
            "/admin/users",
            Some(json!({"name": "mallory"})),
        ),
        admin(Method::GET, "/admin/users", None),
        admin(Method::GET, "/admin/users/alice", None),
        admin(Method::POST, "/admin/users/alice/disable", None),
        admin(Method::POST, "/admin/users/alice/enable", None),
        admin(Method::DELETE, "/admin/users/carol", None),
        admin(Method::GET, "/admin/tokens", None),
        admin(Method::DELETE, "/admin/tokens/0123456789abcdef", None),
        admin(
            Method::POST,
            "/admin/tokens/0123456789abcdef/rotate",
            Some(json!({})),
        ),
        r(Method::GET, "/endpoint-tokens".into(), None),
        r(
            Method::DELETE,
            "/endpoint-tokens/0123456789abcdef".into(),
            None,
        ),
        admin(Method::GET, "/admin/settings", None),
        admin(Method::GET, "/admin/controller", None),
        admin(Method::GET, "/admin/settings/builds.enabled", None),
        admin(
            Method::PUT,
            "/admin/settings/builds.enabled",
            Some(json!({"key": "builds.enabled", "value": "false"})),
        ),
        r(Method::GET, "/secrets".into(), None),
        r(
            Method::PUT,
            "/secrets/user/api-key".into(),
            Some(json!({"value": "s3cret"})),
        ),
        r(Method::DELETE, "/secrets/user/api-key".into(), None),
        r(Method::GET, "/volumes".into(), None),
        r(
            Method::POST,
            "/volumes".into(),
            Some(json!({"name": "results"})),
        ),
        r(Method::GET, "/volumes/user/results".into(), None),
        r(Method::DELETE, "/volumes/user/results".into(), None),
        r(Method::GET, "/storages".into(), None),
        admin(Method::GET, "/admin/storages", None),
        admin(
            Method::POST,
            "/admin/storages",
            Some(json!({"name": "nfs", "driver": "hostpath", "path": "/mnt/nfs"})),
        ),
        admin(Method::DELETE, "/admin/storages/nfs", None),
        admin(
            Method::POST,
            "/nodes/node-1/holds",
            Some(json!({"kind": "cordon", "reason": "maintenance"})),
        ),
        admin(Method::POST, "/nodes/node-1/release", Some(json!({}))),
        // Alertmanager and Prometheus (the monitoring token) or an administrator.
        admin(
            Method::POST,
            "/monitoring/alertmanager",
            Some(json!({"alerts": []})),
        ),
        admin(Method::GET, "/monitoring/targets", None),
        Route {
            agent_only: true,
            ..r(Method::GET, "/agent/connect".into(), None)
        },
    ]
}

/// A reply, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}), status {}: {:?}", self.status, self.body))
    }

    /// The message of an error reply, which must have the `{"error": "..."}` shape.
    pub fn error(&self) -> String {
        let v = self.json();
        match v.get("error").and_then(Value::as_str) {
            Some(m) => m.to_string(),
            None => panic!("no `error` in a {} reply: {v}", self.status),
        }
    }
}

/// A request being built.
pub struct Req(reqwest::RequestBuilder);

impl Req {
    pub fn header(self, name: &str, value: &str) -> Req {
        Req(self.0.header(name, value))
    }

    pub fn body(self, body: impl Into<reqwest::Body>) -> Req {
        Req(self.0.body(body))
    }

    pub fn json(self, body: &Value) -> Req {
        Req(self.0.json(body))
    }

    /// The WebSocket handshake's headers (RFC 6455 section 4.1).
    pub fn websocket(self) -> Req {
        self.header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
    }

    pub async fn send(self) -> Reply {
        let resp = self.0.send().await.expect("the server answers");
        let status = resp.status();
        let headers = resp.headers().clone();
        // An upgraded connection has no body to read.
        let body = if status == StatusCode::SWITCHING_PROTOCOLS {
            String::new()
        } else {
            resp.text().await.expect("a readable body")
        };
        Reply {
            status,
            headers,
            body,
        }
    }
}

/// The API of one server.
pub struct Api {
    pub base: String,
    http: reqwest::Client,
}

impl Api {
    pub fn new(server: &Server) -> Api {
        Api {
            base: format!("http://{}", server.addr),
            http: client(),
        }
    }

    /// A request to `/api/v1{path}` with this `Authorization` header, if any.
    pub fn raw(&self, method: Method, path: &str, authorization: Option<&str>) -> Req {
        let mut b = self
            .http
            .request(method, format!("{}/api/v1{path}", self.base));
        if let Some(a) = authorization {
            b = b.header(AUTHORIZATION, a);
        }
        Req(b)
    }

    pub async fn route(&self, route: &Route, authorization: Option<&str>) -> Reply {
        let mut req = self.raw(route.method.clone(), &route.path, authorization);
        if let Some(body) = &route.body {
            req = req.json(body);
        }
        if route.agent_only {
            req = req.websocket();
        }
        req.send().await
    }

    pub async fn get(&self, token: &str, path: &str) -> Reply {
        self.raw(Method::GET, path, Some(&bearer(token)))
            .send()
            .await
    }

    pub async fn post(&self, token: &str, path: &str, body: Option<Value>) -> Reply {
        let mut req = self.raw(Method::POST, path, Some(&bearer(token)));
        if let Some(body) = &body {
            req = req.json(body);
        }
        req.send().await
    }

    pub async fn put(&self, token: &str, path: &str, body: Value) -> Reply {
        self.raw(Method::PUT, path, Some(&bearer(token)))
            .json(&body)
            .send()
            .await
    }

    /// Submits a workflow file and returns the new workflow's id.
    pub async fn submit(&self, token: &str, spec: &str) -> String {
        let r = self
            .post(token, "/workflows", Some(json!({"spec": spec})))
            .await;
        assert_eq!(r.status, StatusCode::OK, "submit: {}", r.body);
        r.json()["id"].as_str().expect("an id").to_string()
    }

    pub async fn list_ids(&self, token: &str) -> BTreeSet<String> {
        self.list_ids_query(token, "").await
    }

    pub async fn list_ids_query(&self, token: &str, query: &str) -> BTreeSet<String> {
        let r = self.get(token, &format!("/workflows{query}")).await;
        assert_eq!(r.status, StatusCode::OK, "list: {}", r.body);
        r.json()
            .as_array()
            .expect("a list")
            .iter()
            .map(|w| w["id"].as_str().expect("an id").to_string())
            .collect()
    }

    pub async fn setting_as(&self, token: &str, key: &str) -> String {
        let r = self.get(token, &format!("/admin/settings/{key}")).await;
        assert_eq!(r.status, StatusCode::OK, "setting {key}: {}", r.body);
        let v = r.json();
        assert_eq!(v["key"], key);
        v["value"].as_str().expect("a value").to_string()
    }

    pub async fn events_as(&self, token: &str, wf: &str) -> Vec<Value> {
        let r = self.get(token, &format!("/workflows/{wf}/events")).await;
        assert_eq!(r.status, StatusCode::OK, "events: {}", r.body);
        r.json().as_array().expect("a list").clone()
    }

    pub async fn event_kinds_as(&self, token: &str, wf: &str) -> BTreeSet<String> {
        self.events_as(token, wf)
            .await
            .iter()
            .map(|e| e["kind"].as_str().expect("a kind").to_string())
            .collect()
    }

    /// Polls the workflow until it has status `want`; returns its detail.
    pub async fn wait_for_status(&self, token: &str, wf: &str, want: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let r = self.get(token, &format!("/workflows/{wf}")).await;
            assert_eq!(r.status, StatusCode::OK, "detail: {}", r.body);
            let d = r.json();
            if d["status"] == want {
                return d;
            }
            assert!(
                Instant::now() < deadline,
                "workflow {wf} is not {want} after {PATIENCE:?}: {d}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A server on a fresh data directory with an administrator (root, group admins), alice and
/// carol (group physics), bob (group chem) and a node agent's token.
pub struct Cluster {
    pub api: Api,
    pub server: Server,
    pub admin: String,
    pub alice: String,
    pub carol: String,
    pub bob: String,
    pub agent: String,
    _dir: Option<tempfile::TempDir>,
}

impl Deref for Cluster {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.api
    }
}

impl Cluster {
    pub async fn start() -> Cluster {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut c = Cluster::start_in(dir.path()).await;
        c._dir = Some(dir);
        c
    }

    /// Starts on `data_dir`, which the caller keeps.
    pub async fn start_in(data_dir: &Path) -> Cluster {
        let server = start_server(data_dir).await;
        let user = |name: &'static str, group: &'static str, role: Role| {
            let server = &server;
            async move {
                server
                    .create_user(name, group, role)
                    .await
                    .unwrap_or_else(|e| panic!("creating {name}: {e:#}"))
            }
        };
        let admin = user("root", "admins", Role::Admin).await;
        let alice = user("alice", "physics", Role::User).await;
        let carol = user("carol", "physics", Role::User).await;
        let bob = user("bob", "chem", Role::User).await;
        let agent = user("agent-1", "agents", Role::Agent).await;
        Cluster {
            api: Api::new(&server),
            server,
            admin,
            alice,
            carol,
            bob,
            agent,
            _dir: None,
        }
    }

    pub async fn setting(&self, key: &str) -> String {
        self.setting_as(&self.admin, key).await
    }

    pub async fn event_kinds(&self, wf: &str) -> BTreeSet<String> {
        self.event_kinds_as(&self.admin, wf).await
    }

    pub async fn event_messages(&self, wf: &str) -> Vec<String> {
        self.events_as(&self.admin, wf)
            .await
            .iter()
            .map(|e| e["message"].as_str().expect("a message").to_string())
            .collect()
    }

    /// Refused requests changed nothing: `wf` is the only workflow and still PENDING with no
    /// stop requested, settings keep their defaults, and no user "mallory" was made.
    pub async fn assert_untouched(&self, wf: &str) {
        assert_eq!(
            self.list_ids(&self.admin).await,
            BTreeSet::from([wf.to_string()])
        );
        let d = self
            .get(&self.admin, &format!("/workflows/{wf}"))
            .await
            .json();
        assert_eq!(d["status"], "PENDING", "{d}");
        assert!(!self.event_kinds(wf).await.contains("workflow.stop"));
        assert_eq!(self.setting("builds.enabled").await, "true");
        let r = self
            .post(
                &self.admin,
                "/admin/users",
                Some(json!({"name": "mallory"})),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::OK,
            "mallory already exists: {}",
            r.body
        );
    }
}
