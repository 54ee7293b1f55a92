//! Bearer tokens. Only a token's SHA-256 is stored; the token itself is shown once.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use gantry_api::v1::Role;
use gantry_store::{TokenRefusal, User, Visibility};
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::state::{now_ms, AppState};

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

pub async fn authenticate(state: &AppState, header: Option<&str>) -> Result<Caller, ApiError> {
    let token = header
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or(ApiError::Unauthorized)?;
    let hash = hash_token(token);
    match caller_by_hash(state, &hash).await {
        Err(ApiError::Unauthorized) => Err(refusal(state, &hash).await),
        other => other,
    }
}

/// Why a token was refused: only looked up once it has been, so valid requests pay nothing.
pub async fn refusal(state: &AppState, token_hash: &str) -> ApiError {
    match state.store.token_refusal(token_hash, now_ms()).await {
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
pub async fn caller_by_hash(state: &AppState, token_hash: &str) -> Result<Caller, ApiError> {
    let user = state
        .store
        .user_by_token(token_hash, now_ms())
        .await?
        .ok_or(ApiError::Unauthorized)?;
    let role = user.role;
    Ok(Caller { user, role })
}

/// The caller of a request, from its `Authorization` header.
async fn caller_of(parts: &Parts, state: &AppState) -> Result<Caller, ApiError> {
    let header = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    authenticate(state, header).await
}

/// A user (not an agent) calling the API.
pub struct UserCaller(pub Caller);

impl FromRequestParts<AppState> for UserCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = caller_of(parts, state).await?;
        Ok(UserCaller(caller.user_only()?))
    }
}

/// An agent (or an admin) connecting a node.
pub struct AgentCaller(pub Caller);

impl FromRequestParts<AppState> for AgentCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = caller_of(parts, state).await?;
        if !matches!(caller.role, Role::Agent | Role::Admin) {
            return Err(ApiError::Forbidden(
                "connecting a node needs an agent or admin token".into(),
            ));
        }
        Ok(AgentCaller(caller))
    }
}

/// Alertmanager (the webhook) and Prometheus (service discovery), or an administrator.
pub struct MonitoringCaller(pub Caller);

impl FromRequestParts<AppState> for MonitoringCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = caller_of(parts, state).await?;
        if !matches!(caller.role, Role::Monitoring | Role::Admin) {
            return Err(ApiError::Forbidden(
                "this needs the monitoring token".into(),
            ));
        }
        Ok(MonitoringCaller(caller))
    }
}
