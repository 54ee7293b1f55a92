//! Administrators' use cases: users (create, list, show, disable, enable, delete), API tokens
//! (list, revoke, rotate) and cluster settings. Each checks that the caller is an
//! administrator first.

use gantry_api::v1::{
    ControllerInfo, CreateUser, RotateToken, Setting, TokenInfo, TokenRotated, UserCreated,
    UserDetail, UserInfo,
};
use gantry_intake::requests::{token_expiry, NewUser, SettingDef, SETTINGS};
use gantry_store::{StoreError, TokenRow, User, UserRow};
use uuid::Uuid;

use crate::caller::{hash_token, new_token, Caller};
use crate::clock::ts;
use crate::error::ApiError;
use crate::state::{now_ms, AppState};

pub async fn create_user(
    st: &AppState,
    c: &Caller,
    req: CreateUser,
) -> Result<UserCreated, ApiError> {
    c.require_admin()?;
    let now = now_ms();
    let expires_at = token_expiry(
        req.expires.as_deref(),
        &crate::caller::default_expiry(st.store.as_ref()).await?,
        now,
    )
    .map_err(ApiError::BadRequest)?;
    let NewUser { name, group, role } =
        gantry_intake::requests::create_user(req).map_err(ApiError::BadRequest)?;
    let token = new_token();
    let user = User {
        id: Uuid::new_v4(),
        name: name.clone(),
        group: group.clone(),
        role,
    };
    st.store
        .create_user(&user, &hash_token(&token), expires_at, now)
        .await?;
    Ok(UserCreated {
        name,
        group,
        role,
        token,
        expires_at: expires_at.map(ts),
    })
}

fn setting_def(key: &str) -> Result<&'static SettingDef, ApiError> {
    gantry_intake::requests::setting_def(key).map_err(ApiError::NotFound)
}

/// Which server runs the controller (the store's lease), for administrators.
pub async fn controller(st: &AppState, c: &Caller) -> Result<ControllerInfo, ApiError> {
    c.require_admin()?;
    let lease = st.store.lease(crate::lease::CONTROLLER).await?;
    Ok(ControllerInfo {
        holder: lease.as_ref().map(|l| l.holder.clone()),
        token: lease.as_ref().map(|l| l.token),
        since: lease.as_ref().map(|l| ts(l.acquired_at)),
        expires_at: lease.as_ref().map(|l| ts(l.expires_at)),
        this_server: st.lease.holder.clone(),
        this_server_leads: st.lease.held(),
    })
}

pub async fn list_settings(st: &AppState, c: &Caller) -> Result<Vec<Setting>, ApiError> {
    c.require_admin()?;
    let mut out = vec![];
    for (k, default, _) in SETTINGS {
        let value = st
            .store
            .setting(k)
            .await?
            .unwrap_or_else(|| default.to_string());
        out.push(Setting {
            key: k.to_string(),
            value,
        });
    }
    Ok(out)
}

pub async fn get_setting(st: &AppState, c: &Caller, key: &str) -> Result<Setting, ApiError> {
    c.require_admin()?;
    let (k, default, _) = setting_def(key)?;
    let mut value = st.store.setting(key).await?;
    // A pool's own value falls back to the cluster's, as the hold cap reads them.
    if value.is_none() && key != *k {
        value = st.store.setting(k).await?;
    }
    let value = value.unwrap_or_else(|| default.to_string());
    Ok(Setting {
        key: key.to_string(),
        value,
    })
}

pub async fn set_setting(
    st: &AppState,
    c: &Caller,
    key: &str,
    body: Setting,
) -> Result<Setting, ApiError> {
    c.require_admin()?;
    let def = setting_def(key)?;
    gantry_intake::requests::check_setting(def, key, &body).map_err(ApiError::BadRequest)?;
    st.store
        .set_setting(key, &body.value, &c.user.name, now_ms())
        .await?;
    Ok(body)
}

fn opt_ts(ms: Option<i64>) -> Option<time::OffsetDateTime> {
    ms.map(ts)
}

fn user_info(u: UserRow) -> UserInfo {
    UserInfo {
        name: u.user.name,
        group: u.user.group,
        role: u.user.role.as_str().into(),
        disabled: u.disabled_at.is_some(),
        created_at: ts(u.created_at),
        disabled_at: opt_ts(u.disabled_at),
        tokens: u.tokens,
    }
}

pub fn token_info(t: TokenRow, now: i64) -> TokenInfo {
    TokenInfo {
        expired: t.expires_at.is_some_and(|at| at <= now),
        id: t.id,
        user: t.user,
        role: t.role.as_str().into(),
        purpose: t.purpose,
        created_at: ts(t.created_at),
        expires_at: opt_ts(t.expires_at),
    }
}

async fn user_named(st: &AppState, name: &str) -> Result<UserRow, ApiError> {
    st.store
        .users()
        .await?
        .into_iter()
        .find(|u| u.user.name == name)
        .ok_or_else(|| ApiError::NotFound(format!("no user {name}")))
}

fn not_found(what: String) -> impl FnOnce(StoreError) -> ApiError {
    move |e| match e {
        StoreError::NotFound => ApiError::NotFound(what),
        e => e.into(),
    }
}

pub async fn list_users(st: &AppState, c: &Caller) -> Result<Vec<UserInfo>, ApiError> {
    c.require_admin()?;
    Ok(st.store.users().await?.into_iter().map(user_info).collect())
}

pub async fn show_user(st: &AppState, c: &Caller, name: &str) -> Result<UserDetail, ApiError> {
    c.require_admin()?;
    let u = user_named(st, name).await?;
    let now = now_ms();
    let tokens = st.store.tokens(Some(name)).await?;
    Ok(UserDetail {
        user: user_info(u),
        tokens: tokens.into_iter().map(|t| token_info(t, now)).collect(),
    })
}

async fn set_disabled(
    st: &AppState,
    c: &crate::caller::Caller,
    name: &str,
    disabled: bool,
) -> Result<UserInfo, ApiError> {
    c.require_admin()?;
    st.store
        .set_user_disabled(name, disabled, &c.user.name, now_ms())
        .await
        .map_err(not_found(format!("no user {name}")))?;
    Ok(user_info(user_named(st, name).await?))
}

/// Every token of the user stops at the next request: authentication reads `disabled_at`.
/// Their running workflows are left alone (the CLI says so).
pub async fn disable_user(st: &AppState, c: &Caller, name: &str) -> Result<UserInfo, ApiError> {
    set_disabled(st, c, name, true).await
}

pub async fn enable_user(st: &AppState, c: &Caller, name: &str) -> Result<UserInfo, ApiError> {
    set_disabled(st, c, name, false).await
}

pub async fn delete_user(
    st: &AppState,
    c: &Caller,
    name: &str,
    force: bool,
) -> Result<(), ApiError> {
    c.require_admin()?;
    st.store
        .delete_user(name, force, &c.user.name, now_ms())
        .await
        .map_err(not_found(format!("no user {name}")))?;
    Ok(())
}

pub async fn list_tokens(
    st: &AppState,
    c: &Caller,
    user: Option<&str>,
) -> Result<Vec<TokenInfo>, ApiError> {
    c.require_admin()?;
    if let Some(u) = user {
        user_named(st, u).await?;
    }
    let now = now_ms();
    let tokens = st.store.tokens(user).await?;
    Ok(tokens.into_iter().map(|t| token_info(t, now)).collect())
}

pub async fn revoke_token(st: &AppState, c: &Caller, id: &str) -> Result<TokenInfo, ApiError> {
    c.require_admin()?;
    let t = st
        .store
        .revoke_token(id, &c.user.name, now_ms())
        .await
        .map_err(not_found(format!("no token {id}")))?;
    Ok(token_info(t, now_ms()))
}

pub async fn rotate_token(
    st: &AppState,
    c: &Caller,
    id: &str,
    req: RotateToken,
) -> Result<TokenRotated, ApiError> {
    c.require_admin()?;
    let now = now_ms();
    let expires_at = token_expiry(
        req.expires.as_deref(),
        &crate::caller::default_expiry(st.store.as_ref()).await?,
        now,
    )
    .map_err(ApiError::BadRequest)?;
    let token = new_token();
    let t = st
        .store
        .rotate_token(id, &hash_token(&token), expires_at, &c.user.name, now)
        .await
        .map_err(not_found(format!("no token {id}")))?;
    Ok(TokenRotated {
        info: token_info(t, now),
        token,
    })
}
