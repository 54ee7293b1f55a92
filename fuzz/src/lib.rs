//! What the fuzz targets run: for each input, the server's own decoding and checks
//! (`gantry_intake`, which the handlers call before they touch the store), then assertions of
//! what the server relies on when it goes on to store an accepted input. A panic anywhere, in
//! the server's code or in an assertion here, is a finding.

use gantry_api::v1::{
    CreateEndpoint, CreateEndpointToken, CreateUser, PlaceHold, PutSecret, ReleaseHolds, Setting,
    SubmitWorkflow, ValidateWorkflow,
};
use gantry_core::plan::{self, WorkflowPlan};
use gantry_intake::alertmanager;
use gantry_intake::mcp::{self, Call};
use gantry_intake::requests::{self, Refusal};
use serde::Deserialize;

/// The nodes the webhook's checks know; seeds and the dictionary name them.
pub const KNOWN_NODES: &[&str] = &["node-1", "node-2", "gpu-7"];

/// "Now" for expiries, in ms since the epoch.
const NOW_MS: i64 = 1_767_225_600_000;

fn refusal(r: Refusal) {
    match r {
        Refusal::Bad(message) => assert!(!message.is_empty()),
        Refusal::TooLarge { size, limit } => {
            assert_eq!(limit, requests::MAX_SPEC_BYTES as u64);
            assert!(size > limit, "{size} bytes refused as more than {limit}");
        }
        Refusal::Invalid {
            message,
            diagnostics,
        } => {
            assert!(!message.is_empty());
            assert!(!diagnostics.is_empty());
            for d in &diagnostics {
                assert!(
                    d.line >= 1 && d.column >= 1 && !d.message.is_empty(),
                    "{d:?}"
                );
            }
        }
    }
}

/// `POST /api/v1/workflows/validate`.
pub fn validate(body: &[u8]) {
    let Ok(req) = gantry_intake::json::<ValidateWorkflow>(body) else {
        return;
    };
    match requests::parse_spec(&req.spec) {
        // MCP's validate_workflow goes on to say what a start would refuse.
        Ok(wf) => drop(plan::support(&wf)),
        Err(r) => refusal(r),
    }
}

/// `POST /api/v1/workflows` up to the store.
pub fn submit(body: &[u8]) {
    let Ok(req) = gantry_intake::json::<SubmitWorkflow>(body) else {
        return;
    };
    submission(&req);
}

fn submission(req: &SubmitWorkflow) {
    let s = match requests::submission(req) {
        Ok(s) => s,
        Err(r) => return refusal(r),
    };
    if let Some(name) = &s.name {
        assert!(!name.trim().is_empty() && name.len() <= requests::MAX_WORKFLOW_NAME);
        assert!(!name.chars().any(char::is_control), "{name:?}");
    }
    let wf = &s.workflow;
    // Every job and service is a step, and so is each direction of a volume's transfers.
    let transfers: usize = wf
        .volumes
        .values()
        .map(|v| usize::from(!v.ingress.is_empty()) + usize::from(!v.egress.is_empty()))
        .sum();
    assert_eq!(
        s.plan.jobs.len(),
        wf.jobs.len() + wf.services.len() + transfers
    );
    // What the file format allows, a cluster's cap of the same number allows too.
    let most = requests::retry_cap(None);
    assert_eq!(most, gantry_spec::MAX_RETRY_ATTEMPTS);
    requests::check_retries(wf, most).expect("a valid file asks for at most the maximum");
    if let Err(why) = requests::check_retries(wf, 1) {
        assert!(why.contains(".policy.retry.attempts: "), "{why}");
    }
    // Steps are placed in plan order, so what a step waits for comes before it.
    for (i, j) in s.plan.jobs.iter().enumerate() {
        for d in &j.depends_on {
            let at = s.plan.jobs.iter().position(|o| o.name == d.name);
            assert!(at.is_some_and(|at| at < i), "{} before {}", j.name, d.name);
        }
    }
    // The server stores a task per array member and one per other step, all at once: a file
    // must not be able to ask for more than it can hold.
    let mut tasks = 0u64;
    for j in &s.plan.jobs {
        tasks += match j.task_indexes() {
            Some(indexes) => {
                assert!(!indexes.is_empty(), "{}: no tasks in {indexes:?}", j.name);
                assert!(
                    j.multinode
                        .as_ref()
                        .is_none_or(|m| m.nodes <= gantry_spec::MAX_MULTINODE_NODES),
                    "{}: a gang larger than the controller's window",
                    j.name
                );
                u64::from(indexes.end() - indexes.start()) + 1
            }
            None => 1,
        };
    }
    assert!(
        tasks <= gantry_spec::MAX_TASKS,
        "{tasks} tasks in one workflow"
    );
    // The plan is stored as JSON and read back by the controller on every tick.
    let text = serde_json::to_string(&s.plan).expect("a plan serialises");
    let back: WorkflowPlan = serde_json::from_str(&text).expect("a stored plan reads back");
    assert_eq!(serde_json::to_string(&back).expect("again"), text);
    // check_refs reads every reference before it looks each up.
    for r in s.plan.secret_refs() {
        if let Ok((scope, name)) = requests::secret_ref(&r) {
            assert!(requests::valid_secret_name(name).is_ok());
            assert_eq!(r, format!("secret://{}/{name}", spelled(&r, scope)));
        }
    }
}

/// The scope as a reference spells it (`account` and `org` are accepted aliases).
fn spelled(uri: &str, scope: requests::SecretScope) -> &str {
    let rest = &uri["secret://".len()..];
    let written = &rest[..rest.find('/').expect("parsed")];
    assert_eq!(requests::secret_scope(written), Ok(scope));
    written
}

/// `POST /api/v1/monitoring/alertmanager` up to the holds lock.
pub fn alertmanager(body: &[u8]) {
    let payload = match alertmanager::decode(body) {
        Ok(p) => p,
        Err(message) => return assert!(!message.is_empty()),
    };
    let known = |n: &str| KNOWN_NODES.contains(&n);
    let r = alertmanager::read(&payload, known);
    // Every entry is accounted for once: acted on, ignored with a reason, refused with a
    // reason, or a watchdog.
    assert_eq!(
        r.entries.len() + r.ignored.len() + r.refused.len() + r.watchdogs,
        payload.alerts.len()
    );
    assert!(r.unknown.len() <= r.ignored.len());
    assert!(r.ignored.iter().all(|why| !why.is_empty()));
    assert!(r.refused.iter().all(|why| !why.is_empty()));
    // What is stored is keyed by fingerprint and episode: only real ones get that far.
    for u in &r.unknown {
        assert!(!known(&u.node) && !u.message.is_empty());
        assert!(alertmanager::valid_fingerprint(&u.fingerprint), "{u:?}");
        assert!(alertmanager::episode_start(&u.episode).is_ok(), "{u:?}");
    }
    for e in &r.entries {
        let a = &e.alert;
        assert!(known(&a.node), "{a:?}");
        assert!(alertmanager::valid_fingerprint(&a.fingerprint) && !e.alertname.is_empty());
        assert!(alertmanager::episode_start(&a.starts_at).is_ok(), "{a:?}");
        assert!(!e.summary.trim().is_empty());
    }
    // Posts are idempotent only if the same post reads the same every time.
    let again = alertmanager::read(&payload, known);
    assert_eq!(again.entries, r.entries);
    assert_eq!(again.unknown, r.unknown);
    assert_eq!(again.ignored, r.ignored);
    assert_eq!(again.refused, r.refused);
}

/// One request as the `api` target reads it: a first line `METHOD /api/v1/PATH`, then the body.
pub fn api(input: &[u8]) {
    let (line, body) = match input.iter().position(|b| *b == b'\n') {
        Some(i) => (&input[..i], &input[i + 1..]),
        None => (input, &[][..]),
    };
    let Ok(line) = std::str::from_utf8(line) else {
        return;
    };
    let Some((method, path)) = line.trim_end_matches('\r').split_once(' ') else {
        return;
    };
    let Some(path) = path.strip_prefix("/api/v1/") else {
        return;
    };
    // axum's `Path` percent-decodes each segment, and refuses one that is not UTF-8.
    let Some(segments) = path
        .split('/')
        .map(percent_decode)
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (method, segments.as_slice()) {
        ("POST", ["workflows"]) => submit(body),
        ("POST", ["workflows", "validate"]) => validate(body),
        ("POST", ["monitoring", "alertmanager"]) => alertmanager(body),
        ("POST", ["nodes", _, "holds"]) => place_hold(body),
        ("POST", ["nodes", _, "release"]) => release_holds(body),
        ("POST", ["endpoints"]) => create_endpoint(body),
        ("POST", ["endpoints", _, "tokens"]) => endpoint_token(body),
        ("PUT", ["secrets", scope, name]) => put_secret(scope, name, body),
        ("POST", ["admin", "users"]) => create_user(body),
        ("PUT", ["admin", "settings", key]) => set_setting(key, body),
        _ => {}
    }
}

fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h)? * 16 + hex(l)?) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn place_hold(body: &[u8]) {
    let Ok(req) = gantry_intake::json::<PlaceHold>(body) else {
        return;
    };
    match requests::place_hold(&req) {
        Ok((kind, reason)) => {
            assert_eq!(kind.as_str(), req.kind);
            assert!(!reason.is_empty() && reason == reason.trim());
        }
        Err(message) => assert!(!message.is_empty()),
    }
}

fn release_holds(body: &[u8]) {
    let Ok(req) = gantry_intake::json::<ReleaseHolds>(body) else {
        return;
    };
    match requests::release_holds(req) {
        // Hold ids are printed in lower case; a prefix is matched against them as it is. A
        // release says why, as a hold does.
        Ok(r) => {
            assert!(r
                .hold
                .is_none_or(|h| !h.chars().any(|c| c.is_ascii_uppercase())));
            assert!(!r.reason.trim().is_empty());
        }
        Err(message) => assert!(!message.is_empty()),
    }
}

fn create_endpoint(body: &[u8]) {
    let Ok(req) = gantry_intake::json::<CreateEndpoint>(body) else {
        return;
    };
    endpoint(req);
}

fn endpoint(req: CreateEndpoint) {
    match requests::create_endpoint(req) {
        Ok(e) => {
            // It becomes a host name: one DNS label.
            assert!(requests::valid_endpoint_name(&e.name));
            assert!(!e.name.contains(['.', '/']) && e.name.len() <= 63);
            // Its scope and mode are enums: only the API's words get this far.
            assert!(e.drain_timeout_ms >= 0);
        }
        Err(message) => assert!(!message.is_empty()),
    }
}

fn endpoint_token(body: &[u8]) {
    let Ok(req) = gantry_intake::json::<CreateEndpointToken>(body) else {
        return;
    };
    // Without an expiry of its own a token takes the default (a setting, here 90 days).
    match requests::token_expiry(req.expires.as_deref(), "90d", NOW_MS) {
        Ok(expires) => {
            if req.expires.is_none() {
                assert!(expires.is_some());
            }
            assert!(expires.is_none_or(|t| t >= NOW_MS));
        }
        Err(message) => assert!(!message.is_empty()),
    }
}

fn put_secret(scope: &str, name: &str, body: &[u8]) {
    let Ok(req) = gantry_intake::json::<PutSecret>(body) else {
        return;
    };
    match requests::put_secret(scope, name, &req) {
        Ok((scope, kind)) => {
            assert!(!req.value.is_empty() && req.value.len() <= requests::MAX_SECRET);
            // What was accepted reads back as its type when a workflow uses it.
            assert!(requests::TypedSecret::parse(kind, &req.value).is_ok());
            // A workflow names exactly the secret that was written.
            let uri = format!("secret://{}/{name}", scope.as_str());
            assert_eq!(requests::secret_ref(&uri), Ok((scope, name)));
        }
        Err(message) => assert!(!message.is_empty()),
    }
}

fn create_user(body: &[u8]) {
    let Ok(req) = gantry_intake::json::<CreateUser>(body) else {
        return;
    };
    match requests::create_user(req) {
        Ok(u) => {
            assert!(requests::valid_account_name(&u.name));
            assert!(requests::valid_account_name(&u.group));
        }
        Err(message) => assert!(!message.is_empty()),
    }
}

fn set_setting(key: &str, body: &[u8]) {
    let Ok(req) = gantry_intake::json::<Setting>(body) else {
        return;
    };
    let def = match requests::setting_def(key) {
        Ok(def) => def,
        Err(message) => return assert!(!message.is_empty()),
    };
    match requests::check_setting(def, key, &req) {
        Ok(()) => {
            assert_eq!(req.key, key);
            // The key is the setting's, or refines it for one pool.
            assert!(def.0 == key || key.strip_prefix(def.0).is_some_and(|p| p.starts_with('.')));
            let v = req.value.as_str();
            match def.0 {
                "builds.network" => assert!(v == "none" || v == "bridge"),
                "builds.enabled" => assert!(v == "true" || v == "false"),
                requests::EGRESS_KEY => assert!(v == "allow" || v == "deny"),
                requests::CACHE_BYTES_KEY => assert!(v.parse::<u64>().is_ok_and(|n| n > 0)),
                requests::HOLD_FRACTION_KEY => {
                    assert!(v.parse::<f64>().is_ok_and(|f| (0.0..=1.0).contains(&f)))
                }
                requests::RETRY_MAX_ATTEMPTS_KEY => {
                    let n = v.parse::<u32>().expect("a whole number");
                    assert!((1..=gantry_spec::MAX_RETRY_ATTEMPTS).contains(&n));
                    assert_eq!(requests::retry_cap(Some(v)), n);
                }
                other => panic!("a setting the target does not know: {other}"),
            }
        }
        Err(message) => assert!(!message.is_empty()),
    }
}

/// An MCP `tools/call`'s params as the SDK reads them (the rest, `_meta` and the input
/// round trip's fields, the tools never see).
#[derive(Deserialize)]
struct ToolCall {
    name: String,
    #[serde(default)]
    arguments: Option<serde_json::Map<String, serde_json::Value>>,
}

/// One MCP tool call: its arguments read as the server reads them, then the API's checks the
/// tool goes through before the store.
pub fn mcp(input: &[u8]) {
    let Ok(call) = serde_json::from_slice::<ToolCall>(input) else {
        return;
    };
    let call = match mcp::decode(&call.name, call.arguments.as_ref()) {
        Ok(Some(call)) => call,
        Ok(None) => return,
        Err(message) => return assert!(message.starts_with("bad arguments for ")),
    };
    match call {
        Call::ListWorkflows(a) => {
            if let Ok(Some(status)) = requests::status_filter(a.status.as_deref()) {
                assert!(a
                    .status
                    .is_some_and(|s| s.eq_ignore_ascii_case(status.as_str())));
            }
        }
        Call::WorkflowEvents(a) => assert!((1..=500).contains(&a.page())),
        Call::JobLogs(a) => assert!((1..=256 << 10).contains(&a.page())),
        Call::ValidateWorkflow(a) => match requests::parse_spec(&a.spec) {
            Ok(wf) => drop(plan::support(&wf)),
            Err(r) => refusal(r),
        },
        Call::StartWorkflow(a) => submission(&a.request()),
        Call::CreateEndpoint(a) => endpoint(a.request()),
        Call::GetWorkflow(_)
        | Call::WorkflowStatus(_)
        | Call::StopWorkflow(_)
        | Call::ListNodes(_)
        | Call::ListEndpoints(_)
        | Call::GetEndpoint(_)
        | Call::EndpointHistory(_)
        | Call::DeleteEndpoint(_) => {}
    }
}
