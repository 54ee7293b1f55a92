//! An image build as a workflow plan carries it: the recipe with its base pinned and every
//! step keyed (`gantry_core::build`). The server resolves the base and computes the keys at
//! submit (it needs the base's registry for that); the plan only holds the result.

use crate::build as keys;
use gantry_api::agent::BuildStep;
use serde::{Deserialize, Serialize};

/// Builds run for this platform.
pub const PLATFORM: &str = "linux/amd64";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildPlan {
    pub name: String,
    /// `user/<owner>/<name>` or `group/<group>/<name>` in the object cache.
    pub repository: String,
    /// The base, pinned to the digest the keys were computed from.
    pub base: String,
    pub base_digest: String,
    pub steps: Vec<BuildStep>,
    pub env: Vec<String>,
}

impl BuildPlan {
    /// The cache key of the whole image: the tag it is pushed as.
    pub fn final_key(&self) -> String {
        self.steps
            .last()
            .map(step_key)
            .unwrap_or_else(|| keys::base_key(PLATFORM, &self.base_digest))
    }

    pub fn task_name(&self) -> String {
        task_name(&self.name)
    }
}

pub fn task_name(image: &str) -> String {
    format!("build:{image}")
}

pub fn step_key(s: &BuildStep) -> String {
    match s {
        BuildStep::Files { key, .. } | BuildStep::Run { key, .. } => key.clone(),
    }
}
