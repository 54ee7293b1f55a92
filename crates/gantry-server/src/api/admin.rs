use axum::extract::{Path, State};
use axum::Json;
use gantry_api::v1::{CreateUser, Role, Setting, UserCreated};
use gantry_store::User;
use uuid::Uuid;

use super::{ApiError, JsonBody};
use crate::auth::{hash_token, new_token, UserCaller};
use crate::state::{now_ms, AppState};

/// A site's cap on `policy.retry.attempts`, at most the file format's own.
pub const RETRY_MAX_ATTEMPTS_KEY: &str = "retry.max_attempts";

/// Settings an administrator may change, with their defaults.
pub const SETTINGS: &[(&str, &str, &str)] = &[
    (
        "builds.enabled",
        "true",
        "whether workflows may build images (true|false)",
    ),
    (
        "builds.network",
        "none",
        "the network of image build steps: none (only lo) or bridge (NAT'd on the node's bridge; never the host's)",
    ),
    (
        RETRY_MAX_ATTEMPTS_KEY,
        "100",
        "the most starts of one step a workflow may ask for (policy.retry.attempts), 1-100",
    ),
    (
        crate::registry::CACHE_BYTES_KEY,
        "10737418240",
        "the object cache's size limit in bytes; least recently used images are evicted beyond it",
    ),
];

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

pub async fn create_user(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    JsonBody(req): JsonBody<CreateUser>,
) -> Result<Json<UserCreated>, ApiError> {
    c.require_admin()?;
    if !valid_name(&req.name) {
        return Err(ApiError::BadRequest(format!(
            "user name {:?} is not valid: use 1-64 letters, digits, '-', '_' or '.'",
            req.name
        )));
    }
    let group = req.group.unwrap_or_else(|| req.name.clone());
    if !valid_name(&group) {
        return Err(ApiError::BadRequest(format!(
            "group name {group:?} is not valid"
        )));
    }
    let role = req.role.unwrap_or(Role::User);
    let token = new_token();
    let user = User {
        id: Uuid::new_v4(),
        name: req.name.clone(),
        group: group.clone(),
        role: role.as_str().into(),
    };
    st.store
        .create_user(&user, &hash_token(&token), now_ms())
        .await?;
    Ok(Json(UserCreated {
        name: req.name,
        group,
        role,
        token,
    }))
}

fn setting_def(key: &str) -> Result<&'static (&'static str, &'static str, &'static str), ApiError> {
    SETTINGS.iter().find(|(k, _, _)| *k == key).ok_or_else(|| {
        let known: Vec<&str> = SETTINGS.iter().map(|(k, _, _)| *k).collect();
        ApiError::NotFound(format!(
            "no setting {key:?}; known settings: {}",
            known.join(", ")
        ))
    })
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
    let value = st
        .store
        .setting(k)
        .await?
        .unwrap_or_else(|| default.to_string());
    Ok(Json(Setting { key, value }))
}

pub async fn set_setting(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    Path(key): Path<String>,
    JsonBody(body): JsonBody<Setting>,
) -> Result<Json<Setting>, ApiError> {
    c.require_admin()?;
    let (k, _, help) = setting_def(&key)?;
    if body.key != key {
        return Err(ApiError::BadRequest(format!(
            "the body names {:?} but the URL names {key:?}",
            body.key
        )));
    }
    if *k == "builds.network" && !matches!(body.value.as_str(), "none" | "bridge") {
        return Err(ApiError::BadRequest(format!(
            "builds.network must be none or bridge ({help}), not {:?}",
            body.value
        )));
    }
    if k.ends_with(".enabled") && !matches!(body.value.as_str(), "true" | "false") {
        return Err(ApiError::BadRequest(format!(
            "{key} must be true or false ({help}), not {:?}",
            body.value
        )));
    }
    if *k == crate::registry::CACHE_BYTES_KEY && !body.value.parse::<u64>().is_ok_and(|n| n > 0) {
        return Err(ApiError::BadRequest(format!(
            "{key} must be a positive whole number of bytes ({help}), not {:?}",
            body.value
        )));
    }
    let max = gantry_spec::MAX_RETRY_ATTEMPTS;
    if *k == RETRY_MAX_ATTEMPTS_KEY
        && !body
            .value
            .parse::<u32>()
            .is_ok_and(|n| (1..=max).contains(&n))
    {
        return Err(ApiError::BadRequest(format!(
            "{key} must be a whole number from 1 to {max} ({help}), not {:?}",
            body.value
        )));
    }
    st.store
        .set_setting(k, &body.value, &c.user.name, now_ms())
        .await?;
    Ok(Json(body))
}
