//! Persistent volumes and the storages they live on: list, create, show and delete volumes;
//! the storages a user may use, and an administrator's storages. Resolving a workflow's
//! volumes at submit is the area's (`crate::volumes`).

use gantry_api::v1::{AddStorage, CreateVolume, StorageInfo, VolumeInfo};
use gantry_intake::requests::{self, DEFAULT_STORAGE};
use gantry_store::{StorageRow, VolumeRow};
use uuid::Uuid;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::{now_ms, AppState};
use crate::volumes::{
    builtin, info, may_use, owner_of, owners, remove_persistent, resolved, usable_storage,
    visible_volume, volume_info,
};

pub async fn list(st: &AppState, c: &Caller) -> Result<Vec<VolumeInfo>, ApiError> {
    let rows = st.store.volumes(Some(&owners(c))).await?;
    Ok(rows.into_iter().map(|v| volume_info(v, vec![])).collect())
}

pub async fn create(st: &AppState, c: &Caller, req: CreateVolume) -> Result<VolumeInfo, ApiError> {
    let (scope, name, storage) = requests::create_volume(&req).map_err(ApiError::BadRequest)?;
    usable_storage(st.store.as_ref(), c, &storage).await?;
    let v = VolumeRow {
        id: Uuid::new_v4(),
        owner: owner_of(c, scope),
        scope,
        name,
        storage,
        created_by: c.user.name.clone(),
        created_at: now_ms(),
    };
    st.store.create_volume(&v, now_ms()).await?;
    Ok(volume_info(v, vec![]))
}

pub async fn show(
    st: &AppState,
    c: &Caller,
    scope: &str,
    name: &str,
) -> Result<VolumeInfo, ApiError> {
    let v = visible_volume(st.store.as_ref(), c, scope, name).await?;
    let by = st.store.volume_users(v.id).await?;
    Ok(volume_info(v, by))
}

/// Refused while a workflow not yet ended mounts it (the store checks, in the transaction
/// that removes it). The volume's files go with it: each pool that sees its storage is asked
/// to remove its directory.
pub async fn delete(st: &AppState, c: &Caller, scope: &str, name: &str) -> Result<(), ApiError> {
    let v = visible_volume(st.store.as_ref(), c, scope, name).await?;
    let s = usable_storage(st.store.as_ref(), c, &v.storage).await.ok();
    st.store.delete_volume(v.id, &c.user.name, now_ms()).await?;
    if let Some(s) = s {
        remove_persistent(st.store.as_ref(), &resolved(&v, &s))
            .await
            .map_err(|e| ApiError::Internal(format!("{e:#}")))?;
    }
    Ok(())
}

/// The storages the caller may make volumes on: the built-in one and those open to their
/// group. Others' are not listed, as they would not be found.
pub async fn usable_storages(st: &AppState, c: &Caller) -> Result<Vec<StorageInfo>, ApiError> {
    let mut out = vec![builtin()];
    for s in st.store.storages().await? {
        if may_use(c, &s) {
            out.push(info(s));
        }
    }
    Ok(out)
}

pub async fn list_storages(st: &AppState, c: &Caller) -> Result<Vec<StorageInfo>, ApiError> {
    c.require_admin()?;
    let mut out = vec![builtin()];
    out.extend(st.store.storages().await?.into_iter().map(info));
    Ok(out)
}

pub async fn add_storage(
    st: &AppState,
    c: &Caller,
    req: AddStorage,
) -> Result<StorageInfo, ApiError> {
    c.require_admin()?;
    let driver = requests::add_storage(&req).map_err(ApiError::BadRequest)?;
    let row = StorageRow {
        name: req.name,
        driver,
        path: req.path,
        pool: req.pool,
        groups: req.groups,
        created_by: c.user.name.clone(),
        created_at: now_ms(),
    };
    st.store.add_storage(&row, now_ms()).await?;
    Ok(info(row))
}

pub async fn delete_storage(st: &AppState, c: &Caller, name: &str) -> Result<(), ApiError> {
    c.require_admin()?;
    if name == DEFAULT_STORAGE {
        return Err(ApiError::BadRequest(
            "the built-in storage cannot be removed".into(),
        ));
    }
    st.store
        .delete_storage(name, &c.user.name, now_ms())
        .await
        .map_err(|e| match e {
            gantry_store::StoreError::NotFound => ApiError::NotFound(format!("no storage {name}")),
            e => e.into(),
        })?;
    Ok(())
}
