//! The object cache's wiring: `gantry-registry` handed what it may use of the server (the store
//! as its image index, the token check, the clock, how files are made private), and its
//! answers read as the server's errors.

use std::sync::Arc;

use gantry_registry::images::{ImageInfo, ImagesError};
use gantry_registry::{
    AuthError, Authenticate, Clock, Context, ImageIndex, Principal, Private, Registry,
};
use gantry_store::Store;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

pub fn new(state: &AppState) -> Arc<Registry> {
    let index: Arc<dyn ImageIndex> = Arc::new(state.store.clone());
    Registry::new(Context {
        data_dir: state.config.data_dir.clone(),
        index,
        auth: Arc::new(Tokens(state.store.clone())),
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

/// Tokens, checked as every other route checks them.
struct Tokens(Arc<dyn Store>);

#[async_trait::async_trait]
impl Authenticate for Tokens {
    async fn authenticate(&self, token: &str) -> Result<Principal, AuthError> {
        match crate::caller::authenticate(self.0.as_ref(), Some(&format!("Bearer {token}"))).await {
            Ok(c) => Ok(principal(&c)),
            Err(ApiError::Unauthorized | ApiError::TokenRefused(_)) => Err(AuthError::Refused),
            Err(e) => Err(AuthError::Failed(e.to_string())),
        }
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
