//! Persistent endpoints' use cases: create, list, show, history, delete, tokens, and the
//! person's decision on a takeover (approve, reject), for any client with its caller. The
//! rules of who may see and manage an endpoint, the attach check at submit and the takeover
//! driver are the area's (`crate::endpoints`).

use gantry_api::v1::{
    CreateEndpoint, CreateEndpointToken, EndpointInfo, EndpointToken, EndpointTokenInfo,
    TakeoverInfo,
};
use gantry_core::takeover::Phase;
use gantry_intake::requests::{self, NewEndpoint};
use gantry_store::{EndpointChange, EndpointRow, EndpointTokenRow, TakeoverRow};

use crate::caller::{hash_token, new_token, Caller};
use crate::clock::ts;
use crate::endpoints::{
    confirm_changes, info, managed, may_call, may_manage, takeover_info, visible,
};
use crate::error::ApiError;
use crate::state::{now_ms, AppState};

/// An endpoint as the API shows it (the area's view, with this server's URLs and news).
async fn shown(st: &AppState, e: EndpointRow) -> Result<EndpointInfo, ApiError> {
    info(st.store.as_ref(), &st.config, &st.news, e).await
}

pub async fn create(
    st: &AppState,
    c: &Caller,
    req: CreateEndpoint,
) -> Result<EndpointInfo, ApiError> {
    let NewEndpoint {
        name,
        scope,
        mode,
        drain_timeout_ms,
        confirm,
    } = requests::create_endpoint(req).map_err(ApiError::BadRequest)?;
    let row = EndpointRow {
        name: name.clone(),
        owner: c.user.name.clone(),
        group: c.user.group.clone(),
        scope,
        mode,
        drain_timeout_ms,
        confirm,
        created_at: now_ms(),
        workflow_id: None,
        service: None,
        port: None,
        since: None,
    };
    match st.store.create_endpoint(&row, now_ms()).await {
        Ok(()) => {}
        Err(gantry_store::StoreError::Conflict(_)) => {
            return Err(name_taken(st, c, &name).await);
        }
        Err(e) => return Err(e.into()),
    }
    shown(st, st.store.endpoint(&name).await?).await
}

/// Why a name that is in use cannot be created again. Only someone who may see the endpoint
/// learns that it exists; anyone else gets the answer an invalid name gets (400, the same
/// shape), since a 409 would confirm that a name they cannot see is someone's endpoint.
async fn name_taken(st: &AppState, c: &Caller, name: &str) -> ApiError {
    match visible(st.store.as_ref(), c, name).await {
        Ok(e) if e.owner == c.user.name => {
            ApiError::Conflict(format!("you already have an endpoint {name}"))
        }
        Ok(e) => ApiError::Conflict(format!(
            "endpoint {name} already exists (owned by {})",
            e.owner
        )),
        Err(_) => ApiError::BadRequest(requests::unusable_endpoint_name(name)),
    }
}

pub async fn list(st: &AppState, c: &Caller) -> Result<Vec<EndpointInfo>, ApiError> {
    let mut out = vec![];
    for e in st.store.endpoints().await? {
        if may_call(&e, Some(c)) || may_manage(&e, c) {
            out.push(shown(st, e).await?);
        }
    }
    Ok(out)
}

pub async fn show(st: &AppState, c: &Caller, name: &str) -> Result<EndpointInfo, ApiError> {
    let e = visible(st.store.as_ref(), c, name).await?;
    shown(st, e).await
}

pub async fn history(st: &AppState, c: &Caller, name: &str) -> Result<Vec<TakeoverInfo>, ApiError> {
    let e = visible(st.store.as_ref(), c, name).await?;
    let all = st.store.takeovers(Some(&e.name), false).await?;
    Ok(all.into_iter().map(takeover_info).collect())
}

/// An endpoint the caller may manage, as the API shows it; `what` they want to do names the
/// refusal (one they may not even see is 404). What MCP shows before it asks the person.
pub async fn manageable(
    st: &AppState,
    c: &Caller,
    name: &str,
    what: &str,
) -> Result<EndpointInfo, ApiError> {
    let e = managed(st.store.as_ref(), c, name, what).await?;
    shown(st, e).await
}

pub async fn delete(st: &AppState, c: &Caller, name: &str) -> Result<(), ApiError> {
    let e = managed(st.store.as_ref(), c, name, "delete it").await?;
    st.store
        .delete_endpoint(&e.name, &c.user.name, now_ms())
        .await?;
    // Its URL ends now, not at the controller's next tick: whoever deleted it may call it next.
    st.gateway.remove_route(&e.name);
    st.wake_controller();
    Ok(())
}

pub async fn token(
    st: &AppState,
    c: &Caller,
    name: &str,
    req: CreateEndpointToken,
) -> Result<EndpointToken, ApiError> {
    let e = managed(st.store.as_ref(), c, name, "make tokens for it").await?;
    let now = now_ms();
    let default = crate::caller::default_expiry(st.store.as_ref()).await?;
    let expires_at = requests::token_expiry(req.expires.as_deref(), &default, now)
        .map_err(ApiError::BadRequest)?;
    let token = new_token();
    let id = st
        .store
        .add_endpoint_token(&e.name, &hash_token(&token), &c.user.name, expires_at, now)
        .await?;
    Ok(EndpointToken {
        endpoint: e.name,
        id,
        token,
        expires_at: expires_at.map(ts),
    })
}

fn endpoint_token_info(t: EndpointTokenRow, now: i64) -> EndpointTokenInfo {
    EndpointTokenInfo {
        expired: t.expires_at.is_some_and(|at| at <= now),
        id: t.id,
        endpoint: t.endpoint,
        created_by: t.created_by,
        created_at: ts(t.created_at),
        expires_at: t.expires_at.map(ts),
    }
}

/// The tokens of one endpoint, for those who may make them.
pub async fn tokens(
    st: &AppState,
    c: &Caller,
    name: &str,
) -> Result<Vec<EndpointTokenInfo>, ApiError> {
    let e = managed(st.store.as_ref(), c, name, "list its tokens").await?;
    let now = now_ms();
    let list = st.store.endpoint_tokens(Some(&e.name)).await?;
    Ok(list
        .into_iter()
        .map(|t| endpoint_token_info(t, now))
        .collect())
}

/// The tokens of every endpoint the caller may manage (all, for an administrator).
pub async fn all_tokens(st: &AppState, c: &Caller) -> Result<Vec<EndpointTokenInfo>, ApiError> {
    let mine: std::collections::HashSet<String> = st
        .store
        .endpoints()
        .await?
        .into_iter()
        .filter(|e| may_manage(e, c))
        .map(|e| e.name)
        .collect();
    let now = now_ms();
    let list = st.store.endpoint_tokens(None).await?;
    Ok(list
        .into_iter()
        .filter(|t| mine.contains(&t.endpoint))
        .map(|t| endpoint_token_info(t, now))
        .collect())
}

pub async fn revoke_token(
    st: &AppState,
    c: &Caller,
    id: &str,
) -> Result<EndpointTokenInfo, ApiError> {
    let missing = || ApiError::NotFound(format!("no endpoint token {id}"));
    let t = st
        .store
        .endpoint_token_by_id(id)
        .await
        .map_err(|_| missing())?;
    // A token of an endpoint the caller may not see is as unknown as one that never was.
    match managed(st.store.as_ref(), c, &t.endpoint, "revoke its tokens").await {
        Err(ApiError::NotFound(_)) => return Err(missing()),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    st.store
        .revoke_endpoint_token(id, &c.user.name, now_ms())
        .await
        .map_err(|_| missing())?;
    Ok(endpoint_token_info(t, now_ms()))
}

async fn pending(st: &AppState, c: &Caller, name: &str) -> Result<TakeoverRow, ApiError> {
    let e = managed(st.store.as_ref(), c, name, "decide its takeovers").await?;
    st.store
        .takeovers(Some(&e.name), true)
        .await?
        .into_iter()
        .find(|t| t.phase == Phase::AwaitingConfirmation)
        .ok_or_else(|| {
            ApiError::Conflict(format!(
                "endpoint {name} has no takeover awaiting confirmation"
            ))
        })
}

/// Approve a takeover waiting for a person; `via` records the channel (cli, api, web, mcp).
pub async fn approve(
    st: &AppState,
    c: &Caller,
    name: &str,
    via: &str,
) -> Result<TakeoverInfo, ApiError> {
    let t = pending(st, c, name).await?;
    st.store
        .apply_endpoints(&confirm_changes(&t, c, via, "approved"), now_ms())
        .await?;
    st.wake_controller();
    Ok(takeover_info(st.store.takeover(t.id).await?))
}

pub async fn reject(
    st: &AppState,
    c: &Caller,
    name: &str,
    via: &str,
) -> Result<TakeoverInfo, ApiError> {
    let t = pending(st, c, name).await?;
    st.store
        .apply_endpoints(
            &[EndpointChange::Phase {
                id: t.id,
                phase: Phase::Cancelled,
                reason: Some(format!("rejected by {} via {via}", c.user.name)),
                end: true,
            }],
            now_ms(),
        )
        .await?;
    // The new workflow existed to take the endpoint over: it stops.
    st.store
        .request_stop(t.to_workflow, &c.user.name, now_ms())
        .await?;
    st.wake_controller();
    Ok(takeover_info(st.store.takeover(t.id).await?))
}

/// Records a change of an endpoint's history that is no decision of its own (an event: who
/// confirmed what, through which client).
pub async fn record(st: &AppState, change: &EndpointChange) -> Result<(), ApiError> {
    Ok(st
        .store
        .apply_endpoints(std::slice::from_ref(change), now_ms())
        .await?)
}
