//! Secrets: list the caller's, write one (sealed before it is stored), delete one. Sealing,
//! and revealing them into assignments, is the area's (`crate::secrets`).

use gantry_api::v1::{PutSecret, SecretInfo};
use gantry_intake::requests::{self, SecretScope};

use crate::caller::Caller;
use crate::error::ApiError;
use crate::secrets::{owner_for, seal};
use crate::state::{now_ms, AppState};

pub async fn list(st: &AppState, c: &Caller) -> Result<Vec<SecretInfo>, ApiError> {
    let owners = vec![
        (SecretScope::User, c.user.name.clone()),
        (SecretScope::Group, c.user.group.clone()),
        (SecretScope::Organization, String::new()),
    ];
    let rows = st.store.list_secrets(&owners).await?;
    Ok(rows
        .into_iter()
        .map(|r| SecretInfo {
            uri: format!("secret://{}/{}", r.scope, r.name),
            scope: r.scope.to_string(),
            owner: r.owner,
            name: r.name,
            kind: r.kind.to_string(),
            updated_by: r.updated_by,
            updated_at: crate::clock::ts(r.updated_at),
        })
        .collect())
}

pub async fn put(
    st: &AppState,
    c: &Caller,
    scope: &str,
    name: &str,
    body: PutSecret,
) -> Result<(), ApiError> {
    let (scope, kind) = requests::put_secret(scope, name, &body).map_err(ApiError::BadRequest)?;
    let key = owner_for(c, scope, name)?;
    let sealed = seal(&st.secret_key, &key, &body.value)?;
    st.store
        .put_secret(&key, kind, &sealed, &c.user.name, now_ms())
        .await?;
    Ok(())
}

pub async fn delete(st: &AppState, c: &Caller, scope: &str, name: &str) -> Result<(), ApiError> {
    let scope = requests::secret_scope(scope).map_err(ApiError::BadRequest)?;
    let key = owner_for(c, scope, name)?;
    if st.store.delete_secret(&key, &c.user.name, now_ms()).await? {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!(
            "no secret://{}/{name}",
            key.scope
        )))
    }
}
