//! How the controller and the areas reach agents: through whatever holds their connections
//! (the agent sessions' hub, `crate::agents::Hub`). Nothing queues: an agent that reconnects is
//! sent its whole desired set, so a message to a node that is not connected is dropped.

use std::collections::HashMap;

use gantry_api::agent::ServerMessage;
use uuid::Uuid;

pub trait AgentLink: Send + Sync {
    /// Sends to a node's agent; false when it is not connected.
    fn send(&self, node: &str, msg: ServerMessage) -> bool;
    fn is_connected(&self, node: &str) -> bool;
    /// Sends each connected node the `Peers` of `want` its connection was not sent yet, and an
    /// empty one for each workflow it no longer runs containers of.
    fn sync_peers(&self, want: &HashMap<String, HashMap<Uuid, Vec<String>>>);
    /// Forgets a node's connection (it was lost).
    fn drop_node(&self, node: &str);
    /// Forgets every connection: this server no longer runs the controller, so its agents
    /// must find the one that does.
    fn drop_all(&self);
}

/// A cluster with no agent connected: what a server's decisions see before any agent is
/// (benchmarks of the controller, tests of decisions that send nothing).
pub struct Unlinked;

impl AgentLink for Unlinked {
    fn send(&self, _: &str, _: ServerMessage) -> bool {
        false
    }
    fn is_connected(&self, _: &str) -> bool {
        false
    }
    fn sync_peers(&self, _: &HashMap<String, HashMap<Uuid, Vec<String>>>) {}
    fn drop_node(&self, _: &str) {}
    fn drop_all(&self) {}
}
