use axum::extract::{Path, State};
use axum::Json;
use gantry_api::v1::{CreateUser, Setting, UserCreated};
use gantry_intake::requests::{NewUser, SettingDef, SETTINGS};
use gantry_store::User;
use uuid::Uuid;

use super::{ApiError, JsonBody};
use crate::auth::{hash_token, new_token, UserCaller};
use crate::state::{now_ms, AppState};

pub async fn create_user(
    State(st): State<AppState>,
    UserCaller(c): UserCaller,
    JsonBody(req): JsonBody<CreateUser>,
) -> Result<Json<UserCreated>, ApiError> {
    c.require_admin()?;
    let NewUser { name, group, role } =
        gantry_intake::requests::create_user(req).map_err(ApiError::BadRequest)?;
    let token = new_token();
    let user = User {
        id: Uuid::new_v4(),
        name: name.clone(),
        group: group.clone(),
        role: role.as_str().into(),
    };
    st.store
        .create_user(&user, &hash_token(&token), now_ms())
        .await?;
    Ok(Json(UserCreated {
        name,
        group,
        role,
        token,
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
