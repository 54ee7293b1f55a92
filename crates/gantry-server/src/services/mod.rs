//! The use cases, one module per area: `(&AppState, &Caller, request) -> Result<_, ApiError>`,
//! free of HTTP. The API's handlers, the web UI and MCP call these, never each other, so a
//! rule holds for every client at once.

pub mod admin;
pub mod builds;
pub mod endpoints;
pub mod holds;
pub mod logs;
pub mod monitoring;
pub mod nodes;
pub mod secrets;
pub mod volumes;
pub mod workflows;
