//! Who calls: bearer tokens (only a token's SHA-256 is stored; the token itself is shown
//! once), the caller they name, and what a caller may see. Free of HTTP: the API's extractors
//! (`auth.rs`), the web UI's sessions, the registry and the endpoint proxy all ask here.

use gantry_api::v1::Role;
use gantry_store::{EndpointScope, Store, TokenRefusal, User, Visibility};
use sha2::{Digest, Sha256};

use crate::clock::now_ms;
use crate::error::ApiError;

pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A new random token: 32 bytes from the OS, hex, with a prefix that secret scanners know.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    format!("gantry_{}", hex::encode(bytes))
}

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub user: User,
    pub role: Role,
}

impl Caller {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Which workflows this caller may see and control: their own and their group's.
    pub fn visibility(&self) -> Visibility {
        if self.is_admin() {
            Visibility::All
        } else {
            Visibility::UserOrGroup {
                user: self.user.name.clone(),
                group: self.user.group.clone(),
            }
        }
    }

    pub fn can_see(&self, owner: &str, group: &str) -> bool {
        self.is_admin() || self.user.name == owner || self.user.group == group
    }

    /// Agent and monitoring tokens exist for one purpose each; they get nothing else (the user
    /// API, the web UI).
    pub fn user_only(self) -> Result<Caller, ApiError> {
        match self.role {
            Role::Agent => Err(ApiError::Forbidden(
                "an agent token cannot use the user API".into(),
            )),
            Role::Monitoring => Err(ApiError::Forbidden(
                "a monitoring token cannot use the user API".into(),
            )),
            Role::User | Role::Admin => Ok(self),
        }
    }

    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(ApiError::Forbidden("this needs an administrator".into()))
        }
    }
}

pub async fn authenticate(store: &dyn Store, header: Option<&str>) -> Result<Caller, ApiError> {
    let token = header
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or(ApiError::Unauthorized)?;
    let hash = hash_token(token);
    match caller_by_hash(store, &hash).await {
        Err(ApiError::Unauthorized) => Err(refusal(store, &hash).await),
        other => other,
    }
}

/// Why a token was refused: only looked up once it has been, so valid requests pay nothing.
pub async fn refusal(store: &dyn Store, token_hash: &str) -> ApiError {
    match store.token_refusal(token_hash, now_ms()).await {
        Ok(Some(r)) => ApiError::TokenRefused(refusal_text(&r)),
        _ => ApiError::Unauthorized,
    }
}

pub fn refusal_text(r: &TokenRefusal) -> String {
    match r {
        TokenRefusal::Expired(at) => {
            format!("token expired on {}; ask for a new one", rfc3339(*at))
        }
        TokenRefusal::UserDisabled(name) => format!(
            "user {name} is disabled; an administrator can `gantry admin user enable {name}`"
        ),
    }
}

pub fn rfc3339(ms: i64) -> String {
    crate::clock::ts(ms)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| ms.to_string())
}

/// The caller a token's hash names (the web UI's session keeps the hash, never the token).
pub async fn caller_by_hash(store: &dyn Store, token_hash: &str) -> Result<Caller, ApiError> {
    let user = store
        .user_by_token(token_hash, now_ms())
        .await?
        .ok_or(ApiError::Unauthorized)?;
    let role = user.role;
    Ok(Caller { user, role })
}

/// The `tokens.default_expiry` setting, for tokens made without `--expires`.
pub async fn default_expiry(store: &dyn Store) -> Result<String, ApiError> {
    use gantry_intake::requests::{SETTINGS, TOKEN_EXPIRY_KEY};
    Ok(store.setting(TOKEN_EXPIRY_KEY).await?.unwrap_or_else(|| {
        SETTINGS
            .iter()
            .find(|(k, _, _)| *k == TOKEN_EXPIRY_KEY)
            .map(|(_, d, _)| d.to_string())
            .unwrap_or_default()
    }))
}

/// Whether a signed-in caller may call an endpoint of this scope, owner and group: the rule
/// both the API and the proxy's access check apply.
pub fn scope_admits(scope: EndpointScope, owner: &str, group: &str, c: &Caller) -> bool {
    match scope {
        EndpointScope::Public | EndpointScope::Organization => true,
        _ if c.is_admin() => true,
        EndpointScope::Group => c.user.group == group || c.user.name == owner,
        EndpointScope::User => c.user.name == owner,
    }
}
