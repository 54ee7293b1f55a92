//! Images: what the object cache holds that the user may see, by scope, with size and last
//! use; and the image builds of their recent workflows, with links to the builds' logs.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use gantry_registry::images::ImageInfo;
use gantry_registry::Registry;

use super::session::Web;
use super::{bytes, ok_page, segment, short, when, Ctx, WebError, When};
use crate::state::AppState;

/// Builds are looked for in this many of the newest workflows.
const RECENT: usize = 50;

pub struct ImageRow {
    /// The repository's name, and its tag (a build's 64-hex key) or digest, in full and
    /// shortened for the table.
    pub name: String,
    pub sep: &'static str,
    pub key: String,
    pub key_short: String,
    pub digest_short: String,
    pub digest: String,
    pub size: String,
    pub created: When,
    pub last_used: When,
}

pub struct Scope {
    /// `user/alice` or `group/physics`.
    pub name: String,
    pub images: Vec<ImageRow>,
    pub total: String,
}

pub struct BuildRow {
    pub image: String,
    pub workflow: String,
    pub workflow_url: String,
    pub status: String,
    pub node: String,
    pub reason: String,
    pub log: String,
    pub when: When,
}

#[derive(askama::Template)]
#[template(path = "web/images.html")]
struct ImagesPage {
    ctx: Ctx,
    scopes: Vec<Scope>,
    builds: Vec<BuildRow>,
}

fn image_row(i: &ImageInfo) -> ImageRow {
    ImageRow {
        name: i.name.clone(),
        sep: if i.tag.is_some() { ":" } else { "@" },
        key: i.tag.clone().unwrap_or(i.digest.clone()),
        key_short: shorten(i.tag.as_deref().unwrap_or(&i.digest)),
        digest_short: shorten(&i.digest),
        digest: i.digest.clone(),
        size: bytes(i.size.max(0) as u64),
        created: when(i.created_at),
        last_used: when(i.last_used_at),
    }
}

/// A build key or digest cut to its first 12 hex characters (as `docker images` shows them):
/// a 64-character key in a cell pushes the table past the screen. Short names stay whole.
fn shorten(key: &str) -> String {
    let (algo, hex) = match key.split_once(':') {
        Some((a, h)) => (Some(a), h),
        None => (None, key),
    };
    if hex.len() <= 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return key.to_string();
    }
    match algo {
        Some(a) => format!("{a}:{}…", &hex[..12]),
        None => format!("{}…", &hex[..12]),
    }
}

pub async fn list(
    State(st): State<AppState>,
    Extension(reg): Extension<Arc<Registry>>,
    web: Web,
) -> Result<Response, WebError> {
    let images = crate::registry::images(&reg, &web.caller).await?;
    let mut by_scope: BTreeMap<String, Vec<&ImageInfo>> = BTreeMap::new();
    for i in &images {
        by_scope
            .entry(format!("{}/{}", i.scope, i.owner))
            .or_default()
            .push(i);
    }
    let scopes = by_scope
        .into_iter()
        .map(|(name, mut imgs)| {
            imgs.sort_by_key(|i| std::cmp::Reverse(i.last_used_at));
            Scope {
                total: bytes(imgs.iter().map(|i| i.size.max(0) as u64).sum()),
                images: imgs.into_iter().map(image_row).collect(),
                name,
            }
        })
        .collect();

    let builds = crate::services::builds::recent(&st, &web.caller, RECENT)
        .await?
        .into_iter()
        .map(|b| BuildRow {
            image: b.image,
            workflow: format!("{} ({})", b.workflow_name, short(&b.workflow_id)),
            workflow_url: format!("/workflows/{}", b.workflow_id),
            status: b.status.to_string(),
            node: b.node.unwrap_or_default(),
            reason: b.reason.unwrap_or_default(),
            log: format!("/workflows/{}/logs/{}", b.workflow_id, segment(&b.job)),
            when: when(crate::clock::ts(b.at)),
        })
        .collect();
    Ok(ok_page(&ImagesPage {
        ctx: web.ctx("images"),
        scopes,
        builds,
    }))
}

#[cfg(test)]
mod tests {
    use super::shorten;

    #[test]
    fn long_keys_are_cut_to_twelve_characters() {
        let key = "ab".repeat(32);
        assert_eq!(shorten(&key), format!("{}…", &key[..12]));
        assert_eq!(
            shorten(&format!("sha256:{key}")),
            format!("sha256:{}…", &key[..12])
        );
        assert_eq!(shorten("latest"), "latest");
        assert_eq!(
            shorten("v1.2.3-with-a-long-name-here"),
            "v1.2.3-with-a-long-name-here"
        );
    }
}
