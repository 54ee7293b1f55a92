//! The endpoint proxy over real HTTP on loopback: backends are small axum apps served by hyper
//! (so that a test can kill one with all its connections), clients are hyper and tungstenite.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{header, HeaderMap, Request, Response, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{any, get, post};
use axum::Router;
use futures_util::{SinkExt, StreamExt};
use gantry_proxy::{host_endpoint, split_path, Access, Authorize, Backend, Proxy, ProxyConfig};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{mpsc, Notify};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

const DOMAIN: &str = "gantry.test";
const MIB: usize = 1 << 20;
const WAIT: Duration = Duration::from_secs(30);

// ---- the caller's side: metadata and the access decision ----

#[derive(Debug, Clone, Default)]
struct Meta {
    /// `None`: public. Otherwise callers need `Authorization: Bearer <token>`, which is
    /// removed before the backend sees the request.
    token: Option<&'static str>,
}

struct TokenAuth;

impl Authorize<Meta> for TokenAuth {
    async fn authorize(
        &self,
        _endpoint: &str,
        meta: &Meta,
        req: &axum::http::request::Parts,
    ) -> Access {
        let Some(token) = meta.token else {
            return Access::Allow {
                strip_authorization: false,
            };
        };
        let given = req
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given == Some(token) {
            Access::Allow {
                strip_authorization: true,
            }
        } else {
            let mut resp = Response::new(Body::from(r#"{"error":"no such endpoint"}"#));
            *resp.status_mut() = StatusCode::NOT_FOUND;
            Access::Deny(resp)
        }
    }
}

type TestProxy = Proxy<Meta, TokenAuth>;

fn config() -> ProxyConfig {
    ProxyConfig {
        cut_grace: Duration::from_secs(2),
        ..ProxyConfig::default()
    }
}

/// The proxy behind an axum server, the way the control plane mounts it: endpoint requests
/// (Host or `/e/`) go to the proxy, everything else to the rest of the router (here: 418).
async fn start_proxy() -> (Arc<TestProxy>, SocketAddr) {
    let proxy = Arc::new(Proxy::new(config(), TokenAuth));
    let p = proxy.clone();
    let app = Router::new().fallback(move |req: Request<Body>| {
        let p = p.clone();
        async move {
            match p.dispatch(req, Some(DOMAIN)).await {
                Ok(resp) => resp,
                Err(_) => (StatusCode::IM_A_TEAPOT, "not an endpoint").into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    (proxy, addr)
}

fn backend(addr: SocketAddr, generation: u64, label: &str) -> Option<Backend> {
    Some(Backend {
        addr,
        generation,
        label: label.into(),
    })
}

// ---- backends ----

/// A backend server whose accept loop owns its connections: `kill` drops them all.
struct TestBackend {
    addr: SocketAddr,
    hooks: Arc<Hooks>,
    task: tokio::task::JoinHandle<()>,
}

impl TestBackend {
    async fn start(name: &str) -> Self {
        let hooks = Arc::new(Hooks {
            name: name.to_string(),
            ..Hooks::default()
        });
        let app = app(hooks.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let service = TowerToHyperService::new(app.clone());
                connections.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        TestBackend { addr, hooks, task }
    }

    fn kill(self) {
        self.task.abort();
    }
}

#[derive(Default)]
struct Hooks {
    name: String,
    requests: AtomicUsize,
    upload_started: Notify,
    download_go: Notify,
    /// What `/events` (SSE) and `/stream` (octet-stream) send, line by line.
    events: Mutex<Option<mpsc::Receiver<String>>>,
    stream: Mutex<Option<mpsc::Receiver<String>>>,
    /// Close codes the WebSocket handler received.
    ws_closes: Mutex<Vec<u16>>,
    ws_closed: Notify,
}

fn app(hooks: Arc<Hooks>) -> Router {
    Router::new()
        .route(
            "/who",
            get(|State(h): State<Arc<Hooks>>| async move { h.name.clone() }),
        )
        .route("/upload", post(upload))
        .route("/download", get(download))
        .route("/events", get(events))
        .route("/stream", get(stream))
        .route("/hop", get(hop))
        .route("/ws", any(ws))
        .route(
            "/never",
            get(|| async {
                std::future::pending::<()>().await;
                ""
            }),
        )
        .fallback(echo)
        .layer(axum::middleware::from_fn_with_state(
            hooks.clone(),
            |State(h): State<Arc<Hooks>>, req, next: axum::middleware::Next| async move {
                h.requests.fetch_add(1, Ordering::SeqCst);
                next.run(req).await
            },
        ))
        .with_state(hooks)
}

/// Says what arrived: method, URI as the backend saw it, headers, body length.
async fn echo(State(h): State<Arc<Hooks>>, req: Request<Body>) -> axum::Json<serde_json::Value> {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, MIB).await.unwrap();
    let headers: serde_json::Map<String, serde_json::Value> = parts
        .headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("?").into()))
        .collect();
    axum::Json(serde_json::json!({
        "backend": h.name,
        "method": parts.method.as_str(),
        "uri": parts.uri.to_string(),
        "headers": headers,
        "body": body.len(),
    }))
}

async fn upload(State(h): State<Arc<Hooks>>, body: Body) -> String {
    let mut data = body.into_data_stream();
    let mut total = 0usize;
    let mut sum = 0u64;
    while let Some(chunk) = data.next().await {
        let chunk = chunk.unwrap();
        if total == 0 {
            h.upload_started.notify_one();
        }
        total += chunk.len();
        sum += chunk.iter().map(|b| u64::from(*b)).sum::<u64>();
    }
    format!("{total} {sum}")
}

/// 50 MiB in 64 KiB chunks; after the first, waits for the test to say the client has it.
async fn download(State(h): State<Arc<Hooks>>) -> Body {
    let chunks = futures_util::stream::unfold(0usize, move |sent| {
        let h = h.clone();
        async move {
            if sent >= 50 * MIB {
                return None;
            }
            if sent == 64 << 10 {
                h.download_go.notified().await;
            }
            Some((
                Ok::<_, Infallible>(Bytes::from(vec![(sent / (64 << 10)) as u8; 64 << 10])),
                sent + (64 << 10),
            ))
        }
    });
    Body::from_stream(chunks)
}

fn lines(rx: mpsc::Receiver<String>) -> Body {
    Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        let line = rx.recv().await?;
        Some((Ok::<_, Infallible>(Bytes::from(line)), rx))
    }))
}

async fn events(State(h): State<Arc<Hooks>>) -> impl IntoResponse {
    let rx = h
        .events
        .lock()
        .unwrap()
        .take()
        .expect("one /events per test");
    ([(header::CONTENT_TYPE, "text/event-stream")], lines(rx))
}

async fn stream(State(h): State<Arc<Hooks>>) -> impl IntoResponse {
    let rx = h
        .stream
        .lock()
        .unwrap()
        .take()
        .expect("one /stream per test");
    (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        lines(rx),
    )
}

async fn hop() -> impl IntoResponse {
    (
        [
            (header::CONNECTION, "x-resp-hop"),
            (header::HeaderName::from_static("x-resp-hop"), "1"),
            (header::HeaderName::from_static("keep-alive"), "timeout=99"),
            (header::HeaderName::from_static("x-resp-kept"), "1"),
        ],
        "hop",
    )
}

async fn ws(ws: WebSocketUpgrade, State(h): State<Arc<Hooks>>) -> Response<Body> {
    ws.on_upgrade(move |socket| ws_echo(socket, h))
}

async fn ws_echo(mut socket: WebSocket, h: Arc<Hooks>) {
    while let Some(Ok(msg)) = socket.recv().await {
        let reply = match msg {
            WsMessage::Text(t) => WsMessage::Text(format!("{}:{}", h.name, t.as_str()).into()),
            WsMessage::Binary(b) => WsMessage::Binary(b),
            WsMessage::Close(frame) => {
                h.ws_closes
                    .lock()
                    .unwrap()
                    .push(frame.map_or(1005, |f| f.code));
                h.ws_closed.notify_one();
                break;
            }
            _ => continue,
        };
        if socket.send(reply).await.is_err() {
            break;
        }
    }
}

// ---- clients ----

fn client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

fn request(method: &str, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Body::empty()).unwrap()
}

async fn send(req: Request<Body>) -> (StatusCode, HeaderMap, Bytes) {
    let resp = timeout(WAIT, client().request(req))
        .await
        .expect("an answer in time")
        .expect("the proxy answers");
    let (parts, body) = resp.into_parts();
    let body = axum::body::to_bytes(Body::new(body), 64 * MIB)
        .await
        .unwrap();
    (parts.status, parts.headers, body)
}

async fn get_text(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let (status, _, body) = send(request("GET", addr, path, headers)).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn echo_of(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> serde_json::Value {
    let (status, body) = get_text(addr, path, headers).await;
    assert_eq!(status, StatusCode::OK, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// A streaming response, read frame by frame.
struct Streaming(axum::body::BodyDataStream);

impl Streaming {
    async fn open(addr: SocketAddr, path: &str) -> Self {
        let resp = timeout(WAIT, client().request(request("GET", addr, path, &[])))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        Streaming(Body::new(resp.into_body()).into_data_stream())
    }

    /// The next piece; `None` at a clean end; panics on an error.
    async fn next(&mut self) -> Option<Bytes> {
        timeout(WAIT, self.0.next())
            .await
            .expect("the stream moves")
            .map(|r| r.expect("no error"))
    }
}

// ---- tests ----

#[test]
fn endpoint_paths_and_hosts() {
    assert_eq!(
        split_path("/e/chat/v1/models?x=1"),
        Some(("chat", "/v1/models?x=1"))
    );
    assert_eq!(split_path("/e/chat"), Some(("chat", "")));
    assert_eq!(split_path("/e/chat?x=1"), Some(("chat", "?x=1")));
    assert_eq!(split_path("/e/chat/"), Some(("chat", "/")));
    assert_eq!(split_path("/e/"), None);
    assert_eq!(split_path("/e//x"), None);
    assert_eq!(split_path("/ex/chat"), None);
    assert_eq!(split_path("/api/v1/e/chat"), None);

    let name = |h| host_endpoint(h, "gantry.example").map(|n| n.into_owned());
    assert_eq!(name("chat.gantry.example").as_deref(), Some("chat"));
    assert_eq!(name("Chat.Gantry.EXAMPLE:8080").as_deref(), Some("chat"));
    assert_eq!(name("chat.gantry.example.").as_deref(), Some("chat"));
    assert_eq!(name("gantry.example"), None);
    assert_eq!(name(".gantry.example"), None);
    assert_eq!(name("a.b.gantry.example"), None);
    assert_eq!(name("chatgantry.example"), None);
    assert_eq!(name("chat.other.example"), None);
    assert_eq!(name("[::1]:8080"), None);
    assert_eq!(name("é.gantry.example").as_deref(), Some("é"));
    assert_eq!(host_endpoint("chat.gantry.example", ""), None);
    assert_eq!(
        host_endpoint("chat.localhost:7777", ".localhost").as_deref(),
        Some("chat")
    );
}

/// 50 MiB each way, and proof that neither is buffered: the backend sees the upload's first
/// chunk before the client sends the rest, and the client gets the download's first chunk
/// before the backend sends the rest.
#[tokio::test]
async fn large_bodies_stream_both_ways() {
    let (proxy, addr) = start_proxy().await;
    let a = TestBackend::start("a").await;
    proxy.insert("big", Meta::default());
    proxy.switch("big", backend(a.addr, 1, "a")).unwrap();

    let hooks = a.hooks.clone();
    let chunks = futures_util::stream::unfold(0usize, move |sent| {
        let hooks = hooks.clone();
        async move {
            if sent >= 50 * MIB {
                return None;
            }
            if sent == 64 << 10 {
                // Blocks until the backend has the first chunk: a buffering proxy never gets it.
                hooks.upload_started.notified().await;
            }
            Some((
                Ok::<_, Infallible>(Bytes::from(vec![3u8; 64 << 10])),
                sent + (64 << 10),
            ))
        }
    });
    let mut req = request("POST", addr, "/e/big/upload", &[]);
    *req.body_mut() = Body::from_stream(chunks);
    let (status, _, body) = send(req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        String::from_utf8_lossy(&body),
        format!("{} {}", 50 * MIB, 3 * 50 * MIB)
    );

    let mut download = Streaming::open(addr, "/e/big/download").await;
    let mut got = download.next().await.unwrap().len();
    a.hooks.download_go.notify_one();
    while let Some(chunk) = download.next().await {
        got += chunk.len();
    }
    assert_eq!(got, 50 * MIB);
    assert_eq!(proxy.in_flight("big", 1), 0);
}

#[tokio::test]
async fn path_routes_strip_the_prefix_and_say_so() {
    let (proxy, addr) = start_proxy().await;
    let a = TestBackend::start("a").await;
    proxy.insert("echo", Meta::default());
    proxy.switch("echo", backend(a.addr, 1, "a")).unwrap();

    let seen = echo_of(
        addr,
        "/e/echo/a/b?x=1&y=two%20words",
        &[("host", "gantry.test:9999"), ("x-forwarded-for", "6.6.6.6")],
    )
    .await;
    assert_eq!(seen["uri"], "/a/b?x=1&y=two%20words");
    let h = &seen["headers"];
    assert_eq!(h["x-forwarded-prefix"], "/e/echo");
    assert_eq!(h["x-forwarded-host"], "gantry.test:9999");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(
        h["x-forwarded-for"], "127.0.0.1",
        "a client's own claim is replaced"
    );
    assert_eq!(
        h["host"], "gantry.test:9999",
        "the backend sees the public host"
    );

    assert_eq!(echo_of(addr, "/e/echo", &[]).await["uri"], "/");
    assert_eq!(echo_of(addr, "/e/echo?q=1", &[]).await["uri"], "/?q=1");
    assert_eq!(echo_of(addr, "/e/echo/", &[]).await["uri"], "/");

    let mut post = request("POST", addr, "/e/echo/form", &[]);
    *post.body_mut() = Body::from("x".repeat(1000));
    let (status, _, body) = send(post).await;
    assert_eq!(status, StatusCode::OK);
    let seen: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (seen["method"].as_str(), seen["body"].as_u64()),
        (Some("POST"), Some(1000))
    );

    let (status, body) = get_text(addr, "/e/echoes/x", &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("no endpoint named echoes"), "{body}");
}

#[tokio::test]
async fn hop_by_hop_headers_and_endpoint_tokens_stay_behind() {
    let (proxy, addr) = start_proxy().await;
    let a = TestBackend::start("a").await;
    proxy.insert(
        "private",
        Meta {
            token: Some("ep-secret"),
        },
    );
    proxy.switch("private", backend(a.addr, 1, "a")).unwrap();
    proxy.insert("open", Meta::default());
    proxy.switch("open", backend(a.addr, 1, "a")).unwrap();

    let sent = [
        ("authorization", "Bearer ep-secret"),
        ("connection", "keep-alive, x-hop"),
        ("x-hop", "1"),
        ("keep-alive", "timeout=5"),
        ("proxy-authorization", "Basic eDp5"),
        ("proxy-connection", "keep-alive"),
        ("te", "trailers"),
        ("x-kept", "1"),
    ];
    let seen = echo_of(addr, "/e/private/x", &sent).await;
    let h = seen["headers"].as_object().unwrap();
    for gone in [
        "authorization",
        "connection",
        "x-hop",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
    ] {
        assert!(!h.contains_key(gone), "{gone} reached the backend: {h:?}");
    }
    assert_eq!(h["x-kept"], "1");

    // An endpoint that is not the caller's to call: the caller's answer, the backend untouched.
    let before = a.hooks.requests.load(Ordering::SeqCst);
    for auth in [None, Some("Bearer wrong")] {
        let headers: Vec<_> = auth.iter().map(|v| ("authorization", *v)).collect();
        let (status, body) = get_text(addr, "/e/private/x", &headers).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    }
    assert_eq!(a.hooks.requests.load(Ordering::SeqCst), before);

    // Where the caller does not ask for it, Authorization is the app's own business.
    let seen = echo_of(addr, "/e/open/x", &[("authorization", "Bearer app-token")]).await;
    assert_eq!(seen["headers"]["authorization"], "Bearer app-token");

    // And the backend's hop-by-hop headers stay on its side.
    let (status, headers, body) = send(request("GET", addr, "/e/open/hop", &[])).await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"hop"[..]));
    assert!(headers.get("x-resp-hop").is_none(), "{headers:?}");
    assert!(headers.get("keep-alive").is_none(), "{headers:?}");
    assert_eq!(headers.get("x-resp-kept").unwrap(), "1");
}

#[tokio::test]
async fn host_routes_win_over_paths() {
    let (proxy, addr) = start_proxy().await;
    let a = TestBackend::start("a").await;
    let b = TestBackend::start("b").await;
    proxy.insert("echo", Meta::default());
    proxy.switch("echo", backend(a.addr, 1, "a")).unwrap();
    proxy.insert("other", Meta::default());
    proxy.switch("other", backend(b.addr, 1, "b")).unwrap();

    let seen = echo_of(addr, "/e/other/x?q=1", &[("host", "echo.gantry.test")]).await;
    assert_eq!(seen["backend"], "a");
    assert_eq!(
        seen["uri"], "/e/other/x?q=1",
        "Host routes keep the full path"
    );
    assert!(seen["headers"].get("x-forwarded-prefix").is_none());
    assert_eq!(seen["headers"]["x-forwarded-host"], "echo.gantry.test");

    let seen = echo_of(addr, "/api/v1/whoami", &[("host", "ECHO.Gantry.Test:8443")]).await;
    assert_eq!(
        (seen["backend"].as_str(), seen["uri"].as_str()),
        (Some("a"), Some("/api/v1/whoami"))
    );

    let (status, body) = get_text(addr, "/", &[("host", "nope.gantry.test")]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("no endpoint named nope"), "{body}");

    // The server's own name: paths decide.
    let seen = echo_of(addr, "/e/other/z", &[("host", "gantry.test")]).await;
    assert_eq!(
        (seen["backend"].as_str(), seen["uri"].as_str()),
        (Some("b"), Some("/z"))
    );
    let (status, _) = get_text(addr, "/api/v1/whoami", &[("host", "gantry.test")]).await;
    assert_eq!(
        status,
        StatusCode::IM_A_TEAPOT,
        "not an endpoint: the rest of the router"
    );
}

#[tokio::test]
async fn no_backend_is_503_and_an_unreachable_one_502() {
    let (proxy, addr) = start_proxy().await;
    proxy.insert("idle", Meta::default());
    let (status, headers, body) = send(request("GET", addr, "/e/idle/x", &[])).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        body["error"],
        "endpoint idle has no backend: no service is attached to it"
    );
    proxy.set_idle_reason("idle", "the takeover by workflow 1234 failed");
    let (_, body) = get_text(addr, "/e/idle/x", &[]).await;
    assert!(
        body.contains("the takeover by workflow 1234 failed"),
        "{body}"
    );

    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    proxy
        .switch("idle", backend(dead, 7, "wf-1234/llm"))
        .unwrap();
    let (status, headers, body) = send(request("GET", addr, "/e/idle/x", &[])).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let error = body["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!(
            "endpoint idle: backend wf-1234/llm at {dead} cannot be reached"
        )),
        "{error}"
    );
    assert_eq!(proxy.in_flight("idle", 7), 0);

    // Back to no backend: 503 again.
    assert_eq!(proxy.switch("idle", None).unwrap().unwrap().generation, 7);
    let (status, _) = get_text(addr, "/e/idle/x", &[]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

/// A stream begun on A stays on A after the switch to B, while new requests go to B; A's
/// generation drains only when that stream ends.
#[tokio::test]
async fn sse_keeps_streaming_from_the_old_backend_until_it_ends() {
    let (proxy, addr) = start_proxy().await;
    let a = TestBackend::start("a").await;
    let b = TestBackend::start("b").await;
    let (events, rx) = mpsc::channel(8);
    *a.hooks.events.lock().unwrap() = Some(rx);
    proxy.insert("chat", Meta::default());
    proxy.switch("chat", backend(a.addr, 1, "a")).unwrap();

    let mut sse = Streaming::open(addr, "/e/chat/events").await;
    events.send("data: one\n\n".into()).await.unwrap();
    assert_eq!(sse.next().await.unwrap(), "data: one\n\n");

    let old = proxy.switch("chat", backend(b.addr, 2, "b")).unwrap();
    assert_eq!(old.unwrap().label, "a");
    assert_eq!(get_text(addr, "/e/chat/who", &[]).await.1, "b");
    events.send("data: two\n\n".into()).await.unwrap();
    assert_eq!(sse.next().await.unwrap(), "data: two\n\n");
    assert_eq!(proxy.in_flight("chat", 1), 1);
    assert_eq!(proxy.in_flight("chat", 2), 0);
    assert_eq!(
        proxy
            .generations("chat")
            .iter()
            .map(|(b, n)| (b.generation, *n))
            .collect::<Vec<_>>(),
        vec![(1, 1), (2, 0)]
    );
    assert!(!proxy.drained("chat", 1, Duration::from_millis(100)).await);

    let p = proxy.clone();
    let drained = tokio::spawn(async move { p.drained("chat", 1, WAIT).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !drained.is_finished(),
        "drained while the stream still runs"
    );
    drop(events); // A ends the stream
    assert_eq!(sse.next().await, None);
    assert!(timeout(WAIT, drained).await.unwrap().unwrap());
    assert_eq!(proxy.in_flight("chat", 1), 0);
    assert_eq!(
        a.hooks.requests.load(Ordering::SeqCst),
        1,
        "nothing new reached A"
    );
}

/// At the drain deadline: SSE ends cleanly, a plain stream is aborted (so it does not look
/// complete), a request still waiting for its answer gets 503.
#[tokio::test]
async fn cut_ends_what_is_left_on_the_old_backend() {
    let (proxy, addr) = start_proxy().await;
    let a = TestBackend::start("a").await;
    let b = TestBackend::start("b").await;
    let (events, rx) = mpsc::channel(8);
    *a.hooks.events.lock().unwrap() = Some(rx);
    let (bytes, rx) = mpsc::channel(8);
    *a.hooks.stream.lock().unwrap() = Some(rx);
    proxy.insert("chat", Meta::default());
    proxy.switch("chat", backend(a.addr, 1, "a")).unwrap();

    let mut sse = Streaming::open(addr, "/e/chat/events").await;
    events.send("data: one\n\n".into()).await.unwrap();
    assert_eq!(sse.next().await.unwrap(), "data: one\n\n");
    let mut plain = Streaming::open(addr, "/e/chat/stream").await;
    bytes.send("part one".into()).await.unwrap();
    assert_eq!(plain.next().await.unwrap(), "part one");
    let waiting = tokio::spawn(get_text(addr, "/e/chat/never", &[]));
    while proxy.in_flight("chat", 1) < 3 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    proxy.switch("chat", backend(b.addr, 2, "b")).unwrap();
    assert!(!proxy.drained("chat", 1, Duration::from_millis(50)).await);
    assert_eq!(proxy.cut("chat", 1).await, 0);
    assert_eq!(proxy.in_flight("chat", 1), 0);
    assert!(proxy.drained("chat", 1, Duration::ZERO).await);

    assert_eq!(sse.next().await, None, "SSE ends cleanly");
    let aborted = timeout(WAIT, plain.0.next()).await.unwrap();
    assert!(matches!(aborted, Some(Err(_))), "{aborted:?}");
    let (status, body) = timeout(WAIT, waiting).await.unwrap().unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("retry"), "{body}");
    // The new generation is untouched.
    assert_eq!(get_text(addr, "/e/chat/who", &[]).await.1, "b");
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws_connect(addr: SocketAddr, path: &str) -> Ws {
    let (ws, resp) = timeout(
        WAIT,
        tokio_tungstenite::connect_async(format!("ws://{addr}{path}")),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    ws
}

async fn ws_say(ws: &mut Ws, text: &str) -> String {
    ws.send(Message::text(text)).await.unwrap();
    match timeout(WAIT, ws.next()).await.unwrap().unwrap().unwrap() {
        Message::Text(t) => t.as_str().to_string(),
        other => panic!("expected text, got {other:?}"),
    }
}

#[tokio::test]
async fn websockets_pass_through_and_stay_on_their_generation() {
    let (proxy, addr) = start_proxy().await;
    let a = TestBackend::start("a").await;
    let b = TestBackend::start("b").await;
    let c = TestBackend::start("c").await;
    proxy.insert("sock", Meta::default());
    proxy.switch("sock", backend(a.addr, 1, "a")).unwrap();

    let mut on_a = ws_connect(addr, "/e/sock/ws").await;
    assert_eq!(ws_say(&mut on_a, "hi").await, "a:hi");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    on_a.send(Message::binary(big.clone())).await.unwrap();
    match timeout(WAIT, on_a.next()).await.unwrap().unwrap().unwrap() {
        Message::Binary(got) => assert!(got[..] == big[..], "the echo differs"),
        other => panic!("expected binary, got {other:?}"),
    }

    proxy.switch("sock", backend(b.addr, 2, "b")).unwrap();
    let mut on_b = ws_connect(addr, "/e/sock/ws").await;
    assert_eq!(ws_say(&mut on_b, "hi").await, "b:hi");
    assert_eq!(
        ws_say(&mut on_a, "still").await,
        "a:still",
        "A keeps its socket"
    );
    assert_eq!(proxy.in_flight("sock", 1), 1);
    assert!(!proxy.drained("sock", 1, Duration::from_millis(100)).await);
    on_a.close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    }))
    .await
    .unwrap();
    while let Some(Ok(_)) = timeout(WAIT, on_a.next()).await.unwrap() {}
    // The client keeps its end open: the proxy ends the tunnel once A has closed, after the
    // grace for the client to follow.
    assert!(proxy.drained("sock", 1, WAIT).await);
    timeout(WAIT, a.hooks.ws_closed.notified()).await.unwrap();
    assert_eq!(*a.hooks.ws_closes.lock().unwrap(), vec![1000]);

    // At the deadline, B's socket is closed on both sides with 1001 (going away).
    proxy.switch("sock", backend(c.addr, 3, "c")).unwrap();
    assert_eq!(proxy.in_flight("sock", 2), 1);
    assert_eq!(proxy.cut("sock", 2).await, 0);
    match timeout(WAIT, on_b.next()).await.unwrap() {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::Away),
        other => panic!("expected a close frame, got {other:?}"),
    }
    timeout(WAIT, b.hooks.ws_closed.notified()).await.unwrap();
    assert_eq!(*b.hooks.ws_closes.lock().unwrap(), vec![1001]);
    let mut on_c = ws_connect(addr, "/e/sock/ws").await;
    assert_eq!(ws_say(&mut on_c, "hi").await, "c:hi");
}

/// Clients loop GETs while the endpoint moves through six backends; after each switch the old
/// backend drains and is killed with all its connections. Nothing fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_under_load_fails_nothing() {
    let (proxy, addr) = start_proxy().await;
    let mut current = TestBackend::start("b0").await;
    proxy.insert("load", Meta::default());
    proxy
        .switch("load", backend(current.addr, 0, "b0"))
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut clients = Vec::new();
    for _ in 0..16 {
        let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
        clients.push(tokio::spawn(async move {
            let http = client();
            while !stop.load(Ordering::SeqCst) {
                let req = request("GET", addr, "/e/load/who", &[]);
                let result = match timeout(WAIT, http.request(req)).await {
                    Err(_) => Err("timed out".to_string()),
                    Ok(Err(e)) => Err(format!("{e:?}")),
                    Ok(Ok(resp)) => {
                        let status = resp.status();
                        let body = axum::body::to_bytes(Body::new(resp.into_body()), MIB).await;
                        match body {
                            Ok(body) if status == StatusCode::OK && body.starts_with(b"b") => {
                                Ok(())
                            }
                            Ok(body) => {
                                Err(format!("{status}: {}", String::from_utf8_lossy(&body)))
                            }
                            Err(e) => Err(format!("body: {e}")),
                        }
                    }
                };
                match result {
                    Ok(()) => ok.fetch_add(1, Ordering::SeqCst),
                    Err(e) => {
                        failures.lock().unwrap().push(e);
                        0
                    }
                };
            }
        }));
    }

    for generation in 1..=6u64 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let name = format!("b{generation}");
        let next = TestBackend::start(&name).await;
        proxy
            .switch("load", backend(next.addr, generation, &name))
            .unwrap();
        assert!(
            proxy.drained("load", generation - 1, WAIT).await,
            "generation {} did not drain",
            generation - 1
        );
        let old = std::mem::replace(&mut current, next);
        let served = old.hooks.requests.load(Ordering::SeqCst);
        assert!(served > 0, "backend {} served nothing", old.hooks.name);
        old.kill();
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        timeout(WAIT, c).await.unwrap().unwrap();
    }
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let ok = ok.load(Ordering::SeqCst);
    eprintln!("{ok} requests through six switches, none failed");
    assert!(ok > 100, "only {ok} requests in the whole run");
    assert!(current.hooks.requests.load(Ordering::SeqCst) > 0);
}
