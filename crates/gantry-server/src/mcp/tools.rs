//! The tools. Each calls the API's own handler with the authenticated caller, so what an agent
//! may see and do is exactly its user's; the tools add only bounded output and, for what needs
//! it, the person's confirmation ([`super::confirm`]).

use std::sync::Arc;

use gantry_api::v1::ValidateWorkflow;
use gantry_api::Channel;
use gantry_intake::mcp::{
    self, Call, DeleteEndpoint, Empty, EndpointName, JobLogs, ListWorkflows, NewEndpoint, Spec,
    StartWorkflow, StopWorkflow, WorkflowEvents, WorkflowId,
};
use gantry_store::{EndpointChange, NewEvent};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, JsonObject,
    Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use schemars::JsonSchema;
use serde_json::json;

use super::confirm::Action;
use super::Shared;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::services::workflows as svc;

pub(crate) struct ToolDef {
    pub name: &'static str,
    title: &'static str,
    description: &'static str,
    /// Changes nothing. In read-only mode only these may be called.
    pub read_only: bool,
    /// May end or remove something (meaningful when not read-only).
    destructive: bool,
    /// Calling again with the same arguments changes nothing more.
    idempotent: bool,
    schema: fn() -> Arc<JsonObject>,
}

impl ToolDef {
    pub fn tool(&self) -> Tool {
        let mut notes = ToolAnnotations::with_title(self.title)
            .read_only(self.read_only)
            .idempotent(self.idempotent)
            // Everything it touches is this cluster.
            .open_world(false);
        if !self.read_only {
            notes = notes.destructive(self.destructive);
        }
        Tool::new(self.name, self.description, (self.schema)())
            .with_title(self.title)
            .annotate(notes)
    }
}

fn schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_type::<T>()
}

const fn read(
    name: &'static str,
    title: &'static str,
    description: &'static str,
    schema: fn() -> Arc<JsonObject>,
) -> ToolDef {
    ToolDef {
        name,
        title,
        description,
        read_only: true,
        destructive: false,
        idempotent: true,
        schema,
    }
}

pub(crate) static TOOLS: &[ToolDef] = &[
    read(
        "list_workflows",
        "List workflows",
        "Workflows you may see (your own and your group's), newest last, each with its status \
         and its tasks counted by status.",
        schema::<ListWorkflows>,
    ),
    read(
        "get_workflow",
        "Get a workflow",
        "One workflow in full: its status and every task with its status, node, reason and \
         attempts (each attempt's end cause and exit code).",
        schema::<WorkflowId>,
    ),
    read(
        "workflow_status",
        "Workflow status",
        "A workflow's status (PENDING, RUNNING, FINISHED, FAILED or STOPPED), why, and its \
         tasks counted by status; `done` is true once it has ended. Poll this to follow a \
         workflow.",
        schema::<WorkflowId>,
    ),
    read(
        "workflow_events",
        "Workflow events",
        "What happened to a workflow, in order: placements, starts, exits and their causes, \
         retries, stops, endpoint takeovers. Paged: pass `next_after` as `after` for more.",
        schema::<WorkflowEvents>,
    ),
    read(
        "job_logs",
        "Job logs",
        "A job's output (stdout or stderr) from a byte offset, at most max_bytes at a time. \
         `more` says whether to call again with `offset` = `next_offset`.",
        schema::<JobLogs>,
    ),
    read(
        "validate_workflow",
        "Validate a workflow file",
        "Checks a workflow file without running it: every problem with its line and column, \
         and what Gantry would refuse to run or ignore. Read gantry://docs/workflow-file first.",
        schema::<Spec>,
    ),
    ToolDef {
        name: "start_workflow",
        title: "Start a workflow",
        description: "Submits a workflow file; returns its id. If one of its services attaches \
             to a persistent endpoint that another workflow serves, starting it takes the \
             endpoint over (the other workflow is stopped once the new one is ready): the person \
             is asked to confirm first, through your client when it can ask them; otherwise the \
             call is refused with a confirmation_token to call again with once they agreed, or \
             start it with await_approval to let the takeover wait for their \
             `gantry endpoint approve`.",
        read_only: false,
        destructive: true,
        idempotent: false,
        schema: schema::<StartWorkflow>,
    },
    ToolDef {
        name: "stop_workflow",
        title: "Stop a workflow",
        description: "Stops a workflow: its running steps get SIGTERM, then SIGKILL after the \
             grace period; it ends STOPPED. Stopping one that serves a persistent endpoint (which \
             then answers 503) needs the person's confirmation, asked as for start_workflow.",
        read_only: false,
        destructive: true,
        idempotent: true,
        schema: schema::<StopWorkflow>,
    },
    read(
        "list_nodes",
        "List nodes",
        "The cluster's nodes: state (READY, CORDONED, EVICTING, DOWN), pool, capacity and what \
         is allocated, running steps, and holds (who took the node out of service, why, since \
         when; DEFERRED ones too).",
        schema::<Empty>,
    ),
    read(
        "list_endpoints",
        "List endpoints",
        "Persistent endpoints you may call or manage: URL, scope, status (SERVING, SWITCHING, \
         DRAINING, IDLE, FAILED), the workflow serving each and any takeover in progress.",
        schema::<Empty>,
    ),
    read(
        "get_endpoint",
        "Get an endpoint",
        "One persistent endpoint: URL and Host, scope, takeover mode, status, the workflow and \
         service serving it, and any takeover in progress.",
        schema::<EndpointName>,
    ),
    ToolDef {
        name: "create_endpoint",
        title: "Create an endpoint",
        description: "Creates a persistent endpoint: a URL (/e/NAME/ and Host NAME.<domain>) \
             that outlives workflows. A service attaches with \
             `network.endpoints: [{name, port-name, protocol: http, attach: NAME}]`.",
        read_only: false,
        destructive: false,
        idempotent: false,
        schema: schema::<NewEndpoint>,
    },
    read(
        "endpoint_history",
        "Endpoint history",
        "Every takeover of an endpoint: from which workflow to which, who asked and through \
         which channel, who confirmed it and how, its phase, when, and why it ended so.",
        schema::<EndpointName>,
    ),
    ToolDef {
        name: "delete_endpoint",
        title: "Delete an endpoint",
        description: "Deletes a persistent endpoint (its URL stops answering; the workflow \
             serving it keeps running). Needs the person's confirmation, asked as for \
             start_workflow.",
        read_only: false,
        destructive: true,
        idempotent: true,
        schema: schema::<DeleteEndpoint>,
    },
];

/// A tool's result for the agent: the value as structured content and as JSON text.
fn ok(value: impl serde::Serialize) -> Result<CallToolResponse, ErrorData> {
    let value =
        serde_json::to_value(value).map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    Ok(CallToolResult::structured(value).into())
}

/// A refusal or failure the agent should read (not a protocol error, which clients hide).
fn fail(text: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    Ok(CallToolResult::error(vec![ContentBlock::text(text.into())]).into())
}

/// A workflow file's problems, one `line:column: message` each.
fn lines(diagnostics: &[gantry_api::v1::Diagnostic]) -> Vec<String> {
    diagnostics
        .iter()
        .map(|d| format!("{}:{}: {}", d.line, d.column, d.message))
        .collect()
}

fn api_error(e: ApiError) -> Result<CallToolResponse, ErrorData> {
    match e {
        ApiError::Invalid {
            message,
            diagnostics,
        } => fail(format!("{message}:\n{}", lines(&diagnostics).join("\n"))),
        other => fail(other.to_string()),
    }
}

/// Unwraps an API call's result, or returns its error to the agent.
macro_rules! api {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return api_error(e),
        }
    };
}

pub(crate) async fn call(
    shared: &Shared,
    def: &ToolDef,
    c: &Caller,
    request: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    let arguments = request.arguments.as_ref();
    let call = match mcp::decode(def.name, arguments) {
        Ok(Some(call)) => call,
        Ok(None) => {
            return Err(ErrorData::invalid_params(
                format!("no tool {:?}", def.name),
                None,
            ))
        }
        Err(e) => return fail(e),
    };
    let st = &shared.st;
    match call {
        Call::ListWorkflows(a) => {
            let list = api!(svc::list(st, c, a.status.as_deref()).await);
            ok(json!({ "workflows": list }))
        }
        Call::GetWorkflow(a) => {
            let d = api!(svc::detail(st, c, &a.id, &svc::TaskQuery::default()).await);
            ok(d)
        }
        Call::WorkflowStatus(a) => {
            let d = api!(svc::detail(st, c, &a.id, &svc::TaskQuery::default()).await);
            let mut v = serde_json::to_value(&d.summary).unwrap_or_default();
            v["done"] = json!(d.summary.status.is_terminal());
            ok(v)
        }
        Call::WorkflowEvents(a) => {
            let limit = a.page();
            let mut events = api!(svc::events(st, c, &a.id, a.after).await);
            let more = events.len() > limit;
            events.truncate(limit);
            let next_after = events.last().map(|e| e.seq).unwrap_or(a.after);
            ok(json!({ "events": events, "next_after": next_after, "more": more }))
        }
        Call::JobLogs(a) => job_logs(shared, c, a).await,
        Call::ValidateWorkflow(a) => {
            let body = ValidateWorkflow {
                spec: a.spec.clone(),
            };
            let v = api!(svc::validate(&body));
            let mut out = serde_json::to_value(&v).unwrap_or_default();
            // An invalid file is not parsed again: its problems are in the answer already.
            let parsed = if v.valid {
                gantry_spec::parse(&a.spec).ok()
            } else {
                None
            };
            match parsed {
                // What start_workflow would refuse, and what it accepts but does not act on.
                Some(wf) => {
                    let support = crate::plan::support(&wf);
                    out["unsupported"] = json!(support.unsupported);
                    let warnings: Vec<String> = gantry_spec::upgrade_warning(&wf)
                        .into_iter()
                        .chain(support.ignored)
                        .collect();
                    out["warnings"] = json!(warnings);
                }
                None => out["errors"] = json!(lines(&v.diagnostics)),
            }
            ok(out)
        }
        Call::StartWorkflow(a) => start_workflow(shared, c, request, ctx, a).await,
        Call::StopWorkflow(a) => stop_workflow(shared, c, request, ctx, a).await,
        Call::ListNodes(Empty {}) => {
            let nodes = api!(crate::services::nodes::list(st, &Default::default()).await);
            ok(json!({ "nodes": nodes }))
        }
        Call::ListEndpoints(Empty {}) => {
            let list = api!(crate::services::endpoints::list(st, c).await);
            ok(json!({ "endpoints": list }))
        }
        Call::GetEndpoint(a) => {
            let e = api!(crate::services::endpoints::show(st, c, &a.name).await);
            ok(e)
        }
        Call::CreateEndpoint(a) => {
            let e = api!(crate::services::endpoints::create(st, c, a.request()).await);
            ok(e)
        }
        Call::EndpointHistory(a) => {
            let h = api!(crate::services::endpoints::history(st, c, &a.name).await);
            ok(json!({ "takeovers": h }))
        }
        Call::DeleteEndpoint(a) => delete_endpoint(shared, c, request, ctx, a).await,
    }
}

async fn job_logs(shared: &Shared, c: &Caller, a: JobLogs) -> Result<CallToolResponse, ErrorData> {
    let limit = a.page();
    let q = crate::services::logs::LogQuery {
        task: a.task,
        attempt: a.attempt,
        stream: a.stream,
        offset: a.offset,
        follow: false,
        limit: Some(limit),
    };
    let r = api!(crate::services::logs::read(&shared.st, c, &a.workflow, &a.job, &q).await);
    let attempt = u64::from(r.attempt);
    let bytes = r.body.into_page();
    let more = bytes.len() as u64 >= limit;
    // A page never ends inside a character: the rest of it starts the next page.
    let whole = match std::str::from_utf8(&bytes) {
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        _ => bytes.len(),
    };
    let text = String::from_utf8_lossy(&bytes[..whole]).into_owned();
    ok(json!({
        "text": text,
        "offset": a.offset,
        "next_offset": a.offset + whole as u64,
        "more": more,
        "attempt": attempt,
    }))
}

/// The person's yes for an action (see [`super::confirm`]), or return early with what the client
/// gets instead: the question, or why nothing was done.
macro_rules! confirmed {
    ($shared:expr, $ctx:expr, $request:expr, $c:expr, $action:expr, $token:expr) => {
        match $shared
            .confirmations
            .confirm($ctx, $request, $c.user.id, $action, $token)
            .await
        {
            Ok(yes) => yes,
            Err(r) => return Ok(r),
        }
    };
}

/// What the person is asked before a workflow takes endpoints over, bound to exactly this file
/// and these endpoints' current workflows.
fn takeover_action(
    spec: &str,
    name: Option<&str>,
    user: &str,
    asks: &[(String, uuid::Uuid, String)],
) -> Action {
    let mut facts = vec![
        "start".to_string(),
        spec.to_string(),
        name.unwrap_or("").into(),
    ];
    let mut what = vec![];
    for (endpoint, from, owner) in asks {
        facts.push(format!("{endpoint}={from}"));
        what.push(format!(
            "endpoint {endpoint} (served now by workflow {} of {owner})",
            &from.to_string()[..8]
        ));
    }
    let facts: Vec<&str> = facts.iter().map(String::as_str).collect();
    Action::new(
        &facts,
        format!(
            "Let an AI agent acting as {user} start a workflow that takes over {}? The old \
             workflow is stopped once the new one is ready.",
            what.join(" and ")
        ),
        "started",
    )
}

async fn start_workflow(
    shared: &Shared,
    c: &Caller,
    request: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    a: StartWorkflow,
) -> Result<CallToolResponse, ErrorData> {
    use svc::{commit, prepare};
    let st = &shared.st;
    let req = a.request();
    // Everything that would refuse the workflow is checked before anyone is asked.
    let mut prepared = api!(prepare(st, c, req, Channel::Mcp).await);
    let asks = api!(svc::takeovers_to_confirm(&shared.st, &prepared).await);
    let mut via = None;
    if !asks.is_empty() && !a.await_approval {
        let req = &prepared.req;
        let action = takeover_action(&req.spec, req.name.as_deref(), &c.user.name, &asks);
        let token = a.confirmation_token.as_deref();
        let yes = confirmed!(shared, ctx, request, c, &action, token);
        if yes.waited {
            // The person may have taken a while: check again, and only go ahead if
            // the endpoints are still served by what they were asked about.
            prepared = api!(prepare(st, c, prepared.req, Channel::Mcp).await);
            let now = api!(svc::takeovers_to_confirm(&shared.st, &prepared).await);
            if now != asks {
                return fail(
                    "Nothing was started: the endpoints changed hands while the person \
                         was asked; call again to ask about the new situation.",
                );
            }
        }
        via = Some(yes.via);
    }
    let takeovers: Vec<_> = prepared
        .takeovers
        .iter()
        .map(|t| (t.endpoint.clone(), t.from_workflow))
        .collect();
    let created = api!(commit(st, c, prepared, via).await);
    let mut notes = vec![];
    for (endpoint, from) in &takeovers {
        let waits = from.is_some() && via.is_none();
        notes.push(json!({
            "endpoint": endpoint,
            "from_workflow": from,
            "confirmed_via": via,
            "note": if waits {
                format!("the takeover of {endpoint} waits, once the new service is ready, for the person to run `gantry endpoint approve {endpoint}`")
            } else {
                format!("the new service takes {endpoint} over once it is ready")
            },
        }));
    }
    ok(json!({
        "id": created.id,
        "warnings": created.warnings,
        "takeovers": notes,
    }))
}

async fn stop_workflow(
    shared: &Shared,
    c: &Caller,
    request: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    a: StopWorkflow,
) -> Result<CallToolResponse, ErrorData> {
    let st = &shared.st;
    let w = api!(svc::visible_workflow(st, c, &a.id).await);
    // The endpoints the caller can see, by the API's own rule (as the web UI's stop asks).
    let serving: Vec<String> = api!(crate::services::endpoints::list(st, c).await)
        .into_iter()
        .filter(|e| e.workflow_id == Some(w.id))
        .map(|e| e.name)
        .collect();
    let mut via = None;
    if !serving.is_empty() && !w.status.is_terminal() {
        let action = Action::new(
            &["stop", &w.id.to_string()],
            format!(
                "Let an AI agent acting as {} stop workflow {} ({}), which serves endpoint {}? \
                 It answers 503 until another workflow takes it over.",
                c.user.name,
                &w.id.to_string()[..8],
                w.name,
                serving.join(", ")
            ),
            "stopped",
        );
        let token = a.confirmation_token.as_deref();
        let yes = confirmed!(shared, ctx, request, c, &action, token);
        via = Some(yes.via);
    }
    let summary = api!(svc::stop(st, c, &w.id.to_string()).await);
    if let Some(via) = via {
        record(
            shared,
            Some(w.id),
            format!(
                "stopping workflow {}, which served endpoint {}, confirmed by {} via {via}",
                w.id,
                serving.join(", "),
                c.user.name
            ),
        )
        .await;
    }
    ok(summary)
}

async fn delete_endpoint(
    shared: &Shared,
    c: &Caller,
    request: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    a: DeleteEndpoint,
) -> Result<CallToolResponse, ErrorData> {
    let st = &shared.st;
    let e = api!(crate::services::endpoints::manageable(st, c, &a.name, "delete it").await);
    let serving = match e.workflow_id {
        Some(w) => format!(
            "; workflow {} serving it keeps running",
            &w.to_string()[..8]
        ),
        None => String::new(),
    };
    let action = Action::new(
        &["delete", &e.name, &e.created_at.to_string()],
        format!(
            "Let an AI agent acting as {} delete endpoint {}? Its URL stops answering and its \
             tokens stop working{serving}.",
            c.user.name, e.name
        ),
        "deleted",
    );
    let token = a.confirmation_token.as_deref();
    let via = confirmed!(shared, ctx, request, c, &action, token).via;
    api!(crate::services::endpoints::delete(st, c, &e.name).await);
    record(
        shared,
        e.workflow_id,
        format!(
            "deleting endpoint {} confirmed by {} via {via}",
            e.name, c.user.name
        ),
    )
    .await;
    ok(json!({ "deleted": e.name, "confirmed_via": via }))
}

/// Who confirmed a stop or a delete, and how, in the events. Done already by then: a failure
/// to record is logged, not reported as the action failing.
async fn record(shared: &Shared, workflow: Option<uuid::Uuid>, message: String) {
    let change = EndpointChange::Event(NewEvent {
        workflow_id: workflow,
        node: None,
        task: None,
        kind: "mcp.confirmed".into(),
        message,
    });
    if let Err(e) = crate::services::endpoints::record(&shared.st, &change).await {
        tracing::error!("recording an MCP confirmation: {e}");
    }
}

#[cfg(test)]
mod tests {
    /// A tool that is listed but not dispatched would answer "no tool" to every call.
    #[test]
    fn every_listed_tool_is_dispatched() {
        for t in super::TOOLS {
            let read = gantry_intake::mcp::decode(t.name, None);
            assert!(!matches!(read, Ok(None)), "{} is not dispatched", t.name);
        }
    }
}
