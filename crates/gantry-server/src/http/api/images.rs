//! `/api/v1/images`: what the object cache holds that the caller may see, and removing it;
//! each route reads its request and calls `gantry_registry::images` with the caller.

use std::sync::Arc;

use axum::extract::{Path, Query};
use axum::{Extension, Json};
use gantry_registry::images::{self as svc, Deleted, ImageInfo, RepositoryDetail};
use gantry_registry::Registry;
use serde::Deserialize;

use crate::auth::UserCaller;
use crate::error::ApiError;
use crate::registry::principal;

#[derive(Debug, Deserialize)]
pub struct TagQuery {
    pub tag: Option<String>,
}

pub async fn list(
    Extension(reg): Extension<Arc<Registry>>,
    UserCaller(c): UserCaller,
) -> Result<Json<Vec<ImageInfo>>, ApiError> {
    crate::registry::images(&reg, &c).await.map(Json)
}

pub async fn show(
    Extension(reg): Extension<Arc<Registry>>,
    UserCaller(c): UserCaller,
    Path((scope, owner, name)): Path<(String, String, String)>,
) -> Result<Json<RepositoryDetail>, ApiError> {
    let detail = svc::show(&reg, &principal(&c), &scope, &owner, &name).await?;
    Ok(Json(detail))
}

pub async fn delete(
    Extension(reg): Extension<Arc<Registry>>,
    UserCaller(c): UserCaller,
    Path((scope, owner, name)): Path<(String, String, String)>,
    Query(q): Query<TagQuery>,
) -> Result<Json<Deleted>, ApiError> {
    let p = principal(&c);
    let deleted = svc::delete(&reg, &p, &scope, &owner, &name, q.tag.as_deref()).await?;
    Ok(Json(deleted))
}
