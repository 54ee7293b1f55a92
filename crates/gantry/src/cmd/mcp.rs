//! `gantry mcp`: the MCP server over stdio, for clients that start a local command (Claude
//! Desktop, editors). It relays each JSON-RPC message between stdio and the server's
//! Streamable HTTP endpoint `/mcp`, as the user of the CLI's context (`--url`/`--token`, or
//! the context `gantry up` wrote), like every other verb.
//!
//! Why a relay and not the tools run here over the HTTP API: the tools, their confirmation
//! rules and read-only mode then exist once, in the server, which enforces them whichever
//! client asks. A second implementation here would be a second set of rules, and its
//! confirmations could not be enforced by the server at all.
//!
//! The relay understands only what HTTP needs and stdio does not carry: the session id the
//! server gives at `initialize`, the protocol version header (from the negotiated version, or
//! from each request's `_meta` on 2026-07-28 and later, where the standard `Mcp-Method` and
//! `Mcp-Name` headers are required too), and server-sent event streams, whose messages
//! (results, and the server's own requests such as `elicitation/create`) go to stdout.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use base64::Engine;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::client::Client;
use crate::Conn;

/// The first protocol revision on which requests carry their version and the standard headers.
const MODERN: &str = "2026-07-28";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

pub async fn run(conn: &Conn) -> anyhow::Result<ExitCode> {
    let relay = Arc::new(Relay {
        client: conn.client()?,
        session: Mutex::default(),
        version: Mutex::default(),
        out: tokio::sync::Mutex::new(tokio::io::stdout()),
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut inflight = tokio::task::JoinSet::new();
    while let Some(line) = lines.next_line().await.context("reading stdin")? {
        while inflight.try_join_next().is_some() {}
        if line.trim().is_empty() {
            continue;
        }
        let msg: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                relay
                    .emit(&error(Value::Null, -32700, format!("not JSON: {e}")))
                    .await;
                continue;
            }
        };
        if method(&msg) == Some("initialize") {
            // Everything after it names the session it opens: nothing else goes out first.
            relay.clone().forward(msg).await;
        } else {
            // Concurrently: a call waiting for the person's answer must not hold up the
            // answer itself, which arrives as the next message.
            inflight.spawn(relay.clone().forward(msg));
        }
    }
    // stdin closed: the client has gone, and with it whoever waited for answers.
    inflight.abort_all();
    relay.close().await;
    Ok(ExitCode::SUCCESS)
}

struct Relay {
    client: Client,
    session: Mutex<Option<String>>,
    /// The version `initialize` negotiated (revisions before 2026-07-28).
    version: Mutex<Option<String>>,
    out: tokio::sync::Mutex<tokio::io::Stdout>,
}

fn method(msg: &Value) -> Option<&str> {
    msg.get("method").and_then(Value::as_str)
}

fn error(id: Value, code: i64, message: String) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// `Mcp-Name`: what the standard headers name for a method, Base64-wrapped when it is not
/// plain header text.
fn name_header(method: &str, params: Option<&Value>) -> Option<String> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    let v = params?.get(key)?.as_str()?;
    let padded = v.starts_with([' ', '\t']) || v.ends_with([' ', '\t']);
    let printable = v.chars().all(|c| (' '..='~').contains(&c));
    let looks_wrapped = v.starts_with("=?base64?") && v.ends_with("?=");
    Some(if printable && !padded && !looks_wrapped {
        v.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(v)
        )
    })
}

impl Relay {
    async fn emit(&self, msg: &Value) {
        let mut line = msg.to_string();
        line.push('\n');
        let mut out = self.out.lock().await;
        // A failed write means the client has gone; stdin's end will say so too.
        let _ = out.write_all(line.as_bytes()).await;
        let _ = out.flush().await;
    }

    /// A message from the server: remember what `initialize` negotiated, pass it on.
    async fn deliver(&self, msg: Value) {
        if let Some(v) = msg
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
        {
            *self.version.lock().expect("not poisoned") = Some(v.to_string());
        }
        self.emit(&msg).await;
    }

    async fn forward(self: Arc<Self>, msg: Value) {
        let id = msg.get("id").cloned();
        let method = method(&msg).map(str::to_string);
        // Requests are answered; notifications and our client's responses are not.
        let answer_to = id.filter(|_| method.is_some());
        let version = msg
            .pointer("/params/_meta")
            .and_then(|m| m.get(META_VERSION))
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| {
                (method.as_deref() != Some("initialize"))
                    .then(|| self.version.lock().expect("not poisoned").clone())
                    .flatten()
            });
        let mut req = self
            .client
            .at(reqwest::Method::POST, "/mcp")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .json(&msg);
        if let Some(s) = self.session.lock().expect("not poisoned").clone() {
            req = req.header("mcp-session-id", s);
        }
        if let Some(v) = &version {
            req = req.header("mcp-protocol-version", v);
            if v.as_str() >= MODERN {
                if let Some(m) = &method {
                    req = req.header("mcp-method", m);
                    if let Some(name) = name_header(m, msg.get("params")) {
                        req = req.header("mcp-name", name);
                    }
                }
            }
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                if let Some(id) = answer_to {
                    let text = format!(
                        "cannot reach the Gantry server at {}: {e}",
                        self.client.base
                    );
                    self.emit(&error(id, -32603, text)).await;
                }
                return;
            }
        };
        if let Some(s) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            *self.session.lock().expect("not poisoned") = Some(s.to_string());
        }
        let status = resp.status();
        let is_stream = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if is_stream {
            self.relay_events(resp).await;
            return;
        }
        let text = resp.text().await.unwrap_or_default();
        match serde_json::from_str::<Value>(&text) {
            // The server's own JSON-RPC answer (an error one too), or a batch of them.
            Ok(Value::Array(msgs)) => {
                for m in msgs {
                    self.deliver(m).await;
                }
            }
            Ok(v) if v.get("jsonrpc").is_some() => self.deliver(v).await,
            _ if status.is_success() => {}
            _ => {
                if let Some(id) = answer_to {
                    let why = match status.as_u16() {
                        401 => {
                            "the Gantry server refused the token (check `--token` or the context)"
                                .to_string()
                        }
                        403 => format!("the Gantry server refused the request: {}", text.trim()),
                        _ => format!("the Gantry server answered {status}: {}", text.trim()),
                    };
                    self.emit(&error(id, -32603, why)).await;
                }
            }
        }
    }

    /// Every message of a server-sent event stream, as it comes.
    async fn relay_events(&self, resp: reqwest::Response) {
        let mut stream = resp.bytes_stream();
        // Bytes, not text, until an event is whole: a chunk may end inside a character.
        let mut buf: Vec<u8> = vec![];
        while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else { break };
            // Lines may end in CRLF; a CR is never part of a JSON message.
            buf.extend(chunk.iter().filter(|b| **b != b'\r'));
            while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = buf.drain(..end + 2).collect();
                let event = String::from_utf8_lossy(&event);
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                // Priming events carry no data; keep-alives are comments.
                if data.iter().all(|d| d.is_empty()) {
                    continue;
                }
                if let Ok(v) = serde_json::from_str::<Value>(&data.join("\n")) {
                    self.deliver(v).await;
                }
            }
        }
    }

    /// Ends the server's session, if one was opened.
    async fn close(&self) {
        let session = self.session.lock().expect("not poisoned").clone();
        if let Some(s) = session {
            let _ = self
                .client
                .at(reqwest::Method::DELETE, "/mcp")
                .header("mcp-session-id", s)
                .send()
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_for_the_standard_headers() {
        let p = json!({ "name": "start_workflow" });
        assert_eq!(
            name_header("tools/call", Some(&p)).as_deref(),
            Some("start_workflow")
        );
        let p = json!({ "uri": "gantry://docs/workflow-file" });
        assert_eq!(
            name_header("resources/read", Some(&p)).as_deref(),
            Some("gantry://docs/workflow-file")
        );
        assert_eq!(name_header("tools/list", None), None);
        let p = json!({ "name": "café" });
        assert_eq!(
            name_header("tools/call", Some(&p)).as_deref(),
            Some("=?base64?Y2Fmw6k=?=")
        );
    }
}
