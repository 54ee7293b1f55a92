//! What the server takes in from callers, read and checked before anything touches the store:
//! the `/api/v1` request bodies ([`requests`]), the MCP tools' arguments ([`mcp`]), the
//! Alertmanager webhook's payload ([`alertmanager`]). A workflow file's body is checked here
//! and compiled by core (`gantry_core::plan`).
//!
//! Pure: no I/O, no async, no clock reads (the time is passed in). The server's handlers call
//! these functions and then do what needs the store; the fuzz targets (`fuzz/`) call the same
//! functions on arbitrary bytes, which is why they live here and not in the server: linking
//! the server (axum, sqlx, the agent's runtime) into every fuzz build would cost minutes.
//! Errors are messages for the caller; the server chooses the status.

pub mod alertmanager;
pub mod mcp;
pub mod requests;

/// Decodes a JSON body as the server does: axum's `Json` (behind the API's `JsonBody`) and the
/// webhook both read the whole body with `serde_json` and refuse trailing data.
pub fn json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(body)
}
