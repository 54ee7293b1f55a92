//! Volumes: the persistent volumes the user sees (their own and their group's), with the
//! storage each lives on. Read through the API's own handler, so it shows what `gantry volume
//! list` would.

use axum::extract::State;
use axum::response::Response;

use super::session::Web;
use super::{ok_page, when, Ctx, WebError, When};
use crate::state::AppState;

pub struct VolumeRow {
    pub uri: String,
    pub owner: String,
    pub storage: String,
    pub created_by: String,
    pub created: When,
}

#[derive(askama::Template)]
#[template(path = "web/volumes.html")]
struct VolumesPage {
    ctx: Ctx,
    volumes: Vec<VolumeRow>,
}

pub async fn list(State(st): State<AppState>, web: Web) -> Result<Response, WebError> {
    let list = crate::services::volumes::list(&st, &web.caller).await?;
    let volumes = list
        .into_iter()
        .map(|v| VolumeRow {
            uri: v.uri,
            owner: v.owner,
            storage: v.storage,
            created_by: v.created_by,
            created: when(v.created_at),
        })
        .collect();
    Ok(ok_page(&VolumesPage {
        ctx: web.ctx("volumes"),
        volumes,
    }))
}
