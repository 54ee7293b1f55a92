//! Wire types both protocols carry: the agent protocol (`agent`) and the JSON API (`v1`) both
//! name a node's capacity, so it lives below them.

use serde::{Deserialize, Serialize};

/// What an agent can offer. Detected on the node, overridable on the command line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Capacity {
    /// Logical cores.
    pub cpus: u32,
    pub memory_bytes: u64,
    /// Devices such as `nvidia.com/gpu` and their counts.
    #[serde(default)]
    pub devices: std::collections::BTreeMap<String, u32>,
}
