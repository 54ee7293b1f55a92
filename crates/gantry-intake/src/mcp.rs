//! The MCP tools' arguments: each tool's input type (its JSON schema is derived from it, with
//! the `schema` feature), and [`decode`], which reads a call's arguments into the tool's type.
//! The server dispatches on what `decode` returns; what a tool then checks is the API's own
//! handler's ([`crate::requests`]).

use gantry_api::v1::{CreateEndpoint, SubmitWorkflow};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ListWorkflows {
    /// Only workflows with this status: PENDING, RUNNING, FINISHED, FAILED or STOPPED.
    #[serde(default)]
    pub status: Option<String>,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WorkflowId {
    /// The workflow's id, or a unique prefix of 8 or more characters.
    pub id: String,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WorkflowEvents {
    /// The workflow's id, or a unique prefix of 8 or more characters.
    pub id: String,
    /// Only events after this sequence number (the `next_after` of the previous page).
    #[serde(default)]
    pub after: i64,
    /// At most this many events (default 100, at most 500).
    #[serde(default)]
    pub limit: Option<usize>,
}

impl WorkflowEvents {
    /// How many events one page holds.
    pub fn page(&self) -> usize {
        self.limit.unwrap_or(100).clamp(1, 500)
    }
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct JobLogs {
    /// The workflow's id, or a unique prefix of 8 or more characters.
    pub workflow: String,
    /// The job (or service, or `build:NAME`) whose output to read.
    pub job: String,
    /// For a task array: which task (its FB_TASK_ID).
    #[serde(default)]
    pub task: Option<u32>,
    /// Which attempt (default: the latest).
    #[serde(default)]
    pub attempt: Option<u32>,
    /// stdout (default) or stderr.
    #[serde(default)]
    pub stream: Option<String>,
    /// Byte offset to read from (the `next_offset` of the previous page; default 0).
    #[serde(default)]
    pub offset: u64,
    /// At most this many bytes (default 16384, at most 262144).
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

impl JobLogs {
    /// How many bytes one page holds.
    pub fn page(&self) -> u64 {
        self.max_bytes.unwrap_or(16 << 10).clamp(1, 256 << 10)
    }
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The workflow file's YAML text (Fuzzfile v4: `version: v4`, `jobs`, ...).
    pub spec: String,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct StartWorkflow {
    /// The workflow file's YAML text (Fuzzfile v4: `version: v4`, `jobs`, ...).
    pub spec: String,
    /// A name for listings (default: workflow-<id prefix>).
    #[serde(default)]
    pub name: Option<String>,
    /// From an earlier refusal, once the person agreed to the takeover it named.
    #[serde(default)]
    pub confirmation_token: Option<String>,
    /// Start now and let each endpoint takeover wait, once the new service is ready, for the
    /// person to run `gantry endpoint approve NAME` (or reject it), instead of asking first.
    #[serde(default)]
    pub await_approval: bool,
}

impl StartWorkflow {
    /// What the tool submits: the API's own request.
    pub fn request(&self) -> SubmitWorkflow {
        SubmitWorkflow {
            spec: self.spec.clone(),
            name: self.name.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct StopWorkflow {
    /// The workflow's id, or a unique prefix of 8 or more characters.
    pub id: String,
    /// From an earlier refusal, once the person agreed to stop it.
    #[serde(default)]
    pub confirmation_token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Empty {}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EndpointName {
    /// The endpoint's name.
    pub name: String,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NewEndpoint {
    /// 1-63 lower-case letters, digits or '-' (it becomes a host name).
    pub name: String,
    /// Who may call it: user (default), group, organization or public.
    #[serde(default)]
    pub scope: Option<String>,
    /// Takeovers: when-ready (default; the old workflow serves until the new one is ready) or
    /// stop-first (for sites without room for two copies).
    #[serde(default)]
    pub mode: Option<String>,
    /// How long requests in flight may finish on the old backend after a switch (e.g. 5m).
    #[serde(default)]
    pub drain_timeout: Option<String>,
    /// Every takeover waits for a person's `gantry endpoint approve`.
    #[serde(default)]
    pub confirm: bool,
}

impl NewEndpoint {
    /// What the tool creates: the API's own request.
    pub fn request(self) -> CreateEndpoint {
        CreateEndpoint {
            name: self.name,
            scope: self.scope,
            mode: self.mode,
            drain_timeout: self.drain_timeout,
            confirm: self.confirm,
        }
    }
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DeleteEndpoint {
    /// The endpoint's name.
    pub name: String,
    /// From an earlier refusal, once the person agreed to delete it.
    #[serde(default)]
    pub confirmation_token: Option<String>,
}

/// A tool call, its arguments read.
#[derive(Debug)]
pub enum Call {
    ListWorkflows(ListWorkflows),
    GetWorkflow(WorkflowId),
    WorkflowStatus(WorkflowId),
    WorkflowEvents(WorkflowEvents),
    JobLogs(JobLogs),
    ValidateWorkflow(Spec),
    StartWorkflow(StartWorkflow),
    StopWorkflow(StopWorkflow),
    ListNodes(Empty),
    ListEndpoints(Empty),
    GetEndpoint(EndpointName),
    CreateEndpoint(NewEndpoint),
    EndpointHistory(EndpointName),
    DeleteEndpoint(DeleteEndpoint),
}

fn args<T: DeserializeOwned>(
    tool: &str,
    arguments: Option<&Map<String, Value>>,
) -> Result<T, String> {
    let v = Value::Object(arguments.cloned().unwrap_or_default());
    serde_json::from_value(v).map_err(|e| format!("bad arguments for {tool}: {e}"))
}

/// Reads a call of tool `name`: `Ok(None)` for a tool there is not, `Err` for arguments the
/// tool does not take (the agent is told why).
pub fn decode(name: &str, arguments: Option<&Map<String, Value>>) -> Result<Option<Call>, String> {
    let a = arguments;
    Ok(Some(match name {
        "list_workflows" => Call::ListWorkflows(args(name, a)?),
        "get_workflow" => Call::GetWorkflow(args(name, a)?),
        "workflow_status" => Call::WorkflowStatus(args(name, a)?),
        "workflow_events" => Call::WorkflowEvents(args(name, a)?),
        "job_logs" => Call::JobLogs(args(name, a)?),
        "validate_workflow" => Call::ValidateWorkflow(args(name, a)?),
        "start_workflow" => Call::StartWorkflow(args(name, a)?),
        "stop_workflow" => Call::StopWorkflow(args(name, a)?),
        "list_nodes" => Call::ListNodes(args(name, a)?),
        "list_endpoints" => Call::ListEndpoints(args(name, a)?),
        "get_endpoint" => Call::GetEndpoint(args(name, a)?),
        "create_endpoint" => Call::CreateEndpoint(args(name, a)?),
        "endpoint_history" => Call::EndpointHistory(args(name, a)?),
        "delete_endpoint" => Call::DeleteEndpoint(args(name, a)?),
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> Result<Option<Call>, String> {
        let map: Map<String, Value> = serde_json::from_str(arguments).unwrap();
        decode(name, Some(&map))
    }

    #[test]
    fn arguments_are_the_tools_own() {
        assert!(matches!(
            call("workflow_events", r#"{"id":"abcdef12","limit":100000}"#),
            Ok(Some(Call::WorkflowEvents(e))) if e.page() == 500
        ));
        assert!(matches!(
            decode("list_nodes", None),
            Ok(Some(Call::ListNodes(_)))
        ));
        let err = call("get_workflow", r#"{"id":"x","extra":1}"#).unwrap_err();
        assert!(
            err.starts_with("bad arguments for get_workflow: unknown field `extra`"),
            "{err}"
        );
        assert!(call("job_logs", r#"{"workflow":"w","job":"j","offset":-1}"#).is_err());
        assert!(matches!(call("rm_rf", "{}"), Ok(None)));
    }
}
