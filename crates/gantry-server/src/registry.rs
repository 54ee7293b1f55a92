//! The object cache's wiring: `gantry-registry` handed what it may use of the server (the store
//! as its image index, the token check, the clock, how files are made private), and its
//! answers read as the server's errors.

use std::sync::Arc;

use gantry_intake::requests::CACHE_BYTES_KEY;
use gantry_registry::images::{ImageInfo, ImagesError};
use gantry_registry::{AuthError, Clock, Context, Principal, Private, Registry, Site};
use gantry_store::Store;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

pub fn new(state: &AppState) -> Arc<Registry> {
    Registry::new(Context {
        data_dir: state.config.files_dir().to_path_buf(),
        // The store's object cache rows, and nothing else of it.
        index: state.store.clone(),
        site: Arc::new(Server(state.store.clone())),
        clock: Clock {
            now_ms: crate::clock::now_ms,
            ts: crate::clock::ts,
        },
        private: Private {
            dir: crate::private::dir,
            file_mode: crate::private::FILE_MODE,
        },
    })
}

/// A caller as the registry's rules see them.
pub fn principal(c: &Caller) -> Principal {
    Principal {
        user: c.user.name.clone(),
        group: c.user.group.clone(),
        role: c.role,
    }
}

/// The cached images the caller may see (the API's list, the web UI's Images page).
pub async fn images(reg: &Registry, c: &Caller) -> Result<Vec<ImageInfo>, ApiError> {
    Ok(gantry_registry::images::list(reg, &principal(c)).await?)
}

/// The server's answers: tokens checked as every other route checks them, users' groups, and
/// the administrator's cache bound.
struct Server(Arc<dyn Store>);

#[async_trait::async_trait]
impl Site for Server {
    async fn authenticate(&self, token: &str) -> Result<Principal, AuthError> {
        match crate::caller::authenticate(self.0.as_ref(), Some(&format!("Bearer {token}"))).await {
            Ok(c) => Ok(principal(&c)),
            Err(ApiError::Unauthorized | ApiError::TokenRefused(_)) => Err(AuthError::Refused),
            Err(e) => Err(AuthError::Failed(e.to_string())),
        }
    }

    async fn group_of(&self, user: &str) -> gantry_store::Result<Option<String>> {
        Ok(self.0.user_by_name(user).await?.map(|u| u.group))
    }

    /// An unreadable value counts as unset: the setting is checked when it is set, so only a
    /// hand-edited database holds one.
    async fn cache_limit(&self) -> gantry_store::Result<Option<u64>> {
        Ok(self
            .0
            .setting(CACHE_BYTES_KEY)
            .await?
            .and_then(|v| v.trim().parse::<u64>().ok()))
    }
}

impl From<ImagesError> for ApiError {
    fn from(e: ImagesError) -> Self {
        match e {
            ImagesError::NotFound(m) => ApiError::NotFound(m),
            ImagesError::Store(e) => e.into(),
            ImagesError::Failed(m) => ApiError::Internal(m),
        }
    }
}
