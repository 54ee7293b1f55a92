//! The cluster settings placement reads: which annotations constrain, and which pools take no
//! host-network containers. Read once per use from the store, so a change applies to the next
//! placement without a restart.

use std::collections::BTreeSet;

use gantry_intake::requests::{self, CONSTRAINT_ANNOTATIONS_KEY, HOST_NETWORK_FORBIDDEN_KEY};

use crate::state::AppState;

#[derive(Debug, Clone)]
pub struct PlacementSettings {
    /// `resource.annotations` keys a node's labels must match.
    pub constraint_keys: BTreeSet<String>,
    forbidden_pools: Option<String>,
}

impl PlacementSettings {
    pub async fn read(st: &AppState) -> Result<PlacementSettings, gantry_store::StoreError> {
        let keys = st.store.setting(CONSTRAINT_ANNOTATIONS_KEY).await?;
        Ok(PlacementSettings {
            constraint_keys: requests::constraint_keys(keys.as_deref()),
            forbidden_pools: st.store.setting(HOST_NETWORK_FORBIDDEN_KEY).await?,
        })
    }

    /// Whether `pool`'s nodes may run a host-network container.
    pub fn host_network_allowed(&self, pool: &str) -> bool {
        requests::host_network_allowed(self.forbidden_pools.as_deref(), pool)
    }

    /// The annotations of a step that constrain its placement here.
    pub fn constraints<'a>(
        &self,
        annotations: &'a std::collections::BTreeMap<String, String>,
    ) -> impl Iterator<Item = (&'a String, &'a String)> + use<'a, '_> {
        annotations
            .iter()
            .filter(|(k, _)| self.constraint_keys.contains(*k))
    }
}

/// The pools that have nodes now.
pub async fn pools(st: &AppState) -> Result<BTreeSet<String>, gantry_store::StoreError> {
    Ok(st
        .store
        .nodes()
        .await?
        .into_iter()
        .map(|n| n.pool)
        .collect())
}
