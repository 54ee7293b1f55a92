use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use gantry_api::v1::{
    CreateUser, RotateToken, Setting, TokenInfo, TokenRotated, UserCreated, UserDetail, UserInfo,
};
use gantry_intake::requests::{token_expiry, NewUser, SettingDef, SETTINGS};
use gantry_store::{StoreError, TokenRow, User, UserRow};
use serde::Deserialize;
use uuid::Uuid;

use crate::auth::UserCaller;
use crate::caller::{hash_token, new_token};
use crate::clock::ts;
use crate::error::ApiError;
use crate::http::extract::JsonBody;
use crate::state::{now_ms, AppState};

pub async fn create_user(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    JsonBody(req): JsonBody<CreateUser>,
) -> Result<Json<UserCreated>, ApiError> {
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
    Ok(Json(UserCreated {
        name,
        group,
        role,
        token,
        expires_at: expires_at.map(ts),
    }))
}

fn setting_def(key: &str) -> Result<&'static SettingDef, ApiError> {
    gantry_intake::requests::setting_def(key).map_err(ApiError::NotFound)
}

pub async fn list_settings(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
) -> Result<Json<Vec<Setting>>, ApiError> {
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
    Ok(Json(out))
}

pub async fn get_setting(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(key): Path<String>,
) -> Result<Json<Setting>, ApiError> {
    c.require_admin()?;
    let (k, default, _) = setting_def(&key)?;
    let mut value = st.store.setting(&key).await?;
    // A pool's own value falls back to the cluster's, as the hold cap reads them.
    if value.is_none() && key != *k {
        value = st.store.setting(k).await?;
    }
    let value = value.unwrap_or_else(|| default.to_string());
    Ok(Json(Setting { key, value }))
}

pub async fn set_setting(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(key): Path<String>,
    JsonBody(body): JsonBody<Setting>,
) -> Result<Json<Setting>, ApiError> {
    c.require_admin()?;
    let def = setting_def(&key)?;
    gantry_intake::requests::check_setting(def, &key, &body).map_err(ApiError::BadRequest)?;
    st.store
        .set_setting(&key, &body.value, &c.user.name, now_ms())
        .await?;
    Ok(Json(body))
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

pub async fn list_users(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
) -> Result<Json<Vec<UserInfo>>, ApiError> {
    c.require_admin()?;
    Ok(Json(
        st.store.users().await?.into_iter().map(user_info).collect(),
    ))
}

pub async fn show_user(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
) -> Result<Json<UserDetail>, ApiError> {
    c.require_admin()?;
    let u = user_named(&st, &name).await?;
    let now = now_ms();
    let tokens = st.store.tokens(Some(&name)).await?;
    Ok(Json(UserDetail {
        user: user_info(u),
        tokens: tokens.into_iter().map(|t| token_info(t, now)).collect(),
    }))
}

async fn set_disabled(
    st: &AppState,
    c: &crate::caller::Caller,
    name: &str,
    disabled: bool,
) -> Result<Json<UserInfo>, ApiError> {
    c.require_admin()?;
    st.store
        .set_user_disabled(name, disabled, &c.user.name, now_ms())
        .await
        .map_err(not_found(format!("no user {name}")))?;
    Ok(Json(user_info(user_named(st, name).await?)))
}

/// Every token of the user stops at the next request: authentication reads `disabled_at`.
/// Their running workflows are left alone (the CLI says so).
pub async fn disable_user(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
) -> Result<Json<UserInfo>, ApiError> {
    set_disabled(&st, &c, &name, true).await
}

pub async fn enable_user(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
) -> Result<Json<UserInfo>, ApiError> {
    set_disabled(&st, &c, &name, false).await
}

#[derive(Debug, Deserialize)]
pub struct DeleteQuery {
    #[serde(default)]
    force: bool,
}

pub async fn delete_user(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(name): Path<String>,
    Query(q): Query<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    c.require_admin()?;
    st.store
        .delete_user(&name, q.force, &c.user.name, now_ms())
        .await
        .map_err(not_found(format!("no user {name}")))?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
pub struct TokensQuery {
    #[serde(default)]
    user: Option<String>,
}

pub async fn list_tokens(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Query(q): Query<TokensQuery>,
) -> Result<Json<Vec<TokenInfo>>, ApiError> {
    c.require_admin()?;
    if let Some(u) = &q.user {
        user_named(&st, u).await?;
    }
    let now = now_ms();
    let tokens = st.store.tokens(q.user.as_deref()).await?;
    Ok(Json(
        tokens.into_iter().map(|t| token_info(t, now)).collect(),
    ))
}

pub async fn revoke_token(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(id): Path<String>,
) -> Result<Json<TokenInfo>, ApiError> {
    c.require_admin()?;
    let t = st
        .store
        .revoke_token(&id, &c.user.name, now_ms())
        .await
        .map_err(not_found(format!("no token {id}")))?;
    Ok(Json(token_info(t, now_ms())))
}

pub async fn rotate_token(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<RotateToken>,
) -> Result<Json<TokenRotated>, ApiError> {
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
        .rotate_token(&id, &hash_token(&token), expires_at, &c.user.name, now)
        .await
        .map_err(not_found(format!("no token {id}")))?;
    Ok(Json(TokenRotated {
        info: token_info(t, now),
        token,
    }))
}
