//! Wire types shared by every Gantry component: the JSON API under `/api/v1`, and the
//! agent <-> server protocol (one WebSocket per agent). Serde types only: no behaviour here,
//! so the CLI, the agent and MCP can depend on this without pulling in the server.

pub mod agent;
pub mod common;
pub mod kinds;
pub mod status;
pub mod v1;

pub use kinds::{
    Channel, EndpointScope, SecretScope, SecretType, StorageDriver, TakeoverMode, TakeoverPhase,
    VolumeScope,
};
pub use status::*;

// For `text_enum!`, which callers expand in their own crates.
#[doc(hidden)]
pub use serde as __serde;
