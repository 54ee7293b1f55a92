//! The API's extractors of who calls: a route names the kind of caller it takes, and a request
//! without one is refused before its handler runs.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use gantry_api::v1::Role;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// The caller of a request, from its `Authorization` header.
async fn caller_of(parts: &Parts, state: &AppState) -> Result<Caller, ApiError> {
    let header = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    crate::caller::authenticate(state.store.as_ref(), header).await
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
